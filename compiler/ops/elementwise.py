"""Element-wise operators: binary add/sub/mul/maximum of same-shape tensors, and relu; ``flatten``, which
turns any element-wise operator into the same operator over 1-D tensors (how the accelerators' element-wise
schedules take a user's operator)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from compiler import te
from compiler.errors import IRTypeError, ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, substitute
from compiler.passes.cover import Cover, key, substitute_nodes


def _binary(name: str, fn: Callable[[ir.Expr, ir.Expr], ir.Expr]):
    def op(a: te.Tensor, b: te.Tensor, out_name: str | None = None) -> te.Tensor:
        if a.shape != b.shape:
            raise IRTypeError(
                f"{name}: operand shapes differ: {a.name}{list(a.shape)} vs {b.name}{list(b.shape)}"
            )
        if a.dtype != b.dtype:
            raise IRTypeError(f"{name}: operand dtypes differ: {a.name} {a.dtype} vs {b.name} {b.dtype}")
        return te.compute(a.shape, lambda *i: fn(a[i], b[i]), name=out_name or name)

    op.__name__ = name
    op.__doc__ = f"Element-wise {name} of two tensors of the same shape and dtype."
    return op


add = _binary("add", lambda x, y: x + y)
sub = _binary("sub", lambda x, y: x - y)
mul = _binary("mul", lambda x, y: x * y)
maximum = _binary("maximum", ir.max_)


def relu(a: te.Tensor, out_name: str = "relu") -> te.Tensor:
    """max(a, 0) element-wise."""
    return te.compute(a.shape, lambda *i: ir.max_(a[i], 0), name=out_name)


def cover_stages(chosen: Cover, axis: Sequence[ir.Var], shape: tuple[int, ...],
                 leaves: Mapping[str, Callable[..., ir.Expr]] | None = None) -> tuple[te.Tensor, ...]:
    """The steps of ``chosen`` (a cover of an expression over loads indexed by ``axis``) as stages of
    ``shape``, one per step, each reading the stages of its operands (and ``leaves[key](*index)`` for an
    operand the caller provides: a constant's vector); a stage is named after its instruction (``alu_shr``,
    ``vmul``), numbered when one is used twice."""
    made: dict[str, te.Tensor] = {}
    tensors: list[te.Tensor] = []
    leaves = leaves or {}
    for step in chosen.steps:
        def body(*index, step=step):
            reads = {key(x): made[key(x)][index] for x in step.operands.values() if key(x) in made}
            reads |= {key(x): leaves[key(x)](*index) for x in step.operands.values() if key(x) in leaves}
            return substitute(substitute_nodes(step.node, reads), dict(zip(axis, index, strict=True)))
        name = step.instruction.lower()
        taken = sum(x.name.startswith(name) for x in tensors)
        tensor = te.compute(shape, body, name=f"{name}{taken}" if taken else name)
        made[step.computes] = tensor
        tensors.append(tensor)
    return tuple(tensors)


def flatten(inputs: tuple[te.Tensor, ...], out: te.Tensor,
            where: str) -> tuple[tuple[te.Tensor, ...], te.Tensor]:
    """``out`` over 1-D copies of ``inputs``: input loads at the output's index become loads at the flat
    index ``i``, and any other use of an output axis becomes its value unravelled from ``i``. ScheduleError
    (starting with ``where``) says why an operator is not element-wise: it reduces, reads a stage that is
    not one of ``inputs``, or reads an input elsewhere than at the output's index."""
    op = out.op
    if not isinstance(op, te.ComputeOp) or op.reduce_axis:
        raise ScheduleError(f"{where}: only element-wise operators take this schedule; this one "
                            f"{'reduces' if isinstance(op, te.ComputeOp) else 'is not a compute'}")
    op_body = _inlined(op.body, inputs, where)
    n = math.prod(out.shape)
    flat = {t.buffer: te.placeholder((n,), t.dtype, name=t.name) for t in inputs}
    axes = [iv.var for iv in op.axis]
    i = ir.Var("i")
    strides = [math.prod(out.shape[d + 1:]) for d in range(len(axes))]
    unravel = {v: ir.FloorMod(ir.FloorDiv(i, ir.const(st)), ir.const(ext)) if len(axes) > 1 else i
               for v, st, ext in zip(axes, strides, out.shape, strict=True)}

    class _Flatten(IRMutator):
        def mutate_Load(self, load: ir.Load) -> ir.Expr:
            tensor = flat.get(load.buffer)
            if tensor is None:
                return self.generic_mutate(load)
            if tuple(load.indices) != tuple(axes) or load.buffer.shape != out.shape:
                at = ", ".join(str(x) for x in load.indices)
                raise ScheduleError(f"{where}: it reads {load.buffer.name}[{at}], not at the output's index "
                                    f"[{', '.join(v.name for v in axes)}] (not element-wise)")
            return tensor[i]

    body = substitute(_Flatten().mutate(op_body), unravel)
    flat_out = te.compute((n,), lambda x: substitute(body, {i: x}), name=out.name, axis_names=["i"])
    return tuple(flat[t.buffer] for t in inputs), flat_out


def _inlined(body: ir.Expr, inputs: tuple[te.Tensor, ...], where: str) -> ir.Expr:
    """``body`` with every read of an element-wise stage between the inputs and the output replaced by that
    stage's expression at the index read (so that one expression over the inputs remains, which the
    instruction cover splits again as the target's instructions need). ScheduleError names a stage that
    reduces or reads something that is neither an input nor such a stage."""
    buffers = {t.buffer for t in inputs}

    class _Inline(IRMutator):
        def mutate_Load(self, load: ir.Load) -> ir.Expr:
            if load.buffer in buffers:
                return self.generic_mutate(load)
            stage = te.tensor_of(load.buffer)
            if stage is None or not isinstance(stage.op, te.ComputeOp):
                raise ScheduleError(f"{where}: it reads {load.buffer.name}, which is neither one of its "
                                    f"inputs nor a stage computed from them")
            if stage.op.reduce_axis:
                raise ScheduleError(f"{where}: its stage {stage.name} reduces; only element-wise stages take "
                                    f"the element-wise schedule")
            indices = [self.mutate(x) for x in load.indices]
            axes = {iv.var: x for iv, x in zip(stage.op.axis, indices, strict=True)}
            return self.mutate(substitute(stage.op.body, axes))

    return _Inline().mutate(body)
