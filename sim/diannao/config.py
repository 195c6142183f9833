"""DianNao machine configurations: one frozen dataclass, loaded and validated from TOML in one place.

    load_config("default")        # a built-in config from sim/diannao/configs/
    load_config("mine.toml")      # a config of your own

The ISA spec (isa/specs/diannao.toml) already fixes the card's shape, capacities, tensor-unit throughput
and the latencies of each instruction; ``isa_params`` overrides them. This dataclass adds what only the
machine knows: its clock, the bandwidth shared by all cores (GMEM) and by a cluster's cores (SMEM), and the
instruction budget that turns a runaway loop into an error. Every value in the shipped files states its
source or assumption.
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
class DiannaoConfig:
    """Everything the DianNao simulator needs to know about one card (units are in the names)."""

    name: str
    summary: str
    isa_params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    clock_mhz: float = 1000.0
    gmem_bytes_per_cycle: int = 64
    smem_bytes_per_cycle: int = 128
    instruction_budget: int = 100_000_000
    source: str = "<config>"

    @classmethod
    def from_file(cls, path: str | Path) -> DiannaoConfig:
        """Load and validate the config at ``path``; ``SimConfigError`` names the file and key."""
        return cls.from_text(read_config_text(path), str(path))

    @classmethod
    def from_text(cls, text: str, file: str = "<config>") -> DiannaoConfig:
        """Load and validate a config held in ``text`` (``file`` is the name errors use)."""
        config = parse_config(cls, text, file)
        config.spec()  # the ISA parameters must give a loadable ISA
        return config

    def spec(self) -> isa.ISA:
        """The DianNao ISA for this card's parameters."""
        try:
            return isa.load_isa("diannao", params=dict(self.isa_params))
        except isa.ISASpecError as e:
            raise SimConfigError(f"the ISA parameters do not give a valid DianNao ISA: {e}", file=self.source,
                                 key="isa_params") from None

    @property
    def cores(self) -> int:
        """Cores on the card (clusters x cores per cluster)."""
        p = self.spec().params
        return p["CLUSTERS"] * p["CORES_PER_CLUSTER"]


def builtin_configs() -> list[str]:
    """Names of the configs shipped in sim/diannao/configs/."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.toml"))


def load_config(name_or_path: str | Path) -> DiannaoConfig:
    """A built-in config by name, or the config file at a path."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return DiannaoConfig.from_file(p)
    if str(name_or_path) in builtin_configs():
        return DiannaoConfig.from_file(CONFIGS_DIR / f"{name_or_path}.toml")
    raise SimConfigError(f"no built-in config '{name_or_path}' and no such file; built-in configs are "
                         f"{', '.join(builtin_configs())}", file=str(name_or_path))
