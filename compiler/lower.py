"""Lowering: a schedule -> a loop-IR ``PrimFunc`` (bound inference, loop nests, guards, placement).

The algorithm follows TVM's ``schedule.InferBound`` + ``ScheduleOps`` in four steps:

1. **Inline** stages marked ``compute_inline`` into their readers.
2. **Infer bounds**, consumers first. A stage at the root covers its whole domain. A stage computed at
   loop ``x`` of stage ``P`` covers the *region* its readers touch in one iteration of ``x``: every
   index of every read is relaxed over the loops inside ``x`` (``arith.relax``), giving a symbolic
   minimum in the loops outside ``x`` and a constant extent. Extents of split and fused loops follow.
   A buffer in a scope that several hardware threads share (``SHARED_SCOPES``: DianNao's cluster SMEM is
   shared by the cores of a cluster) is also relaxed over the loops bound to those threads, as TVM relaxes
   ``threadIdx`` for "shared" buffers: each thread's copy then holds the region of the whole group, and
   ``compiler.passes.share_smem`` can let one thread fill it for all.
3. **Build loop nests**, one loop per leaf axis, outermost first; each root axis is recomputed from
   the loops (``x = xo*f + xi``, ``y = fused // e``, ``z = fused % e``). Where a root value is not
   provably inside the axis's original domain (a split that does not divide, the tail of a region),
   the body is **guarded** by the original iteration space, innermost: seed 001's example
   ``if tid*4 + i < 14:``. Reductions get an init nest (spatial loops only) and an update nest
   (TVM's placement: the init sits just outside the first loop that touches a reduce axis).
4. **Place** stages: nests of stages computed at ``x`` open loop ``x``'s body, inside an ``Allocate`` of
   their region buffer (indices shifted by the region minimum); root intermediates are allocated at the
   top; pragma and tensorize marks become ``Attr`` nodes around their loops.

Postcondition: the function's parameters are the argument tensors' buffers, in order; every load is of
a parameter or of a buffer allocated around it; no ``Reduce`` remains.
Non-goals: symbolic shapes, multiple outputs per operation, storage reuse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from compiler import arith, te
from compiler.arith import Interval
from compiler.errors import LoweringError
from compiler.ir import nodes as ir
from compiler.ir.equality import structural_equal as ir_equal
from compiler.ir.functor import IRMutator, loads_in, substitute
from compiler.ir.intrinsics import prefetch
from compiler.schedule import Schedule, Split, Stage
from compiler.te import IterKind, IterVar, Tensor


@dataclass(eq=False)
class _Bounds:
    """What bound inference knows about one stage."""

    root_min: dict[IterVar, ir.Expr] = field(default_factory=dict)
    root_extent: dict[IterVar, int] = field(default_factory=dict)
    extent: dict[IterVar, int] = field(default_factory=dict)  # every iter var, leaves included
    loop_var: dict[IterVar, ir.Var] = field(default_factory=dict)  # leaf -> its loop variable
    value: dict[IterVar, ir.Expr] = field(default_factory=dict)  # root -> global index expression
    local: dict[IterVar, ir.Expr] = field(default_factory=dict)  # any axis -> value from its loops
    ranges: dict[ir.Var, Interval] = field(default_factory=dict)  # this stage's loop variables
    buffer: ir.Buffer | None = None
    offset: tuple[ir.Expr, ...] = ()


# scope -> the hardware axes (thread tags) whose threads share one buffer of that scope
SHARED_SCOPES: dict[str, frozenset[str]] = {"smem": frozenset({"core"})}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor], name: str) -> None:
        self.sch = sch
        self.name = name
        self.args = list(args)
        self.live = [s for s in sch.stages if not s.is_placeholder and s.attach[0] != "inline"]
        self.body: dict[Stage, ir.Expr] = {}
        self.bounds: dict[Stage, _Bounds] = {s: _Bounds() for s in self.live}
        self.param_of: dict[Stage, ir.Buffer] = {}
        self.attached: dict[tuple[Stage, IterVar], list[Stage]] = {}
        self.heads: dict[IterVar, ir.Stmt] = {}   # the prefetches that open a loop's body (``_prefetches``)

    # ------------------------------------------------------------------------------------------
    def run(self) -> ir.PrimFunc:
        self._check_args()
        self._inline()
        for stage in self.live:
            if stage.attach[0] == "at":
                parent, axis = stage.attach[1], stage.attach[2]
                if parent not in self.bounds:
                    raise LoweringError(
                        f"stage '{stage.name}' is computed at '{parent.name}', which has no loops"
                    )
                self.attached.setdefault((parent, axis), []).append(stage)
        for stage in reversed(self.live):
            self._infer(stage)
        for stage in self.live:
            self._assign_buffer(stage)
        roots = [s for s in self.live if s.attach[0] == "root"]
        body = ir.seq(*(self._stage_nest(s) for s in roots))
        for stage in reversed(roots):
            if stage not in self.param_of:
                body = ir.Allocate(self.bounds[stage].buffer, body)
        params = tuple(t.buffer for t in self.args)
        return ir.PrimFunc(self.name, params, body)

    # ------------------------------------------------------------------------------------------
    def _check_args(self) -> None:
        seen: set[int] = set()
        for t in self.args:
            if not isinstance(t, Tensor):
                raise LoweringError(f"lower {self.name}: expected tensors as arguments, got {t!r}")
            if id(t) in seen:
                raise LoweringError(f"lower {self.name}: tensor '{t.name}' is passed twice")
            seen.add(id(t))
            stage = self.sch[t]
            if stage.attach[0] != "root" and not stage.is_placeholder:
                raise LoweringError(
                    f"lower {self.name}: argument '{t.name}' must be computed at the root to be "
                    f"a parameter, but it is {stage.attach[0]}"
                )
            if stage.scope != "global":
                raise LoweringError(
                    f"lower {self.name}: argument '{t.name}' is in scope '{stage.scope}', "
                    f"parameters live in global memory"
                )
            self.param_of[stage] = t.buffer
        arg_ops = {t.op for t in self.args}
        for stage in self.sch.stages:
            if stage.is_placeholder and stage.op not in arg_ops and self.sch.readers(stage):
                raise LoweringError(
                    f"lower {self.name}: placeholder '{stage.name}' is read but is not in the "
                    f"argument list ({', '.join(t.name for t in self.args)})"
                )
        for op in self.sch.outputs:
            if op not in arg_ops:
                raise LoweringError(
                    f"lower {self.name}: output '{op.name}' is not in the argument list "
                    f"({', '.join(t.name for t in self.args)})"
                )

    def _inline(self) -> None:
        """Substitute inlined stages into readers (in producer-first order, so chains expand)."""
        inlined: dict[ir.Buffer, Stage] = {}
        for stage in self.sch.stages:
            if stage.is_placeholder:
                continue
            body = _InlineLoads(inlined, self.body).mutate(stage.body)
            self.body[stage] = body
            if stage.attach[0] == "inline":
                inlined[stage.output.buffer] = stage

    # ------------------------------------------------------------------------------------------
    # bound inference

    def _context(self, stage: Stage) -> dict[ir.Var, Interval]:
        """Ranges of every loop variable in scope in ``stage``'s body (its loops and its hosts')."""
        ranges: dict[ir.Var, Interval] = {}
        node: Stage | None = stage
        while node is not None:
            for var, rng in self.bounds[node].ranges.items():
                ranges.setdefault(var, rng)
            node = node.attach[1] if node.attach[0] == "at" else None
        return ranges

    def _infer(self, stage: Stage) -> None:
        b = self.bounds[stage]
        if stage.attach[0] == "at":
            self._infer_region(stage)
        else:
            for iv in stage.root_iter_vars:
                b.root_min[iv] = ir.const(iv.dom[0])
                b.root_extent[iv] = iv.dom[1]
        for iv in stage.root_iter_vars[len(stage.op.axis) :]:  # reduce axes: always whole
            b.root_min[iv] = ir.const(iv.dom[0])
            b.root_extent[iv] = iv.dom[1]
        b.extent.update(b.root_extent)
        for rel in stage.relations:
            if isinstance(rel, Split):
                e = b.extent[rel.parent]
                if rel.factor is not None:
                    b.extent[rel.outer], b.extent[rel.inner] = _ceil_div(e, rel.factor), rel.factor
                else:
                    b.extent[rel.outer], b.extent[rel.inner] = rel.nparts, _ceil_div(e, rel.nparts)
            else:
                b.extent[rel.fused] = b.extent[rel.outer] * b.extent[rel.inner]
        for leaf in stage.leaf_iter_vars:
            attr = stage.attrs.get(leaf)
            var = attr.thread.var if attr is not None and attr.thread is not None else leaf.var
            if var in b.ranges:
                raise LoweringError(f"stage '{stage.name}': thread axis '{var.name}' is bound to two loops")
            b.loop_var[leaf] = var
            b.ranges[var] = Interval.from_extent(0, b.extent[leaf])
        self._check_shadowing(stage)
        local: dict[IterVar, ir.Expr] = {leaf: b.loop_var[leaf] for leaf in stage.leaf_iter_vars}
        for rel in reversed(stage.relations):
            if isinstance(rel, Split):
                local[rel.parent] = local[rel.outer] * b.extent[rel.inner] + local[rel.inner]
            else:
                inner = b.extent[rel.inner]
                local[rel.outer] = local[rel.fused] // inner
                local[rel.inner] = local[rel.fused] % inner
        ctx = self._context(stage)
        b.local = {iv: arith.simplify(e, ctx) for iv, e in local.items()}
        for iv in stage.root_iter_vars:
            b.value[iv] = arith.simplify(b.root_min[iv] + local[iv], ctx)

    def _check_shadowing(self, stage: Stage) -> None:
        own = self.bounds[stage].ranges
        node = stage.attach[1] if stage.attach[0] == "at" else None
        while node is not None:
            for var in own:
                if var in self.bounds[node].ranges:
                    raise LoweringError(
                        f"stage '{stage.name}' is computed inside '{node.name}', which already "
                        f"binds loop variable '{var.name}'"
                    )
            node = node.attach[1] if node.attach[0] == "at" else None

    def _infer_region(self, stage: Stage) -> None:
        """Region of ``stage``'s output that its readers need in one iteration of its attach loop."""
        _, parent, axis = stage.attach
        b = self.bounds[stage]
        readers = [s for s in self.live if stage.output.buffer in _loaded(self.body[s])]
        if not readers:
            raise LoweringError(f"stage '{stage.name}' is computed at '{parent.name}' but no stage reads it")
        pos = parent.leaf_iter_vars.index(axis)
        regions: list[list[tuple[ir.Expr, int]]] = [[] for _ in stage.op.axis]
        for reader in readers:
            relax_vars = self._relax_set(stage, reader, parent, pos)
            ctx = self._context(reader)
            relaxed = {v: ctx[v] for v in relax_vars}
            kept = {v: r for v, r in ctx.items() if v not in relaxed}
            rb = self.bounds[reader]
            for load in _loads_of(self.body[reader], stage.output.buffer):
                for d, index in enumerate(load.indices):
                    glob = substitute(index, {iv.var: rb.value[iv] for iv in reader.root_iter_vars})
                    regions[d].append(arith.relax(glob, relaxed, kept))
        for d, iv in enumerate(stage.op.axis):
            b.root_min[iv], b.root_extent[iv] = _union(stage, d, regions[d])

    def _relax_set(self, stage: Stage, reader: Stage, parent: Stage, pos: int) -> set[ir.Var]:
        """Loop variables that vary within one iteration of ``parent``'s loop number ``pos``."""
        relax: set[ir.Var] = set()
        node = reader
        while node is not parent:
            if node.attach[0] != "at":
                raise LoweringError(
                    f"stage '{stage.name}' is computed at '{parent.name}', but its reader "
                    f"'{reader.name}' is not computed inside '{parent.name}'"
                )
            relax.update(self.bounds[node].ranges)
            host, host_axis = node.attach[1], node.attach[2]
            if host is parent and parent.leaf_iter_vars.index(host_axis) < pos:
                raise LoweringError(
                    f"stage '{stage.name}' is computed at loop '{parent.leaf_iter_vars[pos].name}' "
                    f"of '{parent.name}', inside the loop '{host_axis.name}' where its reader "
                    f"'{reader.name}' is computed"
                )
            node = host
        pb = self.bounds[parent]
        relax.update(pb.loop_var[leaf] for leaf in parent.leaf_iter_vars[pos + 1 :])
        shared = SHARED_SCOPES.get(stage.scope, frozenset())
        node = parent
        while shared and node is not None:   # the threads that share the buffer, outside the attach loop
            nb = self.bounds[node]
            for leaf in node.leaf_iter_vars:
                attr = node.attrs.get(leaf)
                if attr is not None and attr.thread is not None and attr.thread.thread_tag in shared:
                    relax.add(nb.loop_var[leaf])
            node = node.attach[1] if node.attach[0] == "at" else None
        return relax

    # ------------------------------------------------------------------------------------------
    # buffers

    def _assign_buffer(self, stage: Stage) -> None:
        b = self.bounds[stage]
        out = stage.output.buffer
        if stage in self.param_of:
            b.buffer, b.offset = self.param_of[stage], tuple(ir.const(0) for _ in out.shape)
        elif stage.attach[0] == "root":
            b.buffer = ir.Buffer(out.name, out.shape, out.dtype, stage.scope)
            b.offset = tuple(ir.const(0) for _ in out.shape)
        else:
            shape = tuple(b.root_extent[iv] for iv in stage.op.axis)
            b.buffer = ir.Buffer(out.name, shape, out.dtype, stage.scope)
            b.offset = tuple(b.root_min[iv] for iv in stage.op.axis)

    # ------------------------------------------------------------------------------------------
    # loop nests

    def _stage_nest(self, stage: Stage) -> ir.Stmt:
        b = self.bounds[stage]
        ctx = self._context(stage)
        body = self.body[stage]
        root_vars = {iv.var: b.value[iv] for iv in stage.root_iter_vars}
        spatial = stage.op.axis
        out_index = tuple(
            arith.simplify(b.value[iv] - off, ctx) for iv, off in zip(spatial, b.offset, strict=True)
        )
        remap = _RemapLoads({s: self.bounds[s] for s in self.live})

        def rewrite(expr: ir.Expr) -> ir.Expr:
            # substitute first: region offsets mention loop variables that may be root variables
            return arith.simplify(_simplify_indices(remap.mutate(substitute(expr, root_vars)), ctx), ctx)

        guards = {iv: self._guard(stage, iv, ctx) for iv in stage.root_iter_vars}
        for rel in stage.relations:  # a split axis that is itself split unevenly overshoots
            if isinstance(rel, Split) and rel.parent not in guards:
                guards[rel.parent] = self._split_guard(stage, rel.parent, ctx)
        leaves = stage.leaf_iter_vars
        read = body.source if isinstance(body, ir.Reduce) else body
        self.heads.update({leaf: self._prefetches(stage, leaf, rewrite(read)) for leaf in leaves
                           if stage.attrs.get(leaf) is not None and stage.attrs[leaf].prefetches})
        if isinstance(body, ir.Reduce):
            target = ir.Load(b.buffer, out_index)
            update = _combine(body.combiner, target, rewrite(body.source))
            init = te.reduce_identity(body.combiner, body.dtype)
            first = next(k for k, leaf in enumerate(leaves) if leaf.kind is IterKind.REDUCE)
            spatial_guards = [g for iv, g in guards.items() if iv.kind is IterKind.SPATIAL]
            init_nest = self._nest(
                stage,
                [leaf for leaf in leaves[first:] if leaf.kind is IterKind.SPATIAL],
                _guarded(spatial_guards, ir.Store(b.buffer, out_index, init)),
                attach=False,
            )
            update_nest = self._nest(
                stage,
                leaves[first:],
                _guarded(list(guards.values()), ir.Store(b.buffer, out_index, update)),
            )
            return self._nest(stage, leaves[:first], ir.seq(init_nest, update_nest))
        store = ir.Store(b.buffer, out_index, rewrite(body))
        return self._nest(stage, leaves, _guarded(list(guards.values()), store))

    def _guard(self, stage: Stage, iv: IterVar, ctx: dict[ir.Var, Interval]) -> list[ir.Expr]:
        """Conditions keeping root axis ``iv`` inside both its inferred region and its domain.

        The loops may overshoot the region (a split that does not divide the region's extent), and
        the region may overshoot the domain (the tail of a consumer's split), as in TVM's
        ``MakeBoundCheck``. Conditions the prover shows always true are left out.
        """
        b = self.bounds[stage]
        value, region_min, region_extent = b.value[iv], b.root_min[iv], b.root_extent[iv]
        lo, extent = iv.dom
        local = arith.simplify(value - region_min, ctx)
        candidates = (local >= 0, local < region_extent, value >= lo, value < lo + extent)
        conds: list[ir.Expr] = []
        for cond in candidates:
            if arith.prove(cond, ctx) is not True:
                cond = arith.simplify(cond, ctx)
                if not any(ir_equal(cond, c) for c in conds):
                    conds.append(cond)
        return conds

    def _split_guard(self, stage: Stage, iv: IterVar, ctx: dict[ir.Var, Interval]) -> list[ir.Expr]:
        """``iv`` (a split axis that was itself split) must stay below its extent."""
        cond = self.bounds[stage].local[iv] < self.bounds[stage].extent[iv]
        return [] if arith.prove(cond, ctx) is True else [arith.simplify(cond, ctx)]

    def _nest(self, stage: Stage, leaves: Sequence[IterVar], body: ir.Stmt, attach: bool = True) -> ir.Stmt:
        b = self.bounds[stage]
        for leaf in reversed(leaves):
            if attach:
                body = self._attach(stage, leaf, body)
                body = ir.seq(self.heads[leaf], body) if leaf in self.heads else body
            attr = stage.attrs.get(leaf)
            kind = attr.kind if attr is not None else ir.ForKind.SERIAL
            thread = attr.thread.thread_tag if attr is not None and attr.thread is not None else ""
            body = ir.For(b.loop_var[leaf], ir.const(0), ir.const(b.extent[leaf]), body, kind, thread)
            if attr is not None:
                if attr.tensorize is not None:
                    body = ir.Attr("tensorize", attr.tensorize, body)
                for key, value in reversed(attr.pragmas):
                    body = ir.Attr(f"pragma_{key}", value, body)
        return body

    def _prefetches(self, stage: Stage, leaf: IterVar, body: ir.Expr) -> ir.Stmt:
        """The prefetches that open loop ``leaf``'s body (``Stage.prefetch``): for each read of each
        prefetched tensor in ``body`` (the stage's, in loop variables), the region it covers in one
        iteration of ``leaf`` (relaxed over the loops inside), moved ``offset`` iterations along its loop,
        one ``prefetch`` per cache line of each contiguous run (``_region_lines``)."""
        b, ctx = self.bounds[stage], self._context(stage)
        inner = {b.loop_var[iv] for iv in stage.leaf_iter_vars[stage.leaf_iter_vars.index(leaf) + 1:]}
        relaxed = {v: ctx[v] for v in inner}
        kept = {v: r for v, r in ctx.items() if v not in inner}
        stmts = []
        for tensor, along, offset in stage.attrs[leaf].prefetches:
            var = next((self.bounds[s].loop_var[along] for s in self._hosts(stage)
                        if along in self.bounds[s].loop_var), None)
            if var is None or var in inner:
                raise LoweringError(f"stage '{stage.name}': prefetch of '{tensor.name}' at loop "
                                    f"'{leaf.name}' advances loop '{along.name}', which is neither "
                                    f"'{leaf.name}' nor a loop around it")
            moved = {var: var + offset}
            for load in _loads_of(body, tensor.buffer):
                region = [arith.relax(index, relaxed, kept) for index in load.indices]
                region = [(arith.simplify(substitute(lo, moved), ctx), extent) for lo, extent in region]
                stmts.append(_region_lines(tensor.buffer, region, ctx))
        return ir.seq(*dict.fromkeys(stmts))

    def _hosts(self, stage: Stage) -> list[Stage]:
        """``stage`` and the stages it is computed inside, innermost first."""
        hosts, node = [], stage
        while node is not None:
            hosts.append(node)
            node = node.attach[1] if node.attach[0] == "at" else None
        return hosts

    def _attach(self, stage: Stage, leaf: IterVar, body: ir.Stmt) -> ir.Stmt:
        producers = self.attached.get((stage, leaf), [])
        if not producers:
            return body
        body = ir.seq(*(self._stage_nest(p) for p in producers), body)
        for p in reversed(producers):
            body = ir.Allocate(self.bounds[p].buffer, body)
        return body


