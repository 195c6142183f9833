"""Whole int8 networks on every target (tandem/network/run.py, tandem/network/place.py): each step runs
through the one ``run`` flow on the outputs the target computed before it, and is bit-exact with the integer
graph (tandem/network/quantize.py); what runs on the host is named with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.flows.cpu import default_isa
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import load_target
from tandem.network import graph as tg
from tandem.network import models, quantize
from tandem.network.run import run_network
from tandem.network.steps import steps

TARGETS = ("vita", "cpu", "diannao")
#: the share of the multiply-adds on tensor instructions: all of them, but none on a CPU without vpdpbusd or
#: vpmaddwd (its vectorized multiply-adds are not one)
SHARE = {"vita": 1.0, "diannao": 1.0,
         "cpu": 1.0 if default_isa(CpuOptions(), load_target("cpu")) == "x86-vnni" else 0.0}
#: the CPU's kernels are timed for real: briefly here
OPTIONS = {"cpu": {"threads": 1, "min_time": 0.002}}


def quantized(model) -> quantize.PowerOfTwoGraph:
    return quantize.quantize(tg.load(model), samples=2)


def run_checked(model, kind: str):
    """The model quantized and run on ``kind``, every step bit-exact with the integer graph."""
    q = quantized(model)
    report = run_network(q, load_target(kind), options=OPTIONS.get(kind))
    assert report.validated, [(r.step, r.why) for r in report.rows if not r.validated]
    return q, report


@st.composite
def small_cnns(draw):
    """A stem conv on the (signed) network input, then 1-3 blocks (a conv with a ReLU, ReLU6 or none, a
    residual Add, a padded max pool, a depthwise conv), global pooling and a classifier."""
    g = models._Graph(draw(st.integers(0, 99)))
    c, size = draw(st.sampled_from([3, 8])), draw(st.integers(5, 9))
    x = g.conv_bn("input", c, 16, 3, draw(st.sampled_from([1, 2])), act=draw(st.sampled_from(["relu", None])))
    shape, c, size = (1, c, size, size), 16, None
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["conv", "residual", "pool", "depthwise"]))
        if kind == "pool":
            x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        elif kind == "depthwise":
            x = g.conv_bn(x, c, c, 3, 1, groups=c, act="relu6")
        else:
            cout = c if kind == "residual" else draw(st.sampled_from([16, 24]))
            act = draw(st.sampled_from(["relu", "relu6", None]))
            y = g.conv_bn(x, c, cout, draw(st.sampled_from([1, 3])), act=act)
            x = g.node("Relu", [g.node("Add", [x, y])]) if kind == "residual" else y
            c = cout
    del size
    return g.model("small", [("input", shape)], models._classifier(g, x, c))


@pytest.mark.parametrize("kind", TARGETS)
@settings(max_examples=4, deadline=None, derandomize=True)
@given(model=small_cnns())
def test_random_small_networks_run_bit_exact_step_by_step_on_each_target(kind, model):
    q, report = run_checked(model, kind)
    assert report.tensor_macs_share == SHARE[kind]   # VITA's depthwise convs too: block-diagonal conv2ds
    for row in report.rows:
        assert row.validated and row.kernel_validated in (True, None), row
        if row.where == "host":   # only what no kernel of the target computes, and it says why
            assert row.why and row.op in ("Flatten", "GlobalAveragePool"), row
            assert kind == "diannao" or row.op == "Flatten"
        else:
            assert row.cycles and row.cycles > 0
    assert np.array_equal(report.output, q.run_integer(_inputs(q))[q.graph.output])


@st.composite
def small_transformers(draw):
    """An encoder block of few tokens: pre- or post-norm, attention (dense layers with biases, matmuls of two
    activations per head, softmax) and an MLP (GELU, or a ReLU fused into its first dense layer)."""
    g = models._Graph(draw(st.integers(0, 99)))
    tokens, heads = draw(st.integers(3, 9)), draw(st.sampled_from([1, 2]))
    d = heads * draw(st.sampled_from([8, 16]))
    hidden = 2 * d
    x = "input"
    if draw(st.booleans()):   # pre-norm (ViT)
        x = g.node("Add", [x, g.attention(g.layer_norm(x, d), tokens, d, heads)])
    else:                     # post-norm (BERT)
        x = g.layer_norm(g.node("Add", [x, g.attention(x, tokens, d, heads)]), d)
    if draw(st.booleans()):
        mlp = g.mlp(x, d, hidden)
    else:
        mlp = g.dense(g.node("Relu", [g.dense(x, d, hidden)]), hidden, d)
    return g.model("block", [("input", (1, tokens, d))], g.node("Add", [x, mlp]))


@pytest.mark.parametrize("kind", TARGETS)
@settings(max_examples=3, deadline=None, derandomize=True)
@given(model=small_transformers())
def test_random_small_encoder_blocks_run_bit_exact_step_by_step_on_each_target(kind, model):
    _, report = run_checked(model, kind)
    on_target = {r.op for r in report.rows if r.where != "host"}
    assert {"MatMul", "Add"} <= on_target   # the dense layers (biases folded) and the matmuls per head
    assert {r.op for r in report.rows if r.where == "host"} <= {"Reshape", "Transpose", "Mul", "Softmax",
                                                                 "LayerNormalization", "Gelu"}
    assert report.tensor_macs_share == SHARE[kind]


def _inputs(q: quantize.PowerOfTwoGraph, seed: int = 0) -> dict[str, np.ndarray]:
    return tg.random_inputs(q.graph, np.random.default_rng(seed))


def test_a_relu_fuses_into_the_conv_or_add_it_alone_reads():
    q = quantize.quantize(tg.load(models.build("resnet18")), samples=1)
    plan = steps(q)
    ops = [s.op for s in plan]
    assert ops.count("Conv+Relu") == 9 and ops.count("Add+Relu") == 8 and "Relu" not in ops
    # a conv whose output feeds the residual Add keeps no ReLU; the stem's ReLU is its epilogue's clip
    assert ops[0] == "Conv+Relu" and sum(len(s.layers) for s in plan) == len(q.graph.layers)


def test_a_reused_timing_equals_the_simulated_one_and_the_row_says_so():
    # ResNet-18 on 32 x 32 images: blocks of the same shapes whose requantizations match run the same kernel
    q = quantize.quantize(tg.load(models.build("resnet18"), {"input": (1, 3, 32, 32)}), samples=1)
    target = load_target("vita")
    fast, full = run_network(q, target), run_network(q, target, resimulate=True)
    assert fast.validated and full.validated
    assert [r.cycles for r in fast.rows] == [r.cycles for r in full.rows]
    reused = [r for r in fast.rows if "reused" in r.timing]
    assert reused and all(r.kernel_validated is None for r in reused)
    assert all(r.timing in ("simulated", "") for r in full.rows)


def test_vita_conv_and_gemm_take_a_bias_a_shift_and_a_clip():
    target = load_target("vita")
    for op, layer in (("conv2d", {"H": 6, "W": 6, "IC": 20, "OC": 24, "K": 3, "P": 1}),
                      ("gemm", {"M": 3, "N": 40, "K": 20})):
        report = run(op, target, {**layer, "bias": True, "shift": 9, "clip": (-5, 90)})
        assert report.validated and report.instructions["ALU_ADD"] >= 1
        assert report.params["clip"] == [-5, 90] and report.params["shift"] == 9
        assert int(report.output.min()) >= -5 and int(report.output.max()) <= 90
    with pytest.raises(RunError, match="clip must be"):
        run("gemm", target, {"M": 1, "N": 16, "K": 16, "clip": (3, -3)})


def test_the_model_command_runs_a_network_on_a_target_and_writes_json_and_csv(tmp_path: Path):
    g = models._Graph(5)
    x = g.node("MaxPool", [g.conv_bn("input", 3, 16, 3, 2)], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1])
    path = tmp_path / "net.onnx"
    path.write_bytes(g.model("net", [("input", (1, 3, 12, 12))], models._classifier(g, x, 16))
                     .SerializeToString())
    saved, table, trace = tmp_path / "run.json", tmp_path / "run.csv", tmp_path / "trace.json"
    result = CliRunner().invoke(app, ["model", str(path), "--target", "vita", "--save", str(saved),
                                      "--csv", str(table), "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "bit-exact with the integer graph" in result.output and "flatten" in result.output
    data = json.loads(saved.read_text())
    assert data["validated"] and data["target"] == "vita" and data["on_host"] == [data["layers"][-2]["step"]]
    assert data["cycles"] == sum(row["cycles"] or 0 for row in data["layers"]) > 0
    lines = table.read_text().splitlines()
    assert lines[0].startswith("step,op,shape,where") and len(lines) == len(data["layers"]) + 1
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    steps = [e for e in events if e["cat"] == "step"]
    assert len(steps) == len(data["layers"]) - 1   # every step but the host's Flatten
    assert sum(e["args"]["cycles"] for e in steps) == data["cycles"]
    kernels = sorted((e for e in events if e["cat"] == "kernel"), key=lambda e: e["ts"])
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-9 for a, b in zip(kernels, kernels[1:], strict=False))
    if data["onnxruntime"]["checked"]:   # the output against onnxruntime's float32 run, within tolerance
        assert data["onnxruntime"]["passed"] and 0 < data["onnxruntime"]["tolerance"] < 1


def test_the_model_command_refuses_an_unknown_target_and_a_missing_output_folder(tmp_path: Path):
    result = CliRunner().invoke(app, ["model", "--builtin", "resnet18", "--target", "tpu"])
    assert result.exit_code == 2 and "unknown target 'tpu'" in result.output
    result = CliRunner().invoke(app, ["model", "--builtin", "resnet18", "--target", "vita", "--save",
                                      str(tmp_path / "nowhere" / "r.json")])
    assert result.exit_code == 2 and "does not exist" in result.output


@pytest.mark.parametrize("kind", TARGETS)
def test_a_batch_runs_each_image_on_the_target_with_no_host_step_that_one_image_has_not(kind: str):
    """A batch is an outer loop over the per-image kernels (a conv, a pool, a global pool); the GEMM takes
    the batch in its M. Every step is bit-exact with the integer graph of the whole batch."""
    def model(batch: int):
        g = models._Graph(3)
        x = g.node("MaxPool", [g.conv_bn("input", 3, 16, 3, 2)], kernel_shape=[3, 3], strides=[2, 2],
                   pads=[1, 1, 1, 1])
        y = g.node("Relu", [g.node("Add", [x, g.conv_bn(x, 16, 16, 3, 1, act=None)])])
        return g.model("net", [("input", (batch, 3, 12, 12))], models._classifier(g, y, 16))

    host = {}
    for batch in (1, 3):
        q, report = run_checked(model(batch), kind)
        host[batch] = [(r.op, r.why) for r in report.rows if r.where == "host"]
        if batch == 3:
            convs = [r for r in report.rows if r.op.startswith("Conv")]
            assert all(len(r.kernels) % 3 == 0 for r in convs)   # each image's kernels
    assert host[3] == host[1]


@pytest.mark.parametrize("kind", TARGETS)
def test_uneven_padding_and_rounded_up_pools_run_on_the_target_padded_by_the_host(kind: str):
    """A conv with auto_pad SAME_UPPER at stride 2 (one more row and column after than before) and a max
    pool with ceil_mode (its last window past the input): the host lays the input out padded (the zero,
    int8's lowest), the kernel runs unpadded, bit-exact with the integer graph."""
    g = models._Graph(4)
    w = g.weight("w", (16, 3, 3, 3), 27)
    x = g.node("Conv", ["input", w], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    x = g.node("MaxPool", [g.node("Relu", [x])], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    model = g.model("net", [("input", (1, 3, 16, 16))], models._classifier(g, x, 16))
    q, report = run_checked(model, kind)
    assert [layer.shape for layer in q.graph.layers[:3]] == [(1, 16, 8, 8), (1, 16, 8, 8), (1, 16, 4, 4)]
    assert not [r.op for r in report.rows if r.where == "host" and r.op.startswith(("Conv", "MaxPool"))]


def test_the_end_to_end_check_holds_the_int8_output_to_the_budget_and_a_decisive_top_output():
    from tandem.cli import model as cli_model

    assert cli_model._decisive(np.array([0.0, 0.1, 5.0]))          # the top stands clear of the budget
    assert not cli_model._decisive(np.array([1.0, 1.01, 0.9]))     # a near tie: any top output is accepted
    assert cli_model.RELATIVE_L2_BUDGET == 0.15


@pytest.mark.parametrize("kind", TARGETS)
def test_grouped_convs_run_on_the_target_as_convs_of_their_groups(kind: str):
    """Grouped convs that are not depthwise (3 groups of 8 channels; 6 groups of 4 channels into 8 at stride
    2) next to a depthwise one: each runs on the target as convolutions of its groups joined along channels
    (VITA: block-diagonal conv2ds of the whole groups that fit BLOCK input channels; the CPU and DianNao: a
    conv2d per group, then one requantize), bit-exact, every multiply-add on tensor instructions."""
    g = models._Graph(3)
    x = g.conv_bn("input", 3, 24, 3, 1)
    x = g.conv_bn(x, 24, 24, 3, 1, groups=3)
    x = g.conv_bn(x, 24, 48, 3, 2, groups=6, act=None)
    x = g.conv_bn(x, 48, 48, 3, 1, groups=48, act="relu6")
    q, report = run_checked(g.model("grouped", [("input", (1, 3, 9, 9))], models._classifier(g, x, 48)), kind)
    assert report.tensor_macs_share == SHARE[kind]
    convs = [r for r in report.rows if r.op.startswith("Conv")]
    assert {r.where for r in convs} == {kind}
    # a conv per group, and the requantization: VITA's and the CPU's in each conv's epilogue
    assert [len(r.kernels) for r in convs[1:3]] == {"vita": [2, 2], "cpu": [3, 6], "diannao": [4, 7]}[kind]


@pytest.mark.parametrize("kind", TARGETS)
def test_a_conv_of_disjoint_windows_runs_as_one_gemm_of_its_windows(kind: str):
    """A patch embedding (stride = kernel, no padding; the input's last rows and columns left over) runs as a
    GEMM of its windows by its kernels with the conv's epilogue (the CPU's and DianNao's: requantize),
    bit-exact, every multiply-add on the target's GEMM."""
    g = models._Graph(1)
    w = g.weight("w", (24, 3, 4, 4), 48)
    y = g.node("Conv", ["input", w, g.const("b", np.full(24, 0.1, np.float32))], kernel_shape=[4, 4],
               strides=[4, 4])
    q, report = run_checked(g.model("patches", [("input", (1, 3, 18, 18))], g.node("Relu", [y])), kind)
    (row,) = report.rows
    assert row.op == "Conv+Relu" and row.kernel.startswith("gemm (the conv's windows)")
    assert row.where == kind and row.tensor_macs == row.macs * SHARE[kind]
