"""Simplify expressions: canonical affine index arithmetic, range-aware div/mod/min/max, folding.

Index expressions (int32/int64, mathematical integers) are rebuilt from their linear form (see
``compiler.arith.linear`` for the printed shape): ``(tid*4 + i)*14 + j -> tid*56 + i*14 + j``,
``x*0 -> 0``, ``x - x -> 0``. FloorDiv/FloorMod by positive constants follow
``compiler.arith.divmod``; Min/Max pick a side when the bound of the difference decides; a
comparison becomes ``True``/``False`` when the ranges decide it, and otherwise keeps the left side's
terms on the left with the constants moved right (``x + 1 < 5 -> x < 4``). And/Or/Not/Select and
``if_then_else`` fold constant operands; casts of integer constants fold (wrapping to the target
width); a shift by a constant amount becomes the FloorDiv or Mul ``compiler.ir.shifts`` builds.

Other dtypes only get constant folding of pure-constant integer subtrees (wrapping) and bool logic;
float arithmetic is never changed. ``simplify`` is idempotent and preserves values for every
assignment of the variables within ``var_ranges``.
"""

from __future__ import annotations

from collections.abc import Mapping

from compiler.arith.bound import Ranges, atom_bound, bound_expr, bound_linear
from compiler.arith.compare import FLIPPED, NEGATED, decide_compare
from compiler.arith.divmod import floordiv_lf, floormod_lf, merge_divmod
from compiler.arith.interval import Interval
from compiler.arith.linear import LinearForm, imm, is_index, linearize
from compiler.errors import IRTypeError
from compiler.ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Call,
    Cast,
    Div,
    Expr,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Load,
    Max,
    Min,
    Mul,
    Not,
    Or,
    Reduce,
    Select,
    Shl,
    Shr,
    Sub,
    Var,
    dtypes,
    shifts,
)

_TRUE = IntImm(1, dtypes.bool_)
_FALSE = IntImm(0, dtypes.bool_)
_ARITH = (Add, Sub, Mul, Div, FloorDiv, FloorMod, Min, Max, Shr, Shl)
_COMPARE = (EQ, NE, LT, LE, GT, GE)


def check_ranges(
    fn: str, var_ranges: Mapping[Var, Interval] | None, arg: str = "var_ranges"
) -> Ranges:
    """Validate a ``VarRanges`` argument at the API boundary; None means no ranges."""
    if var_ranges is None:
        return {}
    if not isinstance(var_ranges, Mapping):
        raise IRTypeError(
            f"{fn}: {arg}: expected a mapping Var -> Interval, but got {var_ranges!r}"
        )
    for v, iv in var_ranges.items():
        if not isinstance(v, Var):
            raise IRTypeError(f"{fn}: {arg}: expected Var keys, but got {v!r}")
        if not isinstance(iv, Interval):
            raise IRTypeError(
                f"{fn}: {arg}: expected an Interval for '{v.name}', but got {iv!r}"
                " (build one with Interval.from_extent(min, extent))"
            )
    return var_ranges


def simplify(expr: Expr, var_ranges: Mapping[Var, Interval] | None = None) -> Expr:
    """Simplify ``expr`` assuming each variable of ``var_ranges`` lies in its interval."""
    if not isinstance(expr, Expr):
        raise IRTypeError(f"simplify: expected an IR expression, but got {expr!r}")
    return Simplifier(check_ranges("simplify", var_ranges)).visit(expr)


def linear_form(expr: Expr) -> LinearForm | None:
    """The canonical affine form of ``expr`` (atoms simplified), or None for a non-index dtype."""
    if not isinstance(expr, Expr):
        raise IRTypeError(f"linear_form: expected an IR expression, but got {expr!r}")
    if not is_index(expr.dtype):
        return None
    return linearize(simplify(expr))


def bound(expr: Expr, var_ranges: Mapping[Var, Interval] | None = None) -> Interval:
    """A sound interval of the integer (or bool) ``expr`` over ``var_ranges``.

    The expression is simplified under the ranges first (which tightens the bound), then bounded
    with ``compiler.arith.bound.bound_expr``. Division or modulo by something that may be 0 is
    unbounded, as are narrowing casts of out-of-range values to int32/int64.
    """
    if not isinstance(expr, Expr) or not (expr.dtype.is_int or expr.dtype.is_bool):
        shown = f"'{expr}' of dtype {expr.dtype}" if isinstance(expr, Expr) else repr(expr)
        raise IRTypeError(f"bound: expected an integer expression, but got {shown}")
    ranges = check_ranges("bound", var_ranges)
    return bound_expr(simplify(expr, ranges), ranges)


