"""What an int8 network offers its callers, whatever its quantization scheme: ``QuantizedGraph``, the base
of one type per scheme (tandem/network/quantize.py's ``PowerOfTwoGraph``: per-tensor power-of-two
exponents, VTA's rule; tandem/network/qdq.py's ``AffineGraph``: a quantized ONNX model's scales and zero
points), and the integer max pool both schemes compute.

    values = q.run_integer({"input": x})                       # every tensor of the integer graph
    q.compare_output(values[q.graph.output], float_output)      # dequantized, against a float run

A scheme's type says how a graph input is quantized (``quantize_input``), how an integer tensor reads back
as real values (``dequantize``) and what each layer computes in integers (``integer_outputs``: every output
of the layer, exact, the per-layer oracle of the quantized network on every target; ``integer_layer`` its
first); what follows from those three is here.

Data movement. The operators that only move or select values (``MOVES``: reshaping, transposing, slicing,
splitting, gathering by constant indices, expanding, tiling, padding, concatenating, nearest-neighbour
resizing, depth/space rearrangement, max and min reductions, Dropout at inference) compute the same on the
integers as on the real values they stand for, when every tensor they move in and out has one
quantization: both schemes then compute them on the integers with the float reference's own operator
functions (``move``: tandem.network.graph.evaluate on int64 arrays), a constant they move (a Concat's
constant part, a Pad's constant value) quantized as their output is. Layers with several outputs (Split)
write each (``run_integer``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from tandem.network.graph import Graph, GraphError, Layer, evaluate, evaluate_all, random_inputs, tensors
from tandem.network.operators import OperatorError


@dataclass(frozen=True)
class LinearQuantization:
    """float32 ``x`` to integers as onnxruntime's QuantizeLinear computes them
    (``reference.quantize_linear``): ``x / scale`` in float32, clamped to [lo - zero_point, hi - zero_point]
    (a nan to the least), rounded half to even, plus ``zero_point``, of ``dtype``."""

    scale: np.float32
    zero_point: int
    lo: int
    hi: int
    dtype: str


class QuantizedGraph(ABC):
    """An imported graph (tandem/network/graph.py) in 8-bit integers: ``graph`` and each Conv's, Gemm's or
    MatMul's quantized weights (``weights``: layer name -> {operand position: int array}); a scheme's type
    (a frozen dataclass) holds them with its quantization parameters."""

    graph: Graph
    weights: dict[str, dict[int, np.ndarray]]
    #: whether a ReLU that alone reads a conv's, GEMM's or add's output keeps that output's quantization,
    #: so that a target runs it as the step's epilogue (tandem/network/steps.py)
    fuses_activations: ClassVar[bool]

    @abstractmethod
    def quantize_input(self, name: str, x: np.ndarray) -> np.ndarray:
        """The float graph input ``name`` quantized (the scheme's integer type)."""

    def input_quantization(self, name: str) -> LinearQuantization | None:
        """How ``quantize_input`` quantizes float32 input ``name``, where it is one ``LinearQuantization``
        (a kernel may then quantize it: ``compiler.ops.network.quantize_blocked``); None where not."""
        return None

    @abstractmethod
    def dequantize(self, name: str, value: np.ndarray) -> np.ndarray:
        """The integers ``value`` of tensor ``name`` as the real values they stand for (float64)."""

    @abstractmethod
    def integer_outputs(self, layer: Layer, values: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """``layer``'s outputs in the integer graph (in the order of ``layer.outputs``; an omitted one's place
        may hold anything, or be missing at the end), from the integer ``values`` of its inputs."""

    def integer_layer(self, layer: Layer, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """``layer``'s (first) output in the integer graph, from the integer ``values`` of its inputs."""
        return self.integer_outputs(layer, values)[0]

    def write_outputs(self, layer: Layer, values: dict[str, np.ndarray]) -> None:
        """Compute ``layer`` in the integer graph on ``values`` and store each of its outputs there."""
        for name, value in zip(layer.outputs, self.integer_outputs(layer, values), strict=False):
            if name:
                values[name] = value

    def run_integer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every tensor of the integer graph for float ``inputs`` (quantized first), in the scheme's integer
        types (the float-computed layers' results quantized too)."""
        values = {name: self.quantize_input(name, inputs[name]) for name in self.graph.inputs}
        for layer in self.graph.layers:
            self.write_outputs(layer, values)
        return values

    def check_against_float(self, seed: int = 1, float_graph: Graph | None = None) -> dict[str, float]:
        """How far the quantized network's output is from the float32 one (``float_graph``'s, the model it
        quantizes; default its own graph) on a seeded input: the relative L2 error and, for a classifier,
        whether the top class agrees."""
        reference = float_graph or self.graph
        inputs = random_inputs(reference, np.random.default_rng(seed))
        want = tensors(reference, inputs)[reference.output].astype(np.float64)
        return self.compare_output(self.run_integer(inputs)[self.graph.output], want)

    def compare_output(self, output: np.ndarray, want: np.ndarray) -> dict[str, float]:
        """The integer network ``output`` (dequantized) against a float ``want``: the relative L2 error and
        whether the top output (a classifier's class) agrees."""
        got = self.dequantize(self.graph.output, output)
        want = np.asarray(want, np.float64)
        if got.shape != want.shape:
            raise GraphError(f"{self.graph.name}: the quantized output has shape {got.shape}, not "
                             f"{want.shape}")
        rel = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        return {"relative_l2": rel, "top1_agrees": float(np.argmax(got) == np.argmax(want))}


def max_pool(layer: Layer, x: np.ndarray) -> np.ndarray:
    """A max pool on integers (int64): a padded position never holds a window's maximum."""
    return evaluate(layer, {layer.inputs[0]: np.asarray(x, np.int64)})


def integer_conv(layer: Layer, x: np.ndarray, weights: Mapping[int, np.ndarray]) -> np.ndarray:
    """A Conv layer's exact sums (int64) of integer ``x`` by integer ``weights`` (position -> array: 1 the
    kernel, 2 the bias if any), with every attribute of the layer."""
    operands = (layer.operands[0], "W") + (("B",) if 2 in weights else ())
    return evaluate(replace(layer, operands=operands, weights=dict(weights)),
                    {layer.operands[0]: np.asarray(x, np.int64)})


def float_outputs(graph: Graph, where: str) -> None:
    """Refuse a layer that asks for an output besides its first that is not floating-point (a MaxPool's
    indices, a Dropout's mask): an int8 graph quantizes real values, not indices or truth values."""
    for layer in graph.layers:
        for name, dtype in zip(layer.outputs[1:], layer.dtypes[1:], strict=False):
            if name and np.dtype(dtype).kind != "f":
                raise GraphError(f"{where}: node {layer.name} ({layer.op}): its output {name} holds {dtype} "
                                 f"values; Tandem's int8 graph quantizes floating-point tensors only")


# ------------------------------------------------------------------------------------------ data movement

#: the operators that only move or select values, with the positions of the operands whose values they move
#: (None: every operand, a Concat's); each other operand (shapes, axes, indices, pads) must be a constant
MOVES: dict[str, tuple[int, ...] | None] = {
    **dict.fromkeys(("Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Split", "Gather",
                     "GatherElements", "GatherND", "Expand", "Tile", "Resize", "Upsample", "DepthToSpace",
                     "SpaceToDepth", "ReduceMax", "ReduceMin", "GlobalMaxPool", "Dropout", "Identity"), (0,)),
    "Pad": (0, 2),   # the data and the constant it pads with
    "Concat": None,
}


def moved(layer: Layer) -> tuple[int, ...]:
    """The positions of the operands whose values ``layer`` moves to its outputs, if it is a move (the
    module's rule: ``MOVES``, its other operands constants, a Resize or Upsample in nearest mode, a Pad's
    constant value an operand, its outputs floating-point); () if it computes new values."""
    if layer.op not in MOVES or any(name and np.dtype(dtype).kind != "f"
                                    for name, dtype in zip(layer.outputs, layer.dtypes, strict=False)):
        return ()
    if layer.op in ("Resize", "Upsample") and layer.attrs.get("mode", "nearest") != "nearest":
        return ()
    if layer.op == "Pad" and layer.opset < 11 and layer.attrs.get("value", 0.0) != 0:
        return ()
    data = MOVES[layer.op]
    positions = tuple(range(len(layer.operands))) if data is None else data
    shapes = [i for i, name in enumerate(layer.operands) if name and i not in positions]
    if any(i not in layer.weights for i in shapes):
        return ()
    return tuple(i for i in positions if i < len(layer.operands) and layer.operands[i])


def view_of(layer: Layer, ndim: int, shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray] | None:
    """How a reshape, a transpose or a Gather by one constant index views an input of ``ndim`` dimensions
    as its output of ``shape`` (``tandem.network.inference``'s view runner): a reshape raises ValueError
    where numpy cannot view it; None for a Gather by other than one constant index."""
    if layer.op == "Transpose":
        perm = layer.attrs.get("perm", tuple(reversed(range(ndim))))
        return lambda x: np.transpose(x, perm)
    if layer.op == "Gather":
        index = layer.weights.get(1)
        if index is None or np.ndim(index) != 0 or 0 in layer.weights:
            return None
        at = (slice(None),) * (layer.attrs.get("axis", 0) % ndim) + (int(index),)
        return lambda x: x[at]
    return lambda x: np.reshape(x, shape, copy=False)


def moved_inputs(layer: Layer) -> tuple[str, ...]:
    """The activations a move moves (its data operands that are not constants)."""
    return tuple(layer.operands[i] for i in moved(layer) if i not in layer.weights)


def move(layer: Layer, values: Mapping[str, np.ndarray], constant: Callable[[np.ndarray], np.ndarray]
         ) -> tuple[np.ndarray, ...]:
    """A move's outputs on integers (int64): the operator's own function on its inputs' integers, each
    constant it moves ``constant`` (quantized as its output is); a constant-mode Pad pads with
    ``constant(0)`` where it gives no value (the integer that stands for 0)."""
    data = moved(layer)
    weights = {i: constant(w) if i in data else w for i, w in layer.weights.items()}
    operands, attrs = layer.operands, layer.attrs
    if layer.op == "Pad" and attrs.get("mode", "constant") == "constant":
        zero = constant(np.zeros((), np.float32))
        if layer.opset < 11:   # the value an attribute (0: ``moved``)
            attrs = {**attrs, "value": float(zero)}
        elif 2 not in weights and (len(operands) < 3 or not operands[2]):
            weights[2] = zero
            operands = (*operands[:2], "constant_value", *operands[3:])
    ints = {name: np.asarray(values[name], np.int64) for name in layer.inputs}
    try:
        return evaluate_all(replace(layer, operands=operands, attrs=attrs, weights=weights), ints)
    except OperatorError as exc:
        raise GraphError(f"node {layer.name} ({layer.op}): {exc}") from None


def computed_in_float(layer: Layer, floats: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Every output of a layer the integer graph computes in float, from its inputs' real values."""
    try:
        return evaluate_all(layer, floats)
    except OperatorError as exc:
        raise GraphError(f"node {layer.name} ({layer.op}): {exc}") from None


#: the element-wise float operators of one input: computed on every value an 8-bit input can hold, once,
#: then looked up (``lookup_table``)
UNARY = frozenset({"Gelu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs",
                   "Softplus", "Softsign", "Elu", "Selu", "Celu", "LeakyRelu", "HardSigmoid", "HardSwish",
                   "Mish", "Sin", "Cos", "ThresholdedRelu"})
#: the element-wise float operators of one input and constants that vary along the channels (axis 1) at
#: most: computed on every value an 8-bit input can hold in every channel, once (a table per channel)
PER_CHANNEL = frozenset({"BatchNormalization", "Mul", "Add", "Sub", "Div", "PRelu", "Max", "Min"})


def lookup_table(layer: Layer, dtype: type, dequantize: Callable[[np.ndarray], np.ndarray],
                 quantize: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...]) -> np.ndarray | None:
    """An element-wise float ``layer`` of one 8-bit input as the integer graph computes it, for every value
    of the input's ``dtype`` in order: its float operator on them (``computed_in_float``), ``quantize``d;
    the layer's output is this table indexed by its input's values less ``dtype``'s minimum (the same result
    per element, computed on 256 values instead of every element: a transformer's GELU over [128, 3072]
    took 18 ms in float64). A ``UNARY`` layer's table is [256], as is a ``PER_CHANNEL`` one's whose
    constants are one value each (a Mul by 1/sqrt(d)); another ``PER_CHANNEL`` one's (an unfolded
    BatchNormalization of a quantized model) is [C, 256], a row per channel. ``shape``: the input's, which
    a ``PER_CHANNEL`` layer's output must keep (no constant broadcasts it up). None for another layer."""
    rows = table_rows(layer, shape)
    if rows is None:
        return None
    info = np.iinfo(dtype)
    every = np.arange(info.min, info.max + 1).astype(dtype)
    if layer.op in UNARY and not layer.weights:
        return quantize(computed_in_float(layer, {layer.inputs[0]: dequantize(every)})[0])
    rank = len(layer.shape)   # each row's 256 values along axis 2, in the input's rank
    x = np.broadcast_to(dequantize(every).reshape(1, 1, -1, *[1] * (rank - 3)),
                        (1, rows, every.size, *[1] * (rank - 3)))
    table = quantize(computed_in_float(layer, {layer.inputs[0]: np.ascontiguousarray(x)})[0])
    return table.reshape(rows, every.size) if rows > 1 else table.reshape(every.size)


def table_rows(layer: Layer, shape: tuple[int, ...]) -> int | None:
    """The rows of the table ``lookup_table`` computes ``layer`` by, on an input of ``shape``: 1 (one for
    every element), or a row per channel; None where it computes none."""
    if len(layer.inputs) != 1 or len(layer.outputs) != 1:
        return None
    if layer.op in UNARY and not layer.weights:
        return 1
    return _per_channel(layer) if tuple(shape) == tuple(layer.shape) else None


def _per_channel(layer: Layer) -> int | None:
    """The rows of a ``PER_CHANNEL`` layer's table: its channels where its constants vary along axis 1 (a
    BatchNormalization in inference mode: per channel by definition), 1 where none varies at all; None
    for another layer (a constant that varies along another axis, a float64 layer)."""
    shape = layer.shape
    if layer.op not in PER_CHANNEL or len(shape) < 3 or layer.dtypes[0] != "float32":
        return None
    if layer.op == "BatchNormalization":
        return shape[1] if not layer.attrs.get("training_mode", 0) else None
    rows = 1
    for w in layer.weights.values():
        dims = (1,) * (len(shape) - np.ndim(w)) + np.shape(w)
        if len(dims) != len(shape) or any(d != 1 for k, d in enumerate(dims) if k != 1) or \
                dims[1] not in (1, shape[1]):
            return None
        rows = max(rows, dims[1])
    return rows


def looked_up(table: np.ndarray, x: np.ndarray, dtype: type) -> np.ndarray:
    """``table`` (``lookup_table``'s) at the 8-bit values ``x`` of ``dtype`` (a table per channel: each
    value's channel's, axis 1)."""
    index = np.asarray(x).astype(np.intp) - np.iinfo(dtype).min
    if table.ndim == 1:
        return table[index]
    return table[np.arange(table.shape[0]).reshape(1, -1, *[1] * (index.ndim - 2)), index]
