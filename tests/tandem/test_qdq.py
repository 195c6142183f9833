"""Quantized ONNX models (tandem/network/qdq.py, tandem/network/qdq_write.py): the import, onnxruntime's
integer arithmetic
(compiler/ops/reference.py), the network on every target bit-exact per step, and the output equal to
onnxruntime's bit for bit (where onnxruntime is installed)."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.backend.llvm import host_cpu
from compiler.ops import network, reference
from tandem.flows.cpu import default_isa
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.run import run
from tandem.flows.targets import load_target
from tandem.network import graph as tg
from tandem.network import models, qdq, qdq_write
from tandem.network.run import run_network

#: the share of the multiply-adds on tensor instructions: all of them, none on a CPU that runs no instruction
#: of the spec's for u8 x s8 products (neither vpdpbusd nor vpmaddwd)
SHARE = {"diannao": 1.0,
         "cpu": 1.0 if default_isa(CpuOptions(), load_target("cpu")) == "x86-vnni" else 0.0}

f32 = np.float32


def small(name: str, size: int = 16):
    """A builtin CNN at ``size`` x ``size``, written as a QDQ model."""
    return qdq_write.write(tg.load(models.build(name), {"input": (1, 3, size, size)}))


def inputs(q, seed: int = 3) -> dict[str, np.ndarray]:
    return tg.random_inputs(q.graph, np.random.default_rng(seed))


# ---- the arithmetic


def test_fma_rounds_once():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(500).astype(f32) for _ in range(3))
    got = reference.fma_f32(a, b, c)
    for x, y, z, r in zip(a, b, c, got, strict=True):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        neighbours = (np.nextafter(r, f32(-np.inf)), np.nextafter(r, f32(np.inf)))
        assert all(abs(Fraction(float(r)) - exact) <= abs(Fraction(float(n)) - exact) for n in neighbours)
    # a product exactly halfway between two float32s: a tiny addend decides the direction
    half = f32(1 + 2**-12)   # half * half = 1 + 2**-11 + 2**-24, halfway
    below, above = f32(1 + 2**-11), np.nextafter(f32(1 + 2**-11), f32(2))
    assert reference.fma_f32(half, half, f32(1e-30)) == above
    assert reference.fma_f32(half, half, f32(-1e-30)) == below
    assert reference.fma_f32(half, half, f32(0)) == below   # a tie: to even


def test_requantize_rounds_half_to_even_and_saturates():
    acc = np.array([5, 15, 25, -5, 1000, -1000])
    assert reference.requantize_scaled(acc, f32(0.1), 10, 0, 255).tolist() == [10, 12, 12, 10, 110, 0]


# ---- the import


def test_import_reads_every_parameter():
    q = qdq.load(small("resnet18"))
    ops = {layer.op for layer in q.graph.layers}
    # each conv's and residual add's ReLU went into its output's quantization (as onnxruntime's
    # quantizer does): none is left
    assert ops == {"Conv", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm"}
    for layer in q.graph.layers:
        assert q.affine[layer.output].dtype == "uint8"
        if layer.op in ("Conv", "Gemm"):
            w, b = q.weights[layer.name][1], q.weights[layer.name][2]
            assert w.dtype == np.int8 and b.dtype == np.int32
            assert q.affine[qdq.weight_key(layer, 1)].zero_point == 0


def test_a_conv_is_onnxruntimes_qlinearconv():
    q = qdq.load(small("resnet18"))
    conv = q.graph.layers[0]
    values = q.run_integer(inputs(q))
    x, w, b = values["input"].astype(np.int64), q.weights[conv.name][1], q.weights[conv.name][2]
    px, py = q.affine["input"], q.affine[conv.output]
    acc = reference.conv_nd(x - px.zero_point, w.astype(np.int64), 2, 3) + b.reshape(1, -1, 1, 1)
    scale = (f32(px.scale) * q.affine[qdq.weight_key(conv, 1)].scale) / f32(py.scale)
    want = np.clip(np.rint(acc.astype(f32) * scale) + py.zero_point, 0, 255)
    assert np.array_equal(values[conv.output], want)


def _model(nodes, inits, inputs=(("x", TensorProto.FLOAT, [1, 4, 6, 6]),), out_type=TensorProto.FLOAT,
           output="y"):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(output, out_type, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def _conv_model(w_zero=0, bias_scale=None, op="Conv"):
    s = {"sx": f32(0.05), "zx": np.uint8(128), "sw": f32(0.01), "zw": np.int8(w_zero), "sy": f32(0.1),
         "zy": np.uint8(100), "w": np.ones((4, 4, 1, 1), np.int8), "b": np.arange(4, dtype=np.int32),
         "sb": f32(bias_scale if bias_scale is not None else f32(0.05) * f32(0.01)), "zb": np.int32(0)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], name="dqw"),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"], name="dqb"),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["yf"], name="conv")
             if op == "Conv" else helper.make_node(op, ["xd"], ["yf"], name="odd"),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"], name="qy"),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="dqy")]
    return _model(nodes, s)


def test_a_hand_written_model_imports():
    q = qdq.load(_conv_model())
    assert [layer.op for layer in q.graph.layers] == ["Conv"]
    assert q.affine["x"].zero_point == 128 and q.affine["yf"].zero_point == 100


def test_an_operator_onnxruntime_does_not_fuse_computes_in_float_between_its_quantizations():
    q = qdq.load(_conv_model(op="Softmax"))
    assert [layer.op for layer in q.graph.layers] == ["Softmax"]
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    xq = q.quantize_input("x", x)
    real = reference.dequantize_linear(xq, f32(0.05), 128).astype(np.float32)
    e = np.exp(real - real.max(axis=-1, keepdims=True))
    want = q.affine["yf"].quantize((e / e.sum(axis=-1, keepdims=True)).astype(np.float32))
    assert np.array_equal(q.run_integer({"x": x})["yf"], want)


@pytest.mark.parametrize("model, message", [
    (lambda: _conv_model(w_zero=3), "node conv (Conv): weights must be int8 with zero point 0"),
    (lambda: _conv_model(bias_scale=0.5), "node conv (Conv): its bias must be int32 at the scale x_scale"),
])
def test_bad_quantized_models_are_named(model, message):
    with pytest.raises(tg.GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
        qdq.load(model())


def test_a_float_tensor_between_quantized_layers_is_refused():
    model = _conv_model()
    relu = helper.make_node("Relu", ["yf"], ["r"], name="relu")   # the conv's float output, not quantized
    model.graph.node.insert(5, relu)
    model.graph.node[-2].input[0] = "r"
    with pytest.raises(tg.GraphError, match=r"node conv \(Conv\): its output yf is not quantized"):
        qdq.load(model)


# ---- the kernels


def test_qlinear_add_kernel_is_exact_on_every_pair():
    cpu = load_target("cpu")
    grid = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    a, b = (g.astype(np.int32).reshape(256, 16, 16) for g in grid)
    rng = np.random.default_rng(1)
    for _ in range(2):
        scales, zeros = rng.uniform(0.01, 0.1, 3).astype(f32), rng.integers(0, 256, 3)
        k = reference.qlinear_add_constants(scales[0], zeros[0], scales[1], zeros[1], scales[2], zeros[2])
        params = {"C": 256, "H": 16, "W": 16, "LO": 0, "HI": 255}
        for name, constant in zip("ABF", k, strict=True):
            params[f"M{name}"], params[f"E{name}"] = network.dyadic(constant)
        assert run(network.user_op("qlinear_add"), cpu, params, inputs=[a, b]).validated


def test_requantize_writes_float_where_there_is_no_conversion():
    rng = np.random.default_rng(2)
    acc = rng.integers(-30000, 30000, (4, 3, 5)).astype(np.int32)
    bias = np.zeros_like(acc)
    scale = np.full(acc.shape, 0.004, np.float32)
    report = run(network.user_op("requantize_scaled"), load_target("diannao"),
                 {"C": 4, "H": 3, "W": 5, "ZP": 7, "LO": 0, "HI": 255, "F": 1}, inputs=[acc, bias, scale])
    assert report.validated and report.output.dtype == np.float32


# ---- whole networks on the targets


@pytest.mark.parametrize("kind", ["cpu", "diannao", "vita"])
def test_every_step_is_bit_exact(kind):
    q = qdq.load(small("resnet18", 32))
    options = {"min_time": 0.001} if kind == "cpu" else None
    report = run_network(q, load_target(kind), inputs(q), options=options)
    assert report.validated and all(row.validated for row in report.rows)
    assert np.array_equal(report.output, q.run_integer(inputs(q))[q.graph.output])
    where = {row.op: row.where for row in report.rows}
    if kind == "vita":   # a float scale is not what VITA's epilogue computes: named, on the host
        assert where["Conv"] == "host" and where["MaxPool"] == "vita"
        assert any("float32 requantization" in row.why for row in report.rows)
    else:
        assert where["Conv"] == kind   # (the last conv's 1 x 1 output takes DianNao's scalar fallback at
        assert abs(report.totals()["tensor_macs_share"] - SHARE[kind]) < 0.01   # this size, as in the
        #                                                                          power-of-two graph)
        assert where["Add"] == ("cpu" if kind == "cpu" else "host")
    if kind == "cpu":   # each conv and the classifier's GEMM requantize in their own epilogue: one kernel
        contractions = [row for row in report.rows if row.op in ("Conv", "Gemm")]
        fused = {f"{op} (requantize fused)" for op in ("conv2d", "gemm")}
        assert {row.kernel for row in contractions} == fused
        assert all(len(row.kernels) == 1 for row in contractions)


def test_weights_per_output_channel_are_written_and_run_bit_exact_on_the_cpu():
    graph = tg.load(models.build("resnet18"), {"input": (1, 3, 32, 32)})
    model = qdq_write.write(graph, per_channel=True)
    onnx = pytest.importorskip("onnx")
    onnx.checker.check_model(model)
    q = qdq.load(model)
    for layer in graph.layers:
        if layer.op == "Conv":
            scale = q.affine[qdq.weight_key(layer, 1)].scale
            w = layer.weights[1].astype(np.float64)
            assert scale.shape == (w.shape[0],)
            assert np.allclose(scale, np.abs(w).reshape(w.shape[0], -1).max(axis=1) / 127, rtol=1e-6)
            step = scale.reshape(-1, 1, 1, 1).astype(np.float64)
            assert np.all(np.abs(q.weights[layer.name][1] * step - w) <= step * 0.5001)   # float32 rounding
    report = run_network(q, load_target("cpu"), inputs(q), options={"min_time": 0.001})
    assert report.validated and abs(report.totals()["tensor_macs_share"] - SHARE["cpu"]) < 0.01


def test_a_matmul_with_its_bias_folded_is_written_as_the_matmul_and_an_add():
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((8, 6)).astype(f32), rng.standard_normal(6).astype(f32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
             helper.make_node("Add", ["p", "b"], ["y"], name="bias")]
    graph = tg.load(_model(nodes, {"w": w, "b": b}, (("x", TensorProto.FLOAT, [1, 4, 8]),)))
    assert [(layer.op, sorted(layer.weights)) for layer in graph.layers] == [("MatMul", [1, 2])]
    q = qdq_write.quantize(graph, samples=50)   # 32 values per sample: enough of them to hold the input's
    assert [layer.op for layer in q.graph.layers] == ["MatMul", "Add"]
    assert q.check_against_float(1, graph)["relative_l2"] < 0.02


def test_depthwise_and_relu6_run_on_the_cpu():
    q = qdq.load(small("mobilenet_v2"))
    report = run_network(q, load_target("cpu"), inputs(q), options={"min_time": 0.001})
    assert report.validated and report.totals()["tensor_macs_share"] == SHARE["cpu"]


# ---- against onnxruntime, bit for bit


def _ort():
    return pytest.importorskip("onnxruntime")


def _session(model):
    ort = _ort()
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_onnxruntime_adds_as_the_reference_does():
    grid = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    a, b = (g.astype(np.uint8).reshape(1, 256, 16, 16) for g in grid)
    rng = np.random.default_rng(4)
    for _ in range(3):
        sa, sb = rng.uniform(0.01, 0.1, 2).astype(f32)
        sc = f32(rng.uniform(0.3, 2) * max(sa, sb))
        za, zb, zc = (np.uint8(v) for v in rng.integers(0, 256, 3))
        nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["af"]),
                 helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"]),
                 helper.make_node("Add", ["af", "bf"], ["cf"]),
                 helper.make_node("QuantizeLinear", ["cf", "sc", "zc"], ["c"])]
        inits = {"sa": sa, "za": za, "sb": sb, "zb": zb, "sc": sc, "zc": zc}
        model = _model(nodes, inits, [(n, TensorProto.UINT8, [1, 256, 16, 16]) for n in "ab"],
                       TensorProto.UINT8, "c")
        want = _session(model).run(None, {"a": a, "b": b})[0]
        k = reference.qlinear_add_constants(sa, int(za), sb, int(zb), sc, int(zc))
        assert np.array_equal(reference.qlinear_add(a, b, *k, 0, 255), want)


def test_onnxruntime_requantizes_as_the_reference_does():
    rng = np.random.default_rng(5)
    x = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)
    for _ in range(6):
        sx, sw = rng.uniform(0.001, 0.05, 2).astype(f32)
        target = 2.0 ** rng.uniform(-10, 0)
        sy, zx, zy = f32(sx * sw / target), np.uint8(rng.integers(0, 256)), np.uint8(rng.integers(0, 256))
        reach = int(300 / target)
        channels = min(4096, 2 * reach // 256 + 1)
        w, b = np.ones((channels, 1, 1, 1), np.int8), (np.arange(channels) * 256 - reach).astype(np.int32)
        nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
                 helper.make_node("DequantizeLinear", ["w", "sw"], ["wf"]),
                 helper.make_node("DequantizeLinear", ["b", "sb"], ["bf"]),
                 helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"]),
                 helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
        inits = {"sx": sx, "zx": zx, "w": w, "sw": sw, "b": b, "sb": f32(sx * sw), "sy": sy, "zy": zy}
        model = _model(nodes, inits, [("x", TensorProto.UINT8, [1, 1, 16, 16])], TensorProto.UINT8)
        want = _session(model).run(None, {"x": x})[0]
        acc = (x.astype(np.int64) - int(zx)) + b.reshape(1, -1, 1, 1)
        assert np.array_equal(reference.requantize_scaled(acc, (sx * sw) / sy, int(zy), 0, 255), want)


#: onnxruntime's u8 x s8 kernels on a CPU without VNNI multiply pairs with vpmaddubsw, whose int16 sums
#: saturate (x86-64's AVX2 path); Tandem's integer graph is the exact sum, onnxruntime's VNNI kernels' result
ORT_EXACT_SUMS = pytest.mark.skipif(not (host_cpu()["avx512vnni"] or host_cpu()["avxvnni"]),
                                    reason="onnxruntime's int8 kernels saturate pair sums in int16 on a CPU "
                                           "without VNNI")


@ORT_EXACT_SUMS
@pytest.mark.parametrize(("name", "per_channel"), [("resnet18", False), ("mobilenet_v2", False),
                                                   ("resnet18", True)])
def test_onnxruntime_runs_the_same_network(name, per_channel):
    model = qdq_write.write(tg.load(models.build(name), {"input": (1, 3, 32, 32)}), per_channel=per_channel)
    q = qdq.load(model)
    session = _session(model)
    for seed in range(2):
        x = inputs(q, seed)
        got = q.dequantize(q.graph.output, q.run_integer(x)[q.graph.output])
        assert np.array_equal(got.astype(np.float32), session.run(None, x)[0])


def _quantize_static(tmp_path, pre_process: bool, per_channel: bool = False, samples: int = 2) -> str:
    """onnxruntime's quantize_static of the builtin ResNet-18 at 32 x 32 (after its pre-processing, which
    folds the BatchNormalizations, where ``pre_process``), calibrated on seeded inputs: the QDQ file's
    path."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = models.build("resnet18")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = 32
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    (tmp_path / "f.onnx").write_bytes(model.SerializeToString())
    source = str(tmp_path / ("p.onnx" if pre_process else "f.onnx"))
    if pre_process:
        quant_pre_process(str(tmp_path / "f.onnx"), source, skip_symbolic_shape=True)
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.left = [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
                         for _ in range(samples)]

        def get_next(self):
            return self.left.pop() if self.left else None
    quantize_static(source, str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=per_channel, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return str(tmp_path / "q.onnx")


@ORT_EXACT_SUMS
def test_onnxruntimes_own_quantizer(tmp_path):
    """A model quantized by onnxruntime's quantize_static (after its pre-processing), as users make them."""
    from typer.testing import CliRunner

    from tandem.cli.app import app

    _ort()
    path = _quantize_static(tmp_path, pre_process=True)
    result = CliRunner().invoke(app, ["model", path, "--target", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["check"]["exact"] and report["network"]["onnxruntime"]["exact"]
    assert report["network"]["validated"]


def test_quantize_linear_saturates_and_sends_nan_to_the_lowest_value_as_onnxruntime_does():
    """MLAS clamps ``x / scale`` in float before it rounds: an infinity saturates, a nan goes to the lowest
    value (x86's maxps returns its second operand), a value past int32's saturates too."""
    x = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 2.5, 3.5, -0.5, 300, -300, 1.5e9] * 8, np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [x.size])],
                              [numpy_helper.from_array(f32(1.0), "s"),
                               numpy_helper.from_array(np.array(10, np.uint8), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    want = _session(model).run(None, {"x": x})[0]
    got = reference.quantize_linear(x, 1.0, 10, 0, 255, np.uint8)
    assert got.dtype == np.uint8 and np.array_equal(got, want) and list(got[:5]) == [0, 255, 0, 255, 0]


@ORT_EXACT_SUMS
def test_an_unfolded_batch_normalization_is_a_table_per_channel(tmp_path):
    """quantize_static without its pre-processing leaves each BatchNormalization in float between a
    DequantizeLinear and a QuantizeLinear: Tandem computes it by a table of its 256 results per channel,
    looked up on the conv's blocked output in the timed inference; the outputs equal onnxruntime's."""
    _ort()
    from tandem.network.load import load_network

    path = _quantize_static(tmp_path, pre_process=False, per_channel=True, samples=1)
    q = load_network(path).quantized
    norms = [layer for layer in q.graph.layers if layer.op == "BatchNormalization"]
    x = tg.random_inputs(q.graph, np.random.default_rng(1))
    report = run_network(q, load_target("cpu"), x, options={"min_time": 0.01})
    assert len(norms) == 20 and all(q.tables[n.name].shape == (n.shape[1], 256) for n in norms)
    assert report.validated and report.inference_validated
    assert not {n.name for n in norms} & set(report.inference_placed)
    assert all("its table of 256 results per channel looked up" in r.why for r in report.rows
               if r.op == "BatchNormalization")
    session = _ort().InferenceSession(path, providers=["CPUExecutionProvider"])
    want = session.run(None, {"input": x["input"]})[0]
    np.testing.assert_array_equal(q.dequantize(q.graph.output, report.output).astype(np.float32), want)


def _moves_model():
    """A QDQ model of data movement, every activation at one quantization (zero point 100): Split, Concat,
    Pad (constant 0: the zero point), Slice, Transpose, nearest Resize, Gather, ReduceMax."""
    q = {"s": f32(0.05), "z": np.uint8(100)}
    nodes = []

    def qdq_pair(name: str) -> str:
        nodes.append(helper.make_node("QuantizeLinear", [name, "s", "z"], [f"{name}_q"], name=f"{name}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", "s", "z"], [f"{name}_dq"],
                                      name=f"{name}_DQ"))
        return f"{name}_dq"

    def op(kind: str, inputs: list[str], outputs: list[str], **attrs) -> list[str]:
        nodes.append(helper.make_node(kind, inputs, outputs, name=outputs[0], **attrs))
        return [qdq_pair(name) for name in outputs]

    i64 = {"sizes": [1, 3], "pads": [0, 0, 1, 0, 0, 0, 2, 1], "starts": [1], "ends": [7], "axes": [2],
           "idx": [2, 0, 3], "rmax": [3]}
    consts = {**{k: np.array(v, np.int64) for k, v in i64.items()}, "scales": np.array([1, 1, 2, 1], f32)}
    a, b = op("Split", [qdq_pair("x"), "sizes"], ["a", "b"], axis=1)
    (y,) = op("Concat", [b, a], ["cat"], axis=1)
    (y,) = op("Pad", [y, "pads"], ["pad"], mode="constant")
    (y,) = op("Slice", [y, "starts", "ends", "axes"], ["slice"])
    (y,) = op("Transpose", [y], ["t"], perm=[0, 1, 3, 2])
    (y,) = op("Resize", [y, "", "scales"], ["up"], mode="nearest")
    (y,) = op("Gather", [y, "idx"], ["g"], axis=1)
    (y,) = op("ReduceMax", [y, "rmax"], ["m"], keepdims=1)
    return _model(nodes, {**q, **consts}, output=y)


def test_data_movement_computes_on_the_integers_as_onnxruntime_does():
    model = _moves_model()
    q = qdq.load(model)
    assert all(qdq.moved(layer) for layer in q.graph.layers)
    assert [len(layer.outputs) for layer in q.graph.layers][:2] == [2, 1]
    x = {"x": np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32) * 3}
    values = q.run_integer(x)
    pad = next(layer for layer in q.graph.layers if layer.op == "Pad")
    assert np.all(values[pad.output][:, :, 0] == 100)   # the padded row: the zero point
    report = run_network(q, load_target("cpu"), x)   # every step on the host, each output written
    assert report.validated and {r.where for r in report.rows} == {"host"}
    assert np.array_equal(report.output, values[q.graph.output])
    got = q.dequantize(q.graph.output, values[q.graph.output]).astype(np.float32)
    assert np.array_equal(got, _session(model).run(None, x)[0])


@pytest.mark.parametrize("vnni", [True, False])
def test_a_difference_from_onnxruntime_is_held_only_where_its_kernels_are_exact(monkeypatch, vnni):
    """On a CPU without VNNI onnxruntime's u8 x s8 kernels saturate: a QDQ model's output that differs
    from its run is reported, with why, but not held against the run (``tandem model`` exits 0)."""
    pytest.importorskip("onnxruntime")
    from compiler.backend import llvm
    from tandem.cli import model as model_cli

    features = {**llvm.host_cpu(), "avx512vnni": vnni, "avxvnni": vnni}
    monkeypatch.setattr(llvm, "host_cpu", lambda: features)
    onnx_model = small("resnet18")
    q = qdq.load(onnx_model)
    x = inputs(q)
    wrong = q.run_integer(x)[q.graph.output].copy()
    wrong.flat[0] = 255 - wrong.flat[0]   # one value off
    check = model_cli._exact_against_onnxruntime(onnx_model, q, x, wrong)
    assert check["exact"] is False and check["differ"] >= 1
    if vnni:
        assert check["checked"] and check["passed"] is False
    else:
        assert not check["checked"] and check["passed"] is None and "not held to it: this CPU has no VNNI" \
            in check["detail"]
