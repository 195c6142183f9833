"""ConvTranspose, the normalizations, the tensor products and the softmax family as Tandem's ONNX backend
computes them (tandem/network/operators: conv.py, normalization.py, products.py, nn.py), beyond ONNX's own
node cases (tests/tandem/test_onnx_backend.py): ConvTranspose's output size from ``output_shape`` equals
the one from the pads ONNX's formula generates; the N-d transposed convolution of compiler/ops/reference.py
is the scatter it is defined as; each opset's semantics; what ONNX has no case of; and what Tandem does not
implement is refused by name."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from compiler.ops import reference
from tandem.network.graph import GraphError
from tandem.onnx_backend import TandemBackend


def one_node(op: str, inputs: dict[str, np.ndarray], opset: int = 22, out_type: int = TensorProto.FLOAT,
             out_shape: tuple[int, ...] | None = None, **attrs) -> object:
    """A model of one ``op`` node reading ``inputs`` (graph inputs, in order) and writing ``Y`` (of
    ``out_shape`` where ONNX's shape inference leaves it unknown: its function-defined normalizations)."""
    node = helper.make_node(op, list(inputs), ["Y"], **attrs)
    values = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
              for name, x in inputs.items()]
    graph = helper.make_graph([node], op, values, [helper.make_tensor_value_info("Y", out_type, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(op: str, inputs: dict[str, np.ndarray], opset: int = 22, out_shape: tuple[int, ...] | None = None,
        **attrs) -> np.ndarray:
    """``op``'s output on ``inputs`` as Tandem's backend computes it."""
    model = one_node(op, inputs, opset, out_shape=out_shape, **attrs)
    return TandemBackend.prepare(model).run(list(inputs.values()))[0]


def scatter(x: np.ndarray, w: np.ndarray, strides, dilations, groups: int) -> np.ndarray:
    """A transposed convolution by its definition, one product at a time: each input value times each
    kernel tap, added at ``position * stride + tap * dilation`` of its group's output channels."""
    n, c, *size = x.shape
    _, og, *taps = w.shape
    cg = c // groups
    full = [(s - 1) * st + (k - 1) * d + 1
            for s, st, k, d in zip(size, strides, taps, dilations, strict=True)]
    out = np.zeros((n, groups * og, *full), np.int64)
    for b, ci, o in itertools.product(range(n), range(c), range(og)):
        g = ci // cg
        for pos in np.ndindex(*size):
            for tap in np.ndindex(*taps):
                at = tuple(p * st + t * d for p, t, st, d in zip(pos, tap, strides, dilations, strict=True))
                out[(b, g * og + o, *at)] += x[(b, ci, *pos)] * w[(ci, o, *tap)]
    return out


@st.composite
def transposed_convs(draw):
    """A random small transposed convolution: integer data and kernel of 1 to 3 spatial axes, strides,
    dilations, groups, and a (begin, end) crop per axis (negative: zeros added)."""
    rank = draw(st.integers(1, 3))
    groups, cg, og = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    size = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    taps = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    dilations = draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
    crops = [(draw(st.integers(-2, 1)), draw(st.integers(-2, 1))) for _ in range(rank)]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.integers(-9, 10, (draw(st.integers(1, 2)), groups * cg, *size))
    w = rng.integers(-9, 10, (groups * cg, og, *taps))
    return x, w, strides, dilations, groups, crops


@settings(max_examples=60, deadline=None)
@given(transposed_convs())
def test_the_nd_transposed_convolution_is_the_scatter_it_is_defined_as(case):
    x, w, strides, dilations, groups, crops = case
    full = scatter(x, w, strides, dilations, groups)
    widened = np.pad(full, [(0, 0), (0, 0), *[(max(-b, 0), max(-e, 0)) for b, e in crops]])
    want = widened[(slice(None),) * 2 + tuple(slice(max(b, 0), m - max(e, 0))
                                              for (b, e), m in zip(crops, widened.shape[2:], strict=True))]
    got = reference.conv_transpose_nd(x, w, strides, crops, dilations, groups)
    np.testing.assert_array_equal(got, want)


def conv_transpose_1d(opset: int = 22, **attrs) -> list[float]:
    """A ConvTranspose of [1, 2, 3, 4] by [1, 10, 100] with stride 2 (its full result is 9 long)."""
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 4)
    w = np.array([1, 10, 100], np.float32).reshape(1, 1, 3)
    return run("ConvTranspose", {"X": x, "W": w}, opset, strides=[2], **attrs).ravel().tolist()


FULL = [1.0, 10.0, 102.0, 20.0, 203.0, 30.0, 304.0, 40.0, 400.0]


@pytest.mark.parametrize(("output_shape", "auto_pad", "pads"), [
    (8, "NOTSET", [1, 0]),        # ONNX: the odd padding's larger half at the begin ...
    (8, "SAME_LOWER", [1, 0]),
    (8, "SAME_UPPER", [0, 1]),    # ... but at the end for SAME_UPPER
    (5, "NOTSET", [2, 2]),
    (6, "SAME_UPPER", [1, 2]),
])
def test_an_output_shape_crops_what_the_pads_of_onnxs_formula_crop(output_shape, auto_pad, pads):
    assert conv_transpose_1d(output_shape=[output_shape], auto_pad=auto_pad) == conv_transpose_1d(pads=pads)
    assert conv_transpose_1d(pads=pads) == FULL[pads[0]:len(FULL) - pads[1]]


def test_auto_pad_same_asks_for_size_times_stride_and_output_padding_adds_zeros_at_the_end():
    same = conv_transpose_1d(auto_pad="SAME_UPPER")
    assert same == conv_transpose_1d(output_shape=[8], auto_pad="SAME_UPPER") == FULL[:-1]
    assert conv_transpose_1d(output_padding=[1]) == FULL + [0.0]
    assert conv_transpose_1d(output_shape=[10]) == FULL + [0.0]     # one past the full result: a zero
    assert conv_transpose_1d(output_padding=[1], pads=[0, 2]) == FULL[:-1]


def test_what_onnx_leaves_undefined_about_an_output_shape_is_refused_naming_it():
    with pytest.raises(GraphError, match="more than the full result"):
        conv_transpose_1d(output_shape=[11])
    with pytest.raises(GraphError, match="before opset 11 splits the odd total padding 1"):
        conv_transpose_1d(opset=10, output_shape=[8])
    assert conv_transpose_1d(opset=10, output_shape=[7]) == FULL[1:-1]    # an even total: one split


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2], group=2),
    dict(strides=[3, 2], output_padding=[2, 1], group=2),
    dict(strides=[2, 2], output_shape=[8, 5], auto_pad="SAME_LOWER"),
    dict(strides=[2, 2], output_shape=[7, 4]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2], dilations=[2, 1]),
    dict(auto_pad="VALID", strides=[1, 2]),
])
def test_conv_transpose_computes_what_onnxruntime_computes(attrs):
    rt = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the peers extra)")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 4, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    model = one_node("ConvTranspose", {"X": x, "W": w}, **attrs)
    want = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"X": x, "W": w})[0]
    np.testing.assert_allclose(TandemBackend.prepare(model).run([x, w])[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("op", "opset", "attrs", "name"), [
    ("InstanceNormalization", 1, {"consumed_inputs": [0, 0]}, "consumed_inputs"),
    ("LpPool", 18, {"kernel_shape": [2, 2], "count_include_pad": 1}, "count_include_pad"),
])
def test_an_attribute_tandem_does_not_implement_is_refused_by_name(op, opset, attrs, name):
    x = np.ones((1, 2, 3, 3), np.float32)
    inputs = {"X": x, "S": np.ones(2, np.float32), "B": np.zeros(2, np.float32)} if op.startswith("Inst") \
        else {"X": x}
    with pytest.raises(GraphError, match=f"attribute '{name}' is not implemented by Tandem's {op}"):
        TandemBackend.prepare(one_node(op, inputs, opset, out_shape=(1, 2, 2, 2), **attrs))


@pytest.mark.parametrize(("op", "attrs", "reason"), [
    ("LpNormalization", {"p": 3}, "p=3"),
    ("GroupNormalization", {"num_groups": 1, "stash_type": 10}, "stash_type 10"),
    ("Einsum", {"equation": "ij->ii"}, "its output term 'ii' repeats a letter"),    # what ONNX's shape
    ("Einsum", {"equation": "ij->i..."}, "its output has an ellipsis no input has"),  # inference lets by
    ("Einsum", {"equation": "ij->j->i"}, "term 'j->i' is not letters"),
])
def test_an_attribute_value_tandem_does_not_take_is_refused_with_the_reason(op, attrs, reason):
    x = np.ones((2, 2), np.float32)
    inputs = {"X": x} if op != "GroupNormalization" else \
        {"X": np.ones((1, 2, 3), np.float32), "S": np.ones(2, np.float32), "B": np.zeros(2, np.float32)}
    if op == "GroupNormalization":
        model = one_node(op, inputs, 21, out_shape=(1, 2, 3), **attrs)
    else:
        model = one_node(op, inputs, **attrs)
    with pytest.raises(GraphError, match=reason):
        TandemBackend.prepare(model)


def test_global_lp_pool_is_lp_pool_with_the_whole_input_as_its_window():
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    for p in (1, 2, 3):
        whole = run("LpPool", {"X": x}, kernel_shape=[4, 5], p=p)
        np.testing.assert_allclose(run("GlobalLpPool", {"X": x}, p=p), whole, rtol=1e-6)
        np.testing.assert_allclose(whole[..., 0, 0], (np.abs(x) ** p).sum(axis=(2, 3)) ** (1 / p), rtol=1e-5)


def test_mean_variance_normalization_with_its_axes_given_is_onnxs_formula():
    """(ONNX's test_mvn leaves axes at its default, which ONNX's own shape inference fails on: gaps.py.)"""
    x = np.random.default_rng(4).standard_normal((3, 3, 3, 1)).astype(np.float32)
    mean, std = x.mean(axis=(0, 2, 3), keepdims=True), x.std(axis=(0, 2, 3), keepdims=True)
    got = run("MeanVarianceNormalization", {"X": x}, 13, x.shape, axes=[0, 2, 3])
    np.testing.assert_allclose(got, (x - mean) / (std + 1e-9), rtol=1e-5, atol=1e-6)


def test_group_normalization_takes_scale_and_bias_per_group_in_opset_18_and_per_channel_from_21():
    x = np.random.default_rng(5).standard_normal((2, 4, 3)).astype(np.float32)
    per_group = {"X": x, "S": np.array([2, 3], np.float32), "B": np.array([1, -1], np.float32)}
    per_channel = {"X": x, "S": np.array([2, 2, 3, 3], np.float32), "B": np.array([1, 1, -1, -1], np.float32)}
    want = run("GroupNormalization", per_channel, 21, x.shape, num_groups=2)
    got = run("GroupNormalization", per_group, 18, x.shape, num_groups=2)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(GraphError, match="opset 21 takes one per channel"):
        run("GroupNormalization", per_group, 21, x.shape, num_groups=2)


def test_before_opset_13_the_softmax_family_works_on_the_input_flattened_to_2d():
    x = np.random.default_rng(6).standard_normal((2, 3, 4)).astype(np.float32)
    rows = x.reshape(2, 12).astype(np.float64)
    log_softmax = rows - rows.max(axis=1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(run("LogSoftmax", {"X": x}, 11), log_softmax.reshape(x.shape), rtol=1e-6)
    hard = np.zeros_like(rows)
    hard[np.arange(2), rows.argmax(axis=1)] = 1
    np.testing.assert_array_equal(run("Hardmax", {"X": x}, 11), hard.reshape(x.shape))
    assert run("Hardmax", {"X": x}, 13).sum(axis=-1).tolist() == np.ones((2, 3)).tolist()


def test_qlinear_matmul_rounds_half_to_even_and_saturates():
    """``a * b * 0.5`` (zero points 0, output scale 1): 0.5 rounds to 0, 1.5 to 2, 4.5 to 4, and 300
    saturates to 255."""
    a = np.array([[1], [3], [200]], np.uint8)
    b = np.array([[1, 3]], np.uint8)
    scale, one, zero = np.array(0.5, np.float32), np.array(1.0, np.float32), np.array(0, np.uint8)
    model = one_node("QLinearMatMul", {"a": a, "sa": scale, "za": zero, "b": b, "sb": one, "zb": zero,
                                       "sy": one, "zy": zero}, 21, out_type=TensorProto.UINT8)
    got = TandemBackend.prepare(model).run([a, scale, zero, b, one, zero, one, zero])[0]
    assert got.tolist() == [[0, 2], [2, 4], [100, 255]] and got.dtype == np.uint8
