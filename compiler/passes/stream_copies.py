"""stream_copies: a buffer that several synchronous copies fill before it is read part by part is filled as it
is read (the weights of a conv computed one kernel row at a time, ``compiler.ops.diannao``'s ``split_ky``).

    with alloc(W):                               with alloc(W):
      copy W[part 0]                               copy W[part 0]
      copy W[part 1]                               ...
      copy W[part 2]                               copy_async W[part 1]
      ...                           becomes        reader of part 0
      reader of part 0                             wait
      reader of part 1                             copy_async W[part 2]
      reader of part 2                             reader of part 1
                                                   wait
                                                   reader of part 2

Each copy after the first is issued asynchronously (the spec's asynchronous twin, ``double_buffer``'s
``async_twin``) right before the first instruction that reads the part before it, and the first instruction
that reads its own part waits for it first (the spec's ``wait``, which waits for all of the core's
asynchronous work), unless a wait already lies between. So a core computes on the first part while the next
one crosses the memory port, instead of waiting for the whole buffer: on the DianNao card the weights every
core loads before its first conv are 10-15% of a Table II layer's cycles, all of them on the one GMEM port.

The copies: two or more synchronous copies (an unrolled loop of them, or statements) that are the first
statements of the buffer's allocation to touch it, each writing a part of it the others do not.
The readers are found in program order through statement lists, allocations, marks and unrolled loops (which
are unrolled where they hold a reader); before anything else that touches the buffer, before a cluster fill
(it opens with a barrier) and at the end, the copies not issued yet run as they were and the core waits for
those that are out. A buffer whose first reader reads more than the first part is left as it is (nothing
would overlap).

Why it computes the same: a moved copy writes only its part, which nothing reads or writes before its wait,
and reads a buffer nothing writes (a parameter, or one allocated around the copies and written before them).
The interpreter runs asynchronous copies at once and waits as nothing; the DianNao simulator checks every
access against the outstanding copies (``HazardError``).

Precondition: tensorized flat IR, after ``double_buffer``. Postcondition: the same function; a spec without
an asynchronous copy or a wait leaves it as it is.
"""

from __future__ import annotations

import dataclasses

import isa
from compiler.interp.args import stored_buffers
from compiler.interp.tensor_insn import operand_span, read_operands, spans_overlap, written_operands
from compiler.ir import nodes as ir
from compiler.ir.functor import (
    IRMutator,
    allocations,
    loads_in,
    marked_insn,
    post_order_visit,
    with_marks,
)
from compiler.passes.double_buffer import async_twin, substituted, wait_statement
from compiler.passes.share_smem import CLUSTER_FILL


