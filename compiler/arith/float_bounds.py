"""Bounds of a float expression of the loop IR, but for nan: what a float cast to an integer needs no range
check for (compiler/backend/llvm_emit.py's ``expr_Cast``).

A requantizing epilogue clamps its float value by constants before it converts it, ``min(max(x, lo), hi)``,
and adds and takes off a rounding constant: whatever ``x`` is (but nan), the value lies in [lo, hi] widened
by the roundings. ``float_bounds`` follows constants, integers converted to float, sums, differences and
minima and maxima; anything else is unbounded (None). The round-to-nearest idiom ``(x + R) - R`` (R = 1.5 *
2**23, ``compiler.ops.network._rounded``) of an ``x`` within 2**22 is an integer, exact: bounded by the
integers around ``x``'s bounds (what lets a requantized value be proved to fit 8 bits). ``never_nan``
says where a value cannot be nan: a clamp written as x86's maxps (``x > c ? x : c``, MLAS's) sends a nan
to ``c``, and a conversion of its result to an integer then needs no check at all.

Non-Goals: nan (a clamp by constants keeps a nan operand, numpy's rule: the caller checks it), products and
quotients, tight bounds.
"""

from __future__ import annotations

import math

from compiler.ir import nodes as n

#: a float32 operation's result is within this relative distance of the exact one (round to nearest: half
#: an ulp), plus the smallest subnormal absolutely
_ROUNDING, _TINY = 2.0 ** -24, 2.0 ** -149
#: 1.5 * 2**23: ``(x + R) - R`` rounds a float32 ``x`` with ``|x| <= 2**22`` to the nearest integer, exactly
#: (``x + R`` lies in [2**23, 2**24), where float32's spacing is 1; the difference is exact, Sterbenz's lemma)
_ROUNDER, _ROUNDS = 12582912.0, 2.0 ** 22


def float_bounds(e: n.Expr) -> tuple[float, float] | None:
    """Bounds that float expression ``e`` lies within unless it is nan, or None where they are not known:
    constants, integers converted, and the sums, differences, minima and maxima of bounded operands (a
    clamp by constants: ``min(max(x, lo), hi)`` lies in [lo, hi] whatever ``x`` is but nan), each widened
    by its rounding. What a float cast to an integer needs no range check for (``expr_Cast``)."""
    if isinstance(e, n.FloatImm):
        return e.value, e.value
    if isinstance(e, n.Cast) and e.value.dtype.is_int:
        lo, hi = float(e.value.dtype.min_value), float(e.value.dtype.max_value)
        return lo - abs(lo) * _ROUNDING, hi + abs(hi) * _ROUNDING
    if isinstance(e, n.Min | n.Max):
        a, c = float_bounds(e.a), float_bounds(e.b)
        if isinstance(e, n.Min) and (a or c):   # below the smaller upper bound whatever the other operand
            ups = [x[1] for x in (a, c) if x]
            return (min(a[0], c[0]) if a and c else -math.inf), min(ups)
        if isinstance(e, n.Max) and (a or c):
            downs = [x[0] for x in (a, c) if x]
            return max(downs), (max(a[1], c[1]) if a and c else math.inf)
        return None
    rounded = _rounded(e)
    if rounded is not None:
        return rounded
    clamp = _clamp(e)
    if clamp is not None:   # x > c ? x : c, at least c whatever x is
        low, x = clamp
        inner = float_bounds(x)
        return low, (max(low, inner[1]) if inner else math.inf)
    if isinstance(e, n.Add | n.Sub):
        a, c = float_bounds(e.a), float_bounds(e.b)
        if a is None or c is None:
            return None
        lo, hi = (a[0] + c[0], a[1] + c[1]) if isinstance(e, n.Add) else (a[0] - c[1], a[1] - c[0])
        slack = max(abs(lo), abs(hi)) * _ROUNDING + _TINY
        return lo - slack, hi + slack
    return None


def rounded_operand(e: n.Expr) -> n.Expr | None:
    """``x`` where ``e`` is ``(x + R) - R`` (``_ROUNDER``) and ``x``'s bounds lie within 2**22: ``e`` is then
    ``x`` rounded half to even, exactly (what one conversion in the default rounding mode computes,
    ``llvm.lrint``); None for any other expression."""
    if not (isinstance(e, n.Sub) and isinstance(e.a, n.Add) and e.dtype.bits == 32 and
            all(isinstance(c, n.FloatImm) and c.value == _ROUNDER for c in (e.b, e.a.b))):
        return None
    inner = float_bounds(e.a.a)
    return e.a.a if inner is not None and -_ROUNDS <= inner[0] <= inner[1] <= _ROUNDS else None


def _rounded(e: n.Expr) -> tuple[float, float] | None:
    """The bounds of ``(x + R) - R`` (``rounded_operand``): the integers around ``x``'s; None for another
    expression."""
    x = rounded_operand(e)
    if x is None:
        return None
    inner = float_bounds(x)
    return float(math.floor(inner[0])), float(math.ceil(inner[1]))


def _clamp(e: n.Expr) -> tuple[float, n.Expr] | None:
    """``(c, x)`` for ``x > c ? x : c`` (``Select``; a constant ``c`` that is not nan): x86's maxps, which
    gives ``c`` for a nan ``x``; None for another expression."""
    if not isinstance(e, n.Select) or not isinstance(e.cond, n.GT | n.GE):
        return None
    x, c = e.cond.a, e.cond.b
    constant = isinstance(c, n.FloatImm) and not math.isnan(c.value)
    if not (constant and e.true_value == x and e.false_value == c):
        return None
    return c.value, x


def never_nan(e: n.Expr) -> bool:
    """Whether float expression ``e`` is never nan: a constant that is not, an integer converted, a clamp
    ``x > c ? x : c`` (``_clamp``), the minimum or maximum of two such, and the sum or difference of two such
    with finite bounds (``float_bounds``); False where not known."""
    if isinstance(e, n.FloatImm):
        return not math.isnan(e.value)
    if isinstance(e, n.Cast):
        return e.value.dtype.is_int
    if _clamp(e) is not None:
        return True
    if isinstance(e, n.Min | n.Max):
        return never_nan(e.a) and never_nan(e.b)
    if isinstance(e, n.Add | n.Sub):
        bounds = [float_bounds(x) for x in (e.a, e.b)]
        return never_nan(e.a) and never_nan(e.b) and all(b is not None and all(map(math.isfinite, b))
                                                            for b in bounds)
    return False
