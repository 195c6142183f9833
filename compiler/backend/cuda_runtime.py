"""Running PTX kernels on an NVIDIA GPU through the CUDA driver (CuPy's module loader), where there is one.

    reason = unavailable()                  # None on a machine with a GPU and CuPy, else why not
    outputs = run(kernel, arrays)           # copy in, launch, copy every parameter back, check faults
    seconds = time(kernel, arrays)          # CUDA events around repeated launches

A kernel from ``compiler.backend.nvptx`` takes its parameter buffers (in order) and a fault word; a thread
that faults writes the fault's code there, and ``run`` raises ``KernelFault`` with the message. The driver
JIT-compiles the PTX for the device (its architecture must be at least the PTX's target).
"""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from compiler.backend.nvptx import GpuKernel
from compiler.errors import CodegenError
from compiler.ir.cuda import STATIC_SHARED_LIMIT


class KernelFault(RuntimeError):
    """A GPU kernel reported a run-time fault (an index out of bounds, a division by zero)."""


@cache
def unavailable() -> str | None:
    """Why kernels cannot run here (no CuPy, no driver, no device), or None when they can."""
    try:
        import cupy as cp
    except ImportError:
        return "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x; a GPU machine has it)"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:   # the CUDA runtime raises its own error types when there is no driver
        return f"no CUDA driver or device ({type(exc).__name__}: {exc})"
    return None if count else "no CUDA device"


@cache
def device() -> dict:
    """The current device: name, compute capability (sm_XX), multiprocessors, SM clock (MHz)."""
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"name": name, "arch": f"sm_{props['major']}{props['minor']}",
            "sm_count": int(props["multiProcessorCount"]), "clock_mhz": props["clockRate"] / 1000.0}


@cache
def _function(ptx: str, name: str):
    import cupy as cp

    with tempfile.TemporaryDirectory() as tmp:   # CuPy loads PTX from a file (cuModuleLoad)
        path = Path(tmp) / f"{name}.ptx"
        path.write_text(ptx)
        return cp.RawModule(path=str(path)).get_function(name)


def _check(kernel: GpuKernel, arrays: list[np.ndarray]) -> None:
    if len(arrays) != len(kernel.params):
        raise CodegenError(f"cuda: {kernel.name} takes {len(kernel.params)} buffers "
                           f"({', '.join(b.name for b in kernel.params)}), but got {len(arrays)}")
    for b, a in zip(kernel.params, arrays, strict=True):
        want = b.dtype.numpy
        if tuple(a.shape) != b.shape or a.dtype != want:
            raise CodegenError(f"cuda: {kernel.name}'s buffer {b.name} is {list(b.shape)} {np.dtype(want)}, "
                               f"but got {list(a.shape)} {a.dtype}")


class Launcher:
    """A kernel with its buffers on the device: ``launch()`` runs it once (asynchronously)."""

    def __init__(self, kernel: GpuKernel, arrays: list[np.ndarray]) -> None:
        import cupy as cp

        reason = unavailable()
        if reason:
            raise CodegenError(f"cuda: cannot run {kernel.name}: {reason}")
        _check(kernel, arrays)
        self.kernel = kernel
        self.buffers = [cp.asarray(a) for a in arrays]
        self.fault = cp.zeros(1, cp.int32)
        self.fn = _function(kernel.ptx, kernel.name)
        if kernel.dynamic_shared > STATIC_SHARED_LIMIT:   # above 48 KB a kernel must opt in
            self.fn.max_dynamic_shared_size_bytes = kernel.dynamic_shared
        fits = self.fn.max_threads_per_block
        if kernel.launch.threads > fits:
            raise CodegenError(f"cuda: {kernel.name} launches blocks of {kernel.launch.threads} threads, but "
                               f"with its {self.fn.num_regs} registers per thread a block may have {fits}")
        self.args = (*self.buffers, self.fault)

    def launch(self) -> None:
        self.fn(self.kernel.launch.grid, self.kernel.launch.block, self.args,
                shared_mem=self.kernel.dynamic_shared)

    def results(self) -> list[np.ndarray]:
        """Every buffer copied back; KernelFault when a thread faulted."""
        import cupy as cp

        cp.cuda.Device().synchronize()
        code = int(self.fault.get()[0])
        if code:
            message = self.kernel.errors[code - 1] if code <= len(self.kernel.errors) else f"code {code}"
            raise KernelFault(f"cuda: {self.kernel.name} faulted: {message}")
        return [cp.asnumpy(b) for b in self.buffers]

    def seconds(self, min_time: float = 0.05, warmup: int = 3, per_graph: int = 20) -> float:
        """The GPU time of one launch: ``per_graph`` launches captured in one CUDA graph, the graph replayed
        between two CUDA events until at least ``min_time`` seconds have passed (after ``warmup``
        launches). A graph replays its launches with no host work between them, so a short kernel's time
        is its own, not the host's launch overhead (where capture is not supported, plain launches)."""
        import cupy as cp

        for _ in range(warmup):
            self.launch()
        cp.cuda.Device().synchronize()
        stream = cp.cuda.Stream(non_blocking=True)
        try:
            with stream:
                stream.begin_capture()
                for _ in range(per_graph):
                    self.launch()
                graph = stream.end_capture()
            step, count = (lambda: graph.launch(stream)), per_graph
        except Exception:   # no stream capture here (an old driver or CuPy): time plain launches
            step, count = self.launch, 1
            stream = cp.cuda.get_current_stream()
        return timed(step, count, stream, min_time)


def timed(step, count: int, stream, min_time: float) -> float:
    """Seconds per unit of work, where ``step()`` enqueues ``count`` units on ``stream``: steps repeated
    between two CUDA events, doubling until they take ``min_time``."""
    import cupy as cp

    step()
    reps, start, end = 1, cp.cuda.Event(), cp.cuda.Event()
    while True:
        start.record(stream)
        for _ in range(reps):
            step()
        end.record(stream)
        end.synchronize()
        elapsed = cp.cuda.get_elapsed_time(start, end) / 1e3
        if elapsed >= min_time or reps >= 1 << 16:
            return elapsed / (reps * count)
        reps = max(reps * 2, int(reps * min_time / max(elapsed, 1e-7)) + 1)


def run(kernel: GpuKernel, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``kernel`` once on copies of ``arrays``; every buffer as the kernel left it."""
    launcher = Launcher(kernel, arrays)
    launcher.launch()
    return launcher.results()


@cache
def tensor_core_peak_tflops(size: int = 8192, reps: int = 10) -> float:
    """The fp16 Tensor Core throughput measured on this device: cuBLAS (CuPy's matmul, fp16 in, fp32
    accumulation) on a ``size``^3 product, the best of ``reps`` timed products after warm-up."""
    import cupy as cp

    a = cp.random.default_rng(0).standard_normal((size, size), dtype=cp.float32).astype(cp.float16)
    b = a.T.copy()
    for _ in range(3):
        cp.matmul(a, b)
    best = float("inf")
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(reps):
        start.record()
        cp.matmul(a, b)
        end.record()
        end.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, end) / 1e3)
    return 2 * size**3 / best / 1e12
