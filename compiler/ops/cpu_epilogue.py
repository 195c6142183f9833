"""The epilogues of a CPU conv2d or GEMM (``compiler.ops.cpu``): what the operator's output goes through
before it is stored.

``fused_epilogue`` ends a lowered operator with a per-channel bias add and an element-wise operator
(``EPILOGUES``: relu, relu6) or a per-channel requantization to 8 bits (``Requantize``: onnxruntime's, for the
quantized models users bring; ``ShiftClip``: a power-of-two network's), one nest fused into the operator by
PolyDL's Algorithm 3; a requantized output is written as 8 bits (``compiler.passes.narrow_output``;
``compiler.ops.network.narrow_type`` says which).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from compiler.errors import ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ops import network, reference
from compiler.passes.fuse_elementwise import fuse_elementwise, fusions
from compiler.passes.narrow_output import narrow_output

#: the element-wise operators a CPU conv2d or GEMM can end with: the loop IR of one element, and numpy's
EPILOGUES = {
    "relu": (lambda x: ir.max_(x, ir.const(0, x.dtype)), lambda a: np.maximum(a, 0)),
    "relu6": (lambda x: ir.min_(ir.max_(x, ir.const(0, x.dtype)), ir.const(6, x.dtype)),
              lambda a: np.clip(a, 0, 6)),
}


@dataclass(frozen=True)
class Requantize:
    """An epilogue that requantizes each int32 sum (plus its bias) to 8 bits as onnxruntime's x86-64 kernels
    do after a QLinearConv's or a QGemm's reduction (MLAS's requantize-output,
    ``reference.requantize_scaled``): converted to float32, times its output channel's float32 scale,
    rounded half to even, plus ``zero_point``, saturated to [``lo``, ``hi``] (uint8's or int8's range, or part
    of it: a fused ReLU's). The 8-bit value is kept in the int32 output."""

    zero_point: int = 0
    lo: int = 0
    hi: int = 255

    def __post_init__(self) -> None:
        network.check_bounds("requantize", self.zero_point, self.lo, self.hi)

    #: the epilogue reads a float32 scale per output channel
    scaled = True

    def expr(self, total: ir.Expr, scale: ir.Expr | None) -> ir.Expr:
        """The loop IR of one element: ``total`` (int32) by ``scale`` (float32)."""
        return network.requantized(total, scale, self.zero_point, self.lo, self.hi)

    def reference(self, total: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        """numpy's result on the int32 ``total`` (``scale`` broadcast over it)."""
        return reference.requantize_scaled(total, scale, self.zero_point, self.lo, self.hi)


@dataclass(frozen=True)
class ShiftClip:
    """An epilogue that requantizes each int32 sum (plus its bias, which holds the rounding constant) to 8
    bits by a power of two, as a power-of-two int8 network does (VTA's rule, tandem/network/quantize.py):
    an arithmetic right shift by ``shift``, then a clip to [``lo``, ``hi``] (int8's range, or a fused ReLU's
    part of it), written as 8 bits (``network.narrow_type``)."""

    shift: int = 8
    lo: int = -128
    hi: int = 127
    scaled = False

    def __post_init__(self) -> None:
        if not -128 <= self.lo <= self.hi <= 127 or not 0 <= self.shift < 31:
            raise ScheduleError(f"shift = {self.shift} must lie in [0, 31) and [LO, HI] = [{self.lo}, "
                                f"{self.hi}] in int8's")

    def expr(self, total: ir.Expr, scale: ir.Expr | None) -> ir.Expr:
        shifted = ir.FloorDiv(total, ir.const(1 << self.shift, total.dtype))
        return ir.min_(ir.max_(shifted, ir.const(self.lo, total.dtype)), ir.const(self.hi, total.dtype))

    def reference(self, total: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        return reference.shift_clip(total, self.shift, bounds=(self.lo, self.hi)).astype(np.int64)


def fused_epilogue(func: ir.PrimFunc, epilogue: str | None, bias_axes: tuple[int, ...] | None,
                   requantize: Requantize | ShiftClip | None = None) -> ir.PrimFunc:
    """``func`` followed by a bias add and ``epilogue`` (a key of ``EPILOGUES``, or None) or ``requantize`` on
    every element of its output, one element-wise nest fused into the operator by PolyDL's Algorithm 3
    (``fuse_elementwise``). ``bias_axes``: the output's axes that index the bias, a new parameter ``bias``
    before the output (None: no bias); ``requantize`` (by a float scale or a shift) needs them: a
    ``Requantize``'s ``scale``, a float32 parameter after the bias, is indexed by the same axes.
    ScheduleError saying why where the nest cannot be fused."""
    if epilogue is not None and requantize is not None:
        raise ScheduleError(f"{func.name}: {epilogue} and requantize are two epilogues; a requantization's "
                            f"bounds hold a ReLU's")
    if requantize is not None and bias_axes is None:
        raise ScheduleError(f"{func.name}: requantize takes a bias (its scale is indexed as the bias is)")
    out = func.params[-1]
    index = tuple(ir.Var(f"e{d}") for d in range(len(out.shape)))
    value, params = out[index], func.params
    if bias_axes is not None:
        per_channel = tuple(out.shape[a] for a in bias_axes)
        bias = ir.Buffer("bias", per_channel, out.dtype)
        value, params = value + bias[tuple(index[a] for a in bias_axes)], (*params[:-1], bias, out)
        if requantize is not None and requantize.scaled:
            scale = ir.Buffer("scale", per_channel, dtypes.dtype("float32"))
            value = requantize.expr(value, scale[tuple(index[a] for a in bias_axes)])
            params = (*params[:-1], scale, out)
        elif requantize is not None:
            value = requantize.expr(value, None)
    if epilogue is not None:
        value = EPILOGUES[epilogue][0](value)
    nest: ir.Stmt = ir.Store(out, index, value)
    for var, extent in reversed(list(zip(index, out.shape, strict=True))):
        nest = ir.For(var, ir.const(0), ir.const(extent), nest)
    both = dataclasses.replace(func, params=params, body=ir.seq(func.body, nest))
    fused = fuse_elementwise(both)
    if fused is both:   # left as it was: say why
        what = " and ".join(x for x in ("bias" if bias_axes is not None else "", epilogue or "",
                                        "requantize" if requantize else "") if x)
        raise ScheduleError(f"the {what} epilogue cannot be fused into {func.name}: {fusions(both)[-1].why}")
    if requantize is not None:   # 8-bit values written as 8 bits
        return narrow_output(fused, network.narrow_type(requantize.lo, requantize.hi))
    return fused
