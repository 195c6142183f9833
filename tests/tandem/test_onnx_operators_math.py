"""The element-wise operators and the reductions (tandem/network/operators/elementwise.py and reduce.py) as
ONNX defines them, on one-node models run through Tandem's ONNX backend: each opset's attributes and inputs,
integer arithmetic as C does it, ONNX's values for empty reductions, and a typed refusal, naming the
culprit, of what Tandem does not compute."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tandem.network.graph import GraphError
from tandem.onnx_backend import TandemBackend


def one_node(op: str, inputs: dict[str, np.ndarray], shape: tuple[int, ...], opset: int,
             out_type: int = TensorProto.FLOAT, constants: dict[str, np.ndarray] | None = None,
             outputs: tuple[str, ...] = ("y",), **attrs):
    """A model of one ``op`` node reading the graph ``inputs`` and then the ``constants`` (initializers),
    its outputs declared of ``shape`` (the second, if any, bool: Dropout's mask)."""
    constants = constants or {}
    node = helper.make_node(op, [*inputs, *constants], list(outputs), name="the_node", **attrs)
    values = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
              for name, x in inputs.items()]
    declared = [helper.make_tensor_value_info(outputs[0], out_type, shape)]
    declared += [helper.make_tensor_value_info(name, TensorProto.BOOL, shape) for name in outputs[1:]]
    graph = helper.make_graph([node], "one_node", values, declared,
                              [numpy_helper.from_array(x, name) for name, x in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(op: str, inputs: dict[str, np.ndarray], shape: tuple[int, ...], opset: int = 21, **kwargs):
    """The outputs of ``one_node(...)`` for its ``inputs``."""
    return TandemBackend.prepare(one_node(op, inputs, shape, opset, **kwargs)).run(list(inputs.values()))


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5


def test_an_attribute_or_type_tandem_does_not_take_is_refused_by_name():
    with pytest.raises(GraphError, match=r"the_node \(Sigmoid\): attribute 'alpha' is not implemented by "
                                         r"Tandem's Sigmoid"):
        run("Sigmoid", {"x": X}, X.shape, alpha=2.0)
    with pytest.raises(GraphError, match=r"the_node \(Cast\): to=STRING: casts to strings are not supported"):
        run("Cast", {"x": X}, X.shape, out_type=TensorProto.STRING, to=TensorProto.STRING)
    with pytest.raises(GraphError, match=r"the_node \(Sub\): attribute broadcast is not Sub's from opset 7"):
        run("Sub", {"a": X, "b": X}, X.shape, broadcast=1)


def test_integer_division_truncates_toward_zero_as_c_does_and_modulo_takes_the_sign_fmod_says():
    a = np.array([-7, 7, -7, 7], np.int32)
    b = np.array([2, -2, -2, 2], np.int32)
    (q,) = run("Div", {"a": a, "b": b}, (4,), out_type=TensorProto.INT32)
    assert q.dtype == np.int32 and q.tolist() == [-3, -3, 3, 3]
    (m,) = run("Mod", {"a": a, "b": b}, (4,), out_type=TensorProto.INT32)
    assert m.tolist() == [1, -1, -1, 1]                     # the divisor's sign, as Python's %
    (f,) = run("Mod", {"a": a, "b": b}, (4,), out_type=TensorProto.INT32, fmod=1)
    assert f.tolist() == [-1, 1, -1, 1]                     # the dividend's, as C's fmod
    with pytest.raises(GraphError, match=r"the_node \(Div\): an integer division by zero"):
        run("Div", {"a": a, "b": np.array([1, 0, 1, 1], np.int32)}, (4,), out_type=TensorProto.INT32)


def test_pow_gives_the_base_type_whatever_the_exponent_type():
    exponents = np.array([0.5, 2.0, -1.0], np.float32)
    (p,) = run("Pow", {"base": np.array([2, 3, 10], np.int64), "exponent": exponents}, (3,),
               out_type=TensorProto.INT64)
    assert p.dtype == np.int64 and p.tolist() == [1, 9, 0]      # 1.41..., 9, 0.1 truncated
    (q,) = run("Pow", {"base": np.array([1.5, -2.0], np.float32), "exponent": np.array([2, 3])}, (2,))
    assert q.dtype == np.float32 and q.tolist() == [2.25, -8.0]


def test_before_opset_7_b_broadcasts_from_axis_only_with_broadcast_1():
    b = np.array([1.0, 2.0, 3.0], np.float32)
    (y,) = run("Sub", {"a": X, "b": b}, X.shape, opset=6, broadcast=1, axis=1)
    np.testing.assert_array_equal(y, X - b[None, :, None])
    (z,) = run("Sub", {"a": X, "b": b[:1]}, X.shape, opset=6, broadcast=1)     # one value: a scalar
    np.testing.assert_array_equal(z, X - 1.0)


def test_reduction_axes_are_an_attribute_before_opset_18_and_an_input_from_it():
    expected = X.mean(axis=(0, 2), keepdims=True)
    (old,) = run("ReduceMean", {"x": X}, (1, 3, 1), opset=17, axes=[0, -1])
    (new,) = run("ReduceMean", {"x": X}, (1, 3, 1), opset=18, constants={"axes": np.array([0, -1])})
    np.testing.assert_allclose(old, expected)
    np.testing.assert_allclose(new, expected)
    (total,) = run("ReduceSum", {"x": X}, (2, 4), opset=13, constants={"axes": np.array([1])}, keepdims=0)
    np.testing.assert_allclose(total, X.sum(axis=1))         # ReduceSum's axes are an input from opset 13
    with pytest.raises(GraphError, match=r"the_node \(ReduceMean\): attribute axes: from opset 18 "
                                         r"ReduceMean's axes are its second input"):
        run("ReduceMean", {"x": X}, (1, 3, 1), opset=18, axes=[0, 2])


def test_a_reduction_over_no_axes_reduces_all_or_with_noop_with_empty_axes_none():
    (everything,) = run("ReduceSumSquare", {"x": X}, (1, 1, 1), opset=18)
    assert everything.item() == pytest.approx(float((X.astype(np.float64) ** 2).sum()))
    (each,) = run("ReduceSumSquare", {"x": X}, X.shape, opset=18, noop_with_empty_axes=1)
    np.testing.assert_array_equal(each, X * X)               # no reduction: each value squared


def test_a_reduction_over_no_values_gives_what_onnx_defines():
    empty = np.zeros((2, 0), np.float32)
    (top,) = run("ReduceMax", {"x": empty}, (2,), opset=18, constants={"axes": np.array([1])}, keepdims=0)
    (product,) = run("ReduceProd", {"x": empty}, (2,), opset=18, constants={"axes": np.array([1])},
                     keepdims=0)
    (least,) = run("ReduceMin", {"x": empty.astype(np.int32)}, (2,), opset=18, out_type=TensorProto.INT32,
                   constants={"axes": np.array([1])}, keepdims=0)
    assert top.tolist() == [-np.inf, -np.inf] and product.tolist() == [1.0, 1.0]
    assert least.tolist() == [np.iinfo(np.int32).max] * 2


def test_argmax_finds_the_first_maximum_or_with_select_last_index_the_last():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], np.float32)
    (first,) = run("ArgMax", {"x": x}, (2,), out_type=TensorProto.INT64, axis=1, keepdims=0)
    (last,) = run("ArgMax", {"x": x}, (2, 1), out_type=TensorProto.INT64, axis=1, select_last_index=1)
    assert first.tolist() == [1, 0] and last.tolist() == [[2], [1]]


