"""Peer implementations of int8 CPU convolution and GEMM, against which our compiler's kernels are compared.

The UNIT reproduction compares our compiled u8 x s8 -> s32 convolution and GEMM with what established
libraries do on the same numpy inputs. Every peer turns one layer plus its inputs into a callable that runs
one inference (``prepare_conv`` / ``prepare_gemm``); all compilation, session creation and weight
re-layout happen before, so ``time_callable`` times inference only.

Peers (``PEERS``; ``ALL_PEERS`` adds ``TVM_VNNI_PEER`` and the timing-only ``QLINEAR_PEER``):

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
- ``onnxruntime-fp32`` (``FP32_PEER``, not exact): onnxruntime's fp32 ``Conv`` / ``MatMul`` (MLAS, its
  own kernels standing in for oneDNN's) on float32 operands, PolyDL's setting.
- ``onnxruntime-qlinear`` (timing only, ``exact = False``): ``QLinearConv`` / ``QLinearMatMul`` with u8 x s8
  inputs and a uint8 output, scales 1 except ``y_scale = 2**shift`` and zero points 0, so its output is
  ``clip(round_half_even(acc / 2**shift), 0, 255)`` (``requantize``) -- onnxruntime's requantizing kernel,
  which is what the UNIT paper compares against. On a zen4 host it is an order of magnitude faster than
  ``ConvInteger``, which onnxruntime runs as a generic im2col + integer GEMM.
- ``tvm-vnni`` (``TVM_VNNI_PEER``, in ``ALL_PEERS`` only, exact): TVM's VNNI path, where it works here (see
  below). The conv on Tandem's packed layouts (``compiler.ops.cpu.pack_conv``: data [1, C/4, H+2p, W+2p, 4]
  u8 zero-padded, kernel [K/16, C/4, R, S, 16, 4] s8, output [1, K/16, OH, OW, 16] s32) and the GEMM
  (A [M, K/4, 4], B [N/16, K/4, 16, 4], output [M, N/16, 16]) are TE computes whose innermost
  output-channel (16) and reduction (4) axes are the intrinsic's block, so no split is needed; the
  ``tvm.s_tir.Schedule`` tiles the output row (or GEMM rows) by up to 8 and unrolls it, accumulates in a
  cache-write buffer (scope ``global``: the intrinsic's desc buffers are global and tensorize rejects a
  ``local`` one), parallelizes the fused outer loops, then tensorizes the 16 x 4 loops. Packing is
  outside the timed call; unpacking the blocked output to NCHW / [m, n] (a transposing copy) is inside it.

TensorIR's kinds (``compiler.ops.contractions``): ``prepare_contraction`` runs them on onnxruntime
(ConvInteger / MatMulInteger, or the QLinear forms for timing), ``prepare_contraction_tvm`` on TVM (the
convolutions tensorized with vpdpbusd on Tandem's packed layouts, in 1 to 3 dimensions with stride, dilation
and groups; a batch matmul as tensorized GEMMs; a depthwise conv, which TVM's VNNI intrinsic cannot take, on
TVM's vectorized NCHW16c schedule).

TVM notes (apache-tvm 0.27):

- Threads: the runtime thread pool has ``TVM_NUM_THREADS`` workers (read when the pool is first used;
  otherwise ``OMP_NUM_THREADS``, otherwise half the hardware threads on x86), so the peer sets
  ``TVM_NUM_THREADS`` to the cpu count before importing tvm unless it is already set; each call then selects
  ``threads`` of those workers with the global function ``runtime.config_threadpool(1, threads)`` when
  ``runtime.NumThreads`` differs.
- VNNI: TVM reaches ``vpdpbusd`` only by ``Schedule.tensorize`` with the ``dot_16x4_vnni`` intrinsic of
  ``tvm.s_tir.tensor_intrin.x86`` (desc: C[16] i32 += A[4] u8 x B[16, 4] s8); 0.27 has no ``tvm.topi.x86``
  int8 NCHWc schedules. Observed with apache-tvm 0.27.0.post1 (its LLVM is 22.1):

  - with apache-tvm-ffi 0.1.15.post2 (what pip resolves for apache-tvm's ``apache-tvm-ffi>=0.1.14.post0``),
    ``Schedule.tensorize`` crashes the process with SIGSEGV (signal 11) inside ``tvm::s_tir::Tensorize``
    (an atomic reference-count decrement on a bad pointer in libtvm_ffi), whatever the intrinsic:
    ``dot_16x4_vnni``, ``dot_16x4_avx512`` and a trivial 4-lane copy intrinsic all crash, even when the
    tensorized block is the intrinsic's own desc;
  - with apache-tvm-ffi 0.1.14.post0, ``tensorize`` works, but ``tvm.compile`` then fails: "LLVM module
    verification failed ... Call parameter type does not match function signature!", as TVM's impl passes
    ``<16 x i32>`` operands to ``llvm.x86.avx512.vpdpbusd.512``, which takes ``<64 x i8>`` since LLVM 21.
    ``VNNI_INTRIN_I8`` (the same desc; the impl passes the operands as ``uint8x64`` / ``int8x64``) builds,
    is bit-exact and runs ``vpdpbusd``.

  So ``tvm-vnni`` checks the whole path in a subprocess (``tvm_vnni_probe``: tensorize ``dot_16x4_vnni``,
  compile, else ``VNNI_INTRIN_I8``, then run a tiny conv and GEMM against the references), once per
  process, and is unavailable with the crash or error as the reason otherwise. The ``tvm`` peer is TVM's
  non-tensorized int8 schedule: LLVM turns its widened int32 multiply-adds into AVX-512 ``vpdpwssd``
  (16-bit VNNI, one product per 32-bit lane, on a zen4 host), never the 4-products-per-lane ``vpdpbusd``.
  On a 2-core zen4 host, ResNet-18's C2 (64 -> 64 channels, 56 x 56, 3 x 3), 1 thread: ``tvm`` 46 GOPS,
  ``tvm-vnni`` 347 GOPS, ``onnxruntime-qlinear`` 397 GOPS (Tandem's VNNI flow: 448).

    ConvSpec, GemmSpec, conv_inputs, gemm_inputs, conv_reference, gemm_reference, requantize,
    qlinear_shift, Peer, PEERS, TVM_VNNI_PEER, QLINEAR_PEER, ALL_PEERS, TvmVnniPeer, VnniProbe,
    tvm_vnni_probe, VNNI_INTRIN, VNNI_INTRIN_I8, time_callable, prepare_contraction,
    prepare_contraction_tvm
"""

