"""flatten: multi-dimensional buffers -> one-dimensional row-major buffers.

Every parameter and allocation of shape ``(d0, ..., dn)`` becomes a buffer of ``d0*...*dn`` elements
(same name, dtype and scope) and every access ``B[i0, ..., in]`` becomes ``B[i0*s0 + ... + in]`` with
row-major strides, simplified under the loop ranges — seed 001's ``C[tid*56 + i*14 + j]``.

Precondition: ``verify(func, "loop-ir")``. Postcondition: ``verify(func, "flat")``; a caller passes the
same C-contiguous arrays (the interpreter accepts any array with the parameter's element count).
"""

from __future__ import annotations

from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator
from compiler.passes.simplify import simplify


def _linear(indices: tuple[ir.Expr, ...], shape: tuple[int, ...]) -> ir.Expr:
    stride = 1
    terms: list[ir.Expr] = []
    for index, extent in zip(reversed(indices), reversed(shape), strict=True):
        terms.append(index if stride == 1 else index * stride)
        stride *= extent
    out = terms[-1]
    for t in reversed(terms[:-1]):
        out = out + t
    return out


class _Flatten(IRMutator):
    def __init__(self) -> None:
        self.flat: dict[ir.Buffer, ir.Buffer] = {}

    def buffer(self, b: ir.Buffer) -> ir.Buffer:
        if b not in self.flat:
            self.flat[b] = b if len(b.shape) == 1 else ir.Buffer(b.name, (b.size,), b.dtype, b.scope)
        return self.flat[b]

    def mutate_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.buffer(b)

    def mutate_Load(self, e: ir.Load) -> ir.Expr:
        e = self.generic_mutate_indices(e)
        return ir.Load(self.buffer(e.buffer), (_linear(e.indices, e.buffer.shape),))

    def mutate_Store(self, s: ir.Store) -> ir.Stmt:
        value = self.mutate(s.value)
        indices = tuple(self.mutate(i) for i in s.indices)
        return ir.Store(self.buffer(s.buffer), (_linear(indices, s.buffer.shape),), value)

    def generic_mutate_indices(self, e: ir.Load) -> ir.Load:
        indices = tuple(self.mutate(i) for i in e.indices)
        return (
            e if all(a is b for a, b in zip(indices, e.indices, strict=True)) else ir.Load(e.buffer, indices)
        )


def flatten(func: ir.PrimFunc) -> ir.PrimFunc:
    """Rewrite every buffer of ``func`` to one dimension, accesses to row-major offsets."""
    m = _Flatten()
    params = tuple(m.buffer(b) for b in func.params)
    body = m.mutate(func.body)
    return simplify(ir.PrimFunc(func.name, params, body, func.attrs))
