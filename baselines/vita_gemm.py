"""A hand-assembled VITA program: a 256x256x256 int8 GEMM, tiled and double-buffered with dependency tokens.

The pattern of the TVM paper's Sec. 3.5: two buffer parities, so loads of block k+1 overlap the GEMM of block
k and the store of block k-1, with load -> compute -> store tokens for the data and compute -> load and
store -> compute tokens for freeing buffers. Used by tests and by ``tandem demo``.

    program(), dram_image(a, w), reference(a, w), output(dram)
"""

from __future__ import annotations

import numpy as np

import isa

SPEC = isa.load_isa("vita")
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




def reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What the program computes: clip((a @ w.T) >> SHIFT, -128, 127) as int8."""
    return np.clip((a.astype(np.int32) @ w.astype(np.int32).T) >> SHIFT, -128, 127).astype(np.int8)


def output(dram: np.ndarray) -> np.ndarray:
    """The (M, N) int8 result in a DRAM image after the program ran."""
    return dram[OUT_AT:OUT_AT + M * N].view(np.int8).reshape(M, N)
