"""Networks from ONNX (tandem/network/graph.py) and the builtin models (tandem/network/models.py): the five
models import with
their batch norms folded and the published multiply-accumulate counts; the graph as Tandem computes it equals
onnxruntime's run of the same model (where onnxruntime is installed), also for random small graphs; bad
input (not ONNX, an unsupported operator, a symbolic shape) gets a typed error naming the file, node or
input; ``tandem model`` prints the layers and checks the import."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.network import graph as tg
from tandem.network import models

RUNNER = CliRunner()


def needs_ort():
    return pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the peers extra)")


def onnxruntime_output(model, inputs: dict[str, np.ndarray]) -> np.ndarray:
    rt = needs_ort()
    session = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


# published multiply-accumulates at 224 x 224 (torchvision's model cards: 1.81, 4.09, 0.30 GMACs) and the
# batch norms each network has after a convolution
MODELS = {"resnet18": (1.814e9, 20), "resnet50": (4.089e9, 53), "mobilenet_v2": (0.3006e9, 52),
          "bert_encoder": (0.931e9, 0), "vit_block": (1.454e9, 0)}


@pytest.mark.parametrize("name", models.NAMES)
def test_each_builtin_model_imports_with_its_batch_norms_folded(name):
    g = tg.load(models.build(name))
    macs, folded = MODELS[name]
    assert abs(g.macs - macs) / macs < 0.01
    assert len(g.folded) == folded and not [layer for layer in g.layers if layer.op == "BatchNormalization"]
    assert g.layers[-1].output == g.output


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_encoder", "vit_block"])
def test_the_imported_graph_computes_what_onnxruntime_computes(name):
    model = models.build(name, seed=3)
    g = tg.load(model)
    (shape,) = g.inputs.values()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = onnxruntime_output(model, {"input": x})
    got = tg.run_reference(g, {"input": x})
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_the_same_seed_builds_the_same_model_and_another_seed_another():
    a, b, c = (models.build("mobilenet_v2", seed).SerializeToString() for seed in (0, 0, 1))
    assert a == b and a != c


# ---------------------------------------------------------------------------------- random small graphs

@st.composite
def small_graphs(draw):
    """A chain of convolutions (1x1 or 3x3, stride 1 or 2, dense or depthwise), each with or without a batch
    norm and a ReLU or ReLU6, sometimes a residual Add, a max pool; then global pooling and a classifier."""
    g = models._Graph(draw(st.integers(0, 99)))
    c, size = draw(st.sampled_from([3, 4, 8])), draw(st.integers(6, 12))
    x, shape = "input", (1, c, size, size)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["conv", "depthwise", "pool"]))
        if kind == "pool":
            x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            size = (size - 1) // 2 + 1
            continue
        k, s = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 2]))
        cout = c if kind == "depthwise" else draw(st.sampled_from([4, 8, 16]))
        act = draw(st.sampled_from(["relu", "relu6", None]))
        if draw(st.booleans()):
            y = g.conv_bn(x, c, cout, k, s, groups=c if kind == "depthwise" else 1, act=act)
        else:
            y = g.conv(x, c, cout, k, s, groups=c if kind == "depthwise" else 1, bias=True)
        x = g.node("Add", [x, y]) if s == 1 and cout == c and draw(st.booleans()) else y
        c, size = cout, (size - 1) // s + 1
    return g.model("small", [("input", shape)], models._classifier(g, x, c))


@settings(max_examples=10, deadline=None, derandomize=True)
@given(model=small_graphs())
def test_random_small_graphs_import_and_compute_what_onnxruntime_computes(model):
    g = tg.load(model)
    (shape,) = g.inputs.values()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = onnxruntime_output(model, {"input": x})
    assert np.abs(tg.run_reference(g, {"input": x}) - want).max() <= 1e-4 * max(np.abs(want).max(), 1.0)


# ---------------------------------------------------------------------------------- bad input

def tiny(op: str = "Relu", dims=(1, 4), **attrs):
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], name="the_node", **attrs)
    graph = helper.make_graph([node], "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", models.OPSET)])


def test_bad_models_get_typed_errors_naming_the_file_node_or_input(tmp_path: Path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(tg.GraphError, match="junk.onnx: not an ONNX model"):
        tg.load(junk)
    with pytest.raises(tg.GraphError, match=r"node the_node \(Sin\): operator Sin is not supported"):
        tg.load(tiny("Sin"))
    with pytest.raises(tg.GraphError, match=r"input x has the dynamic shape \['N', 4\]; give it with "
                                            r"--input-shape x="):
        tg.load(tiny(dims=("N", 4)))
    g = tg.load(tiny(dims=("N", 4)), {"x": (3, 4)})
    assert g.inputs == {"x": (3, 4)} and g.layers[0].shape == (3, 4)
    with pytest.raises(tg.GraphError, match="--input-shape names z, which is not a graph input"):
        tg.load(tiny(), {"z": (1, 4)})
    with pytest.raises(tg.GraphError, match="no such model file"):
        tg.load(tmp_path / "missing.onnx")


def test_the_model_command_prints_the_layers_and_checks_the_import(tmp_path: Path):
    result = RUNNER.invoke(app, ["model", "--builtin", "mobilenet_v2", "--json", "--int8"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["folded_batch_norms"] == 52 and report["layers"][0]["op"] == "Conv"
    assert report["check"]["passed"] in (True, None)
    assert 0 < report["int8"]["relative_l2"] < 0.2 and report["int8"]["top1_agrees"] == 1.0
    path = tmp_path / "vit.onnx"
    path.write_bytes(models.build("vit_block").SerializeToString())
    result = RUNNER.invoke(app, ["model", str(path)])
    assert result.exit_code == 0 and "import check" in result.output and "Gelu" in result.output
    bad = RUNNER.invoke(app, ["model", "--builtin", "resnet18", str(path)])
    assert bad.exit_code == 2 and "one of them" in bad.output
    bad = RUNNER.invoke(app, ["model", "--builtin", "alexnet"])
    assert bad.exit_code == 2 and "no builtin model 'alexnet'" in bad.output


def test_the_model_command_quantizes_by_the_scheme_it_is_given():
    """resnet18 (builtin, seed 0) by onnxruntime's quantize_static rule (uint8 activations, float scales
    per output channel): 0.016 of relative L2 error (power-of-two exponents: 0.085)."""
    result = RUNNER.invoke(app, ["model", "--builtin", "resnet18", "--json", "--int8", "--scheme",
                                 "affine-per-channel"])
    assert result.exit_code == 0, result.output
    int8 = json.loads(result.output)["int8"]
    assert int8["scheme"] == "affine-per-channel" and "per output channel" in int8["rule"]
    assert int8["relative_l2"] < 0.04 and int8["top1_agrees"] == 1.0
    bad = RUNNER.invoke(app, ["model", "--builtin", "resnet18", "--int8", "--scheme", "fp8"])
    assert bad.exit_code == 2 and "int8 scheme 'fp8': Tandem quantizes by pow2, affine" in " ".join(
        bad.output.split()), bad.output


def test_without_onnxruntime_the_command_says_the_import_is_unchecked_and_how_to_check_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # import onnxruntime raises ImportError
    result = RUNNER.invoke(app, ["model", "--builtin", "vit_block"])
    assert result.exit_code == 0 and "pip install -e '.[peers]'" in result.output
    assert "not checked" in result.output.replace("\n", " ")


def test_weights_computed_from_constants_are_folded_at_import():
    """A conv's weights that reach it through Identity, Transpose and Reshape of an initializer, and a
    MatMul's through a Transpose (as exporters write a linear layer's W^T): both are constants of their
    layer after the import, so their multiply-adds run on a target (tandem/network/place.py)."""
    from onnx import helper

    g = models._Graph(0)
    w = g.weight("w", (3, 3, 8, 4), 36)   # [KH, KW, OC, IC]: transposed to OIHW, then an Identity
    w = g.node("Reshape", [g.node("Transpose", [w], perm=[2, 3, 0, 1]), g.const("s", np.array([8, 4, 3, 3]))])
    g.nodes.append(helper.make_node("Identity", [w], ["w_id"], name="w_id"))
    y = g.node("Conv", ["input", "w_id"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = g.node("MatMul", [g.node("Flatten", [y]), g.node("Transpose", [g.weight("fc", (10, 8 * 25), 200)])])
    graph = tg.load(g.model("folded", [("input", (1, 4, 5, 5))], y))
    assert [layer.op for layer in graph.layers] == ["Conv", "Flatten", "MatMul"]
    conv, _, matmul = graph.layers
    assert set(conv.weights) == {1} and conv.weights[1].shape == (8, 4, 3, 3) and conv.macs == 8 * 25 * 36
    assert set(matmul.weights) == {1} and matmul.weights[1].shape == (200, 10)
