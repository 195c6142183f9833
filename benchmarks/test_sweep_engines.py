"""The sweep engines' own cost: the 216-point VITA x ResNet-18 sweep (examples/sweeps/vita-resnet18.toml)
on the local process pool and on a local Ray, both with two workers; each round starts from an empty
store. Reported: wall time, the one-time start (workers spawned and warmed, Ray started) and the engine's
per-point overhead as a share of the points' own time (goal: <= 5%).

    pytest benchmarks/test_sweep_engines.py --benchmark-only
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.cli.console import tandem_version
from tandem.sweep.file import read_sweep
from tandem.sweep.results import ResultStore
from tandem.sweep.run import sweep

SWEEP = Path(__file__).resolve().parents[1] / "examples/sweeps/vita-resnet18.toml"


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_vita_resnet18_sweep(benchmark, engine: str, tmp_path: Path) -> None:
    if engine == "ray":
        pytest.importorskip("ray")
    definition, version = read_sweep(SWEEP), tandem_version()
    runs = []

    def once() -> None:
        with ResultStore(tmp_path / f"{engine}-{len(runs)}.sqlite", version) as store:
            runs.append(sweep(definition, store, version, engine=engine, jobs=2))

    benchmark.pedantic(once, rounds=1, iterations=1)
    summary = runs[-1]
    assert summary.ran == summary.points == 216 and summary.failed == 0
    benchmark.extra_info.update(points=summary.points, wall_s=round(summary.wall_s, 2),
                                startup_s=round(summary.startup_s, 2), point_s=round(summary.point_s, 2),
                                overhead_pct=round(summary.overhead_pct, 2))
