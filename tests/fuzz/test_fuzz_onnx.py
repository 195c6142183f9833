"""Fuzz the ONNX import with mutated graphs: ``tandem.network.graph.load`` and ``tensors``, and ``tandem model
FILE --json`` (CliRunner, in process).

Run the full fuzzer with ``pytest -m fuzz tests/fuzz/test_fuzz_onnx.py`` (2,000 examples, random); the default
run takes a small derandomized slice of the same test (tests/fuzz/conftest.py).

Each example is a seed model and up to three mutations of it. The seeds: small graphs written with
``onnx.helper`` (Conv, Relu, MaxPool, Gemm, Add, Softmax, Reshape, Concat, Transpose, LayerNormalization,
Split, Slice, Gather, Resize, Expand, Tile, Pad, ConstantOfShape, Range, Where, Cast, ...; one in float16),
the builtin models of tandem/network/models.py at small sizes (their builders with few channels, short
sequences), two models in QDQ form (one written here, one by tandem/network/qdq_write.py) and a few of the
corpus' exports (tests/models/corpus: resnet18, squeezenet1_0, bert_block, gpt2_decode). The mutations: an
attribute's value changed (integers, floats, lists and strings: small, zero, negative, huge, of another
length or type, tensors; or a value of its own type), an attribute added (known to some operator, or
unknown) or deleted, a graph input's shape (rank, one size or all: 0 to huge, symbolic, none) or element
type changed, an initializer's dims, type, data (sizes that do not match) or one of its values changed, a
node's input dropped or renamed (to nothing, to a tensor that does not exist, to another tensor), its
operator swapped for another, its domain changed, two nodes swapped (out of order), an output name
duplicated, the opset changed, the serialized bytes truncated.

The property. (a) ``load`` either returns a graph or raises GraphError; a graph whose inputs are all floating
point is computed by ``tensors`` on seeded inputs (``random_inputs``), which either gives every layer's
outputs in their declared shapes and types, and every graph output, or raises GraphError. (b) ``tandem model
FILE --json`` (and ``--int8`` for about one example in four) either exits 0 with one JSON object whose import
check ran against onnxruntime and passed (with ``--int8``, the quantized graph's error measured), or exits 1
or 2 with one ``error:`` line; never a traceback. A QDQ model's check may also find a difference (exit 1,
its JSON saying so) where onnxruntime's int8 sums of weights over 64 saturate (a CPU without VNNI), or
where it does not fuse a QDQ group and rounds its float operator's result otherwise: then each value is
within one quantization step of Tandem's; a float model's, where the model holds an inf or NaN (where it
lands is the implementation's). Every example runs under the fuzzers' 10 s alarm: a size must be
refused before the work it would take. The full fuzzer prints what its examples came to (``pytest -m fuzz
-rP tests/fuzz/test_fuzz_onnx.py``).
"""

from __future__ import annotations

import collections
import functools
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from compiler.backend.llvm import host_cpu
from tandem.cli import onnxruntime_run
from tandem.cli.app import app
from tandem.network import graph as tg
from tandem.network import models, qdq, qdq_write
from tandem.network.operators import OPERATORS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
import corpus  # noqa: E402

RUNNER = CliRunner()
F = TensorProto.FLOAT
I64 = TensorProto.INT64


# ------------------------------------------------------------------------------------------ seeds

def _model(nodes, inputs, outputs, initializers=(), opset: int = 18) -> onnx.ModelProto:
    """A model of ``nodes``; ``inputs`` and ``outputs`` as (name, elem_type, shape); ``initializers`` arrays
    by name."""
    graph = helper.make_graph(
        nodes, "seed", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in dict(initializers).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def _w(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _i(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def seed_conv() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[1, 1], dilations=[1, 1], group=1),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], strides=[1, 1],
                              pads=[0, 0, 1, 1], count_include_pad=0)]
    return _model(nodes, [("x", F, [1, 2, 6, 6])], [("y", F, [1, 3, 3, 3])],
                  {"W": _w(3, 2, 3, 3), "B": _w(3, seed=1)})


def seed_gemm() -> onnx.ModelProto:
    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["g"], transB=1, alpha=0.5, beta=1.0),
             helper.make_node("Add", ["g", "z"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=-1)]
    return _model(nodes, [("x", F, [2, 4]), ("z", F, [2, 3])], [("y", F, [2, 3])],
                  {"W": _w(3, 4), "C": _w(3, seed=2)})


def seed_reshape() -> onnx.ModelProto:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Concat", ["r", "z"], ["c"], axis=0),
             helper.make_node("Transpose", ["c"], ["t"], perm=[1, 0]),
             helper.make_node("Flatten", ["t"], ["y"], axis=1)]
    return _model(nodes, [("x", F, [2, 3, 4]), ("z", F, [1, 12])], [("y", F, [12, 3])],
                  {"shape": _i(2, 12)})


