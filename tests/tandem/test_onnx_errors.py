"""Models the ONNX fuzzer (tests/fuzz/test_fuzz_onnx.py) found Tandem's import, reference or ``tandem model``
failing on with an untyped exception, a traceback or an unchecked result: each is now a GraphError naming
the initializer, input, node, attribute or output (or, from the command, one ``error:`` line), or a result
checked against onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.network import graph as tg
from tandem.network import qdq

RUNNER = CliRunner()
F = TensorProto.FLOAT


def model(nodes, inputs, outputs, initializers=None, opset: int = 18) -> onnx.ModelProto:
    """A model of ``nodes``; ``inputs`` and ``outputs`` {name: shape} of floats (or (elem_type, shape));
    ``initializers`` {name: array}; not checked, so that it can be wrong."""
    def info(name, spec):
        kind, shape = spec if isinstance(spec, tuple) and isinstance(spec[0], int) and len(spec) == 2 \
            and not isinstance(spec[1], int) else (F, spec)
        return helper.make_tensor_value_info(name, kind, shape)
    arrays = [numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "g", [info(n, s) for n, s in inputs.items()],
                              [info(n, s) for n, s in outputs.items()], arrays)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def relu(x: str = "x", y: str = "y", **attrs) -> onnx.NodeProto:
    return helper.make_node("Relu", [x], [y], name="the_node", **attrs)


def test_an_initializer_whose_data_does_not_fit_its_dims_is_refused_by_name():
    """numpy_helper raised ValueError (a reshape), TypeError (type UNDEFINED) or KeyError (type 99)."""
    add = helper.make_node("Add", ["x", "b"], ["y"])
    m = model([add], {"x": [2]}, {"y": [2]}, {"b": np.ones(2, np.float32)})
    m.graph.initializer[0].dims[:] = [4]
    with pytest.raises(tg.GraphError, match=r"initializer b: its data is not a FLOAT tensor of dims \[4\]"):
        tg.load(m)
    for kind in (0, 99):
        m.graph.initializer[0].dims[:] = [2]
        m.graph.initializer[0].data_type = kind
        with pytest.raises(tg.GraphError, match="initializer b: its data is not a"):
            tg.load(m)
    m.graph.initializer[0].data_type = F
    m.graph.initializer[0].dims[:] = [2, -1]
    with pytest.raises(tg.GraphError, match=r"initializer b: its dims \[2, -1\] are negative"):
        tg.load(m)


def test_a_qdq_models_initializers_and_constants_are_read_with_the_same_checks():
    """qdq.load read its initializers and Constants with numpy_helper directly (ValueError, IndexError)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    m = model(nodes, {"x": [2]}, {"y": [2]}, {"s": np.float32(0.5), "z": np.uint8(0)})
    m.graph.initializer[0].dims[:] = [3]
    with pytest.raises(tg.GraphError, match="initializer s: its data is not a FLOAT tensor of dims"):
        qdq.load(m)
    m = model([helper.make_node("Constant", [], ["c"]), *nodes], {"x": [2]}, {"y": [2]},
              {"s": np.float32(0.5), "z": np.uint8(0)})
    with pytest.raises(tg.GraphError, match=r"node c \(Constant\): a Constant holds its value in one "):
        qdq.load(m)


def test_graph_outputs_must_be_tensors_of_the_graph_named_once():
    """A renamed output was a KeyError in ``tensors``; a graph without outputs an IndexError in the CLI."""
    m = model([relu()], {"x": [2]}, {"z": [2]})
    with pytest.raises(tg.GraphError, match="the graph output z is no tensor of the graph"):
        tg.load(m)
    m.graph.output[0].name = "y"
    m.graph.output.append(m.graph.output[0])
    with pytest.raises(tg.GraphError, match="the graph output y is named twice"):
        tg.load(m)
    del m.graph.output[:]
    with pytest.raises(tg.GraphError, match="the graph declares no outputs"):
        tg.load(m)


def test_nodes_out_of_order_or_computing_a_tensor_twice_are_refused():
    """A node reading a tensor a later node computes was a KeyError in ``tensors``."""
    m = model([relu("t", "y"), relu("x", "t")], {"x": [2]}, {"y": [2]})
    m.graph.node[1].name = "first"
    with pytest.raises(tg.GraphError, match=r"node the_node \(Relu\): its input t is no graph input, "
                                            r"initializer or output of an earlier node"):
        tg.load(m)
    m = model([relu("x", "y"), relu("x", "y")], {"x": [2]}, {"y": [2]})
    with pytest.raises(tg.GraphError, match="its output y is already computed by an earlier node"):
        tg.load(m)


def test_a_graph_input_of_a_type_numpy_cannot_hold_is_refused_by_name():
    """Element type 99 was imported as "unsupported", a TypeError at the first np.dtype of it."""
    m = model([relu()], {"x": [2]}, {"y": [2]})
    m.graph.input[0].type.tensor_type.elem_type = 99
    with pytest.raises(tg.GraphError, match="input x has element type 99, which Tandem cannot hold"):
        tg.load(m)


