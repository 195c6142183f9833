"""fuse_reduction_ends: a reduction's initialization and epilogue fused into its first and last updates.

TVM's tensorize splits a reduction intrinsic into ``reduce_init`` and ``reduce_update``; VTA's GEMM zeroes
its accumulators (``GEMM_RESET``), accumulates one chunk of input channels at a time (``GEMM``), then its
ALU shifts and clips them before STORE_OUT writes 8 bits. Where the spec has instructions that do the ends
in one step, this pass uses them, for every output tile of a nest of tile instructions (the flat IR
``tensorize_tiles`` leaves):

- **first**: an instruction whose one statement is ``acc[b, o] = sum(k, P)``, where ``acc[b, o] += P`` is
  the update's, replaces the initialization (an instruction assigning ``acc`` a constant: ``GEMM_RESET``)
  and the first step of the reduction: the first chunk's first iteration of the reduction loops inside
  the update's nest. Integer sums commute, so that step runs first and the chunk's other steps after it;
- **last**: an instruction whose one statement is ``acc[b, o] = E(acc[b, o] + sum(k, P))``, where ``E`` is
  the tree the ALU stages after the reduction compute in place on the same accumulator tiles (VTA's
  ``min(max(x >> 8, -128), 127)``), replaces those stages and the reduction's last step (the last chunk's
  last iteration), with the constants of the stages as its fields.

Every comparison is the spec's: the instructions are told apart by their semantics, not their names.
The composed tree (the init's constant, or the update's tree then each ALU stage's, with their fields'
values) is written as loop IR over one probe tile per operand and matched against each candidate's
semantics with the one matcher (``compiler.passes.match.TreeMatch``, a ``sum`` matching its body alone, a
shift a floor division by a power of two); a candidate must have the update's operands (names, spaces,
dtypes, shapes), index variables and accesses, so the update's regions (and micro-op addressing) serve it.
A fusion is made only where it is cheaper by the spec's timing for the nest's micro-ops: the fused
instruction (plus the pipeline fill of each extra nest the peeling makes) against what it replaces.

Rewrite (first and last, chunk loop ``c`` of C iterations, reduction loops ``r`` inside the nest):

    init(acc)                         for c: loads
    for c: loads; for s, r: GEMM  ->      if c == 0: for s: FIRST at r = (0, ...); the rest of the box in
    ALU stages over acc                              rectangular GEMM nests (for s, r in [lo, hi): GEMM)
                                        elif c == C - 1: the rest in GEMM nests; for s: LAST at r = (max, ...)
                                        else: for s, r: GEMM

Preconditions: the init nest, then the statement holding the update nest (in at most one loop, the chunk
loop, among allocations), then the ALU stages, in one statement list; the update nest's loops over the
accumulator's tiles (spatial) come before its reduction loops, and the init and the stages cover the same
tiles. Anything else is left as it is. The spec without such instructions yields the same program.

Non-Goals: fusing a prefix of the epilogue other than the one a candidate matches whole (the stages it
matches are the first n; the rest stay ALU stages), reductions with a bias load (its ADD is the first
stage, which the last instruction's tree would have to contain).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import isa
from compiler.arith import simplify
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, free_vars, substitute
from compiler.passes.cover import in_place
from compiler.passes.match import NoTreeMatch, TreeMatch, same_index
from compiler.passes.tensorize_tiles import GROUPS, MARKS
from isa.lang import tree as t
from isa.lang.scalar import ScalarEnv
from isa.lang.scalar import evaluate as evaluate_scalar

Box = tuple[tuple[int, int], ...]   # [lo, hi) per reduction loop


def fuse_reduction_ends(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Fuse each reduction's init and epilogue into its first and last steps (module docstring)."""
    ends = Ends(spec)
    if not ends.candidates:
        return func
    body = _Fuse(ends).mutate(func.body)
    return func if body is func.body else ir.PrimFunc(func.name, func.params, body, func.attrs)


def fusable_ends(spec: isa.ISA) -> tuple[bool, bool]:
    """Whether ``spec`` has an instruction for a reduction's first step (``acc = sum(...)``) and one for its
    last (``acc = E(acc + sum(...))``, reading the accumulator it writes), by their semantics: what a cost
    model may assume this pass will fuse (it still checks each nest, and the timing)."""
    reads_acc = [in_place(i) for i in Ends(spec).candidates]
    return not all(reads_acc) if reads_acc else False, any(reads_acc)


