"""The operators a network needs besides its convolutions and matmuls, written the way a user writes an
operator of their own (tandem/user_ops.py): ``NAME(**params) -> (inputs, output)`` as tensor expressions, and
``NAME_reference(*arrays)``, which calls the one numpy reference (compiler/ops/reference.py).

    residual_add, relu, clip         int32 [C, H, W] element-wise (clip to [LO, HI])
    concat                           int32 [C, H, W] and [C2, H, W] joined along the channels
    max_pool                         int32 [C, H, W], K x K windows S apart
    avg_pool, global_avg_pool        float32 [C, H, W]: the mean of each K x K window, of each channel
    softmax, layer_norm, gelu        float32 [R, D], row by row (layer_norm: also gamma, beta [D])

Targets that compile tensor expressions (the CPU) run them as they run a user's operator.
"""

from __future__ import annotations

import numpy as np

from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ops import reference

OPERATORS = ("residual_add", "relu", "clip", "concat", "max_pool", "avg_pool", "global_avg_pool", "softmax",
             "layer_norm", "gelu")
EPS = 1e-5   # layer_norm's epsilon (ONNX's and PyTorch's default)


def user_op(name: str) -> str:
    """``FILE.py:NAME`` of operator ``name``: how a target's flow runs it, as it runs a user's operator."""
    return f"{__file__}:{name}"


def residual_add(C: int, H: int, W: int):
    a = te.placeholder((C, H, W), "int32", name="a")
    b = te.placeholder((C, H, W), "int32", name="b")
    return [a, b], te.compute((C, H, W), lambda c, y, x: a[c, y, x] + b[c, y, x], name="out")


def residual_add_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return reference.add(a, b).astype(np.int32)   # int32 sums wrap


def relu(C: int, H: int, W: int):
    x = te.placeholder((C, H, W), "int32", name="x")
    return [x], te.compute((C, H, W), lambda c, y, w: ir.Max(x[c, y, w], te.const(0, "int32")), name="out")


def relu_reference(x: np.ndarray) -> np.ndarray:
    return reference.clip(x, 0, None)


def clip(C: int, H: int, W: int, LO: int = 0, HI: int = 127):
    if LO > HI:
        raise ScheduleError(f"clip: LO = {LO} must not exceed HI = {HI}")
    x = te.placeholder((C, H, W), "int32", name="x")
    return [x], te.compute((C, H, W), lambda c, y, w: ir.Min(ir.Max(x[c, y, w], te.const(LO, "int32")),
                                                             te.const(HI, "int32")), name="out")


def clip_reference(x: np.ndarray, LO: int = 0, HI: int = 127) -> np.ndarray:
    return reference.clip(x, LO, HI)


def concat(C: int, H: int, W: int, C2: int = 0):
    """[C, H, W] and [C2, H, W] (C2 = C by default) joined along the channels."""
    c2 = C2 or C
    a = te.placeholder((C, H, W), "int32", name="a")
    b = te.placeholder((c2, H, W), "int32", name="b")
    return [a, b], te.compute((C + c2, H, W), lambda c, y, x: te.if_then_else(
        c < C, a[ir.Min(c, te.const(C - 1, "int32")), y, x], b[ir.Max(c - C, te.const(0, "int32")), y, x]),
        name="out")


def concat_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return reference.concat([a, b], axis=0)


def _windows(name: str, C: int, H: int, W: int, K: int, S: int) -> tuple[int, int]:
    if K > H or K > W:
        raise ScheduleError(f"{name}: a window of K = {K} is larger than the {H} x {W} input")
    return (H - K) // S + 1, (W - K) // S + 1


def max_pool(C: int, H: int, W: int, K: int = 2, S: int = 2):
    oh, ow = _windows("max_pool", C, H, W, K, S)
    x = te.placeholder((C, H, W), "int32", name="x")
    ry, rx = te.reduce_axis(K, "ry"), te.reduce_axis(K, "rx")
    return [x], te.compute((C, oh, ow), lambda c, y, w: te.max(x[c, y * S + ry, w * S + rx], axis=[ry, rx]),
                           name="out")


