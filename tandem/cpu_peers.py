"""Peer implementations of int8 CPU convolution and GEMM, against which our compiler's kernels are compared.

The UNIT reproduction compares our compiled u8 x s8 -> s32 convolution and GEMM with what established
libraries do on the same numpy inputs. Every peer turns one layer plus its inputs into a callable that runs
one inference (``prepare_conv`` / ``prepare_gemm``); all compilation, session creation and weight
re-layout happen before, so ``time_callable`` times inference only.

Peers (``PEERS``, then the timing-only ``QLINEAR_PEER``):

- ``numpy``: im2col (``sliding_window_view``) + an int32 ``matmul``. numpy's BLAS has no integer matmul, so
  this runs numpy's own single-threaded loops and ``threads`` is ignored. ``conv_reference`` and
  ``gemm_reference`` (int64 accumulation, then int32) are the bit-exact references everything is checked
  against.
- ``onnxruntime``: an in-memory ONNX model with ``ConvInteger`` (x uint8 [1, c, h, w], w int8 [k, c, r, r],
  y int32) and ``MatMulInteger`` (A uint8 [m, k], B int8 [k, n] -- ``b`` is transposed before the timed
  call, y int32). onnxruntime 1.31 accepts int8 weights for both (checked: bit-exact with the references),
  so the integer operators give the exact int32 result and no workaround is needed. Weights are graph
  initializers so that onnxruntime can prepack them; only the data / A tensor is fed.
- ``tvm``: ``tvm.topi.nn.conv2d_nchw`` with ``out_dtype="int32"`` (a TE compute), ``te.create_prim_func``,
  a hand-written ``tvm.s_tir.Schedule`` (tile output channels by up to 16 and the output row by up to 16
  and vectorize it, accumulate in a local buffer, parallelize the fused channel-block x row loop), built by
  ``tvm.compile`` for ``llvm`` with the host cpu. The GEMM is a TE compute scheduled the same way.
- ``onnxruntime-qlinear`` (timing only, ``exact = False``): ``QLinearConv`` / ``QLinearMatMul`` with u8 x s8
  inputs and a uint8 output, scales 1 except ``y_scale = 2**shift`` and zero points 0, so its output is
  ``clip(round_half_even(acc / 2**shift), 0, 255)`` (``requantize``) -- onnxruntime's requantizing kernel,
  which is what the UNIT paper compares against. On a zen4 host it is an order of magnitude faster than
  ``ConvInteger``, which onnxruntime runs as a generic im2col + integer GEMM.

TVM notes (apache-tvm 0.27):

- Threads: the runtime thread pool has ``TVM_NUM_THREADS`` workers (read when the pool is first used;
  otherwise ``OMP_NUM_THREADS``, otherwise half the hardware threads on x86), so the peer sets
  ``TVM_NUM_THREADS`` to the cpu count before importing tvm unless it is already set; each call then selects
  ``threads`` of those workers with the global function ``runtime.config_threadpool(1, threads)`` when
  ``runtime.NumThreads`` differs.
- VNNI: TVM reaches ``vpdpbusd`` only by ``Schedule.tensorize`` with the ``dot_16x4_vnni`` intrinsic of
  ``tvm.s_tir.tensor_intrin.x86``, and ``tensorize`` segfaults in this wheel (so nothing here calls it);
  0.27 also has no ``tvm.topi.x86`` int8 NCHWc schedules. So the ``tvm`` peer is TVM's non-tensorized int8
  schedule: LLVM turns its widened int32 multiply-adds into AVX-512 ``vpdpwssd`` (16-bit VNNI, one product
  per 32-bit lane, on a zen4 host), never the 4-products-per-lane ``vpdpbusd``.

    ConvSpec, GemmSpec, conv_inputs, gemm_inputs, conv_reference, gemm_reference, requantize,
    qlinear_shift, Peer, PEERS, QLINEAR_PEER, ALL_PEERS, time_callable
"""

from __future__ import annotations

import abc
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from compiler.ops import cpu as cpu_ops

Runner = Callable[[], np.ndarray]