class _NoFuse(Exception):
    pass


@dataclass(frozen=True)
class Nest:
    """Loops around one tile instruction, and the mark around them."""

    attr: ir.Attr | None
    loops: tuple[ir.For, ...]
    insn: ir.TensorInsn

    @staticmethod
    def of(s: ir.Stmt) -> Nest | None:
        attr = None
        if isinstance(s, ir.Attr) and s.key in MARKS:
            attr, s = s, s.body
        loops = []
        while isinstance(s, ir.For):
            loops.append(s)
            s = s.body
        return Nest(attr, tuple(loops), s) if isinstance(s, ir.TensorInsn) else None

    def region(self, operand: str) -> ir.Region:
        return next(r for r in self.insn.regions if r.operand == operand)

    def extents(self) -> tuple[int, ...] | None:
        if all(isinstance(lp.extent, ir.IntImm) and isinstance(lp.min, ir.IntImm) for lp in self.loops):
            return tuple(lp.extent.value for lp in self.loops)
        return None


@dataclass(frozen=True)
class Fused:
    """A chosen end instruction, the fields the match set, and how many ALU stages it replaces."""

    name: str
    fields: Mapping[str, int]
    stages: int = 0


# ---------------------------------------------------------------------------------------------- the spec

class Ends:
    """What the spec offers: its single-statement tile instructions by role, and the matcher's probes."""

    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec
        self.params = spec.params
        singles = [i for i in spec.instructions.values()
                   if i.group in GROUPS and len(i.typed_semantics().statements) == 1]
        self.updates = {i.name: i for i in singles if _stmt(i).op == "+="}
        self.candidates = [i for i in singles if _stmt(i).op == "=" and _reads_sum(i)]
        self._probes: dict[str, Callable[[t.Access], ir.Expr]] = {}

    def role(self, insn: ir.TensorInsn) -> str | None:
        """"init" (assigns a constant), "update" (``+=``), "stage" (an in-place ALU instruction) or None."""
        instr = self.spec.instruction(insn.name)
        if instr.group not in GROUPS or len(instr.typed_semantics().statements) != 1:
            return None
        s = _stmt(instr)
        if s.op == "+=":
            return "update"
        if not any(isinstance(x, t.Access) for x in t.walk(s.value)):
            return "init" if instr.group == GROUPS[0] else None
        return "stage" if instr.group == GROUPS[1] else None

    # ---- the composed trees, as loop IR over probe tiles

    def probes(self, update: isa.Instruction) -> Callable[[t.Access], ir.Expr]:
        """Loads of one probe tile per operand of ``update`` at the access's row-major index (the same
        tiles on every call)."""
        if update.name not in self._probes:
            self._probes[update.name] = self._new_probes(update)
        return self._probes[update.name]

    def _new_probes(self, update: isa.Instruction) -> Callable[[t.Access], ir.Expr]:
        env = ScalarEnv(self.params)
        names: dict[str, ir.Var] = {}
        bufs = {}
        for op in update.operands:
            dims = tuple(int(evaluate_scalar(d, env)) for d in op.shape)
            size = 1
            for d in dims:
                size *= d
            bufs[op.name] = (ir.Buffer(f"probe.{op.name}", (size,), dtypes.dtype(op.dtype), "probe"), dims)

        def load(a: t.Access) -> ir.Expr:
            buf, dims = bufs[a.tensor]
            index: ir.Expr = ir.const(0)
            for k, idx in enumerate(a.indices):
                if not isinstance(idx, t.Name):
                    raise _NoFuse(f"{update.name} indexes {a.tensor} by {t.to_text(idx)}")
                stride = 1
                for d in dims[k + 1:]:
                    stride *= d
                index = index + names.setdefault(idx.id, ir.Var(idx.id)) * stride
            return buf[simplify(index)]
        return load

    def to_ir(self, e: t.Expr, instr: isa.Instruction, fields: Mapping[str, int],
              access: Callable[[t.Access], ir.Expr]) -> ir.Expr:
        """``e`` (of ``instr``, with ``fields``) as loop IR, its accesses given by ``access``; a subtree of
        fields and parameters alone becomes its value, a select on one the branch it takes."""
        if not any(isinstance(x, t.Access | t.Reduce) for x in t.walk(e)):
            defaults = {f.name: f.default for f in instr.fields if f.default is not None}
            value = evaluate_scalar(e, self.spec.scalar_env({**defaults, **fields}))
            return ir.const(int(value), "int32" if e.dtype in (None, "int", "bool") else e.dtype)

        def sub(x: t.Expr) -> ir.Expr:
            return self.to_ir(x, instr, fields, access)
        if isinstance(e, t.Access):
            return access(e)
        if isinstance(e, t.Cast):
            return ir.cast(sub(e.value), dtypes.dtype(e.dtype))
        if isinstance(e, t.Reduce) and e.op == "sum":
            return sub(e.body)   # one term: what the matcher's sums rule compares
        if isinstance(e, t.Call) and e.func == "select":
            cond = self.to_ir(e.args[0], instr, fields, access)
            if not isinstance(cond, ir.IntImm):
                raise _NoFuse(f"{instr.name}: select on {t.to_text(e.args[0])}")
            return sub(e.args[1] if cond.value else e.args[2])
        if isinstance(e, t.Call) and e.func in ("min", "max"):
            node = ir.Min if e.func == "min" else ir.Max
            return node(sub(e.args[0]), sub(e.args[1]))
        if isinstance(e, t.Binary) and e.op in ("+", "-", "*"):
            node = {"+": ir.Add, "-": ir.Sub, "*": ir.Mul}[e.op]
            return node(sub(e.lhs), sub(e.rhs))
        if isinstance(e, t.Binary) and e.op == ">>":
            amount = sub(e.rhs)
            if not isinstance(amount, ir.IntImm) or not 0 <= amount.value < 31:
                raise _NoFuse(f"{instr.name}: a shift by {amount}")
            x = sub(e.lhs)
            return ir.FloorDiv(x, ir.const(1 << amount.value, x.dtype)) if amount.value else x
        raise _NoFuse(f"{instr.name}: {t.to_text(e)} has no loop-IR form here")

    def composed(self, init: ir.TensorInsn | None, update: ir.TensorInsn,
                 stages: tuple[ir.TensorInsn, ...]) -> ir.Expr:
        """The value one step leaves in the accumulator: the update after ``init`` (its constant for the
        accumulator), or the update then ``stages`` (each in place on the accumulator)."""
        upd = self.spec.instruction(update.name)
        load = self.probes(upd)
        target = _stmt(upd).target
        acc: ir.Expr = load(target)
        if init is not None:
            iv = self.spec.instruction(init.name)
            acc = self.to_ir(_stmt(iv).value, iv, _fields(init), load)
        value = ir.Add(acc, self.to_ir(_stmt(upd).value, upd, _fields(update),
                                       lambda a: acc if a.tensor == target.tensor else load(a)))
        for stage in stages:
            instr = self.spec.instruction(stage.name)
            cur = value
            value = self.to_ir(_stmt(instr).value, instr, _fields(stage), lambda a, cur=cur: cur)
        return simplify(value)

    def match(self, update: ir.TensorInsn, value: ir.Expr, reads_acc: bool) -> Fused | None:
        """The first candidate whose tree computes ``value`` with the update's operands, or None."""
        upd = self.spec.instruction(update.name)
        load = self.probes(upd)
        target = _stmt(upd).target
        for cand in self.candidates:
            if not _same_shape(cand, upd) or _reads(cand, target.tensor) != reads_acc:
                continue
            defaults = {f.name: f.default for f in cand.fields if f.default is not None}
            tm = TreeMatch(fields=frozenset(f.name for f in cand.fields),
                           field_defaults={**defaults, **self.params}, shifts=True, sums=True)
            try:
                tm.match(_stmt(cand).value, value)
            except NoTreeMatch:
                continue
            if all(_bound_as(tm, a, load) for a in t.walk(_stmt(cand).value) if isinstance(a, t.Access)):
                return Fused(cand.name, dict(tm.values))
        return None

    # ---- timing

    def cycles(self, name: str, fields: Mapping[str, int], uops: int) -> int:
        """Latency plus cycles of ``name`` running ``uops`` micro-ops (the spec's timing)."""
        _, lat, cyc = isa.timing_of(self.spec, self.spec.insn(name, **fields, uop_bgn=0, uop_end=uops,
                                                               iter_out=1, iter_in=1))
        return (lat or 0) + (cyc or 0)

    def fill(self, name: str) -> int:
        _, lat, _ = isa.timing_of(self.spec, self.spec.insn(name, uop_bgn=0, uop_end=1, iter_out=1,
                                                               iter_in=1))
        return lat or 0


