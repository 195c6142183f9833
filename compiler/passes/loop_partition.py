"""loop_partition: split guarded loops into pieces on which their guards are decided (seed 001, Alg. 2).

A split that does not divide its extent leaves a guard in the loop body (seed 001's
``if tid*4 + j < 14``), and a guarded loop nest cannot become one tensor instruction. This pass is
Algorithm 2 of seed 001 (PartitionBranchLoop, Sec. IV-C). It walks the loops outermost first, keeping
the context C (the range of every enclosing loop variable, narrowed to the current piece). For each
loop ``for v in [lo, hi]`` (serial, parallel, unrolled, vectorized, or bound to a hardware axis):

1. **Collect** the guards of the body that mention ``v``: the conditions of ``IfThenElse``
   statements and, inside tensor-marked regions (``Attr`` ``tensorize`` or ``pragma_*``), the
   conditions of ``Select``/``if_then_else`` whose leaves (the parts joined by and/or/not) each
   mention at most one variable (``x >= 1``, not a convolution's ``yy + ry >= 1``). Each guard keeps
   the ranges of the loops between ``v`` and itself.
2. **FindPartition.** A leaf ``op(c*v + r, 0)``, with ``r`` free of ``v`` and bounded by
   ``[rlo, rhi]``, can change its verdict only where ``c*v + rlo`` or ``c*v + rhi`` crosses 0. Those
   points cut ``[lo, hi]`` into intervals. On each interval every guard is decided as far as
   ``arith.prove`` can, and neighbouring intervals with the same outcome are merged. This refines
   the paper's TSet (all true), FSet (all false) and BSet (the rest). The ``IfThenElse`` guards
   choose the pieces; the marked selects do so only when those guards leave the loop whole.
3. **EliminateCondition.** In a copy of the body for each piece, every leaf on ``v`` that is proven
   under C and the piece's range is replaced by its value. A guard proven true becomes its
   then-branch, and one proven false becomes its else-branch or nothing. Empty statements and empty
   pieces are removed. A conjunct is decided assuming the guard's other conjuncts hold: a nested
   split's ``io*4 + ii < 6`` bounds ``io*4 + ii`` in ``tid*6 + io*4 + ii < 13``.
4. **Recurse** into each piece's body with C narrowed to the piece, then compose. A serial loop
   becomes consecutive loops ``for v in range(a, b + 1)``. A bound loop stays one loop whose body
   selects the piece (``if v < b + 1: ... else: ...``), because a hardware axis cannot be split into
   two loops.

Limits (no blowup):
- A loop gets at most ``MAX_PIECES`` (3) pieces. When the outcomes make more runs, the run that
  decides the most guards becomes the middle piece. The code before and after it forms two pieces
  that keep what they cannot decide, and ``v`` is not partitioned again.
- A split is kept only when it pays. It must remove ``IfThenElse`` guards (selectors not counted),
  or else remove marked selects without adding guards of either kind. Otherwise the loop stays one
  piece. So the pass never adds ``IfThenElse`` guards, and marked selects are copied only along
  with guards that are removed.
- Loops with non-constant bounds are not split (their bodies are processed).
- A leaf in which ``v`` is neither a linear term nor ``c * (v // d)`` for a constant ``d > 0`` (``v % 4 <
  3``) gives no cut points. ``v // d`` changes only where ``v`` crosses a multiple of ``d``, so its cut
  points are those of the term in ``v // d``, times ``d`` (cores grouped by ``tid // d``).
- A guard whose boundary depends on two loops of which no interval of the outer one decides it
  (``o + a < 10`` with ``a`` in ``[0, 3]``, a cache region wider than its loop's step) stays in the
  boundary piece of the inner loop.

Precondition: a well-formed function (``verify(func, "loop-ir")``, or ``"flat"``).
Postcondition:
- The invariants of the same stage still hold.
- The function computes the same result.
- In each piece, every guard leaf on the partitioned variable that is provably true or false there
  is gone.
- Loops without guards on their variable, and guards that mention no loop variable, are left as
  they are (the same objects).

Non-goals: seed 001's ``AddExtraCompute`` (``preprocess``); simplifying the indices of a piece (run
``simplify`` afterwards; single-iteration pieces stay loops); splitting on conditions of ``Let``
values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from compiler import arith
from compiler.arith import Interval, LinearForm
from compiler.errors import IRTypeError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, IRVisitor, free_vars
from compiler.ir.intrinsics import Call

#: The most pieces one loop is split into (before / middle / after).
MAX_PIECES = 3

_EMPTY = ir.Seq(())
_TRUE = ir.IntImm(1, ir.dtypes.bool_)  # verdicts; compared by identity, so constants in the input
_FALSE = ir.IntImm(0, ir.dtypes.bool_)  # program are never mistaken for decided leaves
_COMPARE = (ir.LT, ir.LE, ir.GT, ir.GE, ir.EQ, ir.NE)

Ranges = Mapping[ir.Var, Interval]


# --------------------------------------------------------------------------------------------------
# helpers


def _is_empty(s: ir.Stmt) -> bool:
    return isinstance(s, ir.Seq) and not s.stmts


def _keep(old: ir.Node, **fields) -> ir.Node:
    """``old`` itself when every new field is the old object (shared subtrees), else a copy."""
    if all(getattr(old, k) is v for k, v in fields.items()):
        return old
    return dataclasses.replace(old, **fields)


def _if(s: ir.IfThenElse, cond: ir.Expr, then_case: ir.Stmt, else_case: ir.Stmt | None) -> ir.Stmt:
    """``s`` rebuilt from new parts, without empty branches (nothing at all when both are empty)."""
    if else_case is not None and _is_empty(else_case):
        else_case = None
    if _is_empty(then_case):
        return _EMPTY if else_case is None else ir.IfThenElse(ir.Not(cond), else_case)
    return _keep(s, cond=cond, then_case=then_case, else_case=else_case)


def _is_marked(s: ir.Attr) -> bool:
    """A tensor-instruction mark: its ``Select``/``if_then_else`` conditions are guards too (a loop's
    ``pragma_double_buffer`` marks no instruction)."""
    return s.key == "tensorize" or (s.key.startswith("pragma_") and s.key != "pragma_double_buffer")


def _loop_range(s: ir.For, ranges: Ranges) -> Interval | None:
    """The values ``s.var`` takes under ``ranges``; None when the loop never runs."""
    if isinstance(s.min, ir.IntImm) and isinstance(s.extent, ir.IntImm):
        if s.extent.value <= 0:
            return None
        return Interval.from_extent(s.min.value, s.extent.value)
    lo = arith.bound(s.min, ranges)
    hi = arith.bound(s.min + s.extent - 1, ranges)
    return Interval(lo.lo, hi.hi) if lo.lo is None or hi.hi is None or lo.lo <= hi.hi else None


def _let_range(s: ir.Let, ranges: Ranges) -> Interval | None:
    return arith.bound(s.value, ranges) if s.value.dtype.is_int else None


def _leaves(cond: ir.Expr) -> list[ir.Expr]:
    """The conditions ``cond`` combines with and/or/not."""
    if isinstance(cond, ir.And | ir.Or):
        return _leaves(cond.a) + _leaves(cond.b)
    if isinstance(cond, ir.Not):
        return _leaves(cond.a)
    return [cond]


def _select_cond(e: ir.Expr) -> ir.Expr | None:
    """The condition of a ``Select`` or ``if_then_else`` call, else None."""
    if isinstance(e, ir.Select):
        return e.cond
    if isinstance(e, Call) and e.name == "if_then_else":
        return e.args[0]
    return None


class _Scoped:
    """Tracks the ranges of the loops and lets around the current statement (C plus inner loops)."""

    def __init__(self, ranges: Ranges, marked: int) -> None:
        self.ranges: dict[ir.Var, Interval] = dict(ranges)
        self.marked = marked  # how many tensor marks enclose the current statement

    def _enter(self, var: ir.Var, rng: Interval | None) -> None:
        if rng is not None:
            self.ranges[var] = rng

    def _leave(self, var: ir.Var) -> None:
        self.ranges.pop(var, None)


# --------------------------------------------------------------------------------------------------
# Deciding a guard: variable ranges, plus what the other conjuncts of the guard say


def _ceil_div(p: int, q: int) -> int:
    return -(-p // q)


def _conjuncts(cond: ir.Expr) -> list[ir.Expr]:
    if isinstance(cond, ir.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _difference(cond: ir.Expr) -> LinearForm | None:
    """The linear form of ``a - b`` for an integer comparison ``op(a, b)``, else None."""
    if not isinstance(cond, _COMPARE) or not cond.a.dtype.is_int:
        return None
    return arith.linear_form(cond.a - cond.b)


def _fact(cond: ir.Expr) -> tuple[LinearForm, Interval] | None:
    """``(L, I)`` when ``cond`` says exactly ``L in I`` for a linear form ``L`` without constant."""
    lf = _difference(cond)
    if lf is None or not lf.terms or isinstance(cond, ir.NE):
        return None
    m = -lf.const  # cond is: L op m
    iv = {
        ir.LT: Interval(None, m - 1),
        ir.LE: Interval(None, m),
        ir.GT: Interval(m + 1, None),
        ir.GE: Interval(m, None),
        ir.EQ: Interval(m, m),
    }[type(cond)]
    return LinearForm(lf.terms, 0, lf.dtype), iv


def _unscale(iv: Interval, c: int) -> Interval | None:
    """The integers ``u`` with ``c*u`` in ``iv`` (None when there are none)."""
    lo, hi = (iv.lo, iv.hi) if c > 0 else (iv.hi, iv.lo)
    lo = None if lo is None else _ceil_div(lo, c)
    hi = None if hi is None else hi // c
    return None if lo is not None and hi is not None and lo > hi else Interval(lo, hi)


def _split_off(lf: LinearForm, part: LinearForm) -> tuple[int, LinearForm] | None:
    """``(k, rest)`` with ``lf == k*part + rest`` and ``rest`` free of ``part``'s atoms, else None."""
    (a0, c0), *_ = part.terms.items()
    q = lf.coef(a0)
    if q == 0 or q % c0:
        return None
    k = q // c0
    if any(lf.coef(a) != k * c for a, c in part.terms.items()):
        return None
    return k, lf - part.scale(k)