def _check_sizes(owner: str, spec: Any, minimum: dict[str, int]) -> None:
    for f in fields(spec):
        value = getattr(spec, f.name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum[f.name]:
            what = "a non-negative" if minimum[f.name] == 0 else "a positive"
            raise ValueError(f"argument '{f.name}' to {owner}: expected {what} integer, but got {value!r}")


@dataclass(frozen=True)
class ConvSpec:
    """One 2-D convolution layer: batch 1, NCHW data [1, c, h, w], OIHW kernel [k, c, r, r]."""

    c: int
    h: int
    w: int
    k: int
    r: int
    stride: int = 1
    pad: int = 0

    def __post_init__(self) -> None:
        _check_sizes("ConvSpec", self, dict(c=1, h=1, w=1, k=1, r=1, stride=1, pad=0))
        hp, wp = self.h + 2 * self.pad, self.w + 2 * self.pad
        if self.r > min(hp, wp):
            raise ValueError(f"argument 'r' to ConvSpec: expected a kernel that fits the padded input "
                             f"{hp}x{wp}, but got r={self.r}")

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.r) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.r) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.k * self.c * self.r * self.r * self.oh * self.ow

    @property
    def ops(self) -> int:
        return 2 * self.macs


@dataclass(frozen=True)
class GemmSpec:
    """C[m, n] = sum_k A[m, k] * B[n, k], with B in "dense" layout [n, k]."""

    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        _check_sizes("GemmSpec", self, dict(m=1, n=1, k=1))

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k

    @property
    def ops(self) -> int:
        return 2 * self.macs


