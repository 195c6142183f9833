"""Quantized (QDQ) networks on this CPU against onnxruntime on the same file (issue 48): the builtin
resnet18_qdq, resnet50_qdq and mobilenet_v2_qdq (uint8 activations with zero points, int8 weights, float32
scales, as onnxruntime's quantizer writes them), and ``resnet18_quantize_static``: onnxruntime's own
``quantize_static`` of the float ResNet-18 (per channel, no pre-processing: its 20 BatchNormalizations stay
in float between a DequantizeLinear and a QuantizeLinear), on 1 and 2 threads.

The benchmarked call is onnxruntime's ``session.run`` (the peer, timed by pytest-benchmark); in the same
run Tandem compiles and runs every step of the same model on the CPU, each checked bit for bit against its
integer graph, and ``extra_info`` records Tandem's whole inference end to end (the median of several,
tandem/network/inference.py: the input quantized, every layout move and kernel, as onnxruntime's figure has
them) and the sum of its kernels alone (each kernel's median of a native loop of calls), onnxruntime's
median, the ratios (> 1: Tandem faster) and the CPU.

    pytest benchmarks/test_cpu_qdq.py --benchmark-only
"""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backend.llvm import host_cpu
from tandem.flows.targets import load_target
from tandem.network import models
from tandem.network.load import load_network
from tandem.network.run import run_network

ort = pytest.importorskip("onnxruntime")


def quantize_static(name: str, tmp_path):
    """onnxruntime's ``quantize_static`` of builtin ``name`` (float, 224 x 224), calibrated on two seeded
    random inputs: per output channel, uint8 activations, int8 weights, QDQ."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType
    from onnxruntime.quantization import quantize_static as quantize

    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            shape = (1, 3, 224, 224)
            self.left = [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(2)]

        def get_next(self):
            return self.left.pop() if self.left else None
    (tmp_path / "f.onnx").write_bytes(models.build(name, 0).SerializeToString())
    quantize(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
             per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    import onnx
    return onnx.load(str(tmp_path / "q.onnx"))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model", ["resnet18_qdq", "resnet50_qdq", "mobilenet_v2_qdq",
                                   "resnet18_quantize_static"])
def test_qdq_network_against_onnxruntime(benchmark, model: str, threads: int, tmp_path) -> None:
    onnx_model = quantize_static("resnet18", tmp_path) if model == "resnet18_quantize_static" else \
        models.build(model, 0)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(onnx_model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    x = {name: np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    for _ in range(3):
        session.run(None, x)
    benchmark.pedantic(session.run, args=(None, x), rounds=20, iterations=1)
    peer = benchmark.stats.stats.median

    q = load_network(model=onnx_model).quantized
    report = run_network(q, load_target("cpu"), {name: x[name]},
                         options={"threads": threads, "min_time": 0.05})
    assert report.validated
    ours, e2e = report.totals()["seconds"], report.inference_s
    benchmark.extra_info.update(cpu=host_cpu()["cpu"], threads=threads, onnxruntime_ms=round(peer * 1e3, 3),
                                tandem_end_to_end_ms=round(e2e * 1e3, 3),
                                tandem_kernels_ms=round(ours * 1e3, 3),
                                end_to_end_speedup_vs_onnxruntime=round(peer / e2e, 3),
                                kernels_speedup_vs_onnxruntime=round(peer / ours, 3),
                                tensor_macs_share=report.tensor_macs_share)
