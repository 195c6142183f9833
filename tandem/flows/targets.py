"""The edge where names and files become a ``Target``: the one place a built-in spec is looked up by name.

    load_target("vita")                                       # VITA with vta-default and the built-in spec
    load_target("vita", config="tvm-paper", spec="mine.toml")  # a config by name, a spec file of your own
    load_target("diannao", config=DiannaoConfig(...))          # config values built in Python
    load_target("arm")                                         # AArch64 with the built-in arm spec (sdot)
    load_target("cuda", config="sm80")                         # an A100 with the built-in cuda spec (wmma)

The spec is chosen in this order: ``spec`` (a file path or an ``isa.ISA``), the file the machine config names
(``spec = "..."`` in its TOML), the built-in spec of the target's ISA family. The machine config's
``isa_params`` are then applied to it, so the compiler's passes and the simulator receive one spec value.
A spec of another family (a diannao spec for the vita target) is refused with the file named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import isa
from compiler.target import CROSS_TRIPLES, KINDS, Target
from sim.diannao import config as diannao_config
from sim.vita import config as vita_config
from tandem.flows import cuda_config
from tandem.flows.spec_cache import builtin_spec

#: For each target kind with a machine config: its config module and its default config's name (the GPU's
#: is real, not simulated: its config says what the compiler targets).
_MACHINES = {"vita": (vita_config, "vta-default"), "diannao": (diannao_config, "default"),
             "cuda": (cuda_config, "sm90")}


class TargetError(ValueError):
    """A target, config or spec that cannot be resolved (the message names the file or the name)."""


def load_config(kind: str, config: str | Path | Any | None = None) -> Any:
    """The machine config of a simulated target: a config object as given, a built-in name, or a file."""
    module, default = _MACHINES[kind]
    if config is None:
        config = default
    if isinstance(config, str | Path):
        return module.load_config(config)
    return config


def load_spec(kind: str, spec: str | Path | isa.ISA | None = None, config: Any = None,
              params: dict[str, int] | None = None) -> isa.ISA:
    """The spec for target ``kind``: ``spec``, else the config's own spec file, else the built-in spec of the
    kind's ISA family; read with ``params`` applied where they apply (so that a config's parameters cost one
    reading of the file, not two), else without them (``spec_for`` then says what is wrong with them)."""
    if isinstance(spec, isa.ISA):
        return _of_family(spec, kind)

    def read(given: dict[str, int] | None) -> isa.ISA:
        if spec is not None:
            return isa.load_spec_file(spec, given)
        if config is not None and config.spec_path is not None:
            return isa.load_spec_file(config.spec_path, given)
        return builtin_spec(KINDS[kind], given)

    base = None
    if params:
        try:
            base = read(params)
        except isa.ISASpecError:
            base = None
    if base is None or base.name != KINDS[kind]:
        base = read(None)
    return _of_family(base, kind)


def _of_family(base: isa.ISA, kind: str) -> isa.ISA:
    """``base``, a spec of target ``kind``'s ISA family (TargetError naming the spec's file otherwise)."""
    family = KINDS[kind]
    if base.name != family:
        raise TargetError(f"{base.source}: target '{kind}' needs a spec of the '{family}' ISA family, but "
                          f"this spec is '{base.name}'")
    return base


def load_target(kind: str, config: str | Path | Any | None = None,
                spec: str | Path | isa.ISA | None = None) -> Target:
    """The Target for ``kind`` (vita, diannao, cpu, arm or reference) with ``config`` and ``spec``
    resolved."""
    if kind not in KINDS:
        raise TargetError(f"unknown target '{kind}'; targets are {', '.join(sorted(KINDS))}")
    if KINDS[kind] is None:
        return Target(kind)
    if kind not in _MACHINES:
        if config is not None:
            where = f"is compiled for {CROSS_TRIPLES[kind]}" if kind in CROSS_TRIPLES else \
                "runs on this machine"
            raise TargetError(f"target '{kind}' {where} and takes no --config")
        return Target(kind, load_spec(kind, spec))
    cfg = load_config(kind, config)
    return Target(kind, cfg.spec_for(load_spec(kind, spec, cfg, dict(cfg.isa_params))), cfg)


def as_target(kind: str, given: Target | str | Path | Any | None = None) -> Target:
    """``given`` as a Target of ``kind``: a Target as it is, else a config (object, name or file) resolved
    with the built-in spec, or the config's own spec file, by ``load_target``."""
    if isinstance(given, Target):
        if given.kind != kind:
            raise TargetError(f"expected a '{kind}' target, but got '{given.kind}'")
        return given
    return load_target(kind, config=given)

