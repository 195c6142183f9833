"""Element-wise operators: binary add/sub/mul/maximum of same-shape tensors, and relu; ``flatten``, which
turns any element-wise operator into the same operator over 1-D tensors (how the accelerators' element-wise
schedules take a user's operator)."""

from __future__ import annotations

import math
from collections.abc import Callable

from compiler import te
from compiler.errors import IRTypeError, ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, substitute


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
    for t in op.input_tensors:
        if t not in inputs:
            raise ScheduleError(f"{where}: it reads {t.name}, which is not one of its inputs (a second stage "
                                f"is not supported by the element-wise schedule)")
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

    body = substitute(_Flatten().mutate(op.body), unravel)
    flat_out = te.compute((n,), lambda x: substitute(body, {i: x}), name=out.name, axis_names=["i"])
    return tuple(flat[t.buffer] for t in inputs), flat_out
