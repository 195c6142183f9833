"""experiments/vta_plus.py (the VTA++ study on VITA): the --quick run's CSV, summary and figure, and the steps
the full run takes, each a spec file or a parameter."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "vta_plus.py"
spec = importlib.util.spec_from_file_location("vta_plus", SCRIPT)
exp = importlib.util.module_from_spec(spec)
sys.modules["vta_plus"] = exp
spec.loader.exec_module(exp)


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vta_plus_quick")
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "VTA++" in done.stdout
    return out


def test_the_quick_run_validates_every_step_and_each_step_is_faster(quick: Path) -> None:
    summary = json.loads((quick / "summary.json").read_text())
    steps = summary["steps"]
    assert [s["step"] for s in steps] == ["baseline", "+pipelined", "+clip"]
    assert summary["validated"] and all(s["validated"] for s in steps)
    assert steps[0]["total_cycles"] > steps[1]["total_cycles"] > steps[2]["total_cycles"]
    assert summary["pipelined_speedup"] == pytest.approx(steps[0]["total_cycles"] / steps[1]["total_cycles"],
                                                         abs=1e-3)
    rows = list(csv.DictReader(open(quick / "vta_plus.csv")))
    assert len(rows) == 9 and {r["limit"] for r in rows} <= {"gemm", "dram", "compute_unit"}
    for r in rows:   # no layer beats the machine's bounds
        bounds = (int(r["gemm_bound"]), int(r["dram_bound"]), int(r["compute_unit_bound"]))
        assert int(r["cycles"]) >= max(bounds)
    assert (quick / "vta_plus.png").stat().st_size > 10_000
    written = sorted(p.name for p in (quick / "specs").iterdir())
    assert written == ["baseline.toml", "clip.toml", "pipelined.toml"]


def test_every_step_is_a_spec_file_or_a_parameter(tmp_path: Path) -> None:
    names = [s.name for s in exp.STEPS]
    assert names == ["baseline", "+pipelined", "+clip", "+fused ends", "+dram16", "+dram32", "+dram64",
                     "+2x buffers"]
    fused = exp.step_target(exp.STEPS[3], "tvm-paper", tmp_path)
    assert {"GEMM_FIRST", "GEMM_LAST_SHRCLIP"} <= fused.spec.instructions.keys()
    assert "ALU_CLIP" not in fused.spec.instructions
    last = exp.step_target(exp.STEPS[-1], "tvm-paper", tmp_path)
    assert last.spec.insn_bits == 256 and last.spec.params["DRAM_BYTES_PER_CYCLE"] == 64
    assert last.spec.params["LOG_ACC_BUFF_SIZE"] == 18 and "ALU_CLIP" in last.spec.instructions
    assert last.config.isa_params["LOG_ACC_BUFF_SIZE"] == 18
