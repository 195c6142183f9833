"""The target: the one value that says what a kernel is compiled for, from the command line to the simulator.

    Target("vita", spec, config)     # spec: the VITA ISA with the config's parameters applied

A ``Target`` holds the kind of machine (which names its pass pipeline in ``compiler.pipeline``, its schedules
in ``compiler.ops.<kind>`` (arm shares the CPU's, ``compiler.ops.cpu``) and its emitter in
``compiler.backend``), the ISA spec those consume, and the machine config of the simulator that runs the
result (``None`` for the CPU, which is real, and for ARM, which LLVM compiles for ``triple``). Only the edge
of the system (``tandem/``: the command line, the Python API, a sweep) turns names and files into a Target;
every pass, schedule and emitter receives the spec as a value from it, so a changed buffer size, GEMM shape
or instruction reaches all of them at once. Nothing here looks a spec up by name.

Non-goals: loading files (``tandem.flows.targets`` does that) and knowing a simulator's config type (compiler/
never imports sim/; ``config`` is carried for the driver, which hands it to the simulator).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import isa
from compiler.errors import LoweringError

#: The kinds of target the compiler has a pipeline for, with the ISA family each one's spec must be.
KINDS: dict[str, str | None] = {"reference": None, "diannao": "diannao", "vita": "vita", "cpu": "x86",
                                "arm": "arm", "cuda": "cuda"}
#: The kinds LLVM compiles for another machine than this one, with the LLVM target triple of that machine
#: (``cpu`` is this machine: the host's triple). The arm kind is UNIT's ARM DOT target (Sec. III.A): object
#: code for AArch64, which this x86 host runs only under an emulator (``compiler.backend.llvm_cross``).
CROSS_TRIPLES: dict[str, str] = {"arm": "aarch64-unknown-linux-gnu"}


@dataclass(frozen=True)
class Target:
    """What a kernel is compiled for: ``kind`` (the pipeline), its ISA ``spec`` and the machine ``config``."""

    kind: str
    spec: isa.ISA | None = None
    config: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise LoweringError(f"unknown target {self.kind!r}; expected one of {', '.join(sorted(KINDS))}")
        family = KINDS[self.kind]
        if family is None:
            return
        if not isinstance(self.spec, isa.ISA):
            raise LoweringError(f"target {self.kind!r} needs its ISA spec (an isa.ISA of the '{family}' "
                                f"family), but got {self.spec!r}")
        if self.spec.name != family:
            raise LoweringError(f"target {self.kind!r} compiles for the '{family}' ISA family, but the spec "
                                f"{self.spec.source} is '{self.spec.name}'")

    @property
    def triple(self) -> str | None:
        """The LLVM target triple code is generated for, or None for this machine (or no LLVM at all)."""
        return CROSS_TRIPLES.get(self.kind)

    def __str__(self) -> str:
        if self.spec is None:
            return self.kind
        extra = ", ".join(f"{k}={v}" for k, v in sorted(self.spec.overrides.items()))
        return f"{self.kind} ({self.spec.source}{'; ' + extra if extra else ''})"
