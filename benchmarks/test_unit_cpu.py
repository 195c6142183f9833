"""Tandem's UNIT flow on this CPU: ResNet-18's C2-C12, int8, batch 1, AVX-512 VNNI (the CPU issue's
benchmark).

Each layer is compiled once (the tuning a run gets by default: PolyDL's choice, ``cpu_tuning.select``), its
operands line-aligned as a run hands them, checked bit-exact against numpy (numpy's BLAS on one thread, so
that none of its threads spins while the next layer is timed), and timed by pytest-benchmark on 1 and on 2
threads; ``extra_info`` records GOPS and
the share of this CPU's measured vpdpbusd peak. The peers (TVM, onnxruntime, numpy) are measured side by side
by ``experiments/unit_cpu.py``; install them with ``pip install -e ".[test,peers]"``.

    pytest benchmarks/test_unit_cpu.py --benchmark-only
"""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backend import aligned
from compiler.backend.blas import quiet_blas
from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_probe import measure_peak
from compiler.ops.nn import ConvShape
from tandem.flows import cpu_layers
from tandem.flows.cpu import compile_layer
from tandem.flows.cpu_tuning import select
from tandem.flows.layer_tables import RESNET18, padding
from tandem.flows.targets import load_target

pytestmark = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
LAYERS = {name: ConvShape(hw, hw, ic, oc, k, s, padding(k))
          for name, (hw, ic, oc, k, s) in RESNET18.items()}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(LAYERS))
def test_resnet18_layer(benchmark, name: str, threads: int) -> None:
    layer = LAYERS[name]
    target = load_target("cpu")
    (tuning, *_), _ = select(layer, "x86-vnni", threads, 0, None, target)
    func, kernel = compile_layer(layer, "x86-vnni", tuning, threads, target)
    data, weight = cpu_layers.inputs(layer, 0)
    packed = [aligned.aligned(a) for a in cpu_layers.pack(layer, data, weight)]
    out = aligned.zeros(func.params[-1].shape, np.int32)
    benchmark(kernel.bind(*packed, out))   # as an inference calls it: the arrays checked once, not per call
    with quiet_blas():
        want = cpu_layers.reference(layer, data, weight)
    np.testing.assert_array_equal(cpu_layers.unpack(layer, out), want)
    gops = 2 * layer.macs / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update(gops=gops, pct_of_peak=100 * gops / measure_peak(threads), threads=threads)
