"""A float network written as a quantized ONNX model in QDQ form (tandem/network/qdq.py reads it back), as
onnxruntime's ``quantize_static`` writes one: uint8 activations, int8 weights, int32 biases.

    model = qdq_write.write(tg.load(models.build("resnet18")), seed=0)   # an onnx.ModelProto

The rule: every activation (the graph input and each layer's output) gets a QuantizeLinear and a
DequantizeLinear with asymmetric uint8 parameters from its calibrated range ``[lo, hi]`` (widened to hold
0): ``scale = (hi - lo) / 255``, ``zero_point = round(-lo / scale)``, the range measured by the float32
reference (tandem/network/graph.py) on ``samples`` standard-normal inputs drawn from ``seed`` (or the
caller's), its min/max or, calibrated by ``mse``, the part of it with the least squared error
(tandem/network/calibrate.py); weights are int8, symmetric, one scale per tensor ``max|w| / 127`` (or per
output channel); a bias is int32 at the scale ``x_scale * w_scale``.
The float layers stay as they are (batch norms already folded into their convolutions by the import), each
between a DequantizeLinear of its inputs and a QuantizeLinear of its output, except a ReLU (or a Clip at 0)
that alone reads a convolution's, GEMM's or add's output: its range quantizes that output and it is left out,
as onnxruntime's quantizer does (uint8's saturation at the zero point is the ReLU; a ReLU6's top is the
calibrated maximum, at most 6).

Used for builtin quantized models (``tandem.network.models``: NAME_qdq) and the tests: onnxruntime runs what
this writes in its integer kernels, and Tandem's import computes the same bits (tandem/network/qdq.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from compiler.ops import reference
from tandem.network import graph as tg
from tandem.network import qdq
from tandem.network.bias_correction import correct_biases
from tandem.network.calibrate import affine_ranges
from tandem.network.graph import Graph, GraphError

OPSET = 20


def quantize(graph: Graph, seed: int = 0, samples: int = 4, per_channel: bool = False,
             inputs: Sequence[Mapping[str, np.ndarray]] | None = None, calibration: str = "max",
             bias_correction: bool = False) -> qdq.AffineGraph:
    """``graph`` quantized by the module's rule and imported back (tandem/network/qdq.py): its integer
    graph is what onnxruntime computes for the QDQ model ``write`` gives; with ``bias_correction``, each
    contraction's bias first corrected for its weights' rounding (tandem/network/bias_correction.py)."""
    if inputs is None:
        inputs = tg.seeded_inputs(graph, seed, samples)
    if bias_correction:
        graph = correct_biases(graph, inputs, lambda layer: rounded_weights(layer, per_channel))
    return qdq.load(write(graph, seed, samples, per_channel, inputs, calibration), where=graph.name)


def rounded_weights(layer: tg.Layer, per_channel: bool) -> np.ndarray:
    """A contraction's weights as the module's rule rounds them to int8, in float."""
    w = layer.weights[1].astype(np.float64)
    at = _along_channels(weight_scale(layer, w, per_channel).astype(np.float64), w.ndim)
    return np.clip(np.rint(w / at), -127, 127) * at


def _along_channels(scale: np.ndarray, ndim: int) -> np.ndarray:
    """A weight scale shaped to divide weights of ``ndim`` axes: one per slice along the first axis (output
    channels), or the one scalar."""
    return scale.reshape((-1,) + (1,) * (ndim - 1)) if scale.ndim else scale


def write(graph: Graph, seed: int = 0, samples: int = 2, per_channel: bool = False,
          inputs: Sequence[Mapping[str, np.ndarray]] | None = None, calibration: str = "max"):
    """``graph`` (imported, float32) as a QDQ ``onnx.ModelProto`` (the module's rule), each activation's
    range calibrated by the ``calibration`` rule (tandem/network/calibrate.py's ``affine_ranges``) on
    ``inputs`` (input dicts; default: ``samples`` seeded random ones)."""
    from onnx import helper, numpy_helper

    _check_floats(graph)
    if inputs is None:
        inputs = tg.seeded_inputs(graph, seed, samples)
    ranges = affine_ranges(graph, inputs, calibration)
    absorbed = _absorbed_activations(graph)   # a ReLU/Clip output -> the conv/GEMM output it replaces
    for relu, producer in absorbed.items():
        ranges[producer] = ranges[relu]
    nodes, inits = [], []
    scales: dict[str, np.float32] = {}   # each activation's scale, for the biases that read it

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def activation(name: str) -> None:   # name -> Q -> DQ -> name + "_dq"
        lo, hi = ranges[name]
        scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
        zero = np.uint8(np.clip(np.rint(-lo / scale), 0, 255))
        scales[name] = scale
        s, z = const(f"{name}_scale", scale), const(f"{name}_zero_point", zero)
        nodes.append(helper.make_node("QuantizeLinear", [name, s, z], [f"{name}_q"], name=f"{name}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", s, z], [f"{name}_dq"],
                                      name=f"{name}_DQ"))

    def quantized_const(name: str, q: np.ndarray, scale: np.ndarray) -> str:
        scale = np.asarray(scale, np.float32)
        zero = np.zeros(scale.shape, q.dtype)
        s, z = const(f"{name}_scale", scale), const(f"{name}_zero_point", zero)
        quantized = const(f"{name}_quantized", q)
        per_axis = {"axis": 0} if scale.ndim else {}   # per output channel: along the first axis
        nodes.append(helper.make_node("DequantizeLinear", [quantized, s, z], [name], name=f"{name}_DQ",
                                      **per_axis))
        return name

    for name in graph.inputs:
        activation(name)
    for layer in graph.layers:
        if layer.output in absorbed:
            continue
        outputs = list(layer.outputs)
        if layer.op == "MatMul" and 2 in layer.weights:   # a folded bias: the MatMul, then an Add of it
            outputs = [f"{layer.output}_matmul"]
            ranges[outputs[0]] = _before_bias(ranges[layer.output], layer.weights[2])
        quantized = {}
        if layer.op in CONTRACTIONS and 1 in layer.weights:
            x_scale = scales[absorbed.get(layer.inputs[0], layer.inputs[0])]
            quantized = _contraction_constants(layer, x_scale, per_channel)
        operands = []
        for position, operand in enumerate(layer.operands):
            if not operand:
                operands.append("")
            elif position not in layer.weights:
                operands.append(f"{absorbed.get(operand, operand)}_dq")
            elif position in quantized:
                operands.append(quantized_const(f"{layer.name}_{'WB'[position - 1]}", *quantized[position]))
            elif not (layer.op == "MatMul" and position == 2):
                operands.append(const(f"{layer.name}_{position}", layer.weights[position]))
        nodes.append(helper.make_node(layer.op, operands, outputs, name=layer.name, **layer.attrs))
        for name in filter(None, outputs):
            activation(name)
        if outputs[0] != layer.output:
            bias = const(f"{layer.name}_bias", layer.weights[2])
            nodes.append(helper.make_node("Add", [f"{outputs[0]}_dq", bias], [layer.output],
                                          name=f"{layer.name}_bias_add"))
            activation(layer.output)
    return _model(graph, nodes, inits, f"{absorbed.get(graph.output, graph.output)}_dq")


def _model(graph: Graph, nodes: list, inits: list, output: str):
    """The QDQ ModelProto of ``nodes`` and initializers ``inits``: the graph's float inputs, its one float
    output read back as ``output`` (a DequantizeLinear's)."""
    from onnx import TensorProto, helper

    shapes = {**graph.inputs, **{n: shape for layer in graph.layers
                                 for n, shape in zip(layer.outputs, layer.shapes, strict=False)}}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in graph.inputs.items()]
    out = helper.make_tensor_value_info(output, TensorProto.FLOAT, list(shapes[graph.output]))
    model = helper.make_model(helper.make_graph(nodes, f"{graph.name}_qdq", inputs, [out], inits),
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model


#: the operators whose weights (and bias) the QDQ model holds quantized
CONTRACTIONS = ("Conv", "Gemm", "MatMul")


def _contraction_constants(layer: tg.Layer, x_scale: np.float32, per_channel: bool
                           ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """A Conv's, Gemm's or MatMul's weights as int8 (position 1) and a Conv's or Gemm's bias as int32 at the
    scale ``x_scale * w_scale`` (position 2), each with its scale (the module's rule; a MatMul's folded bias
    is written as an Add of its float values)."""
    w = layer.weights[1].astype(np.float64)
    w_scale = weight_scale(layer, w, per_channel)
    out = {1: (reference.quantize_linear(w, _along_channels(w_scale, w.ndim), 0, -127, 127).astype(np.int8),
               w_scale)}
    if layer.op in ("Conv", "Gemm") and 2 in layer.weights:
        b_scale = (x_scale * w_scale).astype(np.float32)
        b = np.rint(layer.weights[2].astype(np.float64) / b_scale.astype(np.float64)).astype(np.int32)
        out[2] = (b, b_scale)
    return out


def _before_bias(after: tuple[float, float], bias: np.ndarray) -> tuple[float, float]:
    """The range of a MatMul's products whose sums with ``bias`` span ``after``: it holds every value."""
    lo, hi = after
    return min(0.0, lo - float(np.max(bias))), max(0.0, hi - float(np.min(bias)))


def weight_scale(layer: tg.Layer, w: np.ndarray, per_channel: bool) -> np.ndarray:
    """A Conv's, Gemm's or MatMul's int8 weight scale, ``max|w| / 127`` (symmetric): one per output channel
    where ``per_channel`` and the layer's weights are laid out by output channel first (a Conv's, a
    transposed Gemm's: what onnxruntime's quantizer writes with ``per_channel=True`` and its kernels take),
    else one per tensor."""
    if per_channel and (layer.op == "Conv" or layer.op == "Gemm" and layer.attrs.get("transB")):
        peaks = np.abs(w).reshape(w.shape[0], -1).max(axis=1)
        return (np.maximum(peaks, 1e-30) / 127.0).astype(np.float32)
    return np.float32(max(float(np.max(np.abs(w))), 1e-30) / 127.0)


def _check_floats(graph: Graph) -> None:
    """Every tensor the QDQ model quantizes holds floats: a layer computing integers (an ArgMax's indices)
    has no affine form."""
    for layer in graph.layers:
        for name, dtype in zip(layer.outputs, layer.dtypes, strict=False):
            if name and np.dtype(dtype).kind != "f":
                raise GraphError(f"{graph.name}: node {layer.name} ({layer.op}): its output {name} holds "
                                 f"{dtype} values; a quantized model quantizes float tensors only")


def _absorbed_activations(graph: Graph) -> dict[str, str]:
    """The ReLUs and Clips at 0 whose input is a Conv's, Gemm's or Add's output that nothing else reads: their
    range quantizes that output instead (its zero point at uint8's 0, so saturation is the activation), and
    the node is left out, as onnxruntime's quantizer does."""
    readers = tg.reader_counts(graph.layers)
    producers = {layer.output: layer for layer in graph.layers}
    out = {}
    for layer in graph.layers:
        producer = producers.get(layer.inputs[0]) if layer.inputs else None
        at_zero = layer.op == "Relu" or (layer.op == "Clip" and layer.operand(1, {}) is not None
                                         and float(layer.operand(1, {})) == 0.0)
        if at_zero and producer is not None and producer.op in ("Conv", "Gemm", "Add") \
                and readers.get(producer.output) == 1:
            out[layer.output] = producer.output
    return out
