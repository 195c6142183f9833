"""Chrome/Perfetto trace of a VITA simulation: one track per unit, one slice per instruction and per stall
(sim/core/trace.py writes it). Times are microseconds at the config's clock."""

from __future__ import annotations

from pathlib import Path

from sim.core import trace as core_trace
from sim.vita.machine import VitaResult

UNITS = ("fetch", "load", "compute", "store")


def chrome_trace(result: VitaResult, clock_mhz: float) -> dict:
    """The trace as a Chrome trace-event dict (``traceEvents`` with complete "X" events)."""
    return core_trace.chrome_trace(result.trace, UNITS, clock_mhz, result.cycles)


def write_trace(result: VitaResult, clock_mhz: float, path: str | Path) -> None:
    """Write the trace of ``result`` to ``path`` as JSON."""
    core_trace.write_json(chrome_trace(result, clock_mhz), path)
