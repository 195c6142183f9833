"""The machine config of the ``cuda`` target: which NVIDIA GPU the NVPTX backend compiles for.

    load_config("sm90")         # built-in: tandem/flows/cuda_configs/sm90.toml (H100), sm80.toml (A100)
    load_config("my-gpu.toml")  # a file of your own

A GPU is real, not simulated: the config says what the compiler needs (the architecture and PTX ISA version
LLVM targets, a block's shared memory) and what the tuning model assumes (multiprocessors, warps
resident per multiprocessor); what the device itself reports (name, clock) is read at run time. The spec
(isa/specs/cuda.toml, or the file the config names) says which Tensor Core instructions there are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from sim.core.config import TomlConfig, load_named

CONFIGS_DIR = Path(__file__).parent / "cuda_configs"


@dataclass(frozen=True)
class CudaConfig(TomlConfig):
    """An NVIDIA GPU: compute capability (90 = sm_90), PTX ISA version (80 = 8.0), shared memory per block
    and per multiprocessor (bytes), multiprocessors, and the architecture-specific features it has
    (``sm_90a``: an instruction of the spec that names it in its ``features`` is used only here, and its
    kernels are compiled for that architecture)."""

    FAMILY = "cuda"

    name: str
    summary: str
    isa_params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    compute_capability: int = 90
    ptx_version: int = 80
    shared_bytes: int = 232448
    sm_shared_bytes: int = 233472
    sm_count: int = 132
    features: tuple[str, ...] = ()
    spec: str = ""
    energy_table: str = ""
    source: str = "<builtin>"

    @property
    def arch(self) -> str:
        """LLVM's and ptxas's name of the architecture: sm_90."""
        return f"sm_{self.compute_capability}"

    def arch_for(self, features: tuple[tuple[str, ...], ...]) -> str:
        """The architecture a kernel using an instruction that needs ``features`` is compiled for: the
        architecture-specific one (``sm_90a``) the instruction names, else the plain one."""
        named = [f for group in features for f in group if f.startswith("sm_")]
        return named[0] if named else self.arch


def load_config(name_or_path: str | Path) -> CudaConfig:
    """A built-in config by name, or the config file at a path."""
    return load_named(CudaConfig, CONFIGS_DIR, name_or_path)