from __future__ import annotations

import abc
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from compiler.backend.llvm import median_seconds
from compiler.ops import cpu as cpu_ops
from compiler.ops import reference
from compiler.ops.nn import ConvShape

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
    def shape(self) -> ConvShape:
        """The layer as Tandem's one conv shape (UNIT's k output channels are its oc, r its kernel k)."""
        return ConvShape(self.h, self.w, self.c, self.k, self.r, self.stride, self.pad)

    @property
    def oh(self) -> int:
        return self.shape.oh

    @property
    def ow(self) -> int:
        return self.shape.ow

    @property
    def macs(self) -> int:
        return self.shape.macs

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
    """The exact int32 convolution [1, k, oh, ow] (``compiler.ops.reference.conv2d``)."""
    return reference.conv2d(data, kernel, spec.stride, spec.pad).astype(np.int32)


def gemm_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact int32 GEMM a @ b.T [m, n] (``compiler.ops.reference.dense``)."""
    return reference.dense(a, b).astype(np.int32)


def requantize(acc: np.ndarray, shift: int) -> np.ndarray:
    """What ``onnxruntime-qlinear`` outputs for the int32 accumulators: clip(rint(acc / 2**shift), 0, 255)."""
    return np.clip(np.rint(acc / 2.0**shift), 0, 255).astype(np.uint8)


def qlinear_shift(reduction: int) -> int:
    """A y_scale exponent that maps u8 x s8 sums over ``reduction`` terms onto roughly [0, 255]."""
    return max(0, round(math.log2(math.sqrt(reduction))) + 7)


def time_callable(fn: Callable[[], Any], *, repeats: int = 5, min_time: float = 0.05) -> float:
    """The median seconds of one call of ``fn`` (``compiler.backend.llvm.median_seconds``: one warm-up
    call, then ``repeats`` samples of as many calls as last ``min_time`` seconds)."""
    if repeats < 1:
        raise ValueError(f"argument 'repeats' to time_callable: expected a positive integer, "
                         f"but got {repeats}")
    if min_time < 0:
        raise ValueError(f"argument 'min_time' to time_callable: expected a non-negative number, "
                         f"but got {min_time}")
    return median_seconds(lambda calls: [fn() for _ in range(calls)], min_time, repeats)


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
    operands: tuple[type, type] = (np.uint8, np.int8)   # the data's and the weights' element types

    @abc.abstractmethod
    def available(self) -> str | None:
        """None when the peer can run here, else why not (e.g. "onnxruntime is not installed")."""

    def prepare_conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        """Compile ``spec`` for ``threads`` threads; the callable returns int32 [1, k, oh, ow]."""
        where = f"{self.name}.prepare_conv"
        _check_array(where, "data", data, self.operands[0], (1, spec.c, spec.h, spec.w))
        _check_array(where, "kernel", kernel, self.operands[1], (spec.k, spec.c, spec.r, spec.r))
        _check_threads(where, threads)
        return self._conv(spec, data, kernel, threads)

    def prepare_gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        """Compile ``spec`` for ``threads`` threads; the callable returns int32 [m, n]."""
        where = f"{self.name}.prepare_gemm"
        _check_array(where, "a", a, self.operands[0], (spec.m, spec.k))
        _check_array(where, "b", b, self.operands[1], (spec.n, spec.k))
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
    """onnxruntime's ConvInteger / MatMulInteger (exact), or with ``qlinear`` QLinearConv / QLinearMatMul, or
    with ``float32`` its fp32 Conv / MatMul (MLAS's kernels; f32 operands, not bit-exact)."""

    def __init__(self, qlinear: bool = False, float32: bool = False) -> None:
        self.qlinear, self.float32 = qlinear, float32
        self.exact = not (qlinear or float32)
        self.name = "onnxruntime-fp32" if float32 else "onnxruntime-qlinear" if qlinear else "onnxruntime"
        if float32:
            self.operands = (np.float32, np.float32)

    def available(self) -> str | None:
        return _import_reason("onnxruntime", "onnxruntime") or _import_reason("onnx", "onnx")

    def _session(self, node: Any, feed: np.ndarray, inits: list[np.ndarray], threads: int) -> Runner:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        names = list(node.input)
        initializers = [numpy_helper.from_array(v, n) for n, v in zip(names[1:], inits, strict=True)]
        x = helper.make_tensor_value_info(names[0], helper.np_dtype_to_tensor_dtype(feed.dtype), feed.shape)
        y_type = (TensorProto.FLOAT if self.float32 else TensorProto.UINT8 if self.qlinear
                  else TensorProto.INT32)
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
        if self.float32:
            node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
            return self._session(node, data, [kernel], threads)
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
        if self.float32:
            return self._session(helper.make_node("MatMul", ["a", "b"], ["y"]), a, [bt], threads)
        if self.qlinear:
            inputs = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
            node = helper.make_node("QLinearMatMul", inputs, ["y"])
            return self._session(node, a, self._quant_params(bt, spec.k), threads)
        node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
        return self._session(node, a, [bt], threads)


def prepare_contraction(op: Any, data: np.ndarray, weight: np.ndarray, threads: int,
                        qlinear: bool = False) -> Runner | None:
    """onnxruntime's integer operator for one of TensorIR's kinds (``compiler.ops.contractions``) on the
    plain u8 data and s8 weights: ``ConvInteger`` with the kind's strides, pads, dilations and groups (1-D
    to 3-D, depthwise as C groups) or ``MatMulInteger`` for a batch matmul ([B, M, K] x [B, K, N]), whose
    callable returns the exact int32 result in the kind's plain layout; with ``qlinear``, QLinearConv /
    QLinearMatMul (timing only: a requantized u8 result, onnxruntime's fast int8 path). None for a
    transposed convolution, which ONNX has no integer operator for."""
    from onnx import helper

    peer = OnnxRuntimePeer(qlinear)
    _check_threads("prepare_contraction", threads)
    if op.kind == "conv_transpose":
        return None
    if op.kind == "batch_matmul":
        weights, reduction = np.ascontiguousarray(weight.transpose(0, 2, 1)), weight.shape[-1]
        name, attrs = "MatMul", {}
    else:
        p, dims = op.params, data.ndim - 2
        weights, reduction = weight, math.prod(weight.shape[1:])
        name = "Conv"
        attrs = dict(strides=[p["S"]] * dims, pads=[p["P"]] * (2 * dims), dilations=[p["DIL"]] * dims,
                     kernel_shape=[p["K"]] * dims, group=op.groups)
    if qlinear:
        inputs = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
        node = helper.make_node(f"QLinear{name}", inputs, ["y"], **attrs)
        return peer._session(node, data, peer._quant_params(weights, reduction), threads)
    node = helper.make_node(f"{name}Integer", ["x", "w"], ["y"], **attrs)
    return peer._session(node, data, [weights], threads)


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
        tvm = _import_tvm()
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


#: TVM's VNNI intrinsic (desc: 16 int32 lanes += 4 u8 x 16x4 s8 products) and our variant of it: the same
#: desc, with an impl that calls vpdpbusd with LLVM >= 21's operand types (<64 x i8>, not <16 x i32>).
VNNI_INTRIN = "dot_16x4_vnni"
VNNI_INTRIN_I8 = "tandem_dot_16x4_vnni_i8"
_PROBE_TIMEOUT = 120.0
_PROBE_CODE = "from baselines.cpu_peers import _tvm_vnni_probe; _tvm_vnni_probe()"


@cache
def _x86_intrinsics() -> Any:
    """``tvm.s_tir.tensor_intrin.x86``, which registers ``VNNI_INTRIN``, imported without its package.

    Importing the package ``tvm.s_tir.tensor_intrin`` parses every target's TVMScript intrinsics (about 18 s,
    13 of them cuda's), so the x86 file is loaded on its own under its own name; a later import of the
    package then finds it in ``sys.modules`` and does not register it twice (but ``import
    tvm.s_tir.tensor_intrin.x86 as m`` before any import of the package fails: import the package first).
    """
    tvm = _import_tvm()
    name = "tvm.s_tir.tensor_intrin.x86"
    if name not in sys.modules:
        import importlib.util

        import tvm.s_tir

        path = os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin", "x86.py")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {name} from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


@cache
def _register_vnni_i8() -> str:
    """Register ``VNNI_INTRIN_I8`` (once per process) and return its name."""
    x86 = _x86_intrinsics()
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (4,), "uint8", offset_factor=1)
        B = T.match_buffer(b, (16, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (16,), "int32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a_u8x64 = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "uint8x4"), dtype="int32"), 16),
                                    dtype="uint8x64")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), C.vload([0], dtype="int32x16"),
                a_u8x64, B.vload([0, 0], dtype="int8x64"), dtype="int32x16")

    TensorIntrin.register(VNNI_INTRIN_I8, x86.dot_product_16x4_u8i8i32_desc, impl)
    return VNNI_INTRIN_I8