@dataclasses.dataclass(frozen=True)
class _Known:
    """What holds where a condition is evaluated: variable ranges and facts ``L in I``."""

    ranges: Ranges
    facts: tuple[tuple[LinearForm, Interval], ...] = ()

    def assume(self, conds: list[ir.Expr]) -> _Known:
        """Also assume ``conds``: one-variable bounds narrow ranges, other linear bounds are facts."""
        ranges, facts = dict(self.ranges), list(self.facts)
        for cond in conds:
            for part in _conjuncts(cond):
                found = _fact(part)
                if found is None:
                    continue
                form, iv = found
                (u, c), *more = form.terms.items()
                if more or not isinstance(u, ir.Var):
                    facts.append(found)
                    continue
                own = _unscale(iv, c)
                narrowed = None if own is None else ranges.get(u, own).intersect(own)
                if narrowed is not None:  # empty: the conjunct is false, any verdict will do
                    ranges[u] = narrowed
        return _Known(ranges, tuple(facts))

    def bound(self, lf: LinearForm) -> Interval:
        """A sound interval of ``lf``: by the ranges, tightened by every fact that ``lf`` contains."""
        out = arith.bound(lf.to_expr(), self.ranges)
        for form, iv in self.facts:
            split = _split_off(lf, form)
            if split is None:
                continue
            k, rest = split
            iv = iv.intersect(arith.bound(form.to_expr(), self.ranges)) or iv
            out = out.intersect(arith.bound(rest.to_expr(), self.ranges) + iv.scale(k)) or out
        return out

    def prove(self, leaf: ir.Expr) -> bool | None:
        """Like ``arith.prove``; comparisons it leaves open are tried again with the facts."""
        verdict = arith.prove(leaf, self.ranges)
        lf = _difference(leaf) if verdict is None and self.facts else None
        if lf is None:
            return verdict
        b = self.bound(lf)  # leaf is: op(lf, 0)
        neg, nonpos = b.hi is not None and b.hi < 0, b.hi is not None and b.hi <= 0
        pos, nonneg = b.lo is not None and b.lo > 0, b.lo is not None and b.lo >= 0
        always, never = {  # op(lf, 0) for every value of lf in b / for none
            ir.LT: (neg, nonneg),
            ir.LE: (nonpos, pos),
            ir.GT: (pos, nonpos),
            ir.GE: (nonneg, neg),
            ir.EQ: (nonneg and nonpos, neg or pos),
            ir.NE: (neg or pos, nonneg and nonpos),
        }[type(leaf)]
        return True if always else False if never else None


