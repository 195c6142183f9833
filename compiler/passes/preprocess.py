"""preprocess: seed 001's Algorithm 1, instruction preprocessing before tensor instruction selection.

A tensor instruction carries constraints the tensor expression cannot state. For every statement marked
for an instruction that ``tensorize`` would reject, the constraint that fails (its ``kind`` in the isa/
spec, not a table here) picks a rewrite that keeps the function's result and removes the reason:

- ``divisible`` (COM + ALIGN: AddExtraCompute, ExpandAllocation): an extent such as ``n`` must be a
  multiple of ``VECTOR_ELEMS``. The loop is extended to the next extent the rule accepts (in a
  two-dimensional statement such as the cycle add's ``dst[r, c] = a[r, c] + b[c]``, its rows' outermost
  loop, a row at a time; an operand that steps 0 along them takes no extra elements), so the
  instruction computes a few harmless extra elements. The buffers it touches must be on-chip allocations;
  each grows (ExpandAllocation) when the extra elements would fall outside it, and the extra elements it
  reads are zero-filled at the start of the allocation's scope (a fill statement, itself marked for
  tensorization), so no value computed is ever undefined. No extra element is copied out.
- in-place instructions (LAYOUT: InstructionReplace): an instruction whose semantics read the operand they
  write (``dst[i] = max(dst[i], 0)``) cannot compute ``D[i] = max(S[i], 0)``. The statement becomes two
  semantically equal ones with fewer constraints: a copy ``D[i] = S[i]`` and the in-place ``D[i] =
  max(D[i], 0)``. When ``S`` is in global memory the copy is the DMA load the tile needs anyway.
- padding (LAYOUT: zero-fill + strided copy): a copy into an on-chip buffer of ``if_then_else(in
  bounds, x, 0)`` (a padded input staged for a conv) becomes a zero-fill of the whole tile plus a copy
  guarded by the in-bounds condition, which loop partitioning (run again after this pass) turns into
  a strided copy of the interior.
- guards around on-chip computation (COM): a marked statement that only touches on-chip buffers, within
  their bounds, loses its guards; the extra iterations compute elements nothing reads (the rows past the
  end of a core's share in its last conv tile).
- a loop around several statements (COM: loop fission): ``for v: {S1; S2}``, which no one instruction
  computes, becomes ``for v: S1; for v: S2`` when that is provably the same: no statement reads a buffer
  another writes, and statements writing one buffer write disjoint elements in every iteration (the
  channels of a concat: after partitioning, a's and b's copies in one pixel loop), each then rewritten
  on its own.
- everything else is left unchanged (tensorize reports it).
"""

from __future__ import annotations

import isa
from compiler.arith import Interval, bound, linear_form
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, loads_in, post_order_visit
from compiler.ir.intrinsics import Call
from compiler.passes.tensorize import MARKS, Match, NoMatch, match, select
from isa.lang import tree as t
from isa.lang.scalar import evaluate as evaluate_scalar

# how far an extent may grow to satisfy a divisibility rule (a tile of extra compute at most)
MAX_EXTRA = 4096


