"""What an int8 network offers its callers, whatever its quantization scheme: ``QuantizedGraph``, the base
of one type per scheme (tandem/network/quantize.py's ``PowerOfTwoGraph``: per-tensor power-of-two
exponents, VTA's rule; tandem/network/qdq.py's ``AffineGraph``: a quantized ONNX model's scales and zero
points), and the integer max pool both schemes compute.

    values = q.run_integer({"input": x})                       # every tensor of the integer graph
    q.compare_output(values[q.graph.output], float_output)      # dequantized, against a float run

A scheme's type says how a graph input is quantized (``quantize_input``), how an integer tensor reads back
as real values (``dequantize``) and what each layer computes in integers (``integer_layer``: exact, the
per-layer oracle of the quantized network on every target); what follows from those three is here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar

import numpy as np

from tandem.network.graph import Graph, GraphError, Layer, evaluate, random_inputs, tensors


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

    @abstractmethod
    def dequantize(self, name: str, value: np.ndarray) -> np.ndarray:
        """The integers ``value`` of tensor ``name`` as the real values they stand for (float64)."""

    @abstractmethod
    def integer_layer(self, layer: Layer, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """``layer``'s output in the integer graph, from the integer ``values`` of its inputs."""

    def run_integer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every tensor of the integer graph for float ``inputs`` (quantized first), in the scheme's integer
        types (the float-computed layers' results quantized too)."""
        values = {name: self.quantize_input(name, inputs[name]) for name in self.graph.inputs}
        for layer in self.graph.layers:
            values[layer.output] = self.integer_layer(layer, values)
        return values

    def check_against_float(self, seed: int = 1) -> dict[str, float]:
        """How far the quantized network's output is from the float32 one on a seeded input: the relative
        L2 error and, for a classifier, whether the top class agrees."""
        inputs = random_inputs(self.graph, np.random.default_rng(seed))
        want = tensors(self.graph, inputs)[self.graph.output].astype(np.float64)
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


def single_outputs(graph: Graph, where: str) -> None:
    """Refuse a layer that asks for more than one output: an integer graph computes one per layer."""
    for layer in graph.layers:
        if any(layer.outputs[1:]):
            extra = ", ".join(n for n in layer.outputs[1:] if n)
            raise GraphError(f"{where}: node {layer.name} ({layer.op}): its outputs {extra} besides the "
                             f"first: Tandem's int8 graph computes one output per layer")