def _first_line(e: BaseException) -> str:
    """``Type: first line`` of an exception (two lines where the first ends with ':', as TVM's do)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _tvm_vnni_probe() -> None:
    """Try the whole tensorized path on a tiny conv and GEMM; print its progress as tab-separated lines.

    Runs in the subprocess of ``_run_tvm_vnni_probe`` (``Schedule.tensorize`` may crash the process):
    ``version`` (tvm, tvm-ffi), then ``stage`` before each step, ``stock-error`` when TVM's own impl fails
    to compile, and last ``ok`` with the intrinsic that works or ``error`` with the exception.
    """
    def say(*parts: str) -> None:
        print(*parts, sep="\t", flush=True)

    tvm = _import_tvm()
    try:
        import tvm_ffi

        ffi = getattr(tvm_ffi, "__version__", "?")
    except ImportError:
        ffi = "?"
    say("version", tvm.__version__, ffi)
    spec, gemm = ConvSpec(c=16, h=8, w=8, k=16, r=3), GemmSpec(m=8, n=16, k=16)
    data, kernel = conv_inputs(spec)
    packed = cpu_ops.pack_conv(data, kernel, spec.shape)
    try:
        for intrinsic in (VNNI_INTRIN, VNNI_INTRIN_I8):
            if intrinsic == VNNI_INTRIN_I8:
                say("stage", f"registering {intrinsic}")
                _register_vnni_i8()
            say("stage", f"Schedule.tensorize with {intrinsic}")
            sch = _vnni_conv_schedule(spec, packed[0].shape, packed[1].shape, intrinsic)
            say("stage", f"tvm.compile of the conv tensorized with {intrinsic}")
            try:
                tvm.compile(sch.mod, target=TvmPeer()._target())
                break
            except Exception as e:
                if intrinsic == VNNI_INTRIN_I8:
                    raise
                say("stock-error", _first_line(e))
        say("stage", f"running the conv and GEMM tensorized with {intrinsic}")
        peer = TvmVnniPeer(intrinsic)
        if not np.array_equal(peer.prepare_conv(spec, data, kernel, 1)(), conv_reference(data, kernel, spec)):
            raise ValueError(f"the conv tensorized with {intrinsic} differs from conv_reference")
        a, b = gemm_inputs(gemm)
        if not np.array_equal(peer.prepare_gemm(gemm, a, b, 1)(), gemm_reference(a, b)):
            raise ValueError(f"the GEMM tensorized with {intrinsic} differs from gemm_reference")
    except Exception as e:
        say("error", _first_line(e))
        return
    say("ok", intrinsic)


@dataclass(frozen=True)
class VnniProbe:
    """What the TVM VNNI probe found: ``reason`` is None where the tensorized path works (``intrinsic``)."""

    reason: str | None
    intrinsic: str | None = None
    #: Why TVM's own ``dot_16x4_vnni`` impl failed, where ``intrinsic`` is our ``VNNI_INTRIN_I8`` instead.
    stock_error: str | None = None


def _run_tvm_vnni_probe(code: str = _PROBE_CODE, timeout: float = _PROBE_TIMEOUT) -> VnniProbe:
    """Run ``code`` (``_tvm_vnni_probe``) in a fresh python and read its report; a crash is a reason."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return VnniProbe(f"TVM's VNNI probe did not finish in {timeout:g} s")
    report: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, *rest = line.split("\t")
        report[key] = rest
    version = report.get("version", [None, None])
    tvm = f"TVM {version[0]}'s" if version[0] else "TVM's"
    stage = report.get("stage", ["VNNI probe"])[0]
    stock = report.get("stock-error", [None])[0]
    if "ok" in report and done.returncode == 0:
        return VnniProbe(None, report["ok"][0], stock)
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = "unknown signal"
        crash = f"{tvm} {stage} crashed (signal {-done.returncode}, {name})"
        return VnniProbe(crash + (f" with apache-tvm-ffi {version[1]}" if version[1] else ""))
    if "error" in report:
        return VnniProbe(f"{tvm} {stage} raised {report['error'][0]}"
                         + (f"; TVM's own impl: {stock}" if stock else ""))
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return VnniProbe(f"{tvm} {stage} failed (exit status {done.returncode}): {last}")


