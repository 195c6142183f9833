"""experiments/vita_latency_hiding.py (TVM Fig. 19): the --quick run's CSV, summary and figure, and the
layer table it runs in full."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "vita_latency_hiding.py"
spec = importlib.util.spec_from_file_location("vita_latency_hiding", SCRIPT)
exp = importlib.util.module_from_spec(spec)
sys.modules["vita_latency_hiding"] = exp
spec.loader.exec_module(exp)


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vita_quick")
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "[3/3]" in done.stdout and "paper" in done.stdout
    return out


def test_the_full_run_is_resnet18_c2_to_c12():
    got = [(name, c.h, c.ic, c.oc, c.k, c.s) for name, c in exp.layers().items()]
    assert got == [
        ("C2", 56, 64, 64, 3, 1), ("C3", 56, 64, 64, 1, 1), ("C4", 56, 64, 128, 3, 2),
        ("C5", 56, 64, 128, 1, 2),
        ("C6", 28, 128, 128, 3, 1), ("C7", 28, 128, 256, 3, 2), ("C8", 28, 128, 256, 1, 2),
        ("C9", 14, 256, 256, 3, 1), ("C10", 14, 256, 512, 3, 2), ("C11", 14, 256, 512, 1, 2),
        ("C12", 7, 512, 512, 3, 1)]


def test_quick_rows_validate_and_their_ratios_come_from_the_cycles(quick: Path):
    with (quick / "vita_latency_hiding.csv").open(encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == exp.COLUMNS
        rows = list(reader)
    assert [r["layer"] for r in rows] == ["q1", "q2", "q3"]
    for r in rows:
        assert r["validated_serial"] == r["validated_threaded"] == "True"
        serial, threaded = int(r["cycles_serial"]), int(r["cycles_threaded"])
        assert float(r["reduction_pct"]) == pytest.approx(100 * (1 - threaded / serial), abs=0.01)
        assert float(r["macs_per_cycle_threaded"]) == pytest.approx(int(r["macs"]) / threaded, abs=0.01)
        assert threaded >= int(r["roofline_cycles"]) and threaded >= int(r["compute_unit_cycles"])
        assert "vt2" in r["tiling_threaded"] and "vt" not in r["tiling_serial"]
    assert int(rows[2]["cycles_threaded"]) < int(rows[2]["cycles_serial"])   # a 3x3 layer gains


def test_quick_summary_and_roofline_figure(quick: Path):
    summary = json.loads((quick / "summary.json").read_text())
    assert summary["layers"] == 3 and summary["validated"] is True
    assert summary["reduction_pct_min"] <= summary["reduction_pct_max"]
    data = (quick / "roofline.png").read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 1000


def test_summary_names_the_layers_that_miss_the_targets():
    rows = [
        {"layer": "A", "bound": "compute", "gemm_util_threaded": 0.7, "gemm_util_serial": 0.5,
         "cycles_serial": 200, "cycles_threaded": 100, "roofline_cycles": 70, "reduction_pct": 50.0,
         "validated_serial": True, "validated_threaded": True},
        {"layer": "B", "bound": "memory", "gemm_util_threaded": 0.3, "gemm_util_serial": 0.3,
         "cycles_serial": 100, "cycles_threaded": 100, "roofline_cycles": 95, "reduction_pct": 0.0,
         "validated_serial": True, "validated_threaded": True},
    ]
    summary = exp.summarize(rows)
    assert summary["targets_missed"] == ["A: GEMM utilization 70% < 80%"]
    assert summary["geomean_speedup"] == pytest.approx(2 ** 0.5)