def _stmt(instr: isa.Instruction) -> t.Assign:
    return instr.typed_semantics().statements[0]


def _reads_sum(instr: isa.Instruction) -> bool:
    return any(isinstance(x, t.Reduce) and x.op == "sum" for x in t.walk(_stmt(instr).value))


def _reads(instr: isa.Instruction, operand: str) -> bool:
    return any(isinstance(x, t.Access) and x.tensor == operand for x in t.walk(_stmt(instr).value))


def _fields(insn: ir.TensorInsn) -> dict[str, int]:
    return {f.name: f.value.value for f in insn.fields if isinstance(f.value, ir.IntImm)}


def _same_shape(a: isa.Instruction, b: isa.Instruction) -> bool:
    """The same operands (name, space, dtype, shape), index variables and target."""
    def ops(i: isa.Instruction):
        return sorted((o.name, o.space, o.dtype, tuple(map(t.to_text, o.shape))) for o in i.operands)

    def ivs(i: isa.Instruction):
        return [(v.name, v.kind, t.to_text(v.extent)) for v in i.typed_semantics().indices]
    return ops(a) == ops(b) and ivs(a) == ivs(b) and _stmt(a).target == _stmt(b).target


def _bound_as(tm: TreeMatch, a: t.Access, load: Callable[[t.Access], ir.Expr]) -> bool:
    """The candidate's access ``a`` was bound to the probe tile and index the update has for it."""
    want = load(a)
    have = tm.operands.get(a.tensor)
    return have is not None and have[0] is want.buffer and same_index(have[1], want.indices[0])


