"""Affine forms of integer index expressions: ``sum(coef * atom) + const``.

An *index dtype* is a signed integer of 32 or more bits (int32, int64); its arithmetic is treated as
arithmetic on mathematical integers. ``linearize`` splits such an expression structurally at
``+``, ``-`` and multiplication by a constant; every other subexpression (a Var, FloorDiv, FloorMod,
Min, Max, a product of two non-constants, Load, Cast, Select, ...) becomes an *atom*. Atoms compare
with ``==`` (structural, Vars by identity). Terms keep the order in which their atoms first appear.

``LinearForm.to_expr`` rebuilds a printing-friendly expression: terms in order, constant last,
``atom*c`` for a coefficient ``c``, subtraction for negative coefficients. The first positive
term leads; with no positive term a positive constant leads (``10 - i``), else ``0`` does
(``0 - i - 3``).

Non-Goals: simplifying atoms (``compiler.arith.simplify`` does that before calling ``linearize``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir import Add, Expr, IntImm, Mul, Sub, dtypes
from compiler.ir.dtypes import DType


def is_index(dt: DType) -> bool:
    """True for the dtypes whose expressions this package reasons about exactly (int32, int64)."""
    return dt.kind == "int" and dt.bits >= 32


def imm(value: int, dt: DType) -> IntImm:
    """An integer constant of dtype ``dt`` (wrapped to its width like the IR's own arithmetic)."""
    return IntImm(dtypes.wrap_int(value, dt), dt)


@dataclass(frozen=True, slots=True)
class LinearForm:
    """``sum(coef * atom for atom, coef in terms.items()) + const``, all of dtype ``dtype``.

    ``terms`` is insertion-ordered and holds no zero coefficient; treat it as read-only.
    """

    terms: dict[Expr, int] = field(default_factory=dict)
    const: int = 0
    dtype: DType = dtypes.int32

    @staticmethod
    def constant(value: int, dt: DType = dtypes.int32) -> LinearForm:
        return LinearForm({}, value, dt)

    @staticmethod
    def atom(e: Expr) -> LinearForm:
        return LinearForm({e: 1}, 0, e.dtype)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, atom: Expr) -> int:
        return self.terms.get(atom, 0)

    def _combine(self, other: LinearForm, sign: int) -> LinearForm:
        if self.dtype != other.dtype:
            raise TypeError(f"LinearForm: dtypes differ ({self.dtype} vs {other.dtype})")
        terms = dict(self.terms)
        for a, c in other.terms.items():
            v = terms.get(a, 0) + sign * c
            if v:
                terms[a] = v
            else:
                terms.pop(a, None)
        return LinearForm(terms, self.const + sign * other.const, self.dtype)

    def __add__(self, other: LinearForm) -> LinearForm:
        return self._combine(other, 1)

    def __sub__(self, other: LinearForm) -> LinearForm:
        return self._combine(other, -1)

    def __neg__(self) -> LinearForm:
        return self.scale(-1)

    def scale(self, c: int) -> LinearForm:
        if c == 0:
            return LinearForm({}, 0, self.dtype)
        return LinearForm({a: k * c for a, k in self.terms.items()}, self.const * c, self.dtype)

    def shift(self, c: int) -> LinearForm:
        return LinearForm(self.terms, self.const + c, self.dtype)

    def exact_div(self, g: int) -> LinearForm:
        """Divide every coefficient and the constant by ``g``, which must divide them all."""
        assert g > 0 and self.const % g == 0 and all(k % g == 0 for k in self.terms.values())
        return LinearForm({a: k // g for a, k in self.terms.items()}, self.const // g, self.dtype)

    def to_expr(self) -> Expr:
        """Rebuild the expression (see the module docstring for its shape)."""
        dt = self.dtype
        items = list(self.terms.items())
        if not items:
            return imm(self.const, dt)
        first = next((i for i, (_, c) in enumerate(items) if c > 0), None)
        const_done = False
        if first is not None:
            atom, c = items.pop(first)
            acc = _term(atom, c)
        else:
            const_done = self.const > 0
            acc = imm(self.const if const_done else 0, dt)
        for atom, c in items:
            acc = Add(acc, _term(atom, c)) if c > 0 else Sub(acc, _term(atom, -c))
        if self.const and not const_done:
            acc = (
                Add(acc, imm(self.const, dt)) if self.const > 0 else Sub(acc, imm(-self.const, dt))
            )
        return acc

    def __str__(self) -> str:
        return str(self.to_expr())


def _term(atom: Expr, c: int) -> Expr:
    return atom if c == 1 else Mul(atom, imm(c, atom.dtype))


def linearize(e: Expr) -> LinearForm | None:
    """The structural affine form of ``e``, or None when ``e`` is not of an index dtype."""
    if not is_index(e.dtype):
        return None
    return _lin(e)


def _lin(e: Expr) -> LinearForm:
    t = type(e)
    if t is IntImm:
        return LinearForm({}, e.value, e.dtype)
    if t is Add:
        return _lin(e.a) + _lin(e.b)
    if t is Sub:
        return _lin(e.a) - _lin(e.b)
    if t is Mul:
        la, lb = _lin(e.a), _lin(e.b)
        if lb.is_const:
            return la.scale(lb.const)
        if la.is_const:
            return lb.scale(la.const)
    return LinearForm.atom(e)
