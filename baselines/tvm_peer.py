"""TVM as a CPU peer: its int8 conv2d_nchw / GEMM, parallel and vectorized but not tensorized.

Threads (apache-tvm 0.27): the runtime thread pool has ``TVM_NUM_THREADS`` workers (read when the pool is
first used; otherwise ``OMP_NUM_THREADS``, otherwise half the hardware threads on x86), so the peer sets
``TVM_NUM_THREADS`` to the cpu count before importing tvm unless it is already set; each call then selects
``threads`` of those workers with the global function ``runtime.config_threadpool(1, threads)`` when
``runtime.NumThreads`` differs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from baselines.cpu_layers import ConvSpec, GemmSpec
from baselines.peer import Peer, Runner


def import_tvm() -> Any:
    """Import tvm; first size its thread pool to the cpu count, unless TVM_NUM_THREADS is set already."""
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    import tvm

    return tvm


def largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


class TvmPeer(Peer):
    """TVM's int8 conv2d_nchw / GEMM, parallel and vectorized, but not tensorized (no vpdpbusd)."""

    name = "tvm"
    #: Output channels (conv) or rows (GEMM) per tile, and lanes of the vectorized output-row loop.
    CHANNEL_TILE = 16
    VECTOR_LANES = 16

    def available(self) -> str | None:
        try:
            import_tvm()
        except ImportError as e:
            return f"apache-tvm is not installed ({e})"
        return None

    def _target(self) -> Any:
        tvm = import_tvm()
        try:
            import llvmlite.binding as llvm

            cpu = llvm.get_host_cpu_name()
        except ImportError:
            cpu = "znver5"
        return tvm.target.Target({"kind": "llvm", "mcpu": cpu})

    def _runner(self, sch: Any, args: list[np.ndarray], out_shape: tuple[int, ...], threads: int) -> Runner:
        """Build ``sch``; each call selects ``threads`` pool workers, runs, and copies the output to numpy."""
        tvm = import_tvm()
        call = self._compiled(sch, threads)
        dev = tvm.cpu()
        tensors = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in args]
        out = tvm.runtime.tensor(np.zeros(out_shape, np.int32), dev)

        def run() -> np.ndarray:
            call(*tensors, out)
            return out.numpy()

        return run

    def _compiled(self, sch: Any, threads: int) -> Callable[..., None]:
        """Build ``sch`` for this CPU; the function returned runs it on TVM tensors with ``threads`` pool
        workers."""
        tvm = import_tvm()
        func = tvm.compile(sch.mod, target=self._target())["main"]
        num_threads = tvm.get_global_func("runtime.NumThreads")
        config = tvm.get_global_func("runtime.config_threadpool")

        def call(*tensors: Any) -> None:
            if num_threads() != threads:
                config(1, threads)
                if num_threads() != threads:
                    raise ValueError(f"tvm: expected {threads} threads, but its pool has {num_threads()} "
                                     f"(TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')})")
            func(*tensors)

        return call

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        tvm = import_tvm()
        from tvm import te, topi

        x = te.placeholder(data.shape, "uint8", name="data")
        w = te.placeholder(kernel.shape, "int8", name="kernel")
        y = topi.nn.conv2d_nchw(x, w, spec.stride, spec.pad, 1, out_dtype="int32")
        sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
        conv = sch.get_sblock("conv2d_nchw")
        n, ff, yy, xx, rc, ry, rx = sch.get_loops(conv)
        fo, fi = sch.split(ff, [None, largest_divisor(spec.k, self.CHANNEL_TILE)])
        xo, xi = sch.split(xx, [None, largest_divisor(spec.ow, self.VECTOR_LANES)])
        sch.reorder(n, fo, yy, xo, rc, ry, rx, fi, xi)
        sch.reverse_compute_at(sch.cache_write(conv, 0, "local"), xo)
        sch.parallel(sch.fuse(n, fo, yy))
        sch.vectorize(xi)
        sch.decompose_reduction(conv, rc)
        if spec.pad:
            loops = sch.get_loops(sch.get_sblock("pad_temp"))
            sch.parallel(sch.fuse(*loops[:2]))
        return self._runner(sch, [data, kernel], (1, spec.k, spec.oh, spec.ow), threads)

    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        tvm = import_tvm()
        from tvm import te

        x = te.placeholder((spec.m, spec.k), "uint8", name="a")
        wt = te.placeholder((spec.k, spec.n), "int8", name="bt")
        r = te.reduce_axis((0, spec.k), name="r")
        y = te.compute((spec.m, spec.n), lambda i, j: te.sum(
            x[i, r].astype("int32") * wt[r, j].astype("int32"), axis=r), name="gemm")
        sch = tvm.s_tir.Schedule(te.create_prim_func([x, wt, y]))
        gemm = sch.get_sblock("gemm")
        i, j, kk = sch.get_loops(gemm)
        io, ii = sch.split(i, [None, largest_divisor(spec.m, self.CHANNEL_TILE)])
        jo, ji = sch.split(j, [None, largest_divisor(spec.n, self.VECTOR_LANES)])
        sch.reorder(io, jo, kk, ii, ji)
        sch.reverse_compute_at(sch.cache_write(gemm, 0, "local"), jo)
        sch.parallel(sch.fuse(io, jo))
        sch.vectorize(ji)
        sch.decompose_reduction(gemm, kk)
        return self._runner(sch, [a, np.ascontiguousarray(b.T)], (spec.m, spec.n), threads)
