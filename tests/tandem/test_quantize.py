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


def test_affine_ranges_are_the_min_max_or_the_part_of_it_with_the_least_squared_error():
    g = models._Graph(0)
    graph = tg.load(g.model("relu", [("input", (1, 16, 64, 64))], g.node("Relu", ["input"])))
    rng = np.random.default_rng(3)
    samples = [{"input": rng.standard_normal((1, 16, 64, 64)).astype(np.float32)} for _ in range(2)]
    samples[1]["input"][0, 0, 0, 0] = 7.0   # one outlier among 131,072 values: clipping it costs less
    values = np.concatenate([s["input"].ravel() for s in samples]).astype(np.float64)
    plain = calibrate.affine_ranges(graph, samples, "max")
    assert plain["input"] == (float(values.min()), 7.0)
    lo, hi = calibrate.affine_ranges(graph, samples, "mse")["input"]
    assert hi < 7.0 and (lo, hi) in {(plain["input"][0] * f, 7.0 * f) for f in calibrate.SHRINKS}
    error = calibrate.affine_squared_error
    assert error(values, lo, hi) < error(values, *plain["input"])
    relu = graph.layers[-1].output
    assert plain[relu][0] == 0.0 < plain[relu][1]   # widened to hold 0


def test_calibration_inputs_come_from_an_npz_file_of_samples(tmp_path):
    graph = tg.load(conv_relu_model())
    x = np.random.default_rng(3).standard_normal((5, 1, 3, 6, 6)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", input=x)
    samples = calibrate.read_samples(tmp_path / "calib.npz", graph)
    assert len(samples) == 5 and np.array_equal(samples[4]["input"], x[4])
    q = tq.quantize(graph, inputs=samples, calibration="mse")
    assert q.exponents["input"] == calibrate.activation_exponents(graph, samples, "mse")["input"]
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
    (conv,) = [layer for layer in graph.layers if layer.op == "Conv"]
    (relu,) = [layer for layer in graph.layers if layer.op == "Relu"]
    peaks[conv.output] = peaks[relu.output]   # the conv's output saturates where its ReLU clips
    assert q.exponents == {name: calibrate.exponent_of(peak) for name, peak in peaks.items()}
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


def test_a_tensor_a_relu6_alone_reads_takes_the_relu6s_exponent_and_saturates_beyond_it():
    g = models._Graph(3)
    conv = g.conv("input", 3, 8, 3, 1, bias=True)
    y = g.node("Clip", [conv, g.const("lo", np.float32(0)), g.const("hi", np.float32(6))])
    graph = tg.load(g.model("conv_relu6", [("input", (1, 3, 6, 6))], y))
    q = tq.quantize(graph, seed=1, samples=2, inputs=[{"input": 8 * np.ones((1, 3, 6, 6), np.float32)}])
    conv_out, clip_out = (layer.output for layer in graph.layers)
    assert q.exponents[conv_out] == q.exponents[clip_out] == 4   # [0, 6] in steps of 1/16: 6 -> 96
    x = np.random.default_rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32) * 4
    got = q.run_integer({"input": x})
    assert got[clip_out].max() <= 96 and got[clip_out].min() >= 0
    assert np.array_equal(got[clip_out], np.clip(got[conv_out], 0, 96))   # the saturated sums clipped
    want = tg.tensors(graph, {"input": x})[clip_out]
    assert np.abs(q.dequantize(clip_out, got[clip_out]) - want).max() < 0.2


@pytest.mark.parametrize("calibration", ["max", "mse"])
def test_a_causal_masks_minus_infinity_before_a_softmax_is_int8s_lowest_value(calibration):
    """A GPT-2 prefill's masked scores (a Where filling the future positions with -inf, read only by the
    softmax): calibrated on their finite values (the scores' exponent), -inf is -128 in the int8 graph and
    reads back as -inf, the finite scores clip to [-127, 127], and the softmax gives the masked positions
    exactly nothing. An infinity anywhere else is refused (test_onnx_errors.py)."""
    g = models._Graph(2)
    scores = g.node("MatMul", ["input", g.weight("w", (8, 8), 8)])
    future = np.triu(np.ones((8, 8), bool), 1)
    masked = g.node("Where", [g.const("future", future), g.const("minf", np.float32(-np.inf)), scores])
    graph = tg.load(g.model("causal", [("input", (1, 8, 8))], g.node("Softmax", [masked], axis=-1)))
    q = tq.quantize(graph, samples=2, calibration=calibration)
    assert q.masks == {masked} and calibrate.softmax_inputs(graph) == {masked}
    assert q.exponents[masked] == q.exponents[scores] < calibrate.MAX_EXPONENT
    x = 4 * np.random.default_rng(5).standard_normal((1, 8, 8)).astype(np.float32)   # scores past the range
    got = q.run_integer({"input": x})
    assert np.all(got[masked][0][future] == tq.MASKED) and got[masked][0][~future].min() >= tq.MASKED + 1
    assert np.all(q.dequantize(masked, got[masked])[0][future] == -np.inf)
    probabilities = got[graph.output][0]
    assert np.all(probabilities[future] == 0)
    assert probabilities[0, 0] == min(127, 2 ** q.exponents[graph.output])   # the first token's row: 1.0
    assert not tq.quantize(tg.load(conv_relu_model()), samples=1).masks


