"""Cost of simulating VITA programs: wall-clock microseconds per simulated instruction.

    pytest benchmarks/test_vita_sim.py --benchmark-only
"""

from __future__ import annotations

import numpy as np

import isa
from sim.vita.machine import simulate

SPEC = isa.load_isa("vita")


def pipelined_program(blocks: int) -> isa.Program:
    """``blocks`` rounds of load -> GEMM -> ALU -> store with the token handshakes of a 3-stage pipeline."""
    insns = []
    for k in range(blocks):
        first = k == 0
        insns.append(SPEC.insn("LOAD_INP", sram_base=k % 2 * 16, y_size=1, x_size=16, x_stride=16,
                               pop_next_dep=0 if k < 2 else 1))
        insns.append(SPEC.insn("LOAD_WGT", sram_base=k % 2, y_size=1, x_size=1, x_stride=1, push_next_dep=1))
        insns.append(SPEC.insn("GEMM", pop_prev_dep=1, pop_next_dep=0 if first else 1, uop_end=1, iter_out=16,
                               iter_in=1, dst_factor_out=1, src_factor_out=1))
        insns.append(SPEC.insn("ALU_SHR", uop_end=1, iter_out=16, iter_in=1, dst_factor_out=1, use_imm=1,
                               imm=3, push_prev_dep=1 if k < blocks - 2 else 0, push_next_dep=1))
        insns.append(SPEC.insn("STORE_OUT", pop_prev_dep=1, push_prev_dep=1, y_size=1, x_size=16,
                               x_stride=16))
    insns.append(SPEC.insn("FINISH", pop_next_dep=1))
    return isa.Program(SPEC, insns)


def test_simulate_10000_instructions(benchmark):
    program = pipelined_program(2000)
    dram = np.zeros(1 << 16, np.uint8)
    result = benchmark.pedantic(simulate, args=(program, dram, "vta-default"), rounds=3, iterations=1)
    seconds = benchmark.stats.stats.median
    benchmark.extra_info["instructions"] = len(program)
    benchmark.extra_info["us_per_instruction"] = seconds / len(program) * 1e6
    benchmark.extra_info["simulated_cycles_per_second"] = result.cycles / seconds
