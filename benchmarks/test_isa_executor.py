"""Cost of the generic ISA executor per instruction: what a simulator pays for functional semantics.

    pytest benchmarks/test_isa_executor.py --benchmark-only
"""

from __future__ import annotations

import numpy as np
import pytest

import isa

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def vita() -> isa.ISA:
    return isa.load_isa("vita")


@pytest.fixture(scope="module")
def x86() -> isa.ISA:
    return isa.load_isa("x86")


def test_vita_gemm_micro_op(benchmark, vita):
    tensors = {
        "acc": RNG.integers(-1000, 1000, (1, 16)).astype(np.int32),
        "inp": RNG.integers(-128, 128, (1, 16)).astype(np.int8),
        "wgt": RNG.integers(-128, 128, (16, 16)).astype(np.int8),
    }
    insn = vita.insn("GEMM")
    benchmark(isa.execute, vita, insn, tensors)


def test_x86_vpdpbusd(benchmark, x86):
    tensors = {
        "a": RNG.integers(0, 256, 64).astype(np.uint8),
        "b": RNG.integers(-128, 128, 64).astype(np.int8),
        "c": RNG.integers(-1000, 1000, 16).astype(np.int32),
        "d": np.zeros(16, np.int32),
    }
    benchmark(isa.execute, x86, x86.insn("vpdpbusd_512"), tensors)


def test_semantics_typing_at_load(benchmark):
    benchmark(isa.load_isa, "vita")
