"""compiler/ops/network.py's operators (residual add, ReLU, clip, concat, max/avg/global-average pooling,
softmax, layer norm, GELU) on this CPU: written as operators of our own, compiled by LLVM, validated against
compiler/ops/reference; and the element-wise ones on the DianNao card."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from compiler.ops import network
from tandem.cli import app
from tandem.run import RunError, run
from tandem.targets import load_target

RUNNER = CliRunner()
CPU = load_target("cpu")
DIANNAO = load_target("diannao")
ROWS = ("softmax", "layer_norm", "gelu")   # the transformer operators: [R, D] rows
PARAMS = {"residual_add": {}, "relu": {}, "clip": {"LO": -7, "HI": 20}, "concat": {"C2": 3},
          "max_pool": {"K": 3, "S": 2},
          "avg_pool": {"K": 3, "S": 3}, "global_avg_pool": {}}


@pytest.mark.parametrize("op", [op for op in network.OPERATORS if op not in ROWS])
def test_each_network_operator_runs_on_the_cpu_and_validates(op):
    report = run(op, CPU, {"C": 8, "H": 9, "W": 9, **PARAMS[op], "min_time": 0.01})
    assert report.validated, report.detail
    assert report.params["operator"] == {"C": 8, "H": 9, "W": 9, **PARAMS[op]}


@pytest.mark.parametrize("op", ROWS)
@pytest.mark.parametrize("shape", [(4, 100), (3, 768)])
def test_softmax_layer_norm_and_gelu_run_in_f32_on_the_cpu(op, shape):
    report = run(op, CPU, {"R": shape[0], "D": shape[1], "min_time": 0.01})
    assert report.validated, report.detail
    assert report.output.dtype.name == "float32" and report.output.shape == shape
    if op == "softmax":
        assert abs(float(report.output.sum()) - shape[0]) < 1e-4   # every row sums to one


@pytest.mark.parametrize(("op", "params", "instruction"), [
    ("residual_add", {"C": 4, "H": 16, "W": 16}, "vadd"),
    ("clip", {"C": 2, "H": 8, "W": 8, "LO": -5, "HI": 7}, None),   # min(max()): no one instruction
])
def test_element_wise_network_operators_run_on_the_card(op, params, instruction):
    report = run(op, DIANNAO, params)
    assert report.validated and report.max_abs_err == 0
    if instruction:
        assert report.instructions[instruction] >= 1 and report.scalar_fallback == 0
    else:
        assert report.scalar_fallback > 0


def test_the_card_refuses_what_its_element_wise_schedule_cannot_take_saying_why():
    with pytest.raises(RunError, match="only element-wise operators run on the card's vector units; this one "
                                       "reduces"):
        run("max_pool", DIANNAO, {"C": 4, "H": 8, "W": 8})
    with pytest.raises(RunError, match=re.escape("it reads a[min(c, 3), y, x], not at the output's index "
                                                 "[c, y, x] (not element-wise)")):
        run("concat", DIANNAO, {"C": 4, "H": 4, "W": 4})


def test_the_reference_sees_the_parameters_it_names():
    """clip's reference takes LO and HI: with the defaults instead, -7 and 20 would not validate."""
    report = run("clip", CPU, {"C": 2, "H": 4, "W": 4, "LO": -7, "HI": 20, "min_time": 0.01})
    assert report.validated and report.output.min() >= -7 and report.output.max() <= 20
    assert report.output.min() == -7 and report.output.max() == 20   # the random int32 data reach both


def test_the_cli_takes_negative_clip_bounds_and_names_impossible_windows():
    ok = RUNNER.invoke(app, ["run", "clip", "--target", "cpu", "-p", "C=2", "-p", "H=4", "-p", "W=4", "-p",
                             "LO=-3", "-p", "HI=3", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)["validated"] is True
    bad = RUNNER.invoke(app, ["run", "max_pool", "--target", "cpu", "-p", "C=2", "-p", "H=2", "-p", "W=2",
                              "-p", "K=3"])
    assert bad.exit_code == 2 and "a window of K = 3 is larger than the 2 x 2 input" in bad.output
    with pytest.raises(RunError, match="LO = 5 must not exceed HI = 1"):
        run("clip", CPU, {"C": 1, "H": 1, "W": 1, "LO": 5, "HI": 1})
