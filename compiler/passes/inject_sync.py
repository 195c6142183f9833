"""inject_sync: dependency tokens between the load, compute and store units of a decoupled access/execute
machine (TVM Sec. 3.5, VTA's CoProcSync).

Each tensor instruction runs on the unit its spec names (``timing.unit``: LOAD_INP on "load", GEMM on
"compute", STORE_OUT on "store"); the units run ahead of each other unless a token stops them. Two
statements on different units conflict when they touch a common on-chip buffer and one of them writes
it. For every statement list (a loop body, or the function body) this pass adds:

- forward tokens: when ``S_i`` and a later ``S_j`` conflict, ``push_dep(u_i -> u_j)`` right after
  ``S_i`` and ``pop_dep`` right before ``S_j``, unless a token already placed between them covers it (a
  push after ``S_i`` or later, popped before ``S_j`` or earlier);
- loop-carried tokens: when ``S_i`` of one iteration conflicts with ``S_j`` of the next (the load of the
  next chunk overwrites the input the GEMM of this one reads), one token per unit pair and iteration:
  pushed after the last such ``S_i``, popped before the first such ``S_j`` in every iteration but the
  first (``if v > min: pop_dep``), and a pop after the loop drains the last iteration's token, so pushes
  and pops balance. (A push before the loop for "iteration -1" would balance them too, but it would sit
  in u's stream after everything u does before the loop, and hold v's first iteration until then.)
  Carried dependencies a forward token of the next iteration already orders need none. A perfect nest
  of serial loops counts as one loop over its iterations in order (``_Carry``): the last inner
  iteration's token is popped in the next outer iteration's first, and drained once after the nest
  (drained after the inner loop, it would hold the popping unit at every outer iteration's end).

A dependency needs no token of its own when tokens inside the statements already order it: when ``S_i``
pushes (u -> v) after its last access on u (``tail``), when ``S_j`` pops (u -> v) before its first access
on v (``head``), or when a statement between them pops (u -> v) at all (every token inside a statement is
pushed and popped inside it, so the pop waits for a push that u makes after ``S_i``). This is what keeps
an outer loop from repeating, as carried tokens of its own, the ordering its inner loops already give.

A loop bound to ``vthread`` is a virtual thread: its body is synchronized as one thread's program, with
no token between threads (``inject_virtual_thread`` then gives each thread its own buffers and interleaves
them). Labels include the thread variable, so that each thread's tokens stay apart.

Labels: a token's label is its loop's iteration (and those of the enclosing loops), so that a push and
the pop meant for it carry equal labels: what ``check_token_order`` compares.

Tokens exist only between adjacent units (load <-> compute <-> store); a conflict between load and store
raises ``LoweringError``. Global (DRAM) buffers are not tracked: a kernel must not read what it writes.

Contract: the IR computes the same (tokens are no-ops when executed in order).
"""

from __future__ import annotations

from dataclasses import dataclass

import isa
from compiler.arith import simplify
from compiler.errors import LoweringError
from compiler.interp.tensor_insn import read_operands, written_operands
from compiler.ir import nodes as ir
from compiler.ir.dae_tokens import DAE_UNITS, DepToken
from compiler.ir.functor import free_vars, post_order_visit


