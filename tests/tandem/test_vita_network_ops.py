"""The network operators VITA's ALU computes (``tandem run residual_add|relu|clip|concat|max_pool --target
vita``): the int32 [C, H, W] inputs loaded into the accumulators (LOAD_ACC), summed, maxed and clipped by ALU
micro-ops,
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
    ("max_pool", {"C": 20, "H": 7, "W": 7, "K": 3, "S": 2}, {"ALU_ADD", "ALU_MAX", "ALU_MIN"}),
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


def test_a_max_pool_starts_each_window_at_its_first_tap_and_maxes_the_others():
    """VITA's ALU has no move: each output tile is reset (GEMM_RESET), the window's first tap added, and the
    K*K - 1 others taken by ALU_MAX micro-ops whose source index walks the window over the loaded rows."""
    report = run("max_pool", VITA, {"C": 40, "H": 9, "W": 9, "K": 3, "S": 2})
    (kernel,) = report.params["kernels"]
    chunks = 4 // kernel["rows"]
    assert report.validated and kernel == {"blocks": 3, "rows": kernel["rows"]}
    assert report.instructions["GEMM_RESET"] == report.instructions["ALU_ADD"] == chunks
    assert report.instructions["ALU_MAX"] == chunks * (8 + 1)   # 8 taps, then the clip's max


def test_a_spec_that_clips_in_one_instruction_clips_in_one():
    target = load_target("vita", spec=isa.load_spec_file(CLIP_SPEC))
    report = run("relu", target, {"C": 16, "H": 6, "W": 6})
    assert report.validated and "ALU_CLIP" in report.instructions and "ALU_MAX" not in report.instructions


@pytest.mark.parametrize(("op", "params", "message"), [
    ("avg_pool", {"C": 4, "H": 4, "W": 4}, "float32 here, and VITA's ALU is integer"),
    ("max_pool", {"C": 4, "H": 2, "W": 4, "K": 3}, "a window of K = 3 is larger than the 2 x 4 input"),
    ("max_pool", {"C": 256, "H": 8, "W": 64, "K": 3}, "do not fit in the accumulators"),
    ("softmax", {"R": 2, "D": 8}, "float32 and needs exp"),
    ("clip", {"C": 2, "H": 2, "W": 2, "LO": 5, "HI": 1}, "LO = 5 must not exceed HI = 1"),
    ("clip", {"C": 2, "H": 2, "W": 2, "LO": 200, "HI": 300}, "outside int8's"),
    ("relu", {"C": 2, "H": 2}, "W must be given"),
])
def test_what_vita_cannot_compute_is_refused_with_the_reason(op, params, message):
    with pytest.raises(RunError, match=message):
        run(op, VITA, params)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(op=st.sampled_from(["residual_add", "relu", "clip", "concat", "max_pool"]), c=st.integers(1, 20),
       h=st.integers(3, 8), w=st.integers(3, 8), k=st.integers(1, 3), s=st.integers(1, 2),
       seed=st.integers(0, 99))
def test_random_shapes_validate(op, c, h, w, k, s, seed):
    pool = {"K": k, "S": s} if op == "max_pool" else {}
    report = run(op, VITA, {"C": c, "H": h, "W": w, **pool, "seed": seed})
    assert report.validated and report.max_abs_err == 0
