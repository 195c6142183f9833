"""share_smem: one core of a cluster fills a cluster-shared SMEM tile for the whole cluster (seed 001 Sec. V:
the two-level tiling, "tile by SMEM, then by NMEM/WMEM").

Bound inference relaxes a buffer in scope "smem" over the loops bound to "core" (``compiler.lower``'s
``SHARED_SCOPES``), so each core's copy of such a tile holds the region of its whole cluster, and every core
fills it with the same values. The IR means exactly that: every core fills its own copy. This pass finds the
tiles for which letting one core fill a single copy per cluster, with barriers around the fill, computes
the same, and marks them:

- ``Attr("cluster_shared", name, Allocate(B, ...))``: place B once per cluster (the backend gives it its own
  SMEM addresses, never reused within the kernel, so a late reader of one tile never sees the next);
- ``Attr("cluster_fill", name, fill)``: the statements that write B. The backend emits a cluster barrier (no
  core still reads the previous contents), the fill on the cluster's first core only, and a second barrier
  (no core reads before the fill is done).

A tile is shared when all of these hold, and stays private (one slice of SMEM per core) otherwise:

1. its ``Allocate`` is inside a loop bound to "core";
2. its body starts with the statements that write B (the fill), which do not read B, and nothing after them
   writes B;
3. the fill mentions no variable of a "core"-bound loop (nor a ``Let`` that depends on one): its values are
   the same on every core;
4. every core of a cluster runs the fill, and its barriers, the same number of times: the loops between the
   innermost "core"-bound loop and the ``Allocate`` do not depend on the core, and a condition that does
   (loop partitioning splits the core loop where a core's last tile is shorter) has the same shared fills,
   under the same loops, in both branches.

Precondition: tensorized flat IR (``verify(func, "flat")``). Postcondition: the same function with the
marks added; its meaning (each core filling its own copy) is unchanged, so the interpreter, which ignores
``Attr``, gives the same results before and after.
Non-goals: sharing tiles that only some of a cluster's cores read (it needs no more than rule 4). Who runs a
marked fill is the backend's choice: the DianNao backend splits it by rows among the cluster's cores where
it can (compiler/backend/diannao_fill.py), between the same barriers.
"""

from __future__ import annotations

import dataclasses

from compiler.interp.args import stored_buffers
from compiler.interp.tensor_insn import read_operands
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, allocations, free_vars, loads_in, post_order_visit
from compiler.lower import SHARED_SCOPES

CLUSTER_SHARED = "cluster_shared"
CLUSTER_FILL = "cluster_fill"