@cache
def tvm_vnni_probe() -> VnniProbe:
    """The TVM VNNI probe's result, run once per process (a few seconds: a fresh python imports tvm)."""
    reason = TvmPeer().available()
    if reason is not None:
        return VnniProbe(reason)
    from compiler.backend.llvm import host_cpu

    if not host_cpu()["avx512vnni"]:
        return VnniProbe(f"this CPU ({host_cpu()['cpu']}) has no AVX-512 VNNI")
    return _run_tvm_vnni_probe()


def _vnni_conv_schedule(spec: ConvSpec, data_shape: tuple[int, ...], kernel_shape: tuple[int, ...],
                        intrinsic: str) -> Any:
    """The conv on packed data [1, C/4, H+2p, W+2p, 4] and kernel [K/16, C/4, R, S, 16, 4], tensorized."""
    tvm = _import_tvm()
    _x86_intrinsics()
    from tvm import te

    k16, c4, r = kernel_shape[0], kernel_shape[1], spec.r
    x = te.placeholder(data_shape, "uint8", name="data")
    w = te.placeholder(kernel_shape, "int8", name="kernel")
    rc, ry, rx = (te.reduce_axis((0, c4), "rc"), te.reduce_axis((0, r), "ry"), te.reduce_axis((0, r), "rx"))
    ri, s = te.reduce_axis((0, 4), "ri"), spec.stride
    y = te.compute((1, k16, spec.oh, spec.ow, 16), lambda n, ko, i, j, ki: te.sum(
        x[n, rc, i * s + ry, j * s + rx, ri].astype("int32") * w[ko, rc, ry, rx, ki, ri].astype("int32"),
        axis=[rc, ry, rx, ri]), name="conv")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    conv = sch.get_sblock("conv")
    n, ko, i, j, ki, lrc, lry, lrx, lri = sch.get_loops(conv)
    jo, ji = sch.split(j, [None, _largest_divisor(spec.ow, TvmVnniPeer.ROW_TILE)])
    sch.reorder(n, ko, i, jo, lrc, lry, lrx, ji, ki, lri)
    sch.reverse_compute_at(sch.cache_write(conv, 0, "global"), jo)
    sch.parallel(sch.fuse(n, ko, i))
    sch.unroll(ji)
    sch.decompose_reduction(conv, lrc)
    sch.tensorize(ki, intrinsic)
    return sch


