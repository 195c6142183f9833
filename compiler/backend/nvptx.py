"""The NVPTX backend: a GPU kernel's loop IR -> PTX through LLVM's nvptx64 target (llvmlite), and ptxas.

    kernel = build(func, arch="sm_90")      # PTX text, launch shape, parameters, fault table
    assemble(kernel)                        # ptxas -arch=sm_90 (where installed): None, or the error text

``func`` is a kernel in the form ``compiler.ops.cuda`` schedules: its body is a nest of loops bound to
``blockIdx``/``threadIdx`` axes (``compiler.backend.nvptx_emit`` says what each construct becomes); its
parameters are device buffers. The module is verified and optimized with LLVM's O3 pipeline for the
``nvptx64-nvidia-cuda`` triple and the config's architecture and PTX ISA version, then printed as PTX. The
same IR runs on the reference interpreter (``compiler.interp``) on any machine, which is how the passes
that produced it are checked; the PTX runs where a GPU is (``compiler.backend.cuda_runtime``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm
from llvmlite import ir as ll

from compiler.backend.llvm import optimized
from compiler.backend.llvm_types import ErrorTable
from compiler.backend.nvptx_emit import KernelEmitter
from compiler.backend.nvptx_launch import Launch, launch_of
from compiler.errors import CodegenError
from compiler.ir import nodes as n
from compiler.ir.cuda import STATIC_SHARED_LIMIT

TRIPLE = "nvptx64-nvidia-cuda"


@dataclass(frozen=True)
class GpuKernel:
    """A compiled kernel: its PTX, the entry's name, the launch shape, the parameter buffers in argument
    order (a fault word follows them), the fault messages by code, the shared memory it uses and, of it,
    the dynamic shared memory its launch must pass (0 when all of it is static)."""

    name: str
    ptx: str
    arch: str
    launch: Launch
    params: tuple[n.Buffer, ...]
    errors: tuple[str, ...]
    shared_bytes: int
    dynamic_shared: int = 0

    def instructions(self) -> dict[str, int]:
        """PTX instructions by opcode (up to the first ``.``-suffix: ``wmma.mma``, ``ld``, ``bar``...),
        counted in the text: static counts, not executions."""
        return dict(sorted(ptx_opcodes(self.ptx).items()))


def ptx_opcodes(ptx: str) -> Counter:
    """Static counts of the instructions in ``ptx`` by opcode (``wmma.load``, ``wmma.mma``, ``ld``, ...)."""
    found: Counter = Counter()
    for line in ptx.splitlines():
        line = line.strip()
        if not line or line.startswith(("//", ".", "{", "}", "(", ")", "$")) or line.endswith(":"):
            continue
        op = re.sub(r"^@!?%?\w+\s+", "", line).split()[0].rstrip(";")   # drop a predicate guard
        parts = op.split(".")
        found[".".join(parts[:2]) if parts[0] == "wmma" else parts[0]] += 1
    return found


def target_machine(arch: str, ptx: int) -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=f"+ptx{ptx}", opt=3)


def build(func: n.PrimFunc, *, arch: str = "sm_90", ptx: int = 80,
          shared_limit: int = STATIC_SHARED_LIMIT) -> GpuKernel:
    """Compile ``func`` to one PTX kernel for ``arch`` (``sm_80``, ``sm_90``, ...) at PTX ISA version
    ``ptx`` (80 = 8.0). CodegenError names what cannot be compiled (an unbound loop around the whole body is
    fine: it runs in every thread), or a block's shared memory above ``shared_limit`` bytes (static up to
    ``STATIC_SHARED_LIMIT``, dynamic above: the config's limit per block)."""
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise CodegenError(f"nvptx: unknown architecture {arch!r}; expected sm_XX such as sm_80 or sm_90")
    launch = launch_of(func.body)
    if launch.threads > 1024:
        raise CodegenError(f"nvptx: {func.name} needs {launch.threads} threads per block "
                           f"({' x '.join(map(str, launch.block))}); a block has at most 1024")
    tm = target_machine(arch, ptx)
    module = ll.Module(name=func.name)
    module.triple = TRIPLE
    module.data_layout = str(tm.target_data)
    errors = ErrorTable()
    emitter = KernelEmitter(module, func.name, list(func.params), errors, launch)
    fn = emitter.emit(func.body)
    # the block's size, so that ptxas keeps each thread's registers within what a block of it may have
    bounds = module.add_named_metadata("nvvm.annotations")
    for axis, extent in zip("xyz", launch.block, strict=True):
        bounds.add(module.add_metadata([fn, f"maxntid{axis}", ll.Constant(ll.IntType(32), extent)]))
    if emitter.shared_bytes > shared_limit:
        raise CodegenError(f"nvptx: {func.name} allocates {emitter.shared_bytes} bytes of shared memory; a "
                           f"block may have {shared_limit}")
    text = tm.emit_assembly(optimized(module, tm, func.name, "nvptx", vectorize=False))
    return GpuKernel(func.name, text, arch, launch, tuple(func.params), tuple(errors.messages),
                     emitter.shared_bytes, emitter.shared_bytes if emitter.dynamic is not None else 0)


def ptxas() -> str | None:
    """The path of NVIDIA's PTX assembler, where installed (CUDA toolkit, or the nvidia-cuda-nvcc wheel)."""
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import nvidia.cuda_nvcc as wheel  # pip install nvidia-cuda-nvcc-cu12 (the ptxas optional extra)
    except ImportError:
        return None
    for base in getattr(wheel, "__path__", []):
        candidate = Path(base) / "bin" / "ptxas"
        if candidate.exists():
            return str(candidate)
    return None


def assemble(kernel: GpuKernel, ptxas_path: str | None = None) -> str | None:
    """Assemble ``kernel``'s PTX with ptxas for its architecture: None when it assembles, else ptxas's
    message. CodegenError when no ptxas is installed."""
    tool = ptxas_path or ptxas()
    if tool is None:
        raise CodegenError("nvptx: no ptxas here (install the CUDA toolkit, or pip install -e \".[ptxas]\")")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{kernel.name}.ptx"
        src.write_text(kernel.ptx)
        done = subprocess.run([tool, f"-arch={kernel.arch}", "-o", str(Path(tmp) / "out.cubin"), str(src)],
                              capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return (done.stderr or done.stdout).strip() or f"ptxas exited with {done.returncode}"
    return None
