"""Cost of compiling seed 001's suite for DianNao: schedule, the ``diannao`` pipeline (with its verifier, on
by default) and codegen, no simulation, one round each:

- the 64 element-wise cases of Table II (16 shapes for each of add, sub and mul, and 16 for relu; float32);
- the 16 conv layers of Table II (3x3, stride 1, pad 1, float32);
- the whole suite (80 compilations: the 48 Table II cases with add, sub and mul compiled separately).

All on 16 cores. The case table is the one of experiments/diannao_loop_partition.py.

    pytest benchmarks/test_diannao_compile.py --benchmark-only
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from compiler.backend.diannao import codegen
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from tandem.flows.targets import load_target

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "diannao_loop_partition.py"


def _experiment():
    spec = importlib.util.spec_from_file_location("diannao_loop_partition", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compile_suite(cases, target) -> list:
    """Compile every case (schedule + pipeline + codegen); return the (function, kernel) pairs."""
    out = []
    for case in cases:
        if case.cls == "conv":
            h, w, cin = case.shape
            sched = dops.conv2d(h, w, cin, case.weights[0], case.weights[1], 1, 1, "float32", 16,
                                spec=target.spec)
        else:
            sched = dops.elementwise(case.op, case.shape, "float32", 16, spec=target.spec)
        func = compile_func(lower(sched.schedule, list(sched.args), case.op), target)
        out.append((func, codegen(func, target.spec)))
    return out


def _bench(benchmark, classes: list[str], count: int) -> None:
    cases = _experiment().table_ii_cases(classes)
    assert len(cases) == count
    target = load_target("diannao")
    compiled = benchmark.pedantic(compile_suite, args=(cases, target), rounds=1, iterations=1)
    assert len(compiled) == count
    # every marked statement became an instruction
    assert all(not unmatched(func, target.spec) for func, _ in compiled)
    benchmark.extra_info["cases"] = len(compiled)
    benchmark.extra_info["ms_per_case"] = benchmark.stats.stats.mean / len(compiled) * 1e3


def test_compile_the_element_wise_cases_of_table_ii(benchmark):
    _bench(benchmark, ["binary", "relu"], 64)


def test_compile_the_conv_layers_of_table_ii(benchmark):
    _bench(benchmark, ["conv"], 16)


def test_compile_the_whole_table_ii_suite(benchmark):
    _bench(benchmark, ["binary", "relu", "conv"], 80)