def _vnni_gemm_schedule(m: int, k4: int, n16: int, intrinsic: str) -> Any:
    """The GEMM of A [M, K/4, 4] and B packed [N/16, K/4, 16, 4] into [M, N/16, 16], tensorized."""
    tvm = _import_tvm()
    _x86_intrinsics()
    from tvm import te

    x = te.placeholder((m, k4, 4), "uint8", name="a")
    w = te.placeholder((n16, k4, 16, 4), "int8", name="b")
    rk, ri = te.reduce_axis((0, k4), "rk"), te.reduce_axis((0, 4), "ri")
    y = te.compute((m, n16, 16), lambda i, jo, ji: te.sum(
        x[i, rk, ri].astype("int32") * w[jo, rk, ji, ri].astype("int32"), axis=[rk, ri]), name="gemm")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    gemm = sch.get_sblock("gemm")
    i, jo, ji, lrk, lri = sch.get_loops(gemm)
    io, ii = sch.split(i, [None, _largest_divisor(m, TvmVnniPeer.ROW_TILE)])
    sch.reorder(jo, io, lrk, ii, ji, lri)
    sch.reverse_compute_at(sch.cache_write(gemm, 0, "global"), io)
    sch.parallel(sch.fuse(jo, io))
    sch.unroll(ii)
    sch.decompose_reduction(gemm, lrk)
    sch.tensorize(ji, intrinsic)
    return sch


