"""A 256x256x256 int8 GEMM, tiled and double-buffered with dependency tokens (TVM paper Sec. 3.5's pattern),
hand-assembled for VITA: bit-exact with numpy, and its cycles sit between the bound and the serialized sum."""

from __future__ import annotations

import numpy as np

import isa
from sim.vita.config import load_config
from sim.vita.machine import simulate

SPEC = isa.load_isa("vita")
CFG = load_config("vta-default")
M = N = K = 256
TM = 64                       # rows per block; a block is TM x 16 outputs
KB = K // 16                  # 16-wide k tiles
BLOCKS = [(mo, nb) for mo in range(M // TM) for nb in range(N // 16)]
SHIFT = 8
# DRAM layout (bytes): micro-ops, A as [M][KB] 16-byte tiles, W as [N/16][KB] 256-byte tiles, out [M][N/16]
UOP_AT, A_AT, W_AT, OUT_AT = 0x0, 0x1000, 0x20000, 0x40000


def uops() -> list[isa.Insn]:
    """Per buffer parity p: 16 GEMM micro-ops (dst p*TM, src p*1024 + kb, wgt p*16 + kb), then one ALU one."""
    out = [SPEC.insn("uop", dst_idx=p * TM, src_idx=p * 1024 + kb, wgt_idx=p * 16 + kb)
           for p in (0, 1) for kb in range(KB)]
    return out + [SPEC.insn("uop", dst_idx=p * TM, src_idx=p * TM) for p in (0, 1)]


def program() -> isa.Program:
    n = len(BLOCKS)
    insns = [SPEC.insn("LOAD_UOP", dram_base=UOP_AT // 4, y_size=1, x_size=len(uops()), x_stride=len(uops()))]
    rows = dict(iter_out=TM, iter_in=1, dst_factor_out=1)
    for k, (mo, nb) in enumerate(BLOCKS):
        p = k % 2
        insns += [
            # load: wait until compute freed this parity's buffers (block k-2), then fill them
            SPEC.insn("LOAD_INP", pop_next_dep=int(k >= 2), sram_base=p * 1024,
                      dram_base=A_AT // 16 + mo * TM * KB, y_size=TM, x_size=KB, x_stride=KB),
            SPEC.insn("LOAD_WGT", push_next_dep=1, sram_base=p * 16, dram_base=W_AT // 256 + nb * KB,
                      y_size=1, x_size=KB, x_stride=KB),
            # compute: the accumulators of parity p are free once block k-2 was stored
            SPEC.insn("GEMM_RESET", pop_next_dep=int(k >= 2), uop_bgn=32 + p, uop_end=33 + p, **rows),
            SPEC.insn("GEMM", pop_prev_dep=1, push_prev_dep=int(k + 2 < n), uop_bgn=16 * p,
                      uop_end=16 * p + 16, src_factor_out=KB, **rows),
            SPEC.insn("ALU_SHR", uop_bgn=32 + p, uop_end=33 + p, use_imm=1, imm=SHIFT, **rows),
            SPEC.insn("ALU_MIN", uop_bgn=32 + p, uop_end=33 + p, use_imm=1, imm=127, **rows),
            SPEC.insn("ALU_MAX", push_next_dep=1, uop_bgn=32 + p, uop_end=33 + p, use_imm=1, imm=-128,
                      **rows),
            # store: tell compute when the accumulators are free again (and, last, that all is stored)
            SPEC.insn("STORE_OUT", pop_prev_dep=1, push_prev_dep=int(k + 2 < n or k == n - 1),
                      sram_base=p * TM, dram_base=OUT_AT // 16 + mo * TM * (N // 16) + nb, y_size=TM,
                      x_size=1, x_stride=N // 16),
        ]
    insns.append(SPEC.insn("FINISH", pop_next_dep=1))
    return isa.Program(SPEC, insns, {"uop": uops()})


def dram_image(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    dram = np.zeros(OUT_AT + M * N, np.uint8)
    words = isa.binary.record_stream(program(), "uop")
    dram[UOP_AT:UOP_AT + len(words)] = np.frombuffer(words, np.uint8)
    dram[A_AT:A_AT + M * K] = a.view(np.uint8).reshape(-1)                      # row m, tile kb at m*KB + kb
    tiles = w.reshape(N // 16, 16, KB, 16).transpose(0, 2, 1, 3)                # [nb][kb][o][k]
    dram[W_AT:W_AT + N * K] = np.ascontiguousarray(tiles).view(np.uint8).reshape(-1)
    return dram


def test_double_buffered_256_cubed_gemm_is_bit_exact_and_overlaps_memory_with_compute():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    result = simulate(program(), dram_image(a, w), CFG)

    got = result.dram[OUT_AT:OUT_AT + M * N].view(np.int8).reshape(M, N)
    want = np.clip((a.astype(np.int32) @ w.astype(np.int32).T) >> SHIFT, -128, 127).astype(np.int8)
    assert np.array_equal(got, want)

    per_block_compute = ((CFG.gemm_pipeline_cycles + TM) + (CFG.gemm_pipeline_cycles + TM * KB)
                         + 3 * (CFG.alu_pipeline_cycles + TM * CFG.alu_cycles_per_uop))
    per_block_memory = (TM * K + K * 16 + TM * 16) // CFG.dram_bytes_per_cycle
    compute, memory = len(BLOCKS) * per_block_compute, len(BLOCKS) * per_block_memory
    serialized = compute + memory + len(BLOCKS) * 3 * CFG.dram_latency_cycles
    assert max(compute, memory) <= result.cycles < serialized
    assert result.counters["gemm_counter"] == len(BLOCKS) * TM * KB
    assert result.gemm_busy_cycles == len(BLOCKS) * TM * KB
