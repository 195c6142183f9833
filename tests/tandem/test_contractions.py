"""TensorIR's operator kinds (``tandem run conv1d|conv3d|dilated_conv|group_conv|conv_transpose|
batch_matmul``) on VITA and this CPU: mapped onto a GEMM by characteristic vectors (VITA: the spec's GEMM
instruction; the CPU: the canonical GEMM its UNIT schedule computes), run as GEMMs on reindexed operands,
validated bit for bit against compiler/ops/reference."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tandem.cli import app
from tandem.run import RunError, run
from tandem.targets import load_target

RUNNER = CliRunner()
TARGET = load_target("vita")
CPU = load_target("cpu")
KINDS = {
    "conv1d": {"W": 20, "IC": 5, "OC": 24, "S": 2},
    "conv3d": {"D": 3, "H": 4, "W": 5, "IC": 3, "OC": 16},
    "dilated_conv": {"H": 7, "W": 6, "IC": 16, "OC": 8},
    "group_conv": {"H": 5, "W": 5, "IC": 12, "OC": 24, "G": 3},
    "batch_matmul": {"B": 3, "M": 5, "N": 17, "K": 40},
    "conv_transpose": {"H": 4, "W": 5, "IC": 6, "OC": 20, "K": 4, "S": 3, "P": 2},
    "depthwise": {"H": 6, "W": 5, "C": 5, "S": 2},
}


@pytest.mark.parametrize("target", [TARGET, CPU], ids=["vita", "cpu"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_runs_on_the_gemm_and_validates_bit_exactly(kind, target):
    report = run(kind, target, dict(KINDS[kind]))
    assert report.validated and report.max_abs_err == 0 and report.scalar_fallback == 0
    if target is TARGET:
        assert report.instructions["GEMM"] >= 1
    else:   # every multiply-add on the dot-product instruction the UNIT schedule selects
        assert report.unmatched == [] and report.params["instruction"] in report.instructions
    gemm = report.params["gemm"]
    assert gemm["count"] == {"group_conv": 3, "batch_matmul": 3, "depthwise": 5}.get(kind, 1)   # outer loops
    rows = "b" if target is TARGET else "m"   # the row index of VITA's GEMM, of the canonical GEMM
    pixels = f"GEMM: {rows} <- fuse(n, " if kind != "batch_matmul" else f"GEMM: {rows} <- fuse(i)"
    assert report.params["mapping"].startswith(pixels)


def test_the_cli_reports_the_mapping_and_the_gemms_it_ran():
    result = RUNNER.invoke(app, ["run", "group_conv", "--target", "vita", "-p", "H=6", "-p", "W=6", "-p",
                                 "IC=8", "-p", "OC=16", "-p", "G=2", "--relu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["validated"] is True and report["params"]["relu"] is True
    assert report["params"]["gemm"] == {"M": 36, "N": 8, "K": 36, "count": 2}
    assert report["params"]["gemms"] == 2


@pytest.mark.parametrize(("kind", "params", "message"), [
    ("group_conv", {"H": 4, "W": 4, "IC": 10, "OC": 16, "G": 4},
     "G = 4 groups must divide IC = 10 and OC = 16"),
    ("conv1d", {"W": 3, "IC": 4, "OC": 4, "K": 7, "P": 0},
     "a kernel of K = 7 with DIL = 1 reaches 7 elements, more than the input's 3 with P = 0"),
    ("conv3d", {"D": 2, "H": 2, "IC": 4, "OC": 4}, "W must be given; conv3d needs all of D, H, W, IC, OC"),
    ("batch_matmul", {"B": 2, "M": 4, "N": 4, "K": 4, "G": 2}, "unknown parameter 'G'"),
    ("conv_transpose", {"H": 4, "W": 4, "IC": 4, "OC": 4, "P": 3}, "P = 3 crops more than the K - 1 = 2"),
    ("batch_matmul", {"B": 10**4, "M": 512, "N": 512, "K": 512}, "more than the machine config's uop_budget"),
])
def test_impossible_shapes_are_refused_naming_the_parameter(kind, params, message):
    with pytest.raises(RunError, match=message):
        run(kind, TARGET, params)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(kind=st.sampled_from(["conv1d", "conv3d", "dilated_conv", "group_conv", "conv_transpose"]),
       size=st.integers(3, 7),
       ic=st.integers(1, 4), oc=st.integers(1, 3), k=st.sampled_from([1, 3]), s=st.integers(1, 2),
       seed=st.integers(0, 99))
def test_random_shapes_of_each_kind_validate(kind, size, ic, oc, k, s, seed):
    params = {"W": size, "IC": ic * 2, "OC": oc * 2, "K": k, "S": s, "P": k // 2, "seed": seed}
    if kind != "conv1d":
        params["H"] = size
    if kind == "conv3d":
        params["D"] = 3
    if kind == "group_conv":
        params["G"] = 2
    if kind == "dilated_conv":
        params["P"] = k - 1
    if kind == "conv_transpose":
        params["P"] = k - 1   # its P crops the output: at most K - 1
    assert run(kind, TARGET, params).validated
    if seed % 4 == 0:   # the CPU times each run: a quarter of the shapes
        assert run(kind, CPU, {**params, "min_time": 0.01}).validated
