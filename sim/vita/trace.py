"""Chrome/Perfetto trace of a VITA simulation: one track per unit, one slice per instruction and per stall.

Open the JSON in ui.perfetto.dev or chrome://tracing. Times are microseconds at the config's clock.
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.vita.machine import VitaResult

UNITS = ("fetch", "load", "compute", "store")


def chrome_trace(result: VitaResult, clock_mhz: float) -> dict:
    """The trace as a Chrome trace-event dict (``traceEvents`` with complete "X" events)."""
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": k, "args": {"name": unit}}
              for k, unit in enumerate(UNITS)]
    for unit, what, begin, end, kind in result.trace:
        events.append({"name": what, "cat": kind, "ph": "X", "pid": 0, "tid": UNITS.index(unit),
                       "ts": begin / clock_mhz, "dur": (end - begin) / clock_mhz,
                       "args": {"first_cycle": begin, "cycles": end - begin}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"cycles": result.cycles, "clock_mhz": clock_mhz}}


def write_trace(result: VitaResult, clock_mhz: float, path: str | Path) -> None:
    """Write the trace of ``result`` to ``path`` as JSON."""
    Path(path).write_text(json.dumps(chrome_trace(result, clock_mhz), indent=None))
