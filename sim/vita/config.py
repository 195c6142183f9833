"""VITA machine configurations: one frozen dataclass, loaded and validated from TOML in one place.

    load_config("vta-default")        # a built-in config from sim/vita/configs/
    load_config("path/to/mine.toml")  # a config of your own
    VitaConfig.from_file(path)

A config names the ISA parameters (buffer sizes and GEMM shape, passed to
``isa.load_isa("vita", params=...)``) and the timing parameters the ISA leaves to the machine: clock, DRAM
latency and bandwidth, queue depths and pipeline depths. Every default in the shipped files states its
source or its reasoning in a comment.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType

import isa
from sim.core.errors import SimConfigError

CONFIGS_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True, slots=True)
class VitaConfig:
    """Everything the VITA simulator needs to know about one machine (units are in the names)."""

    name: str
    summary: str
    isa_params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    clock_mhz: float = 100.0
    dram_latency_cycles: int = 64
    dram_bytes_per_cycle: int = 8
    insn_queue_depth: int = 512
    cmd_queue_depth: int = 512
    dep_queue_depth: int = 8
    fetch_cycles_per_insn: int = 1
    gemm_pipeline_cycles: int = 4
    gemm_cycles_per_uop: int = 1
    alu_pipeline_cycles: int = 4
    alu_cycles_per_uop: int = 2
    source: str = "<config>"

    @classmethod
    def from_file(cls, path: str | Path) -> VitaConfig:
        """Load and validate the config at ``path``; ``SimConfigError`` names the file and key."""
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise SimConfigError(f"cannot read the config: {e.strerror}", file=str(path)) from None
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, file: str = "<config>") -> VitaConfig:
        """Load and validate a config held in ``text`` (``file`` is the name errors use)."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise SimConfigError(f"not valid TOML: {e}", file=file) from None
        known = {f.name for f in fields(cls)} - {"source"}
        for key in doc:
            if key not in known:
                raise SimConfigError(f"unknown key; keys are {', '.join(sorted(known))}", file=file, key=key)
        for key in ("name", "summary"):
            if not isinstance(doc.get(key), str):
                raise SimConfigError("a string is required", file=file, key=key)
        params = doc.get("isa_params", {})
        if not isinstance(params, dict):
            raise SimConfigError("must be a table of ISA parameter = integer", file=file, key="isa_params")
        values = {}
        for f in fields(cls):
            if f.name in ("name", "summary", "isa_params", "source") or f.name not in doc:
                continue
            v = doc[f.name]
            want = float if f.name == "clock_mhz" else int
            wrong_type = isinstance(v, bool) or not isinstance(v, want | int)
            if wrong_type:
                kind = "a number" if want is float else "an integer"
                raise SimConfigError(f"expected {kind}, but got {v!r}", file=file, key=f.name)
            if v <= 0:
                raise SimConfigError(f"must be positive, but got {v!r}", file=file, key=f.name)
            values[f.name] = want(v)
        config = cls(doc["name"], doc["summary"], MappingProxyType(dict(params)), source=file, **values)
        config.spec()  # the ISA parameters must give a loadable ISA
        return config

    def spec(self) -> isa.ISA:
        """The VITA ISA for this machine's parameters."""
        try:
            return isa.load_isa("vita", params=dict(self.isa_params))
        except isa.ISASpecError as e:
            raise SimConfigError(f"the ISA parameters do not give a valid VITA ISA: {e}", file=self.source,
                                 key="isa_params") from None

    @property
    def peak_macs_per_cycle(self) -> int:
        """BATCH x BLOCK_IN x BLOCK_OUT: the GEMM core's multiply-accumulates per cycle."""
        p = self.spec().params
        return p["BATCH"] * p["BLOCK_IN"] * p["BLOCK_OUT"]


def builtin_configs() -> list[str]:
    """Names of the configs shipped in sim/vita/configs/."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.toml"))


def load_config(name_or_path: str | Path) -> VitaConfig:
    """A built-in config by name, or the config file at a path."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return VitaConfig.from_file(p)
    if str(name_or_path) in builtin_configs():
        return VitaConfig.from_file(CONFIGS_DIR / f"{name_or_path}.toml")
    raise SimConfigError(f"no built-in config '{name_or_path}' and no such file; built-in configs are "
                         f"{', '.join(builtin_configs())}", file=str(name_or_path))