class TvmVnniPeer(TvmPeer):
    """TVM's int8 conv / GEMM tensorized with vpdpbusd by ``Schedule.tensorize``, where that works here.

    ``available()`` runs ``tvm_vnni_probe`` (a subprocess, once per process), as ``tensorize`` may crash.
    Inputs are packed like Tandem's (``compiler.ops.cpu.pack_conv`` / ``pack_gemm``: zero padding and channel
    blocks, outside the timed call); the timed callable runs the kernel and unpacks its blocked output
    (``unpack_conv`` / ``unpack_gemm``, a transposing copy) to NCHW / [m, n].
    """

    name = "tvm-vnni"
    #: Output pixels (conv) or rows (GEMM) whose 16-lane accumulators are updated back to back (unrolled).
    ROW_TILE = 8

    def __init__(self, intrinsic: str | None = None) -> None:
        self._intrinsic = intrinsic

    def available(self) -> str | None:
        return None if self._intrinsic else tvm_vnni_probe().reason

    @property
    def intrinsic(self) -> str | None:
        """The intrinsic used: ``VNNI_INTRIN``, or ``VNNI_INTRIN_I8`` where TVM's own impl fails to build."""
        found = self._intrinsic or tvm_vnni_probe().intrinsic
        if found == VNNI_INTRIN_I8:
            _register_vnni_i8()
        return found

    def _ready_intrinsic(self) -> str:
        intrinsic = self.intrinsic
        if intrinsic is None:
            raise RuntimeError(f"{self.name} is not available: {self.available()}")
        return intrinsic

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        intrinsic = self._ready_intrinsic()
        layer = spec.shape
        packed_data, packed_kernel = cpu_ops.pack_conv(data, kernel, layer)
        sch = _vnni_conv_schedule(spec, packed_data.shape, packed_kernel.shape, intrinsic)
        shape = (1, packed_kernel.shape[0], spec.oh, spec.ow, 16)
        run = self._runner(sch, [packed_data, packed_kernel], shape, threads)
        return lambda: cpu_ops.unpack_conv(run(), layer)

    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        intrinsic = self._ready_intrinsic()
        packed_a, packed_b = cpu_ops.pack_gemm(a, b)
        n16, k4 = packed_b.shape[:2]
        sch = _vnni_gemm_schedule(spec.m, k4, n16, intrinsic)
        run = self._runner(sch, [packed_a.reshape(spec.m, k4, 4), packed_b], (spec.m, n16, 16), threads)
        return lambda: cpu_ops.unpack_gemm(run(), spec.n)