def _decide(cond: ir.Expr, var: ir.Var, known: _Known) -> ir.Expr:
    """``cond`` with each leaf on ``var`` that ``known`` decides replaced by its value.

    Returns ``_TRUE``/``_FALSE`` when the whole condition is decided. Conjuncts are decided one
    after the other, each assuming the others hold: ``a and b`` equals ``a' and b`` when ``a'``
    equals ``a`` wherever ``b`` holds. Nested splits need this. The guard
    ``tid*6 + io*4 + ii < 13 and io*4 + ii < 6`` has a first conjunct that holds for every ``tid <= 1``
    once ``io*4 + ii <= 5`` is known.
    """
    t = type(cond)
    if t is ir.And:
        a = _decide(cond.a, var, known.assume([cond.b]))
        if a is _FALSE:
            return _FALSE
        b = _decide(cond.b, var, known.assume([a]))
        if b is _FALSE or a is _TRUE:
            return b
        return a if b is _TRUE else _keep(cond, a=a, b=b)
    if t is ir.Or:
        a, b = _decide(cond.a, var, known), _decide(cond.b, var, known)
        if a is _TRUE or b is _TRUE:
            return _TRUE
        if a is _FALSE or b is _FALSE:
            return b if a is _FALSE else a
        return _keep(cond, a=a, b=b)
    if t is ir.Not:
        a = _decide(cond.a, var, known)
        if a is _TRUE or a is _FALSE:
            return _FALSE if a is _TRUE else _TRUE
        return _keep(cond, a=a)
    if var in free_vars(cond):
        verdict = known.prove(cond)
        if verdict is not None:
            return _TRUE if verdict else _FALSE
    return cond


