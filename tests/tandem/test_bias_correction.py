"""tandem/network/bias_correction.py: a contraction's bias takes back the mean shift its weights' rounding
puts on its outputs, over the calibration inputs; both int8 schemes take it."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.network import graph as tg
from tandem.network import models, qdq_write
from tandem.network import quantize as tq
from tandem.network.bias_correction import correct_biases


def conv_model():
    g = models._Graph(7)
    y = g.node("Relu", [g.conv(g.conv("input", 3, 8, 3, 1, bias=True), 8, 4, 1, 1)])   # the second: no bias
    return tg.load(g.model("convs", [("input", (1, 3, 8, 8))], y))


def samples(graph, count=3, seed=1):
    rng = np.random.default_rng(seed)
    return [tg.random_inputs(graph, rng) for _ in range(count)]


def coarse(layer):   # a rounding far coarser than int8's, so that the shift it leaves is plain to see
    return np.round(layer.weights[1] * 4) / 4


def test_the_corrected_layer_has_the_float_layers_mean_output_on_the_calibration_inputs():
    graph = conv_model()
    inputs = samples(graph)
    corrected = correct_biases(graph, inputs, coarse)
    first, second = graph.layers[0], graph.layers[1]
    fixed = corrected.layers[0]
    assert not np.array_equal(fixed.weights[2], first.weights[2])
    assert 2 not in corrected.layers[1].weights and corrected.layers[1].weights[1] is second.weights[1]
    w = coarse(first).astype(np.float32)
    naive = replace(first, weights={**first.weights, 1: w})     # rounded weights, the bias as it was
    rounded = replace(fixed, weights={**fixed.weights, 1: w})   # rounded weights, the corrected bias
    shift_before, shift_after = [], []
    for x in inputs:
        want = tg.evaluate(first, x).astype(np.float64)
        shift_before.append((tg.evaluate(naive, x) - want).mean(axis=(0, 2, 3)))
        shift_after.append((tg.evaluate(rounded, x) - want).mean(axis=(0, 2, 3)))
    assert np.abs(np.mean(shift_before, axis=0)).max() > 1e-3
    assert np.abs(np.mean(shift_after, axis=0)).max() < 1e-5


def test_both_schemes_take_the_correction_and_stay_close_to_float():
    graph = conv_model()
    inputs = samples(graph, 4, 0)
    plain, fixed = tq.quantize(graph, inputs=inputs), tq.quantize(graph, inputs=inputs, bias_correction=True)
    first = graph.layers[0].name
    assert not np.array_equal(plain.weights[first][2], fixed.weights[first][2])
    assert fixed.check_against_float(2, graph)["relative_l2"] < 0.1
    affine = qdq_write.quantize(graph, inputs=inputs, per_channel=True, bias_correction=True)
    assert affine.check_against_float(2, graph)["relative_l2"] < 0.1


def test_the_model_command_corrects_biases_when_asked():
    result = CliRunner().invoke(app, ["model", "--builtin", "mobilenet_v2", "--json", "--int8", "--scheme",
                                      "affine-per-channel", "--bias-correction"])
    assert result.exit_code == 0, result.output
    int8 = json.loads(result.output)["int8"]
    assert "biases corrected" in int8["rule"] and int8["relative_l2"] < 0.15
