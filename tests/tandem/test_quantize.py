"""int8 quantization of imported graphs (tandem/network/quantize.py): per-tensor power-of-two exponents, the
largest
that keep the calibrated values in int8; quantized weights within half a step; the integer graph of one
convolution equal to the formula written out; whole quantized networks close to their float32 selves."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ops import reference
from tandem.network import graph as tg
from tandem.network import models
from tandem.network import quantize as tq


def test_the_exponent_is_the_largest_that_keeps_the_peak_in_int8():
    assert tq.exponent_of(127.0) == 0 and tq.exponent_of(1.0) == 6 and tq.exponent_of(0.5) == 7
    assert tq.exponent_of(200.0) == -1 and tq.exponent_of(0.0) == tq.MAX_EXPONENT
    for peak in np.random.default_rng(0).uniform(1e-3, 1e3, 50):
        e = tq.exponent_of(peak)
        assert peak * 2.0**e <= 127 < peak * 2.0 ** (e + 1)


def conv_relu_model(seed: int = 0):
    g = models._Graph(seed)
    y = g.node("Relu", [g.conv("input", 3, 8, 3, 1, bias=True)])
    return g.model("conv_relu", [("input", (1, 3, 6, 6))], y)


def test_calibration_and_weights_follow_the_rule():
    graph = tg.load(conv_relu_model())
    q = tq.quantize(graph, seed=2, samples=3)
    rng = np.random.default_rng(2)
    peaks: dict[str, float] = {}
    for _ in range(3):
        x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
        for name, value in tg.tensors(graph, {"input": x}).items():
            peaks[name] = max(peaks.get(name, 0.0), float(np.abs(value).max()))
    assert q.exponents == {name: tq.exponent_of(peak) for name, peak in peaks.items()}
    (conv,) = [layer for layer in graph.layers if layer.op == "Conv"]
    w, ew = q.weights[conv.name][1], q.weight_exponents[conv.name][1]
    assert w.dtype == np.int8 and np.abs(conv.weights[1] - w * 2.0**-ew).max() <= 2.0 ** -(ew + 1)


def test_the_integer_conv_is_int8_products_plus_bias_shifted_to_nearest_and_clipped():
    graph = tg.load(conv_relu_model(seed=5))
    q = tq.quantize(graph, seed=1)
    x = np.random.default_rng(9).standard_normal((1, 3, 6, 6)).astype(np.float32)
    got = q.run_integer({"input": x})
    conv, relu = graph.layers
    ex, eo = q.exponents["input"], q.exponents[conv.output]
    xq = np.clip(np.rint(x.astype(np.float64) * 2.0**ex), -128, 127).astype(np.int64)
    w, b = q.weights[conv.name][1].astype(np.int64), q.weights[conv.name][2]
    acc = reference.conv_nd(xq, w, 1, 1) + b.reshape(1, -1, 1, 1)
    shift = ex + q.weight_exponents[conv.name][1] - eo
    want = np.clip((acc + (1 << (shift - 1))) >> shift, -128, 127)
    assert got[conv.output].dtype == np.int8 and np.array_equal(got[conv.output], want)
    assert np.array_equal(got[relu.output], np.clip(want, 0, 127))   # same exponent: a clip at 0


@pytest.mark.parametrize(("name", "bound"), [("resnet18", 0.15), ("mobilenet_v2", 0.2),
                                             ("bert_encoder", 0.15), ("vit_block", 0.15)])
def test_a_quantized_network_stays_close_to_its_float_self(name, bound):
    """Measured relative L2 errors (seed 1, two calibration inputs): resnet18 0.083, mobilenet_v2 0.125,
    bert_encoder 0.082, vit_block 0.091 (resnet50 0.175); the bounds leave room for other seeds."""
    q = tq.quantize(tg.load(models.build(name)), samples=2)
    result = q.check_against_float()
    assert result["relative_l2"] <= bound and result["top1_agrees"] == 1.0
