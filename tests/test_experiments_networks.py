"""experiments/networks.py (the five networks in int8 on VITA, DianNao and this CPU): the --quick run's
tables, summary and figure, and bad options refused."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from tandem.flows.cpu import default_isa
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.targets import load_target

#: whether this CPU runs one of the x86 spec's instructions for u8 x s8 products (vpdpbusd, vpmaddwd)
TENSORIZES = default_isa(CpuOptions(), load_target("cpu")) == "x86-vnni"
SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "networks.py"


def test_a_quick_run_validates_every_network_on_every_target_and_writes_its_tables(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--models", "resnet18,mobilenet_v2",
                           "--targets", "vita,cpu", "--jobs", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "networks.csv")))
    assert {(r["model"], r["target"]) for r in rows} == {(m, t) for m in ("resnet18", "mobilenet_v2")
                                                         for t in ("vita", "cpu")}
    for r in rows:
        assert r["validated"] == "True", r
        on_tensor = r["target"] != "cpu" or TENSORIZES   # a CPU without vpdpbusd or vpmaddwd: none
        assert float(r["tensor_macs_share"]) == float(on_tensor)   # VITA's depthwise convs: block-diagonal
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["resnet18/vita"]["breakdown"]["Conv"] > summary["resnet18/vita"]["breakdown"]["MaxPool"]
    layers = list(csv.DictReader(open(tmp_path / "layers.csv")))
    assert all(r["validated"] == "True" for r in layers) and (tmp_path / "networks.png").stat().st_size > 0


def test_an_unknown_model_is_refused_with_the_names_it_takes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--models", "alexnet", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "alexnet" in done.stderr and "resnet18" in done.stderr
