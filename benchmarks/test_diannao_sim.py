"""Cost of simulating DianNao kernels: wall-clock microseconds per simulated instruction, scalar and tensor.

    pytest benchmarks/test_diannao_sim.py --benchmark-only

Targets of the simulator issue on this machine: at most 3 us per scalar instruction and 30 us per tensor/DMA
instruction. The scalar kernel is the element-wise add written as scalar loops (over 1M scalar instructions,
a few hundred copies); the tensor kernel is the same add in tiles of 256 elements (over 10,000 copies and
vector ops, plus the scalar loop control around them, which is counted against the tensor instructions).
"""

from __future__ import annotations

from baselines.diannao_kernels import default_card, elementwise_program


def measure(benchmark, program):
    """Launch ``program`` on 16 cores three times; return the result and the median wall seconds."""
    card = default_card()
    launch = {"cores": 16, "args": [0, 16 << 20, 32 << 20]}
    result = benchmark.pedantic(card.launch, args=(program,), kwargs=launch, rounds=3, iterations=1)
    benchmark.extra_info["scalar_instructions"] = result.scalar_instructions
    benchmark.extra_info["tensor_instructions"] = result.tensor_instructions
    return result, benchmark.stats.stats.median


def test_simulate_over_a_million_scalar_instructions(benchmark):
    program = elementwise_program("vadd", "f32", 200_704 // 16, 12_544, scalar=True)
    result, seconds = measure(benchmark, program)
    assert result.scalar_instructions >= 1_000_000
    benchmark.extra_info["us_per_scalar_instruction"] = seconds / result.scalar_instructions * 1e6


def test_simulate_over_ten_thousand_tensor_and_dma_instructions(benchmark):
    result, seconds = measure(benchmark, elementwise_program("vadd", "f32", 802_816 // 16, 256))
    assert result.tensor_instructions >= 10_000
    benchmark.extra_info["us_per_tensor_instruction"] = seconds / result.tensor_instructions * 1e6
    benchmark.extra_info["us_per_instruction"] = seconds / (result.tensor_instructions
                                                            + result.scalar_instructions) * 1e6
