"""Tandem's UNIT flow on this CPU: ResNet-18's C2-C12, int8, batch 1, AVX-512 VNNI (the CPU issue's
benchmark).

Each layer is compiled once (UNIT's default breaking points, the first candidate of ``tuning_space``), checked
bit-exact against numpy, and timed by pytest-benchmark on 1 and on 2 threads; ``extra_info`` records GOPS and
the share of this CPU's measured vpdpbusd peak. The peers (TVM, onnxruntime, numpy) are measured side by side
by ``experiments/unit_cpu.py``; install them with ``pip install -e ".[test,peers]"``.

    pytest benchmarks/test_unit_cpu.py --benchmark-only
"""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_probe import measure_peak
from compiler.ops.nn import ConvShape
from tandem.flows import cpu_layers
from tandem.flows.cpu import compile_layer
from tandem.flows.cpu_tuning import tuning_space
from tandem.flows.layer_tables import RESNET18, padding
from tandem.flows.targets import load_target

pytestmark = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
LAYERS = {name: ConvShape(hw, hw, ic, oc, k, s, padding(k))
          for name, (hw, ic, oc, k, s) in RESNET18.items()}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(LAYERS))
def test_resnet18_layer(benchmark, name: str, threads: int) -> None:
    layer = LAYERS[name]
    func, kernel = compile_layer(layer, "x86-vnni", tuning_space(layer)[0], threads, load_target("cpu"))
    data, weight = cpu_layers.inputs(layer, 0)
    packed = cpu_layers.pack(layer, data, weight)
    out = np.zeros(func.params[-1].shape, np.int32)
    benchmark(kernel, *packed, out)
    np.testing.assert_array_equal(cpu_layers.unpack(layer, out), cpu_layers.reference(layer, data, weight))
    gops = 2 * layer.macs / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update(gops=gops, pct_of_peak=100 * gops / measure_peak(threads), threads=threads)
