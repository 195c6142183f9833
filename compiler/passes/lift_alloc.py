"""lift_alloc: an allocation inside a statement list covers the whole list (VTA's lift_alloc_to_scope_begin).

Lowering nests each staged buffer's allocation around the statements that use it, so a loop body of a
decoupled access/execute kernel reads ``alloc(res) { alloc(inp) { alloc(wgt) { loads; GEMMs } }; store }``:
the loads and the GEMMs sit one list deeper than the store. ``inject_sync`` places a token in the list that
holds both ends of a dependency, so the GEMMs' "done" push to the store unit would land after the inner
allocation, not after the GEMMs; and ``inject_virtual_thread``, which interleaves the threads inside an
allocation that holds tokens, would then emit thread 0's push only after thread 1's GEMMs (thread 0's store,
and its next load, wait for thread 1's compute). This pass moves each allocation in a statement list to the
start of that list, so that every statement of one loop body is in one list.

An allocation is lifted only when no other allocation in the same list shares its memory scope (lifting
two would make them live at once, where they took turns in the buffer before), and when its buffer is not
allocated twice in the list.

Contract: flat IR in, flat IR out, computing the same (a buffer lives longer; no statement reads it
outside its old scope, since it was not in scope there).
"""

from __future__ import annotations

from collections import Counter

from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, allocations


def lift_alloc(func: ir.PrimFunc) -> ir.PrimFunc:
    """Lift every allocation of a statement list to the start of the list (see the module docstring)."""
    body = _Lift().mutate(func.body)
    return func if body is func.body else ir.PrimFunc(func.name, func.params, body, func.attrs)


class _Lift(IRMutator):
    def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
        stmts = [self.mutate(x) for x in s.stmts]
        scopes = Counter(b.scope for x in stmts for b in allocations(x)[0])
        buffers = Counter(b for x in stmts for b in allocations(x)[0])
        lifted: list[ir.Buffer] = []
        flat: list[ir.Stmt] = []
        for x in stmts:
            chain, inner = allocations(x)
            if chain and all(scopes[b.scope] == 1 and buffers[b] == 1 for b in chain):
                lifted += chain
                flat.append(inner)
            else:
                flat.append(x)
        if not lifted:
            return s if all(a is b for a, b in zip(stmts, s.stmts, strict=True)) else ir.seq(*stmts)
        body = ir.seq(*flat)
        for b in reversed(lifted):
            body = ir.Allocate(b, body)
        return body
