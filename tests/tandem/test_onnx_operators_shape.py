"""The shape, movement, indexing and resize operators (tandem/network/operators: movement.py, shape.py,
indexing.py, resize.py) as specifications: a shape computation on an activation folds to constants at
import; Split, Squeeze and Pad take their operands from attributes or inputs as each opset defines; Slice
clamps as ONNX says; Resize's coordinate transformations; what ONNX leaves undefined, and an attribute or
value Tandem does not implement, is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tandem.network import graph as tg
from tandem.network.graph import DataDependentShapeError, GraphError
from tandem.onnx_backend import TandemBackend


def model(nodes, inputs, outputs, consts=None, opset=18):
    """A model of ``nodes`` over float32 ``inputs`` {name: shape} with constant initializers ``consts``
    {name: array}; ``outputs`` {name: shape or None (inferred)}."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT if s is not None else TensorProto.UNDEFINED, s)
         for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (consts or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(m, *inputs):
    return TandemBackend.prepare(m).run(list(inputs))


def ints(*values):
    return np.array(values, np.int64)


def test_a_shape_computation_on_an_activation_folds_to_a_constant_reshape_target():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write x.view(x.size(0), -1): the
    Shape nodes make no layers, and the Reshape's target becomes its weight."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
             helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
             helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    m = model(nodes, {"x": [2, 3, 4]}, {"y": None},
              {"zero": ints(0).reshape(()), "axes": ints(0), "minus_one": ints(-1)})
    g = tg.load(m)
    assert [layer.op for layer in g.layers] == ["Reshape"]
    assert g.layers[0].weights[1].tolist() == [2, -1]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert np.array_equal(tg.run_reference(g, {"x": x}), x.reshape(2, 12))


def test_shape_takes_start_and_end_clamped_to_the_rank():
    m = model([helper.make_node("Shape", ["x"], ["s"], start=-2, end=10)], {"x": [2, 3, 4]}, {"s": None})
    assert tg.load(m).constants["s"].tolist() == [3, 4]


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_takes_its_sizes_as_each_opset_gives_them(opset):
    """Before opset 13 the ``split`` attribute, from 13 the second input; from 18 ``num_outputs`` cuts
    parts of ceil(size / n), the last smaller."""
    x = np.arange(7, dtype=np.float32)
    if opset == 11:
        node, consts = helper.make_node("Split", ["x"], ["a", "b", "c"], split=[3, 3, 1]), {}
    elif opset == 13:
        node, consts = helper.make_node("Split", ["x", "split"], ["a", "b", "c"]), {"split": ints(3, 3, 1)}
    else:
        node, consts = helper.make_node("Split", ["x"], ["a", "b", "c"], num_outputs=3), {}
    parts = run(model([node], {"x": [7]}, dict.fromkeys("abc"), consts, opset), x)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]


def test_slice_with_negative_steps_clamps_as_onnx_defines():
    """Stepping backward, a start past the end is clamped to the last element and an end below -size
    (INT_MIN) to -1: through the first element."""
    x = np.arange(6, dtype=np.float32)
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    consts = {"starts": ints(100), "ends": ints(np.iinfo(np.int64).min), "axes": ints(0), "steps": ints(-2)}
    (y,) = run(model([node], {"x": [6]}, {"y": None}, consts, opset=13), x)
    assert y.tolist() == [5, 3, 1]


def test_squeeze_and_unsqueeze_take_axes_as_an_attribute_before_opset_13_and_an_input_after():
    x = np.zeros((1, 3), np.float32)
    old = model([helper.make_node("Unsqueeze", ["x"], ["y"], axes=[-1])], {"x": [1, 3]}, {"y": None},
                opset=11)
    new = model([helper.make_node("Squeeze", ["x", "axes"], ["y"])], {"x": [1, 3]}, {"y": None},
                {"axes": ints(0)}, opset=13)
    assert run(old, x)[0].shape == (1, 3, 1)
    assert run(new, x)[0].shape == (3,)


@pytest.mark.parametrize("mode, want", [("constant", [9, 9, 1, 2, 3, 9]), ("edge", [1, 1, 1, 2, 3, 3]),
                                        ("reflect", [3, 2, 1, 2, 3, 2]), ("wrap", [2, 3, 1, 2, 3, 1])])
def test_pad_modes(mode, want):
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)
    m = model([node], {"x": [3]}, {"y": None}, {"pads": ints(2, 1), "value": np.float32(9)}, opset=19)
    assert run(m, np.array([1, 2, 3], np.float32))[0].tolist() == want


