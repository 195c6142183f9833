"""The power-of-two int8 builtins on this CPU against onnxruntime's own int8 quantization of the same float
model (issue 48): resnet18, resnet50, mobilenet_v2, bert_encoder and vit_block, on 1 and 2 threads.

The benchmarked call is onnxruntime's ``session.run`` of ``quantize_static``'s model (the peer, timed by
pytest-benchmark; ``baselines.onnxruntime_peer.int8_session``); in the same run Tandem quantizes the float
model its own way (``tandem.network.quantize``: power-of-two scales), compiles and runs every step on the
CPU, each checked bit for bit against its integer graph, and ``extra_info`` records Tandem's whole
inference end to end (the float input quantized, every layout move and kernel, the output dequantized:
tandem/network/inference.py), the sum of its kernels alone, onnxruntime's median, the ratio (> 1: Tandem
faster) and the CPU.

    pytest benchmarks/test_cpu_builtins.py --benchmark-only
"""

from __future__ import annotations

import pytest

from compiler.backend.llvm import host_cpu
from tandem.flows.targets import load_target
from tandem.network import graph as tg
from tandem.network import models
from tandem.network.quantize import quantize
from tandem.network.run import run_network

pytest.importorskip("onnxruntime")
SEED = 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model", ["resnet18", "resnet50", "mobilenet_v2", "bert_encoder", "vit_block"])
def test_builtin_against_onnxruntime_int8(benchmark, model: str, threads: int) -> None:
    from baselines.onnxruntime_peer import int8_session

    session, x = int8_session(models.build(model, SEED), threads, SEED)
    for _ in range(3):
        session.run(None, x)
    benchmark.pedantic(session.run, args=(None, x), rounds=20, iterations=1)
    peer = benchmark.stats.stats.median

    q = quantize(tg.load(models.build(model, SEED)), samples=2)
    report = run_network(q, load_target("cpu"), x, options={"threads": threads, "min_time": 0.1})
    assert report.validated and report.inference_validated
    e2e, kernels = report.inference_s, report.totals()["seconds"]
    benchmark.extra_info.update(cpu=host_cpu()["cpu"], threads=threads,
                                onnxruntime_int8_ms=round(peer * 1e3, 3),
                                tandem_end_to_end_ms=round(e2e * 1e3, 3),
                                tandem_kernels_ms=round(kernels * 1e3, 3),
                                end_to_end_speedup_vs_onnxruntime=round(peer / e2e, 3))