def seed_norm_split() -> onnx.ModelProto:
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("Split", ["n", "split"], ["a", "b"], axis=1),
             helper.make_node("Mul", ["a", "a"], ["y0"]),
             helper.make_node("ReduceMean", ["b", "axes"], ["y1"], keepdims=1)]
    return _model(nodes, [("x", F, [2, 6])], [("y0", F, [2, 2]), ("y1", F, [2, 1])],
                  {"scale": _w(6), "bias": _w(6, seed=3), "split": _i(2, 4), "axes": _i(1)})


def seed_slice_gather() -> onnx.ModelProto:
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Gather", ["s", "idx"], ["g"], axis=1),
             helper.make_node("Unsqueeze", ["g", "uaxes"], ["u"]),
             helper.make_node("Squeeze", ["u", "uaxes"], ["y"])]
    return _model(nodes, [("x", F, [4, 5])], [("y", F, [2, 2])],
                  {"starts": _i(0, 1), "ends": _i(4, 5), "axes": _i(0, 1), "steps": _i(2, 1),
                   "idx": _i(0, 3), "uaxes": _i(0)})


def seed_resize() -> onnx.ModelProto:
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="linear",
                              coordinate_transformation_mode="half_pixel"),
             helper.make_node("Pad", ["r", "pads"], ["p"], mode="constant"),
             helper.make_node("BatchNormalization", ["p", "g", "b", "m", "v"], ["y"], epsilon=1e-5)]
    return _model(nodes, [("x", F, [1, 2, 3, 3])], [("y", F, [1, 2, 8, 8])],
                  {"scales": np.array([1, 1, 2, 2], np.float32), "pads": _i(0, 0, 1, 1, 0, 0, 1, 1),
                   "g": _w(2), "b": _w(2, seed=4), "m": _w(2, seed=5), "v": np.ones(2, np.float32)})


