"""hoist_fill: a cluster-shared tile's first fill is issued before the synchronous copies that precede its
allocation, so that it crosses the memory port while they run (a conv's first SMEM tile of input rows
beside its weights' copy into WMEM: the GMEM port was idle while the cores copied their weights).

    cluster_fill(W)                              cluster_fill(W)
    copy Wn <- W                                 alloc T:
    alloc T:                        becomes        cluster_prefetch(T): zero T; copy_async T <- X
      cluster_fill(T): zero T; copy T <- X         copy Wn <- W
      rest                                         cluster_sync(T): wait
                                                   rest

The fill is split among the cluster's cores as a prefetch (``double_buffer``'s ``cluster_prefetch``: no
barriers), its copies issued asynchronously (a zero fill before them stays synchronous); the copies run; the
cores wait for their parts and meet at the barrier that closed the fill (``cluster_sync``).

When: the statements before the allocation nest (up to the statement before them, which ends at a barrier:
a cluster or card fill) are synchronous copies that touch no buffer the nest allocates; the nest's first
statement is the cluster fill of a buffer it allocates (so no core read the buffer before: the barrier that
opened the fill has nothing to wait for that the barrier before the copies did not); and the fill reads
nothing the copies write.

Why it computes the same: the fill and the copies touch disjoint buffers, so their order does not matter;
the interpreter runs asynchronous copies at once and waits as nothing; the DianNao simulator checks every
access against the outstanding copies (``HazardError``).

A card fill (``share_card``, which runs first: a tile every cluster fills alike crosses GMEM once instead)
is not hoisted. Where the statement before the copies is a card fill, the prefetch goes further: into the
card fill, after its statements, which the backend issues after a core loads its part and before it sends it
to the other clusters (the GMEM port carries the tile while the clusters' SMEM ports carry the sends; the
card fill's closing barrier leaves the tile's copies outstanding, which the DianNao simulator checks for every
core). The card fill then moves into the tile's allocations:

    card_fill(W): copy W <- G                    alloc T:
    copy Wn <- W                                   card_fill(W): copy W <- G; cluster_prefetch(T): ...
    alloc T:                        becomes        copy Wn <- W
      cluster_fill(T): ...                         cluster_sync(T): wait
      rest                                         rest

when neither writes what the other reads or writes.

The next tile's fill, where it comes soon after (the first prefetch of the statements after the first fill:
a pipeline whose cores wait for two tiles before they compute), starts the same way: the parts of it that
write only buffers the nest allocates and nothing before it touched, read nothing the nest writes, and touch
no element of a part they pass (constant spans), are issued by each core when its part of the first tile is
in, before the first tile's barrier (the GMEM port goes on to the next tile's rows instead of idling while
the cores meet and copy their first NMEM tiles); the rest (the halo rows copied from the first tile) stays:

    cluster_sync(T): wait                        cluster_sync(T): wait
    ...                                            cluster_prefetch(U): zero U; copy U <- X
    cluster_prefetch(U): zero U         becomes  ...
                         copy U <- T             cluster_prefetch(U): copy U <- T
                         copy U <- X

Precondition: after ``double_buffer`` (whose pipelines open with such a fill), ``stream_copies`` and
``share_card``.
Postcondition: the same function; a spec without an asynchronous copy or a wait leaves it as it is.
"""

from __future__ import annotations

import dataclasses

import isa
from compiler.interp.tensor_insn import operand_span, spans_overlap, written_operands
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, marked_insn
from compiler.passes.double_buffer import (
    CLUSTER_PREFETCH,
    CLUSTER_SYNC,
    asynchronous_copies,
    buffers_read,
    buffers_written,
    is_async_copy,
    wait_statement,
)
from compiler.passes.share_card import CARD_FILL
from compiler.passes.share_smem import CLUSTER_FILL, CLUSTER_SHARED


