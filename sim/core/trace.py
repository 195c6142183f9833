"""Chrome/Perfetto traces, for both simulators: one track per unit (a VITA module, a DianNao core or its DMA
engine), one complete slice per instruction, stall or wait. Open the JSON in ui.perfetto.dev or
chrome://tracing; times are microseconds at the machine's clock.

A simulator records slices as ``(track, what, first cycle, end cycle, kind)`` and names its tracks in the
order they should show; nothing here knows a target's unit names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from sim.core.output import write_atomically

Slice = tuple[str, str, int, int, str]


def chrome_trace(slices: Iterable[Slice], tracks: Sequence[str], clock_mhz: float, cycles: int) -> dict:
    """The trace-event dict (``traceEvents`` of complete "X" events) of ``slices`` on ``tracks``, in order;
    a slice on a track not named is shown after them."""
    slices = list(slices)
    names = list(dict.fromkeys([*tracks, *(s[0] for s in slices)]))
    tid = {name: k for k, name in enumerate(names)}
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": k, "args": {"name": name}}
              for name, k in tid.items()]
    events += [{"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": k, "args": {"sort_index": k}}
               for k in tid.values()]
    for track, what, begin, end, kind in slices:
        events.append({"name": what, "cat": kind, "ph": "X", "pid": 0, "tid": tid[track],
                       "ts": begin / clock_mhz, "dur": (end - begin) / clock_mhz,
                       "args": {"first_cycle": begin, "cycles": end - begin}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"cycles": cycles, "clock_mhz": clock_mhz}}


def write_json(trace: dict, path: str | Path) -> None:
    """Write a trace dict to ``path`` as JSON."""
    write_atomically(path, json.dumps(trace))
