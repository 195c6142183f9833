"""A core's outstanding asynchronous work and the accesses that may not touch it before a ``wait``.

    reads, writes = spans(op, fields)            # the byte spans of a tensor instruction's operands
    found = conflict(pending, reads, writes)     # None, or the first overlap with outstanding work

Until a core waits, an asynchronous instruction it issued (sim/diannao/machine.py) is outstanding: the core
must not read or write what the instruction writes, nor write what it reads. The machine moves the data when
the instruction is issued, which equals moving them when it ends exactly because no such access happens.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.diannao.decode import TensorOp

#: the rule a ``HazardError`` names
RULE = ("until a wait, no access to what an outstanding asynchronous instruction writes and no write to what "
        "it reads")

Span = tuple[int, int, int]   # (space code, first byte, end byte)


class Pending(NamedTuple):
    """An asynchronous instruction a core issued and has not waited for: its pc, the bytes it reads and
    writes."""

    pc: int
    reads: tuple[Span, ...]
    writes: tuple[Span, ...]


class Conflict(NamedTuple):
    """An access (``verb`` ``mine``) overlapping what the outstanding instruction ``pending`` ``does``
    (``theirs``)."""

    pending: Pending
    verb: str
    mine: Span
    does: str
    theirs: Span


def spans(op: TensorOp, fields: dict[str, int]) -> tuple[tuple[Span, ...], tuple[Span, ...]]:
    """The bytes tensor instruction ``op`` reads and writes with its resolved ``fields``."""
    reads, writes = [], []
    for f in op.footprint:
        if f.extent:
            start = fields[f.key]
            (writes if f.written else reads).append((f.space, start, start + f.extent))
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