# --------------------------------------------------------------------------------------------------
# Collect: the guards that mention the loop variable


@dataclasses.dataclass(frozen=True, eq=False)
class _Guard:
    cond: ir.Expr
    ranges: dict[ir.Var, Interval]  # C and the loops between the partitioned loop and the guard
    primary: bool  # the condition of an IfThenElse (else of a marked Select/if_then_else)


class _Collect(_Scoped, IRVisitor):
    def __init__(self, var: ir.Var, ranges: Ranges, marked: int) -> None:
        super().__init__(ranges, marked)
        self.var = var
        self.found: list[_Guard] = []

    def add(self, cond: ir.Expr, primary: bool) -> None:
        leaves = [free_vars(leaf) for leaf in _leaves(cond)]
        if not any(self.var in used for used in leaves):
            return
        if not primary and any(len(used) > 1 for used in leaves):
            return  # not simple: a padding read of a convolution (yy + ry >= 1) would split 3 x 3 ways
        if not any(g.cond == cond and g.ranges == self.ranges for g in self.found):
            self.found.append(_Guard(cond, dict(self.ranges), primary))

    def visit_For(self, s: ir.For) -> None:
        rng = _loop_range(s, self.ranges)
        if rng is None:  # never runs: nothing to decide inside
            return
        self._enter(s.var, rng)
        self.visit(s.body)
        self._leave(s.var)

    def visit_Let(self, s: ir.Let) -> None:
        self.visit(s.value)
        self._enter(s.var, _let_range(s, self.ranges))
        self.visit(s.body)
        self._leave(s.var)

    def visit_Attr(self, s: ir.Attr) -> None:
        marked = _is_marked(s)
        self.marked += marked
        self.visit(s.body)
        self.marked -= marked

    def visit_IfThenElse(self, s: ir.IfThenElse) -> None:
        self.add(s.cond, primary=True)
        self.generic_visit(s)

    def visit_Select(self, e: ir.Select) -> None:
        if self.marked:
            self.add(e.cond, primary=False)
        self.generic_visit(e)

    def visit_Call(self, e: Call) -> None:
        cond = _select_cond(e)
        if self.marked and cond is not None:
            self.add(cond, primary=False)
        self.generic_visit(e)


# --------------------------------------------------------------------------------------------------
# FindPartition


