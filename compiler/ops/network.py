"""The operators a network needs besides its convolutions and matmuls, written the way a user writes an
operator of their own (tandem/user_ops.py): ``NAME(**params) -> (inputs, output)`` as tensor expressions, and
``NAME_reference(*arrays)``, which calls the one numpy reference (compiler/ops/reference.py).

    residual_add, relu, clip         int32 [C, H, W] element-wise (clip to [LO, HI])
    concat                           int32 [C, H, W] and [C2, H, W] joined along the channels
    max_pool                         int32 [C, H, W], K x K windows S apart
    avg_pool, global_avg_pool        float32 [C, H, W]: the mean of each K x K window, of each channel

Targets that compile tensor expressions (the CPU) run them as they run a user's operator.
"""

from __future__ import annotations

import numpy as np

from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ops import reference

OPERATORS = ("residual_add", "relu", "clip", "concat", "max_pool", "avg_pool", "global_avg_pool")


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
    return reference.pool2d(x, x.shape[1], 1, "avg")[:, 0, 0]
