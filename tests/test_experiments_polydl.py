"""experiments/polydl.py (PolyDL on this CPU): the layer lists it runs in full, and a --quick run's table,
summary and figure."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.backend.llvm import host_cpu
from compiler.ops.nn import GemmShape
from tandem.flows.cpu import default_isa, float_multiply_add
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.targets import load_target

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "polydl.py"
spec = importlib.util.spec_from_file_location("polydl_experiment", SCRIPT)
exp = importlib.util.module_from_spec(spec)
sys.modules["polydl_experiment"] = exp
spec.loader.exec_module(exp)

CPU = load_target("cpu")
#: whether this CPU runs an instruction of the spec's for int8 layers (vpdpbusd, vpmaddwd) and for fp32 ones
MEASURABLE = default_isa(CpuOptions(), CPU) == "x86-vnni" and \
    (host_cpu()["avx512f"] or float_multiply_add(CPU.spec) is not None)


def test_the_full_lists_are_the_papers():
    resnet = exp.layers("resnet50", "uint8", quick=False)
    fastrcnn = exp.layers("fastrcnn", "float32", quick=False)
    gemms = exp.layers("gemm", "uint8", quick=False)
    assert (len(resnet), len(fastrcnn), len(gemms)) == (19, 25, 8)
    # ResNet-50 layer 5: 56 x 56, 256 -> 512, 1 x 1 at stride 2 (28 x 28 out); Fast R-CNN 12: pre-padded
    # 77 x 96, 3 x 3 at stride 2 (38 x 47 out); GNMT's first GEMM
    c5 = dict(resnet)["5"]
    assert (c5.h, c5.ic, c5.oc, c5.k, c5.s, c5.oh) == (56, 256, 512, 1, 2, 28)
    c12 = dict(fastrcnn)["12"]
    assert (c12.oh, c12.ow) == (47, 38)
    assert dict(gemms)["GNMT-1"] == GemmShape(128, 2048, 4096)


@pytest.mark.skipif(not MEASURABLE, reason="this CPU runs none of the spec's int8 instructions or fp32 FMAs")
def test_quick_run_compares_polydl_with_the_exhaustive_search(tmp_path: Path):
    args = ["--quick", "--lists", "resnet50,gemm", "--threads", "1", "--out", str(tmp_path)]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    rows = list(csv.DictReader((tmp_path / "polydl.csv").open()))
    assert [(r["list"], r["dtype"], r["threads"]) for r in rows] == [
        ("resnet50", "int8", "1"), ("resnet50", "fp32", "1"), ("gemm", "int8", "1"), ("gemm", "fp32", "1")]
    for r in rows:
        assert r["validated"] == "True" and int(r["variants"]) >= 2
        # the chosen variant is one of those searched: never faster than the best of them
        assert 0 < float(r["chosen_over_best"]) <= 1 and 0 < float(r["default_over_best"]) <= 1
        assert 0 < float(r["analysis_s"]) < float(r["polydl_s"]) and float(r["exhaustive_s"]) > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["validated"] and summary["peaks"]["fma_1t"] > 0
    assert set(summary["parts"]) == {"resnet50/int8/1t", "resnet50/fp32/1t", "gemm/int8/1t", "gemm/fp32/1t"}
    assert "resnet50/fp32/1t: >= 80% of the measured FMA peak (geomean)" in summary["targets"]
    assert (tmp_path / "polydl.png").stat().st_size > 10_000


def test_quick_run_on_the_accelerators_compares_polydl_with_every_simulated_variant(tmp_path: Path):
    args = ["--quick", "--lists", "vita,diannao", "--threads", "1", "--out", str(tmp_path)]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    rows = list(csv.DictReader((tmp_path / "polydl.csv").open()))
    assert [(r["list"], r["layer"]) for r in rows] == [("vita", "q1"), ("diannao", "q1")]
    for r in rows:
        assert r["validated"] == "True" and int(r["variants"]) >= 2
        assert 0 < float(r["chosen_over_best"]) <= 1 and 0 < float(r["default_over_best"]) <= 1
        assert 0 < float(r["polydl_s"]) and float(r["exhaustive_s"]) > 0
        # the flow's own choice (its model's, the default) has its search time beside PolyDL's
        assert 0 < float(r["default_s"]) and float(r["default_ratio"]) == \
            pytest.approx(float(r["default_s"]) / float(r["exhaustive_s"]))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["parts"]) == {"vita/int8", "diannao/fp32"}
    assert "vita/int8: the flow's choice in <= 1/20 of the exhaustive search's time" in summary["targets"]
    assert "diannao/fp32: PolyDL's ranking: chosen >= 95% of the exhaustive best (geomean)" in \
        summary["targets"]


def test_bad_names_are_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--lists", "vgg"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "unknown list vgg" in done.stderr + done.stdout
