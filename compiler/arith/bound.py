"""Sound constant bounds of integer expressions over variable ranges.

``bound_expr(e, ranges)`` returns an ``Interval`` holding every value ``e`` takes when each variable
lies in its range (variables missing from ``ranges`` are unbounded). It works on the linear form, so
terms shared by both sides of a difference cancel (``i - i + 3`` is ``[3, 3]``); atoms are bounded
one by one with interval arithmetic. It is structural: it does not simplify, and it is sound on any
expression (``compiler.arith.bound`` simplifies first, which makes it tighter).

Index dtypes (int32, int64) are mathematical integers. Narrower or unsigned integers wrap in the
IR, so an expression of such a dtype is bounded by its dtype's range (in-range casts excepted).
FloorDiv/FloorMod by a divisor that may be 0 gives the unbounded interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from compiler.arith.float_bounds import float_bounds
from compiler.arith.interval import Interval
from compiler.arith.linear import LinearForm, is_index, linearize
from compiler.ir import (
    Call,
    Cast,
    Expr,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Select,
    Var,
)
from compiler.ir.dtypes import DType

Ranges = Mapping[Var, Interval]
_EVERYTHING = Interval.everything()


def dtype_range(dt: DType) -> Interval:
    """Values a dtype can hold: unbounded for index dtypes and floats."""
    if is_index(dt) or dt.is_float:
        return _EVERYTHING
    return Interval(int(dt.min_value), int(dt.max_value))


def bound_expr(e: Expr, ranges: Ranges) -> Interval:
    lf = linearize(e)
    if lf is None:
        return atom_bound(e, ranges)
    return bound_linear(lf, ranges)


def bound_linear(lf: LinearForm, ranges: Ranges, depth: int = 2) -> Interval:
    """Bound of a linear form; Min/Max atoms are also tried as each of their operands.

    ``c*min(a, b)`` (c > 0) equals ``c*a`` or ``c*b`` and is at most both, so the form lies in
    ``[min(lo_a, lo_b), min(hi_a, hi_b)]`` of the forms with the atom replaced; ``max`` (and
    negative ``c``) mirror that. This keeps correlations, e.g. ``min(i, j) - i <= 0`` for any i, j.
    """
    acc = Interval.point(lf.const)
    for atom, c in lf.terms.items():
        acc = acc + atom_bound(atom, ranges).scale(c)
        if acc.lo is None and acc.hi is None:
            break
    if depth == 0:
        return acc
    for atom, c in lf.terms.items():
        if type(atom) is not Min and type(atom) is not Max:
            continue
        rest = lf - LinearForm({atom: c}, 0, lf.dtype)
        ba, bb = (
            bound_linear(rest + linearize(x).scale(c), ranges, depth - 1) for x in (atom.a, atom.b)
        )
        lower_side = (type(atom) is Min) == (c > 0)  # behaves like min(c*a, c*b)
        acc = acc.intersect(ba.min(bb) if lower_side else ba.max(bb)) or acc
    return acc


def atom_bound(e: Expr, ranges: Ranges) -> Interval:
    """Bound of one node (its children are bounded with ``bound_expr``)."""
    t = type(e)
    dt = e.dtype
    if t is IntImm:
        return Interval.point(e.value)
    if t is Var:
        own = dtype_range(dt)
        given = ranges.get(e)
        if given is None:
            return own
        return given.intersect(own) or given
    if t is Cast:
        return _cast_bound(e, ranges)
    if t is Select or (t is Call and e.name == "if_then_else"):
        cond, a, b = (e.cond, e.true_value, e.false_value) if t is Select else e.args
        if isinstance(cond, IntImm):
            return bound_expr(a if cond.value else b, ranges)
        if not (dt.is_int or dt.is_bool):
            return _EVERYTHING
        return bound_expr(a, ranges).union(bound_expr(b, ranges))
    if dt.is_bool:
        return Interval(0, 1)
    if not is_index(dt):
        return dtype_range(dt)
    if t is Mul:
        return bound_expr(e.a, ranges) * bound_expr(e.b, ranges)
    if t is FloorDiv:
        return bound_expr(e.a, ranges).floordiv(bound_expr(e.b, ranges))
    if t is FloorMod:
        return bound_expr(e.a, ranges).floormod(bound_expr(e.b, ranges))
    if t is Min:
        return bound_expr(e.a, ranges).min(bound_expr(e.b, ranges))
    if t is Max:
        return bound_expr(e.a, ranges).max(bound_expr(e.b, ranges))
    lf = linearize(e)
    if lf is not None and lf.terms != {e: 1}:  # Add/Sub reached directly
        return bound_linear(lf, ranges)
    return _EVERYTHING  # Load, other calls, Reduce: no information


def _cast_bound(e: Cast, ranges: Ranges) -> Interval:
    target = e.type
    if not (target.is_int or target.is_bool):
        return _EVERYTHING
    src_dt = e.value.dtype
    src = bound_expr(e.value, ranges) if src_dt.is_int or src_dt.is_bool else _float_source(e.value)
    exact = Interval(int(target.min_value), int(target.max_value))
    if target.is_bool:
        return Interval(0, 1) if not src.is_const else Interval.point(int(src.lo != 0))
    if src.within(exact):  # the value fits: the cast changes nothing
        return src
    return dtype_range(target)


def _float_source(value: Expr) -> Interval:
    """A float converted to an integer (truncated toward zero): within the truncations of its bounds
    (``float_bounds``: unless it is nan, which a conversion does not give a value for)."""
    bounds = float_bounds(value) if value.dtype.is_float else None
    if bounds is None or not all(math.isfinite(b) for b in bounds):
        return _EVERYTHING
    return Interval(math.trunc(bounds[0]), math.trunc(bounds[1]))
