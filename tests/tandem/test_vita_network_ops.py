"""The network operators VITA's ALU computes (``tandem run residual_add|relu|clip|concat --target vita``):
the int32 [C, H, W] inputs loaded into the accumulators (LOAD_ACC), summed and clipped by ALU micro-ops,
stored as int8; bit-exact against compiler/ops/network.py's references saturated to int8, with the clip the
spec's own (ALU_CLIP where a spec has it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from tandem.run import RunError, run
from tandem.targets import load_target

VITA = load_target("vita")
CLIP_SPEC = Path(__file__).resolve().parents[1] / "extensions" / "vita_alu_clip.toml"


@pytest.mark.parametrize(("op", "params", "alu"), [
    ("residual_add", {"C": 20, "H": 7, "W": 9}, {"ALU_ADD", "ALU_MAX", "ALU_MIN"}),
    ("relu", {"C": 3, "H": 5, "W": 5}, {"ALU_MAX", "ALU_MIN"}),
    ("clip", {"C": 16, "H": 4, "W": 4, "LO": -20, "HI": 50}, {"ALU_MAX", "ALU_MIN"}),
    ("concat", {"C": 5, "H": 3, "W": 3, "C2": 7}, {"ALU_MAX", "ALU_MIN"}),
])
def test_each_operator_runs_on_the_alu_and_saturates_like_the_store(op, params, alu):
    report = run(op, VITA, dict(params))
    assert report.validated and report.max_abs_err == 0 and report.output.dtype.name == "int8"
    assert {name for name in report.instructions if name.startswith("ALU")} == alu
    assert report.instructions["LOAD_ACC"] >= 1 and report.instructions["STORE_OUT"] >= 1
    assert (report.output == report.params["clip"][1]).any()   # inputs of +-300 reach the clip's bound


def test_a_large_tensor_runs_in_chunks_the_accumulators_hold():
    report = run("residual_add", VITA, {"C": 64, "H": 56, "W": 56})
    kernels = report.params["kernels"]
    assert report.validated and kernels[0]["tiles"] > kernels[0]["chunk"]
    assert report.instructions["LOAD_ACC"] == 2 * kernels[0]["tiles"] // kernels[0]["chunk"]


def test_a_spec_that_clips_in_one_instruction_clips_in_one():
    target = load_target("vita", spec=isa.load_spec_file(CLIP_SPEC))
    report = run("relu", target, {"C": 16, "H": 6, "W": 6})
    assert report.validated and "ALU_CLIP" in report.instructions and "ALU_MAX" not in report.instructions


@pytest.mark.parametrize(("op", "params", "message"), [
    ("max_pool", {"C": 4, "H": 4, "W": 4}, "not compiled for VITA yet"),
    ("softmax", {"R": 2, "D": 8}, "float32 and needs exp"),
    ("clip", {"C": 2, "H": 2, "W": 2, "LO": 5, "HI": 1}, "LO = 5 must not exceed HI = 1"),
    ("clip", {"C": 2, "H": 2, "W": 2, "LO": 200, "HI": 300}, "outside int8's"),
    ("relu", {"C": 2, "H": 2}, "W must be given"),
])
def test_what_vita_cannot_compute_is_refused_with_the_reason(op, params, message):
    with pytest.raises(RunError, match=message):
        run(op, VITA, params)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(op=st.sampled_from(["residual_add", "relu", "clip", "concat"]), c=st.integers(1, 20),
       h=st.integers(1, 6), w=st.integers(1, 6), seed=st.integers(0, 99))
def test_random_shapes_validate(op, c, h, w, seed):
    report = run(op, VITA, {"C": c, "H": h, "W": w, "seed": seed})
    assert report.validated and report.max_abs_err == 0