class Simplifier:
    """Simplification under fixed variable ranges; ``visit`` returns the simplified expression."""

    def __init__(self, ranges: Ranges) -> None:
        self.ranges = ranges

    def visit(self, e: Expr) -> Expr:
        if is_index(e.dtype):
            lf = self.lin(e)
            b = bound_linear(lf, self.ranges)
            out = imm(b.lo, e.dtype) if b.is_const else lf.to_expr()
            return e if out == e else out  # keep unchanged subtrees shared
        return self.visit_node(e)

    # index arithmetic ----------------------------------------------------------------------------
    def lin(self, e: Expr) -> LinearForm:
        """The simplified linear form of an index expression."""
        t = type(e)
        if t is IntImm:
            return LinearForm.constant(e.value, e.dtype)
        if t is Add or t is Sub:
            la, lb = self.lin(e.a), self.lin(e.b)
            out = la + lb if t is Add else la - lb
            if any(type(a) is FloorDiv for a in out.terms):
                out = merge_divmod(out, self.ranges)
            return out
        if t is Mul:
            la, lb = self.lin(e.a), self.lin(e.b)
            if lb.is_const:
                return la.scale(lb.const)
            if la.is_const:
                return lb.scale(la.const)
            return LinearForm.atom(Mul(la.to_expr(), lb.to_expr()))
        if t is FloorDiv or t is FloorMod:
            return self._divmod(e)
        if t is Min or t is Max:
            return self._minmax(e)
        s = e if t is Var else self.visit_node(e)
        b = atom_bound(s, self.ranges)
        if b.is_const:
            return LinearForm.constant(b.lo, e.dtype)
        return linearize(s)

    def _divmod(self, e: FloorDiv | FloorMod) -> LinearForm:
        la, lb = self.lin(e.a), self.lin(e.b)
        is_div = type(e) is FloorDiv
        if lb.is_const and lb.const > 0:
            rule = floordiv_lf if is_div else floormod_lf
            return rule(la, lb.const, self.ranges)
        if lb.is_const and la.is_const and lb.const != 0:
            q, r = divmod(la.const, lb.const)
            return LinearForm.constant(q if is_div else r, e.dtype)
        return LinearForm.atom(type(e)(la.to_expr(), lb.to_expr()))

    def _minmax(self, e: Min | Max) -> LinearForm:
        la, lb = self.lin(e.a), self.lin(e.b)
        b = bound_linear(la - lb, self.ranges)
        a_first = type(e) is Min
        if b.hi is not None and b.hi <= 0:  # a <= b
            return la if a_first else lb
        if b.lo is not None and b.lo >= 0:  # a >= b
            return lb if a_first else la
        return LinearForm.atom(type(e)(la.to_expr(), lb.to_expr()))

    # everything else -----------------------------------------------------------------------------
    def visit_node(self, e: Expr) -> Expr:
        t = type(e)
        if t is IntImm or t is FloatImm or t is Var:
            return e
        if t in _ARITH:
            return self._fold_arith(e)
        if t in _COMPARE:
            return self._compare(e)
        if t is And or t is Or:
            return self._logic(e)
        if t is Not:
            return self._not(e)
        if t is Select:
            return self._select(e, e.cond, e.true_value, e.false_value)
        if t is Call:
            args = tuple(self.visit(a) for a in e.args)
            if e.name == "if_then_else":
                picked = _pick_branch(*args)
                if picked is not None:
                    return picked
            return e if _same(args, e.args) else Call(e.name, args, e.type)
        if t is Cast:
            return self._cast(e)
        if t is Load:
            idx = tuple(self.visit(i) for i in e.indices)
            return e if _same(idx, e.indices) else Load(e.buffer, idx)
        if t is Reduce:
            axis = {
                v: Interval.from_extent(lo, ext)
                for v, (lo, ext) in zip(e.axis, e.ranges, strict=True)
            }
            src = Simplifier({**self.ranges, **axis}).visit(e.source)
            return e if src is e.source else Reduce(e.combiner, src, e.axis, e.ranges)
        raise NotImplementedError(f"simplify: no case for {t.__name__}")

    def _fold_arith(self, e: Expr) -> Expr:
        """Non-index arithmetic: fold two integer constants, never touch float arithmetic; a shift whose
        amount became a constant in range is rebuilt as ``shifts.shift`` builds it (FloorDiv/Mul by a power
        of two)."""
        a, b = self.visit(e.a), self.visit(e.b)
        t = type(e)
        if isinstance(a, IntImm) and isinstance(b, IntImm):
            v = shifts.shifted(t, a.value, b.value, e.dtype) if t in shifts.OPERATOR else \
                _fold_int(t, a.value, b.value)
            if v is not None:
                return IntImm(dtypes.wrap_int(v, e.dtype), e.dtype)
        if t in shifts.OPERATOR and isinstance(b, IntImm) and 0 <= b.value < e.dtype.bits:
            out = shifts.shift(shifts.OPERATOR[t], a, b)
            if type(out) is not t:
                return self.visit(out)
        return e if a is e.a and b is e.b else t(a, b)

    def _compare(self, e: Expr) -> Expr:
        op = type(e)
        if is_index(e.a.dtype):
            la, lb = self.lin(e.a), self.lin(e.b)
            diff = la - lb
            if any(type(a) is FloorDiv for a in diff.terms):
                diff = merge_divmod(diff, self.ranges)
            decided = decide_compare(op, diff, self.ranges)
            if decided is not None:
                return _TRUE if decided else _FALSE
            return _normalize_compare(op, la, diff)
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(a, IntImm) and isinstance(b, IntImm):
            return _TRUE if _CMP[op](a.value, b.value) else _FALSE
        return e if a is e.a and b is e.b else op(a, b)

    def _logic(self, e: And | Or) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        absorbing = 0 if type(e) is And else 1  # False absorbs And, True absorbs Or
        for x, y in ((a, b), (b, a)):
            if isinstance(x, IntImm):
                return x if x.value == absorbing else y
        if a == b:
            return a
        return e if a is e.a and b is e.b else type(e)(a, b)

    def _not(self, e: Not) -> Expr:
        a = self.visit(e.a)
        if isinstance(a, IntImm):
            return _FALSE if a.value else _TRUE
        if isinstance(a, Not):
            return a.a
        if type(a) in NEGATED and is_index(a.a.dtype):
            return NEGATED[type(a)](a.a, a.b)
        return e if a is e.a else Not(a)

    def _select(self, e: Select, cond: Expr, t: Expr, f: Expr) -> Expr:
        c, tv, fv = self.visit(cond), self.visit(t), self.visit(f)
        picked = _pick_branch(c, tv, fv)
        if picked is not None:
            return picked
        return e if (c, tv, fv) == (cond, t, f) else Select(c, tv, fv)

    def _cast(self, e: Cast) -> Expr:
        v = self.visit(e.value)
        if v.dtype == e.type:
            return v
        if isinstance(v, IntImm) and (e.type.is_int or e.type.is_bool):
            return IntImm(dtypes.wrap_int(v.value, e.type), e.type)
        return e if v is e.value else Cast(v, e.type)


