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


HUGE = """\
[sweep]
name = "huge"
target = "vita"
config = "vta-default"

[parameters]
clock_mhz = { from = 1, to = 100000 }

[[workloads]]
layer = "gemm"
params = { M = 16, N = 16, K = 16 }
"""


class _Enough(Exception):
    """Stops a sweep once it has stored the rows the benchmark waits for."""


def test_a_100000_point_sweep_stores_its_first_rows_at_once(benchmark, tmp_path: Path) -> None:
    """A 100,000-point sweep (one clock per point) is read, then its points are made as the engine takes
    them: the first rows are stored within seconds and the process's memory stays small (goals: <= 5 s to
    the first row, <= 500 MB). The sweep is stopped after 8 rows."""
    import resource
    import time

    path = tmp_path / "huge.toml"
    path.write_text(HUGE)
    version = tandem_version()
    first: list[float] = []

    def once() -> None:
        start = time.perf_counter()

        def on_row(row: dict, done: int, total: int) -> None:
            first.append(time.perf_counter() - start)
            if done >= 8:
                raise _Enough

        with ResultStore(tmp_path / f"huge-{len(first)}.sqlite", version) as store:
            try:
                sweep(read_sweep(path), store, version, engine="local", jobs=1, on_row=on_row)
            except _Enough:
                pass
            assert len(store.rows()) == 8

    benchmark.pedantic(once, rounds=1, iterations=1)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    benchmark.extra_info.update(points=100_000, first_row_s=round(first[0], 2), peak_rss_mb=round(peak_mb))
