"""onnxruntime as a CPU peer: its integer operators (ConvInteger / MatMulInteger, exact), its requantizing
QLinear ones (timing only) or its fp32 ones (MLAS), on one layer or on one of TensorIR's kinds; and a whole
float model as onnxruntime's own int8 quantization runs it (``int8_session``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from baselines.cpu_layers import ConvSpec, GemmSpec, qlinear_shift
from baselines.peer import Peer, Runner, check_threads


def _import_reason(module: str, package: str) -> str | None:
    try:
        __import__(module)
    except ImportError as e:
        return f"{package} is not installed ({e})"
    return None


class OnnxRuntimePeer(Peer):
    """onnxruntime's ConvInteger / MatMulInteger (exact), or with ``qlinear`` QLinearConv / QLinearMatMul, or
    with ``float32`` its fp32 Conv / MatMul (MLAS's kernels; f32 operands, not bit-exact)."""

    def __init__(self, qlinear: bool = False, float32: bool = False) -> None:
        self.qlinear, self.float32 = qlinear, float32
        self.exact = not (qlinear or float32)
        self.name = "onnxruntime-fp32" if float32 else "onnxruntime-qlinear" if qlinear else "onnxruntime"
        if float32:
            self.operands = (np.float32, np.float32)

    def available(self) -> str | None:
        return _import_reason("onnxruntime", "onnxruntime") or _import_reason("onnx", "onnx")

    def _session(self, node: Any, feed: np.ndarray, inits: list[np.ndarray], threads: int) -> Runner:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        names = list(node.input)
        initializers = [numpy_helper.from_array(v, n) for n, v in zip(names[1:], inits, strict=True)]
        x = helper.make_tensor_value_info(names[0], helper.np_dtype_to_tensor_dtype(feed.dtype), feed.shape)
        y_type = (TensorProto.FLOAT if self.float32 else TensorProto.UINT8 if self.qlinear
                  else TensorProto.INT32)
        y = helper.make_tensor_value_info("y", y_type, None)
        graph = helper.make_graph([node], self.name, [x], [y], initializer=initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        model.ir_version = 10
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {names[0]: feed}
        return lambda: session.run(None, feeds)[0]

    def _quant_params(self, weights: np.ndarray, reduction: int) -> list[np.ndarray]:
        """The QLinear* initializers: x_scale, x_zp, w, w_scale, w_zp, y_scale = 2**shift, y_zp."""
        one, u8_zero, s8_zero = np.array(1.0, np.float32), np.array(0, np.uint8), np.array(0, np.int8)
        y_scale = np.array(2.0 ** qlinear_shift(reduction), np.float32)
        return [one, u8_zero, weights, one, s8_zero, y_scale, u8_zero]

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        from onnx import helper

        attrs = dict(strides=[spec.stride] * 2, pads=[spec.pad] * 4, kernel_shape=[spec.r] * 2)
        if self.float32:
            node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
            return self._session(node, data, [kernel], threads)
        if self.qlinear:
            inputs = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
            inits = self._quant_params(kernel, spec.c * spec.r * spec.r)
            node = helper.make_node("QLinearConv", inputs, ["y"], **attrs)
        else:
            inits = [kernel]
            node = helper.make_node("ConvInteger", ["x", "w"], ["y"], **attrs)
        return self._session(node, data, inits, threads)

    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        from onnx import helper

        bt = np.ascontiguousarray(b.T)
        if self.float32:
            return self._session(helper.make_node("MatMul", ["a", "b"], ["y"]), a, [bt], threads)
        if self.qlinear:
            inputs = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
            node = helper.make_node("QLinearMatMul", inputs, ["y"])
            return self._session(node, a, self._quant_params(bt, spec.k), threads)
        node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
        return self._session(node, a, [bt], threads)


def prepare_contraction(op: Any, data: np.ndarray, weight: np.ndarray, threads: int,
                        qlinear: bool = False) -> Runner | None:
    """onnxruntime's integer operator for one of TensorIR's kinds (``compiler.ops.contractions``) on the
    plain u8 data and s8 weights: ``ConvInteger`` with the kind's strides, pads, dilations and groups (1-D
    to 3-D, depthwise as C groups) or ``MatMulInteger`` for a batch matmul ([B, M, K] x [B, K, N]), whose
    callable returns the exact int32 result in the kind's plain layout; with ``qlinear``, QLinearConv /
    QLinearMatMul (timing only: a requantized u8 result, onnxruntime's fast int8 path). None for a
    transposed convolution, which ONNX has no integer operator for."""
    from onnx import helper

    peer = OnnxRuntimePeer(qlinear)
    check_threads("prepare_contraction", threads)
    if op.kind == "conv_transpose":
        return None
    if op.kind == "batch_matmul":
        weights, reduction = np.ascontiguousarray(weight.transpose(0, 2, 1)), weight.shape[-1]
        name, attrs = "MatMul", {}
    else:
        p, dims = op.params, data.ndim - 2
        weights, reduction = weight, math.prod(weight.shape[1:])
        name = "Conv"
        attrs = dict(strides=[p["S"]] * dims, pads=[p["P"]] * (2 * dims), dilations=[p["DIL"]] * dims,
                     kernel_shape=[p["K"]] * dims, group=op.groups)
    if qlinear:
        inputs = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
        node = helper.make_node(f"QLinear{name}", inputs, ["y"], **attrs)
        return peer._session(node, data, peer._quant_params(weights, reduction), threads)
    node = helper.make_node(f"{name}Integer", ["x", "w"], ["y"], **attrs)
    return peer._session(node, data, [weights], threads)


def int8_session(model: Any, threads: int, seed: int = 0) -> tuple[Any, dict[str, np.ndarray]]:
    """An onnxruntime session of ``quantize_static``'s int8 model of float ``model`` (an ONNX ModelProto of
    one input: QDQ, per tensor, uint8 activations, int8 weights, calibrated on 4 random inputs seeded with
    ``seed``) on ``threads`` threads, and an input seeded with ``seed + 1``."""
    import tempfile
    from pathlib import Path

    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    check_threads("int8_session", threads)
    rng = np.random.default_rng(seed)
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]

        def get_next(self):
            return self.left.pop() if self.left else None

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "f32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(model.SerializeToString())
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(str(dst), options, providers=["CPUExecutionProvider"])
    return session, {name: np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32)}
