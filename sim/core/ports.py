"""Shared memory ports: the bandwidth model both simulators use.

A port (VITA's one DRAM port, the DianNao card's GMEM port and each cluster's SMEM port) serves requests
first come, first served. Requests arrive in simulated-time order, because a unit synchronizes with the
event loop before it asks, so a port needs only the cycle it is free again: a request at cycle ``now`` that
holds some ports for some cycles starts when all of them are free, and holds each from then on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class Ports:
    """The ports of one machine, each free again at a cycle (0 at the start)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.free_at = dict.fromkeys(names, 0)

    def take(self, name: str, cycles: int, now: int) -> int:
        """Take port ``name`` for ``cycles`` at the first cycle from ``now`` on when it is free; return it."""
        free = self.free_at[name]
        start = free if free > now else now
        self.free_at[name] = start + cycles
        return start

    def reserve(self, held: Sequence[tuple[str, int]], now: int) -> int:
        """Take each port of ``held`` (name, cycles) at the first cycle from ``now`` on when all are free;
        return that cycle."""
        start = max([now] + [self.free_at[name] for name, _ in held])
        for name, cycles in held:
            self.free_at[name] = start + cycles
        return start
