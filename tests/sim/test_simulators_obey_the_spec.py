"""The simulators do what the spec says, not what the built-in spec said (issue 19): its timing, its semantics
and its instructions, for a spec edited in a file as a user would.

- VITA: a GEMM made 8x slower in the spec gives more cycles; an ALU operation that exists only in the edited
  spec runs (on the generic executor, as no fast path has its semantics).
- DianNao: ``vadd`` redefined as a saturating add gives the saturated result (its fast path, a wrapping
  numpy add, is not used: its contract no longer matches).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import isa
from compiler.ops.nn import GemmShape
from isa.loader import SPECS_DIR
from sim.diannao.machine import simulate as simulate_diannao
from sim.vita.config import load_config
from sim.vita.machine import simulate as simulate_vita
from tandem.flows.targets import load_target
from tandem.flows.vita import run_vita


def edited(family: str, tmp_path: Path, *edits: tuple[str, str], count: int = 1) -> isa.ISA:
    """The built-in spec ``family`` with each (old, new) edit applied ``count`` times, loaded from a file."""
    text = (SPECS_DIR / f"{family}.toml").read_text()
    for old, new in edits:
        assert text.count(old) >= count, old
        text = text.replace(old, new, count)
    path = tmp_path / f"{family}_edited.toml"
    path.write_text(text)
    return isa.load_spec_file(path)


def test_a_gemm_eight_times_slower_in_the_spec_gives_more_cycles(tmp_path):
    gemm_cycles = 'cycles = "iter_out * iter_in * max(uop_end - uop_bgn, 0)"'
    slow = edited("vita", tmp_path,
                  (gemm_cycles, 'cycles = "8 * iter_out * iter_in * max(uop_end - uop_bgn, 0)"'))
    layer = GemmShape(64, 64, 256)      # compute-bound: one GEMM core's cycles dominate
    base = run_vita(layer, 0, load_target("vita", "tvm-paper"))
    slower = run_vita(layer, 0, load_target("vita", "tvm-paper", slow), tiling=_tiling(base))
    assert base.validated and slower.validated
    assert slower.instructions == base.instructions
    gemm_uops = base.params["M"] * base.params["N"] * base.params["K"] // 256
    assert slower.cycles >= base.cycles + 7 * gemm_uops     # every GEMM micro-op now takes 8 cycles, not 1


def _tiling(report):
    from compiler.ops.vita import Tiling

    return Tiling(**report.params["tiling"])


ALU_ADD = '[instructions.ALU_ADD]'


def with_alu_sub(tmp_path: Path) -> isa.ISA:
    """vita.toml plus ALU_SUB (alu_opcode 5): a copy of ALU_ADD that subtracts, as a user would add it."""
    text = (SPECS_DIR / "vita.toml").read_text()
    start = text.index(ALU_ADD)
    block = text[start:text.index("[instructions.ALU_SHR]")]
    sub = (block.replace("ALU_ADD", "ALU_SUB").replace('alu_opcode = "ADD"', 'alu_opcode = "SUB"')
           .replace("dst[b, o] + select", "dst[b, o] - select").replace("dst + y", "dst - y"))
    assert sub.count("ALU_SUB") > 3 and "dst[b, o] - select" in sub
    text = (text[:start] + sub + text[start:]).replace(
        "values = { MIN = 0, MAX = 1, ADD = 2, SHR = 3, MUL = 4 }",
        "values = { MIN = 0, MAX = 1, ADD = 2, SHR = 3, MUL = 4, SUB = 5 }")
    path = tmp_path / "vita_sub.toml"
    path.write_text(text)
    return isa.load_spec_file(path)


SUB_PROGRAM = """
.isa vita
.text
    LOAD_UOP sram_base=0x0, dram_base=0x0, y_size=1, x_size=1, x_stride=1
    LOAD_ACC sram_base=0x0, dram_base=0x10, y_size=1, x_size=32, x_stride=32
    ALU_SUB uop_bgn=0, uop_end=1, iter_out=16, iter_in=1, dst_factor_out=1, src_factor_out=1, push_next_dep=1
    STORE_OUT pop_prev_dep=1, push_prev_dep=1, dram_base=0x200, y_size=1, x_size=16, x_stride=16
    FINISH pop_next_dep=1
