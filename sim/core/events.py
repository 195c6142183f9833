"""A discrete-event engine for generator processes, ordering events exactly as simpy does, at a fraction of
simpy's cost per event (no event objects, callbacks or process objects; no import of importlib.metadata).

    engine = Engine()
    engine.start(unit())        # a generator; it yields a delay (an int of cycles) or a Signal
    engine.run()                # until no event is left; engine.now is then the last event's time

A process yields ``n`` (an int >= 0) to resume ``n`` cycles later, or a ``Signal`` (``engine.signal()``) to
resume when another process fires it (``engine.fire(signal, value)``; the yield then returns ``value``).

Order: simpy's. Every scheduled resumption is a heap entry (time, priority, sequence number): a process
started (``start``) is urgent, everything else normal, and among equal times and priorities the one
scheduled first runs first. A delay is scheduled when it is yielded (simpy's Timeout: when it is created,
just before the yield); a signal's resumption when it is fired (simpy's ``Event.succeed``), and a process
that waits on a signal already handled resumes at once, as simpy resumes a process that yields a processed
event. So a machine written against simpy's Environment keeps its every cycle (VITA's units take the one
DRAM port first come, first served: which of two units asking at one cycle is first is this order).

Why the VITA machine leaves simpy for it: its units interact only at FIFOs and one port, so each yield is a
resumption to order, nothing more; simpy's Event, Process and callback machinery was a fifth of the
simulator's time per instruction, and its import 15 ms of a run's start (sim/vita/machine.py).
"""

from __future__ import annotations

from collections.abc import Generator
from heapq import heappop, heappush
from typing import Any

URGENT, NORMAL = 0, 1   # simpy's priorities: a process's start before anything else at the same time

Process = Generator[Any, Any, None]


class Signal:
    """Something a process waits on until another fires it (simpy's Event): ``waiter`` is the process parked
    on it, ``handled`` whether its firing has been processed, ``value`` what the waiter receives."""

    __slots__ = ("waiter", "handled", "value")

    def __init__(self) -> None:
        self.waiter: Process | None = None
        self.handled = False
        self.value: Any = None


class Engine:
    """The clock and the ordered resumptions of generator processes (the module docstring)."""

    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple] = []
        self._sequence = 0

    def start(self, process: Process) -> None:
        """Run ``process`` from now (urgent: before the normal events of this time)."""
        self._push(self.now, URGENT, process, None)

    def signal(self) -> Signal:
        return Signal()

    def fire(self, signal: Signal, value: Any = None) -> None:
        """Fire ``signal``: its waiter resumes with ``value`` after the events already scheduled for now."""
        signal.value = value
        self._push(self.now, NORMAL, signal, None)

    def run(self) -> None:
        """Process every scheduled resumption in order, until none is left."""
        heap = self._heap
        while heap:
            self.now, _, _, target, value = heappop(heap)
            if type(target) is Signal:
                target.handled = True
                if target.waiter is None:
                    continue
                target, value = target.waiter, target.value
            self._resume(target, value)

    def _resume(self, process: Process, value: Any) -> None:
        """Run ``process`` with ``value`` until it yields a delay, a pending signal, or ends."""
        while True:
            try:
                got = process.send(value)
            except StopIteration:
                return
            if type(got) is int:
                if got < 0:
                    raise ValueError(f"a process yielded a negative delay ({got})")
                heappush(self._heap, (self.now + got, NORMAL, self._sequence, process, None))   # _push
                self._sequence += 1
                return
            if not got.handled:
                got.waiter = process
                return
            value = got.value   # a signal already handled: simpy resumes the process at once

    def _push(self, time: int, priority: int, target: Any, value: Any) -> None:
        heappush(self._heap, (time, priority, self._sequence, target, value))
        self._sequence += 1
