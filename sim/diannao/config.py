"""DianNao machine configurations: one frozen dataclass, loaded and validated from TOML in one place.

    load_config("default")        # a built-in config from sim/diannao/configs/
    load_config("mine.toml")      # a config of your own

The ISA spec (isa/specs/diannao.toml, or the file the config names in ``spec``) already fixes the card's
shape, capacities, tensor-unit throughput and the latencies of each instruction; ``isa_params`` overrides
them (``spec_for`` applies them to a spec value). This dataclass adds what only the
machine knows: its clock, the bandwidth shared by all cores (GMEM) and by a cluster's cores (SMEM), and the
instruction budget that turns a runaway loop into an error. Every value in the shipped files states its
source or assumption.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import isa
from sim.core.config import TomlConfig, config_names, load_named

CONFIGS_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True, slots=True)
class DiannaoConfig(TomlConfig):
    """Everything the DianNao simulator needs to know about one card (units are in the names)."""

    name: str
    summary: str
    isa_params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    spec: str = ""  # the spec file the card uses, relative to this file ("": the built-in one)
    energy_table: str = ""  # the energy table (sim/core/tables) pricing its actions ("": the default)
    clock_mhz: float = 1000.0
    gmem_bytes_per_cycle: int = 64
    smem_bytes_per_cycle: int = 128
    instruction_budget: int = 100_000_000
    technology_nm: float = 45.0   # the process node the energy table is scaled to (45: Horowitz's own)
    source: str = "<config>"
    FAMILY = "diannao"


def card_cores(spec: isa.ISA) -> int:
    """Cores on the card ``spec`` describes (clusters x cores per cluster)."""
    p = spec.params
    return p["CLUSTERS"] * p["CORES_PER_CLUSTER"]


def builtin_configs() -> list[str]:
    """Names of the configs shipped in sim/diannao/configs/."""
    return config_names(CONFIGS_DIR)


def load_config(name_or_path: str | Path) -> DiannaoConfig:
    """A built-in config by name, or the config file at a path."""
    return load_named(DiannaoConfig, CONFIGS_DIR, name_or_path)
