"""narrow_output: a kernel whose every output value fits a narrower integer writes that integer.

A requantizing epilogue (PolyDL's Algorithm 3, ``fuse_elementwise``) saturates each output to 8 bits, but
the heavy operator's output buffer holds its int32 sums: the accumulator tile is copied out, then the fused
epilogue reads each element back and rewrites it. Written as int32, the output costs four times the memory
traffic an 8-bit one does, on the kernel's stores and on every read of it by the next layer. This pass
first forwards each copy-out into the statement that rewrites it,

    C[i] = acc[i]                 ->    C[i] = f(acc[i])
    C[i] = f(C[i])

(two stores in a row to the same element, the second reading it), then, where no statement reads the output
any more and every value stored in it provably lies in ``dtype``'s range (``compiler.arith.bound``: a clamp
by constants, a rounding, a conversion), gives the output buffer ``dtype`` and converts each stored value.

Contract: the function computes the same values; its output parameter holds them in ``dtype``.
ScheduleError, saying which store, where the output is still read or a value is not proved to fit.
"""

from __future__ import annotations

import dataclasses

from compiler.arith.bound import bound_expr
from compiler.arith.interval import Interval
from compiler.errors import ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, loads_in


def narrow_output(func: ir.PrimFunc, dtype: str) -> ir.PrimFunc:
    """``func`` with its output (its last parameter) written as ``dtype``, each copy-out forwarded into the
    store that rewrites it (see the module docstring)."""
    out, narrow = func.params[-1], dtypes.dtype(dtype)
    if not narrow.is_int or out.dtype.is_float:
        raise ScheduleError(f"narrow_output: {func.name}'s output {out.name} is {out.dtype}; only an integer "
                            f"output narrows, to an integer type (not {dtype})")
    body = _Forward(out).mutate(func.body)
    fits = Interval(int(narrow.min_value), int(narrow.max_value))
    retyped = ir.Buffer(out.name, out.shape, narrow, out.scope)

    class _Retype(IRMutator):
        def mutate_Load(self, load: ir.Load) -> ir.Expr:
            if load.buffer is out:
                raise ScheduleError(f"narrow_output: {func.name} still reads its output {out.name} "
                                    f"({load}) after its copy-outs are forwarded")
            return self.generic_mutate(load)

        def mutate_Store(self, store: ir.Store) -> ir.Stmt:
            store = self.generic_mutate(store)
            if store.buffer is not out:
                return store
            bound = bound_expr(store.value, {})
            if not bound.within(fits):
                raise ScheduleError(f"narrow_output: {func.name} stores {store.value} into {out.name}, not "
                                    f"proved to lie in {dtype}'s range (its bound: {bound})")
            return ir.Store(retyped, store.indices, ir.cast(store.value, narrow))

    body = _Retype().mutate(body)
    return dataclasses.replace(func, params=(*func.params[:-1], retyped), body=body)


class _Forward(IRMutator):
    """Each store to ``out`` followed in its statement list by a store to the same element that reads it:
    one store, the first's value in place of the read."""

    def __init__(self, out: ir.Buffer) -> None:
        self.out = out

    def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
        stmts = [self.mutate(x) for x in s.stmts]
        kept: list[ir.Stmt] = []
        for stmt in stmts:
            last = kept[-1] if kept else None
            if self._copied(last) and self._rewrites(stmt, last):
                kept[-1] = ir.Store(self.out, stmt.indices, _Replace(last).mutate(stmt.value))
            else:
                kept.append(stmt)
        return ir.seq(*kept)

    def _copied(self, stmt: ir.Stmt | None) -> bool:
        return isinstance(stmt, ir.Store) and stmt.buffer is self.out and \
            not any(load.buffer is self.out for load in loads_in(stmt.value))

    def _rewrites(self, stmt: ir.Stmt, first: ir.Store) -> bool:
        return isinstance(stmt, ir.Store) and stmt.buffer is self.out and stmt.indices == first.indices


class _Replace(IRMutator):
    """Every read of the element ``first`` stored: ``first``'s value."""

    def __init__(self, first: ir.Store) -> None:
        self.first = first

    def mutate_Load(self, load: ir.Load) -> ir.Expr:
        if load.buffer is self.first.buffer and load.indices == self.first.indices:
            return self.first.value
        return self.generic_mutate(load)