# ------------------------------------------------------------------------------------------ the rewrite

class _Fuse(IRMutator):
    def __init__(self, ends: Ends) -> None:
        self.ends = ends

    def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
        stmts = [self.mutate(x) for x in s.stmts]
        out, i = [], 0
        while i < len(stmts):
            done = _fuse_at(self.ends, stmts, i)
            if done is None:
                out.append(stmts[i])
                i += 1
            else:
                new, used = done
                out.append(new)
                i += used
        return ir.seq(*out)


def _fuse_at(ends: Ends, stmts: list[ir.Stmt], i: int) -> tuple[ir.Stmt, int] | None:
    """The statements from ``i`` on with the ends fused, and how many they replace; None where no fusion
    applies there."""
    init = Nest.of(stmts[i])
    if init is None or i + 1 >= len(stmts) or ends.role(init.insn) != "init":
        return None
    try:
        red = _Reduction.find(ends, init, stmts[i + 1])
    except _NoFuse:
        return None
    stages = []
    for s in stmts[i + 2:]:
        nest = Nest.of(s)
        if nest is None or ends.role(nest.insn) != "stage" or not red.covers(nest, in_place=True):
            break
        stages.append(nest)
    first, last = red.choose(ends, init, stages)
    if first is None and last is None:
        return None
    return red.rewrite(stmts[i], first, last), 2 + (last.stages if last else 0)


def _pieces(box: Box, first: bool, last: bool) -> list[Box]:
    """``box`` less its low corner (``first``) and its high corner (``last``), as boxes: the points before
    the corner in dimension d, the earlier dimensions at the corner's value."""
    def minus(b: Box, low: bool) -> list[Box]:
        out = []
        for d, (lo, hi) in enumerate(b):
            fixed = tuple((x, x + 1) if low else (y - 1, y) for x, y in b[:d])
            rest = (lo + 1, hi) if low else (lo, hi - 1)
            if rest[1] > rest[0]:
                out.append((*fixed, rest, *b[d + 1:]))
        return out

    def has(b: Box, point: tuple[int, ...]) -> bool:
        return all(lo <= x < hi for (lo, hi), x in zip(b, point, strict=True))
    pieces = minus(box, True) if first else [box]
    if last:
        top = tuple(hi - 1 for _, hi in box)
        pieces = [q for p in pieces for q in (minus(p, False) if has(p, top) else [p])]
    return pieces


