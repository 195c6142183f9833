"""Models the ONNX fuzzer (tests/fuzz/test_fuzz_onnx.py) found Tandem's import, reference or ``tandem model``
failing on with an untyped exception, a traceback or an unchecked result: each is now a GraphError naming
the initializer, input, node, attribute or output (or, from the command, one ``error:`` line), or a result
checked against onnxruntime."""

from __future__ import annotations

import importlib.util
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
    """onnxruntime's exceptions (its Fail for a Conv of group 0, which Tandem's import took) came out of
    ``tandem model`` as a traceback. Here: an Add of bfloat16, which Tandem computes and onnxruntime's CPU
    provider does not implement."""
    pytest.importorskip("onnxruntime")
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
             helper.make_node("Add", ["h", "h"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=F)]
    result = invoke(tmp_path, model(nodes, {"x": [3]}, {"y": [3]}))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert "onnxruntime cannot run the model, so Tandem's result is not checked against it (NotImplemented" \
        in line


def test_onnxruntime_runs_in_a_child_whose_crash_is_a_typed_failure(monkeypatch):
    """Some malformed models crash onnxruntime while it builds its session (a segmentation fault, a failed
    assertion), which took Tandem's process with it; the child's crash is an OnnxRuntimeFailure."""
    from tandem.cli import onnxruntime_run

    m = model([relu()], {"x": [2]}, {"y": [2]})
    x = {"x": np.array([-1, 2], np.float32)}
    if importlib.util.find_spec("onnxruntime"):
        assert np.array_equal(onnxruntime_run.run(m.SerializeToString(), x, "y"), [0, 2])
    monkeypatch.setattr(onnxruntime_run, "CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(onnxruntime_run.OnnxRuntimeFailure, match=r"onnxruntime crashed \(SIGSEGV\)"):
        onnxruntime_run.run(m.SerializeToString(), x, "y")


def test_the_commands_check_of_a_float16_graph_allows_float16_rounding(tmp_path):
    """An Exp in float16 differs from onnxruntime's by an ulp of float16 (about 1e-4 of the output here),
    which the float32 tolerance called a difference (exit 1)."""
    pytest.importorskip("onnxruntime")
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Exp", ["h"], ["e"]), helper.make_node("Cast", ["e"], ["y"], to=F)]
    result = invoke(tmp_path, model(nodes, {"x": [64]}, {"y": [64]}))
    assert result.exit_code == 0, result.output
    assert "tolerance 0.015625" in json.loads(result.stdout)["check"]["detail"]


def test_a_split_whose_num_outputs_differs_from_its_outputs_is_refused_before_shape_inference():
    """onnx's shape inference aborts the process (a failed assertion) on it."""
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], name="the_node", axis=0, num_outputs=2)
    with pytest.raises(tg.GraphError, match=r"the_node \(Split\): num_outputs 2 differs from its 3 outputs"):
        tg.load(model([node], {"x": [6]}, {"a": [2], "b": [2], "c": [2]}))


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


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")   # 1e30 * 1e30 in float32
def test_int8_quantization_refuses_values_its_integer_graph_cannot_hold():
    """A weight of 4.6e18 made a requantization shift 66 bits (OverflowError adding 1 << 65 to int64 sums;
    here: weights of 1e38 on inputs of 1e-30); an activation that overflows float32 to inf was given the
    exponent of an all-zero tensor."""
    from tandem.network.quantize import quantize

    nodes = [helper.make_node("Mul", ["x", "tiny"], ["t"]),
             helper.make_node("Conv", ["t", "w"], ["y"], name="the_node")]
    m = model(nodes, {"x": [1, 1, 2, 2]}, {"y": [1, 1, 2, 2]},
              {"tiny": np.float32(1e-30), "w": np.full((1, 1, 1, 1), 1e38, np.float32)})
    with pytest.raises(tg.GraphError, match=r"node the_node \(Conv\): requantizing it takes a shift by -\d+ "
                                            r"bits"):
        quantize(tg.load(m))
    nodes = [helper.make_node("Mul", ["x", "big"], ["t"]), helper.make_node("Mul", ["t", "big"], ["y"])]
    m = model(nodes, {"x": [4]}, {"y": [4]}, {"big": np.float32(1e30)})
    with pytest.raises(tg.GraphError, match=r"tensor y takes the value inf on a calibration input: int8 "
                                            r"cannot represent it"):
        quantize(tg.load(m))


