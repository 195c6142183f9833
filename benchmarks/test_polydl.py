"""PolyDL on this CPU (issue 27): how long its analysis takes to rank a layer's variants, and the speed of
the variant it chooses, fp32 and int8 (``experiments/polydl.py`` compares the choice with an exhaustive
measured search and with onnxruntime on PolyDL's whole layer lists).

``test_ranking`` times ``tandem.flows.polydl.choose`` (the first loop order lowered, the others its polyhedral
nest reordered, every variant's working sets computed with islpy and placed in this CPU's caches);
``test_chosen_kernel`` times the chosen kernel, checked against numpy first, and records GOPS and the share of
the measured peak (vpdpbusd for int8, the FMA for fp32) in ``extra_info``.

    pytest benchmarks/test_polydl.py --benchmark-only
"""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_probe import measure_peak
from compiler.ops import cpu
from compiler.ops.nn import ConvShape
from tandem.flows import cpu_layers
from tandem.flows.cpu import compile_layer
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.cpu_tuning import tuning_space
from tandem.flows.layer_tables import POLYDL_RESNET50
from tandem.flows.polydl import choose
from tandem.flows.targets import load_target

pytestmark = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
LAYERS = ("3", "7", "14")   # ResNet-50's 56x56 3x3, 28x28 3x3 and 14x14 1x1 (1024 -> 256)
DTYPES = {"int8": ("uint8", "x86-vnni", "vnni"), "fp32": ("float32", "x86-avx512", "fma")}


def _layer(name: str) -> ConvShape:
    return ConvShape(*POLYDL_RESNET50[name])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", LAYERS)
def test_ranking(benchmark, name: str, threads: int) -> None:
    layer = _layer(name)
    target = load_target("cpu")
    choice = benchmark(choose, layer, tuning_space(layer, threads=threads)[0], "x86-vnni", threads, target)
    benchmark.extra_info.update(variants=len(choice.ranked), chosen=str(choice.tuning))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", LAYERS)
def test_chosen_kernel(benchmark, name: str, dtype: str) -> None:
    layer, options = _layer(name), CpuOptions(DTYPES[dtype][0])
    target = load_target("cpu")
    _, isa, probe = DTYPES[dtype]
    choice = choose(layer, tuning_space(layer)[0], isa, 1, target, options=options)
    func, kernel = compile_layer(layer, isa, choice.tuning, 1, target, options)
    data, weight = cpu_layers.inputs(layer, 0, options)
    packed = cpu_layers.pack(layer, data, weight, cpu.packing(isa, options.dtype, target.spec))
    out = np.zeros(func.params[-1].shape, func.params[-1].dtype.numpy)
    benchmark(kernel, *packed, out)
    magnitude = cpu_layers.magnitude(layer, data, weight, options=options) if options.is_float else None
    want = cpu_layers.reference(layer, data, weight, options=options)
    check = cpu_layers.check(layer, cpu_layers.unpack(layer, out), want, magnitude, options)
    assert check.validated, check.detail
    gops = 2 * layer.macs / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update(gops=gops, pct_of_peak=100 * gops / measure_peak(1, probe),
                                tuning=str(choice.tuning))
