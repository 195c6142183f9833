"""Chrome/Perfetto trace of a DianNao launch: a track per core and one per core's DMA engine; a slice per
tensor instruction, per stretch of scalar code between them, per barrier and per wait for a memory port
(sim/core/trace.py writes it). Times are microseconds at the config's clock."""

from __future__ import annotations

import re
from pathlib import Path

from sim.core import trace as core_trace
from sim.diannao.machine import DiannaoResult


def _track_order(name: str) -> tuple[int, int]:
    """core 3 -> (3, 0), core 3 DMA -> (3, 1), core 3 DMA1 -> (3, 2): each core's DMA engines' tracks right
    below the core's."""
    m = re.match(r"core (\d+)( DMA(\d*))?$", name)
    return (int(m.group(1)), 1 + int(m.group(3) or 0) if m.group(2) else 0) if m else (1 << 30, 0)


def chrome_trace(result: DiannaoResult) -> dict:
    """The trace as a Chrome trace-event dict (``traceEvents`` with complete "X" events)."""
    tracks = [f"core {c.core}" for c in result.cores] + [f"core {c.core} DMA" for c in result.cores]
    tracks = sorted(set(tracks) | {e[0] for e in result.trace}, key=_track_order)
    return core_trace.chrome_trace(result.trace, tracks, result.clock_mhz, result.cycles)


def write_trace(result: DiannaoResult, path: str | Path) -> None:
    """Write the trace of ``result`` (launched with ``trace=True``) to ``path`` as JSON."""
    core_trace.write_json(chrome_trace(result), path)
