"""place_output: a kernel writes its output inside a larger array, at an offset.

A convolution's output is the next convolution's data, which that kernel reads padded: ``[1, C/L, H + 2P,
W + 2P, L]`` with a border of the input's zero point. Written to an array of its own, the output is then
copied into the inside of the padded one on every inference. This pass moves the output into the padded
array instead: the output parameter becomes a buffer of the larger ``shape`` and every access to it is
shifted by ``offset``, so that the kernel writes the inside and leaves the border as it is.

Contract: the function writes (and reads) the same values at the same indices plus ``offset``; the
elements of the larger buffer outside them are not touched. ScheduleError where the output, shifted, does
not lie inside ``shape``.
"""

from __future__ import annotations

import dataclasses

from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, buffers_of


def place_output(func: ir.PrimFunc, shape: tuple[int, ...], offset: tuple[int, ...]) -> ir.PrimFunc:
    """``func`` with its output (its last parameter) at ``offset`` inside a buffer of ``shape``."""
    out = func.params[-1]
    if len(shape) != len(out.shape) or len(offset) != len(out.shape) or any(
            o < 0 or o + d > s for o, d, s in zip(offset, out.shape, shape, strict=True)):
        raise ScheduleError(f"place_output: {func.name}'s output {out.name} {list(out.shape)} at "
                            f"{list(offset)} does not lie inside {list(shape)}")
    placed = ir.Buffer(out.name, tuple(shape), out.dtype, out.scope)

    def shifted(indices: tuple[ir.Expr, ...]) -> tuple[ir.Expr, ...]:
        return tuple(i + o if o else i for i, o in zip(indices, offset, strict=True))

    class _Place(IRMutator):
        def mutate_Load(self, load: ir.Load) -> ir.Expr:
            load = self.generic_mutate(load)
            return ir.Load(placed, shifted(load.indices)) if load.buffer is out else load

        def mutate_Store(self, store: ir.Store) -> ir.Stmt:
            store = self.generic_mutate(store)
            return ir.Store(placed, shifted(store.indices), store.value) if store.buffer is out else store

    body = _Place().mutate(func.body)
    if any(b is out for b in buffers_of(body)):
        raise ScheduleError(f"place_output: {func.name} reaches its output {out.name} other than by a load "
                            f"or a store (a tensor instruction's region)")
    return dataclasses.replace(func, params=(*func.params[:-1], placed), body=body)