def _pick_branch(c: Expr, t: Expr, f: Expr) -> Expr | None:
    if isinstance(c, IntImm):
        return t if c.value else f
    if t == f:
        return t
    return None


def _same(new: tuple, old: tuple) -> bool:
    return all(a is b for a, b in zip(new, old, strict=True))  # visit returns unchanged nodes


def _normalize_compare(op: type, la: LinearForm, diff: LinearForm) -> Expr:
    """Rebuild ``op(diff, 0)``: terms that came from the left side stay left, the rest go right.

    With no left terms the constant stays left (``5 < y``); when every left coefficient is negative
    both sides are negated and the comparison flipped (``x > -3`` rather than ``0 - x < 3``).
    """
    left = {a: k for a, k in diff.terms.items() if a in la.terms}
    right = {a: -k for a, k in diff.terms.items() if a not in la.terms}
    dt = diff.dtype
    if not left:
        return op(LinearForm.constant(diff.const, dt).to_expr(), LinearForm(right, 0, dt).to_expr())
    const = -diff.const
    if all(k < 0 for k in left.values()):
        op = FLIPPED[op]
        left = {a: -k for a, k in left.items()}
        right = {a: -k for a, k in right.items()}
        const = -const
    return op(LinearForm(left, 0, dt).to_expr(), LinearForm(right, const, dt).to_expr())


def _fold_int(op: type, a: int, b: int) -> int | None:
    if op is Add:
        return a + b
    if op is Sub:
        return a - b
    if op is Mul:
        return a * b
    if op is Min:
        return min(a, b)
    if op is Max:
        return max(a, b)
    if op is FloorDiv and b != 0:
        return a // b
    if op is FloorMod and b != 0:
        return a % b
    return None


_CMP = {
    EQ: lambda a, b: a == b,
    NE: lambda a, b: a != b,
    LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b,
    GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b,
}
