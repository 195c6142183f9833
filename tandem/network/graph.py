"""A network as Tandem sees it: an ONNX model's nodes as layers in order, with every shape known, constant
subgraphs evaluated and each batch norm that follows a convolution folded into it.

    graph = load("model.onnx", {"input": (1, 3, 224, 224)})   # or
    load(tandem.network.models.build("resnet18"))
    for layer in graph.layers: ...              # op, operands, output, attrs, weights, shape, macs
    y = run_reference(graph, {"input": x})                    # numpy, float64 inside, float32 out

Import steps: parse with ``onnx`` (anything else is a ``GraphError`` naming the file); give each graph input
its shape (``input_shapes``, else the model's own, which must be static: a symbolic dimension names the input
and asks for ``--input-shape``); infer every tensor's shape (``onnx.shape_inference``); evaluate nodes whose
inputs are all constants (a Reshape's target shape); fold ``BatchNormalization`` into the ``Conv`` it
follows when the conv's output feeds nothing else: ``W' = W * g``, ``B' = (B - mean) * g + beta`` with
``g = gamma / sqrt(var + eps)`` per output channel (exact in real arithmetic; the folded float32 weights
differ from the unfolded graph's by rounding); fold each Add of a constant vector into the MatMul by
constant weights it follows, as that layer's bias (a dense layer as transformer exporters write it). An
operator outside ``SUPPORTED`` is named with its node.

``run_reference`` computes the graph with compiler/ops/reference.py's operators (the one reference per
operator) and numpy for the data movement (Reshape, Transpose, Flatten).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from compiler.ops import reference
from tandem.flows.flow import RunError

SUPPORTED = ("Conv", "BatchNormalization", "Relu", "Clip", "Add", "Mul", "MaxPool", "AveragePool",
             "GlobalAveragePool", "Flatten", "Gemm", "MatMul", "Reshape", "Transpose", "Softmax",
             "LayerNormalization", "Gelu", "Concat")


class GraphError(RunError):
    """A model Tandem cannot import: not ONNX, an unsupported operator or attribute (named with its node),
    a shape left unknown."""


@dataclass(frozen=True)
class Layer:
    """One node of the imported graph: ``operands`` its ONNX inputs in order ("" for an omitted optional
    one), ``weights`` the constant ones by position, ``inputs`` the activations it reads (graph inputs or
    earlier layers' outputs), ``shape`` its output's shape."""

    name: str
    op: str
    operands: tuple[str, ...]
    output: str
    attrs: dict[str, Any]
    weights: dict[int, np.ndarray]
    shape: tuple[int, ...]
    macs: int = 0

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(n for i, n in enumerate(self.operands) if n and i not in self.weights)

    def operand(self, position: int, values: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The node's input at ``position``: its weight there, the activation it reads, or None (omitted)."""
        if position in self.weights:
            return self.weights[position]
        if position >= len(self.operands) or not self.operands[position]:
            return None
        return values[self.operands[position]]


@dataclass(frozen=True)
class Graph:
    """The imported network: its inputs' shapes, its layers in order, its output."""

    name: str
    inputs: dict[str, tuple[int, ...]]
    layers: tuple[Layer, ...]
    output: str
    folded: tuple[str, ...] = field(default=())   # the batch norms folded into their convs
    biases: tuple[str, ...] = field(default=())   # the bias Adds folded into their MatMuls

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)


def read(model: Any) -> tuple[Any, str]:
    """``model`` (a path to an .onnx file, or an ``onnx.ModelProto``) as a ModelProto, and how errors name
    it."""
    import onnx

    if not isinstance(model, str | Path):
        return model, "the model"
    path = Path(model)
    if not path.is_file():
        raise GraphError(f"{path}: no such model file")
    try:
        return onnx.load(str(path)), str(path)
    except Exception as exc:   # protobuf's DecodeError and friends: the file is not a model
        raise GraphError(f"{path}: not an ONNX model ({type(exc).__name__}: {exc})") from None