def test_cast_truncates_a_float_to_an_integer_and_saturates_to_a_float8_type():
    x = np.array([-2.7, 2.7, 3.5, 1000.0, -np.inf], np.float32)
    (ints,) = run("Cast", {"x": x[:4]}, (4,), out_type=TensorProto.INT32, to=TensorProto.INT32)
    assert ints.tolist() == [-2, 2, 3, 1000]
    (f8,) = run("Cast", {"x": x}, (5,), out_type=TensorProto.FLOAT8E4M3FN, to=TensorProto.FLOAT8E4M3FN)
    assert f8.astype(np.float32).tolist() == [-2.75, 2.75, 3.5, 448.0, -448.0]
    (wide,) = run("Cast", {"x": x}, (5,), out_type=TensorProto.FLOAT8E4M3FN, to=TensorProto.FLOAT8E4M3FN,
                  saturate=0)
    assert np.isnan(wide.astype(np.float32)[3:]).all()       # out of range without saturation: NaN


def test_dropout_in_inference_keeps_every_value_and_training_that_drops_is_refused():
    y, mask = run("Dropout", {"x": X}, X.shape, opset=13, outputs=("y", "mask"))
    np.testing.assert_array_equal(y, X)
    assert mask.dtype == bool and mask.all()
    with pytest.raises(GraphError, match=r"the_node \(Dropout\): training_mode is true with ratio 0.5: "
                                         r"training drops values at random"):
        run("Dropout", {"x": X}, X.shape, opset=13,
            constants={"ratio": np.array(0.5, np.float32), "training_mode": np.array(True)})
    with pytest.raises(GraphError, match=r"the_node \(Dropout\): is_test=0 \(training\) with ratio 0.5"):
        run("Dropout", {"x": X}, X.shape, opset=6)
    (kept,) = run("Dropout", {"x": X}, X.shape, opset=6, is_test=1)
    np.testing.assert_array_equal(kept, X)
