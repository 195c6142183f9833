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

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import isa
from sim.core.config import parse_config, read_config_text
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
        return cls.from_text(read_config_text(path), str(path))

    @classmethod
    def from_text(cls, text: str, file: str = "<config>") -> VitaConfig:
        """Load and validate a config held in ``text`` (``file`` is the name errors use)."""
        config = parse_config(cls, text, file)
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
