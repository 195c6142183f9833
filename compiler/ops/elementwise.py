"""Element-wise operators: binary add/sub/mul/maximum of same-shape tensors, and relu."""

from __future__ import annotations

from collections.abc import Callable

from compiler import te
from compiler.errors import IRTypeError
from compiler.ir import nodes as ir


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