def qdq_model(scale: np.ndarray, **attrs) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(w, scale, axis...)) -> Q -> DQ -> y: a QDQ conv."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw"], ["wd"], name="the_weights", **attrs),
             helper.make_node("Conv", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "sx", "zx"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sx", "zx"], ["y"])]
    return model(nodes, {"x": [1, 2, 3, 3]}, {"y": [1, 2, 3, 3]},
                 {"sx": np.float32(0.1), "zx": np.uint8(128), "w": np.ones((2, 2, 1, 1), np.int8),
                  "sw": scale}, opset=21)


def test_a_qdq_models_scales_and_attributes_are_what_tandem_computes():
    """A scale of shape [1, 1] was numpy's ValueError in the conv's requantization (broadcast_to); per-axis
    scales along another axis than 0 were applied along axis 0 regardless; blocked quantization
    (block_size) was ignored."""
    qdq.load(qdq_model(np.float32(0.5)))
    qdq.load(qdq_model(np.array([0.5, 0.25], np.float32), axis=0))
    with pytest.raises(tg.GraphError, match=r"the_weights \(DequantizeLinear\): its scale of shape \[1, 1\]"):
        qdq.load(qdq_model(np.full((1, 1), 0.5, np.float32)))
    with pytest.raises(tg.GraphError, match=r"2 scales along axis 1 of a constant of shape \[2, 2, 1, 1\]; "
                                            r"Tandem takes one per slice along axis 0"):
        qdq.load(qdq_model(np.array([0.5, 0.25], np.float32)))   # ONNX's default axis is 1
    with pytest.raises(tg.GraphError, match=r"attribute block_size=2 is not supported"):
        qdq.load(qdq_model(np.float32(0.5), block_size=2))


def test_operand_types_are_checked_against_the_operators_type_constraints():
    """A Gemm of int4 weights (an initializer's type changed) and an Add of float and double were computed;
    onnxruntime refuses both models (ONNX's type constraints)."""
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="the_node", transB=1)
    m = model([node], {"x": [1, 2]}, {"y": [1, 2]}, {"w": np.ones((2, 2), np.float32)})
    m.graph.initializer[0].data_type = TensorProto.INT4
    with pytest.raises(tg.GraphError, match=r"the_node \(Gemm\): its input w is a tensor\(int4\); ONNX's "
                                            r"Gemm takes tensor\(float16\), tensor\(float\)"):
        tg.load(m)
    node = helper.make_node("Add", ["x", "d"], ["y"], name="the_node")
    with pytest.raises(tg.GraphError, match=r"the_node \(Add\): its inputs of type T are tensor\(float\) and "
                                            r"tensor\(double\); ONNX's Add takes one type for them"):
        tg.load(model([node], {"x": [2]}, {"y": [2]}, {"d": np.ones(2, np.float64)}))


def test_the_command_names_the_node_tandem_refuses_before_asking_onnxruntime(tmp_path):
    """A Gather index out of range was reported as onnxruntime's failure (it ran first), not Tandem's."""
    pytest.importorskip("onnxruntime")
    nodes = [helper.make_node("Cast", ["f"], ["i"], to=TensorProto.INT64),   # no inference sees through it
             helper.make_node("Gather", ["x", "i"], ["y"], name="the_node")]
    result = invoke(tmp_path, model(nodes, {"x": [3]}, {"y": [1]}, {"f": np.array([7], np.float32)}))
    assert result.exit_code == 2, result.output
    assert "the_node (Gather): an index of [7] is out of range" in result.output


def test_a_qdq_zero_point_that_does_not_go_with_its_scale_is_refused():
    """A zero point of shape [1, 1, 1, 1, 1] with a scalar scale: onnxruntime's Fail."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="the_node"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    m = model(nodes, {"x": [2]}, {"y": [2]}, {"s": np.float32(0.5), "z": np.zeros((1, 1, 1, 1, 1), np.uint8)})
    with pytest.raises(tg.GraphError, match=r"the_node \(QuantizeLinear\): its zero point of shape "
                                            r"\[1, 1, 1, 1, 1\] does not go with its scale of shape \[\]"):
        qdq.load(m)


def test_int8_quantization_of_a_graph_whose_output_is_a_constant_is_refused():
    """Every node folded to a constant at import (the graph input unused): the integer graph had no value
    for the output (KeyError in check_against_float)."""
    from tandem.network.quantize import quantize

    node = helper.make_node("Add", ["c", "c"], ["y"])
    m = model([node], {"x": [2]}, {"y": [2]}, {"c": np.ones(2, np.float32)})
    with pytest.raises(tg.GraphError, match="its output y is a constant .*: there is no network to quantize"):
        quantize(tg.load(m))


def test_int8_quantization_of_a_layer_computing_truth_values_is_refused():
    """A Greater's bool output had no exponent (KeyError in the integer graph)."""
    from tandem.network.quantize import quantize

    nodes = [helper.make_node("Greater", ["x", "z"], ["m"], name="the_node"),
             helper.make_node("Where", ["m", "x", "z"], ["y"])]
    m = model(nodes, {"x": [4], "z": [4]}, {"y": [4]})
    with pytest.raises(tg.GraphError, match=r"the_node \(Greater\): its output m holds bool values; Tandem's "
                                            r"int8 graph quantizes float16, float32 and float64"):
        quantize(tg.load(m))


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")   # ONNX's reference
def test_layer_normalization_computes_its_statistics_in_its_stash_type():
    """A row holding 1e30 (a scale of 1e30 before it): its squares overflow float32, LayerNormalization's
    stash type, so ONNX's function body (and onnxruntime) take the variance as inf and the row's normalized
    values as 0 (the output is the bias); Tandem computed the variance in float64 and gave finite values
    up to 4e30, which the command's check called a difference."""
    from onnx.reference import ReferenceEvaluator

    nodes = [helper.make_node("Mul", ["x", "big"], ["m"]),
             helper.make_node("LayerNormalization", ["m", "s", "b"], ["y"], axis=-1)]
    m = model(nodes, {"x": [2, 4]}, {"y": [2, 4]},
              {"big": np.array([1, 1, 1e30, 1], np.float32), "s": np.array([1, 2, 3, 4], np.float32),
               "b": np.array([0.5, -0.5, 0.25, 0], np.float32)})
    x = {"x": np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32)}
    got = tg.run_reference(tg.load(m), x)
    want = ReferenceEvaluator(m).run(None, x)[0]
    assert np.array_equal(got, want) and np.array_equal(got[0], [0.5, -0.5, 0.25, 0]), (got, want)
