"""int8 quantization of imported graphs (tandem/network/quantize.py, calibrated by
tandem/network/calibrate.py): per-tensor power-of-two exponents, the largest that keep the calibrated values
in int8 ("max") or the one of least squared error ("mse"); quantized weights within half a step; the
integer graph of one convolution equal to the formula written out; whole quantized networks close to their
float32 selves."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ops import reference
from tandem.network import calibrate, models
from tandem.network import graph as tg
from tandem.network import quantize as tq


def test_the_exponent_is_the_largest_that_keeps_the_peak_in_int8():
    assert calibrate.exponent_of(127.0) == 0 and calibrate.exponent_of(1.0) == 6
    assert calibrate.exponent_of(0.5) == 7 and calibrate.exponent_of(200.0) == -1
    assert calibrate.exponent_of(0.0) == calibrate.MAX_EXPONENT
    for peak in np.random.default_rng(0).uniform(1e-3, 1e3, 50):
        e = calibrate.exponent_of(peak)
        assert peak * 2.0**e <= 127 < peak * 2.0 ** (e + 1)


def test_the_mse_rule_takes_a_finer_step_where_clipping_an_outlier_costs_less_than_rounding_the_rest():
    rng = np.random.default_rng(1)
    body = rng.standard_normal(10_000)
    outlier = np.concatenate([body, [40.0]])
    e_max = calibrate.exponent_of(40.0)
    e = calibrate.tensor_exponent([outlier], "mse")
    assert calibrate.tensor_exponent([outlier], "max") == e_max < e <= e_max + calibrate.EXTRA
    assert calibrate.squared_error(outlier, e) < calibrate.squared_error(outlier, e_max)
    uniform = rng.uniform(-0.6, 0.6, 10_000)   # no outlier: clipping costs more, max's exponent stays
    assert calibrate.tensor_exponent([uniform], "mse") == calibrate.exponent_of(float(np.abs(uniform).max()))


def test_calibration_inputs_come_from_an_npz_file_of_samples(tmp_path):
    graph = tg.load(conv_relu_model())
    x = np.random.default_rng(3).standard_normal((5, 1, 3, 6, 6)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", input=x)
    samples = calibrate.read_samples(tmp_path / "calib.npz", graph)
    assert len(samples) == 5 and np.array_equal(samples[4]["input"], x[4])
    q = tq.quantize(graph, inputs=samples)
    assert q.exponents == calibrate.activation_exponents(graph, samples, "mse")
    np.savez(tmp_path / "one.npz", input=x[0])
    assert len(calibrate.read_samples(tmp_path / "one.npz", graph)) == 1
    for bad, message in ((dict(images=x), "images, which is not a graph input"),
                         (dict(input=x[:, :, :2]), "input has shape")):
        np.savez(tmp_path / "bad.npz", **bad)
        with pytest.raises(tg.GraphError, match=message):
            calibrate.read_samples(tmp_path / "bad.npz", graph)
    with pytest.raises(tg.GraphError, match="calibration 'percentile'"):
        tq.quantize(graph, calibration="percentile")


def conv_relu_model(seed: int = 0):
    g = models._Graph(seed)
    y = g.node("Relu", [g.conv("input", 3, 8, 3, 1, bias=True)])
    return g.model("conv_relu", [("input", (1, 3, 6, 6))], y)


def test_calibration_and_weights_follow_the_rule():
    graph = tg.load(conv_relu_model())
    q = tq.quantize(graph, seed=2, samples=3, calibration="max")
    rng = np.random.default_rng(2)
    peaks: dict[str, float] = {}
    for _ in range(3):
        x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
        for name, value in tg.tensors(graph, {"input": x}).items():
            peaks[name] = max(peaks.get(name, 0.0), float(np.abs(value).max()))
    assert q.exponents == {name: calibrate.exponent_of(peak) for name, peak in peaks.items()}
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