def test_attributes_are_checked_against_the_operators_onnx_schema():
    """A float axis was a TypeError inside Softmax; a list of strings for epsilon a UFuncTypeError; an
    attribute or operator the model's opset does not define was computed as if it did."""
    node = helper.make_node("Softmax", ["x"], ["y"], name="the_node", axis=-1.0)
    with pytest.raises(tg.GraphError, match=r"the_node \(Softmax\): attribute 'axis' is given as FLOAT; "
                                            r"Softmax takes INT"):
        tg.load(model([node], {"x": [2, 3]}, {"y": [2, 3]}))
    node = helper.make_node("Split", ["x"], ["a", "b"], name="the_node", axis=0, num_outputs=2)
    with pytest.raises(tg.GraphError, match=r"attribute 'num_outputs' is not Split's at opset 13"):
        tg.load(model([node], {"x": [4]}, {"a": [2], "b": [2]}, opset=13))
    node = helper.make_node("Gelu", ["x"], ["y"], name="the_node")
    with pytest.raises(tg.GraphError, match=r"the_node \(Gelu\): ONNX defines no operator Gelu at opset 18"):
        tg.load(model([node], {"x": [2]}, {"y": [2]}))
    node = helper.make_node("Cast", ["x"], ["y"], name="the_node")
    with pytest.raises(tg.GraphError, match=r"the_node \(Cast\): attribute 'to' is required by Cast"):
        tg.load(model([node], {"x": [2]}, {"y": [2]}))


def test_a_node_with_too_few_inputs_or_a_constant_without_its_value_is_refused():
    """An Identity without inputs was an IndexError; a Constant without attributes a ValueError."""
    node = helper.make_node("Identity", [], ["y"], name="the_node")
    with pytest.raises(tg.GraphError, match=r"the_node \(Identity\): 0 inputs; ONNX's Identity-\d+ takes 1"):
        tg.load(model([node, relu("y", "z")], {"x": [2]}, {"z": [2]}))
    node = helper.make_node("Constant", [], ["c"], name="the_node")
    with pytest.raises(tg.GraphError, match=r"the_node \(Constant\): a Constant holds its value in one "
                                            r"attribute, not 0"):
        tg.load(model([node, helper.make_node("Add", ["x", "c"], ["y"])], {"x": [2]}, {"y": [2]}))


@pytest.mark.parametrize("version", [0, -1, 99, 2**40])
def test_an_opset_onnx_does_not_define_is_refused(version):
    """Opset 0 and 2**40 gave a misleading 'depends on the values' error (inference did nothing), and the
    schema look-up a TypeError for 2**40; 99 was imported with the latest schemas."""
    with pytest.raises(tg.GraphError, match=f"imports opset {version} of the default ONNX domain"):
        tg.load(model([relu()], {"x": [2]}, {"y": [2]}, opset=version))


def test_a_numpy_error_inside_an_operator_is_a_graph_error_naming_the_node():
    """A Gemm of a [4, 1] constant by a [3, 4] one (transB): ONNX's inference of the GlobalAveragePool of a
    vector leaves the shapes unchecked, and numpy's ValueError came from inside the operator."""
    nodes = [helper.make_node("GlobalAveragePool", ["c"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "b"], ["g"], name="the_node", transB=1),
             helper.make_node("Add", ["x", "g"], ["y"])]
    m = model(nodes, {"x": [4, 3]}, {"y": [4, 3]},
              {"c": np.ones(4, np.float32), "b": np.ones((3, 4), np.float32)})
    with pytest.raises(tg.GraphError, match=r"node the_node \(Gemm\): Gemm cannot compute these operands "
                                            r"and attributes \(operand shapes \[\[4, 1\], \[3, 4\]\]\): "
                                            r"ValueError"):
        tg.load(m)


@pytest.mark.parametrize("shape", [[2, 10**6, 10**6], [0, 2**40, 2**40]])
def test_a_huge_graph_input_is_refused_before_any_work(shape):
    """random_inputs allocated it (or numpy refused its shape with a ValueError, a size of 0 besides)."""
    m = model([relu()], {"x": shape}, {"y": shape})
    with pytest.raises(tg.GraphError, match=r"input x of shape .* holds more than 268435456 elements"):
        tg.load(m)


def test_a_huge_computed_tensor_is_refused_by_node():
    node = helper.make_node("Expand", ["x", "shape"], ["y"], name="the_node")
    m = model([node], {"x": [1]}, {"y": [10**5, 10**5]}, {"shape": np.array([10**5, 10**5], np.int64)})
    with pytest.raises(tg.GraphError, match=r"the_node \(Expand\): its output y of shape \[100000, 100000\] "
                                            r"holds more than"):
        tg.load(m)


def invoke(tmp_path, m: onnx.ModelProto):
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return RUNNER.invoke(app, ["model", str(path), "--json"])


def test_the_command_says_so_when_onnxruntime_cannot_run_the_model(tmp_path):
    """onnxruntime's Fail came out of ``tandem model`` as a traceback (a Conv of group 0, which Tandem's
    import took)."""
    pytest.importorskip("onnxruntime")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="the_node", group=0)
    m = model([node], {"x": [1, 1, 3, 3]}, {"y": [1, 1, 3, 3]}, {"w": np.ones((1, 1, 1, 1), np.float32)})
    result = invoke(tmp_path, m)
    assert "Traceback" not in result.output
    if result.exit_code == 1:
        (line,) = [x for x in result.output.splitlines() if x.startswith("error:")]
        assert "onnxruntime cannot run the model, so Tandem's result is not checked against it" in line
    else:   # Tandem refuses group 0 itself
        assert result.exit_code == 2 and "error:" in result.output


def test_the_commands_check_takes_nan_in_both_outputs_as_agreement_and_an_empty_output(tmp_path):
    """A NaN epsilon made both outputs NaN, which the check called a difference (max |err| nan); an output
    of no values raised numpy's ValueError (the maximum of an empty array)."""
    pytest.importorskip("onnxruntime")
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], epsilon=float("nan"))
    result = invoke(tmp_path, model([node], {"x": [2, 3]}, {"y": [2, 3]}, {"s": np.ones(3, np.float32)}))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["check"]["passed"] is True
    result = invoke(tmp_path, model([relu()], {"x": [0, 3]}, {"y": [0, 3]}))
    assert result.exit_code == 0, result.output
    check = json.loads(result.stdout)["check"]
    assert check["passed"] is True and check["max_abs_err"] == 0.0
