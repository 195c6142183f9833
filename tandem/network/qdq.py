"""Quantized ONNX models (QDQ: QuantizeLinear/DequantizeLinear around float operators, as onnxruntime's
``quantize_static`` writes them): their import, and their integer graph computed as onnxruntime computes it.

    q = qdq.load("resnet18_int8.onnx")        # an AffineGraph (tandem/network/quantized.py's interface)
    q.run_integer({"input": x})               # every tensor, as onnxruntime's kernels compute it

The rule is ONNX's affine quantization: a tensor is ``(q - zero_point) * scale`` with q uint8 or int8, one
float32 scale per tensor (per output channel for weights). Import: a DequantizeLinear of a constant is a
quantized weight or bias; a QuantizeLinear gives the activation it reads its parameters, and the
DequantizeLinear that reads it back is the same tensor; what remains are the float operators, imported as
a graph of their own (tandem/network/graph.py, nothing folded: each layer requantizes). Every activation a
layer reads and writes must be quantized, weights symmetric (zero point 0), a bias int32 at the scale
``x_scale * w_scale`` with zero point 0 (what onnxruntime fuses into its integer kernels; anything else is a
``GraphError`` naming the node).

The integer graph (``AffineGraph.integer_layer``) is onnxruntime 1.32's on x86-64 (its QDQ groups fused into
QLinearConv, QGemm, QLinearAdd, QLinearGlobalAveragePool and an 8-bit MaxPool), arithmetic for arithmetic:

- Conv, Gemm, MatMul by constant weights: int32 sums of ``(x - zx) * w`` plus the bias, then
  ``requantize_scaled`` by ``(sx * sw) / sy`` in float32 (per channel: each channel's ``sw``);
- Add: ``qlinear_add`` (fused multiply-adds in float32, compiler/ops/reference.py);
- GlobalAveragePool: the int32 sum minus ``zx * n``, requantized by ``sx / (sy * n)``;
- MaxPool and the data movement (tandem/network/quantized.py's ``MOVES``: Flatten, Reshape, Transpose,
  Squeeze, Unsqueeze, Slice, Split, Gather, Expand, Tile, Pad, Concat, nearest Resize, DepthToSpace,
  SpaceToDepth, ReduceMax, ReduceMin, GlobalMaxPool, ...) between tensors of equal parameters: the integers
  themselves (a Pad pads with the zero point, a constant moved is quantized as the output), as onnxruntime
  runs them once its QDQ pairs of equal parameters are dropped (what a group computes in float then
  quantizes back to the same integers);
- anything else (a ReLU or Clip the quantizer kept, a MaxPool that changes parameters, a Sigmoid, a Mul of
  two activations, a Softmax, any operator of tandem/network/operators): dequantized to float32, Tandem's
  float operator, quantized again: what onnxruntime does with a QDQ group it does not fuse.

All of it is exact (tests/tandem/test_qdq.py compares each with onnxruntime bit for bit, and whole quantized
networks end to end), except where onnxruntime computes a float operator of its own way (a transcendental
function's approximation, or one of its lookup-table kernels: QLinearSigmoid, QLinearSoftmax, ...), whose
value may round to the neighbouring quantization step. onnxruntime fuses these groups for uint8 activations
(its default on x86); with int8 activations it leaves some convolutions in float32, which no integer graph
reproduces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.ops import reference
from tandem.network import graph as tg
from tandem.network.graph import Graph, GraphError, Layer
from tandem.network.quantized import (
    LinearQuantization,
    QuantizedGraph,
    computed_in_float,
    float_outputs,
    integer_conv,
    looked_up,
    lookup_table,
    max_pool,
    move,
    moved,
    moved_inputs,
)


@dataclass(frozen=True)
class Affine:
    """A tensor's quantization: ``real = (q - zero_point) * scale``, q of ``dtype`` (uint8 or int8);
    ``scale`` is float32, a scalar or one per output channel (weights)."""

    scale: np.ndarray
    zero_point: int
    dtype: str

    @property
    def bounds(self) -> tuple[int, int]:
        info = np.iinfo(self.dtype)
        return int(info.min), int(info.max)

    def same(self, other: Affine) -> bool:
        return (self.zero_point == other.zero_point and self.dtype == other.dtype
                and np.array_equal(self.scale, other.scale))

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Real values ``x`` in this quantization (QuantizeLinear)."""
        return reference.quantize_linear(x, self.scale, self.zero_point, *self.bounds, dtype=self.dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """The real values of ``q`` (DequantizeLinear: float32)."""
        return reference.dequantize_linear(q, self.scale, self.zero_point)


def weight_key(layer: Layer, position: int) -> str:
    """The ``affine`` key of a layer's quantized weight (1) or bias (2)."""
    return f"{layer.name}:{position}"


@dataclass(frozen=True)
class AffineGraph(QuantizedGraph):
    """A quantized ONNX model's graph: the float operators between its QuantizeLinear and DequantizeLinear
    nodes, each Conv's, Gemm's or MatMul's quantized weights (position -> int8 weights, int32 bias), and
    each tensor's quantization (``affine``: activations by name, weights by ``weight_key``); its integer
    graph is the module's rule."""

    graph: Graph
    weights: dict[str, dict[int, np.ndarray]]
    affine: dict[str, Affine]
    #: each element-wise float layer's table of results (``lookup_table``; None: not such a layer)
    tables: dict[str, np.ndarray | None] = field(default_factory=dict, init=False, compare=False, repr=False)
    fuses_activations = False   # every layer requantizes to its own output's parameters

    def quantize_input(self, name: str, x: np.ndarray) -> np.ndarray:
        return self.affine[name].quantize(x)

    def input_quantization(self, name: str) -> LinearQuantization | None:
        a = self.affine[name]
        if a.scale.size != 1:
            return None
        return LinearQuantization(np.float32(a.scale.reshape(-1)[0]), a.zero_point, *a.bounds, a.dtype)

    def dequantize(self, name: str, value: np.ndarray) -> np.ndarray:
        return self.affine[name].dequantize(value).astype(np.float64)

    def integer_outputs(self, layer: Layer, values: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """``layer``'s quantized outputs from its inputs' (the module's rule)."""
        p = self.affine
        out = p[layer.output]
        if moved(layer) and all(p[name].same(out) for name in (*moved_inputs(layer), *layer.outputs) if name):
            return tuple(np.asarray(v).astype(out.dtype) for v in move(layer, values, out.quantize))
        ins = [np.asarray(values[name], np.int64) for name in layer.inputs]
        result = self._integer(layer, ins)
        if result is not None:
            return (result,)
        # a group onnxruntime does not fuse: dequantize, the float operator (float32), quantize; an
        # element-wise one of one input by its table of the 256 results
        source = np.dtype(p[layer.inputs[0]].dtype).type if len(layer.inputs) == 1 else None
        if layer.name not in self.tables:
            self.tables[layer.name] = None if source is None else lookup_table(
                layer, source, p[layer.inputs[0]].dequantize,
                lambda v: out.quantize(np.asarray(v).astype(np.float32)), ins[0].shape)
        if self.tables[layer.name] is not None:
            return (looked_up(self.tables[layer.name], ins[0], source),)
        floats = {name: p[name].dequantize(v) for name, v in zip(layer.inputs, ins, strict=True)}
        return tuple(p[n].quantize(np.asarray(v).astype(np.float32)) if n else v
                     for n, v in zip(layer.outputs, computed_in_float(layer, floats), strict=False))

    def _integer(self, layer: Layer, ins: list[np.ndarray]) -> np.ndarray | None:
        """The quantized output of a group onnxruntime computes in integers (``ins``: its inputs' values,
        int64); None for one it computes in float."""
        op, p = layer.op, self.affine
        out = p[layer.output]
        if op in ("Conv", "Gemm", "MatMul") and layer.name in self.weights:
            w = self.weights[layer.name]
            x = ins[0] - p[layer.inputs[0]].zero_point
            if op == "Conv":
                acc = integer_conv(layer, x, {1: w[1]})
                channel = (1, -1) + (1,) * (acc.ndim - 2)
                bias = w[2].reshape(channel) if 2 in w else 0
                scale = contraction_scale(self, layer).reshape(channel)
            else:
                wt = w[1].T if op == "Gemm" and layer.attrs.get("transB") else w[1]
                acc = np.matmul(x, wt.astype(np.int64))
                bias, scale = (w[2] if 2 in w else 0), contraction_scale(self, layer)
            return reference.requantize_scaled(acc + bias, scale, out.zero_point, *out.bounds
                                               ).astype(out.dtype)
        if op == "Add" and len(ins) == 2:
            return reference.qlinear_add(*ins, *add_constants(self, layer), *out.bounds).astype(out.dtype)
        if op == "GlobalAveragePool":
            count = math.prod(ins[0].shape[2:])
            spatial = tuple(range(2, ins[0].ndim))
            acc = ins[0].sum(axis=spatial, keepdims=True) - p[layer.inputs[0]].zero_point * count
            return reference.requantize_scaled(acc, mean_scale(self, layer, count), out.zero_point,
                                               *out.bounds).astype(out.dtype)
        if op == "MaxPool" and p[layer.inputs[0]].same(out):
            return max_pool(layer, ins[0]).astype(out.dtype)
        return None


def is_qdq(model: Any) -> bool:
    """Whether ``model`` (a ModelProto) holds QuantizeLinear or DequantizeLinear nodes."""
    return any(node.op_type in ("QuantizeLinear", "DequantizeLinear") for node in model.graph.node)


# ------------------------------------------------------------------------------------------ import

def load(model: Any, input_shapes: Mapping[str, tuple[int, ...]] | None = None, where: str | None = None
         ) -> AffineGraph:
    """Import the QDQ model ``model`` (a path or a ModelProto) as an AffineGraph (the module's rule);
    ``where`` names the model in errors."""
    import onnx

    model, named = tg.read(model)
    where = where or named
    graph = model.graph
    consts = {t.name: tg.tensor_array(t, f"{where}: initializer {t.name}") for t in graph.initializer}
    tg.check_nodes(graph, tg.opset_of(model, where), where)
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant":
            consts[node.output[0]] = tg.constant_value(node, f"{where}: node {tg.node_name(node, index)} "
                                                             f"(Constant)")
    params: dict[str, Affine] = {}      # a quantized activation (its float name) -> its parameters
    made_by: dict[str, str] = {}        # a QuantizeLinear's output -> the activation it quantizes
    alias: dict[str, str] = {}          # a DequantizeLinear's output -> that activation
    weights: dict[str, tuple[np.ndarray, Affine]] = {}   # a DequantizeLinear's output -> constant, params
    kept = []
    for index, node in enumerate(graph.node):
        label = f"{where}: node {tg.node_name(node, index)} ({node.op_type})"
        if node.op_type == "Constant":
            continue
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            affine = _affine(node, consts, label)
            source = alias.get(node.input[0], node.input[0])
            if node.op_type == "QuantizeLinear":
                if source in consts:
                    raise GraphError(f"{label}: quantizes a constant; Tandem takes weights stored quantized "
                                     f"(a DequantizeLinear of an integer initializer)")
                if source in params and not params[source].same(affine):
                    raise GraphError(f"{label}: {source} is quantized twice with different parameters")
                params[source], made_by[node.output[0]] = affine, source
            elif source in consts:
                _check_axis(node, consts[source], affine, label)
                weights[node.output[0]] = (consts[source], affine)
            elif source in made_by:
                if not params[made_by[source]].same(affine):
                    raise GraphError(f"{label}: dequantizes {source} with other parameters than its "
                                     f"QuantizeLinear's")
                alias[node.output[0]] = made_by[source]
            else:
                raise GraphError(f"{label}: dequantizes {source}, which no QuantizeLinear writes (an integer "
                                 f"graph input is not supported: give the model float inputs)")
            continue
        renamed = onnx.NodeProto()
        renamed.CopyFrom(node)
        renamed.input[:] = [alias.get(name, name) for name in node.input]
        kept.append(renamed)
    floats = _float_model(model, kept, weights, alias, where)
    g = tg.load(floats, input_shapes, fold=False, where=where)
    float_outputs(g, where)
    affine: dict[str, Affine] = {}
    quantized: dict[str, dict[int, np.ndarray]] = {}
    for name in g.inputs:
        affine[name] = _quantized(params, name, f"{where}: graph input {name}")
    for layer in g.layers:
        label = f"{where}: node {layer.name} ({layer.op})"
        for name in layer.inputs:
            affine[name] = _quantized(params, name, f"{label}: its input {name}")
        for name in filter(None, layer.outputs):
            affine[name] = _quantized(params, name, f"{label}: its output {name}")
        if layer.op in ("Conv", "Gemm", "MatMul"):
            quantized[layer.name] = _contraction_weights(layer, weights, affine, label)
            for position in quantized[layer.name]:
                affine[weight_key(layer, position)] = weights[layer.operands[position]][1]
    return AffineGraph(g, quantized, affine)


def _affine(node, consts: Mapping[str, np.ndarray], label: str) -> Affine:
    """The parameters of a QuantizeLinear/DequantizeLinear node (constant scale and zero point)."""
    from onnx import helper

    for attr in node.attribute:   # axis: _check_axis; the others at their defaults (no blocks, no float8)
        value = helper.get_attribute_value(attr)
        if attr.name != "axis" and (attr.name, value) not in (("block_size", 0), ("saturate", 1),
                                                              ("output_dtype", 0)):
            raise GraphError(f"{label}: attribute {attr.name}={value} is not supported (Tandem takes "
                             f"per-tensor or per-axis quantization of integer types)")
    names = list(node.input) + [""] * (3 - len(node.input))
    if names[1] not in consts or (names[2] and names[2] not in consts):
        raise GraphError(f"{label}: its scale and zero point must be constants")
    scale = np.asarray(consts[names[1]], np.float32)
    if scale.ndim > 1:
        raise GraphError(f"{label}: its scale of shape {list(scale.shape)}; Tandem takes a scalar (per "
                         f"tensor) or a vector (per axis)")
    zero = consts[names[2]] if names[2] else np.zeros((), np.uint8)
    if zero.ndim > 1 or zero.size not in (1, scale.size):
        raise GraphError(f"{label}: its zero point of shape {list(zero.shape)} does not go with its scale of "
                         f"shape {list(scale.shape)} (a scalar, or one per scale)")
    if zero.dtype not in (np.uint8, np.int8, np.int32):
        raise GraphError(f"{label}: zero point of type {zero.dtype}; Tandem takes uint8 and int8 tensors "
                         f"(and int32 biases)")
    if np.unique(zero).size > 1:
        raise GraphError(f"{label}: a zero point per channel; Tandem takes one zero point per tensor")
    if not np.all(scale > 0) or not np.all(np.isfinite(scale)):
        raise GraphError(f"{label}: scales must be positive and finite")
    return Affine(scale, int(zero.reshape(-1)[0]) if zero.size else 0, str(zero.dtype))


def _check_axis(node, q: np.ndarray, affine: Affine, label: str) -> None:
    """A constant's per-axis scales (a DequantizeLinear's ``axis``, ONNX's default 1): one per slice along
    its first axis, as Tandem dequantizes them (a Conv's, or a transposed Gemm's, output channels)."""
    if affine.scale.size == 1:
        return
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    if q.ndim == 0 or not -q.ndim <= axis < q.ndim or axis % q.ndim != 0 or affine.scale.size != q.shape[0]:
        raise GraphError(f"{label}: {affine.scale.size} scales along axis {axis} of a constant of shape "
                         f"{list(q.shape)}; Tandem takes one per slice along axis 0 (output channels)")


def _quantized(params: Mapping[str, Affine], name: str, what: str) -> Affine:
    if name not in params:
        raise GraphError(f"{what} is not quantized (no QuantizeLinear writes it): Tandem runs a quantized "
                         f"model's layers on quantized tensors only")
    if params[name].scale.size != 1 or params[name].dtype not in ("uint8", "int8"):
        raise GraphError(f"{what}: an activation must have one scale and a uint8 or int8 type")
    return params[name]


def _float_model(model, kept: list, weights: Mapping[str, tuple[np.ndarray, Affine]],
                 alias: Mapping[str, str], where: str):
    """The model with its QuantizeLinear/DequantizeLinear nodes gone: the float operators on the
    activations, each dequantized weight an initializer of its float value."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = [numpy_helper.from_array(
        reference.dequantize_linear(q, a.scale.reshape((-1,) + (1,) * (q.ndim - 1)) if a.scale.size > 1
                                    else a.scale, a.zero_point), name) for name, (q, a) in weights.items()]
    used = {name for node in kept for name in node.input}
    inits += [t for t in graph.initializer if t.name in used]
    outputs = []
    for value in graph.output:
        out = onnx.ValueInfoProto()
        out.CopyFrom(value)
        out.name = alias.get(value.name, value.name)
        outputs.append(out)
    if len(outputs) != 1:
        raise GraphError(f"{where}: {len(outputs)} graph outputs; Tandem runs models of one output")
    inputs = [i for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    float_graph = helper.make_graph(kept, graph.name or "quantized", inputs, outputs, inits)
    out = helper.make_model(float_graph, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    return out


def _contraction_weights(layer: Layer, weights: Mapping[str, tuple[np.ndarray, Affine]],
                         affine: Mapping[str, Affine], label: str) -> dict[int, np.ndarray]:
    """A Conv's, Gemm's or MatMul's quantized weights (int8, symmetric) and bias (int32 at ``sx * sw``)."""
    if layer.operands[1] not in weights:
        raise GraphError(f"{label}: its weights must be a quantized constant (a MatMul of two activations is "
                         f"not imported from a quantized model yet)")
    if layer.op == "Gemm" and (layer.attrs.get("transA") or layer.attrs.get("alpha", 1.0) != 1.0
                               or layer.attrs.get("beta", 1.0) != 1.0):
        raise GraphError(f"{label}: a Gemm with transA, alpha or beta")
    w, wa = weights[layer.operands[1]]
    if wa.scale.size > 1 and not (layer.op == "Conv" or layer.op == "Gemm" and layer.attrs.get("transB")):
        raise GraphError(f"{label}: weights with a scale per channel; Tandem takes them for a Conv's or a "
                         f"transposed Gemm's output channels, per tensor otherwise")
    if w.dtype != np.int8 or wa.zero_point != 0:
        raise GraphError(f"{label}: weights must be int8 with zero point 0 (symmetric), not {w.dtype} with "
                         f"zero point {wa.zero_point}")
    out = {1: w}
    if len(layer.operands) > 2 and layer.operands[2]:
        if layer.operands[2] not in weights:
            raise GraphError(f"{label}: its bias must be a quantized constant (int32)")
        b, ba = weights[layer.operands[2]]
        want = np.float32(affine[layer.inputs[0]].scale) * wa.scale
        if b.dtype != np.int32 or ba.zero_point != 0 or ba.scale.size not in (1, want.size) or not np.all(
                ba.scale.reshape(-1) == want.reshape(-1)):
            raise GraphError(f"{label}: its bias must be int32 at the scale x_scale * w_scale with zero "
                             f"point 0 (as onnxruntime's quantizer writes it)")
        out[2] = b
    return out


# ------------------------------------------------------------------------------------------ the integer graph

def contraction_scale(q: AffineGraph, layer: Layer) -> np.ndarray:
    """The float32 requantization scale of a Conv/Gemm/MatMul, per output channel: ``(sx * sw) / sy``."""
    sx, sy = q.affine[layer.inputs[0]].scale, q.affine[layer.output].scale
    sw = q.affine[weight_key(layer, 1)].scale
    channels = layer.shape[1] if layer.op == "Conv" else layer.shape[-1]
    return np.broadcast_to((np.float32(sx) * sw) / np.float32(sy), (channels,)).astype(np.float32)


def mean_scale(q: AffineGraph, layer: Layer, count: int) -> np.float32:
    """The float32 requantization scale of a global average pool of ``count`` values: ``sx / (sy * n)``."""
    sx, sy = np.float32(q.affine[layer.inputs[0]].scale), np.float32(q.affine[layer.output].scale)
    return np.float32(sx / np.float32(sy * np.float32(count)))


def add_constants(q: AffineGraph, layer: Layer) -> tuple[np.float32, np.float32, np.float32]:
    pa, pb, pc = (q.affine[name] for name in (*layer.inputs, layer.output))
    return reference.qlinear_add_constants(pa.scale, pa.zero_point, pb.scale, pb.zero_point, pc.scale,
                                           pc.zero_point)