def load(model: Any, input_shapes: Mapping[str, tuple[int, ...]] | None = None, fold: bool = True,
         where: str | None = None) -> Graph:
    """Import ``model`` (a path to an .onnx file, or an ``onnx.ModelProto``); ``input_shapes`` gives graph
    inputs their shapes (required for symbolic dimensions). ``fold=False`` keeps batch norms and bias Adds
    as layers of their own (a quantized model requantizes between them); ``where`` names the model in
    errors."""
    import onnx
    from onnx import numpy_helper, shape_inference

    model, named = read(model)
    where = where or named
    graph = model.graph
    if not graph.node:
        raise GraphError(f"{where}: the graph has no nodes (is it an ONNX model?)")
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    shapes = _input_shapes(graph, consts, dict(input_shapes or {}), where)
    for name, shape in shapes.items():
        dim = graph.input[[i.name for i in graph.input].index(name)].type.tensor_type.shape
        del dim.dim[:]
        for d in shape:
            dim.dim.add().dim_value = d
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=True).graph
    except Exception as exc:
        raise GraphError(f"{where}: ONNX shape inference failed: {exc}") from None
    for v in (*inferred.value_info, *inferred.output):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
        if v.type.tensor_type.HasField("shape") and None not in dims:
            shapes.setdefault(v.name, tuple(dims))
    layers: list[Layer] = []
    for node in graph.node:
        label = f"node {node.name or node.output[0]} ({node.op_type})"
        if node.op_type == "Constant":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
            continue
        if node.op_type not in SUPPORTED:
            raise GraphError(f"{where}: {label}: operator {node.op_type} is not supported; Tandem imports "
                             f"{', '.join(SUPPORTED)}")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        weights = {i: consts[n] for i, n in enumerate(node.input) if n in consts}
        out = node.output[0]
        layer = Layer(node.name or out, node.op_type, tuple(node.input), out, attrs, weights,
                      shapes.get(out, ()))
        _check_attrs(layer, label, where)
        if not layer.inputs:   # a constant subgraph: evaluate it now
            consts[out] = evaluate(layer, {}).astype(_dtype_of(layer))
            continue
        if out not in shapes:
            raise GraphError(f"{where}: {label}: the shape of its output {out} is unknown")
        layers.append(layer)
    layers = [_with_macs(layer, shapes) for layer in layers]
    folded_layers, folded, biases = layers, [], []
    if fold:
        folded_layers, folded = _fold_batch_norms(layers)
        folded_layers, biases = _fold_biases(folded_layers)
    output = graph.output[0].name
    return Graph(graph.name or where, {n: shapes[n] for n in _graph_inputs(graph, consts)},
                 tuple(folded_layers), output, tuple(folded), tuple(biases))


def run_reference(graph: Graph, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The graph's output for ``inputs`` (by graph input name), each layer computed exactly (float64) from
    float32 inputs and rounded to float32, as a float32 network computes it."""
    return tensors(graph, inputs)[graph.output]


def random_inputs(graph: Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard-normal float32 arrays for the graph's inputs, drawn from ``rng`` in input order."""
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in graph.inputs.items()}


def ranges(graph: Graph, seed: int, samples: int) -> dict[str, tuple[float, float]]:
    """Every tensor's calibrated range ``(lo, hi)``, widened to hold 0: over ``samples`` inputs from
    ``random_inputs`` with ``seed``, through the float32 reference."""
    rng = np.random.default_rng(seed)
    out: dict[str, tuple[float, float]] = {}
    for _ in range(samples):
        for name, value in tensors(graph, random_inputs(graph, rng)).items():
            lo, hi = out.get(name, (0.0, 0.0))
            if value.size:
                lo, hi = min(lo, float(value.min())), max(hi, float(value.max()))
            out[name] = (lo, hi)
    return out


