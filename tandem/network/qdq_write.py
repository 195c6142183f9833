"""A float network written as a quantized ONNX model in QDQ form (tandem/network/qdq.py reads it back), as
onnxruntime's ``quantize_static`` writes one: uint8 activations, int8 weights, int32 biases.

    model = qdq_write.write(tg.load(models.build("resnet18")), seed=0)   # an onnx.ModelProto

The rule: every activation (the graph input and each layer's output) gets a QuantizeLinear and a
DequantizeLinear with asymmetric uint8 parameters from its calibrated range ``[lo, hi]`` (widened to hold
0): ``scale = (hi - lo) / 255``, ``zero_point = round(-lo / scale)``, the range measured by the float32
reference (tandem/network/graph.py) on ``samples`` standard-normal inputs drawn from ``seed``; weights are
int8, symmetric, one scale per tensor ``max|w| / 127``; a bias is int32 at the scale ``x_scale * w_scale``.
The float layers stay as they are (batch norms already folded into their convolutions by the import), each
between a DequantizeLinear of its inputs and a QuantizeLinear of its output, except a ReLU (or a Clip at 0)
that alone reads a convolution's, GEMM's or add's output: its range quantizes that output and it is left out,
as onnxruntime's quantizer does (uint8's saturation at the zero point is the ReLU; a ReLU6's top is the
calibrated maximum, at most 6).

Used for builtin quantized models (``tandem.network.models``: NAME_qdq) and the tests: onnxruntime runs what
this writes in its integer kernels, and Tandem's import computes the same bits (tandem/network/qdq.py).
"""

from __future__ import annotations

import numpy as np

from compiler.ops import reference
from tandem.network import graph as tg
from tandem.network import qdq
from tandem.network.graph import Graph, GraphError

OPSET = 20


def write(graph: Graph, seed: int = 0, samples: int = 2):
    """``graph`` (imported, float32) as a QDQ ``onnx.ModelProto`` (the module's rule)."""
    from onnx import TensorProto, helper, numpy_helper

    ranges = tg.ranges(graph, seed, samples)
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

    def quantized_const(name: str, q: np.ndarray, scale: np.float32) -> str:
        zero = np.zeros((), q.dtype)
        s, z = const(f"{name}_scale", np.float32(scale)), const(f"{name}_zero_point", zero)
        quantized = const(f"{name}_quantized", q)
        nodes.append(helper.make_node("DequantizeLinear", [quantized, s, z], [name], name=f"{name}_DQ"))
        return name

    for name in graph.inputs:
        activation(name)
    for layer in graph.layers:
        if layer.output in absorbed:
            continue
        if layer.op not in qdq.OPS:
            raise GraphError(f"{graph.name}: layer {layer.name} ({layer.op}): a quantized model holds "
                             f"{', '.join(qdq.OPS)}")
        if layer.op == "MatMul" and 2 in layer.weights:
            raise GraphError(f"{graph.name}: layer {layer.name}: a MatMul with a folded bias (no ONNX form)")
        operands = []
        for position, operand in enumerate(layer.operands):
            if not operand:
                operands.append("")
            elif position not in layer.weights:
                operands.append(f"{absorbed.get(operand, operand)}_dq")
            elif layer.op in ("Conv", "Gemm", "MatMul") and position == 1:
                w = layer.weights[1].astype(np.float64)
                w_scale = np.float32(max(float(np.max(np.abs(w))), 1e-30) / 127.0)
                q = reference.quantize_linear(w, w_scale, 0, -127, 127).astype(np.int8)
                operands.append(quantized_const(f"{layer.name}_W", q, w_scale))
            elif layer.op in ("Conv", "Gemm") and position == 2:
                b_scale = np.float32(scales[absorbed.get(layer.inputs[0], layer.inputs[0])] * w_scale)
                b = np.rint(layer.weights[2].astype(np.float64) / np.float64(b_scale)).astype(np.int32)
                operands.append(quantized_const(f"{layer.name}_B", b, b_scale))
            else:
                operands.append(const(f"{layer.name}_{position}", layer.weights[position]))
        nodes.append(helper.make_node(layer.op, operands, [layer.output], name=layer.name, **layer.attrs))
        activation(layer.output)
    shapes = {**graph.inputs, **{layer.output: layer.shape for layer in graph.layers}}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in graph.inputs.items()]
    last = absorbed.get(graph.output, graph.output)
    output = helper.make_tensor_value_info(f"{last}_dq", TensorProto.FLOAT, list(shapes[graph.output]))
    model = helper.make_model(helper.make_graph(nodes, f"{graph.name}_qdq", inputs, [output], inits),
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model


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
