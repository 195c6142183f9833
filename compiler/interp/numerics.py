"""The interpreter's scalar numerics: rounding to each float dtype, int -> float conversion, IEEE division,
min/max with numpy's NaN and signed-zero rules, and the comparison operators of the IR's comparison nodes."""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from compiler.ir import dtypes
from compiler.ir import nodes as n
from compiler.ir.dtypes import DType

_F32 = struct.Struct("=f")
_F16 = struct.Struct("=e")
_U32 = struct.Struct("=I")


def _round_f32(x: float) -> float:
    """``round_to(x, float32)``; struct's C cast rounds to nearest even and reports overflow."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return _round_overflow(x, dtypes.float32)


def _round_f16(x: float) -> float:
    """``round_to(x, float16)``; struct packs halves rounding to nearest even."""
    try:
        return _F16.unpack(_F16.pack(x))[0]
    except OverflowError:
        return _round_overflow(x, dtypes.float16)


def _round_overflow(x: float, dt: DType) -> float:
    """``round_to`` for values past the dtype's range (+-inf), without numpy's overflow warning."""
    with np.errstate(over="ignore"):
        return dtypes.round_to(x, dt)


def round_bf16(x: float) -> float:
    """``round_to(x, bfloat16)``: round to float32, then ``dtypes.round_bfloat16`` on its bits."""
    f = _round_f32(x)
    if f != f:
        return f
    (bits,) = _U32.unpack(_F32.pack(f))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return _F32.unpack(_U32.pack(bits))[0]


def rounder(dt: DType) -> Callable[[float], float]:
    if dt == dtypes.float32:
        return _round_f32
    if dt == dtypes.float16:
        return _round_f16
    if dt == dtypes.bfloat16:
        return round_bf16
    return lambda x: dtypes.round_to(x, dt)


def fma_rounded(a: float, b: float, c: float, dt: DType) -> float:
    """``a * b + c`` computed exactly and rounded once to ``dt`` (to nearest, ties to even), as a fused
    multiply-add instruction rounds it; not finite inputs as IEEE arithmetic has them."""
    if not all(math.isfinite(x) for x in (a, b, c)):
        return rounder(dt)(a * b + c)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    near = rounder(dt)(float(exact))   # rounded twice (to float64 first): at most one step off
    if not math.isfinite(near):
        return near
    t = np.dtype(dt.numpy)
    steps = [float(np.nextafter(t.type(near), t.type(-np.inf))), near,
             float(np.nextafter(t.type(near), t.type(np.inf)))]
    bits = np.dtype(f"u{t.itemsize}")
    return min(steps, key=lambda v: (abs(Fraction(v) - exact), int(np.array(v, t).view(bits)) & 1))


#: Significand bits (with the implicit one) of each float dtype.
_PRECISION = {dtypes.float32: 24, dtypes.float16: 11, dtypes.bfloat16: 8}


def int_to_float(value: int, dt: DType) -> float:
    """The float of ``dt`` nearest to the integer ``value`` (ties to even), in one rounding."""
    magnitude = abs(value)
    extra = magnitude.bit_length() - _PRECISION[dt]
    if extra > 0:
        q, r = magnitude >> extra, magnitude & ((1 << extra) - 1)
        half = 1 << (extra - 1)
        if r > half or (r == half and q & 1):
            q += 1
        magnitude = q << extra  # at most PRECISION + 1 significant bits: exact as a double
    result = float(-magnitude if value < 0 else magnitude)
    return _round_overflow(result, dt)  # exact, or +-inf past the dtype's range


def ieee_div(a: float, b: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


def fmin(a: float, b: float) -> float:
    """np.minimum: a NaN operand is the result (the first if both are); of two equal values, the second."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a < b else b


def fmax(a: float, b: float) -> float:
    """np.maximum: a NaN operand is the result (the first if both are); of two equal values, the second."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a > b else b


def imin(a: int, b: int) -> int:
    return b if b < a else a


def imax(a: int, b: int) -> int:
    return b if b > a else a


COMPARE = {
    n.EQ: operator.eq,
    n.NE: operator.ne,
    n.LT: operator.lt,
    n.LE: operator.le,
    n.GT: operator.gt,
    n.GE: operator.ge,
}
