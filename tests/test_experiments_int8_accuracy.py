"""experiments/int8_accuracy.py (the corpus CNNs' int8 error by scheme, onnxruntime's beside): the --quick
run's table and figure, and bad options refused."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "int8_accuracy.py"


def test_a_quick_run_measures_every_scheme_and_the_int8_weights_bound(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--quick", "--no-onnxruntime", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "int8_accuracy.csv")))
    assert [r["scheme"] for r in rows] == ["pow2-max", "pow2-mse", "affine", "affine-per-channel",
                                           "affine-per-channel-mse", "int8-weights"]
    errors = {r["scheme"]: float(r["relative_l2"]) for r in rows}
    assert all(0 < e < 0.1 for e in errors.values()), errors   # squeezenet1_0: 0.02-0.04
    assert errors["int8-weights"] <= errors["affine-per-channel"]   # the bound holds the weights' share only
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["squeezenet1_0/affine"]["top1_agree"] == 2
    assert (tmp_path / "int8_accuracy.png").stat().st_size > 0


def test_an_unknown_model_is_refused_with_the_names_it_takes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--models", "alexnet", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "alexnet" in done.stderr and "resnet18" in done.stderr
