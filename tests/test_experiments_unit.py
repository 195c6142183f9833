"""experiments/unit_cpu.py (UNIT on this CPU): the --quick run's CSV, summary and figure, and the layer table
it runs in full."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.backend.llvm import host_cpu

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "unit_cpu.py"
spec = importlib.util.spec_from_file_location("unit_cpu", SCRIPT)
exp = importlib.util.module_from_spec(spec)
sys.modules["unit_cpu"] = exp
spec.loader.exec_module(exp)


def test_the_full_run_is_resnet18_c2_to_c12_then_unit_table1() -> None:
    found = exp.layers()
    assert [name for name, _, _ in found] == [f"C{k}" for k in range(2, 13)] + [f"#{k}" for k in range(1, 17)]
    table1 = {name: layer for name, source, layer in found if source == "table1"}
    # Table I's output sizes: IHW includes the padding, so OHW = (IHW - R) / stride + 1
    assert {name: c.oh for name, c in table1.items()} == {
        "#1": 17, "#2": 7, "#3": 7, "#4": 71, "#5": 14, "#6": 14, "#7": 14, "#8": 14, "#9": 14, "#10": 14,
        "#11": 14, "#12": 14, "#13": 14, "#14": 27, "#15": 28, "#16": 14}
    c2 = {name: layer for name, _, layer in found}["C2"]
    assert (c2.h, c2.ic, c2.oc, c2.k, c2.s, c2.p) == (56, 64, 64, 3, 1, 1)


@pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
def test_quick_run_writes_a_validated_table_summary_and_figure(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    rows = list(csv.DictReader((tmp_path / "unit_cpu.csv").open()))
    assert [r["layer"] for r in rows] == ["q1", "q2"]
    assert all(r["validated"] == "True" and float(r["tandem_vnni_gops"]) > 0 for r in rows)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["validated"] and summary["peak_gops_1t"] > 0
    assert set(summary["targets"]) == {"1 thread >= 80% of the measured vpdpbusd peak",
                                       "1 thread >= onnxruntime QLinearConv", "2 threads >= 1.5x 1 thread"}
    assert (tmp_path / "unit_cpu.png").stat().st_size > 10_000
