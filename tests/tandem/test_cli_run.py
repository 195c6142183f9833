"""``tandem run OP --target diannao``: compile, simulate, validate; the JSON contract of the DianNao compiler
issue; the switches that drop seed 001's passes; exit statuses 0 (validated), 2 (bad input)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.flows.diannao import roofline_cycles, run_diannao
from tandem.flows.targets import load_target

RUNNER = CliRunner()
CONTRACT = {"op", "target", "params", "validated", "max_abs_err", "cycles", "instructions", "scalar_fallback",
            "utilization", "wall_s"}


def run_json(*args: str) -> dict:
    result = RUNNER.invoke(app, ["run", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "relu"])
def test_awkward_shape_on_sixteen_cores_validates_with_no_scalar_fallback(op: str) -> None:
    """(15, 5, 11) = 825 elements: 52 per core (not a multiple of the 64-element vector count), the last
    core's share shorter still."""
    report = run_json(op, "--shape", "15x5x11")
    assert CONTRACT <= set(report)
    assert report["op"] == op and report["target"] == "diannao"
    assert report["params"]["shape"] == [15, 5, 11] and report["params"]["cores"] == 16
    assert report["validated"] is True and report["max_abs_err"] == 0.0
    assert report["scalar_fallback"] == 0 and report["unmatched"] == []
    assert report["instructions"]["memcpyr"] >= 16 * (2 if op == "relu" else 3)
    assert report["cycles"] >= report["roofline_cycles"] > 0


@pytest.mark.parametrize("dtype", ["f16", "i8", "i16", "i32"])
def test_every_vector_dtype_is_bit_exact(dtype: str) -> None:
    report = run_json("add", "--shape", "7x33", "--dtype", dtype, "-p", "cores=4")
    assert report["validated"] and report["scalar_fallback"] == 0


def test_without_the_passes_guarded_and_misfit_statements_run_as_scalar_code() -> None:
    full = run_json("add", "--shape", "15x5x11", "-p", "cores=4")
    bare = run_json("add", "--shape", "15x5x11", "-p", "cores=4", "--no-partition", "--no-preprocess")
    assert bare["validated"] is True
    assert bare["params"]["skip"] == ["loop_partition", "preprocess"]
    assert bare["scalar_fallback"] > 0 and bare["unmatched"]
    assert bare["cycles"] > full["cycles"]
    no_pre = run_json("relu", "--shape", "256", "-p", "cores=4", "--no-preprocess")
    assert no_pre["validated"] and no_pre["scalar_fallback"] > 0
    assert any("operand dst is both" in r for r in no_pre["unmatched"])