def test_a_negative_pad_cuts():
    node = helper.make_node("Pad", ["x"], ["y"], pads=[-1, 2], value=5.0)
    m = model([node], {"x": [3]}, {"y": None}, opset=2)
    assert run(m, np.array([1, 2, 3], np.float32))[0].tolist() == [2, 3, 5, 5]


def test_pad_wrap_is_refused_by_name_before_opset_19():
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")
    m = model([node], {"x": [3]}, {"y": None}, {"pads": ints(1, 1)}, opset=18)
    with pytest.raises(GraphError, match="mode 'wrap' is not one of constant, reflect, edge"):
        TandemBackend.prepare(m)


def test_resize_nearest_upsampling_with_asymmetric_coordinates_repeats_each_element():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                            coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    m = model([node], {"x": [1, 2]}, {"y": None}, {"scales": np.array([1, 3], np.float32)})
    assert run(m, np.array([[1, 2]], np.float32))[0].tolist() == [[1, 1, 1, 2, 2, 2]]


def test_resize_linear_align_corners_keeps_the_corners():
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode="align_corners")
    m = model([node], {"x": [1, 3]}, {"y": None}, {"sizes": ints(1, 5)})
    assert run(m, np.array([[0, 4, 8]], np.float32))[0].tolist() == [[0, 2, 4, 6, 8]]


def test_upsample_is_resize_with_asymmetric_coordinates_rounding_down():
    node = helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 2.0])
    m = model([node], {"x": [1, 2]}, {"y": [1, 4]}, opset=7)
    assert run(m, np.array([[1, 2]], np.float32))[0].tolist() == [[1, 1, 2, 2]]


def test_a_transformation_another_opset_defines_is_refused_by_name():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"],
                            coordinate_transformation_mode="tf_half_pixel_for_nn")
    m = model([node], {"x": [1, 2]}, {"y": [1, 4]}, {"scales": np.array([1, 2], np.float32)}, opset=13)
    with pytest.raises(GraphError, match="coordinate_transformation_mode 'tf_half_pixel_for_nn' is not one"):
        TandemBackend.prepare(m)


def test_an_unimplemented_attribute_is_refused_by_name():
    """Upsample-1's height_scale and width_scale (an experimental form ONNX replaced at opset 7)."""
    node = helper.make_node("Upsample", ["x"], ["y"], height_scale=2.0, width_scale=2.0)
    m = model([node], {"x": [1, 1, 2, 2]}, {"y": [1, 1, 4, 4]}, opset=6)
    with pytest.raises(GraphError, match="attribute 'height_scale' is not implemented by Tandem's Upsample"):
        TandemBackend.prepare(m)


def test_scatter_with_duplicate_indices_and_no_reduction_is_refused():
    """ONNX leaves the result to the order of the writes; with a reduction it is defined."""
    def scatter(reduction):
        node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], reduction=reduction)
        return model([node], {"x": [3]}, {"y": None}, {"i": ints(1, 1), "u": np.float32([2, 5])})
    x = np.ones(3, np.float32)
    assert run(scatter("add"), x)[0].tolist() == [1, 8, 1]
    with pytest.raises(GraphError, match="duplicate indices with reduction none"):
        run(scatter("none"), x)


def test_an_index_out_of_range_is_refused_naming_the_size():
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    m = model([node], {"x": [3]}, {"y": [1]})
    m.graph.input.append(helper.make_tensor_value_info("i", TensorProto.INT64, [1]))
    with pytest.raises(GraphError, match="out of range for size 3"):
        run(m, np.zeros(3, np.float32), ints(-4))


def test_nonzero_needs_its_output_size_declared_and_checks_it():
    """The count of nonzero elements depends on the values: ONNX inference leaves it unknown, so the import
    refuses a model that does not declare it (the backend then computes it for each run's values); a
    declared size is checked."""
    node = helper.make_node("NonZero", ["x"], ["y"])
    undeclared = model([node], {"x": [4]}, {"y": None})
    with pytest.raises(DataDependentShapeError, match="the shape of its output y is unknown"):
        tg.load(undeclared)
    assert TandemBackend.prepare(undeclared).run([np.float32([0, 3, 0, 1])])[0].tolist() == [[1, 3]]
    declared = model([node], {"x": [4]}, {"y": [1, 2]})
    declared.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    rep = TandemBackend.prepare(declared)
    assert rep.run([np.float32([0, 3, 0, 1])])[0].tolist() == [[1, 3]]
    with pytest.raises(GraphError, match="computes y of shape \\[1, 3\\]"):
        rep.run([np.float32([1, 3, 0, 1])])
