"""Chrome/Perfetto trace of a DianNao launch: a track per core and one per core's DMA engine; a slice per
tensor instruction, per stretch of scalar code between them, per barrier and per wait for a memory port.

Open the JSON in ui.perfetto.dev or chrome://tracing. Times are microseconds at the config's clock.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sim.diannao.machine import DiannaoResult


def _track_order(name: str) -> tuple[int, int]:
    """core 3 -> (3, 0), core 3 DMA -> (3, 1): each core's DMA track right below the core's."""
    m = re.match(r"core (\d+)( DMA)?$", name)
    return (int(m.group(1)), 1 if m.group(2) else 0) if m else (1 << 30, 0)


def chrome_trace(result: DiannaoResult) -> dict:
    """The trace as a Chrome trace-event dict (``traceEvents`` with complete "X" events)."""
    tracks = [f"core {c.core}" for c in result.cores] + [f"core {c.core} DMA" for c in result.cores]
    tracks = sorted(set(tracks) | {e[0] for e in result.trace}, key=_track_order)
    tid = {name: k for k, name in enumerate(tracks)}
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": k, "args": {"name": name}}
              for name, k in tid.items()]
    events += [{"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": k, "args": {"sort_index": k}}
               for k in tid.values()]
    mhz = result.clock_mhz
    for track, what, begin, end, kind in result.trace:
        events.append({"name": what, "cat": kind, "ph": "X", "pid": 0, "tid": tid[track],
                       "ts": begin / mhz, "dur": (end - begin) / mhz,
                       "args": {"first_cycle": begin, "cycles": end - begin}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"cycles": result.cycles, "clock_mhz": mhz}}


def write_trace(result: DiannaoResult, path: str | Path) -> None:
    """Write the trace of ``result`` (launched with ``trace=True``) to ``path`` as JSON."""
    Path(path).write_text(json.dumps(chrome_trace(result)))