def stream_copies(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Fill each buffer of the module docstring's shape as it is read."""
    wait = wait_statement(spec)
    if wait is None:
        return func
    body = _Streamer(spec, wait).mutate(func.body)
    return func if body is func.body else ir.PrimFunc(func.name, func.params, body, func.attrs)


class _Streamer(IRMutator):
    def __init__(self, spec: isa.ISA, wait: ir.TensorInsn) -> None:
        self.spec, self.wait = spec, wait

    def mutate_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        body = self.mutate(s.body)
        inside, inner = allocations(body)   # allocations opened right after this one
        stmts = list(inner.stmts) if isinstance(inner, ir.Seq) else [inner]
        first = next((k for k, x in enumerate(stmts) if _touches(x, {s.buffer})), len(stmts))
        pieces, rest = _leading_copies(stmts[first:], s.buffer)
        asynchronous = all(async_twin(self.spec, self.spec.instruction(p.insn.name)) for p in pieces)
        if len(pieces) >= 2 and asynchronous:
            streamed = _Schedule(self, s.buffer, pieces).run(rest)
            if streamed is not None:
                new = ir.seq(*stmts[:first], pieces[0].stmt, *streamed)
                for buffer in reversed(inside):
                    new = ir.Allocate(buffer, new)
                return ir.Allocate(s.buffer, new)
        return s if body is s.body else ir.Allocate(s.buffer, body)


@dataclasses.dataclass(frozen=True)
class _Piece:
    stmt: ir.Stmt           # the copy under its marks
    insn: ir.TensorInsn
    span: tuple[int, int]   # the elements of the buffer it writes


def _leading_copies(stmts: list[ir.Stmt], buffer: ir.Buffer) -> tuple[list[_Piece], list[ir.Stmt]]:
    """The synchronous copies into disjoint parts of ``buffer`` that open ``stmts`` (an unrolled loop of
    them unrolled), and the statements after them."""
    pieces: list[_Piece] = []
    for k, stmt in enumerate(stmts):
        stmts_run = _unrolled(stmt)
        found = [_piece(x, buffer) for x in stmts_run] if stmts_run is not None else [None]
        if not found or None in found or \
                any(spans_overlap(p.span, q.span) for p in found for q in pieces) or \
                any(spans_overlap(p.span, q.span) for i, p in enumerate(found) for q in found[:i]):
            return pieces, stmts[k:]
        pieces += found
    return pieces, []


def _unrolled(stmt: ir.Stmt) -> list[ir.Stmt] | None:
    """The instructions (under their marks) ``stmt`` runs, in order, when it is one or an unrolled loop of
    them with constant bounds; else None."""
    if marked_insn(stmt) is not None:
        return [stmt]
    if isinstance(stmt, ir.For) and stmt.kind == ir.ForKind.UNROLLED and \
            isinstance(stmt.min, ir.IntImm) and isinstance(stmt.extent, ir.IntImm):
        out = []
        for x in _unroll(stmt):
            inner = _unrolled(x)
            if inner is None:
                return None
            out += inner
        return out
    return None


def _unroll(loop: ir.For) -> list[ir.Stmt]:
    """The iterations of an unrolled loop with constant bounds, its variable substituted and folded."""
    lo = loop.min.value
    return [substituted(loop.body, {loop.var: ir.const(lo + k)}) for k in range(loop.extent.value)]


def _piece(stmt: ir.Stmt, buffer: ir.Buffer) -> _Piece | None:
    """``stmt`` as a part of ``buffer``'s fill: a synchronous copy (one operand read, one written) writing
    only ``buffer``, at a constant place; else None."""
    insn = marked_insn(stmt)
    instr = insn.isa.instruction(insn.name)
    written, read = written_operands(insn), read_operands(insn)
    if instr.timing.asynchronous or len(written) != 1 or len(read) != 1:
        return None
    dst = next((r for r in insn.regions if r.operand == written[0]), None)
    if dst is None or dst.buffer != buffer:
        return None
    span = operand_span(insn, written[0])
    return _Piece(stmt, insn, span) if span is not None else None


class _Schedule:
    """The statements after the copies, with the copies issued as they are read (module docstring)."""

    def __init__(self, streamer: _Streamer, buffer: ir.Buffer, pieces: list[_Piece]) -> None:
        self.spec, self.wait, self.buffer, self.pieces = streamer.spec, streamer.wait, buffer, pieces
        self.issued = 1         # pieces issued (piece 0 synchronously, where it was)
        self.out: set[int] = set()   # issued asynchronously and not waited for
        self.started = False    # a reader of piece 0 was found
        self.sources = {r.buffer for p in pieces for r in p.insn.regions if r.operand != _written(p.insn)}

    def run(self, stmts: list[ir.Stmt]) -> list[ir.Stmt] | None:
        """``stmts`` with the copies placed, or None when the first reader reads beyond piece 0."""
        body = self.walk(stmts)
        if body is None or not self.started:
            return None
        return body + self.finish()

    def walk(self, stmts: list[ir.Stmt]) -> list[ir.Stmt] | None:
        out: list[ir.Stmt] = []
        for stmt in stmts:
            if self.is_wait(stmt):
                self.out.clear()
            done = self.issued == len(self.pieces) and not self.out
            if done or not (_touches(stmt, {self.buffer}) or self.out and _is_fill(stmt) or
                            _writes(stmt, self.sources)):
                out.append(stmt)
                continue
            placed = self.place(stmt)
            if placed is None:
                return None
            out += placed
        return out

    def place(self, stmt: ir.Stmt) -> list[ir.Stmt] | None:
        """``stmt``, which touches the buffer or must not have copies out across it, with the copies placed
        around and inside it; None where the streaming cannot start."""
        if isinstance(stmt, ir.Seq):
            return self.walk(list(stmt.stmts))
        if isinstance(stmt, ir.Allocate):
            inner = self.walk(list(stmt.body.stmts) if isinstance(stmt.body, ir.Seq) else [stmt.body])
            return None if inner is None else [ir.Allocate(stmt.buffer, ir.seq(*inner))]
        if isinstance(stmt, ir.Attr) and stmt.key != CLUSTER_FILL and marked_insn(stmt) is None:
            inner = self.walk([stmt.body])
            return None if inner is None else [ir.Attr(stmt.key, stmt.value, ir.seq(*inner))]
        if isinstance(stmt, ir.For) and _unrolled(stmt) is not None:
            return self.walk(_unroll(stmt))
        insn = marked_insn(stmt)
        if isinstance(stmt, ir.Attr) and stmt.key == CLUSTER_FILL and not _touches(stmt, {self.buffer}) and \
                not _writes(stmt, self.sources):   # it opens with a barrier: nothing may be out
            waits = [self.wait] if self.out else []
            self.out = set()
            return [*waits, stmt]
        if insn is not None and not _writes(stmt, self.sources):
            return self.read(stmt, insn)
        return [*self.finish(), stmt] if self.started else None

    def is_wait(self, stmt: ir.Stmt) -> bool:
        insn = marked_insn(stmt)
        return insn is not None and insn.name == self.wait.name and not insn.regions

    def read(self, stmt: ir.Stmt, insn: ir.TensorInsn) -> list[ir.Stmt] | None:
        """``stmt`` (instruction ``insn``), after what it needs: a wait for the pieces it reads, the next
        piece issued."""
        reads = [r for r in insn.regions if r.buffer == self.buffer and r.operand in read_operands(insn)]
        writes = [r for r in insn.regions if r.buffer == self.buffer and r.operand in written_operands(insn)]
        spans = [operand_span(insn, r.operand) for r in reads]
        if writes or None in spans:
            return [*self.finish(), stmt] if self.started else None
        parts = [k for k, p in enumerate(self.pieces) if any(spans_overlap(p.span, s) for s in spans)]
        if not parts:
            return [stmt]
        if not self.started:
            if parts != [0]:
                return None
            self.started = True
        before: list[ir.Stmt] = []
        if max(parts) >= self.issued:   # a part not issued yet: issue what is left up to it at once
            while self.issued <= max(parts):
                before.append(self.asynchronous(self.issued))
        if self.out & set(parts):
            before.append(self.wait)
            self.out.clear()
        if self.issued == max(parts) + 1 < len(self.pieces):
            before.append(self.asynchronous(self.issued))
        return [*before, stmt]

    def asynchronous(self, k: int) -> ir.Stmt:
        piece = self.pieces[k]
        twin = async_twin(self.spec, self.spec.instruction(piece.insn.name))
        self.issued, self.out = k + 1, self.out | {k}
        return with_marks(piece.stmt, dataclasses.replace(piece.insn, name=twin.name))

    def finish(self) -> list[ir.Stmt]:
        """A wait for the pieces that are out, and those not issued yet, as they were."""
        rest = [p.stmt for p in self.pieces[self.issued:]]
        self.issued = len(self.pieces)
        waits = [self.wait] if self.out else []
        self.out = set()
        return [*waits, *rest]


def _written(insn: ir.TensorInsn) -> str:
    return written_operands(insn)[0]


def _touches(stmt: ir.Stmt, buffers: set[ir.Buffer]) -> bool:
    """Whether ``stmt`` reads or writes one of ``buffers`` (an instruction's operand, a load, a store)."""
    found = [False]

    def visit(x) -> None:
        if isinstance(x, ir.TensorInsn) and any(r.buffer in buffers for r in x.regions):
            found[0] = True
    post_order_visit(stmt, visit)
    return found[0] or bool(buffers & set(stored_buffers(stmt))) or \
        any(load.buffer in buffers for load in loads_in(stmt))


def _writes(stmt: ir.Stmt, buffers: set[ir.Buffer]) -> bool:
    """Whether ``stmt`` writes one of ``buffers``."""
    return bool(buffers & set(stored_buffers(stmt)))


def _is_fill(stmt: ir.Stmt) -> bool:
    """A cluster fill: it opens with a barrier, which no copy may be out across."""
    found = [False]
    post_order_visit(stmt, lambda x: found.__setitem__(0, True) if isinstance(x, ir.Attr) and
                     x.key == CLUSTER_FILL else None)
    return found[0]