def hoist_fill(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Issue each first tile fill of the module docstring's shape before the copies that precede it."""
    wait = wait_statement(spec)
    if wait is None:
        return func
    body = _Hoist(spec, wait).mutate(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


class _Hoist(IRMutator):
    def __init__(self, spec: isa.ISA, wait: ir.TensorInsn) -> None:
        self.spec, self.wait = spec, wait

    def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
        stmts = [self.mutate(x) for x in s.stmts]
        for i, stmt in enumerate(stmts):
            j = i
            while j > 0 and self._copy(stmts[j - 1]):
                j -= 1
            if i > j > 0 and _ends_at_barrier(stmts[j - 1]):
                hoisted = self._hoisted(stmt, stmts[j:i])
                if hoisted is not None:
                    carried = _carried(stmts[j - 1], hoisted)
                    if carried is None:
                        stmts[j:i + 1] = [hoisted]
                    else:
                        stmts[j - 1:i + 1] = [carried]
                    return self.mutate_Seq(ir.Seq(tuple(stmts)))
        changed = any(a is not b for a, b in zip(stmts, s.stmts, strict=True))
        return ir.Seq(tuple(stmts)) if changed else s

    def _copy(self, stmt: ir.Stmt) -> bool:
        """A synchronous copy under its marks alone (not a fill: those hold barriers)."""
        inner = stmt
        while isinstance(inner, ir.Attr) and inner.key.startswith("pragma_"):
            inner = inner.body
        return isinstance(inner, ir.TensorInsn) and is_async_copy(inner) and \
            not self.spec.instruction(inner.name).timing.asynchronous

    def _hoisted(self, nest: ir.Stmt, copies: list[ir.Stmt]) -> ir.Stmt | None:
        """``nest`` with its first fill issued before ``copies`` (module docstring), or None."""
        allocated: set[str] = set()
        inner = nest
        while isinstance(inner, ir.Allocate) or (isinstance(inner, ir.Attr) and inner.key == CLUSTER_SHARED):
            if isinstance(inner, ir.Allocate):
                allocated.add(inner.buffer.name)
            inner = inner.body
        if inner is nest:
            return None
        stmts = list(inner.stmts) if isinstance(inner, ir.Seq) else [inner]
        fill = stmts[0]
        if not (isinstance(fill, ir.Attr) and fill.key == CLUSTER_FILL and fill.value in allocated):
            return None
        touched = set().union(*(buffers_read(c) | buffers_written(c) for c in copies))
        if touched & allocated or buffers_read(fill) & set().union(*(buffers_written(c) for c in copies)):
            return None
        parts = list(fill.body.stmts) if isinstance(fill.body, ir.Seq) else [fill.body]
        if not any(is_async_copy(p) for p in parts):
            return None   # nothing the spec can issue asynchronously
        prefetch = ir.Attr(CLUSTER_PREFETCH, fill.value, ir.seq(*asynchronous_copies(self.spec, parts)))
        sync, rest = ir.Attr(CLUSTER_SYNC, fill.value, self.wait), stmts[1:]
        k = next((k for k, x in enumerate(rest) if isinstance(x, ir.Attr) and x.key == CLUSTER_PREFETCH),
                 None)
        if k is not None:
            passed = [prefetch, *copies, *rest[:k]]
            early, late = _early(rest[k], passed, allocated, buffers_written(inner) | _written(copies))
            if early:
                sync = ir.Attr(CLUSTER_SYNC, fill.value,
                               ir.seq(self.wait, ir.Attr(CLUSTER_PREFETCH, rest[k].value, ir.seq(*early))))
                rest[k:k + 1] = [ir.Attr(CLUSTER_PREFETCH, rest[k].value, ir.seq(*late))] if late else []
        return _rebuilt(nest, ir.seq(prefetch, *copies, sync, *rest))


def _early(prefetch: ir.Attr, passed: list[ir.Stmt], allocated: set[str],
           written: set[str]) -> tuple[list[ir.Stmt], list[ir.Stmt]]:
    """The parts of ``prefetch`` that may be issued before the barrier that closes the first tile (module
    docstring): each writes only buffers of ``allocated`` that none of ``passed`` (every statement since the
    barrier before the first tile, through the one before ``prefetch``) touches, reads none of ``written``,
    and is apart from every part it passes; and the rest, in their order."""
    parts = list(prefetch.body.stmts) if isinstance(prefetch.body, ir.Seq) else [prefetch.body]
    touched = _touched(passed)
    early: list[ir.Stmt] = []
    late: list[ir.Stmt] = []
    for part in parts:
        writes = buffers_written(part)
        if marked_insn(part) is not None and writes <= allocated - touched and \
                not buffers_read(part) & written and all(_apart(part, other) for other in late):
            early.append(part)
        else:
            late.append(part)
    return early, late


def _touched(stmts: list[ir.Stmt]) -> set[str]:
    return set().union(*(buffers_read(x) | buffers_written(x) for x in stmts))


def _written(stmts: list[ir.Stmt]) -> set[str]:
    return set().union(*(buffers_written(x) for x in stmts))


def _apart(a: ir.Stmt, b: ir.Stmt) -> bool:
    """Whether single instructions ``a`` and ``b`` touch no element in common that either writes (constant
    spans; a buffer both touch with a span not constant is not apart)."""
    x, y = marked_insn(a), marked_insn(b)
    if x is None or y is None:
        return False
    wx, wy = set(written_operands(x)), set(written_operands(y))
    for rx in x.regions:
        for ry in y.regions:
            if rx.buffer.name != ry.buffer.name or (rx.operand not in wx and ry.operand not in wy):
                continue
            sx, sy = operand_span(x, rx.operand), operand_span(y, ry.operand)
            if sx is None or sy is None or spans_overlap(sx, sy):
                return False
    return True


def _carried(card: ir.Stmt, nest: ir.Stmt) -> ir.Stmt | None:
    """``nest`` (allocations around a prefetch, copies, ...) with card fill ``card`` carrying its prefetch
    (module docstring), or None where ``card`` is no card fill or shares a buffer with the prefetch."""
    if not (isinstance(card, ir.Attr) and card.key == CARD_FILL):
        return None
    inner = nest
    while isinstance(inner, ir.Allocate) or (isinstance(inner, ir.Attr) and inner.key == CLUSTER_SHARED):
        inner = inner.body
    prefetch, *rest = inner.stmts
    written = buffers_written(prefetch)
    if buffers_written(card) & (buffers_read(prefetch) | written) or buffers_read(card) & written:
        return None
    carrying = ir.Attr(CARD_FILL, card.value, ir.seq(card.body, prefetch))
    return _rebuilt(nest, ir.seq(carrying, *rest))


def _ends_at_barrier(stmt: ir.Stmt) -> bool:
    """A cluster or card fill (the backend closes each with a barrier)."""
    return isinstance(stmt, ir.Attr) and stmt.key in (CLUSTER_FILL, CARD_FILL)


def _rebuilt(nest: ir.Stmt, body: ir.Stmt) -> ir.Stmt:
    """The allocations and marks of ``nest`` around ``body``."""
    if isinstance(nest, ir.Allocate):
        return ir.Allocate(nest.buffer, _rebuilt(nest.body, body))
    if isinstance(nest, ir.Attr) and nest.key == CLUSTER_SHARED:
        return ir.Attr(nest.key, nest.value, _rebuilt(nest.body, body))
    return body
