"""int8 quantization of an imported graph (tandem/network/graph.py), the rule of VTA's flow: per-tensor
power-of-two scales calibrated on seeded random inputs (``quantize``), and the integer reference of the
quantized graph (``PowerOfTwoGraph``, a tandem/network/quantized.py ``QuantizedGraph``).

The rule. A tensor t is represented as ``q * 2**-e`` with q int8 and one exponent e per tensor:
``e = floor(log2(127 / max|t|))``, the largest that keeps every calibrated value inside int8 (max|t| over
``samples`` standard-normal inputs drawn from ``seed``, through the float32 reference). Weights get their own
exponent the same way from their values; a bias is int32 at the exponent of its product, ``e_x + e_w``.
``q = clip(round(t * 2**e), -128, 127)``. The operators that cannot grow a value (ReLU, ReLU6, max and average
pooling) and those that only move or select values (tandem/network/quantized.py's ``MOVES``: Flatten, Reshape,
Transpose, Squeeze, Unsqueeze, Slice, Split, Gather, Expand, Tile, Pad, Concat, nearest Resize, DepthToSpace,
SpaceToDepth, ReduceMax, ReduceMin, GlobalMaxPool, ...) share one exponent with the tensors they read, so that
they need no requantization and fuse with their producer (a conv's ReLU is its epilogue's clip at 0, as in
VTA), and the tensor a ReLU or Clip alone reads takes the activation's exponent (``clipped_ranges``: it may
saturate where the activation clips anyway). The rule (``shared_exponents``): each such layer ties its outputs
to the activations it reads (a Concat: all its inputs, a move: those whose values it moves), and every tensor
of a tied group takes the group's smallest calibrated exponent, the one whose range holds every member's
values. A group that is a chain (a ReLU after a conv) has its head's exponent, as before; a Concat's inputs
all move to the widest of their ranges: their producers (convolutions, adds, float layers) requantize to it
directly, so the Concat itself only moves int8 values and the integer graph stays exact (at the cost of the
finer inputs' precision: a right shift more in their producer's epilogue).

The integer graph (``PowerOfTwoGraph.integer_layer``): convolutions and matrix products multiply int8 by int8
into int32, add the bias, and requantize to the output's exponent with VTA's epilogue, an arithmetic shift
right by ``s = e_x + e_w - e_out`` and a clip to int8 (``reference.shift_clip``), after adding ``2**(s-1)`` so
that the shift rounds to nearest (a target folds that constant into the bias, or adds it with an ALU
immediate; truncating instead doubles the error of a 50-layer network); ReLU and ReLU6 clip; an Add shifts
both operands to the output's exponent (rounding the same way) and adds; max pooling is exact; an average over
a window is the rounded mean of the window sum (as VITA computes it); data movement moves int8 (every output
of a Split), computed by the float reference's operator on the integers. A softmax along the last axis
computes in integers (``reference.softmax_int8``: each value's difference from its row's maximum looked up in
a table of 2^20-scaled exponentials, exact int64 sums, then float32 steps of one IEEE operation each, so that
a kernel gives the same result bit for bit in any order of summation); a layer norm along the last axis from
exact integer sums, then in float32 steps (``reference.layer_norm_int8``, ``layer_norm_operands``). GELU, a
Mul by a constant, and a softmax or layer norm along other axes compute in float on the dequantized input and
quantize their result (the float operators DianNao and the CPU run in f32); a softmax's input that takes -inf
(a causal mask, tandem/network/calibrate.py's ``softmax_inputs``) is calibrated on its finite values, and its
lowest int8 value stands for -inf (``MASKED``), so that the masked positions get exactly nothing. Everything
the integer graph computes is exact: it is the per-layer oracle of the quantized network on every target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler.ops import reference
from tandem.network.bias_correction import correct_biases
from tandem.network.calibrate import calibrate, tensor_exponent
from tandem.network.graph import Graph, GraphError, Layer, reader_counts, seeded_inputs
from tandem.network.operators.nn import square_window
from tandem.network.quantized import (
    MOVES,
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

INT8 = (-128, 127)
#: operators that cannot grow a value: their output keeps the exponent of their (first) input
KEEPS_RANGE = ("Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool")
#: operators whose outputs share the exponent of their inputs: those and the moves (where ``moved`` says a
#: layer is one: a nearest Resize, a Gather by constant indices, ...)
SAME_EXPONENT = (*KEEPS_RANGE, *MOVES)


def to_int8(x: np.ndarray, e: int) -> np.ndarray:
    """Real values ``x`` in int8 at exponent ``e``: ``x * 2^e`` clamped to int8 (a nan to -128, as onnxruntime
    quantizes one), rounded half to even."""
    return reference.saturated(np.array(np.asarray(x, np.float64) * 2.0**e), 0, *INT8, np.int8)


#: a softmax mask's masked position (-inf) in the int8 graph; its finite values clip to (MASKED, 127]
MASKED = INT8[0]


def mask_to_int8(x: np.ndarray, e: int) -> np.ndarray:
    """A softmax mask (tandem/network/calibrate.py's ``softmax_inputs``) in int8: -inf to ``MASKED``, every
    other value as ``to_int8`` gives it but above ``MASKED``."""
    x = np.asarray(x, np.float64)
    finite = np.clip(np.rint(np.where(x == -np.inf, 0.0, x) * 2.0**e), MASKED + 1, INT8[1])
    return np.where(x == -np.inf, MASKED, finite).astype(np.int8)


@dataclass(frozen=True)
class PowerOfTwoGraph(QuantizedGraph):
    """The graph, each tensor's exponent, each layer's quantized weights (position -> int array) and their
    exponents; its integer graph is the module's rule."""

    graph: Graph
    exponents: dict[str, int]
    weights: dict[str, dict[int, np.ndarray]]
    weight_exponents: dict[str, dict[int, int]]
    #: the softmax masks: tensors in which ``MASKED`` stands for -inf (a causal mask's future positions)
    masks: frozenset[str] = frozenset()
    #: each element-wise float layer's table of results (``lookup_table``; None: not such a layer)
    tables: dict[str, np.ndarray | None] = field(default_factory=dict, init=False, compare=False, repr=False)
    fuses_activations = True   # a ReLU keeps its input's exponent

    def quantize_input(self, name: str, x: np.ndarray) -> np.ndarray:
        return self._to_int8(name, x)

    def input_quantization(self, name: str) -> LinearQuantization | None:
        """``to_int8``'s rule on a float32 input: its product by 2^e is exact in float32 as in float64, and
        equal to its quotient by 2^-e (a float32 for exponents within float32's normal range), so that
        onnxruntime's rule computes it; a softmax mask's (``mask_to_int8``) is another."""
        e = self.exponents[name]
        if name in self.masks or abs(e) > 126:
            return None
        return LinearQuantization(np.float32(2.0 ** -e), 0, *INT8, "int8")

    def dequantize(self, name: str, value: np.ndarray) -> np.ndarray:
        real = value.astype(np.float64) * 2.0 ** -self.exponents[name]
        return np.where(value == MASKED, -np.inf, real) if name in self.masks else real

    def _to_int8(self, name: str, x: np.ndarray) -> np.ndarray:
        """Real values ``x`` of tensor ``name`` in int8 at its exponent (a mask's: ``mask_to_int8``)."""
        return (mask_to_int8 if name in self.masks else to_int8)(x, self.exponents[name])

    def integer_outputs(self, layer: Layer, values: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """``layer``'s int8 outputs in the integer graph, from the int8 ``values`` of its inputs."""
        e = self.exponents
        eo = e[layer.output]
        if moved(layer) and all(e[name] == eo for name in moved_inputs(layer)):
            return tuple(np.asarray(v).astype(np.int8) for v in move(layer, values, lambda c: to_int8(c, eo)))
        out = self._integer(layer, [values[name] for name in layer.inputs])
        if out is not None:
            return (out,)
        # the float layers: dequantize, compute, quantize (each output to its own exponent); an element-wise
        # one of one input by its table of the 256 results
        if layer.name not in self.tables:
            first = layer.inputs[0] if layer.inputs else ""
            self.tables[layer.name] = lookup_table(layer, np.int8, lambda v: self.dequantize(first, v),
                                                   lambda v: self._to_int8(layer.output, v),
                                                   np.shape(values[first]) if first else ())
        if self.tables[layer.name] is not None:
            return (looked_up(self.tables[layer.name], values[layer.inputs[0]], np.int8),)
        floats = {n: self.dequantize(n, values[n]) for n in layer.inputs}
        return tuple(self._to_int8(n, v) if n else v
                     for n, v in zip(layer.outputs, computed_in_float(layer, floats), strict=False))

    def _integer(self, layer: Layer, ins: list[np.ndarray]) -> np.ndarray | None:
        """The int8 output of a layer the integer graph computes in integers (``ins``: its inputs' values);
        None for a float layer."""
        op, e = layer.op, self.exponents
        eo = e[layer.output]
        if op in ("Conv", "Gemm", "MatMul") and layer.name in self.weights:
            return _requantize(_contraction(layer, ins[0], self.weights[layer.name]),
                               e[layer.inputs[0]] + self.weight_exponents[layer.name][1] - eo)
        if op == "MatMul" and len(ins) == 2:   # two activations (attention): int8 x int8 in int32
            acc = np.matmul(ins[0].astype(np.int64), ins[1].astype(np.int64))
            return _requantize(acc, e[layer.inputs[0]] + e[layer.inputs[1]] - eo)
        if op in ("Relu", "Clip"):
            x = reference.rounding_shift(ins[0], e[layer.inputs[0]] - eo)
            return np.clip(x, *clip_bounds(self, layer)).astype(np.int8)
        if op == "Add" and len(ins) == 2:
            return reference.quantized_add(*ins, *(e[name] - eo for name in layer.inputs))
        if op == "MaxPool":
            return _requantize(max_pool(layer, ins[0]), e[layer.inputs[0]] - eo)
        if op in ("GlobalAveragePool", "AveragePool") and _plain_mean(layer, ins[0].shape):
            return _requantize(_rounded_mean(layer, ins[0]), e[layer.inputs[0]] - eo)
        if op == "LayerNormalization" and (norm := layer_norm_operands(self, layer, ins[0].ndim)) is not None:
            return reference.layer_norm_int8(ins[0], *norm)
        if op == "Softmax" and softmax_last_axis(layer, ins[0].ndim):
            masked = MASKED if layer.inputs[0] in self.masks else None
            return reference.softmax_int8(ins[0], reference.softmax_table(e[layer.inputs[0]]), eo, masked)
        return None


def softmax_last_axis(layer: Layer, ndim: int) -> bool:
    """Whether a Softmax normalizes along its input's last axis alone (any opset's ``axis`` -1; ``ndim - 1``;
    or, before opset 13, the flattened rows of the last axis)."""
    axis = layer.attrs.get("axis", -1 if layer.opset >= 13 else 1)
    return axis in (-1, ndim - 1)


def layer_norm_operands(q: PowerOfTwoGraph, layer: Layer, ndim: int
                        ) -> tuple[np.ndarray, np.ndarray, np.float32] | None:
    """A LayerNormalization's float32 ``gamma`` and ``beta`` at its output's exponent and ``eps`` at twice
    its input's (``reference.layer_norm_int8``'s operands), where the integer graph computes it so: along
    the last axis alone, its Scale and B (if any) one value per element of that axis, Y its only output;
    else None (computed in float)."""
    d = layer.shapes[0][-1] if layer.shapes and layer.shapes[0] else 0
    scale, shift = layer.weights.get(1), layer.weights.get(2, np.zeros(d))
    if layer.attrs.get("axis", -1) not in (-1, ndim - 1) or any(layer.outputs[1:]) or scale is None or \
            np.shape(scale) != (d,) or np.shape(shift) != (d,) or not d:
        return None
    out, x = 2.0 ** q.exponents[layer.output], 2.0 ** (2 * q.exponents[layer.inputs[0]])
    return (np.asarray(scale * out, np.float32), np.asarray(shift * out, np.float32),
            np.float32(layer.attrs.get("epsilon", 1e-5) * x))


def quantize(graph: Graph, seed: int = 0, samples: int = 4, calibration: str = "max",
             inputs: Sequence[Mapping[str, np.ndarray]] | None = None, bias_correction: bool = False
             ) -> PowerOfTwoGraph:
    """Calibrate every activation's exponent on ``inputs`` (input dicts; default: ``samples`` seeded random
    ones) by the ``calibration`` rule of tandem/network/calibrate.py and quantize the weights by the same
    rule (the module's rule); with ``bias_correction``, each contraction's bias first corrected for its
    weights' rounding (tandem/network/bias_correction.py)."""
    float_outputs(graph, graph.name)
    for layer in graph.layers:
        if layer.output and np.dtype(layer.dtypes[0]).kind != "f":
            raise GraphError(f"{graph.name}: node {layer.name} ({layer.op}): its output {layer.output} holds "
                             f"{layer.dtypes[0]} values; Tandem's int8 graph quantizes float16, float32 and "
                             f"float64 tensors only")
    if graph.output in graph.constants:
        raise GraphError(f"{graph.name}: its output {graph.output} is a constant (it depends on no graph "
                         f"input): there is no network to quantize")
    if inputs is None:
        inputs = seeded_inputs(graph, seed, samples)
    if bias_correction:
        graph = correct_biases(graph, inputs, lambda layer: rounded_weights(layer, calibration))
    calibrated, masks = calibrate(graph, inputs, calibration)
    exponents = shared_exponents(graph, calibrated)
    weights, weight_exponents = {}, {}
    for layer in graph.layers:
        if layer.op not in ("Conv", "Gemm", "MatMul") or 1 not in layer.weights:
            continue
        w = layer.weights[1]
        ew = tensor_exponent([w], calibration)
        q = {1: to_int8(w, ew)}
        ex = exponents[layer.inputs[0]]
        if 2 in layer.weights:
            q[2] = np.rint(layer.weights[2].astype(np.float64) * 2.0 ** (ex + ew)).astype(np.int64)
        weights[layer.name], weight_exponents[layer.name] = q, {1: ew, 2: ex + ew}
    _check_shifts(graph, exponents, weight_exponents)
    return PowerOfTwoGraph(graph, exponents, weights, weight_exponents, masks)


def rounded_weights(layer: Layer, calibration: str) -> np.ndarray:
    """A contraction's weights as the module's rule rounds them to int8 (at their calibrated exponent), in
    float."""
    e = tensor_exponent([layer.weights[1]], calibration)
    return to_int8(layer.weights[1], e).astype(np.float64) * 2.0**-e


def shared_exponents(graph: Graph, calibrated: Mapping[str, int]) -> dict[str, int]:
    """Each tensor's exponent: its ``calibrated`` one, or, where layers that keep their inputs' exponent
    (``SAME_EXPONENT``) tie it to others, the smallest calibrated exponent of its tied group (the module's
    rule)."""
    calibrated = clipped_ranges(graph, calibrated)
    parent = {name: name for name in calibrated}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for layer in graph.layers:
        if layer.op in KEEPS_RANGE and layer.inputs:
            tied = (layer.inputs[0], layer.output)
        elif moved(layer):
            tied = (*moved_inputs(layer), *(n for n in layer.outputs if n))
        else:
            continue
        for name in tied[1:]:
            parent[root(name)] = root(tied[0])
    smallest: dict[str, int] = {}
    for name, e in calibrated.items():
        r = root(name)
        smallest[r] = min(e, smallest.get(r, e))
    return {name: smallest[root(name)] for name in calibrated}


#: the activations whose output is their input clipped (the tensor they alone read may saturate)
CLIPPING = ("Relu", "Clip")


def clipped_ranges(graph: Graph, calibrated: Mapping[str, int]) -> dict[str, int]:
    """``calibrated`` with the exponent of each tensor that a Relu or Clip alone reads (not a graph output)
    raised to that activation's own: the activation keeps only its clipped range of the values, so the
    tensor may saturate beyond it (int8's bounds lie outside the clip's at the finer exponent, and the clip
    then gives what it gives on the real values). A ReLU6 after a conv whose sums reach 30 then holds
    [0, 6] in steps of 1/16 instead of 1/4 (the module's rule)."""
    readers = reader_counts(graph.layers)
    out = dict(calibrated)
    for layer in graph.layers:
        x = layer.inputs[0] if layer.inputs else None
        if (layer.op in CLIPPING and x in out and layer.output in out and readers.get(x) == 1
                and x not in graph.outputs and out[layer.output] > out[x]):
            out[x] = out[layer.output]
    return out


#: the widest shift between two exponents the integer graph's 64-bit arithmetic takes
MAX_SHIFT = 62
#: the operators whose integer layer shifts its inputs (or its sums) to its output's exponent
SHIFTED = ("Conv", "Gemm", "MatMul", "Relu", "Clip", "Add", "MaxPool", "AveragePool", "GlobalAveragePool")


def _check_shifts(graph: Graph, exponents: Mapping[str, int], weight_exponents: Mapping[str, dict[int, int]]
                  ) -> None:
    """Each requantization of the integer graph (a layer's inputs, or a contraction's sums, to its output's
    exponent) a shift of at most MAX_SHIFT bits, and each bias within 64 bits: a GraphError naming the layer
    whose values span a wider range (huge weights, outputs)."""
    for layer in graph.layers:
        eo = exponents.get(layer.output)
        ins = [exponents[n] for n in layer.inputs if n in exponents]
        if eo is None or not ins or layer.op not in SHIFTED:
            continue
        if layer.name in weight_exponents:
            ins = [ins[0] + weight_exponents[layer.name][1]]
        elif layer.op == "MatMul" and len(ins) == 2:
            ins = [ins[0] + ins[1]]
        shift = max((e - eo for e in ins), key=abs)
        if abs(shift) > MAX_SHIFT:
            raise GraphError(f"{graph.name}: node {layer.name} ({layer.op}): requantizing it takes a shift "
                             f"by {shift} bits (its output's exponent {eo}): its values span a wider range "
                             f"than the integer graph's 64-bit arithmetic holds")
        bias = weight_exponents.get(layer.name, {})
        if 2 in layer.weights and 2 in bias and not np.all(
                np.abs(layer.weights[2].astype(np.float64) * 2.0 ** bias[2]) < 2.0**MAX_SHIFT):
            raise GraphError(f"{graph.name}: node {layer.name} ({layer.op}): its bias at exponent {bias[2]} "
                             f"does not fit the integer graph's 64-bit arithmetic")


def _contraction(layer: Layer, x: np.ndarray, w: Mapping[int, np.ndarray]) -> np.ndarray:
    """A Conv's, Gemm's or MatMul's int32 (int64) sums of int8 ``x`` by its int8 weights, plus its bias."""
    x = x.astype(np.int64)
    if layer.op == "Conv":
        return integer_conv(layer, x, w)
    wt = w[1].T if layer.op == "Gemm" and layer.attrs.get("transB") else w[1]
    return reference.gemm(x, wt) + (w[2] if 2 in w else 0)   # through BLAS where float64 is exact


def _plain_mean(layer: Layer, size: tuple[int, ...]) -> bool:
    """Whether an average pool's windows all hold the same count of values (a 2-D pool with no padding, no
    dilation, no rounded-up size; any global one over [N, C, H, W]; ``size`` the input's shape): its
    integer mean is
    ``_rounded_mean``'s; any other is computed in float (the module's rule)."""
    if len(size) != 4:
        return False
    if layer.op == "GlobalAveragePool":
        return True
    window = square_window(layer.op, layer.attrs, size[2:], tuple(layer.attrs["kernel_shape"]))
    return window is not None and window[1] == 0


def _rounded_mean(layer: Layer, x: np.ndarray) -> np.ndarray:
    """An average pool (or a global one) of int8 ``x``: each window's sum, its rounded mean."""
    x = x.astype(np.int64)
    if layer.op == "GlobalAveragePool":
        window, stride = x.shape[2:], 1
    else:
        window, stride = tuple(layer.attrs["kernel_shape"]), layer.attrs.get("strides", [1])[0]
    n = math.prod(window)
    sums = np.stack([reference.pool2d(image, window, stride, "sum") for image in x]).astype(np.int64)
    return reference.rounded_mean(sums, n)


def clip_bounds(q: PowerOfTwoGraph, layer: Layer) -> tuple[int, int]:
    """The int8 bounds of a Relu ([0, 127]) or a Clip (its bounds at the output's exponent, within int8)."""
    if layer.op == "Relu":
        return 0, 127
    eo = q.exponents[layer.output]
    lo, hi = layer.operand(1, {}), layer.operand(2, {})
    low = -128 if lo is None else max(-128, math.ceil(float(lo) * 2.0**eo))
    high = 127 if hi is None else min(127, math.floor(float(hi) * 2.0**eo))
    return low, high


def _requantize(acc: np.ndarray, shift: int) -> np.ndarray:
    """int32 (or wider) sums at one exponent to int8 at another: VTA's shift-and-clip after the rounding
    constant (``shift`` > 0), or a left shift and the clip."""
    if shift > 0:
        return reference.shift_clip(np.asarray(acc, np.int64) + (1 << (shift - 1)), shift)
    return np.clip(reference.rounding_shift(acc, shift), *INT8).astype(np.int8)
