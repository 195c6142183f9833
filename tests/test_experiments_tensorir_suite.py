"""experiments/tensorir_suite.py (TensorIR's single-operator suite on VITA, DianNao and this CPU): the --quick
run's CSV, summary and figure, Ansor's shapes as the full run takes them, and bad options refused."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.backend.llvm import host_cpu
from compiler.ops import contractions
from tandem.flows.cpu import default_isa
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.targets import load_target

#: whether this CPU runs one of the x86 spec's instructions for u8 x s8 products (vpdpbusd, vpmaddwd)
TENSORIZES = default_isa(CpuOptions(), load_target("cpu")) == "x86-vnni"

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "tensorir_suite.py"
spec = importlib.util.spec_from_file_location("tensorir_suite", SCRIPT)
exp = importlib.util.module_from_spec(spec)
sys.modules["tensorir_suite"] = exp
spec.loader.exec_module(exp)


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tensorir_quick")
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--batches", "1,2", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "TensorIR's suite" in done.stdout
    return out


def test_every_kind_validates_tensorized_on_every_target(quick: Path) -> None:
    rows = list(csv.DictReader(open(quick / "tensorir_suite.csv")))
    assert len(rows) == 8 * 2 * 3
    assert {(r["kind"], r["batch"], r["target"]) for r in rows} == {
        (k, b, t) for k in exp.SUITE for b in ("1", "2") for t in ("vita", "diannao", "cpu")}
    for r in rows:
        assert r["error"] == "" and r["validated"] == "True", r
        assert r["tensorized"] == "True", r
        if r["target"] == "cpu" and not TENSORIZES:   # no instruction of the spec's, no peak to hold it to
            assert r["bound_pct"] == "", r
            continue
        # a simulated run never beats its roofline; the CPU's peak is itself measured (a few % of noise)
        assert 0 < float(r["bound_pct"]) <= (110 if r["target"] == "cpu" else 100)
        if r["gemm_m"]:   # the GEMMs of the mapping compute the operator's multiply-adds, no more
            assert int(r["macs"]) == int(r["gemms"]) * int(r["gemm_m"]) * int(r["gemm_n"]) * int(r["gemm_k"])
        else:   # the CPU's direct convolutions
            assert r["target"] == "cpu" and r["kernel"] in ("window", "depthwise")
    for r in rows:   # the CPU's peers on its inputs, where they are installed and have the operator
        if r["target"] != "cpu":
            continue
        # onnxruntime's u8 x s8 kernels on a CPU without VNNI saturate pair sums at int16 (vpmaddubsw)
        saturates = not (host_cpu()["avx512vnni"] or host_cpu()["avxvnni"])
        if r["peer_error"] == "":
            assert r["peer_exact"] == "True" or saturates
        else:
            assert r["peer_error"] in ("ONNX has no integer operator for it",
                                       "onnxruntime is not installed (No module named 'onnxruntime')")
        if r["tvm_error"] == "":
            assert r["tvm_exact"] == "True"
        else:
            assert "apache-tvm is not installed" in r["tvm_error"] or "TVM" in r["tvm_error"]
        ran = r["peer_error"] == "" or r["tvm_error"] == ""
        assert (r["peer_ratio"] != "") == ran and (not ran or float(r["peer_ratio"]) > 0)
    summary = json.loads((quick / "summary.json").read_text())
    assert summary["validated"] and set(summary["targets"]) == {"vita", "diannao", "cpu"}
    assert all(s["validated"] == s["tensorized"] == 16 for s in summary["targets"].values())
    assert (quick / "tensorir_suite.png").stat().st_size > 10_000


def test_the_full_run_takes_ansors_four_shapes_of_each_kind() -> None:
    for op, shapes in exp.SUITE.values():
        assert len(shapes) == 4 and op in contractions.KINDS
        for params in shapes:   # every shape is an operator of its kind (planned, not run)
            contractions.contraction(op, {**params, ("B" if op == "batch_matmul" else "N"): 16})
    batch16 = exp.cases(3, [16], quick=False)
    assert ("GMM", "batch_matmul", 16, {"M": 1024, "N": 1024, "K": 1024, "B": 16}) in batch16


def test_bad_options_are_refused_before_any_run(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--quick", "--targets", "tpu", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown target(s) ['tpu']" in done.stderr
    assert not (tmp_path / "tensorir_suite.csv").exists()