def preprocess(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Rewrite marked statements whose instruction constraints fail into equal statements that meet them.

    Contract: the function computes the same after the pass (checked by interpreting before and after);
    every statement it adds is marked, so ``tensorize`` turns it into an instruction where it can.
    Implements seed 001 Algorithm 1 (Sec. IV-B): COM and ALIGN for divisibility rules, LAYOUT for
    in-place instructions.
    """
    return ir.PrimFunc(func.name, func.params, _Preprocess(spec).mutate(func.body), func.attrs)


def fold_padding(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Only the padding rewrite of ``preprocess`` (LAYOUT: zero-fill + guarded copy), for pipelines that
    run it before loop partitioning: partitioning a padded copy first would cut it into per-column
    zero stores and copies that no instruction matches.

    Contract: the function computes the same after the pass; the statements it adds are marked.
    Implements the padding case of seed 001 Algorithm 1 (Sec. IV-B, InstructionReplace).
    """
    return ir.PrimFunc(func.name, func.params, _Preprocess(spec, padding_only=True).mutate(func.body),
                       func.attrs)


class _Preprocess(IRMutator):
    def __init__(self, spec: isa.ISA, padding_only: bool = False) -> None:
        self.spec = spec
        self.padding_only = padding_only
        self.allocs: list[ir.Buffer] = []  # on-chip allocations in scope, innermost last
        self.grow: dict[ir.Buffer, int] = {}  # buffer -> elements it must hold
        self.fills: dict[ir.Buffer, list[tuple[int, int]]] = {}  # buffer -> element ranges to zero
        self.outer: dict[ir.Var, Interval] = {}  # ranges of the enclosing loops with constant bounds
        self.written: dict[ir.Buffer, Interval | None] = {}  # allocation -> the elements its scope writes

    def mutate_For(self, s: ir.For) -> ir.Stmt:
        rng = _range_of(s)
        if rng is not None:
            self.outer[s.var] = rng
        try:
            return self.generic_mutate(s)
        finally:
            self.outer.pop(s.var, None)

    def mutate_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        self.allocs.append(s.buffer)
        self.written[s.buffer] = _written(s.buffer, s.body, self.outer)
        body = self.mutate(s.body)
        self.allocs.pop()
        self.written.pop(s.buffer, None)
        buf = s.buffer
        size = self.grow.pop(buf, buf.size)
        fills = self.fills.pop(buf, [])
        if size > buf.size:
            bigger = ir.Buffer(buf.name, (size,), buf.dtype, buf.scope)
            body = _Rebuffer(buf, bigger).mutate(body)
            buf = bigger
        zero = [self._fill(buf, lo, hi) for lo, hi in _merge(fills)]
        return ir.Allocate(buf, ir.seq(*zero, body))

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        if s.key not in MARKS:
            return self.generic_mutate(s)
        body = self.mutate(s.body)
        marked = []
        for stmt in body.stmts if isinstance(body, ir.Seq) else (body,):
            marked.extend(self._rewrite(stmt, str(s.value)))
        if len(marked) == 1 and marked[0][1] is body:
            return s if body is s.body else ir.Attr(s.key, s.value, body)
        return ir.seq(*(ir.Attr(s.key, hint, stmt) for hint, stmt in marked))

    # ---- one marked statement

    def _rewrite(self, stmt: ir.Stmt, hint: str) -> list[tuple[str, ir.Stmt]]:
        """The marked statements (hint, statement) that replace ``stmt``."""
        if isinstance(stmt, ir.TensorInsn | ir.Attr):
            return [(hint, stmt)]
        padded = self._padding(stmt)
        if padded is not None:
            zero, copy = padded
            return [("zero", zero.body), (hint, copy)]
        if self.padding_only:
            return [(hint, stmt)]
        unguarded = self._unguard(stmt)
        if unguarded is not None:
            return self._rewrite(unguarded, hint)
        parts = _fission(stmt)
        if parts is not None:
            return [piece for part in parts for piece in self._rewrite(part, hint)]
        split = self._in_place(stmt, hint)
        if split is not None:
            copy, compute = split
            return [*self._rewrite(copy, "copy"), *self._rewrite(compute, hint)]
        result = select(stmt, self.spec, hint)
        failed = result.constraint if isinstance(result, NoMatch) else None
        if failed is not None and failed.kind == "divisible":
            if isinstance(stmt, ir.Store):  # one element, its loop simplified away: give it back a loop
                stmt = _one_element_loop(stmt)
                result = select(stmt, self.spec, hint)
            stmt = self._extend(stmt, result) if isinstance(result, NoMatch) else stmt
        return [(hint, stmt)]

    def _padding(self, stmt: ir.Stmt) -> tuple[ir.Stmt, ir.Stmt] | None:
        """LAYOUT for padding: ``D[i] = if_then_else(c, S[j], 0)`` (perhaps under a guard ``g``) into an
        on-chip ``D`` -> a zero-fill of the span of ``D`` the nest writes, then ``if g and c: D[i] =
        S[j]``, whose guard loop partitioning turns into the strided copy of the interior. Zeroing the
        elements ``g`` excludes is harmless: they lie outside the staged tensor's region, which nothing
        reads."""
        loops, inner = _loops(stmt)
        guard = None
        if isinstance(inner, ir.IfThenElse) and inner.else_case is None:
            guard, inner = inner.cond, inner.then_case
        if not isinstance(inner, ir.Store) or inner.buffer not in self.allocs:
            return None
        v = inner.value
        if not (isinstance(v, Call) and v.name == "if_then_else"):
            return None
        cond, value, other = v.args
        if not isinstance(other, ir.IntImm | ir.FloatImm) or other.value != 0:
            return None
        span = _span(inner, _loop_ranges(stmt))
        if span is None:
            return None
        zero = self._fill(inner.buffer, span.lo, span.hi + 1, may_grow=True)  # the span the nest writes
        keep = cond if guard is None else ir.And(guard, cond)
        copy = _wrap(loops, ir.IfThenElse(keep, ir.Store(inner.buffer, inner.indices, value), None))
        return zero, copy

    def _unguard(self, stmt: ir.Stmt) -> ir.Stmt | None:
        """COM (AddExtraCompute): a guarded statement that only reads and writes on-chip buffers, at
        indices that stay inside them over the whole nest, loses its guards. The extra iterations compute
        elements outside the tensor's region (that is what a bound guard excludes), which nothing reads:
        a conv tile at the end of a core's rows computes a few more rows that are never copied out, from
        input rows copied from an on-chip tile that the copy's guard no longer leaves out. Only where what
        the extra iterations read lies among the elements the allocation's scope writes (its hull): a read
        of elements nothing wrote (an SMEM tile's rows past the image) keeps its guard."""
        if not _has_guard(stmt):
            return None
        body = _StripGuards().mutate(stmt)
        ranges = {**self.outer, **_loop_ranges(body)}
        accesses: list[ir.Load | ir.Store] = []
        post_order_visit(body, lambda n: accesses.append(n) if isinstance(n, ir.Load | ir.Store) else None)
        if any(a.buffer not in self.allocs or _span(a, ranges) is None for a in accesses):
            return None
        for load in (a for a in accesses if isinstance(a, ir.Load)):
            written, read = self.written.get(load.buffer), _span(load, ranges)
            if written is None or read.lo < written.lo or read.hi > written.hi:
                return None   # the extra iterations would read elements nothing wrote
        return body

    def _in_place(self, stmt: ir.Stmt, hint: str) -> tuple[ir.Stmt, ir.Stmt] | None:
        """LAYOUT: ``D[i] = f(S[j])`` for an in-place instruction -> ``D[i] = S[j]``; ``D[i] = f(D[i])``. The
        instruction is the one the mark names; a mark that names none (a user's operator, marked with its
        own name) is split when an in-place instruction of the spec computes ``D[i] = f(D[i])``."""
        in_place = [i for i in self.spec.instructions.values()
                    if any(s.writes[0] in s.reads for s in i.typed.values() if s.writes)]
        named = {n.lower(): i for n, i in self.spec.instructions.items()}.get(hint.lower())
        if named is not None and named not in in_place or not in_place:
            return None
        split = self._split_in_place(stmt)
        if split is None or named is not None:
            return split
        return split if any(isinstance(match(split[1], self.spec, i), Match) for i in in_place) else None

    @staticmethod
    def _split_in_place(stmt: ir.Stmt) -> tuple[ir.Stmt, ir.Stmt] | None:
        loops, store = _nest(stmt)
        if store is None:
            return None
        loads = loads_in(store.value)
        if len(loads) != 1 or loads[0].buffer is store.buffer:
            return None
        (src,) = loads
        if src.buffer.dtype != store.buffer.dtype:
            return None
        copy = ir.Store(store.buffer, store.indices, src)
        compute = ir.Store(store.buffer, store.indices, _ReplaceLoad(src, store.buffer[store.indices]).mutate(
            store.value))
        return _wrap(loops, copy), _wrap(loops, compute)

    def _extend(self, stmt: ir.Stmt, why: NoMatch) -> ir.Stmt:
        """COM + ALIGN: grow the loop that sets the rule's field until the rule holds: a contiguous
        one-dimensional statement's loop, or the outermost loop of a statement's first dimension where the
        loops of that dimension merged into one (the rows of ``dst[r, c] = a[r, c] + b[c]``: one more row
        at a time; an operand that steps 0 along them, ``b``, takes no extra elements)."""
        loops, store = _nest(stmt)
        stepping = [x for x in why.loops if x.extent > 1]
        if store is not None and len(stepping) == 1 and all(c == 1 for c in stepping[0].coefs.values()):
            loop = stepping[0]
            target = next((s for s in loops if s.var is loop.var), None)
        elif store is not None and not stepping and len(loops) == 1 and loops[0].extent.value == 1:
            loop, target = why.loops[0], loops[0]  # one element
        elif store is not None and len(stepping) > 1 and stepping[0].var is loops[0].var:
            loop, target = stepping[0], loops[0]  # the outermost dimension, by its outermost loop
        else:
            return stmt  # only the statements above are extended
        names = t.names_in(why.constraint.rule) & set(why.fields)
        scaled = [n for n in names if why.field_loops.get(n) is loop]
        rows = loop.extent // target.extent.value if target is not None else 0   # per iteration of target
        if target is None or rows * target.extent.value != loop.extent or len(scaled) != 1 or \
                (rows > 1 and len(stepping) == 1):
            return stmt  # the loop counts bytes of a wider element, or several fields depend on it
        if any(c < 0 for x in stepping for c in x.coefs.values()):
            return stmt
        (name,) = scaled
        per_iter = why.fields[name] // loop.extent
        new_extent = self._satisfying(why, name, per_iter * rows, target.extent.value)
        if new_extent is None:
            return stmt
        instr = self.spec.instruction(why.instruction)
        reads = {r for s in instr.typed.values() for r in s.reads}

        def span(operand: str, extent: int) -> int:
            """The elements after its start that the statement covers in the operand's buffer."""
            if not stepping:
                return extent
            return 1 + sum(((extent if x is loop else x.extent) - 1) * x.coefs[operand] for x in stepping)

        plans = []
        for operand, (buf, offset) in why.regions.items():
            lf = linear_form(offset)
            if buf not in self.allocs or lf is None or not lf.is_const:
                return stmt  # only on-chip buffers at constant offsets can take extra elements
            start = lf.const  # the statement covers [start, start + span) of buf
            old, new = span(operand, loop.extent), span(operand, new_extent * rows)
            if new > old:
                plans.append((operand in reads, buf, start + old, start + new))
        for is_read, buf, lo, hi in plans:
            self.grow[buf] = max(self.grow.get(buf, buf.size), hi)
            if is_read:
                self.fills.setdefault(buf, []).append((lo, hi))
        return _ExtendLoop(target, new_extent).mutate(stmt)

    def _satisfying(self, why: NoMatch, name: str, per_iter: int, extent: int) -> int | None:
        for e in range(extent + 1, extent + MAX_EXTRA + 1):
            env = self.spec.scalar_env({**why.fields, name: e * per_iter})
            try:
                if evaluate_scalar(why.constraint.rule, env):
                    return e
            except isa.ExecError:
                return None
        return None

    def _fill(self, buf: ir.Buffer, lo: int, hi: int, may_grow: bool = False) -> ir.Attr:
        """A marked zero-fill of ``buf[lo:hi]``, widened to the coarsest granularity an instruction accepts
        (the fill runs before anything else that reads the elements it adds, so widening it is harmless);
        with ``may_grow``, the allocation grows when no widening inside it is accepted (ALIGN)."""
        grains = (1024, 512, 256, 128, 64, 32, 16, 8, 4, 2)
        for grow in (False, True) if may_grow else (False,):
            for grain in grains if not grow else reversed(grains):
                a, b = lo // grain * grain, -(-hi // grain) * grain
                if b > max(buf.size, self.grow.get(buf, 0)) and not grow:
                    continue
                stmt = _zero_loop(buf, a, b)
                if isinstance(select(stmt, self.spec, "zero"), Match):
                    if b > buf.size:
                        self.grow[buf] = max(self.grow.get(buf, buf.size), b)
                    return ir.Attr("pragma_intrin", "zero", stmt)
        return ir.Attr("pragma_intrin", "zero", _zero_loop(buf, lo, hi))


# --------------------------------------------------------------------------------------------------
# helpers


def _written(buf: ir.Buffer, body: ir.Stmt, outer: dict[ir.Var, Interval]) -> Interval | None:
    """The hull of the elements of ``buf`` that ``body`` stores to (None when it stores to none, or where
    an index is unbounded)."""
    ranges = {**outer, **_loop_ranges(body)}
    lo = hi = None
    for st in _stores_in(body):
        if st.buffer is not buf:
            continue
        span = _span(st, ranges)
        if span is None:
            return None
        lo, hi = (span.lo, span.hi) if lo is None else (min(lo, span.lo), max(hi, span.hi))
    return None if lo is None else Interval(lo, hi)


def _fission(stmt: ir.Stmt) -> list[ir.Stmt] | None:
    """``for ...: {S1; ...; Sn}`` as ``[for ...: S1, ..., for ...: Sn]`` (the same loops around each), or
    None unless that computes the same: no Si reads a buffer another writes, and two that write one buffer
    write disjoint elements whatever the iterations (``_disjoint_writes``)."""
    loops, body = _loops(stmt)
    if not loops or not isinstance(body, ir.Seq) or len(body.stmts) < 2:
        return None
    parts = body.stmts
    writes = [{st.buffer for st in _stores_in(part)} for part in parts]
    reads = [{ld.buffer for ld in loads_in(part)} for part in parts]
    for i in range(len(parts)):
        others = set().union(*(w for j, w in enumerate(writes) if j != i))
        if reads[i] & others:
            return None
    outer = {loop.var: _range_of(loop) for loop in loops}
    if None in outer.values():
        return None
    for i in range(len(parts)):
        for j in range(i + 1, len(parts)):
            for buf in writes[i] & writes[j]:
                if not _disjoint_writes(parts[i], parts[j], buf, outer):
                    return None
    return [_wrap(loops, part) for part in parts]


def _disjoint_writes(a: ir.Stmt, b: ir.Stmt, buf: ir.Buffer, outer: dict[ir.Var, Interval]) -> bool:
    """Whether ``a`` and ``b`` write disjoint elements of ``buf`` in any iterations of the ``outer`` loops:
    every store's index is ``sum(k_v v) + rest`` with the same coefficients k_v of the outer variables,
    ``a``'s rests and ``b``'s lie in disjoint ranges, and both within one stride of the smallest k_v (so
    different outer iterations write different blocks)."""
    spans, coefs = [], set()
    for part in (a, b):
        inner = _loop_ranges(part)
        lo = hi = None
        for st in _stores_in(part):
            if st.buffer is not buf or len(st.indices) != 1:
                continue
            lf = linear_form(st.indices[0])
            if lf is None:
                return False
            coefs.add(tuple(lf.coef(v) for v in outer))
            rest = st.indices[0] - sum((ir.const(lf.coef(v)) * v for v in outer), ir.const(0))
            r = bound(rest, inner)
            if r.lo is None or r.hi is None:
                return False
            lo, hi = (r.lo, r.hi) if lo is None else (min(lo, r.lo), max(hi, r.hi))
        spans.append((lo, hi))
    if len(coefs) != 1:
        return False
    (ka, (lo_a, hi_a)), (lo_b, hi_b) = (coefs.pop(), spans[0]), spans[1]
    if hi_a < lo_b or hi_b < lo_a:
        steps = [abs(k) for k, v in zip(ka, outer, strict=True) if k and outer[v].lo != outer[v].hi]
        return not steps or max(hi_a, hi_b) - min(lo_a, lo_b) < min(steps)
    return False


def _stores_in(node: ir.Stmt) -> list[ir.Store]:
    found: list[ir.Store] = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, ir.Store) else None)
    return found


