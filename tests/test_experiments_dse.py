"""experiments/vta_dse.py (VTA++'s design-space study as a sweep) and experiments/zigzag_compare.py (the same
machine in ZigZag): their --quick runs' tables, summaries and figures."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, out: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / script), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return done


def test_vta_dse_quick_finds_each_network_s_pareto_front(tmp_path: Path) -> None:
    run("vta_dse.py", tmp_path)
    rows = list(csv.DictReader(open(tmp_path / "vta_dse.csv")))
    assert len(rows) == 4 and all(r["status"] == "ok" and r["validated"] == "True" for r in rows)
    assert {r["network"] for r in rows} == {"resnet18", "mobilenet_v2"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    for network, s in summary["networks"].items():
        front = s["front"]
        assert front and s["smallest"] == front[0] and s["fastest"] == front[-1]
        mine = [r for r in rows if r["network"] == network]
        # nothing off the front is both smaller and faster than a point on it
        for p in front:
            assert not any(float(r["area_mm2"]) < p["area_mm2"] and int(r["cycles"]) < p["cycles"]
                           for r in mine)
    assert (tmp_path / "vta_dse.png").stat().st_size > 10_000
    assert (tmp_path / "report" / "index.html").exists()
    assert summary["sweep"]["ran"] == 4 and summary["failed"] == 0


def test_zigzag_compare_quick_puts_both_side_by_side(tmp_path: Path) -> None:
    pytest.importorskip("zigzag", reason="ZigZag is a peer of the experiments: pip install -e '.[peers]'")
    run("zigzag_compare.py", tmp_path)
    rows = list(csv.DictReader(open(tmp_path / "zigzag_compare.csv")))
    assert [r["layer"] for r in rows] == ["q1", "q2", "q3"]
    for r in rows:
        assert int(r["tandem_cycles"]) > 0 and int(r["zigzag_cycles"]) > 0
        assert float(r["cycles_ratio"]) == pytest.approx(int(r["tandem_cycles"]) / int(r["zigzag_cycles"]),
                                                         rel=1e-2)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["layers"] == 3 and summary["geomean_cycles_ratio"] > 0
