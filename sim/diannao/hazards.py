"""A core's outstanding asynchronous work and the accesses that may not touch it before a ``wait``.

    reads, writes = spans(op, fields, homes)     # the byte spans of a tensor instruction's operands
    found = conflict(pending, reads, writes)     # None, or the first overlap with outstanding work

Until a core waits, an asynchronous instruction it issued (sim/diannao/machine.py) is outstanding: the core
must not read or write what the instruction writes, nor write what it reads. Work a core leaves outstanding
at a barrier is every core's concern until it ends: no core may touch it so before that cycle. The machine
moves the data when the instruction is issued, which equals moving them when it ends exactly because no such
access happens.

A span names the copy of its space it lies in (``Home``: GMEM's one copy, a cluster's SMEM, a core's NMEM or
WMEM), so that spans of different cores, or of another cluster's SMEM, compare as the memories they are.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.diannao.decode import TensorOp

#: the rule a ``HazardError`` names
RULE = ("until a wait, no access to what an outstanding asynchronous instruction writes and no write to what "
        "it reads")
#: the rule for work a core leaves outstanding at a barrier
RELEASED_RULE = ("asynchronous work outstanding at a barrier: no core accesses what it writes, nor writes "
                 "what it reads, before it ends")

Home = tuple[int, int]            # (space code, its copy: 0 for GMEM, the cluster for SMEM, else the core)
Span = tuple[Home, int, int]      # (the memory, first byte, end byte)


class Pending(NamedTuple):
    """An asynchronous instruction a core issued and has not waited for: its pc, the bytes it reads and
    writes, the core and the cycle its unit finishes it."""

    pc: int
    reads: tuple[Span, ...]
    writes: tuple[Span, ...]
    core: int
    end: int


class Conflict(NamedTuple):
    """An access (``verb`` ``mine``) overlapping what the outstanding instruction ``pending`` ``does``
    (``theirs``)."""

    pending: Pending
    verb: str
    mine: Span
    does: str
    theirs: Span


def spans(op: TensorOp, fields: dict[str, int], homes: dict[int, Home]) -> tuple[tuple[Span, ...],
                                                                                 tuple[Span, ...]]:
    """The bytes tensor instruction ``op`` reads and writes with its resolved ``fields``, issued by a core
    whose memories are ``homes`` (space code -> its copy); an operand in another cluster's SMEM lies there."""
    reads, writes = [], []
    for f in op.footprint:
        if f.extent:
            start = fields[f.key]
            home = homes[f.space] if f.cluster is None else (f.space, fields[f.cluster])
            (writes if f.written else reads).append((home, start, start + f.extent))
    return tuple(reads), tuple(writes)


def conflict(pending: list[Pending], reads, writes) -> Conflict | None:
    """The first access of ``reads`` and ``writes`` that ``pending`` work forbids (module docstring)."""
    for p in pending:
        for mine, theirs, verb, does in ((reads, p.writes, "reads", "writes"), (writes, p.writes, "writes",
                                         "writes"), (writes, p.reads, "writes", "reads")):
            for span in mine:
                for other in theirs:
                    if span[0] == other[0] and span[1] < other[2] and other[1] < span[2]:
                        return Conflict(p, verb, span, does, other)
    return None


def describe(found: Conflict, core: int, names: dict[int, str], other: str) -> tuple[str, str]:
    """The message and rule of the hazard ``found`` at an instruction of ``core`` (``names``: space code ->
    name; ``other``: the outstanding instruction's text)."""
    (home, lo, hi), (_, lo2, hi2), p = found.mine, found.theirs, found.pending
    name = names[home[0]] + (f" of cluster {home[1]}" if names[home[0]] == "SMEM" else "")
    if p.core == core:
        return (f"{found.verb} {name}[{lo}, {hi}) while the asynchronous instruction at pc {p.pc} ({other}) "
                f"still {found.does} {name}[{lo2}, {hi2}): wait for it first", RULE)
    return (f"{found.verb} {name}[{lo}, {hi}) while the asynchronous instruction at pc {p.pc} ({other}) of "
            f"core {p.core}, outstanding at a barrier, {found.does} {name}[{lo2}, {hi2}) until cycle "
            f"{p.end}: that core must wait for it before the barrier", RELEASED_RULE)