def seed_expand() -> onnx.ModelProto:
    nodes = [helper.make_node("Expand", ["x", "eshape"], ["e"]),
             helper.make_node("Tile", ["e", "repeats"], ["t"]),
             helper.make_node("ConstantOfShape", ["cshape"], ["k"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["t", "k"], ["a"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["rg"]),
             helper.make_node("Mul", ["a", "rg"], ["y"])]
    return _model(nodes, [("x", F, [2, 1])], [("y", F, [2, 6])],
                  {"eshape": _i(2, 3), "repeats": _i(1, 2), "cshape": _i(2, 6), "start": np.float32(0),
                   "limit": np.float32(6), "delta": np.float32(1)})


def seed_where() -> onnx.ModelProto:
    nodes = [helper.make_node("Cast", ["ids"], ["f"], to=F),
             helper.make_node("Greater", ["f", "x"], ["m"]),
             helper.make_node("Where", ["m", "f", "x"], ["w"]),
             helper.make_node("Clip", ["w", "lo", "hi"], ["c"]),
             helper.make_node("Gelu", ["c"], ["y"], approximate="tanh")]
    return _model(nodes, [("ids", I64, [3, 4]), ("x", F, [3, 4])], [("y", F, [3, 4])],
                  {"lo": np.float32(-1), "hi": np.float32(2)}, opset=20)


def seed_half() -> onnx.ModelProto:
    """A float16 graph (as models converted for GPUs are): its check allows float16's rounding."""
    H = TensorProto.FLOAT16
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Sigmoid", ["m"], ["s"]),
             helper.make_node("ReduceSum", ["s", "axes"], ["r"], keepdims=1),
             helper.make_node("Div", ["s", "r"], ["y"])]
    return _model(nodes, [("x", H, [2, 8])], [("y", H, [2, 8])],
                  {"w": _w(8).astype(np.float16), "axes": _i(1)})


def seed_qdq() -> onnx.ModelProto:
    """A quantized model as onnxruntime's quantizer writes one (uint8 activations, int8 weights per output
    channel for the conv, an int32 bias at x_scale * w_scale), its weights within +-60: onnxruntime's int8
    sums are then exact also without VNNI (``onnxruntime_sums_exactly``)."""
    rng = np.random.default_rng(7)
    sx, sc, sw2 = np.float32(0.04), np.float32(0.05), np.float32(0.02)
    sw = np.array([0.01, 0.02, 0.015], np.float32)
    u8, i8, i32 = (lambda v: np.array(v, np.uint8)), (lambda v: np.array(v, np.int8)), np.int32
    inits = {"sx": sx, "zx": u8(128), "sc": sc, "zc": u8(0), "sg": np.float32(0.1), "zg": u8(128),
             "w": rng.integers(-60, 61, (3, 2, 3, 3)).astype(np.int8), "sw": sw, "zw": i8([0, 0, 0]),
             "b": rng.integers(-500, 500, 3).astype(i32), "sb": (sx * sw).astype(np.float32),
             "zb": np.zeros(3, i32), "w2": rng.integers(-60, 61, (4, 27)).astype(np.int8), "sw2": sw2,
             "zw2": i8(0), "b2": rng.integers(-500, 500, 4).astype(i32), "sb2": np.float32(sc * sw2),
             "zb2": i32(0)}
    node = helper.make_node

    def requantized(name: str, scale: str, zero: str) -> list:
        return [node("QuantizeLinear", [name, scale, zero], [f"{name}_q"]),
                node("DequantizeLinear", [f"{name}_q", scale, zero], [f"{name}_d"])]
    nodes = [*requantized("x", "sx", "zx"),
             node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
             node("DequantizeLinear", ["b", "sb", "zb"], ["bd"], axis=0),
             node("Conv", ["x_d", "wd", "bd"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             *requantized("c", "sc", "zc"), node("Relu", ["c_d"], ["r"]), *requantized("r", "sc", "zc"),
             node("MaxPool", ["r_d"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             *requantized("p", "sc", "zc"),
             node("Flatten", ["p_d"], ["f"]), *requantized("f", "sc", "zc"),
             node("DequantizeLinear", ["w2", "sw2", "zw2"], ["w2d"]),
             node("DequantizeLinear", ["b2", "sb2", "zb2"], ["b2d"]),
             node("Gemm", ["f_d", "w2d", "b2d"], ["g"], transB=1),
             node("QuantizeLinear", ["g", "sg", "zg"], ["g_q"]),
             node("DequantizeLinear", ["g_q", "sg", "zg"], ["y"])]
    return _model(nodes, [("x", F, [1, 2, 6, 6])], [("y", F, [1, 4])], inits, opset=13)


def _builtin(make, shape: tuple[int, ...], name: str) -> onnx.ModelProto:
    g = models._Graph(0)
    return g.model(name, [("input", shape)], make(g))


SEEDS = {
    "conv": seed_conv, "gemm": seed_gemm, "reshape": seed_reshape, "norm_split": seed_norm_split,
    "slice_gather": seed_slice_gather, "resize": seed_resize, "expand": seed_expand, "where": seed_where,
    "half": seed_half,
    # the builtin models' builders at small sizes
    "resnet": lambda: _builtin(lambda g: models._resnet(g, (1,), bottleneck=False), (1, 3, 16, 16), "resnet"),
    "bert_encoder": lambda: _builtin(lambda g: models._bert_encoder(g, tokens=4, d=8, heads=2, hidden=16),
                                     (1, 4, 8), "bert_encoder"),
    "vit_block": lambda: _builtin(lambda g: models._vit_block(g, tokens=5, d=8, heads=2, hidden=16),
                                  (1, 5, 8), "vit_block"),
    # quantized models (QDQ, as onnxruntime's quantizer writes them: tandem/network/qdq.py imports them)
    "qdq": seed_qdq,
    "resnet_qdq": lambda: qdq_write.write(tg.load(SEEDS["resnet"]()), 0),
    # the corpus' exports (weights filled at load)
    "resnet18": lambda: corpus.load("resnet18", "torchscript"),
    "squeezenet1_0": lambda: corpus.load("squeezenet1_0", "dynamo"),
    "bert_block": lambda: corpus.load("bert_block", "dynamo"),
    "gpt2_decode": lambda: corpus.load("gpt2_decode", "torchscript"),
}
#: how often each seed is drawn (the large corpus CNNs less often: each example writes and runs them)
WEIGHTS = {"resnet18": 1, "squeezenet1_0": 2}


@functools.cache
def seed_bytes(name: str) -> bytes:
    return SEEDS[name]().SerializeToString()


# ------------------------------------------------------------------------------------------ mutations

HUGE_INTS = [2**31, 2**31 - 1, 2**62, 2**63 - 1, -(2**63), 10**6, 10**9]
INTS = st.one_of(st.integers(-3, 8), st.sampled_from(HUGE_INTS), st.integers(-(2**63), 2**63 - 1))
FLOATS = st.one_of(st.sampled_from([0.0, -1.0, 1.0, 0.5, 1e-30, 1e30, math.inf, -math.inf, math.nan]),
                   st.floats(-10, 10))
STRINGS = st.sampled_from(["", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "linear", "nearest", "cubic",
                           "tanh", "none", "constant", "reflect", "edge", "round_prefer_ceil", "asymmetric",
                           "half_pixel", "align_corners", "tf_crop_and_resize", "bogus", "ij,jk->ik",
                           "not_larger", "DCR", "CRD", "add", "mul"])
TENSORS = st.sampled_from(["f32", "f32[3]", "i64[2]", "f64", "bool", "empty", "u8[2,2]"])
ATTR_VALUES = st.one_of(
    INTS, INTS, FLOATS, STRINGS,
    st.lists(st.one_of(st.integers(-2, 6), st.sampled_from(HUGE_INTS)), max_size=8),
    st.lists(st.integers(0, 4), min_size=1, max_size=6),
    st.lists(FLOATS, min_size=1, max_size=5), st.lists(STRINGS, min_size=1, max_size=3),
    st.integers(0, 8).map(lambda n: ("length", n)),   # the attribute's own list, cut or extended to n
    TENSORS.map(lambda t: ("tensor", t)),
)
ATTR_NAMES = st.one_of(st.sampled_from(sorted({a for op in OPERATORS.values() for a in op.attrs})),
                       st.sampled_from(["bogus", "", "Axis", "value_float", "value_ints", "sparse_value"]))
OP_TYPES = st.one_of(st.sampled_from(sorted(OPERATORS)),
                     st.sampled_from(["Identity", "Constant", "Loop", "If", "LSTM", "Nope", "", "relu",
                                      "QuantizeLinear", "DequantizeLinear", "Scan", "SequenceConstruct"]))
DIMS = st.one_of(st.integers(1, 5), st.integers(0, 3), st.sampled_from([0, -1, 2**29, 2**31, 2**40, 2**62]),
                 st.sampled_from(["N", "batch", ""]))
SHAPES = st.one_of(st.none(), st.lists(DIMS, max_size=6))
ELEM_TYPES = st.one_of(st.integers(0, 26), st.sampled_from([F, F, TensorProto.FLOAT16, TensorProto.DOUBLE,
                                                             I64, TensorProto.BOOL, TensorProto.STRING, 99]))
INDEX = st.integers(0, 1000)   # a node, input, attribute or initializer: taken modulo their number

#: a value for each type an attribute may have, the one of its own type taken (``_same_type``)
INT_LISTS = st.lists(st.one_of(st.integers(-2, 6), st.sampled_from(HUGE_INTS)), max_size=8)
PAYLOADS = st.tuples(INTS, FLOATS, STRINGS, INT_LISTS, st.lists(FLOATS, min_size=1, max_size=4),
                     st.integers(0, 7))
VALUES = st.one_of(st.integers(-3, 8), st.sampled_from(HUGE_INTS + [math.nan, math.inf, -math.inf, 1e30]))

MUTATIONS = st.one_of(
    st.tuples(st.just("set_attr"), INDEX, INDEX, ATTR_VALUES),
    st.tuples(st.just("tweak_attr"), INDEX, INDEX, PAYLOADS),
    st.tuples(st.just("tweak_attr"), INDEX, INDEX, PAYLOADS),
    st.tuples(st.just("input_dim"), INDEX, INDEX, DIMS),
    st.tuples(st.just("init_value"), INDEX, INDEX, VALUES),
    st.tuples(st.just("init_value"), INDEX, INDEX, VALUES),
    st.tuples(st.just("add_attr"), INDEX, ATTR_NAMES, ATTR_VALUES),
    st.tuples(st.just("del_attr"), INDEX, INDEX),
    st.tuples(st.just("input_shape"), INDEX, SHAPES),
    st.tuples(st.just("input_type"), INDEX, ELEM_TYPES),
    st.tuples(st.just("init_dims"), INDEX, st.lists(DIMS.filter(lambda d: isinstance(d, int)), max_size=5)),
    st.tuples(st.just("init_type"), INDEX, ELEM_TYPES),
    st.tuples(st.just("init_data"), INDEX, st.sampled_from(["cut", "extend", "clear", "floats", "ints"])),
    st.tuples(st.just("drop_input"), INDEX, INDEX),
    st.tuples(st.just("rename_input"), INDEX, INDEX,
              st.one_of(st.sampled_from(["", "no_such_tensor"]), INDEX)),
    st.tuples(st.just("op_type"), INDEX, OP_TYPES),
    st.tuples(st.just("domain"), INDEX, st.sampled_from(["ai.onnx", "com.microsoft", "ai.onnx.ml", "x"])),
    st.tuples(st.just("swap_nodes"), INDEX, INDEX),
    st.tuples(st.just("dup_output"), INDEX, INDEX),
    st.tuples(st.just("graph_output"), INDEX, st.sampled_from(["duplicate", "rename", "drop", "add_input"])),
    st.tuples(st.just("opset"), st.one_of(st.sampled_from([1, 6, 7, 9, 11, 12, 13, 17, 18, 20, 21, 22, 23]),
                                          st.sampled_from([0, -1, 99, 2**40]))),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
)


def _tensor(kind: str, name: str = "value"):
    arrays = {"f32": np.array(1.5, np.float32), "f32[3]": np.array([1, 2, 3], np.float32),
              "i64[2]": _i(2, 3), "f64": np.array(0.25), "bool": np.array(True),
              "empty": np.zeros(0, np.float32), "u8[2,2]": np.ones((2, 2), np.uint8)}
    return numpy_helper.from_array(arrays[kind], name)


def _attribute(name: str, value, old=None) -> onnx.AttributeProto:
    """An attribute ``name`` holding ``value`` (a drawn value; ``("length", n)`` the old list cut or
    extended to n; ``("tensor", kind)`` a small tensor)."""
    if isinstance(value, tuple) and value[0] == "length":
        own = list(helper.get_attribute_value(old)) if old is not None and old.ints else [1, 2]
        value = (own * (value[1] + 1))[:value[1]]
    if isinstance(value, tuple) and value[0] == "tensor":
        return helper.make_attribute(name, _tensor(value[1]))
    if isinstance(value, list) and not value:
        return helper.make_attribute(name, [], attr_type=onnx.AttributeProto.INTS)
    return helper.make_attribute(name, value)


def _same_type(old: onnx.AttributeProto, payload: tuple):
    """A new value of ``old``'s type from ``payload`` (an int, a float, a string, a list of ints, of floats,
    a position): for a list of ints, its element at the position changed or the drawn list."""
    number, real, text, ints, reals, position = payload
    kind = old.type
    if kind == onnx.AttributeProto.INTS and old.ints and position % 2:
        own = list(old.ints)
        own[position % len(own)] = number
        return own
    types = onnx.AttributeProto
    return {types.INT: number, types.FLOAT: real, types.STRING: text, types.INTS: ints,
            types.FLOATS: reals}.get(kind, number)


def _pick(items, index: int):
    return items[index % len(items)] if len(items) else None


def _set_shape(value_info, dims) -> None:
    tensor = value_info.type.tensor_type
    tensor.ClearField("shape")
    if dims is None:
        return
    shape = tensor.shape
    shape.SetInParent()
    for d in dims:
        if isinstance(d, str):
            shape.dim.add().dim_param = d
        else:
            shape.dim.add().dim_value = d


def _node_mutation(model: onnx.ModelProto, mutation: tuple) -> None:
    """A mutation of one node (its attributes, inputs, operator, domain, outputs)."""
    kind, index, *rest = mutation
    graph = model.graph
    node = _pick(graph.node, index)
    if node is None:
        return
    if kind in ("set_attr", "tweak_attr"):
        old = _pick(node.attribute, rest[0])
        if old is not None:
            value = _same_type(old, rest[1]) if kind == "tweak_attr" else rest[1]
            old.CopyFrom(_attribute(old.name, value, old))
    elif kind == "add_attr":
        name, value = rest
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend([*kept, _attribute(name, value)])
    elif kind == "del_attr":
        if node.attribute:
            del node.attribute[rest[0] % len(node.attribute)]
    elif kind == "drop_input":
        if node.input:
            del node.input[rest[0] % len(node.input)]
    elif kind == "rename_input":
        if node.input:
            names = [o for n in graph.node for o in n.output] + [t.name for t in graph.initializer]
            new = rest[1] if isinstance(rest[1], str) else _pick(names, rest[1])
            node.input[rest[0] % len(node.input)] = new
    elif kind == "op_type":
        node.op_type = rest[0]
    elif kind == "domain":
        node.domain = rest[0]
    elif kind == "swap_nodes":
        other = rest[0] % len(graph.node)
        first, second = onnx.NodeProto(), onnx.NodeProto()
        first.CopyFrom(node)
        second.CopyFrom(graph.node[other])
        node.CopyFrom(second)
        graph.node[other].CopyFrom(first)
    elif kind == "dup_output":
        other = _pick(graph.node, rest[0])
        if node.output and other.output:
            node.output[0] = other.output[0]


def _tensor_mutation(model: onnx.ModelProto, mutation: tuple) -> None:
    """A mutation of a graph input, an initializer, the graph's outputs or the opset."""
    kind, *rest = mutation
    graph = model.graph
    if kind in ("input_shape", "input_type", "input_dim"):
        value = _pick(graph.input, rest[0])
        if value is None:
            return
        if kind == "input_shape":
            _set_shape(value, rest[1])
        elif kind == "input_dim":
            dims = value.type.tensor_type.shape.dim
            if dims:
                dim = dims[rest[1] % len(dims)]
                if isinstance(rest[2], str):
                    dim.dim_param = rest[2]
                else:
                    dim.dim_value = rest[2]
        else:
            value.type.tensor_type.elem_type = rest[1]
    elif kind in ("init_dims", "init_type", "init_data", "init_value"):
        tensor = _pick(graph.initializer, rest[0])
        if tensor is None:
            return
        if kind == "init_value":
            _set_value(tensor, rest[1], rest[2])
        elif kind == "init_dims":
            del tensor.dims[:]
            tensor.dims.extend(rest[1])
        elif kind == "init_type":
            tensor.data_type = rest[1]
        else:
            _change_data(tensor, rest[1])
    elif kind == "graph_output":
        _output_mutation(graph, rest[0], rest[1])
    elif kind == "opset":
        for entry in model.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = rest[0]


def _set_value(tensor: onnx.TensorProto, position: int, value) -> None:
    """One element of an initializer set to ``value`` (cast to its type, as far as it goes)."""
    try:
        array = numpy_helper.to_array(tensor).copy()
    except Exception:   # data an earlier mutation made unreadable
        return
    if not array.size or array.dtype.kind not in "iuf":
        return
    if array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        value = int(min(max(value, info.min), info.max)) if math.isfinite(value) else info.max
    array.reshape(-1)[position % array.size] = value
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))


def _change_data(tensor: onnx.TensorProto, how: str) -> None:
    """An initializer's data made not to match its dims: cut, extended, cleared, or given in another
    field."""
    if how == "cut":
        if tensor.raw_data:
            tensor.raw_data = tensor.raw_data[: len(tensor.raw_data) // 2]
        for field in ("float_data", "int64_data", "int32_data", "double_data"):
            values = getattr(tensor, field)
            del values[len(values) // 2:]
    elif how == "extend":
        tensor.raw_data = tensor.raw_data + b"\x01\x02\x03\x04\x05\x06\x07"
    elif how == "clear":
        for field in ("raw_data", "float_data", "int64_data", "int32_data", "double_data"):
            tensor.ClearField(field)
    elif how == "floats":
        tensor.float_data.extend([1.0, 2.0])
    else:
        tensor.int64_data.extend([1, 2, 3])


def _output_mutation(graph: onnx.GraphProto, index: int, how: str) -> None:
    if not graph.output:
        return
    value = _pick(graph.output, index)
    if how == "duplicate":
        graph.output.append(value)
    elif how == "rename":
        value.name = "no_such_output"
    elif how == "drop":
        graph.output.remove(value)
    elif graph.input:   # a graph input named as an output too
        graph.output.append(graph.input[index % len(graph.input)])


def mutated(seed: str, mutations: list[tuple]) -> bytes:
    """The serialized seed model with ``mutations`` applied in order."""
    model = onnx.ModelProto()
    model.ParseFromString(seed_bytes(seed))
    cut = None
    for mutation in mutations:
        if mutation[0] == "truncate":
            cut = mutation[1]
        elif mutation[0] in ("input_shape", "input_type", "input_dim", "init_dims", "init_type", "init_data",
                             "init_value", "graph_output", "opset"):
            _tensor_mutation(model, mutation)
        else:
            _node_mutation(model, mutation)
    data = model.SerializeToString()
    return data if cut is None else data[: int(len(data) * cut)]


SEED_NAMES = [name for name in SEEDS for _ in range(WEIGHTS.get(name, 4))]
#: the seeds ``--int8`` is not drawn for: calibrating them takes seconds
FLOAT_ONLY = ("resnet18", "squeezenet1_0")


@st.composite
def cases(draw) -> tuple[str, list[tuple], bool]:
    """(seed, mutations, --int8)."""
    seed = draw(st.sampled_from(SEED_NAMES))
    int8 = seed not in FLOAT_ONLY and draw(st.integers(0, 3)) == 0
    return seed, draw(st.lists(MUTATIONS, max_size=3)), int8


CASES = cases()


# ------------------------------------------------------------------------------------------ the property

#: what the examples run in this process came to: (part, outcome) -> count, printed by the full fuzzer
OUTCOMES: collections.Counter = collections.Counter()


def check_api(path: Path) -> str:
    """``load`` gives a graph or a GraphError; ``tensors`` on seeded float inputs gives every declared
    tensor in its declared shape and type, or a GraphError. Returns the outcome."""
    try:
        graph = tg.load(path)
    except tg.GraphError as exc:
        return f"load refused: {type(exc).__name__}"
    if any(np.dtype(t).kind != "f" for t in graph.input_types.values()):
        return "loaded (inputs not all floats: not computed)"
    try:
        values = tg.tensors(graph, tg.random_inputs(graph, np.random.default_rng(0)))
    except tg.GraphError as exc:
        return f"tensors refused: {type(exc).__name__}"
    for layer in graph.layers:
        for name, shape, dtype in zip(layer.outputs, layer.shapes, layer.dtypes, strict=False):
            if name:
                assert shape is not None, (layer.name, name)
                assert values[name].shape == tuple(shape), (layer.name, name, values[name].shape, shape)
                assert values[name].dtype == np.dtype(dtype), (layer.name, name, values[name].dtype, dtype)
    for name in graph.outputs:
        assert name in values, f"the graph output {name} is not computed"
    return "loaded and computed, shapes and types checked"


@functools.cache
def onnxruntime_sums_exactly() -> bool:
    """Whether onnxruntime's int8 kernels sum exactly here: on a CPU without VNNI its u8 x s8 kernels
    saturate pair sums in int16 (tests/tandem/test_qdq.py), so a QDQ model's run differs from Tandem's exact
    integer graph in a few values, and ``tandem model`` says so (exit 1, its check failed)."""
    cpu = host_cpu()
    return bool(cpu["avx512vnni"] or cpu["avxvnni"])


def may_saturate(path: Path) -> bool:
    """Whether onnxruntime's int8 sums may saturate for the model at ``path`` here: no VNNI, and an int8
    initializer (a weight) of a magnitude over 64 (255 * 64 * 2 <= 32767: a pair of smaller ones cannot)."""
    if onnxruntime_sums_exactly():
        return False
    try:
        weights = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
                   if t.data_type == TensorProto.INT8]
    except Exception:   # unreadable: then the model is refused before any check
        return False
    return any(np.abs(w.astype(np.int64)).max(initial=0) > 64 for w in weights)


def non_finite_constants(path: Path) -> bool:
    """Whether the model at ``path`` holds an inf or NaN among its float initializers or attributes: then
    where such a value lands is the implementation's (IEEE's 0 * inf is NaN where Tandem multiplies a
    padded zero by it; onnxruntime's kernels skip the padding), and a float check may find them apart."""
    model = onnx.load(str(path))
    values = [numpy_helper.to_array(t) for t in model.graph.initializer
              if t.data_type in (F, TensorProto.FLOAT16, TensorProto.DOUBLE)]
    values += [np.asarray(helper.get_attribute_value(a), np.float64) for n in model.graph.node
               for a in n.attribute if a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.FLOATS)]
    return any(not np.all(np.isfinite(v.astype(np.float64))) for v in values)


def within_a_step(path: Path) -> bool:
    """Whether Tandem's integer graph of the QDQ model at ``path`` is within one quantization step of the
    output of onnxruntime's run on the command's input (seed 0): where onnxruntime does not fuse a QDQ group
    (a DequantizeLinear without its zero point) it computes the float operator and rounds, which Tandem's
    fused integer kernels may round the other way."""
    q = qdq.load(path)
    x = tg.random_inputs(q.graph, np.random.default_rng(0))
    got = q.dequantize(q.graph.output, q.run_integer(x)[q.graph.output])
    want = onnxruntime_run.run(str(path), x, None).astype(np.float64)
    step = float(np.max(q.affine[q.graph.output].scale))
    return got.shape == want.shape and float(np.max(np.abs(got - want), initial=0.0)) <= step * (1 + 1e-5)


def check_cli(path: Path, int8: bool) -> str:
    """``tandem model FILE --json``: a checked result, or exit 1 or 2 with one ``error:`` line. Returns the
    outcome."""
    result = RUNNER.invoke(app, ["model", str(path), "--json", *(["--int8"] if int8 else [])])
    out = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    assert "Traceback" not in out, out
    if result.exit_code in (0, 1) and result.stdout.startswith("{"):
        report = json.loads(result.stdout)
        check = report["check"]
        if not check["checked"] and "not held to it: this CPU has no VNNI" in check["detail"]:
            assert result.exit_code == 0 and check["differ"] > 0, (result.exit_code, check)
            return "exit 0, a QDQ model's difference from onnxruntime reported, not held (no VNNI here)"
        rounded = "exact" in check and (may_saturate(path) or within_a_step(path))   # a QDQ model, see above
        special = "exact" not in check and non_finite_constants(path)
        assert check["checked"] is True and (check["passed"] is True or rounded or special), check
        assert (result.exit_code == 0) == check["passed"], (result.exit_code, check)
        if int8:
            assert "rule" in report["int8"], report["int8"]
        return "exit 0, checked against onnxruntime" if check["passed"] else \
            "exit 1, checked: differs, where the model holds inf or NaN" if special else \
            "exit 1, checked: a QDQ model differs (saturating sums, or a group onnxruntime does not fuse)"
    assert result.exit_code in (1, 2), (result.exit_code, out)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    said = "onnxruntime crashed" if "onnxruntime crashed" in errors[0] else \
        "onnxruntime cannot run the model" if "onnxruntime cannot run" in errors[0] else "Tandem refuses"
    return f"exit {result.exit_code}, error: {said}"


def check_case(case: tuple) -> None:
    seed, mutations, int8 = case
    data = mutated(seed, mutations)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{seed}.onnx"
        path.write_bytes(data)
        OUTCOMES["API: " + check_api(path)] += 1
        OUTCOMES[f"CLI{' --int8' if int8 else ''}: " + check_cli(path, int8)] += 1


def test_seed_models_import_compute_and_check() -> None:
    """Every seed, unmutated, imports, computes and passes the CLI's check."""
    for seed in SEEDS:
        check_case((seed, [], False))


def test_mutated_onnx_models_import_or_are_refused_with_a_typed_error(fuzz) -> None:
    OUTCOMES.clear()
    fuzz.check(CASES, check_case, ci_examples=25, slow=True, pinned=[
        # found by this fuzzer: initializers whose data does not fit their dims or type (numpy_helper's
        # ValueError, TypeError, KeyError), also in a QDQ model
        ("vit_block", [("init_dims", 253, [4])], True),
        ("where", [("opset", 0), ("init_type", 453, 99)], False),
        ("vit_block", [("add_attr", 279, "value_ints", 1), ("op_type", 448, "DequantizeLinear"),
                       ("init_type", 521, 24)], True),
        # a graph output no node computes (KeyError in tensors), none at all (IndexError in the command),
        # nodes out of order (KeyError)
        ("gpt2_decode", [("graph_output", 255, "rename")], True),
        ("resnet", [("del_attr", 259, 657), ("graph_output", 457, "drop")], False),
        ("bert_block", [("opset", 6), ("set_attr", 742, 311, ["not_larger", "bogus", "SAME_LOWER"]),
                        ("swap_nodes", 72, 303)], True),
        # a graph input of a type numpy cannot hold (TypeError); attributes of the wrong type (TypeError,
        # UFuncTypeError inside the operators)
        ("gemm", [("input_type", 587, 99)], True),
        ("vit_block", [("add_attr", 0, "axis", -1.0)], True),
        ("norm_split", [("set_attr", 0, 593, ["", ""])], True),
        # numpy's ValueError inside an operator (a Gemm of constants whose inner sizes differ)
        ("resnet", [("rename_input", 654, 371, 423), ("init_data", 215, "ints"), ("del_attr", 133, 127)],
         True),
        # onnxruntime's Fail as a traceback (a Conv of group 0); NaN in both outputs called a difference
        ("resnet", [("set_attr", 0, 0, 0)], True),
        ("norm_split", [("set_attr", 100, 255, math.nan)], False),
        # a huge input with a size of 0 besides: numpy's ValueError in random_inputs
        ("reshape", [("input_shape", 344, [0, 0, 3, 3, 2**40, 2**40])], True),
        # --int8 of a conv weight of 4.6e18: a 66-bit requantization shift (OverflowError)
        ("conv", [("init_value", 467, 211, 2**62), ("init_value", 1000, 313, 0)], True),
        # a QDQ scale of shape [1, 1] (numpy's ValueError in the requantization), a zero point of shape
        # [1, 1, 1, 1, 1] (onnxruntime's Fail); a weight of type int4 (computed; onnxruntime refuses it)
        ("resnet_qdq", [("init_dims", 0, [1, 1])], True),
        ("resnet_qdq", [("init_dims", 1, [1, 1, 1, 1, 1])], False),
        ("resnet18", [("init_type", 1, 22)], False),
        # --int8 of a graph folded to a constant (its input unused): KeyError in the integer graph
        ("expand", [("rename_input", 0, 0, 153)], True),
        # --int8 of a graph computing a bool (a Greater of its activations): KeyError in the integer graph;
        # a Split of num_outputs other than its outputs: onnx's shape inference aborted the process
        ("where", [("input_type", 0, 1)], True),
        ("bert_block", [("set_attr", 2, 1, 2)], False),
        # a QDQ model whose DequantizeLinear omits its zero point: onnxruntime does not fuse the Gemm's group
        # and its float path rounds one value the other way (one step), which the check reports
        ("qdq", [("drop_input", 57, 122)], True),
        # a conv weight of inf: Tandem's 0 * inf in the padding is NaN, onnxruntime skips the padding
        ("conv", [("init_value", 0, 0, math.inf)], False),
        # a LayerNormalization scale of 1e30: the next one's variance overflows float32, its stash type
        ("bert_block", [("init_value", 2, 2, 1e30)], False),
    ])
    if fuzz.profile == "fuzz":   # the outcomes, shown by pytest -s or -rP
        print("\n".join(f"{n:6d}  {outcome}" for outcome, n in sorted(OUTCOMES.items())))
