"""Bias correction of an int8 quantization (Nagel et al., "Data-Free Quantization Through Weight
Equalization and Bias Correction", ICCV 2019, Sec. 4.2; here its empirical form, on calibration inputs):
rounding a layer's weights to int8 shifts the mean of its outputs, and the bias can take the shift back.

The rule (``correct_biases``). For each Conv, Gemm or MatMul with constant weights W and a bias b (a folded
batch norm's, or a linear layer's), W' its weights as the scheme rounds them (``rounded``: layer -> W' in
float): over the calibration inputs, the float32 reference's input x of the layer gives the error of its
sums, ``layer(x; W' - W, bias 0)``; its mean over the samples and every position but the output channel
(the last axis of a Gemm's or MatMul's output, axis 1 of a Conv's) is subtracted from b. The corrected
graph then quantizes as the uncorrected one does, its int32 bias computing ``b - shift``; the mean of each
channel's int8 output on the calibration inputs is that of the float layer's, up to the activations' own
rounding. Layers without a bias keep none (adding one would change what the targets run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tandem.network.graph import Graph, Layer, evaluate, tensors

#: the operators whose weights a scheme rounds, and whose bias takes the correction
CORRECTED = ("Conv", "Gemm", "MatMul")


def correct_biases(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]],
                   rounded: Callable[[Layer], np.ndarray]) -> Graph:
    """``graph`` with each contraction's bias corrected for the rounding of its weights (the module's rule),
    measured on ``samples`` (input dicts) through the float32 reference."""
    runs = [tensors(graph, inputs) for inputs in samples]
    layers = []
    for layer in graph.layers:
        if layer.op in CORRECTED and 1 in layer.weights and 2 in layer.weights and layer.inputs:
            shift = output_shift(layer, [run[layer.inputs[0]] for run in runs], rounded(layer))
            bias = (layer.weights[2].astype(np.float64) - shift).astype(layer.weights[2].dtype)
            layer = dataclasses.replace(layer, weights={**layer.weights, 2: bias})
        layers.append(layer)
    return dataclasses.replace(graph, layers=tuple(layers))


def output_shift(layer: Layer, xs: Sequence[np.ndarray], w_rounded: np.ndarray) -> np.ndarray:
    """The mean per output channel of what ``layer`` adds to its sums when its weights are ``w_rounded``
    instead of its own, over its inputs ``xs``."""
    error = (np.asarray(w_rounded, np.float64) - layer.weights[1].astype(np.float64)).astype(np.float32)
    bias = layer.weights[2]
    err_layer = dataclasses.replace(layer, weights={1: error, 2: np.zeros(bias.shape, bias.dtype)})
    channel = 1 if layer.op == "Conv" else -1
    total = 0.0
    for x in xs:
        out = evaluate(err_layer, {layer.inputs[0]: x}).astype(np.float64)
        total = total + np.moveaxis(out, channel, -1).reshape(-1, out.shape[channel]).mean(axis=0)
    shift = total / len(xs)
    if layer.op == "Gemm":   # the bias enters a Gemm's sums times beta
        shift = shift / layer.attrs.get("beta", 1.0)
    return shift.reshape(bias.shape)