def max_pool_reference(x: np.ndarray, K: int = 2, S: int = 2) -> np.ndarray:
    return reference.pool2d(x, K, S, "max")


def avg_pool(C: int, H: int, W: int, K: int = 2, S: int = 2):
    oh, ow = _windows("avg_pool", C, H, W, K, S)
    x = te.placeholder((C, H, W), "float32", name="x")
    ry, rx = te.reduce_axis(K, "ry"), te.reduce_axis(K, "rx")
    total = te.compute((C, oh, ow), lambda c, y, w: te.sum(x[c, y * S + ry, w * S + rx], axis=[ry, rx]),
                       name="total")
    return [x], te.compute((C, oh, ow), lambda c, y, w: total[c, y, w] / te.const(float(K * K), "float32"),
                           name="out")


def avg_pool_reference(x: np.ndarray, K: int = 2, S: int = 2) -> np.ndarray:
    return reference.pool2d(x, K, S, "avg")


def global_avg_pool(C: int, H: int, W: int):
    x = te.placeholder((C, H, W), "float32", name="x")
    ry, rx = te.reduce_axis(H, "ry"), te.reduce_axis(W, "rx")
    total = te.compute((C,), lambda c: te.sum(x[c, ry, rx], axis=[ry, rx]), name="total")
    return [x], te.compute((C,), lambda c: total[c] / te.const(float(H * W), "float32"), name="out")


def global_avg_pool_reference(x: np.ndarray) -> np.ndarray:
    return reference.pool2d(x, x.shape[1:], 1, "avg")[:, 0, 0]


def softmax(R: int, D: int):
    """Each row's softmax: the row's maximum subtracted, exponentials, their sum, one division each."""
    x = te.placeholder((R, D), "float32", name="x")
    j, k = te.reduce_axis(D, "j"), te.reduce_axis(D, "k")
    peak = te.compute((R,), lambda r: te.max(x[r, j], axis=j), name="peak")
    e = te.compute((R, D), lambda r, d: te.exp(x[r, d] - peak[r]), name="e")
    total = te.compute((R,), lambda r: te.sum(e[r, k], axis=k), name="total")
    return [x], te.compute((R, D), lambda r, d: e[r, d] / total[r], name="out")


def softmax_reference(x: np.ndarray) -> np.ndarray:
    return reference.softmax(x).astype(np.float32)


def layer_norm(R: int, D: int):
    """Each row normalized by its mean and biased variance (plus EPS), then ``* gamma + beta``."""
    x = te.placeholder((R, D), "float32", name="x")
    gamma = te.placeholder((D,), "float32", name="gamma")
    beta = te.placeholder((D,), "float32", name="beta")
    j, k = te.reduce_axis(D, "j"), te.reduce_axis(D, "k")
    size = te.const(float(D), "float32")
    total = te.compute((R,), lambda r: te.sum(x[r, j], axis=j), name="total")
    centered = te.compute((R, D), lambda r, d: x[r, d] - total[r] / size, name="centered")
    squares = te.compute((R,), lambda r: te.sum(centered[r, k] * centered[r, k], axis=k), name="squares")
    scale = te.compute((R,), lambda r: te.const(1.0, "float32")
                       / te.sqrt(squares[r] / size + te.const(EPS, "float32")), name="scale")
    return [x, gamma, beta], te.compute(
        (R, D), lambda r, d: centered[r, d] * scale[r] * gamma[d] + beta[d], name="out")


def layer_norm_reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    return reference.layer_norm(x, gamma, beta, EPS).astype(np.float32)


def gelu(R: int, D: int):
    """GELU in its tanh form (``reference.gelu_tanh``)."""
    x = te.placeholder((R, D), "float32", name="x")

    def body(r, d):
        v = x[r, d]
        cube = te.const(0.044715, "float32") * v * v * v
        inner = te.const(float(np.sqrt(2.0 / np.pi)), "float32") * (v + cube)
        return te.const(0.5, "float32") * v * (te.const(1.0, "float32") + te.tanh(inner))

    return [x], te.compute((R, D), body, name="out")


def gelu_reference(x: np.ndarray) -> np.ndarray:
    return reference.gelu_tanh(x).astype(np.float32)