def tensors(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor ``run_reference`` computes, by name (the graph inputs too)."""
    values: dict[str, np.ndarray] = {}
    for name, shape in graph.inputs.items():
        if name not in inputs:
            raise GraphError(f"{graph.name}: no array for the graph input {name}")
        x = np.asarray(inputs[name], np.float32)
        if x.shape != shape:
            raise GraphError(f"{graph.name}: input {name}: expected shape {list(shape)}, but got "
                             f"{list(x.shape)}")
        values[name] = x
    for layer in graph.layers:
        values[layer.output] = evaluate(layer, values).astype(np.float32)
    return values


# ------------------------------------------------------------------------------------------ import helpers

def _graph_inputs(graph, consts: Mapping[str, np.ndarray]) -> list[str]:
    return [i.name for i in graph.input if i.name not in consts]


def _input_shapes(graph, consts, given: dict[str, tuple[int, ...]], where: str) -> dict[str, tuple[int, ...]]:
    names = _graph_inputs(graph, consts)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise GraphError(f"{where}: --input-shape names {unknown[0]}, which is not a graph input (inputs: "
                         f"{', '.join(names)})")
    shapes = {}
    for value in graph.input:
        if value.name not in names:
            continue
        if value.name in given:
            shapes[value.name] = tuple(int(d) for d in given[value.name])
            continue
        dims = value.type.tensor_type.shape.dim
        static = [d.dim_value for d in dims if d.HasField("dim_value") and d.dim_value > 0]
        if len(static) != len(dims) or not dims:
            shown = [d.dim_param or "?" if not d.HasField("dim_value") else d.dim_value for d in dims]
            raise GraphError(f"{where}: input {value.name} has the dynamic shape {shown}; give it with "
                             f"--input-shape {value.name}=1x3x224x224 (its real sizes)")
        shapes[value.name] = tuple(static)
    return shapes


def _check_attrs(layer: Layer, label: str, where: str) -> None:
    """Refuse the attribute values the reference (and the targets) do not take."""
    a = layer.attrs
    if layer.op in ("Conv", "MaxPool", "AveragePool"):
        pads, strides = a.get("pads", [0] * 4), a.get("strides", [1, 1])
        if len(set(pads)) > 1 or len(set(strides)) > 1 or a.get("auto_pad", "NOTSET") != "NOTSET":
            raise GraphError(f"{where}: {label}: pads {list(pads)} and strides {list(strides)} must be the "
                             f"same on every side (no auto_pad)")
        if len(set(a.get("dilations", [1, 1]))) > 1:
            raise GraphError(f"{where}: {label}: dilations must be the same in both directions")
    if layer.op == "AveragePool" and any(a.get("pads", [0])):
        raise GraphError(f"{where}: {label}: a padded average pool is not supported")
    if layer.op == "Gelu" and a.get("approximate", "none") not in ("none", "tanh"):
        raise GraphError(f"{where}: {label}: approximate={a['approximate']!r}")
    if layer.op == "LayerNormalization" and a.get("axis", -1) not in (-1, len(layer.shape) - 1):
        raise GraphError(f"{where}: {label}: layer norm over axis {a['axis']}; Tandem normalizes the last "
                         f"axis")


def _dtype_of(layer: Layer) -> type:
    return np.int64 if layer.op in ("Reshape", "Concat") and not layer.inputs else np.float32


def _with_macs(layer: Layer, shapes: Mapping[str, tuple[int, ...]]) -> Layer:
    """``layer`` with its multiply-accumulates counted (convolutions and matrix products)."""
    out = math.prod(layer.shape)
    if layer.op == "Conv":
        w = layer.weights[1]
        return replace(layer, macs=out * math.prod(w.shape[1:]))
    if layer.op in ("MatMul", "Gemm"):
        a = shapes[layer.inputs[0]] if layer.inputs else layer.weights[0].shape
        k = a[-1] if not (layer.op == "Gemm" and layer.attrs.get("transA")) else a[0]
        return replace(layer, macs=out * k)
    return layer


def reader_counts(layers: Sequence[Layer]) -> dict[str, int]:
    """How many layers read each tensor."""
    readers: dict[str, int] = {}
    for layer in layers:
        for name in layer.inputs:
            readers[name] = readers.get(name, 0) + 1
    return readers


def _fold(layers: list[Layer], merge: Callable[[Layer, Layer], Layer | None]
          ) -> tuple[list[Layer], list[str]]:
    """Each layer with one activation input that an earlier layer alone produces for it, folded into that
    producer where ``merge(producer, layer)`` gives the merged layer (None: not this pair); the folded
    layers' names."""
    readers = reader_counts(layers)
    by_output = {layer.output: i for i, layer in enumerate(layers)}
    kept: list[Layer | None] = list(layers)
    folded = []
    for i, layer in enumerate(layers):
        j = by_output.get(layer.inputs[0]) if len(layer.inputs) == 1 else None
        if j is None or kept[j] is None or readers.get(layers[j].output) != 1:
            continue
        merged = merge(layers[j], layer)
        if merged is not None:
            kept[j], kept[i] = merged, None
            folded.append(layer.name)
    return [layer for layer in kept if layer is not None], folded


def _fold_batch_norms(layers: list[Layer]) -> tuple[list[Layer], list[str]]:
    """Each BatchNormalization whose input is a Conv's output that nothing else reads, folded into it."""
    def merge(conv: Layer, bn: Layer) -> Layer | None:
        if bn.op != "BatchNormalization" or set(bn.weights) != {1, 2, 3, 4} or conv.op != "Conv":
            return None
        gamma, beta, mean, var = (bn.weights[k].astype(np.float64) for k in (1, 2, 3, 4))
        g = gamma / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        w = conv.weights[1].astype(np.float64)
        b = conv.weights.get(2, np.zeros(w.shape[0])).astype(np.float64)
        weights = {1: (w * g[:, None, None, None]).astype(np.float32),
                   2: ((b - mean) * g + beta).astype(np.float32)}
        return replace(conv, operands=(conv.operands[0], "W", "B"), output=bn.output, weights=weights,
                       shape=bn.shape)
    return _fold(layers, merge)


def _fold_biases(layers: list[Layer]) -> tuple[list[Layer], list[str]]:
    """Each Add of a constant vector over the last axis whose other input is a MatMul by constant weights
    that nothing else reads, folded into it as its bias (``weights[2]``): how transformer exporters write
    a dense layer, made one layer as a Gemm is."""
    def merge(mm: Layer, add: Layer) -> Layer | None:
        if add.op != "Add" or len(add.weights) != 1 or mm.op != "MatMul" or set(mm.weights) != {1}:
            return None
        (bias,) = add.weights.values()
        if bias.ndim != 1 or bias.size != mm.shape[-1] or add.shape != mm.shape:
            return None
        return replace(mm, operands=(mm.operands[0], mm.operands[1], "B"), output=add.output,
                       weights={1: mm.weights[1], 2: bias}, shape=add.shape)
    return _fold(layers, merge)


# ------------------------------------------------------------------------------------------ evaluation

def evaluate(layer: Layer, values: Mapping[str, np.ndarray]) -> np.ndarray:
    """One layer, exactly (float64), from its operands (``values``: the activations by name)."""
    a, op = layer.attrs, layer.op

    def arg(position: int) -> np.ndarray:
        x = layer.operand(position, values)
        return x.astype(np.float64) if x.dtype.kind == "f" else x

    def given(position: int) -> bool:
        x = layer.operand(position, values)
        return x is not None and x.size > 0

    if op == "Conv":
        pad, stride = a.get("pads", [0])[0], a.get("strides", [1])[0]
        out = reference.conv_nd(arg(0), arg(1), stride, pad, a.get("dilations", [1])[0], a.get("group", 1))
        return out + arg(2).reshape(1, -1, 1, 1) if given(2) else out
    if op == "BatchNormalization":
        x, gamma, beta, mean, var = (arg(k) for k in range(5))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        g = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
        return (x - mean.reshape(shape)) * g.reshape(shape) + beta.reshape(shape)
    if op == "Relu":
        return reference.clip(arg(0), 0, None)
    if op == "Clip":
        lo = float(arg(1)) if given(1) else a.get("min")
        hi = float(arg(2)) if given(2) else a.get("max")
        return reference.clip(arg(0), lo, hi)
    if op == "Add":
        return reference.add(arg(0), arg(1))
    if op == "Mul":
        return arg(0) * arg(1)
    if op in ("MaxPool", "AveragePool"):
        x, k = arg(0), a["kernel_shape"]
        pad, stride = a.get("pads", [0])[0], a.get("strides", [1])[0]
        if pad:
            x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
        kind = "max" if op == "MaxPool" else "avg"
        return np.stack([reference.pool2d(image, tuple(k), stride, kind) for image in x])
    if op == "GlobalAveragePool":
        return np.stack([reference.pool2d(image, image.shape[1:], 1, "avg") for image in arg(0)])
    if op == "Flatten":
        x, axis = arg(0), a.get("axis", 1)
        return x.reshape(math.prod(x.shape[:axis]), -1)
    if op == "Gemm":
        x, w = arg(0), arg(1)
        x = x.T if a.get("transA") else x
        w = w.T if a.get("transB") else w
        out = a.get("alpha", 1.0) * reference.dense(x, w.T)
        return out + a.get("beta", 1.0) * arg(2) if given(2) else out
    if op == "MatMul":   # with a bias folded into it (weights[2], over the last axis)
        out = np.matmul(arg(0), arg(1))
        return out + arg(2) if given(2) else out
    if op == "Reshape":
        x, target = arg(0), [int(d) for d in layer.operand(1, values)]
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
        return x.reshape(target)
    if op == "Transpose":
        return np.transpose(arg(0), a.get("perm"))
    if op == "Softmax":
        return reference.softmax(arg(0), axis=a.get("axis", -1))
    if op == "LayerNormalization":
        return reference.layer_norm(arg(0), arg(1), arg(2) if given(2) else 0.0, a.get("epsilon", 1e-5))
    if op == "Gelu":
        x = arg(0)
        if a.get("approximate", "none") == "tanh":
            return reference.gelu_tanh(x)
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    if op == "Concat":
        return reference.concat([arg(k) for k in range(len(layer.operands))], axis=a["axis"])
    raise GraphError(f"{layer.name}: operator {op} has no reference")