def _loops(stmt: ir.Stmt) -> tuple[list[ir.For], ir.Stmt]:
    loops = []
    while isinstance(stmt, ir.For) and stmt.kind is not ir.ForKind.THREAD_BINDING:
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt


def _nest(stmt: ir.Stmt) -> tuple[list[ir.For], ir.Store | None]:
    loops, stmt = _loops(stmt)
    return loops, stmt if isinstance(stmt, ir.Store) else None


def _loop_ranges(stmt: ir.Stmt) -> dict[ir.Var, Interval]:
    """The range of every loop in ``stmt`` with constant bounds."""
    ranges: dict[ir.Var, Interval] = {}

    def visit(n) -> None:
        rng = _range_of(n) if isinstance(n, ir.For) else None
        if rng is not None:
            ranges[n.var] = rng

    post_order_visit(stmt, visit)
    return ranges


def _range_of(loop: ir.For) -> Interval | None:
    """The range of ``loop``'s variable when its bounds are constant and it runs at least once."""
    if isinstance(loop.min, ir.IntImm) and isinstance(loop.extent, ir.IntImm) and loop.extent.value > 0:
        return Interval.from_extent(loop.min.value, loop.extent.value)
    return None


def _span(access: ir.Load | ir.Store, ranges: dict[ir.Var, Interval]) -> Interval | None:
    """The elements a flat ``access`` touches over ``ranges``, or None unless all lie inside its buffer."""
    if len(access.indices) != 1:
        return None
    b = bound(access.indices[0], ranges)
    if b.lo is None or b.hi is None or b.lo < 0 or b.hi >= access.buffer.size:
        return None
    return b