# --------------------------------------------------------------------------------------------------
# helpers


def _combine(combiner: ir.ReduceCombiner, acc: ir.Expr, value: ir.Expr) -> ir.Expr:
    if combiner is ir.ReduceCombiner.SUM:
        return acc + value
    if combiner is ir.ReduceCombiner.MAX:
        return ir.Max(acc, value)
    return ir.Min(acc, value)


def _guarded(conds: list[list[ir.Expr]], stmt: ir.Stmt) -> ir.Stmt:
    flat = [c for group in conds for c in group]
    if not flat:
        return stmt
    cond = flat[0]
    for c in flat[1:]:
        cond = ir.And(cond, c)
    return ir.IfThenElse(cond, stmt)


def _union(stage: Stage, dim: int, regions: list[tuple[ir.Expr, int]]) -> tuple[ir.Expr, int]:
    lo, ext = regions[0]
    for other_lo, other_ext in regions[1:]:
        diff = arith.simplify(other_lo - lo)
        if not isinstance(diff, ir.IntImm):
            raise LoweringError(
                f"stage '{stage.name}': readers need regions of dimension {dim} starting at "
                f"'{lo}' and '{other_lo}', which differ by a non-constant amount"
            )
        start = min(0, diff.value)
        end = max(ext, diff.value + other_ext)
        lo, ext = arith.simplify(lo + start), end - start
    return lo, ext


