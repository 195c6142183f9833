"""Schedules: how the loops of each tensor-expression stage are transformed, bound and placed.

``create_schedule(outputs)`` makes one ``Stage`` per operation reachable from the outputs, in producer
before consumer order. A stage starts with one loop per root axis (spatial axes, then reduce axes) and
is changed by primitives, each validated on the spot (an illegal request raises ``ScheduleError`` that
names the stage, the axis and the rule):

========================  ===========================================================================
split(axis, factor|nparts)  axis -> (outer, inner); a non-dividing split keeps its tail under a guard
reorder(*axes)              permute the given loops among their current positions
fuse(*axes)                 merge adjacent loops into one
bind(axis, thread)          run the loop on a hardware axis (``core``, ``cluster``, ``vthread``, ...)
compute_at(stage, axis)     compute this stage inside ``stage``'s loop ``axis``, only the region needed
compute_inline / _root      substitute into consumers / compute at the top level (the default)
cache_read / cache_write    stage a tensor through a buffer in a memory scope (``nmem``, ``local``, ...)
pragma, tensorize           annotate a loop (``Attr`` in the lowered IR)
prefetch(t, axis, ...)      each iteration of ``axis`` prefetches the lines of ``t`` a later one reads
unroll, vectorize, parallel set the loop's kind
========================  ===========================================================================

Aliases: these are TVM's ``te.Schedule`` primitives; exo calls split ``divide_loop``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, substitute
from compiler.te import IterKind, IterVar, Operation, Tensor

# --------------------------------------------------------------------------------------------------
# Relations between iteration variables


@dataclass(frozen=True, eq=False)
class Split:
    """parent = outer * inner_extent + inner; exactly one of factor (inner extent) and nparts."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(frozen=True, eq=False)
