"""VITA machine configurations: one frozen dataclass, loaded and validated from TOML in one place.

    load_config("vta-default")        # a built-in config from sim/vita/configs/
    load_config("path/to/mine.toml")  # a config of your own
    VitaConfig.from_file(path)

A config names the ISA parameters (buffer sizes, GEMM shape, DRAM bandwidth, pipeline fills: applied to the
spec with ``spec_for``), optionally its spec file, and what the spec does not describe: the clock, the DRAM
latency, the queue depths, fetch's rate and the work budget (``uop_budget``). Each value lives in one place:
what an instruction costs is the spec's timing, never a config field. Every default in the shipped files
states its source or its reasoning in a comment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import isa
from sim.core.config import TomlConfig, config_names, load_named

CONFIGS_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True, slots=True)
class VitaConfig(TomlConfig):
    """Everything the VITA simulator needs to know about one machine (units are in the names)."""

    name: str
    summary: str
    isa_params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    spec: str = ""  # the spec file the machine uses, relative to this file ("": the built-in one)
    energy_table: str = ""  # the energy table (sim/core/tables) pricing its actions ("": the default)
    # a key a config file leaves out takes its value from here, which is vta-default.toml's (a test keeps the
    # two the same: one set of defaults)
    clock_mhz: float = 100.0
    dram_latency_cycles: int = 20
    insn_queue_depth: int = 512
    cmd_queue_depth: int = 512
    dep_queue_depth: int = 8
    fetch_cycles_per_insn: int = 1
    uop_budget: int = 50_000_000   # micro-ops a program's GEMM/ALU instructions may run in all
    technology_nm: float = 45.0   # the process node the energy table is scaled to (45: Horowitz's own)
    source: str = "<config>"
    FAMILY = "vita"
    # keys of earlier configs whose values now live in the spec, and where
    MOVED = {
        "dram_bytes_per_cycle": "[isa_params] DRAM_BYTES_PER_CYCLE",
        "gemm_pipeline_cycles": "[isa_params] GEMM_PIPELINE_CYCLES",
        "alu_pipeline_cycles": "[isa_params] ALU_PIPELINE_CYCLES",
        "gemm_cycles_per_uop": "the GEMM instructions' timing in the spec",
        "alu_cycles_per_uop": "the ALU instructions' timing in the spec",
    }


def peak_macs_per_cycle(spec: isa.ISA) -> int:
    """BATCH x BLOCK_IN x BLOCK_OUT: the GEMM core's multiply-accumulates per cycle."""
    p = spec.params
    return p["BATCH"] * p["BLOCK_IN"] * p["BLOCK_OUT"]


def builtin_configs() -> list[str]:
    """Names of the configs shipped in sim/vita/configs/."""
    return config_names(CONFIGS_DIR)


def load_config(name_or_path: str | Path) -> VitaConfig:
    """A built-in config by name, or the config file at a path."""
    return load_named(VitaConfig, CONFIGS_DIR, name_or_path)


# Programs address DRAM relative to where their image lies; by default it lies on the first page VTA's
# runtime can hand out (never physical page 0). ``tandem sim vita --dram-base`` moves it.
PAGE_BYTES = 4096
DEFAULT_DRAM_BASE = PAGE_BYTES


def check_dram_base(base: int, size: int, spec: isa.ISA) -> str | None:
    """Why a DRAM image of ``size`` bytes cannot lie at physical address ``base``, or None: the base is a page
    boundary other than page 0 (VTA's runtime never hands out physical page 0), and the image ends inside the
    spec's DRAM space (the 32-bit physical address space)."""
    space = spec.spaces["DRAM"].bytes
    if base < PAGE_BYTES or base % PAGE_BYTES:
        return (f"the DRAM base must be a multiple of the {PAGE_BYTES}-byte page other than 0 (VTA's runtime "
                f"never hands out physical page 0), but got {base:#x}")
    if base + size > space:
        return (f"a DRAM image of {size:,} bytes at {base:#x} ends at {base + size:#x}, past the "
                f"{space:#x} bytes of the physical address space; give a lower base or a smaller image")
    return None