"""


def test_a_new_vita_alu_operation_in_the_spec_runs_bit_exact(tmp_path):
    spec = with_alu_sub(tmp_path)
    rng = np.random.default_rng(5)
    acc = rng.integers(-(2**20), 2**20, (32, 16), dtype=np.int32)   # tiles 0..15: dst, 16..31: src
    dram = np.zeros(1 << 14, np.uint8)
    uop = isa.binary.encode_record(spec, spec.insn("uop", dst_idx=0, src_idx=16))
    dram[0:4] = np.frombuffer(np.uint32(uop).tobytes(), np.uint8)
    dram[0x10 * 64:0x10 * 64 + acc.nbytes] = acc.view(np.uint8).reshape(-1)
    program = isa.assemble(SUB_PROGRAM, isa=spec)
    result = simulate_vita(program, dram, load_config("vta-default"))
    got = result.dram[0x200 * 16:0x200 * 16 + 256].view(np.int8).reshape(16, 16)
    assert np.array_equal(got, (acc[:16] - acc[16:]).astype(np.int8))
    assert result.counters["alu_counter"] == 16
    # its timing is the spec's: the same as ALU_ADD's, two cycles per micro-op after the pipeline fills
    assert result.units["compute"].busy >= 4 + 2 * 16
    with pytest.raises(isa.AsmError, match="unknown instruction 'ALU_SUB'"):
        isa.assemble(SUB_PROGRAM, isa=isa.load_isa("vita"))


def saturating_vadd(tmp_path: Path) -> isa.ISA:
    text = (SPECS_DIR / "diannao.toml").read_text()
    start = text.index("[instructions.vadd]")
    end = text.index("[instructions.vsub]")
    block = (text[start:end]
             .replace('semantics = "dst[i] = a[i] + b[i]"',
                      'semantics = "dst[i] = T(max(min(i32(a[i]) + i32(b[i]), 127), -128))"')
             .replace('types = { T = ["i8", "i16", "i32", "f16", "f32"] }', 'types = { T = ["i8"] }'))
    assert "127" in block and '["i8"]' in block
    path = tmp_path / "diannao_saturating.toml"
    path.write_text(text[:start] + block + text[end:])
    return isa.load_spec_file(path)


def test_a_spec_that_redefines_vadd_as_saturating_gives_the_saturated_result(tmp_path):
    spec = saturating_vadd(tmp_path)
    n = spec.params["VECTOR_ELEMS"] * 4
    rng = np.random.default_rng(9)
    a, b = rng.integers(-128, 128, (2, n), dtype=np.int8)
    text = (".isa diannao\n.text\n"
            f"memcpy dst_space=NMEM, src_space=GMEM, dst=0, src=0, len={2 * n}, count=1\n"
            f"vadd.i8 dst={2 * n}, a=0, b={n}, n={n}\n"
            f"memcpy dst_space=GMEM, src_space=NMEM, dst={2 * n}, src={2 * n}, len={n}, count=1\n"
            "halt\n")
    gmem = np.concatenate([a.view(np.uint8), b.view(np.uint8), np.zeros(n, np.uint8)])
    results = {}
    for name, s in (("saturating", spec), ("built-in", isa.load_isa("diannao"))):
        _, card = simulate_diannao(isa.assemble(text, isa=s), gmem, cores=1)
        results[name] = card.memory.gmem[2 * n:3 * n].view(np.int8).copy()
    wide = a.astype(np.int32) + b.astype(np.int32)
    assert np.array_equal(results["saturating"], np.clip(wide, -128, 127).astype(np.int8))
    assert np.array_equal(results["built-in"], wide.astype(np.int8))        # wraps, as the built-in says
    assert (np.abs(wide) > 127).any()                                         # the two differ here