class Fuse:
    """fused = outer * inner_extent + inner."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(eq=False)
class IterAttr:
    """How one loop is emitted."""

    kind: ir.ForKind = ir.ForKind.SERIAL
    thread: IterVar | None = None
    pragmas: list[tuple[str, str | int]] = field(default_factory=list)
    tensorize: str | None = None
    prefetches: list[tuple[Tensor, IterVar, int]] = field(default_factory=list)


def _is_positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


def _names(ivs) -> str:
    return ", ".join(iv.name for iv in ivs) or "none"


class Stage:
    """The schedule of one operation: its loops (``leaf_iter_vars``), relations, attachment, scope."""

    def __init__(self, op: Operation, schedule: Schedule) -> None:
        self.op = op
        self.schedule = schedule
        self.body: ir.Expr | None = op.body if isinstance(op, te.ComputeOp) else None
        self.root_iter_vars: tuple[IterVar, ...] = (
            tuple(op.axis) + tuple(op.reduce_axis) if isinstance(op, te.ComputeOp) else ()
        )
        self.leaf_iter_vars: list[IterVar] = list(self.root_iter_vars)
        self.relations: list[Split | Fuse] = []
        self.attrs: dict[IterVar, IterAttr] = {}
        self.attach: tuple = ("root",)  # ("root",) | ("inline",) | ("at", Stage, IterVar)
        self.scope = "global"
        for iv in self.root_iter_vars:
            schedule._owner[iv] = self

    # --- identity -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    @property
    def output(self) -> Tensor:
        return self.op.output

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, te.PlaceholderOp)

    @property
    def is_output(self) -> bool:
        return self.op in self.schedule.outputs

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    # --- validation helpers -------------------------------------------------------------------
    def _err(self, prim: str, msg: str) -> ScheduleError:
        return ScheduleError(f"{prim} on stage '{self.name}': {msg}")

    def _leaf(self, prim: str, axis, what: str = "axis") -> IterVar:
        if self.is_placeholder:
            raise self._err(prim, "a placeholder has no loops to schedule")
        if isinstance(axis, ir.Var):
            found = te.iter_var_of(axis)
            axis = found if found is not None else axis
        if not isinstance(axis, IterVar):
            raise self._err(prim, f"expected an axis (IterVar) for '{what}', but got {axis!r}")
        if axis.kind is IterKind.THREAD:
            raise self._err(prim, f"'{axis.name}' is a thread axis, not a loop of this stage")
        owner = self.schedule._owner.get(axis)
        if owner is None:
            raise self._err(prim, f"axis '{axis.name}' belongs to no stage of this schedule")
        if owner is not self:
            raise self._err(prim, f"axis '{axis.name}' belongs to stage '{owner.name}', not to '{self.name}'")
        if axis not in self.leaf_iter_vars:
            raise self._err(
                prim,
                f"axis '{axis.name}' was already split or fused; its current loops are "
                f"{_names(self.leaf_iter_vars)}",
            )
        return axis

    def _not_attach_point(self, prim: str, axis: IterVar) -> None:
        for st in self.schedule.stages:
            if st.attach[0] == "at" and st.attach[1] is self and st.attach[2] is axis:
                raise self._err(
                    prim,
                    f"stage '{st.name}' is computed at loop '{axis.name}'; transform the loop "
                    f"before compute_at, or compute '{st.name}' at another loop",
                )

    def _attr(self, iv: IterVar) -> IterAttr:
        return self.attrs.setdefault(iv, IterAttr())

    def _new_iv(self, name: str, kind: IterKind, extent: int | None) -> IterVar:
        iv = te._iter_var(name, (0, extent) if extent is not None else None, kind)
        self.schedule._owner[iv] = self
        return iv

    def extent_of(self, iv: IterVar) -> int:
        """The nominal extent of a loop, computed from the root domains through the relations."""
        return self.schedule._extent(self, iv)

    # --- loop transformations -----------------------------------------------------------------
    def split(
        self,
        axis: IterVar,
        factor: int | None = None,
        nparts: int | None = None,
        names: tuple[str, str] | None = None,
    ) -> tuple[IterVar, IterVar]:
        """Split ``axis`` into (outer, inner) with ``inner`` of extent ``factor`` or ``nparts`` outer.

        Args: factor — extent of the inner loop; nparts — extent of the outer loop (give one);
            names — names of the new loops (default ``<axis>.outer`` / ``<axis>.inner``).
        Rewrite: ``for x in range(E)`` -> ``for xo in range(ceil(E/f)): for xi in range(f)`` with
            ``x = xo*f + xi``; when f does not divide E, lowering guards the body with ``x < E``.
        Checks: axis is a current loop of this stage, not bound; factor/nparts is a positive int.
        Aliases: TVM split; exo divide_loop.
        """
        axis = self._leaf("split", axis)
        if (factor is None) == (nparts is None):
            raise self._err("split", "expected exactly one of factor= and nparts=")
        value, what = (factor, "factor") if factor is not None else (nparts, "nparts")
        if not _is_positive_int(value):
            raise self._err("split", f"{what} must be a positive integer, but got {value!r}")
        if self.attrs.get(axis) is not None and self.attrs[axis].thread is not None:
            raise self._err("split", f"axis '{axis.name}' is bound to a thread axis; split first")
        self._not_attach_point("split", axis)
        if names is not None and (
            not isinstance(names, tuple | list)
            or len(names) != 2
            or not all(isinstance(x, str) and x for x in names)
        ):
            raise self._err("split", f"names must be two non-empty strings, but got {names!r}")
        outer_name, inner_name = names or (f"{axis.name}.outer", f"{axis.name}.inner")
        extent = self.extent_of(axis)
        if factor is not None:
            outer_ext, inner_ext = -(-extent // factor), factor
        else:
            outer_ext, inner_ext = nparts, -(-extent // nparts)
        outer = self._new_iv(outer_name, axis.kind, outer_ext)
        inner = self._new_iv(inner_name, axis.kind, inner_ext)
        self.relations.append(Split(axis, outer, inner, factor, nparts))
        k = self.leaf_iter_vars.index(axis)
        self.leaf_iter_vars[k : k + 1] = [outer, inner]
        return outer, inner

    def reorder(self, *axes: IterVar) -> None:
        """Put ``axes`` in the given order, in the loop positions they occupy now.

        Checks: every axis is a current loop of this stage and appears once.
        Aliases: TVM reorder; exo reorder_loops (pairwise).
        """
        if len(axes) == 1 and isinstance(axes[0], list | tuple):
            axes = tuple(axes[0])
        ivs = [self._leaf("reorder", a) for a in axes]
        if len(set(ivs)) != len(ivs):
            dup = next(iv for iv in ivs if ivs.count(iv) > 1)
            raise self._err("reorder", f"axis '{dup.name}' appears more than once")
        positions = sorted(self.leaf_iter_vars.index(iv) for iv in ivs)
        for pos, iv in zip(positions, ivs, strict=True):
            self.leaf_iter_vars[pos] = iv

    def fuse(self, *axes: IterVar) -> IterVar:
        """Fuse adjacent loops (outermost first) into one loop over the product of their extents.

        Checks: the axes are consecutive current loops, in order, all spatial or all reduce, unbound.
        Aliases: TVM fuse; Halide fuse.
        """
        if len(axes) == 1 and isinstance(axes[0], list | tuple):
            axes = tuple(axes[0])
        if not axes:
            raise self._err("fuse", "expected at least one axis")
        ivs = [self._leaf("fuse", a) for a in axes]
        start = self.leaf_iter_vars.index(ivs[0])
        if self.leaf_iter_vars[start : start + len(ivs)] != ivs:
            raise self._err(
                "fuse",
                f"axes {_names(ivs)} are not adjacent loops in this order; the loops are "
                f"{_names(self.leaf_iter_vars)}",
            )
        for iv in ivs:
            self._not_attach_point("fuse", iv)
        kinds = {iv.kind for iv in ivs}
        if len(kinds) > 1:
            raise self._err("fuse", f"cannot fuse spatial and reduce axes together ({_names(ivs)})")
        for iv in ivs:
            a = self.attrs.get(iv)
            if a is not None and (a.thread is not None or a.kind is not ir.ForKind.SERIAL):
                raise self._err("fuse", f"axis '{iv.name}' is already marked {a.kind.value}; fuse first")
        fused = ivs[0]
        for inner in ivs[1:]:
            extent = self.extent_of(fused) * self.extent_of(inner)
            new = self._new_iv(f"{fused.name}.{inner.name}.fused", fused.kind, extent)
            self.relations.append(Fuse(fused, inner, new))
            k = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[k : k + 2] = [new]
            fused = new
        return fused

    # --- loop kinds ---------------------------------------------------------------------------
    def bind(self, axis: IterVar, thread: IterVar | str) -> None:
        """Run loop ``axis`` on the hardware axis ``thread`` (a ``te.thread_axis`` or its tag).

        Checks: axis is a spatial loop not yet bound or given a kind; the thread axis is not bound to
        another loop of this stage.
        Aliases: TVM bind.
        """
        axis = self._leaf("bind", axis)
        if isinstance(thread, str):
            thread = te.thread_axis(thread)
        if not isinstance(thread, IterVar) or thread.kind is not IterKind.THREAD:
            raise self._err("bind", f"expected a thread axis (te.thread_axis), but got {thread!r}")
        if axis.kind is IterKind.REDUCE:
            raise self._err("bind", f"cannot bind reduce axis '{axis.name}' to a thread axis")
        current = self.attrs.get(axis)
        if current is not None and current.thread is not None:
            raise self._err(
                "bind",
                f"axis '{axis.name}' is already bound to '{current.thread.thread_tag}' "
                f"({current.thread.name})",
            )
        if current is not None and current.kind is not ir.ForKind.SERIAL:
            raise self._err("bind", f"axis '{axis.name}' is already marked {current.kind.value}")
        for other, attr in self.attrs.items():
            if attr.thread is thread:
                raise self._err(
                    "bind", f"thread axis '{thread.name}' is already bound to loop '{other.name}'"
                )
        attr = self._attr(axis)
        attr.kind, attr.thread = ir.ForKind.THREAD_BINDING, thread

    def _set_kind(self, prim: str, axis: IterVar, kind: ir.ForKind) -> None:
        axis = self._leaf(prim, axis)
        attr = self._attr(axis)
        if attr.kind is not ir.ForKind.SERIAL and attr.kind is not kind:
            raise self._err(prim, f"axis '{axis.name}' is already marked {attr.kind.value}")
        if kind is ir.ForKind.PARALLEL and axis.kind is IterKind.REDUCE:
            raise self._err(prim, f"cannot run reduce axis '{axis.name}' in parallel (a race)")
        attr.kind = kind

    def unroll(self, axis: IterVar) -> None:
        """Mark loop ``axis`` to be fully unrolled."""
        self._set_kind("unroll", axis, ir.ForKind.UNROLLED)

    def vectorize(self, axis: IterVar) -> None:
        """Mark loop ``axis`` to become vector instructions."""
        self._set_kind("vectorize", axis, ir.ForKind.VECTORIZED)

    def parallel(self, axis: IterVar) -> None:
        """Mark loop ``axis`` to run its iterations on several threads."""
        self._set_kind("parallel", axis, ir.ForKind.PARALLEL)

    def pragma(self, axis: IterVar, key: str, value: str | int = "") -> None:
        """Annotate loop ``axis`` with ``pragma_<key> = value`` (e.g. ``pragma(xi, "intrin", "TADD")``)."""
        axis = self._leaf("pragma", axis)
        if not isinstance(key, str) or not key:
            raise self._err("pragma", f"expected a non-empty string key, but got {key!r}")
        if not isinstance(value, str | int):
            raise self._err("pragma", f"expected a string or int value, but got {value!r}")
        self._attr(axis).pragmas.append((key, value))

    def tensorize(self, axis: IterVar, intrin: str) -> None:
        """Mark the loop nest from ``axis`` inward for replacement by tensor instruction ``intrin``."""
        axis = self._leaf("tensorize", axis)
        if not isinstance(intrin, str) or not intrin:
            raise self._err("tensorize", f"expected an instruction name, but got {intrin!r}")
        attr = self._attr(axis)
        if attr.tensorize is not None:
            raise self._err("tensorize", f"axis '{axis.name}' is already marked '{attr.tensorize}'")
        attr.tensorize = intrin

    def prefetch(self, tensor: Tensor, axis: IterVar, along: IterVar, offset: int = 1) -> None:
        """At the top of each iteration of loop ``axis``, prefetch into the cache the lines of ``tensor``
        that this stage reads in that iteration, as if loop ``along`` (``axis`` itself, an outer loop of
        this stage or of the stage it is computed in) were ``offset`` iterations further on: a GEMM's next
        weight tile, a line at a time, while the rows of this one are computed. TVM's ``prefetch`` is the
        case ``along`` = ``axis``. Lowering emits one ``prefetch`` call per cache line of the region
        (``compiler.lower``), its indices held inside the tensor."""
        axis = self._leaf("prefetch", axis)
        if not isinstance(tensor, Tensor) or self.body is None or \
                tensor.buffer not in _buffers_loaded(self.body):
            name = tensor.name if isinstance(tensor, Tensor) else repr(tensor)
            raise self._err("prefetch", f"stage '{self.name}' does not read tensor {name}")
        if not isinstance(along, IterVar):
            raise self._err("prefetch", f"expected an axis (IterVar) for 'along', but got {along!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset == 0:
            raise self._err("prefetch", f"expected a nonzero int offset, but got {offset!r}")
        self._attr(axis).prefetches.append((tensor, along, offset))

    # --- placement ----------------------------------------------------------------------------
    def compute_at(self, parent: Stage, axis: IterVar) -> None:
        """Compute this stage inside loop ``axis`` of ``parent``, only the region that loop needs.

        Checks: this stage is a computed intermediate; ``axis`` is a current loop of ``parent``; no
        cycle. That ``parent`` reads this stage (directly, or through stages computed inside it) is
        checked by ``lower``, which raises ``LoweringError`` naming the reader otherwise.
        Aliases: TVM compute_at; Halide compute_at.
        """
        if not isinstance(parent, Stage) or parent.schedule is not self.schedule:
            raise self._err("compute_at", f"expected a stage of this schedule, but got {parent!r}")
        if self.is_placeholder:
            raise self._err("compute_at", "a placeholder is an input; it cannot be computed")
        if self.is_output:
            raise self._err("compute_at", "an output must be computed at the root")
        if parent is self:
            raise self._err("compute_at", "a stage cannot be computed at itself")
        owner = self.schedule._owner.get(axis) if isinstance(axis, IterVar) else None
        if owner is not None and owner is not parent:
            raise self._err(
                "compute_at",
                f"axis '{axis.name}' is a loop of stage '{owner.name}', not of '{parent.name}'",
            )
        axis = parent._leaf("compute_at", axis)
        node: Stage | None = parent
        while node is not None and node.attach[0] == "at":
            node = node.attach[1]
            if node is self:
                raise self._err("compute_at", f"'{parent.name}' is itself computed inside this stage")
        if parent.attach[0] == "inline":
            raise self._err("compute_at", f"stage '{parent.name}' is inlined; it has no loops")
        self.attach = ("at", parent, axis)

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers (no loops, no buffer).

        Checks: a computed intermediate without reduction and without other stages attached to it.
        """
        if self.is_placeholder:
            raise self._err("compute_inline", "a placeholder cannot be inlined")
        if self.is_output:
            raise self._err("compute_inline", "an output cannot be inlined")
        if isinstance(self.body, ir.Reduce):
            raise self._err("compute_inline", "a reduction cannot be inlined")
        for st in self.schedule.stages:
            if st.attach[0] == "at" and st.attach[1] is self:
                raise self._err("compute_inline", f"stage '{st.name}' is computed at this stage")
        self.attach = ("inline",)

    def compute_root(self) -> None:
        """Compute this stage at the top level, whole (the default)."""
        if self.is_placeholder:
            raise self._err("compute_root", "a placeholder cannot be computed")
        self.attach = ("root",)

    def set_scope(self, scope: str) -> None:
        """Place this stage's buffer in memory ``scope`` (an intermediate only)."""
        if not isinstance(scope, str) or not scope:
            raise self._err("set_scope", f"expected a scope name, but got {scope!r}")
        if self.is_output or self.is_placeholder:
            raise self._err("set_scope", "inputs and outputs live in global memory")
        self.scope = scope