def test_table_output_names_what_was_measured() -> None:
    result = RUNNER.invoke(app, ["run", "add", "--shape", "100", "-p", "cores=2"])
    assert result.exit_code == 0, result.output
    for word in ("validated", "cycles", "roofline", "scalar fallback", "bit-exact"):
        assert word in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["conv9", "--shape", "8"], "no schedule for operator 'conv9'"),
        (["add", "--shape", "8", "--dtype", "f64"], "unsupported dtype 'f64'"),
        (["add", "--shape", "8", "-p", "cores=0"], "expected an integer >= 1"),
        (["add", "--shape", "8", "-p", "cores=17"], "17 cores requested"),
        (["add", "--shape", "8", "-p", "lanes=4"], "unknown parameter"),
        (["add", "--shape", "8", "--target", "gpu"], "unknown target 'gpu'"),
        (["add", "--shape", "8", "--config", "no-such-card"], "no-such-card"),
    ],
)
def test_bad_input_exits_2_with_one_error_line(args: list[str], message: str) -> None:
    result = RUNNER.invoke(app, ["run", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_bias_is_switched_on_and_off_by_1_and_0_and_named_in_the_table() -> None:
    layer = ["conv2d", "-p", "H=8", "-p", "W=8", "-p", "IC=8", "-p", "OC=16"]
    assert run_json(*layer, "-p", "bias=0")["params"]["bias"] is False
    result = RUNNER.invoke(app, ["run", *layer, "-p", "bias=1", "--relu"])
    assert result.exit_code == 0, result.output
    assert "bias + relu on each output tile" in result.output
    result = RUNNER.invoke(app, ["run", *layer, "-p", "bias=-1"])
    assert result.exit_code == 2 and "-p bias: expected an integer >= 0, but got -1" in result.output


def test_roofline_is_gmem_traffic_at_the_card_bandwidth() -> None:
    target = load_target("diannao")
    cfg = target.config
    n = 256 * 56 * 56
    assert roofline_cycles(3, n, "float32", 16, target) == 3 * n * 4 // cfg.gmem_bytes_per_cycle
    assert roofline_cycles(2, n, "float32", 16, target) == 2 * n * 4 // cfg.gmem_bytes_per_cycle


def test_runs_are_deterministic() -> None:
    first = run_diannao("sub", (9, 70), "float32", cores=3)
    second = run_diannao("sub", (9, 70), "float32", cores=3)
    assert (first.cycles, first.instructions) == (second.cycles, second.instructions)
    assert np.isfinite(first.max_abs_err)


# ---- conv2d: the CLI contract's parameters H, W, IC, OC, K, S, P

def test_conv2d_from_params_validates_with_conv_instructions_and_no_fallback() -> None:
    report = run_json("conv2d", "-p", "H=14", "-p", "W=13", "-p", "IC=8", "-p", "OC=32", "-p", "K=3",
                      "-p", "S=1", "-p", "P=1")
    assert CONTRACT <= set(report)
    p = report["params"]
    assert (p["H"], p["W"], p["IC"], p["OC"], p["K"], p["S"], p["P"]) == (14, 13, 8, 32, 3, 1, 1)
    assert report["validated"] is True and report["scalar_fallback"] == 0 and report["unmatched"] == []
    assert report["instructions"]["conv"] >= 1 and report["instructions"]["vzero"] >= 1
    assert report["cycles"] >= report["roofline_cycles"] > 0


def test_conv2d_int8_is_bit_exact_through_qconv() -> None:
    report = run_json("conv2d", "--shape", "8x8x8", "-p", "OC=16", "-p", "K=1", "-p", "P=0", "--dtype", "i8")
    assert report["validated"] is True and report["max_abs_err"] == 0.0
    assert report["instructions"].get("qconv", 0) >= 1 and report["scalar_fallback"] == 0


@pytest.mark.parametrize("dtype", ["f32", "i8"])
def test_output_channels_that_are_not_whole_blocks_are_computed_padded_and_dropped(dtype: str) -> None:
    """Seed 001's COM: OC = 40 on a 16-channel conv instruction runs as 48 channels, the weights' extra 8
    zero, and the output keeps the 40 asked for; validated like any other conv."""
    report = run_json("conv2d", "--shape", "8x8x16", "-p", "OC=40", "--dtype", dtype)
    assert report["validated"] is True and report["scalar_fallback"] == 0
    assert report["params"]["OC"] == 40 and report["instructions"]["conv" if dtype == "f32" else "qconv"] >= 1
    from compiler.ops.nn import ConvShape
    from tandem.flows.diannao import run_diannao

    assert run_diannao("conv2d", (8, 8, 16), conv=ConvShape(8, 8, 16, 40, 3, 1, 1)).output.shape == (8, 8, 40)


@pytest.mark.parametrize("args, message", [
    (["--shape", "8x8x4", "-p", "H=8"], "either as --shape HxWxIC or as -p H= W= IC="),
    (["-p", "H=8", "-p", "W=8"], "conv2d needs all of H, W and IC"),
    (["--dtype", "f16"], "dtype float16 is not compiled"),
    (["-p", "Q=1"], "unknown parameter"),
])
def test_conv2d_bad_parameters_exit_2_naming_the_problem(args, message) -> None:
    result = RUNNER.invoke(app, ["run", "conv2d", *args, "--json"])
    assert result.exit_code == 2
    assert message in result.output