@dataclass
class _Reduction:
    """An update nest inside the statement after its init (in at most one chunk loop)."""

    ends: Ends
    stmt: ir.Stmt                 # the statement after the init
    chunk: ir.For | None          # the chunk loop, where there is one
    attr: ir.Attr                 # the update nest's mark
    update: Nest
    spatial: tuple[ir.For, ...]   # the update nest's loops over accumulator tiles
    reduce: tuple[ir.For, ...]    # its reduction loops, inside those
    init: ir.Stmt | None = None

    @staticmethod
    def find(ends: Ends, init: Nest, stmt: ir.Stmt) -> _Reduction:
        chunk = stmt if isinstance(stmt, ir.For) else None
        found: list[tuple[ir.Attr, Nest]] = []

        def walk(s: ir.Stmt) -> None:
            nest = Nest.of(s)
            if isinstance(s, ir.Seq):
                for x in s.stmts:
                    walk(x)
            elif nest is not None:
                if ends.role(nest.insn) == "update" and isinstance(s, ir.Attr):
                    found.append((s, nest))
            elif isinstance(s, ir.Allocate | ir.Attr):
                walk(s.body)
        walk(chunk.body if chunk is not None else stmt)
        if len(found) != 1:
            raise _NoFuse(f"{len(found)} update nests")
        attr, update = found[0]
        target = _stmt(ends.spec.instruction(update.insn.name)).target.tensor
        acc = update.region(target)
        inside = free_vars(acc.offset)
        if update.extents() is None or any(lp.min.value for lp in update.loops):
            raise _NoFuse("the update's loops are not constant ranges from 0")
        if chunk is not None and (chunk.var in inside or chunk.thread or not isinstance(chunk.min, ir.IntImm)
                                  or not isinstance(chunk.extent, ir.IntImm)):
            raise _NoFuse("the loop around the update is not a chunk loop")
        n = sum(1 for lp in update.loops if lp.var in inside)
        if any(lp.var in inside for lp in update.loops[n:]):
            raise _NoFuse("a reduction loop comes before a spatial loop")
        red = _Reduction(ends, stmt, chunk, attr, update, update.loops[:n], update.loops[n:])
        if not red.covers(init, in_place=False):
            raise _NoFuse("the init does not cover the update's tiles")
        return red

    @property
    def target(self) -> str:
        return _stmt(self.ends.spec.instruction(self.update.insn.name)).target.tensor

    def covers(self, nest: Nest, in_place: bool) -> bool:
        """``nest`` walks the update's accumulator tiles in the same order (every operand on them when
        ``in_place``; else its target)."""
        acc = self.update.region(self.target)
        if nest.extents() != tuple(lp.extent.value for lp in self.spatial):
            return False
        rename = {a.var: b.var for a, b in zip(nest.loops, self.spatial, strict=True)}
        if in_place:
            regions = nest.insn.regions
        else:
            own = _stmt(self.ends.spec.instruction(nest.insn.name)).target.tensor
            regions = [nest.region(own)]
        return all(r.buffer is acc.buffer and same_index(substitute(r.offset, rename), acc.offset)
                   for r in regions)

    # ---- choice

    def choose(self, ends: Ends, init: Nest, stages: list[Nest]) -> tuple[Fused | None, Fused | None]:
        """The end instructions to use: matched, and cheaper than what they replace for one nest."""
        uops = 1
        for lp in self.spatial:
            uops *= lp.extent.value
        gemm = self.update.insn.name
        fill = ends.fill(gemm)
        step = ends.cycles(gemm, {}, uops) - fill   # one step of the reduction for every tile
        box = self.box
        first = ends.match(self.update.insn, ends.composed(init.insn, self.update.insn, ()), False)
        if first is not None:
            extra = max(len(_pieces(box, True, False)) - 1, 0)
            if ends.cycles(first.name, first.fields, uops) + extra * fill >= \
                    ends.cycles(init.insn.name, _fields(init.insn), uops) + step:
                first = None
        last = None
        for k in range(len(stages), 0, -1):
            chosen = tuple(s.insn for s in stages[:k])
            try:
                found = ends.match(self.update.insn, ends.composed(None, self.update.insn, chosen), True)
            except _NoFuse:
                continue
            if found is None:
                continue
            extra = max(len(_pieces(box, False, True)) - 1, 0)
            before = step + sum(ends.cycles(s.name, _fields(s), uops) for s in chosen)
            if ends.cycles(found.name, found.fields, uops) + extra * fill < before:
                last = Fused(found.name, found.fields, k)
            break
        one_step = all(hi - lo == 1 for lo, hi in box) and self.chunks == 1
        return first, (None if one_step and first is not None else last)

    @property
    def box(self) -> Box:
        return tuple((lp.min.value, lp.min.value + lp.extent.value) for lp in self.reduce)

    @property
    def chunks(self) -> int:
        return self.chunk.extent.value if self.chunk is not None else 1

    # ---- the rewrite

    def rewrite(self, init: ir.Stmt, first: Fused | None, last: Fused | None) -> ir.Stmt:
        """The init (unless ``first`` replaces it) and the chunks: in the chunk loop, the first and the last
        chunk's update nest chosen by a guard on the chunk (decided by the host, as VTA's runtime would), so
        that the loop, its tokens and its virtual threads' interleaving stay as they were."""
        keep = None if first else init
        if self.chunk is None or self.chunk.extent.value == 1:
            at = self.chunk.min.value if self.chunk is not None else None
            body = _Replace(self.attr, self._ends(first, last)).mutate(
                self.chunk.body if self.chunk is not None else self.stmt)
            return ir.seq(keep, substitute(body, {self.chunk.var: ir.const(at)}) if at is not None else body)
        c = self.chunk
        lo, count = c.min.value, c.extent.value
        nest: ir.Stmt = self.attr
        if last:
            nest = ir.IfThenElse(ir.EQ(c.var, ir.const(lo + count - 1)), self._ends(None, last), nest)
        if first:
            nest = ir.IfThenElse(ir.EQ(c.var, ir.const(lo)), self._ends(first, None), nest)
        body = _Replace(self.attr, nest).mutate(c.body)
        return ir.seq(keep, ir.For(c.var, c.min, c.extent, body, c.kind, c.thread))

    def _ends(self, first: Fused | None, last: Fused | None) -> ir.Stmt:
        """The update nest cut into its ends and the rest of the reduction box."""
        parts, box = [], self.box
        if first:
            parts.append(self._nest(first.name, first.fields, tuple((lo, lo + 1) for lo, _ in box)))
        parts += [self._nest(self.update.insn.name, {}, b) for b in _pieces(box, bool(first), bool(last))]
        if last:
            parts.append(self._nest(last.name, last.fields, tuple((hi - 1, hi) for _, hi in self.box)))
        return ir.Attr(self.attr.key, self.attr.value, ir.seq(*parts))

    def _nest(self, name: str, fields: Mapping[str, int], box: Box) -> ir.Stmt:
        """The update's spatial loops around ``name`` over the reduction points of ``box``."""
        insn = self.update.insn
        subs = {lp.var: ir.const(lo) for lp, (lo, hi) in zip(self.reduce, box, strict=True) if hi - lo == 1}
        regions = tuple(ir.Region(r.operand, r.buffer, simplify(substitute(r.offset, subs)), r.shape,
                                  r.strides) for r in insn.regions)
        given = {f.name: f for f in insn.fields}
        given.update({k: ir.InsnField(k, ir.const(v)) for k, v in sorted(fields.items())})
        out: ir.Stmt = ir.TensorInsn(insn.isa, name, tuple(given.values()), regions)
        for lp, (lo, hi) in reversed(list(zip(self.reduce, box, strict=True))):
            if hi - lo > 1:
                out = ir.For(lp.var, ir.const(lo), ir.const(hi - lo), out, lp.kind, lp.thread)
        for lp in reversed(self.spatial):
            out = ir.For(lp.var, lp.min, lp.extent, out, lp.kind, lp.thread)
        return out


class _Replace(IRMutator):
    def __init__(self, old: ir.Stmt, new: ir.Stmt) -> None:
        self.old, self.new = old, new

    def mutate(self, node):
        return self.new if node is self.old else super().mutate(node)
