"""Cost of compiling seed 001's element-wise suite for DianNao: schedule, the ``diannao`` pipeline (with its
verifier, on by default) and codegen, no simulation, for all 64 element-wise cases of Table II (16 shapes for
each of add, sub and mul, and 16 for relu; float32, 16 cores), one round.

    pytest benchmarks/test_diannao_compile.py --benchmark-only

Conv is not in the suite yet: compiler/ops/diannao.py has no conv schedule. The case table is the one of
experiments/diannao_loop_partition.py.
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
from sim.diannao.config import load_config

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "diannao_loop_partition.py"


def _experiment():
    spec = importlib.util.spec_from_file_location("diannao_loop_partition", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compile_suite(cases, spec) -> list:
    """Compile every case (schedule + pipeline + codegen); return the (function, kernel) pairs."""
    out = []
    for case in cases:
        sched = dops.elementwise(case.op, case.shape, "float32", 16)
        func = compile_func(lower(sched.schedule, list(sched.args), case.op), "diannao")
        out.append((func, codegen(func, spec)))
    return out


def test_compile_the_element_wise_cases_of_table_ii(benchmark):
    exp = _experiment()
    cases = exp.table_ii_cases(["binary", "relu"])
    assert len(cases) == 64
    spec = load_config("default").spec()
    compiled = benchmark.pedantic(compile_suite, args=(cases, spec), rounds=1, iterations=1)
    assert len(compiled) == 64
    assert all(not unmatched(func) for func, _ in compiled)   # every marked statement became an instruction
    benchmark.extra_info["cases"] = len(compiled)
    benchmark.extra_info["ms_per_case"] = benchmark.stats.stats.mean / len(compiled) * 1e3