def inject_sync(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Add the dependency tokens the units need (see the module docstring)."""
    return ir.PrimFunc(func.name, func.params, _Sync(spec).stmt(func.body, ()), func.attrs)


def insn_unit(spec: isa.ISA, insn: ir.TensorInsn) -> str:
    """The unit of the decoupled machine that runs ``insn`` (its spec's ``timing.unit``)."""
    unit = spec.instruction(insn.name).timing.unit
    if unit not in DAE_UNITS:
        raise LoweringError(f"{insn.name} runs on unit {unit!r}, not one of {DAE_UNITS}")
    return unit


@dataclass(frozen=True)
class _Access:
    unit: str
    buffer: ir.Buffer
    writes: bool


class _Sync:
    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec
        self.count = 0   # numbers the tokens, so that each has its own name

    def unit_of(self, insn: ir.TensorInsn) -> str:
        return insn_unit(self.spec, insn)

    def accesses(self, s: ir.Stmt) -> list[_Access]:
        found: list[_Access] = []

        def visit(node) -> None:
            if isinstance(node, ir.TensorInsn):
                unit, reads, writes = self.unit_of(node), read_operands(node), written_operands(node)
                for r in node.regions:
                    if r.buffer.scope == "global":
                        continue
                    if r.operand in writes:
                        found.append(_Access(unit, r.buffer, True))
                    if r.operand in reads:
                        found.append(_Access(unit, r.buffer, False))

        post_order_visit(s, visit)
        return found

    # ---- structure: descend through wrappers to statement lists

    def stmt(self, s: ir.Stmt, loops: tuple[ir.For, ...]) -> ir.Stmt:
        if isinstance(s, ir.Allocate | ir.Attr):
            body = self.stmt(s.body, loops)
            return s if body is s.body else _rewrap([s], body)
        if isinstance(s, ir.For):
            return self.loop(s, loops)
        if isinstance(s, ir.Seq):
            return ir.seq(*self.items(list(s.stmts), loops, None)[0])
        return s

    def loop(self, s: ir.For, loops: tuple[ir.For, ...]) -> ir.Stmt:
        units = {a.unit for a in self.accesses(s)}
        if len(units) <= 1:
            return s   # one unit runs the whole loop in order: a micro-op nest or a run of DMAs
        inner = (*loops, s)
        wrappers, body = _unwrap(s.body)
        if s.thread == "vthread":   # one thread's program; threads do not wait for each other
            new_body = self.items(body, inner, None)[0]
            return ir.For(s.var, s.min, s.extent, _rewrap(wrappers, ir.seq(*new_body)), s.kind, s.thread)
        nest = _perfect_nest(s)
        inner = (*loops, *nest)
        wrappers, body = _unwrap(nest[-1].body)
        new_body, carried = self.items(body, inner, _Carry(nest))
        loop: ir.Stmt = _rewrap(wrappers, ir.seq(*new_body))
        for lp in reversed(nest):
            loop = ir.For(lp.var, lp.min, lp.extent, loop, lp.kind, lp.thread)
        past = _Carry(nest).past
        after = [self.token("pop", u, v, name, loops, past) for u, v, name in carried]
        return ir.seq(loop, *after)

    @staticmethod
    def token(action: str, src: str, dst: str, name: str, loops: tuple[ir.For, ...],
              iteration: ir.Expr | None = None) -> DepToken:
        """A token labelled by the iterations of ``loops`` (and, for a carried one, of its own loop)."""
        label = tuple(lp.var for lp in loops) + ((iteration,) if iteration is not None else ())
        return DepToken(action, src, dst, name, label)

    # ---- one statement list

    def items(self, stmts: list[ir.Stmt], loops: tuple[ir.For, ...], loop: _Carry | None
              ) -> tuple[list[ir.Stmt], list[tuple[str, str, str]]]:
        """The statements with their tokens, and (for the body of ``loop``'s innermost loop) the carried
        token pairs whose first push and last pop go around the loop nest."""
        stmts = [self.stmt(x, loops) for x in stmts]
        acc = [self.accesses(x) for x in stmts]
        inside = [_Ordering.of(x, self.unit_of) for x in stmts]
        pushes: dict[int, list[DepToken]] = {}
        pops: dict[int, list[DepToken]] = {}
        placed: dict[tuple[str, str], list[tuple[int, int]]] = {}

        def ordered(i: int, j: int, conflict: tuple[str, str, ir.Buffer], between) -> bool:
            """Whether tokens inside the statements order S_i's accesses to the buffer on u before S_j's
            on v."""
            return (conflict in inside[i].tail or conflict in inside[j].head
                    or any(conflict[:2] in inside[k].pops for k in between))

        for j in range(len(stmts)):
            for i in range(j - 1, -1, -1):
                for u, v, b in _conflicts(acc[i], acc[j]):
                    pairs = placed.setdefault((u, v), [])
                    if any(k >= i and pos <= j for k, pos in pairs) or \
                            ordered(i, j, (u, v, b), range(i + 1, j)):
                        continue
                    self.count += 1
                    name = f"{u}->{v}#{self.count}"
                    pushes.setdefault(i, []).append(self.token("push", u, v, name, loops))
                    pops.setdefault(j, []).append(self.token("pop", u, v, name, loops))
                    pairs.append((i, j))
        carried: list[tuple[str, str, str]] = []
        if loop is not None:
            wanted: dict[tuple[str, str], tuple[int, int]] = {}
            for i in range(len(stmts)):
                for j in range(len(stmts)):
                    for u, v, b in _conflicts(acc[i], acc[j]):
                        # a token pushed after S_i (this iteration) or popped before S_j (the next)
                        if any(k >= i or pos <= j for k, pos in placed.get((u, v), [])):
                            continue
                        rest = [*range(i + 1, len(stmts)), *range(j)]
                        if ordered(i, j, (u, v, b), rest):
                            continue
                        last, first = wanted.get((u, v), (-1, len(stmts)))
                        wanted[(u, v)] = (max(last, i), min(first, j))
            for (u, v), (i, j) in wanted.items():
                self.count += 1
                name = f"{u}->{v}#{self.count} (next {loop.names})"
                outer = loops[:-len(loop.nest)]
                index = loop.index
                nxt = simplify(ir.Add(index, ir.const(1, index.dtype)))
                pushes.setdefault(i, []).append(self.token("push", u, v, name, outer, nxt))
                pop = self.token("pop", u, v, name, outer, index)
                pops.setdefault(j, []).append(ir.IfThenElse(ir.LT(loop.first, index), pop))
                carried.append((u, v, name))
        out: list[ir.Stmt] = []
        for k, x in enumerate(stmts):
            out += [*pops.get(k, []), x, *pushes.get(k, [])]
        return out, carried


@dataclass(frozen=True)
class _Carry:
    """A nest of loops whose carried tokens go around it as around one loop over its iterations in order:
    a token pushed in the last iteration of an inner loop is popped in the first of the next outer
    iteration, not drained after the inner loop (which would hold the popping unit until the pushing unit
    has finished the whole inner loop). ``index`` numbers the iterations, from ``first`` to before
    ``past``; for one loop it is the loop's variable."""

    nest: tuple[ir.For, ...]

    @property
    def index(self) -> ir.Expr:
        last = self.nest[-1]
        index: ir.Expr = last.var
        stride: ir.Expr = last.extent
        for lp in reversed(self.nest[:-1]):
            index = ir.Add(index, ir.Mul(ir.Sub(lp.var, lp.min), stride))
            stride = ir.Mul(stride, lp.extent)
        return simplify(index)

    @property
    def first(self) -> ir.Expr:
        return self.nest[-1].min

    @property
    def past(self) -> ir.Expr:
        count: ir.Expr = self.nest[-1].extent
        for lp in self.nest[:-1]:
            count = ir.Mul(count, lp.extent)
        return simplify(ir.Add(self.first, count))

    @property
    def names(self) -> str:
        return ", ".join(lp.var.name for lp in self.nest)


def _perfect_nest(s: ir.For) -> tuple[ir.For, ...]:
    """``s`` and the serial loops perfectly nested in it (each the whole body of the one around it, with
    bounds that do not depend on the loops around it)."""
    nest = [s]
    while isinstance(nest[-1].body, ir.For) and nest[-1].body.thread != "vthread":
        inner = nest[-1].body
        if (free_vars(inner.min) | free_vars(inner.extent)) & {lp.var for lp in nest}:
            break
        nest.append(inner)
    return tuple(nest)


@dataclass(frozen=True)
class _Ordering:
    """What the tokens inside a statement order, per unit pair (u, v) and on-chip buffer: ``head``, a pop
    (u -> v) comes before v's first access to the buffer; ``tail``, a push (u -> v) comes after u's last
    access to it; ``pops``, the statement pops (u -> v) somewhere (per pair). Loop bodies are read once,
    in program order (first and last iteration alike); a pop guarded to skip a loop's first iteration
    counts for none of them."""

    head: frozenset[tuple[str, str, ir.Buffer]]
    tail: frozenset[tuple[str, str, ir.Buffer]]
    pops: frozenset[tuple[str, str]]

    @staticmethod
    def of(s: ir.Stmt, unit_of) -> _Ordering:
        events: list[tuple] = []   # ("access", unit, buffer) or (action, src, dst)

        guarded: set[int] = set()   # pops skipped in a loop's first iteration order nothing there

        def visit(node) -> None:   # leaves come in program order
            if isinstance(node, ir.IfThenElse) and isinstance(node.then_case, DepToken):
                guarded.add(id(node.then_case))
            elif isinstance(node, DepToken) and id(node) not in guarded:
                events.append((node.action, node.src, node.dst))
            elif isinstance(node, ir.TensorInsn):
                unit = unit_of(node)
                events.extend(("access", unit, r.buffer) for r in node.regions if r.buffer.scope != "global")

        _pre_order(s, visit)
        return _Ordering(_before_first(events, "pop"), _before_first(events[::-1], "push"),
                         frozenset((a, b) for kind, a, b in events if kind == "pop"))


def _pre_order(s: ir.Stmt, fn) -> None:
    """Call ``fn`` on every statement of ``s``, parents before children, in program order."""
    fn(s)
    if isinstance(s, ir.Seq):
        for x in s.stmts:
            _pre_order(x, fn)
    elif isinstance(s, ir.For | ir.Allocate | ir.Attr | ir.Let):
        _pre_order(s.body, fn)
    elif isinstance(s, ir.IfThenElse):
        _pre_order(s.then_case, fn)
        if s.else_case is not None:
            _pre_order(s.else_case, fn)


def is_pop(s: ir.Stmt) -> bool:
    """Whether ``s`` is a ``pop_dep``, or one guarded to skip a loop's first iteration."""
    if isinstance(s, ir.IfThenElse) and s.else_case is None:
        s = s.then_case
    return isinstance(s, DepToken) and s.action == "pop"


def _before_first(events: list[tuple], action: str) -> frozenset[tuple[str, str, ir.Buffer]]:
    """Triples (u, v, buffer): an ``action`` (u -> v) event comes before the first access to the buffer by
    the unit that runs the action (v for a pop, u for a push)."""
    out, seen, tokens = set(), set(), set()
    for kind, a, b in events:
        if kind == "access":
            if (a, b) not in seen:
                out |= {(u, v, b) for u, v in tokens if (v if action == "pop" else u) == a}
                seen.add((a, b))
        elif kind == action:
            tokens.add((a, b))
    return frozenset(out)


def _conflicts(first: list[_Access], second: list[_Access]) -> set[tuple[str, str, ir.Buffer]]:
    """(u, v, buffer), u != v, where an access of ``first`` on u and one of ``second`` on v touch the
    buffer and one of them writes it."""
    out = set()
    for a in first:
        for b in second:
            if a.unit != b.unit and a.buffer is b.buffer and (a.writes or b.writes):
                if abs(DAE_UNITS.index(a.unit) - DAE_UNITS.index(b.unit)) != 1:
                    raise LoweringError(f"inject_sync: {a.unit} and {b.unit} both use {a.buffer.name}, but "
                                        f"no token queue joins them")
                out.add((a.unit, b.unit, a.buffer))
    return out


def _unwrap(s: ir.Stmt) -> tuple[list[ir.Allocate | ir.Attr], list[ir.Stmt]]:
    """The Allocate/Attr wrappers around a loop body's statement list, and the list."""
    wrappers = []
    while isinstance(s, ir.Allocate | ir.Attr):
        wrappers.append(s)
        s = s.body
    return wrappers, list(s.stmts) if isinstance(s, ir.Seq) else [s]


def _rewrap(wrappers: list[ir.Allocate | ir.Attr], body: ir.Stmt) -> ir.Stmt:
    for w in reversed(wrappers):
        body = ir.Allocate(w.buffer, body) if isinstance(w, ir.Allocate) else ir.Attr(w.key, w.value, body)
    return body