@pytest.mark.parametrize(("name", "bound"), [("resnet18", 0.15), ("mobilenet_v2", 0.2),
                                             ("bert_encoder", 0.15), ("vit_block", 0.15)])
def test_a_quantized_network_stays_close_to_its_float_self(name, bound):
    """Measured relative L2 errors (seed 1, two calibration inputs): resnet18 0.083, mobilenet_v2 0.125,
    bert_encoder 0.082, vit_block 0.091 (resnet50 0.175); the bounds leave room for other seeds."""
    q = tq.quantize(tg.load(models.build(name)), samples=2)
    result = q.check_against_float()
    assert result["relative_l2"] <= bound and result["top1_agrees"] == 1.0


# ---- data movement


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def moves_model(seed: int = 0):
    """Two convs of different ranges concatenated and split in two again; every operator that only moves or
    selects values applied to a half (and a Concat of a half with a constant); the output a GlobalMaxPool."""
    from onnx import helper

    g = models._Graph(seed)
    a = g.conv("input", 3, 8, 3, 1)
    b = g.node("Mul", [g.conv("input", 3, 8, 3, 1), g.const("k", np.float32(8.0))])   # a wider range
    x = g.node("Concat", [a, b], axis=1)
    g.nodes.append(helper.make_node("Split", [x, g.const("sizes", _i64(8, 8))], ["left", "right"], axis=1,
                                    name="split"))
    left = "left"
    g.node("Transpose", [left], perm=[0, 2, 3, 1])
    g.node("Reshape", [left, g.const("shape", _i64(1, 8, 36))])
    g.node("Flatten", [left], axis=2)
    g.node("Squeeze", [g.node("Unsqueeze", [left, g.const("axes", _i64(0))]), g.const("axes", _i64(0))])
    g.node("Slice", [left, g.const("starts", _i64(1)), g.const("ends", _i64(5)), g.const("axes", _i64(2)),
                     g.const("steps", _i64(2))])
    g.node("Gather", [left, g.const("indices", _i64(3, 0, 5))], axis=1)
    g.node("GatherND", [left, g.const("indices", np.array([[0, 3], [0, 1]], np.int64))])
    g.node("GatherElements", [left, g.const("indices", np.tile(_i64(5, 0), (1, 8, 6, 1)))], axis=3)
    top = g.node("ReduceMax", [left, g.const("axes", _i64(1))], keepdims=1)
    g.node("Expand", [top, g.const("shape", _i64(1, 4, 6, 6))])
    g.node("Tile", [left, g.const("repeats", _i64(1, 1, 2, 1))])
    g.node("Pad", [left, g.const("pads", _i64(0, 0, 1, 2, 0, 0, 2, 1))], mode="constant")
    g.node("Pad", [left, g.const("pads", _i64(0, 0, 1, 2, 0, 0, 2, 1))], mode="reflect")
    g.node("Resize", [left, "", g.const("scales", np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    g.node("DepthToSpace", [left], blocksize=2)
    g.node("SpaceToDepth", [left], blocksize=2)
    g.node("ReduceMin", [left, g.const("axes", _i64(2, 3))], keepdims=0)
    g.node("Concat", [left, g.const("c", np.full((1, 2, 6, 6), 0.25, np.float32))], axis=1)
    g.node("Dropout", [left])
    out = g.node("GlobalMaxPool", ["right"])
    return g.model("moves", [("input", (1, 3, 6, 6))], out)


def test_moves_share_their_inputs_exponent_and_compute_exactly_on_the_integers():
    graph = tg.load(moves_model())
    q = tq.quantize(graph, seed=1, samples=2)
    x = np.random.default_rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32)
    values = q.run_integer({"input": x})
    moves = [layer for layer in graph.layers if tq.moved(layer)]
    # every move but Identity (passed on at import) and Upsample (gone from opset 10)
    assert {layer.op for layer in moves} == set(tq.MOVES) - {"Identity", "Upsample"}
    for layer in moves:
        names = [*tq.moved_inputs(layer), *layer.outputs]
        assert len({q.exponents[n] for n in names}) == 1, layer.op
        real = {n: q.dequantize(n, values[n]) for n in layer.inputs}
        for name, want in zip(layer.outputs, tg.evaluate_all(layer, real), strict=False):
            got = q.dequantize(name, values[name])
            if layer.op == "Concat" and 1 in layer.weights:   # the constant, quantized at the exponent
                want = want.copy()
                want[:, 8:] = tq.to_int8(want[:, 8:], q.exponents[name]) * 2.0 ** -q.exponents[name]
            assert values[name].dtype == np.int8 and np.array_equal(got, want), layer.op


def test_a_concat_gives_its_inputs_the_widest_of_their_exponents():
    graph = tg.load(moves_model())
    q = tq.quantize(graph, seed=1, samples=2)
    samples = tg.seeded_inputs(graph, 1, 2)   # quantize's own calibration inputs
    calibrated = {name: calibrate.exponent_of(max(-lo, hi))
                  for name, (lo, hi) in calibrate.affine_ranges(graph, samples, "max").items()}
    concat = next(layer for layer in graph.layers if layer.op == "Concat")
    a, b = concat.inputs
    assert calibrated[a] > calibrated[b]   # the Mul widened b: a's producer requantizes to b's exponent
    assert q.exponents[a] == q.exponents[b] == q.exponents[concat.output] == calibrated[b]
    assert q.exponents["left"] == q.exponents["right"] == calibrated[b]
    conv = next(layer for layer in graph.layers if layer.output == a)
    x = {"input": np.random.default_rng(5).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    got = q.run_integer(x)[a].astype(np.int64)
    ex, ew = q.exponents["input"], q.weight_exponents[conv.name][1]
    acc = reference.conv_nd(q.quantize_input("input", x["input"]).astype(np.int64),
                            q.weights[conv.name][1].astype(np.int64), 1, 1)
    shift = ex + ew - q.exponents[a]
    assert np.array_equal(got, np.clip((acc + (1 << (shift - 1))) >> shift, -128, 127))


def test_a_layer_of_several_outputs_writes_each_and_one_of_integer_outputs_is_refused():
    from onnx import helper

    graph = tg.load(moves_model())
    q = tq.quantize(graph, samples=1)
    split = next(layer for layer in graph.layers if layer.op == "Split")
    values = q.run_integer(tg.random_inputs(graph, np.random.default_rng(0)))
    assert np.array_equal(np.concatenate([values["left"], values["right"]], axis=1), values[split.inputs[0]])
    g = models._Graph(0)
    g.nodes.append(helper.make_node("MaxPool", ["input"], ["y", "indices"], kernel_shape=[2, 2], name="pool"))
    model = g.model("indices", [("input", (1, 2, 4, 4))], "y")
    with pytest.raises(tg.GraphError, match=r"node pool \(MaxPool\): its output indices holds int64"):
        tq.quantize(tg.load(model))


@pytest.mark.parametrize("model", ["bert_encoder", "vit_block"])
def test_an_elementwise_float_layer_is_its_table_of_256_results(model):
    """A transformer's GELU (a float layer of one int8 input) is looked up in its table of the 256 values:
    the same int8 outputs as the float operator on the whole tensor, element by element."""
    from tandem.network.quantized import computed_in_float

    q = tq.quantize(tg.load(models.build(model)), samples=1)
    values = q.run_integer(tg.random_inputs(q.graph, np.random.default_rng(4)))
    (gelu,) = [layer for layer in q.graph.layers if layer.op == "Gelu"]
    assert q.tables[gelu.name] is not None and q.tables[gelu.name].shape == (256,)
    x = values[gelu.inputs[0]]
    whole = computed_in_float(gelu, {gelu.inputs[0]: q.dequantize(gelu.inputs[0], x)})[0]
    np.testing.assert_array_equal(values[gelu.output], q._to_int8(gelu.output, whole))
    softmax = next(layer for layer in q.graph.layers if layer.op == "Softmax")
    assert softmax.name not in q.tables   # not element-wise: computed in integers (reference.softmax_int8)


@pytest.mark.parametrize("exponent", [2, 4, 6])
def test_a_softmax_along_the_last_axis_is_computed_in_integers(exponent):
    """The integer graph's softmax (``reference.softmax_int8``: a table of 2^20-scaled exponentials, exact
    int64 sums, one correctly rounded division per value) gives the float64 softmax's int8 values but where
    one lies within 2^-13 of a rounding tie (then it may be 1 off), on random rows and masked ones (a
    causal mask: its -inf as MASKED; a fully masked row all zeros), and the same result whatever the order
    of its rows' values (a kernel may sum in any order)."""
    from compiler.ops import reference

    def close(got: np.ndarray, real: np.ndarray) -> None:
        want = tq.to_int8(real, 7)
        assert np.abs(got.astype(int) - want).max() <= 1 and (got != want).mean() < 1e-3
        scaled = real * 128
        assert np.all(np.abs(scaled - np.floor(scaled) - 0.5)[got != want] < 2.0 ** -13)

    rng = np.random.default_rng(exponent)
    x = rng.integers(-127, 128, (6, 64, 64)).astype(np.int8)   # (a mask's finite values are > MASKED)
    table = reference.softmax_table(exponent)
    got = reference.softmax_int8(x, table, 7)
    close(got, reference.softmax(x * 2.0 ** -exponent))
    upper = np.triu(np.ones((64, 64), bool), 1)
    masked = np.where(upper, np.int8(tq.MASKED), x)
    close(reference.softmax_int8(masked, table, 7, tq.MASKED),
          reference.softmax(np.where(upper, -np.inf, x * 2.0 ** -exponent)))
    masked[:, 0, :] = tq.MASKED
    assert not reference.softmax_int8(masked, table, 7, tq.MASKED)[:, 0].any()
    order = rng.permutation(64)
    np.testing.assert_array_equal(reference.softmax_int8(x[..., order], table, 7), got[..., order])


def test_a_float_layer_by_constants_is_a_table_per_channel_only_where_they_vary_along_the_channels():
    """A Mul by one constant (attention's 1/sqrt(d)) is one row of 256 results; a Mul by a constant per
    channel a row per channel, each row its channel's results; a constant that broadcasts the input up (the
    output's shape is not the input's) is no table: the float layer computes it."""
    from tandem.network.graph import Layer
    from tandem.network.quantized import looked_up, lookup_table

    def mul(weight: np.ndarray, shape: tuple[int, ...]) -> Layer:
        return Layer("m", "Mul", ("x", "w"), ("y",), {}, {1: weight}, (shape,))

    def half(v):
        return v.astype(np.float64) / 2

    def table(layer: Layer, shape: tuple[int, ...]):
        def quantize(v):
            return np.clip(np.rint(v * 4), -128, 127).astype(np.int8)
        return lookup_table(layer, np.int8, half, quantize, shape)

    one = table(mul(np.array(3.0, np.float32), (1, 4, 5, 5)), (1, 4, 5, 5))
    per = table(mul(np.arange(1, 5, dtype=np.float32).reshape(4, 1, 1), (1, 4, 5, 5)), (1, 4, 5, 5))
    assert one.shape == (256,) and per.shape == (4, 256)
    x = np.random.default_rng(0).integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)
    want = np.clip(np.rint(half(x) * np.arange(1, 5).reshape(1, 4, 1, 1) * 4), -128, 127)
    assert np.array_equal(looked_up(per, x, np.int8), want)
    assert np.array_equal(looked_up(one, x, np.int8), np.clip(np.rint(half(x) * 12), -128, 127))
    up = mul(np.ones((1, 4, 1, 1), np.float32), (1, 4, 5, 5))
    assert table(up, (4, 5, 5)) is None


@pytest.mark.parametrize("model", ["bert_encoder", "vit_block"])
def test_a_layer_norm_along_the_last_axis_is_computed_from_integer_sums(model):
    """The integer graph's layer norm (``reference.layer_norm_int8``: exact integer sums, then float32
    steps) gives the float64 layer norm's int8 values on a transformer's activations but where one lies
    at a rounding tie's edge (then it may be 1 off), and is the same in any order of a row's values."""
    from compiler.ops import reference
    from tandem.network.quantized import computed_in_float

    q = tq.quantize(tg.load(models.build(model)), samples=1)
    values = q.run_integer(tg.random_inputs(q.graph, np.random.default_rng(5)))
    norms = [layer for layer in q.graph.layers if layer.op == "LayerNormalization"]
    assert norms
    for layer in norms:
        x, got = values[layer.inputs[0]], values[layer.output]
        assert tq.layer_norm_operands(q, layer, x.ndim) is not None
        real = computed_in_float(layer, {layer.inputs[0]: q.dequantize(layer.inputs[0], x)})[0]
        want = q._to_int8(layer.output, real)
        assert np.abs(got.astype(int) - want).max() <= 1 and (got != want).mean() < 1e-3
        order = np.random.default_rng(0).permutation(x.shape[-1])
        gamma, beta, eps = tq.layer_norm_operands(q, layer, x.ndim)
        shuffled = reference.layer_norm_int8(x[..., order], gamma[order], beta[order], eps)
        np.testing.assert_array_equal(shuffled, got[..., order])
