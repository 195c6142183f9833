"""The double-buffered 256x256x256 GEMM (baselines/vita_gemm.py) on the VITA simulator: bit-exact with numpy,
and its cycles sit between the memory/compute bound and the serialized sum."""

from __future__ import annotations

import numpy as np

import isa
from baselines.vita_gemm import BLOCKS, KB, TM, K, M, N, dram_image, output, program, reference
from sim.vita.config import load_config
from sim.vita.machine import simulate

CFG = load_config("vta-default")
P = isa.load_isa("vita").params


def test_double_buffered_256_cubed_gemm_is_bit_exact_and_overlaps_memory_with_compute():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    result = simulate(program(), dram_image(a, w), CFG)

    assert np.array_equal(output(result.dram), reference(a, w))

    # the spec's timing: GEMM one cycle per micro-op, the ALU two, each after its pipeline fills
    gemm_fill, alu_fill = P["GEMM_PIPELINE_CYCLES"], P["ALU_PIPELINE_CYCLES"]
    per_block_compute = ((gemm_fill + TM) + (gemm_fill + TM * KB) + 3 * (alu_fill + TM * 2))
    per_block_memory = (TM * K + K * 16 + TM * 16) // P["DRAM_BYTES_PER_CYCLE"]
    compute, memory = len(BLOCKS) * per_block_compute, len(BLOCKS) * per_block_memory
    serialized = compute + memory + len(BLOCKS) * 3 * CFG.dram_latency_cycles
    assert max(compute, memory) <= result.cycles < serialized
    assert result.counters["gemm_counter"] == len(BLOCKS) * TM * KB
    assert result.gemm_busy_cycles == len(BLOCKS) * TM * KB