#: the bytes of a cache line, the step between two prefetches of one run
LINE_BYTES = 64


def _region_lines(buffer: ir.Buffer, region: list[tuple[ir.Expr, int]], ctx: dict[ir.Var, Interval]
                  ) -> ir.Stmt:
    """A ``prefetch`` of every ``LINE_BYTES`` of each contiguous run of ``buffer``'s ``region`` (a
    minimum and an extent per dimension; a run: the innermost dimensions that the region covers whole,
    and the one outside them), starting at each run's first element; loops over the other dimensions.
    Each index is held inside its dimension (a region moved past the last tile prefetches the last
    line again: no fault, nothing read)."""
    shape = [int(size) for size in buffer.shape]
    split = len(shape) - 1
    while split > 0 and region[split][1] == shape[split] and isinstance(region[split][0], ir.IntImm) and \
            region[split][0].value == 0:
        split -= 1
    below = math.prod(shape[split + 1:])
    run = region[split][1] * below
    per_line = max(1, LINE_BYTES * 8 // buffer.dtype.bits)
    step = ir.Var("prefetch.line", region[split][0].dtype)
    outer = [ir.Var(f"prefetch.{d}", region[d][0].dtype) for d in range(split)]
    flat = region[split][0] * below + step * per_line
    indices = [*(lo + v for (lo, _), v in zip(region[:split], outer, strict=True)), flat // below]
    rest = flat % below
    for d in range(split + 1, len(shape)):
        inner = math.prod(shape[d + 1:])
        indices.append(rest // inner)
        rest = rest % inner
    extents = [extent for _, extent in region[:split]]
    loops = [(step, -(-run // per_line)), *zip(reversed(outer), reversed(extents), strict=True)]
    fixed = {var: ir.const(0, var.dtype) for var, extent in loops if extent == 1}
    ranges = {**ctx, **{var: Interval.from_extent(0, extent) for var, extent in loops}}
    held = tuple(arith.simplify(ir.Min(substitute(index, fixed), ir.const(size - 1, index.dtype)), ranges)
                 for index, size in zip(indices, shape, strict=True))
    body: ir.Stmt = ir.Evaluate(prefetch(ir.Load(buffer, held)))
    for var, extent in loops:
        if extent > 1:
            body = ir.For(var, ir.const(0), ir.const(extent), body, ir.ForKind.UNROLLED)
    return body


def _loaded(expr: ir.Expr) -> set[ir.Buffer]:
    return {load.buffer for load in loads_in(expr)}


def _loads_of(expr: ir.Expr, buffer: ir.Buffer) -> list[ir.Load]:
    return [load for load in loads_in(expr) if load.buffer is buffer]


class _InlineLoads(IRMutator):
    """Replace loads of inlined stages' tensors by their (already expanded) bodies."""

    def __init__(self, inlined: dict[ir.Buffer, Stage], bodies: dict[Stage, ir.Expr]) -> None:
        self.inlined, self.bodies = inlined, bodies

    def mutate_Load(self, load: ir.Load) -> ir.Expr:
        load = self.generic_mutate(load)
        stage = self.inlined.get(load.buffer)
        if stage is None:
            return load
        mapping = {iv.var: idx for iv, idx in zip(stage.op.axis, load.indices, strict=True)}
        return substitute(self.bodies[stage], mapping)


class _RemapLoads(IRMutator):
    """Point loads of computed tensors at the buffers lowering gave them (shifted by region mins)."""

    def __init__(self, bounds: dict[Stage, _Bounds]) -> None:
        self.by_buffer = {st.output.buffer: bd for st, bd in bounds.items()}

    def mutate_Load(self, load: ir.Load) -> ir.Expr:
        load = self.generic_mutate(load)
        b = self.by_buffer.get(load.buffer)
        if b is None or b.buffer is load.buffer:
            return load
        indices = tuple(i - off for i, off in zip(load.indices, b.offset, strict=True))
        return ir.Load(b.buffer, indices)


class _SimplifyIndices(IRMutator):
    def __init__(self, ctx: dict[ir.Var, Interval]) -> None:
        self.ctx = ctx

    def mutate_Load(self, load: ir.Load) -> ir.Expr:
        load = self.generic_mutate(load)
        return ir.Load(load.buffer, tuple(arith.simplify(i, self.ctx) for i in load.indices))


def _simplify_indices(expr: ir.Expr, ctx: dict[ir.Var, Interval]) -> ir.Expr:
    return _SimplifyIndices(ctx).mutate(expr)


def lower(schedule: Schedule, args: Sequence[Tensor], name: str = "main") -> ir.PrimFunc:
    """Lower ``schedule`` to a ``PrimFunc`` whose parameters are ``args``' buffers, in order.

    Raises ``LoweringError`` naming the stage when the schedule cannot be realized (an argument that
    is not computed at the root, a reader outside a compute_at scope, ...).
    """
    if not isinstance(schedule, Schedule):
        raise LoweringError(f"lower: expected a Schedule, but got {schedule!r}")
    if isinstance(args, Tensor):
        args = [args]
    return _Lowering(schedule, args, name).run()
