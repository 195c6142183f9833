"""simplify: arithmetic simplification of a whole function under its loop ranges.

Every expression is simplified by ``compiler.arith.simplify`` knowing the range of each enclosing loop
variable. Guards that are provably true disappear; a guard provably false removes its then-branch;
serial loops of extent 1 are replaced by their body with the variable substituted; loops of extent 0
and empty statements are removed.

Precondition: a well-formed function (``verify``). Postcondition: computes the same result.
Non-goals: common subexpression elimination, loop-invariant code motion.
"""

from __future__ import annotations

import dataclasses

from compiler import arith
from compiler.arith import Interval
from compiler.ir import nodes as ir
from compiler.ir.dae_tokens import DepToken
from compiler.ir.functor import IRMutator, substitute

_EMPTY = ir.Seq(())


def _keep(old: ir.Node, **fields) -> ir.Node:
    """``old`` itself when the new fields equal its own (unchanged subtrees stay shared), else a copy."""
    if all(getattr(old, k) == v for k, v in fields.items()):
        return old
    return dataclasses.replace(old, **fields)


def _is_empty(s: ir.Stmt) -> bool:
    return isinstance(s, ir.Seq) and not s.stmts


class _Loads(IRMutator):
    """The indices of every load of an expression simplified by ``outer`` (under its loop ranges)."""

    def __init__(self, outer: _Simplify) -> None:
        self.outer = outer

    def mutate_Load(self, load: ir.Load) -> ir.Expr:
        load = self.generic_mutate(load)
        return ir.Load(load.buffer, tuple(self.outer._expr(i) for i in load.indices))


class _Simplify(IRMutator):
    def __init__(self) -> None:
        self.ranges: dict[ir.Var, Interval] = {}

    def _expr(self, e: ir.Expr) -> ir.Expr:
        """Simplify an expression, and the indices of every load inside it, under the loop ranges."""
        return arith.simplify(_Loads(self).mutate(e), self.ranges)

    def mutate_Store(self, s: ir.Store) -> ir.Stmt:
        indices = tuple(self._expr(i) for i in s.indices)
        return _keep(s, indices=indices, value=self._expr(s.value))

    def mutate_Evaluate(self, s: ir.Evaluate) -> ir.Stmt:
        return _keep(s, value=self._expr(s.value))

    def mutate_InsnField(self, f: ir.InsnField) -> ir.InsnField:
        return _keep(f, value=self._expr(f.value))

    def mutate_Region(self, r: ir.Region) -> ir.Region:
        return _keep(r, offset=self._expr(r.offset))

    def mutate_DepToken(self, s: DepToken) -> ir.Stmt:
        return _keep(s, label=tuple(self._expr(e) for e in s.label))

    def mutate_For(self, s: ir.For) -> ir.Stmt:
        lo, ext = self._expr(s.min), self._expr(s.extent)
        if isinstance(ext, ir.IntImm) and ext.value <= 0:
            return _EMPTY
        if isinstance(ext, ir.IntImm) and ext.value == 1 and s.kind is ir.ForKind.SERIAL:
            return self.mutate(substitute(s.body, {s.var: lo}))
        if isinstance(lo, ir.IntImm) and isinstance(ext, ir.IntImm):
            self.ranges[s.var] = Interval.from_extent(lo.value, ext.value)
        else:
            lo_bound = arith.bound(lo, self.ranges)
            hi_bound = arith.bound(lo + ext - 1, self.ranges)
            self.ranges[s.var] = Interval(lo_bound.lo, hi_bound.hi)
        body = self.mutate(s.body)
        del self.ranges[s.var]
        if _is_empty(body):
            return _EMPTY
        if lo is s.min and ext is s.extent and body is s.body:
            return s
        return ir.For(s.var, lo, ext, body, s.kind, s.thread)

    def mutate_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        cond = self._expr(s.cond)
        if isinstance(cond, ir.IntImm):
            chosen = s.then_case if cond.value else s.else_case
            return _EMPTY if chosen is None else self.mutate(chosen)
        then_case = self.mutate(s.then_case)
        else_case = None if s.else_case is None else self.mutate(s.else_case)
        if else_case is not None and _is_empty(else_case):
            else_case = None
        if _is_empty(then_case):
            if else_case is None:
                return _EMPTY
            return ir.IfThenElse(ir.Not(cond), else_case)
        return _keep(s, cond=cond, then_case=then_case, else_case=else_case)

    def mutate_Let(self, s: ir.Let) -> ir.Stmt:
        value = self._expr(s.value)
        bnd = arith.bound(value, self.ranges) if value.dtype.is_int else None
        if bnd is not None:
            self.ranges[s.var] = bnd
        body = self.mutate(s.body)
        self.ranges.pop(s.var, None)
        return _EMPTY if _is_empty(body) else _keep(s, value=value, body=body)

    def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
        stmts = [self.mutate(x) for x in s.stmts]
        kept = [x for x in stmts if not _is_empty(x)]
        if len(kept) == len(s.stmts) and all(a is b for a, b in zip(kept, s.stmts, strict=True)):
            return s
        return ir.seq(*kept) if kept else _EMPTY

    def mutate_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        body = self.mutate(s.body)
        return _EMPTY if _is_empty(body) else _keep(s, body=body)

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        body = self.mutate(s.body)
        return _EMPTY if _is_empty(body) else _keep(s, body=body)


def simplify(func: ir.PrimFunc) -> ir.PrimFunc:
    """Simplify every expression of ``func`` under its loop ranges and drop dead control flow."""
    body = _Simplify().mutate(func.body)
    return ir.PrimFunc(func.name, func.params, body, func.attrs)