def _has_guard(stmt: ir.Stmt) -> bool:
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, ir.IfThenElse) else None)
    return bool(found)


class _StripGuards(IRMutator):
    def mutate_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        if s.else_case is not None:
            return self.generic_mutate(s)
        return self.mutate(s.then_case)


def _wrap(loops: list[ir.For], body: ir.Stmt) -> ir.Stmt:
    for s in reversed(loops):
        body = ir.For(s.var, s.min, s.extent, body, s.kind, s.thread)
    return body


def _one_element_loop(store: ir.Store) -> ir.For:
    """``for e in range(1)`` around ``store``, every index of it (and of its loads) plus ``e``."""
    e = ir.Var("e")

    class _Shift(IRMutator):
        def mutate_Load(self, load: ir.Load) -> ir.Load:
            return ir.Load(load.buffer, (*load.indices[:-1], load.indices[-1] + e))

    value = _Shift().mutate(store.value)
    return ir.For(e, ir.const(0), ir.const(1),
                  ir.Store(store.buffer, (*store.indices[:-1], store.indices[-1] + e), value))


def _zero_loop(buf: ir.Buffer, lo: int, hi: int) -> ir.Stmt:
    i = ir.Var("i")
    zero = ir.const(0, buf.dtype)
    return ir.For(i, ir.const(lo), ir.const(hi - lo), ir.Store(buf, (i,), zero))


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


class _ReplaceLoad(IRMutator):
    def __init__(self, old: ir.Load, new: ir.Load) -> None:
        self.old, self.new = old, new

    def mutate_Load(self, load: ir.Load) -> ir.Expr:
        return self.new if load is self.old else load


class _ExtendLoop(IRMutator):
    def __init__(self, target: ir.For, extent: int) -> None:
        self.target, self.extent = target, extent

    def mutate_For(self, s: ir.For) -> ir.Stmt:
        if s is self.target:
            return ir.For(s.var, s.min, ir.const(self.extent), s.body, s.kind, s.thread)
        return self.generic_mutate(s)


class _Rebuffer(IRMutator):
    def __init__(self, old: ir.Buffer, new: ir.Buffer) -> None:
        self.old, self.new = old, new

    def mutate_buffer(self, buffer: ir.Buffer) -> ir.Buffer:
        return self.new if buffer is self.old else buffer

