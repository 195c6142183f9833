"""Symbolic interval relaxation, the core of bound inference.

``relax(expr, relaxed, var_ranges)`` returns ``(min_expr, extent)`` such that for every assignment
of the ``relaxed`` variables within ``relaxed`` and of the other variables within ``var_ranges``:

    min_expr <= expr <= min_expr + extent - 1

``min_expr`` mentions no relaxed variable and is simplified; ``extent`` is an int >= 1.

For ``expr`` affine in the relaxed variables with constant coefficients the answer is exact:
``extent = sum(|c_k| * (hi_k - lo_k)) + 1`` and ``min_expr`` is the non-relaxed part plus
``sum(c_k * (lo_k if c_k > 0 else hi_k))``. A non-affine atom that depends on relaxed variables is
bounded as a whole with constant bounds over ``relaxed`` and ``var_ranges``; a FloorDiv/FloorMod by
a positive constant may instead keep a symbolic minimum when that gives a smaller extent, e.g.
``(fo*8 + fi)//14`` over ``fi`` in [0, 8) is ``(fo*4)//7`` with extent 2 however large ``fo`` is.

Rewrite:  relax(i*4 + j, {j: [0, 3]})  ->  (i*4, 4)
Checks:   a needed range that is unbounded raises ``LoweringError`` naming the expression and the
          variable.
"""

from __future__ import annotations

from collections.abc import Mapping

from compiler.arith.bound import Ranges, atom_bound
from compiler.arith.divmod import floordiv_lf
from compiler.arith.interval import Interval
from compiler.arith.linear import LinearForm, is_index, linearize
from compiler.arith.simplify import check_ranges, simplify
from compiler.errors import IRTypeError, LoweringError
from compiler.ir import Expr, FloorDiv, FloorMod, IntImm, Var, free_vars


def relax(
    expr: Expr,
    relaxed: Mapping[Var, Interval],
    var_ranges: Mapping[Var, Interval] | None = None,
) -> tuple[Expr, int]:
    """Bound ``expr`` over the ``relaxed`` variables by ``(min_expr, extent)`` (see module doc)."""
    if not isinstance(expr, Expr) or not is_index(expr.dtype):
        shown = f"'{expr}' of dtype {expr.dtype}" if isinstance(expr, Expr) else repr(expr)
        raise IRTypeError(f"relax: expected an int32/int64 index expression, but got {shown}")
    relaxed = check_ranges("relax", relaxed, "relaxed")
    outer = check_ranges("relax", var_ranges)
    r = _Relaxer(expr, relaxed, outer)
    low, extent = r.relax_lf(linearize(simplify(expr, r.all)))
    return simplify(low.to_expr(), outer), extent


class _Relaxer:
    def __init__(self, expr: Expr, relaxed: Ranges, outer: Ranges) -> None:
        self.expr = expr
        self.relaxed = relaxed
        self.outer = outer
        self.all = {**outer, **relaxed}

    def relax_lf(self, e: LinearForm) -> tuple[LinearForm, int]:
        """``(low, extent)`` of ``e``: ``low`` is free of relaxed variables."""
        low = LinearForm.constant(e.const, e.dtype)
        span = 0  # extent - 1
        for atom, c in e.terms.items():
            if not any(v in self.relaxed for v in free_vars(atom)):
                low = low + LinearForm({atom: c}, 0, e.dtype)
                continue
            a_low, a_ext = self._relax_var(atom) if type(atom) is Var else self._relax_atom(atom)
            # c*atom lies in [c*a_low, c*(a_low + a_ext - 1)] (ends swapped when c < 0)
            low = low + a_low.scale(c)
            if c < 0:
                low = low.shift(c * (a_ext - 1))
            span += abs(c) * (a_ext - 1)
        return low, span + 1

    def _relax_var(self, v: Var) -> tuple[LinearForm, int]:
        iv = self.relaxed[v]
        if not iv.is_bounded:
            where = f"relax: cannot bound '{self.expr}'"
            raise LoweringError(
                f"{where}: relaxed variable '{v.name}' has the unbounded range {iv}"
            )
        return LinearForm.constant(iv.lo, v.dtype), iv.hi - iv.lo + 1

    def _relax_atom(self, atom: Expr) -> tuple[LinearForm, int]:
        """The tightest of a constant bound and, for div/mod by a constant, a symbolic one."""
        options: list[tuple[LinearForm, int]] = []
        b = atom_bound(atom, self.all)
        if b.is_bounded:
            options.append((LinearForm.constant(b.lo, atom.dtype), b.hi - b.lo + 1))
        if type(atom) in (FloorDiv, FloorMod) and isinstance(atom.b, IntImm) and atom.b.value > 0:
            try:
                inner = self.relax_lf(linearize(atom.a))
            except LoweringError:
                inner = None
            if inner is not None:
                make = _relax_floordiv if type(atom) is FloorDiv else _relax_floormod
                found = make(*inner, atom.b.value, self.outer)
                if found is not None:
                    options.append(found)
        if not options:
            raise LoweringError(self._unbounded_message(atom))
        return min(options, key=lambda o: o[1])  # first (constant) wins ties

    def _unbounded_message(self, atom: Expr) -> str:
        names = []
        for v in sorted(free_vars(atom), key=lambda v: v.name):
            iv = self.all.get(v)
            if iv is None or not iv.is_bounded:
                kind = "relaxed variable" if v in self.relaxed else "variable"
                names.append(f"{kind} '{v.name}' ({'no range' if iv is None else iv})")
        why = ", ".join(names) if names else "a subexpression with no finite bound"
        return f"relax: cannot bound '{atom}' in '{self.expr}': it depends on {why}"


def _relax_floordiv(
    low: LinearForm, ext: int, c: int, outer: Ranges
) -> tuple[LinearForm, int] | None:
    """``(low + t)//c`` for t in [0, ext): symbolic ``low//c`` and the extent it allows."""
    if all(k % c == 0 for k in low.terms.values()):
        q, r = divmod(low.const, c)  # low = c*D + r with 0 <= r < c: exact
        div = LinearForm({a: k // c for a, k in low.terms.items()}, q, low.dtype)
        return div, (r + ext - 1) // c + 1
    return floordiv_lf(low, c, outer), (ext + c - 2) // c + 1


def _relax_floormod(
    low: LinearForm, ext: int, c: int, outer: Ranges
) -> tuple[LinearForm, int] | None:
    """``(low + t) % c`` for t in [0, ext) when ``low`` is a constant modulo ``c``."""
    if all(k % c == 0 for k in low.terms.values()):
        r = low.const % c
        if r + ext - 1 < c:
            return LinearForm.constant(r, low.dtype), ext
    return LinearForm.constant(0, low.dtype), c
