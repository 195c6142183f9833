"""The network operators VITA's ALU computes (``tandem run residual_add|relu|clip|concat|max_pool|avg_pool|
global_avg_pool --target vita``): the int32 [C, H, W] inputs loaded into the accumulators (LOAD_ACC), summed,
maxed, averaged (int8 inputs, the mean rounded half up by a multiply and shifts) and clipped by ALU micro-ops,
stored as int8; bit-exact against compiler/ops/network.py's references saturated to int8 (the averages: the
window sums' rounded means), with the clip the spec's own (ALU_CLIP where a spec has it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from compiler.errors import ScheduleError
from compiler.ops import vita
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import load_target

VITA = load_target("vita")
CLIP_SPEC = Path(__file__).resolve().parents[1] / "extensions" / "vita_alu_clip.toml"


@pytest.mark.parametrize(("op", "params", "alu"), [
    ("residual_add", {"C": 20, "H": 7, "W": 9}, {"ALU_ADD", "ALU_MAX", "ALU_MIN"}),
    ("relu", {"C": 3, "H": 5, "W": 5}, {"ALU_MAX", "ALU_MIN"}),
    ("clip", {"C": 16, "H": 4, "W": 4, "LO": -20, "HI": 50}, {"ALU_MAX", "ALU_MIN"}),
    ("concat", {"C": 5, "H": 3, "W": 3, "C2": 7}, {"ALU_MAX", "ALU_MIN"}),
    ("max_pool", {"C": 20, "H": 7, "W": 7, "K": 3, "S": 2}, {"ALU_ADD", "ALU_MAX", "ALU_MIN"}),
    ("avg_pool", {"C": 20, "H": 7, "W": 7, "K": 3, "S": 2},
     {"ALU_ADD", "ALU_MUL", "ALU_SHR", "ALU_MAX", "ALU_MIN"}),
    ("avg_pool", {"C": 16, "H": 8, "W": 8}, {"ALU_ADD", "ALU_SHR", "ALU_MAX", "ALU_MIN"}),   # / 4: a shift
    ("global_avg_pool", {"C": 40, "H": 7, "W": 7}, {"ALU_ADD", "ALU_MUL", "ALU_SHR", "ALU_MAX", "ALU_MIN"}),
])
def test_each_operator_runs_on_the_alu_and_saturates_like_the_store(op, params, alu):
    report = run(op, VITA, dict(params))
    assert report.validated and report.max_abs_err == 0 and report.output.dtype.name == "int8"
    assert {name for name in report.instructions if name.startswith("ALU")} == alu
    assert report.instructions["LOAD_ACC"] >= 1 and report.instructions["STORE_OUT"] >= 1
    if op not in ("avg_pool", "global_avg_pool"):   # int8 means stay inside it
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
    assert report.validated and kernel == {"blocks": 3, "rows": kernel["rows"], "window": [3, 3], "stride": 2}
    assert report.instructions["GEMM_RESET"] == report.instructions["ALU_ADD"] == chunks
    assert report.instructions["ALU_MAX"] == chunks * (8 + 1)   # 8 taps, then the clip's max


def test_a_spec_that_clips_in_one_instruction_clips_in_one():
    target = load_target("vita", spec=isa.load_spec_file(CLIP_SPEC))
    report = run("relu", target, {"C": 16, "H": 6, "W": 6})
    assert report.validated and "ALU_CLIP" in report.instructions and "ALU_MAX" not in report.instructions


@pytest.mark.parametrize(("op", "params", "message"), [
    ("global_avg_pool", {"C": 64, "H": 56, "W": 56}, "do not fit in the accumulators"),
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


def test_an_average_refuses_inputs_outside_int8():
    x = np.full((2, 4, 4), 300, np.int32)
    with pytest.raises(RunError, match="values outside int8's"):
        run("avg_pool", VITA, {"C": 2, "H": 4, "W": 4}, inputs=[x])


@pytest.mark.parametrize("count", [*range(1, 50), 64, 81, 196, 3136])
def test_the_integer_mean_is_the_rounded_mean_of_every_int8_window_sum(count):
    steps = vita.mean_steps(count, -128, 127, 16)
    sums = np.arange(-128 * count, 127 * count + 1, dtype=np.int64)
    v = sums + sum(steps.adds)
    v = ((v >> steps.pre_shift) * steps.mul >> steps.shift) + steps.low
    assert np.array_equal(v, (sums + count // 2) // count)
    assert all(0 < add < 2**15 for add in steps.adds) and steps.mul < 2**15
    assert ((sums + sum(steps.adds)) >> steps.pre_shift).max() * steps.mul < 2**31   # int32 throughout


def test_no_integer_mean_when_the_multiplier_cannot_fit_the_immediate():
    with pytest.raises(ScheduleError, match="no multiplier of at most 7"):
        vita.mean_steps(49, -128, 127, 4)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(op=st.sampled_from(["residual_add", "relu", "clip", "concat", "max_pool", "avg_pool",
                           "global_avg_pool"]),
       c=st.integers(1, 20), h=st.integers(3, 8), w=st.integers(3, 8), k=st.integers(1, 3),
       s=st.integers(1, 2), seed=st.integers(0, 99))
def test_random_shapes_validate(op, c, h, w, k, s, seed):
    pool = {"K": k, "S": s} if op in ("max_pool", "avg_pool") else {}
    report = run(op, VITA, {"C": c, "H": h, "W": w, **pool, "seed": seed})
    assert report.validated and report.max_abs_err == 0
