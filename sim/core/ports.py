"""Shared memory ports: the bandwidth model both simulators use.

A port (VITA's one DRAM port, the DianNao card's GMEM port and each cluster's SMEM port) serves transfers
one at a time. Requests arrive in simulated-time order, because a unit synchronizes with the event loop
before it asks. A request at cycle ``now`` that holds some ports for some cycles each starts at the first
cycle from ``now`` on when all of them are free for its whole time, and holds each from then on.

A request may ask for a start in the future (an asynchronous copy the core's DMA unit starts when its queue
reaches it); a port keeps the transfers it has promised as busy intervals, so a later request that fits in a
gap before a promised transfer is served in it, as a port that is idle now serves whoever asks now. Without
promises in the future, this is first come, first served. ``horizon`` (the event loop's cycle: no request
asks before it) lets a port forget the intervals that ended.

With ``split``, a request that holds one port may take its cycles in pieces, in the gaps between the
transfers promised on it (a DMA engine's bursts interleave with another engine's at the port): it ends
when it has had its cycles, and its start is reported as that end less its cycles. A transfer between two
ports holds both at once, so it is never split (a GMEM->SMEM copy holds the SMEM port for half of what it
holds GMEM's: a copy out of SMEM fits in the other half).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Sequence


class Ports:
    """The ports of one machine, each with the intervals it is busy (from cycle 0 on, none)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.busy: dict[str, list[tuple[int, int]]] = {name: [] for name in names}

    @property
    def free_at(self) -> dict[str, int]:
        """The cycle each port is free for good (the end of its last busy interval)."""
        return {name: intervals[-1][1] if intervals else 0 for name, intervals in self.busy.items()}

    def take(self, name: str, cycles: int, now: int) -> int:
        """Take port ``name`` for ``cycles`` at the first cycle from ``now`` on when it is free; return it."""
        return self.reserve(((name, cycles),), now)

    def reserve(self, held: Sequence[tuple[str, int]], now: int, horizon: int | None = None,
                split: bool = False) -> int:
        """Take each port of ``held`` (name, cycles) at the first cycle from ``now`` on when all are free for
        their cycles; return that cycle. Intervals that ended by ``horizon`` (default ``now``) are dropped.
        With ``split``, one port's cycles may be taken in pieces (module docstring)."""
        horizon = now if horizon is None else horizon
        for name, _ in held:
            intervals = self.busy[name]
            while intervals and intervals[0][1] <= horizon:
                del intervals[0]
        if split and len(held) == 1 and held[0][1] > 0:
            return self._pieces(*held[0], now)
        start, moved = now, True
        while moved:
            moved = False
            for name, cycles in held:
                for lo, hi in self.busy[name]:
                    if hi <= start:
                        continue
                    if lo >= start + cycles:
                        break
                    start, moved = hi, True
        for name, cycles in held:
            if cycles > 0:
                insort(self.busy[name], (start, start + cycles))
        return start

    def _pieces(self, name: str, cycles: int, now: int) -> int:
        """Take ``cycles`` of port ``name`` in the gaps from ``now`` on; return the end less ``cycles``."""
        intervals, left, t, pieces = self.busy[name], cycles, now, []
        for lo, hi in intervals:
            if hi <= t:
                continue
            if lo > t:
                piece = min(left, lo - t)
                pieces.append((t, t + piece))
                left -= piece
                if not left:
                    break
            t = hi
        if left:
            pieces.append((t, t + left))
        for piece in pieces:
            insort(intervals, piece)
        return pieces[-1][1] - cycles
