"""Transformer GEMMs on this CPU against onnxruntime (issue 48, item 4): BERT-base's and ViT-B's projections
and MLP (M = 128 and 197 tokens, N and K 768-3072), a decoding GEMV (M = 1) and PolyDL's eight GEMMs
(``layer_tables.POLYDL_GEMMS``: GNMT, DeepBench's K = 500000, square 4096, long K, N and M; DeepBench's data
is 512 MB), in int8 (u8 x s8 -> s32) and fp32, on 1 and 2 threads.

The benchmarked call is Tandem's kernel as a run gets it by default (the isa and instruction this CPU runs,
PolyDL's choice of tuning, nothing timed to choose it), after a check against numpy (bit for bit in int8);
``extra_info`` records its GOPS, the share of the measured peak of the instruction it is held to
(``tandem.flows.cpu.layer_peak``: vpdpbusd or the FMA with AVX-512, vpmaddwd or FMA3's vfmadd_ps_256 on an
AVX2 CPU), onnxruntime's GOPS on the same operands in the same run (QLinearMatMul for int8, MatMul for fp32)
and the ratio (> 1: Tandem faster).

    pytest benchmarks/test_cpu_gemm.py --benchmark-only
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from baselines.cpu_peers import FP32_PEER, QLINEAR_PEER
from baselines.peer import GemmSpec
from compiler.backend import aligned
from compiler.backend.blas import quiet_blas
from compiler.backend.llvm import host_cpu
from compiler.ops.nn import GemmShape
from tandem.flows import cpu_layers
from tandem.flows.cpu import compile_layer, default_isa, host_packing, layer_peak
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.cpu_tuning import select
from tandem.flows.layer_tables import POLYDL_GEMMS
from tandem.flows.targets import load_target

SHAPES = {"bert-qkv": (128, 768, 768), "bert-mlp-up": (128, 3072, 768), "bert-mlp-down": (128, 768, 3072),
          "vit-mlp-up": (197, 3072, 768), "gemv": (1, 768, 768),
          **{f"polydl-{name}": shape for name, shape in POLYDL_GEMMS.items()}}
DTYPES = {"int8": "uint8", "fp32": "float32"}


def _peer_seconds(run, rounds: int = 20) -> float:
    run()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_transformer_gemm(benchmark, shape: str, dtype: str, threads: int) -> None:
    layer, target = GemmShape(*SHAPES[shape]), load_target("cpu")
    options = CpuOptions(DTYPES[dtype])
    isa = default_isa(options, target)
    pk = host_packing(isa, options, target)
    options = dataclasses.replace(options, instruction=pk.instruction)
    (tuning, *_), _ = select(layer, isa, threads, 0, None, target, options)
    func, kernel = compile_layer(layer, isa, tuning, threads, target, options)
    data, weight = cpu_layers.inputs(layer, 0, options)
    packed = [aligned.aligned(a) for a in cpu_layers.pack(layer, data, weight, pk)]   # as a run hands them
    out = aligned.zeros(func.params[-1].shape, func.params[-1].dtype.numpy)
    kernel(*packed, out)
    with quiet_blas():   # the reference's float64 BLAS: no thread left spinning while the kernel is timed
        magnitude = cpu_layers.magnitude(layer, data, weight, options=options) if options.is_float else None
        want = cpu_layers.reference(layer, data, weight, options=options)
    check = cpu_layers.check(layer, cpu_layers.unpack(layer, out, options), want, magnitude, options)
    assert check.validated, check.detail
    benchmark(kernel, *packed, out)

    gops = 2 * layer.macs / benchmark.stats.stats.median / 1e9
    name, peak = layer_peak(options, pk, threads, target)
    peer = FP32_PEER if options.is_float else QLINEAR_PEER
    ort = None
    if peer.available() is None:
        runner = peer.prepare_gemm(GemmSpec(layer.m, layer.n, layer.k), data, weight, threads)
        ort = 2 * layer.macs / _peer_seconds(runner) / 1e9
    benchmark.extra_info.update(
        cpu=host_cpu()["cpu"], isa=isa, instruction=pk.instruction, tuning=str(tuning), gops=round(gops, 2),
        peak_instruction=name, pct_of_peak=round(100 * gops / peak, 1) if peak else None,
        onnxruntime_gops=round(ort, 2) if ort else None,
        over_onnxruntime=round(gops / ort, 3) if ort else None)
