"""inplace: compute an element-wise stage into the buffer it reads, when that buffer dies there.

An accelerator's ALU (VITA's, VTA's) updates its register file in place: ``dst = op(dst, imm)``, and
DianNao's activations their NMEM vector (``relu``: ``dst[i] = max(dst[i], 0)``). A tensor expression
instead names every stage's result: ``shr = res >> 8; lo = max(shr, -128); ...``, each in its own "acc"
buffer. This pass is the storage rewrite between the two (TVM's StorageRewrite does the same for VTA's
epilogues): a buffer ``B`` allocated in a scope, whose only writer is a nest ``B[i] = f(A[i], ...)``
(guarded or not) that reads a buffer ``A`` of the same scope, dtype and size only at the same index (and
any others anywhere: ``B[i] = A[i] + C[j]``, an ALU's ``dst = dst + src``), becomes ``A`` when no
statement after that nest reads ``A`` (the first such ``A`` the value reads) and no loop lies between their
allocations (a later iteration of the loop could read ``A`` again). ``B``'s allocation goes away and the
nest becomes ``A[i] = f(A[i], ...)``.

Contract: flat IR in, flat IR out, computing the same (each element of ``A`` is read once, by the
statement that overwrites it, before it is overwritten). Statements are only renamed, never moved.
"""

from __future__ import annotations

from compiler.interp.args import stored_buffers
from compiler.interp.tensor_insn import read_operands
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, allocations, buffers_of, loads_in


def inplace(func: ir.PrimFunc) -> ir.PrimFunc:
    """Fold every element-wise stage into the dead buffer it reads (see the module docstring)."""
    return ir.PrimFunc(func.name, func.params, _Inplace().mutate(func.body), func.attrs)


class _Rename(IRMutator):
    def __init__(self, old: ir.Buffer, new: ir.Buffer) -> None:
        self.old, self.new = old, new

    def mutate_buffer(self, buffer: ir.Buffer) -> ir.Buffer:
        return self.new if buffer is self.old else buffer


class _Inplace(IRMutator):
    """Outer allocations first, so that a chain ``shr <- res``, ``lo <- shr`` folds one by one."""

    def __init__(self) -> None:
        self.enclosing: list[ir.Buffer] = []

    def mutate_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        _, inner = allocations(s.body)
        stmts = list(inner.stmts) if isinstance(inner, ir.Seq) else [inner]
        source = _fold_source(s.buffer, stmts, set(self.enclosing))
        if source is not None:
            return self.mutate(_Rename(s.buffer, source).mutate(s.body))
        self.enclosing.append(s.buffer)
        body = self.mutate(s.body)
        self.enclosing.pop()
        return s if body is s.body else ir.Allocate(s.buffer, body)

    def mutate_For(self, s: ir.For) -> ir.Stmt:
        # a buffer allocated outside a loop lives across its iterations: a later iteration may read it
        # again, which the statements after a nest in one iteration do not show; only the buffers allocated
        # inside the loop are candidates for the allocations in it
        outside, self.enclosing = self.enclosing, []
        try:
            return self.generic_mutate(s)
        finally:
            self.enclosing = outside


def _fold_source(b: ir.Buffer, stmts: list[ir.Stmt], enclosing: set[ir.Buffer]) -> ir.Buffer | None:
    """The buffer ``b`` may become, or None: see the module docstring for the conditions."""
    writers = [k for k, st in enumerate(stmts) if b in stored_buffers(st)]
    if len(writers) != 1:
        return None
    k = writers[0]
    if any(b in buffers_of(st) for st in stmts[:k]):
        return None
    store = _element_store(stmts[k])
    if store is None or store.buffer is not b:
        return None
    loads = loads_in(store.value)
    for a in dict.fromkeys(ld.buffer for ld in loads):   # in the order the value reads them
        if a is b or a not in enclosing or (a.scope, a.dtype, a.size) != (b.scope, b.dtype, b.size):
            continue
        if any(ld.indices != store.indices for ld in loads if ld.buffer is a):
            continue
        if any(a in {ld.buffer for ld in loads_in(st)} or _reads_region(st, a) for st in stmts[k + 1:]):
            continue
        return a
    return None


def _element_store(s: ir.Stmt) -> ir.Store | None:
    """The store of a perfect nest (under marks, and guards with no else: an element the guard skips keeps
    the value it had in the buffer read, which nothing was to read in the buffer written), or None."""
    while isinstance(s, ir.Attr | ir.For) or isinstance(s, ir.IfThenElse) and s.else_case is None:
        s = s.then_case if isinstance(s, ir.IfThenElse) else s.body
    return s if isinstance(s, ir.Store) else None


def _reads_region(s: ir.Stmt, buffer: ir.Buffer) -> bool:
    found = []

    class _Find(IRMutator):
        def mutate_TensorInsn(self, t: ir.TensorInsn) -> ir.Stmt:
            reads = read_operands(t)
            found.extend(r for r in t.regions if r.operand in reads and r.buffer is buffer)
            return t

    _Find().mutate(s)
    return bool(found)