def prepare_contraction_tvm(op: Any, data: np.ndarray, weight: np.ndarray, threads: int) -> Runner | str:
    """TVM 0.27 on one of TensorIR's kinds (``compiler.ops.contractions``), on the plain u8 data and s8
    weights, its callable returning the exact int32 result in the kind's plain layout; or, where TVM cannot
    run it here, the reason. The convolutions (conv1d to conv3d, dilated, grouped, transposed as the conv of
    the spread input) are TE computes on Tandem's packed layouts (``compiler.ops.cpu.pack_window``: channels
    in blocks of 4, output channels of 16), tensorized with vpdpbusd by ``Schedule.tensorize`` (one compiled
    function, called per group); a batch matmul runs the tensorized GEMM per batch. TVM's VNNI intrinsic
    broadcasts its data operand to all 16 lanes, so it has no mapping for a depthwise conv: that runs TVM's
    NCHW16c schedule, the 16 channels a vectorized loop of int32 multiply-adds. Packing happens before the
    timed call; unpacking the blocked output is inside it."""
    vnni = TVM_VNNI_PEER
    reason = vnni.available()
    if reason:
        return reason
    _check_threads("prepare_contraction_tvm", threads)
    if op.kind == "batch_matmul":
        batch, m, k = data.shape
        runs = [vnni.prepare_gemm(GemmSpec(m, weight.shape[1], k), data[q], weight[q], threads)
                for q in range(batch)]
        return lambda: np.stack([run() for run in runs])
    window, groups = cpu_ops.window_of(op)
    layout_data, layout_weight = op.layout_data(data), op.layout_weight(weight)
    if window.depthwise:
        run = _tvm_depthwise(window, layout_data[:, :, 0], layout_weight[:, 0, 0], threads)
        return lambda: op.layout_out(run())
    intrinsic = vnni._ready_intrinsic()
    packed = [cpu_ops.pack_window(layout_data[:, g], layout_weight[g]) for g in range(groups)]
    sch = _vnni_window_schedule(window, packed[0][0].shape, packed[0][1].shape, intrinsic)
    call = vnni._compiled(sch, threads)
    tvm = _import_tvm()
    dev = tvm.cpu()
    shape = (window.n, packed[0][1].shape[0], *window.out, 16)
    args = [[tvm.runtime.tensor(a, dev) for a in pair] for pair in packed]
    outs = [tvm.runtime.tensor(np.zeros(shape, np.int32), dev) for _ in packed]

    def run() -> np.ndarray:
        for pair, out in zip(args, outs, strict=True):
            call(*pair, out)
        blocks = [cpu_ops.unpack_window(out.numpy(), window.oc) for out in outs]
        return op.layout_out(np.stack(blocks, axis=1))

    return run


def _vnni_window_schedule(window: Any, data_shape: tuple[int, ...], kernel_shape: tuple[int, ...],
                          intrinsic: str) -> Any:
    """A convolution of 1 to 3 dimensions with stride and dilation on packed data [N, C/4, *sizes, 4] and
    kernel [K/16, C/4, *k, 16, 4], tensorized as ``_vnni_conv_schedule`` does the 2-D one."""
    tvm = _import_tvm()
    _x86_intrinsics()
    from tvm import te

    dims, s, dil = len(window.sizes), window.s, window.dil
    x = te.placeholder(data_shape, "uint8", name="data")
    w = te.placeholder(kernel_shape, "int8", name="kernel")
    rc, ri = te.reduce_axis((0, kernel_shape[1]), "rc"), te.reduce_axis((0, 4), "ri")
    taps = [te.reduce_axis((0, window.k), f"r{d}") for d in range(dims)]

    def body(*index):
        n, ko, *xs, ki = index
        at = [p * s + t * dil for p, t in zip(xs, taps, strict=True)]
        return te.sum(x[(n, rc, *at, ri)].astype("int32") * w[(ko, rc, *taps, ki, ri)].astype("int32"),
                      axis=[rc, *taps, ri])

    y = te.compute((window.n, kernel_shape[0], *window.out, 16), body, name="conv")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    conv = sch.get_sblock("conv")
    n, ko, *spatial, ki, lrc = sch.get_loops(conv)[: 4 + dims]
    ltaps, lri = sch.get_loops(conv)[4 + dims: 4 + 2 * dims], sch.get_loops(conv)[-1]
    jo, ji = sch.split(spatial[-1], [None, _largest_divisor(window.out[-1], TvmVnniPeer.ROW_TILE)])
    sch.reorder(n, ko, *spatial[:-1], jo, lrc, *ltaps, ji, ki, lri)
    sch.reverse_compute_at(sch.cache_write(conv, 0, "global"), jo)
    sch.parallel(sch.fuse(n, ko, *spatial[:-1]))
    sch.unroll(ji)
    sch.decompose_reduction(conv, lrc)
    sch.tensorize(ki, intrinsic)
    return sch