def conv_inputs(spec: ConvSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Data uint8 [1, c, h, w] in [0, 255] and kernel int8 [k, c, r, r] in [-128, 127], from ``seed``."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (1, spec.c, spec.h, spec.w), dtype=np.uint8)
    kernel = rng.integers(-128, 128, (spec.k, spec.c, spec.r, spec.r), dtype=np.int8)
    return data, kernel


def gemm_inputs(spec: GemmSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A uint8 [m, k] in [0, 255] and B int8 [n, k] in [-128, 127], from ``seed``."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (spec.m, spec.k), dtype=np.uint8)
    b = rng.integers(-128, 128, (spec.n, spec.k), dtype=np.int8)
    return a, b


def _im2col(data: np.ndarray, spec: ConvSpec, dtype: type[np.integer]) -> np.ndarray:
    """The [c*r*r, oh*ow] patch matrix of ``data`` (rows ordered c, ry, rx like the OIHW kernel)."""
    p = spec.pad
    padded = np.pad(data[0].astype(dtype), ((0, 0), (p, p), (p, p)))
    windows = sliding_window_view(padded, (spec.r, spec.r), axis=(1, 2))[:, ::spec.stride, ::spec.stride]
    return windows.transpose(0, 3, 4, 1, 2).reshape(spec.c * spec.r * spec.r, spec.oh * spec.ow)


def conv_reference(data: np.ndarray, kernel: np.ndarray, spec: ConvSpec) -> np.ndarray:
    """The exact int32 convolution [1, k, oh, ow] (``compiler.ops.cpu.conv2d_reference``)."""
    return cpu_ops.conv2d_reference(data, kernel, spec.stride, spec.pad)


def gemm_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact int32 GEMM a @ b.T [m, n] (``compiler.ops.cpu.gemm_reference``)."""
    return cpu_ops.gemm_reference(a, b)


def requantize(acc: np.ndarray, shift: int) -> np.ndarray:
    """What ``onnxruntime-qlinear`` outputs for the int32 accumulators: clip(rint(acc / 2**shift), 0, 255)."""
    return np.clip(np.rint(acc / 2.0**shift), 0, 255).astype(np.uint8)


def qlinear_shift(reduction: int) -> int:
    """A y_scale exponent that maps u8 x s8 sums over ``reduction`` terms onto roughly [0, 255]."""
    return max(0, round(math.log2(math.sqrt(reduction))) + 7)


def time_callable(fn: Callable[[], Any], *, repeats: int = 5, min_time: float = 0.05) -> float:
    """The median seconds of one call of ``fn``.

    Warms up with one call, then takes ``repeats`` samples; each sample calls ``fn`` until at least
    ``min_time`` seconds passed and divides by the number of calls.
    """
    if repeats < 1:
        raise ValueError(f"argument 'repeats' to time_callable: expected a positive integer, "
                         f"but got {repeats}")
    if min_time < 0:
        raise ValueError(f"argument 'min_time' to time_callable: expected a non-negative number, "
                         f"but got {min_time}")
    fn()
    samples = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        samples.append(elapsed / calls)
    return float(np.median(samples))


def _check_array(where: str, arg: str, x: np.ndarray, dtype: type, shape: tuple[int, ...]) -> None:
    if x.dtype != dtype or x.shape != shape:
        raise ValueError(f"argument '{arg}' to {where}: expected {np.dtype(dtype)} {shape}, "
                         f"but got {x.dtype} {x.shape}")


def _check_threads(where: str, threads: int) -> None:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"argument 'threads' to {where}: expected a positive integer, but got {threads!r}")


class Peer(abc.ABC):
    """An implementation of u8 x s8 -> s32 conv and GEMM to compare against.

    ``prepare_conv`` / ``prepare_gemm`` check the inputs against the spec, then do all compilation and
    weight re-layout; the callable they return runs one inference. ``exact`` peers return the int32 result,
    bit-exact with ``conv_reference`` / ``gemm_reference``; ``threads`` is the number of intra-op threads.
    """

    name: str
    exact: bool = True

    @abc.abstractmethod
    def available(self) -> str | None:
        """None when the peer can run here, else why not (e.g. "onnxruntime is not installed")."""

    def prepare_conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        """Compile ``spec`` for ``threads`` threads; the callable returns int32 [1, k, oh, ow]."""
        where = f"{self.name}.prepare_conv"
        _check_array(where, "data", data, np.uint8, (1, spec.c, spec.h, spec.w))
        _check_array(where, "kernel", kernel, np.int8, (spec.k, spec.c, spec.r, spec.r))
        _check_threads(where, threads)
        return self._conv(spec, data, kernel, threads)

    def prepare_gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        """Compile ``spec`` for ``threads`` threads; the callable returns int32 [m, n]."""
        where = f"{self.name}.prepare_gemm"
        _check_array(where, "a", a, np.uint8, (spec.m, spec.k))
        _check_array(where, "b", b, np.int8, (spec.n, spec.k))
        _check_threads(where, threads)
        return self._gemm(spec, a, b, threads)

    @abc.abstractmethod
    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner: ...

    @abc.abstractmethod
    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner: ...

    def __repr__(self) -> str:
        return f"<peer {self.name}>"


class NumpyPeer(Peer):
    """im2col + int32 matmul in numpy; single-threaded whatever ``threads`` says (no integer BLAS)."""

    name = "numpy"

    def available(self) -> str | None:
        return None

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        weights = kernel.astype(np.int32).reshape(spec.k, -1)
        shape = (1, spec.k, spec.oh, spec.ow)
        return lambda: (weights @ _im2col(data, spec, np.int32)).reshape(shape)

    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        bt = np.ascontiguousarray(b.astype(np.int32).T)
        return lambda: a.astype(np.int32) @ bt


def _import_reason(module: str, package: str) -> str | None:
    try:
        __import__(module)
    except ImportError as e:
        return f"{package} is not installed ({e})"
    return None


class OnnxRuntimePeer(Peer):
    """onnxruntime's ConvInteger / MatMulInteger (exact), or with ``qlinear`` QLinearConv / QLinearMatMul."""

    def __init__(self, qlinear: bool = False) -> None:
        self.qlinear = qlinear
        self.exact = not qlinear
        self.name = "onnxruntime-qlinear" if qlinear else "onnxruntime"

    def available(self) -> str | None:
        return _import_reason("onnx", "onnx") or _import_reason("onnxruntime", "onnxruntime")

    def _session(self, node: Any, feed: np.ndarray, inits: list[np.ndarray], threads: int) -> Runner:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        names = list(node.input)
        initializers = [numpy_helper.from_array(v, n) for n, v in zip(names[1:], inits, strict=True)]
        x = helper.make_tensor_value_info(names[0], helper.np_dtype_to_tensor_dtype(feed.dtype), feed.shape)
        y_type = TensorProto.UINT8 if self.qlinear else TensorProto.INT32
        y = helper.make_tensor_value_info("y", y_type, None)
        graph = helper.make_graph([node], self.name, [x], [y], initializer=initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        model.ir_version = 10
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {names[0]: feed}
        return lambda: session.run(None, feeds)[0]

    def _quant_params(self, weights: np.ndarray, reduction: int) -> list[np.ndarray]:
        """The QLinear* initializers: x_scale, x_zp, w, w_scale, w_zp, y_scale = 2**shift, y_zp."""
        one, u8_zero, s8_zero = np.array(1.0, np.float32), np.array(0, np.uint8), np.array(0, np.int8)
        y_scale = np.array(2.0 ** qlinear_shift(reduction), np.float32)
        return [one, u8_zero, weights, one, s8_zero, y_scale, u8_zero]

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        from onnx import helper

        attrs = dict(strides=[spec.stride] * 2, pads=[spec.pad] * 4, kernel_shape=[spec.r] * 2)
        if self.qlinear:
            inputs = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
            inits = self._quant_params(kernel, spec.c * spec.r * spec.r)
            node = helper.make_node("QLinearConv", inputs, ["y"], **attrs)
        else:
            inits = [kernel]
            node = helper.make_node("ConvInteger", ["x", "w"], ["y"], **attrs)
        return self._session(node, data, inits, threads)

    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        from onnx import helper

        bt = np.ascontiguousarray(b.T)
        if self.qlinear:
            inputs = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
            node = helper.make_node("QLinearMatMul", inputs, ["y"])
            return self._session(node, a, self._quant_params(bt, spec.k), threads)
        node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
        return self._session(node, a, [bt], threads)


def _import_tvm() -> Any:
    """Import tvm; first size its thread pool to the cpu count, unless TVM_NUM_THREADS is set already."""
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    import tvm

    return tvm


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


class TvmPeer(Peer):
    """TVM's int8 conv2d_nchw / GEMM, parallel and vectorized, but not tensorized (no vpdpbusd)."""

    name = "tvm"
    #: Output channels (conv) or rows (GEMM) per tile, and lanes of the vectorized output-row loop.
    CHANNEL_TILE = 16
    VECTOR_LANES = 16

    def available(self) -> str | None:
        try:
            _import_tvm()
        except ImportError as e:
            return f"apache-tvm is not installed ({e})"
        return None

    def _target(self) -> Any:
        tvm = _import_tvm()
        try:
            import llvmlite.binding as llvm

            cpu = llvm.get_host_cpu_name()
        except ImportError:
            cpu = "znver5"
        return tvm.target.Target({"kind": "llvm", "mcpu": cpu})

    def _runner(self, sch: Any, args: list[np.ndarray], out_shape: tuple[int, ...], threads: int) -> Runner:
        """Build ``sch``; each call selects ``threads`` pool workers, runs, and copies the output to numpy."""
        tvm = _import_tvm()
        func = tvm.compile(sch.mod, target=self._target())["main"]
        dev = tvm.cpu()
        tensors = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in args]
        out = tvm.runtime.tensor(np.zeros(out_shape, np.int32), dev)
        num_threads = tvm.get_global_func("runtime.NumThreads")
        config = tvm.get_global_func("runtime.config_threadpool")

        def run() -> np.ndarray:
            if num_threads() != threads:
                config(1, threads)
                if num_threads() != threads:
                    raise ValueError(f"tvm: expected {threads} threads, but its pool has {num_threads()} "
                                     f"(TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')})")
            func(*tensors, out)
            return out.numpy()

        return run

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        tvm = _import_tvm()
        from tvm import te, topi

        x = te.placeholder(data.shape, "uint8", name="data")
        w = te.placeholder(kernel.shape, "int8", name="kernel")
        y = topi.nn.conv2d_nchw(x, w, spec.stride, spec.pad, 1, out_dtype="int32")
        sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
        conv = sch.get_sblock("conv2d_nchw")
        n, ff, yy, xx, rc, ry, rx = sch.get_loops(conv)
        fo, fi = sch.split(ff, [None, _largest_divisor(spec.k, self.CHANNEL_TILE)])
        xo, xi = sch.split(xx, [None, _largest_divisor(spec.ow, self.VECTOR_LANES)])
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
        tvm = _import_tvm()
        from tvm import te

        x = te.placeholder((spec.m, spec.k), "uint8", name="a")
        wt = te.placeholder((spec.k, spec.n), "int8", name="bt")
        r = te.reduce_axis((0, spec.k), name="r")
        y = te.compute((spec.m, spec.n), lambda i, j: te.sum(
            x[i, r].astype("int32") * wt[r, j].astype("int32"), axis=r), name="gemm")
        sch = tvm.s_tir.Schedule(te.create_prim_func([x, wt, y]))
        gemm = sch.get_sblock("gemm")
        i, j, kk = sch.get_loops(gemm)
        io, ii = sch.split(i, [None, _largest_divisor(spec.m, self.CHANNEL_TILE)])
        jo, ji = sch.split(j, [None, _largest_divisor(spec.n, self.VECTOR_LANES)])
        sch.reorder(io, jo, kk, ii, ji)
        sch.reverse_compute_at(sch.cache_write(gemm, 0, "local"), jo)
        sch.parallel(sch.fuse(io, jo))
        sch.vectorize(ji)
        sch.decompose_reduction(gemm, kk)
        return self._runner(sch, [a, np.ascontiguousarray(b.T)], (spec.m, spec.n), threads)


PEERS: tuple[Peer, ...] = (NumpyPeer(), OnnxRuntimePeer(), TvmPeer())
#: onnxruntime's requantizing QLinearConv / QLinearMatMul: for timing only (``exact = False``).
QLINEAR_PEER: Peer = OnnxRuntimePeer(qlinear=True)
ALL_PEERS: tuple[Peer, ...] = (*PEERS, QLINEAR_PEER)