def _cut_points(leaf: ir.Expr, var: ir.Var, known: _Known) -> list[int]:
    """Values of ``var`` where the leaf's verdict may change (where a new interval starts).

    For ``op(c*var + r, 0)`` with ``r`` in ``[rlo, rhi]`` the verdict is constant on each side of
    ``-rlo/c`` and ``-rhi/c``; the integers just above and at those points start new intervals. For
    ``c*(var // d)`` the same points in ``var // d``, times ``d``.
    """
    lf = _difference(leaf)
    if lf is None:
        return []
    own = [(atom, c) for atom, c in lf.terms.items() if var in free_vars(atom)]
    if len(own) != 1:
        return []  # var in no term, or in several
    (atom, c), = own
    if atom is var:
        scale = 1
    elif (isinstance(atom, ir.FloorDiv) and atom.a is var and isinstance(atom.b, ir.IntImm)
          and atom.b.value > 0):
        scale = atom.b.value  # u = var // d steps where var crosses a multiple of d
    else:
        return []  # var inside another atom (v % 4): no cut points
    rest = lf - LinearForm({atom: c}, 0, lf.dtype)
    r = known.bound(rest)
    points = []
    for x in (r.lo, r.hi):
        if x is not None:
            points += [_ceil_div(-x, c) * scale, (-x // c + 1) * scale]
    return points


def _guard_cuts(guard: _Guard, var: ir.Var) -> list[int]:
    """Cut points of every leaf on ``var``, alone and assuming the guard's other conjuncts."""
    parts = _conjuncts(guard.cond)
    plain = _Known(guard.ranges)
    points = []
    for k, part in enumerate(parts):
        assumed = plain.assume(parts[:k] + parts[k + 1 :])
        for leaf in _leaves(part):
            points += _cut_points(leaf, var, plain) + _cut_points(leaf, var, assumed)
    return points


def _find_partition(var: ir.Var, rng: Interval, guards: list[_Guard]) -> list[Interval]:
    """Consecutive intervals covering ``rng``, each deciding each guard one way (at most MAX_PIECES)."""
    cuts = sorted({p for g in guards for p in _guard_cuts(g, var) if rng.lo < p <= rng.hi})
    ends = [rng.lo, *cuts, rng.hi + 1]
    runs: list[tuple[Interval, tuple]] = []
    for a, b in zip(ends, ends[1:], strict=False):
        piece = Interval(a, b - 1)
        verdict = tuple(_decide(g.cond, var, _Known({**g.ranges, var: piece})) for g in guards)
        if runs and runs[-1][1] == verdict:
            runs[-1] = (runs[-1][0].union(piece), verdict)
        else:
            runs.append((piece, verdict))
    if len(runs) <= MAX_PIECES:
        return [piece for piece, _ in runs]

    def gain(run: tuple[Interval, tuple]) -> tuple[int, int, int]:
        piece, verdict = run
        decided = sum(v is _TRUE or v is _FALSE for v in verdict)
        changed = sum(v is not g.cond for v, g in zip(verdict, guards, strict=True))
        return decided, changed, piece.extent

    middle, _ = max(runs, key=gain)
    before = [Interval(rng.lo, middle.lo - 1)] if middle.lo > rng.lo else []
    after = [Interval(middle.hi + 1, rng.hi)] if middle.hi < rng.hi else []
    return [*before, middle, *after]


# --------------------------------------------------------------------------------------------------
# EliminateCondition


class _Eliminate(_Scoped, IRMutator):
    """Replace the leaves on ``var`` that are proven under the piece's ranges by their values."""

    def __init__(self, var: ir.Var, ranges: Ranges, marked: int) -> None:
        super().__init__(ranges, marked)
        self.var = var

    def decide(self, cond: ir.Expr) -> ir.Expr:
        return _decide(cond, self.var, _Known(self.ranges))

    def mutate_For(self, s: ir.For) -> ir.Stmt:
        rng = _loop_range(s, self.ranges)
        if rng is None:
            return s
        self._enter(s.var, rng)
        body = self.mutate(s.body)
        self._leave(s.var)
        return _EMPTY if _is_empty(body) else _keep(s, body=body)

    def mutate_Let(self, s: ir.Let) -> ir.Stmt:
        value = self.mutate(s.value)
        self._enter(s.var, _let_range(s, self.ranges))
        body = self.mutate(s.body)
        self._leave(s.var)
        return _EMPTY if _is_empty(body) else _keep(s, value=value, body=body)

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        marked = _is_marked(s)
        self.marked += marked
        body = self.mutate(s.body)
        self.marked -= marked
        return _EMPTY if _is_empty(body) else _keep(s, body=body)

    def mutate_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        body = self.mutate(s.body)
        return _EMPTY if _is_empty(body) else _keep(s, body=body)

    def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
        stmts = [self.mutate(x) for x in s.stmts]
        if all(a is b for a, b in zip(stmts, s.stmts, strict=True)):
            return s
        kept = [x for x in stmts if not _is_empty(x)]
        return ir.seq(*kept) if kept else _EMPTY

    def mutate_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        cond = self.decide(s.cond)
        if cond is _TRUE or cond is _FALSE:
            chosen = s.then_case if cond is _TRUE else s.else_case
            return _EMPTY if chosen is None else self.mutate(chosen)
        then_case = self.mutate(s.then_case)
        else_case = None if s.else_case is None else self.mutate(s.else_case)
        return _if(s, cond, then_case, else_case)

    def _pick(self, cond: ir.Expr, then_value: ir.Expr, else_value: ir.Expr) -> ir.Expr | None:
        """The chosen value of a decided Select/if_then_else in a marked region, else None."""
        if not self.marked:
            return None
        decided = self.decide(cond)
        if decided is _TRUE or decided is _FALSE:
            return self.mutate(then_value if decided is _TRUE else else_value)
        return None

    def mutate_Select(self, e: ir.Select) -> ir.Expr:
        picked = self._pick(e.cond, e.true_value, e.false_value)
        return self.generic_mutate(e) if picked is None else picked

    def mutate_Call(self, e: Call) -> ir.Expr:
        if _select_cond(e) is not None:
            picked = self._pick(*e.args)
            if picked is not None:
                return picked
        return self.generic_mutate(e)


# --------------------------------------------------------------------------------------------------
# PartitionBranchLoop


class _Partition:
    def __init__(self) -> None:
        self.selectors: list[ir.IfThenElse] = []  # the pass's own piece selectors (not guards)
        self.selector_ids: set[int] = set()
        self.marked = 0  # how many tensor marks enclose the current statement

    def stmt(self, s: ir.Stmt, ctx: Ranges) -> ir.Stmt:
        t = type(s)
        if t is ir.For:
            return self.loop(s, ctx)
        if t is ir.Seq:
            stmts = [self.stmt(x, ctx) for x in s.stmts]
            if all(a is b for a, b in zip(stmts, s.stmts, strict=True)):
                return s
            kept = [x for x in stmts if not _is_empty(x)]
            return ir.seq(*kept) if kept else _EMPTY
        if t is ir.IfThenElse:
            then_case = self.stmt(s.then_case, ctx)
            else_case = None if s.else_case is None else self.stmt(s.else_case, ctx)
            return _if(s, s.cond, then_case, else_case)
        if t is ir.Allocate or t is ir.Attr:
            marked = t is ir.Attr and _is_marked(s)
            self.marked += marked
            body = self.stmt(s.body, ctx)
            self.marked -= marked
            return _EMPTY if _is_empty(body) else _keep(s, body=body)
        if t is ir.Let:
            rng = _let_range(s, ctx)
            body = self.stmt(s.body, {**ctx, s.var: rng} if rng is not None else ctx)
            return _EMPTY if _is_empty(body) else _keep(s, body=body)
        return s  # Store, Evaluate: no loops below

    def loop(self, s: ir.For, ctx: Ranges) -> ir.Stmt:
        rng = _loop_range(s, ctx)
        if rng is None:
            return s
        inner = {**ctx, s.var: rng}
        constant = isinstance(s.min, ir.IntImm) and isinstance(s.extent, ir.IntImm)
        guards: list[_Guard] = []
        if constant:
            collect = _Collect(s.var, inner, self.marked)
            collect.visit(s.body)
            guards = collect.found
        if not guards:
            return self._whole(s, inner)
        # IfThenElse guards choose the pieces; marked selects only when those leave the loop whole
        primary = [g for g in guards if g.primary]
        pieces = _find_partition(s.var, rng, primary) if primary else [rng]
        if len(pieces) == 1:
            pieces = _find_partition(s.var, rng, guards)
        if len(pieces) > 1:
            built = self._compose(s, pieces, ctx)
            if self.pays(s, built):
                return built
        return self._compose(s, [rng], ctx)  # one piece: only what the whole range decides

    def _whole(self, s: ir.For, inner: Ranges) -> ir.Stmt:
        body = self.stmt(s.body, inner)
        return _EMPTY if _is_empty(body) else _keep(s, body=body)

    def _compose(self, s: ir.For, pieces: list[Interval], ctx: Ranges) -> ir.Stmt:
        bodies = []
        for piece in pieces:
            narrowed = {**ctx, s.var: piece}
            body = _Eliminate(s.var, narrowed, self.marked).mutate(s.body)
            bodies.append(body if _is_empty(body) else self.stmt(body, narrowed))
        if len(pieces) == 1:
            return _EMPTY if _is_empty(bodies[0]) else _keep(s, body=bodies[0])
        if s.kind is ir.ForKind.THREAD_BINDING:
            body = self._select(s.var, pieces, bodies)
            return _EMPTY if body is None else _keep(s, body=body)
        dt = s.min.dtype
        loops = [
            ir.For(s.var, ir.IntImm(p.lo, dt), ir.IntImm(p.extent, dt), body, s.kind, s.thread)
            for p, body in zip(pieces, bodies, strict=True)
            if not _is_empty(body)
        ]
        return ir.seq(*loops) if loops else _EMPTY

    def _select(self, var: ir.Var, pieces: list[Interval], bodies: list[ir.Stmt]) -> ir.Stmt | None:
        """``if var < end0: body0 else: if var < end1: body1 else: ...``, skipping empty bodies."""
        chain = None if _is_empty(bodies[-1]) else bodies[-1]
        for piece, body in zip(reversed(pieces[:-1]), reversed(bodies[:-1]), strict=True):
            end = ir.IntImm(piece.hi + 1, var.dtype)
            if not _is_empty(body):
                chain = ir.IfThenElse(ir.LT(var, end), body, chain)
            elif chain is not None:
                chain = ir.IfThenElse(ir.GE(var, end), chain)
            else:
                continue
            self.selectors.append(chain)
            self.selector_ids.add(id(chain))
        return chain

    def guards(self, s: ir.Stmt) -> tuple[int, int]:
        """Guards in ``s``: (IfThenElse nodes but selectors, Select/if_then_else in marked regions)."""
        counts = [0, 0]
        selector_ids = self.selector_ids
        outer_marks = self.marked

        class _Count(IRVisitor):
            marked = outer_marks

            def visit_Attr(self, a: ir.Attr) -> None:
                marked = _is_marked(a)
                self.marked += marked
                self.visit(a.body)
                self.marked -= marked

            def visit_IfThenElse(self, x: ir.IfThenElse) -> None:
                counts[0] += id(x) not in selector_ids
                self.generic_visit(x)

            def visit_Select(self, e: ir.Select) -> None:
                counts[1] += bool(self.marked)
                self.generic_visit(e)

            def visit_Call(self, e: Call) -> None:
                counts[1] += bool(self.marked) and e.name == "if_then_else"
                self.generic_visit(e)

        _Count().visit(s)
        return counts[0], counts[1]

    def pays(self, before: ir.Stmt, after: ir.Stmt) -> bool:
        """Keep a split when it removes IfThenElse guards, or removes others without adding any."""
        (g0, m0), (g1, m1) = self.guards(before), self.guards(after)
        return g1 < g0 or (g1 == g0 and g1 + m1 <= g0 + m0)


def loop_partition(func: ir.PrimFunc) -> ir.PrimFunc:
    """Split each guarded loop into pieces where its guards are decided, and drop the decided guards.

    Args:
        func: a well-formed function (loop IR or flat), e.g. straight from ``lower``.

    Rewrite (seed 001's copy example, W = 14 split over 4 cores):
        for tid in bind(core, 4):               for tid in bind(core, 4):
          for i in range(4):                      if tid < 3:
            for j in range(4):            ->        for i in range(4):
              if tid*4 + j < 14:                      for j in range(4):
                AL[i*4 + j] = A[...]                    AL[i*4 + j] = A[...]
                                                  else:
                                                    for i in range(4):
                                                      for j in range(2):
                                                        AL[i*4 + j] = A[...]
        A serial loop becomes consecutive loops ``for v in range(a, b + 1)`` instead.

    Checks: a guard leaf is replaced by its value only where ``arith.prove`` shows that value for
        every iteration of the piece, under the ranges of the enclosing loops and the guard's other
        conjuncts, so the result computes the same. A loop is split into at most ``MAX_PIECES``
        pieces, and only when that removes guards (see the module docstring). Returns ``func``
        itself when nothing changes.

    Aliases: seed 001 Algorithm 2 (PartitionBranchLoop), Sec. IV-C; TVM ``tir.transform.LoopPartition``.
    """
    if not isinstance(func, ir.PrimFunc):
        raise IRTypeError(f"loop_partition: expected a PrimFunc, but got {type(func).__name__}")
    body = _Partition().stmt(func.body, {})
    if body is func.body:
        return func
    return ir.PrimFunc(func.name, func.params, body, func.attrs)