def _tvm_depthwise(window: Any, data: np.ndarray, weight: np.ndarray, threads: int) -> Runner:
    """TVM's depthwise conv on NCHW16c: data [N, C/16, Hp, Wp, 16] u8, kernel [C/16, k, k, 16] s8, the 16
    channels of each output a vectorized loop of int32 multiply-adds, 8 outputs along W unrolled, the fused
    batch x channel-block x row loop parallel; its output unpacked to [N, C, OH, OW] inside the call."""
    tvm = _import_tvm()
    from tvm import te

    n, c, hp, wp = data.shape
    c16, k, s, dil = -(-c // 16), window.k, window.s, window.dil
    d = np.zeros((n, c16 * 16, hp, wp), np.uint8)
    d[:, :c] = data
    wt = np.zeros((c16 * 16, k, k), np.int8)
    wt[:c] = weight
    packed_data = np.ascontiguousarray(d.reshape(n, c16, 16, hp, wp).transpose(0, 1, 3, 4, 2))
    packed_weight = np.ascontiguousarray(wt.reshape(c16, 16, k, k).transpose(0, 2, 3, 1))
    oh, ow = window.out
    x = te.placeholder(packed_data.shape, "uint8", name="data")
    w = te.placeholder(packed_weight.shape, "int8", name="kernel")
    ry, rx = te.reduce_axis((0, k), "ry"), te.reduce_axis((0, k), "rx")
    y = te.compute((n, c16, oh, ow, 16), lambda b, cb, i, j, ci: te.sum(
        x[b, cb, i * s + ry * dil, j * s + rx * dil, ci].astype("int32")
        * w[cb, ry, rx, ci].astype("int32"), axis=[ry, rx]), name="depthwise")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    block = sch.get_sblock("depthwise")
    b, cb, i, j, ci, lry, lrx = sch.get_loops(block)
    jo, ji = sch.split(j, [None, _largest_divisor(ow, TvmVnniPeer.ROW_TILE)])
    sch.reorder(b, cb, i, jo, lry, lrx, ji, ci)
    sch.reverse_compute_at(sch.cache_write(block, 0, "global"), jo)
    sch.parallel(sch.fuse(b, cb, i))
    sch.unroll(ji)
    sch.vectorize(ci)
    sch.decompose_reduction(block, lry)
    run = TVM_VNNI_PEER._runner(sch, [packed_data, packed_weight], (n, c16, oh, ow, 16), threads)
    return lambda: cpu_ops.unpack_window(run(), c)


PEERS: tuple[Peer, ...] = (NumpyPeer(), OnnxRuntimePeer(), TvmPeer())
#: TVM tensorized with vpdpbusd: only in ``ALL_PEERS``, and only available where the probe succeeds.
TVM_VNNI_PEER: TvmVnniPeer = TvmVnniPeer()
#: onnxruntime's requantizing QLinearConv / QLinearMatMul: for timing only (``exact = False``).
QLINEAR_PEER: Peer = OnnxRuntimePeer(qlinear=True)
FP32_PEER: Peer = OnnxRuntimePeer(float32=True)   # PolyDL's setting: fp32 (experiments/polydl.py)
ALL_PEERS: tuple[Peer, ...] = (*PEERS, TVM_VNNI_PEER, QLINEAR_PEER)