def share_smem(func: ir.PrimFunc) -> ir.PrimFunc:
    """Mark the SMEM tiles that one core per cluster can fill for all (see the module docstring)."""
    body = _Share().mutate(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


class AlignedFills(IRMutator):
    """A walk that knows whether every thread of a group runs the statement at hand alike: inside a loop bound
    to one of ``threads`` (that ``entered`` accepts), with no control since that depends on the group's
    threads (a loop's bounds; a condition, unless ``fills`` finds the same fills on both branches, in which
    case the threads part ways only where nothing is shared). ``share_smem`` (the cores of a cluster) and
    ``share_card`` (the clusters of the card) share it."""

    threads: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.thread_vars: set[ir.Var] = set()   # variables of the bound loops and Lets that depend on them
        self.aligned = False                    # inside such a loop, no thread-dependent control since it

    def entered(self, s: ir.For) -> bool:
        """Whether the threads of the bound loop ``s`` run its body alike (override to require more)."""
        return True

    def fills(self, stmt: ir.Stmt | None) -> tuple[str, ...]:
        """The shared fills ``stmt`` runs, as text (two branches alike run the same ones)."""
        return fills_text(stmt)

    def _depends(self, *exprs: ir.Expr) -> bool:
        return any(free_vars(e) & self.thread_vars for e in exprs)

    def _under(self, aligned: bool, stmt: ir.Stmt) -> ir.Stmt:
        outer, self.aligned = self.aligned, aligned
        try:
            return self.mutate(stmt)
        finally:
            self.aligned = outer

    def mutate_For(self, s: ir.For) -> ir.Stmt:
        if s.thread in self.threads:
            self.thread_vars.add(s.var)
            body = self._under(self.entered(s), s.body)
        else:
            body = self._under(self.aligned and not self._depends(s.min, s.extent), s.body)
        return s if body is s.body else dataclasses.replace(s, body=body)

    def mutate_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        then_case, else_case = self._branches(s, self.aligned)
        if self.aligned and self._depends(s.cond) and self.fills(then_case) != self.fills(else_case):
            # the threads part ways: their fills stay their own
            then_case, else_case = self._branches(s, False)
        if then_case is s.then_case and else_case is s.else_case:
            return s
        return ir.IfThenElse(s.cond, then_case, else_case)

    def _branches(self, s: ir.IfThenElse, aligned: bool) -> tuple[ir.Stmt, ir.Stmt | None]:
        return (self._under(aligned, s.then_case),
                None if s.else_case is None else self._under(aligned, s.else_case))

    def mutate_Let(self, s: ir.Let) -> ir.Stmt:
        if self._depends(s.value):
            self.thread_vars.add(s.var)
        body = self.mutate(s.body)
        return s if body is s.body else dataclasses.replace(s, body=body)


class _Share(AlignedFills):
    threads = frozenset().union(*SHARED_SCOPES.values())   # the threads that share an "smem" buffer

    def mutate_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        body = self.mutate(s.body)
        buffer = s.buffer
        if buffer.scope in SHARED_SCOPES and self.aligned:
            inner_buffers, inner = allocations(body)   # the fill may open inside other allocations
            split = _fill_prefix(inner, buffer)
            if split is not None and not free_vars(split[0]) & self.thread_vars:
                fill, rest = split
                body = ir.seq(ir.Attr(CLUSTER_FILL, buffer.name, fill), *rest)
                for other in reversed(inner_buffers):
                    body = ir.Allocate(other, body)
                return ir.Attr(CLUSTER_SHARED, buffer.name, ir.Allocate(buffer, body))
        return s if body is s.body else ir.Allocate(buffer, body)




def fills_text(stmt: ir.Stmt | None, key: str = CLUSTER_FILL) -> tuple[str, ...]:
    """The fills marked ``key`` that ``stmt`` runs, with the loops and conditions around them, as text: two
    statements with the same text run the same fills (so the same barriers) in the same order."""
    if stmt is None:
        return ()
    if isinstance(stmt, ir.Attr) and stmt.key == key:
        return (str(stmt),)
    if isinstance(stmt, ir.Seq):
        return tuple(line for x in stmt.stmts for line in fills_text(x, key))
    if isinstance(stmt, ir.For):
        inner = fills_text(stmt.body, key)
        return (f"for {stmt.var.name} in [{stmt.min}, +{stmt.extent}):", *inner, "end") if inner else ()
    if isinstance(stmt, ir.IfThenElse):
        then_case, else_case = fills_text(stmt.then_case, key), fills_text(stmt.else_case, key)
        return (f"if {stmt.cond}:", *then_case, "else:", *else_case, "end") if then_case or else_case else ()
    if isinstance(stmt, ir.Allocate | ir.Attr | ir.Let):
        return fills_text(stmt.body, key)
    return ()


def _fill_prefix(body: ir.Stmt, buffer: ir.Buffer) -> tuple[ir.Stmt, tuple[ir.Stmt, ...]] | None:
    """(the leading statements that write ``buffer`` without reading it, the rest), when nothing in the rest
    writes it; None otherwise."""
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    n = 0
    while n < len(stmts) and buffer in stored_buffers(stmts[n]) and not _reads(stmts[n], buffer):
        n += 1
    if n == 0 or any(buffer in stored_buffers(s) for s in stmts[n:]):
        return None
    return ir.seq(*stmts[:n]), stmts[n:]


def _reads(stmt: ir.Stmt, buffer: ir.Buffer) -> bool:
    """Whether ``stmt`` loads from ``buffer`` or passes it to a tensor instruction as an operand it reads."""
    if any(load.buffer == buffer for load in loads_in(stmt)):
        return True
    found = False

    def visit(node: ir.Node) -> None:
        nonlocal found
        if isinstance(node, ir.TensorInsn):
            reads = read_operands(node)
            found |= any(r.buffer == buffer and r.operand in reads for r in node.regions)

    post_order_visit(stmt, visit)
    return found