# --------------------------------------------------------------------------------------------------
# Schedule


class _ReplaceLoads(IRMutator):
    def __init__(self, old: ir.Buffer, new: ir.Buffer) -> None:
        self.old, self.new = old, new

    def mutate_buffer(self, buffer: ir.Buffer) -> ir.Buffer:
        return self.new if buffer is self.old else buffer


class Schedule:
    """Stages of every operation reachable from the outputs, producers first."""

    def __init__(self, outputs: Sequence[Tensor]) -> None:
        self.outputs: tuple[Operation, ...] = tuple(t.op for t in outputs)
        self._owner: dict[IterVar, Stage] = {}
        self.stages: list[Stage] = []
        self._stage_of: dict[Operation, Stage] = {}
        for op in _topo_order(self.outputs):
            self._add_stage(op)

    def _add_stage(self, op: Operation, position: int | None = None) -> Stage:
        stage = Stage(op, self)
        if position is None:
            self.stages.append(stage)
        else:
            self.stages.insert(position, stage)
        self._stage_of[op] = stage
        return stage

    def __getitem__(self, key: Tensor | Operation) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        stage = self._stage_of.get(op)
        if stage is None:
            raise ScheduleError(
                f"schedule: {key!r} is not part of this schedule (stages: "
                f"{', '.join(s.name for s in self.stages)})"
            )
        return stage

    def stage_of_buffer(self, buffer: ir.Buffer) -> Stage | None:
        t = te.tensor_of(buffer)
        return None if t is None else self._stage_of.get(t.op)

    def readers(self, stage: Stage) -> list[Stage]:
        """Stages whose current body loads ``stage``'s output."""
        buf = stage.output.buffer
        return [s for s in self.stages if s.body is not None and buf in _buffers_loaded(s.body)]

    def _extent(self, stage: Stage, iv: IterVar) -> int:
        if iv in stage.root_iter_vars:
            return iv.dom[1]
        for rel in stage.relations:
            if isinstance(rel, Split) and iv in (rel.outer, rel.inner):
                return iv.dom[1]
            if isinstance(rel, Fuse) and iv is rel.fused:
                return iv.dom[1]
        raise ScheduleError(f"stage '{stage.name}': axis '{iv.name}' is not one of its loops")

    # --- caches -------------------------------------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Tensor | Stage]) -> Tensor:
        """Copy ``tensor`` into a new buffer in ``scope`` that ``readers`` read instead.

        Returns the cache tensor (named ``<tensor>.<scope>``); schedule it like any stage, typically
        ``s[cache].compute_at(s[reader], axis)``. Aliases: TVM cache_read.
        """
        src_stage = self[tensor]
        if not isinstance(scope, str) or not scope:
            raise ScheduleError(f"cache_read of '{tensor.name}': expected a scope, got {scope!r}")
        if isinstance(readers, Tensor | Stage):
            readers = [readers]
        reader_stages = [r if isinstance(r, Stage) else self[r] for r in readers]
        if not reader_stages:
            raise ScheduleError(f"cache_read of '{tensor.name}': expected at least one reader")
        for r in reader_stages:
            if r.body is None or tensor.buffer not in _buffers_loaded(r.body):
                raise ScheduleError(
                    f"cache_read of '{tensor.name}': stage '{r.name}' does not read '{tensor.name}'"
                )
        cache = te.compute(
            tensor.shape,
            lambda *idx: tensor[idx],
            name=f"{tensor.name}.{scope}",
        )
        for r in reader_stages:
            r.body = _ReplaceLoads(tensor.buffer, cache.buffer).mutate(r.body)
        position = min(self.stages.index(r) for r in reader_stages)
        position = max(position, self.stages.index(src_stage) + 1)
        stage = self._add_stage(cache.op, position)
        stage.scope = scope
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a new buffer in ``scope``; the original stage copies it out.

        The cache stage takes the computation (and the reduce axes, renewed); the original stage
        keeps its spatial axes and becomes a copy. Apply before transforming the original's loops.
        Aliases: TVM cache_write.
        """
        stage = self[tensor]
        if stage.is_placeholder:
            raise ScheduleError(f"cache_write of '{tensor.name}': a placeholder is not computed")
        if not isinstance(scope, str) or not scope:
            raise ScheduleError(f"cache_write of '{tensor.name}': expected a scope, got {scope!r}")
        if stage.relations or stage.attrs or stage.leaf_iter_vars != list(stage.root_iter_vars):
            raise ScheduleError(
                f"cache_write of '{tensor.name}': stage '{stage.name}' already has loop "
                f"transformations; apply cache_write first"
            )
        op = stage.op
        body = stage.body
        spatial = list(op.axis)

        def fcompute(*idx):
            mapping = dict(zip((iv.var for iv in spatial), idx, strict=True))
            if isinstance(body, ir.Reduce):
                fresh = [
                    te.reduce_axis((lo, lo + ext), v.name)
                    for v, (lo, ext) in zip(body.axis, body.ranges, strict=True)
                ]
                mapping.update({v: f.var for v, f in zip(body.axis, fresh, strict=True)})
                source = substitute(body.source, mapping)
                return ir.Reduce(body.combiner, source, tuple(f.var for f in fresh), body.ranges)
            return substitute(body, mapping)

        cache = te.compute(
            tensor.shape,
            fcompute,
            name=f"{tensor.name}.{scope}",
            axis_names=[iv.name for iv in spatial],
        )
        # the original stage becomes a copy out of the cache over its spatial axes
        stage.body = cache[tuple(iv.var for iv in spatial)]
        for iv in stage.root_iter_vars[len(spatial) :]:
            del self._owner[iv]
        stage.root_iter_vars = tuple(spatial)
        stage.leaf_iter_vars = list(spatial)
        new = self._add_stage(cache.op, self.stages.index(stage))
        new.scope = scope
        return cache


def _buffers_loaded(expr: ir.Expr) -> set[ir.Buffer]:
    return {t.buffer for t in te.tensors_read(expr)}


def _topo_order(outputs: Sequence[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    """A default schedule (every stage at the root, loops in axis order) for ``outputs``."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    outputs = list(outputs)
    if not outputs or not all(isinstance(t, Tensor) for t in outputs):
        raise ScheduleError(f"create_schedule: expected output tensors, but got {outputs!r}")
    for t in outputs:
        if isinstance(t.op, te.PlaceholderOp):
            raise ScheduleError(f"create_schedule: output '{t.name}' is a placeholder, not computed")
    return Schedule(outputs)
