"""Where the VITA machine finds each operand of a micro-op: from the spec's addressing (isa/micro_ops.py), for
the operands the instruction has, whatever else its format holds (issue 46); a field an operand's address
needs and the format lacks is refused before cycle 0, naming the instruction's index, the instruction and the
field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import isa
from isa import micro_ops
from sim.vita.config import load_config
from sim.vita.functional import VitaState, VitaUnsupportedError, execute_generic, fast_path
from sim.vita.machine import simulate
from sim.vita.plan import plan_spec

EXTENSIONS = Path(__file__).resolve().parents[2] / "extensions"
CLIP = isa.load_spec_file(EXTENSIONS / "vita_alu_clip.toml")
OWN = isa.load_spec_file(EXTENSIONS / "vita_alu_clip_own_format.toml")
CFG = load_config("vta-default")

# two micro-ops (dst tiles 0 and 1) in a 3 x 2 loop: tiles u + 8 i + 3 j of 32 accumulator tiles are clipped
CLIP_PROGRAM = """
.isa vita
.text
    LOAD_UOP sram_base=0x0, dram_base=0x0, y_size=1, x_size=2, x_stride=2
    LOAD_ACC sram_base=0x0, dram_base=0x10, y_size=1, x_size=32, x_stride=32
    ALU_CLIP uop_bgn=0, uop_end=2, iter_out=3, iter_in=2, dst_factor_out=8, dst_factor_in=3, {extra}lo=-100, \
hi=90, push_next_dep=1
    STORE_OUT pop_prev_dep=1, push_prev_dep=1, dram_base=0x200, y_size=1, x_size=32, x_stride=32
    FINISH pop_next_dep=1
"""


def clip_dram(spec: isa.ISA, acc: np.ndarray) -> np.ndarray:
    dram = np.zeros(1 << 14, np.uint8)
    for k, dst in enumerate((0, 1)):   # src_idx 30: ALU_CLIP has no src, so it must not matter
        word = isa.binary.encode_record(spec, spec.insn("uop", dst_idx=dst, src_idx=30))
        dram[4 * k:4 * k + 4] = np.frombuffer(np.uint32(word).tobytes(), np.uint8)
    dram[0x10 * 64:0x10 * 64 + acc.nbytes] = acc.view(np.uint8).reshape(-1)
    return dram


def test_a_hand_built_program_with_alu_clip_in_its_own_format_runs_bit_exact():
    """Regression test for issue 46 (KeyError: 'src_factor_in'): the own format's ALU_CLIP, whose
    src_factor_out is set and whose src_factor_in bits hold `lo`, clips exactly the tiles its dst's address
    gives, as the built-in-format ALU_CLIP does in the same cycles."""
    acc = np.random.default_rng(3).integers(-300, 300, (32, 16), dtype=np.int32)
    want = acc.copy()
    hit = sorted({u + 8 * i + 3 * j for u in (0, 1) for i in range(3) for j in range(2)})
    want[hit] = np.clip(acc[hit], -100, 90)
    program = isa.assemble(CLIP_PROGRAM.format(extra="src_factor_out=5, "), isa=OWN)
    own = simulate(program, clip_dram(OWN, acc), CFG)
    got = own.dram[0x200 * 16:0x200 * 16 + 512].view(np.int8).reshape(32, 16)
    assert np.array_equal(got, want.astype(np.int8))
    assert own.counters["alu_counter"] == 12
    builtin = simulate(isa.assemble(CLIP_PROGRAM.format(extra=""), isa=CLIP), clip_dram(CLIP, acc), CFG)
    assert own == builtin


def test_each_operand_is_addressed_by_the_fields_the_spec_names_for_it():
    addresses = {name: micro_ops.addresses(OWN, OWN.instruction(name)) for name in ("GEMM", "ALU_CLIP")}
    assert [(a.operand, a.space, str(a)) for a in addresses["GEMM"]] == [
        ("acc", "ACC", "dst_idx + i * dst_factor_out + j * dst_factor_in"),
        ("inp", "INP", "src_idx + i * src_factor_out + j * src_factor_in"),
        ("wgt", "WGT", "wgt_idx + i * wgt_factor_out + j * wgt_factor_in")]
    assert [str(a) for a in addresses["ALU_CLIP"]] == ["dst_idx + i * dst_factor_out + j * dst_factor_in"]
    assert plan_spec(OWN)["ALU_CLIP"].action == "generic"


# ALU_CLIP's own format plus an instruction that reads a src tile in it (src_factor_out, no src_factor_in)
FLOOR = f"""
[isa]
name = "vita"
extends = "{EXTENSIONS / 'vita_alu_clip_own_format.toml'}"
summary = "plus ALU_FLOOR, a src operand in a format without src_factor_in"

[enums.alu_op]
values = {{ FLOOR = 6 }}

[instructions.ALU_FLOOR]
summary = "per micro-op: dst tile = max(dst, src tile)"
group = "alu"
format = "alu_clip_own"
fixed = {{ opcode = "ALU", alu_opcode = "FLOOR" }}
indices = {{ b = "spatial", o = "spatial" }}
semantics = "dst[b, o] = max(dst[b, o], src[b, o])"
timing = {{ unit = "compute", latency = "ALU_PIPELINE_CYCLES", cycles = "2 * iter_out * iter_in" }}
operands = [
  {{ name = "dst", space = "ACC", dtype = "i32", shape = ["BATCH", "BLOCK_OUT"] }},
  {{ name = "src", space = "ACC", dtype = "i32", shape = ["BATCH", "BLOCK_OUT"] }},
]
"""


def test_an_operand_whose_address_needs_a_field_its_format_lacks_is_refused_before_cycle_0():
    """src is at src_idx + i * src_factor_out + j * src_factor_in: without src_factor_in the spec gives no
    factor of 0, so the machine refuses the program up front (even behind a load that would deadlock),
    naming the instruction's index, the instruction and the field."""
    spec = isa.load_spec_text(FLOOR, "floor.toml")
    plan = plan_spec(spec)["ALU_FLOOR"]
    assert plan.action is None and plan.missing == "src_factor_in"
    stuck = spec.insn("LOAD_INP", pop_next_dep=1)   # pops a token nobody pushes
    floor = spec.insn("ALU_FLOOR", uop_end=1, iter_out=2, iter_in=1, dst_factor_out=1, src_factor_out=1)
    with pytest.raises(VitaUnsupportedError) as info:
        simulate(isa.Program(spec, [stuck, floor, spec.insn("FINISH")]), np.zeros(1 << 12, np.uint8), CFG)
    e = info.value
    assert (e.pc, e.field) == (1, "src_factor_in") and e.insn.startswith("ALU_FLOOR uop_bgn=0")
    assert str(e).startswith("instruction 1 (ALU_FLOOR ")
    assert ("operand 'src' is at src_idx + i * src_factor_out + j * src_factor_in, but the format has no "
            "field 'src_factor_in'") in str(e)


GEMM_SUB = """
[isa]
name = "vita"
extends = "vita"
summary = "plus GEMM_SUB: the GEMM that subtracts its products"

[enums.opcode]
values = { GEMM_SUB = 5 }

[instructions.GEMM_SUB]
summary = "per micro-op: acc tile -= inp tile x transposed wgt tile"
group = "gemm"
format = "gemm"
fixed = { opcode = "GEMM_SUB", reset_reg = 0 }
indices = { b = "spatial", o = "spatial", k = "reduce" }
semantics = "acc[b, o] = acc[b, o] - sum(k, i32(inp[b, k]) * i32(wgt[o, k]))"
timing = { unit = "compute", latency = "GEMM_PIPELINE_CYCLES", cycles = "iter_out * iter_in * uop_end" }
operands = [
  { name = "acc", space = "ACC", dtype = "i32", shape = ["BATCH", "BLOCK_OUT"] },
  { name = "inp", space = "INP", dtype = "i8", shape = ["BATCH", "BLOCK_IN"] },
  { name = "wgt", space = "WGT", dtype = "i8", shape = ["BLOCK_OUT", "BLOCK_IN"] },
]
"""


def test_the_generic_executor_runs_a_new_gemm_on_the_inp_and_wgt_tiles_its_addresses_give():
    spec = isa.load_spec_text(GEMM_SUB, "gemm_sub.toml")
    assert plan_spec(spec)["GEMM_SUB"].action == "generic"
    rng = np.random.default_rng(11)
    state = VitaState(spec, np.zeros(1 << 12, np.uint8))
    for name in ("INP", "WGT", "ACC"):
        buf = state.buffers[name]
        buf[...] = rng.integers(-128, 128, buf.shape, dtype=buf.dtype)
    uops = [(0, 3, 1), (2, 0, 4), (0, 5, 0)]   # (dst, src, wgt): a destination repeats
    for k, (d, s, w) in enumerate(uops):
        state.buffers["UOP"][k, 0] = isa.binary.encode_record(spec, spec.insn("uop", dst_idx=d, src_idx=s,
                                                                              wgt_idx=w))
    f = dict(uop_bgn=0, uop_end=3, iter_out=2, iter_in=2, dst_factor_out=4, dst_factor_in=1,
             src_factor_out=7, src_factor_in=2, wgt_factor_out=1, wgt_factor_in=5)
    want = state.buffers["ACC"].copy()
    inp = state.buffers["INP"].astype(np.int32)
    wgt = state.buffers["WGT"].astype(np.int32).reshape(-1, 16, 16)
    for i in range(2):
        for j in range(2):
            for d, s, w in uops:
                dst = d + 4 * i + j
                want[dst] -= wgt[w + i + 5 * j] @ inp[s + 7 * i + 2 * j]
    execute_generic(state, spec.insn("GEMM_SUB", **f))
    assert np.array_equal(state.buffers["ACC"], want)


# VITA whose ALU word has no immediate: `imm` is a parameter of the spec instead, so ALU_MIN keeps the
# contract of the ALU fast path (which reads an imm field) but must not take it; the generic executor runs it
CONST_IMM = """
[isa]
name = "vita"
extends = "vita"
summary = "VITA whose ALU immediate is the constant imm"

[params]
imm = -5

[formats.alu]
unit_bits = 64
fields = [
  { name = "opcode", bits = "OPCODE_BIT_WIDTH", kind = "enum", enum = "opcode" },
  { name = "pop_prev_dep", bits = 1, kind = "flag", default = 0 },
  { name = "pop_next_dep", bits = 1, kind = "flag", default = 0 },
  { name = "push_prev_dep", bits = 1, kind = "flag", default = 0 },
  { name = "push_next_dep", bits = 1, kind = "flag", default = 0 },
  { name = "reset_reg", bits = 1, kind = "flag", default = 0 },
  { name = "uop_bgn", bits = "LOG_UOP_BUFF_DEPTH" },
  { name = "uop_end", bits = "LOG_UOP_BUFF_DEPTH + 1" },
  { name = "iter_out", bits = "LOOP_ITER_WIDTH" },
  { name = "iter_in", bits = "LOOP_ITER_WIDTH" },
  { name = "dst_factor_out", bits = "LOG_ACC_BUFF_DEPTH" },
  { name = "dst_factor_in", bits = "LOG_ACC_BUFF_DEPTH" },
  { name = "src_factor_out", bits = "LOG_ACC_BUFF_DEPTH" },
  { name = "src_factor_in", bits = "LOG_ACC_BUFF_DEPTH" },
  { name = "alu_opcode", bits = "ALU_OPCODE_BIT_WIDTH", kind = "enum", enum = "alu_op" },
  { name = "use_imm", bits = 1, kind = "flag", default = 0 },
]
"""


def test_an_alu_fast_path_contract_whose_immediate_is_no_field_runs_on_the_generic_executor():
    spec = isa.load_spec_text(CONST_IMM, "const_imm.toml")
    assert fast_path(spec.instruction("ALU_MIN")) == ("alu", "MIN")   # the contract of the built-in one
    assert plan_spec(spec)["ALU_MIN"].action == "generic"
    state = VitaState(spec, np.zeros(1 << 12, np.uint8))
    acc = np.random.default_rng(2).integers(-20, 20, state.buffers["ACC"][:4].shape, dtype=np.int32)
    state.buffers["ACC"][:4] = acc
    state.buffers["UOP"][0, 0] = isa.binary.encode_record(spec, spec.insn("uop", dst_idx=0))
    execute_generic(state, spec.insn("ALU_MIN", uop_end=1, iter_out=4, iter_in=1, dst_factor_out=1,
                                     use_imm=1))
    assert np.array_equal(state.buffers["ACC"][:4], np.minimum(acc, -5))


def test_an_operand_of_no_micro_op_role_is_named_in_the_error():
    text = (f'[isa]\nname = "vita"\nsummary = "x"\nextends = "{EXTENSIONS / "vita_alu_clip.toml"}"\n'
            '[instructions.ALU_CLIP]\nsemantics = "x[b, o] = min(max(x[b, o], i32(lo)), i32(hi))"\n'
            'operands = [{ name = "x", space = "ACC", dtype = "i32", shape = ["BATCH", "BLOCK_OUT"] }]\n')
    spec = isa.load_spec_text(text, "x.toml")
    with pytest.raises(micro_ops.MicroOpError, match="operand 'x' has no micro-op address") as info:
        micro_ops.addresses(spec, spec.instruction("ALU_CLIP"))
    assert (info.value.instruction, info.value.operand, info.value.field) == ("ALU_CLIP", "x", None)
    plan = plan_spec(spec)["ALU_CLIP"]
    assert plan.action is None and "operand 'x' has no micro-op address" in plan.reason


def test_an_asynchronous_instruction_is_refused_by_name_with_the_reason():
    """VITA's units already run apart (token queues); an ``async`` timing it does not model is refused."""
    spec = isa.load_spec_text('[isa]\nname = "vita"\nextends = "vita"\nsummary = "async ALU"\n'
                              '[instructions.ALU_MAX]\ntiming = { async = true }\n', "async_alu.toml")
    plan = plan_spec(spec)["ALU_MAX"]
    assert plan.action is None
    assert "its timing is 'async', which the VITA machine does not model" in plan.reason
    alu = spec.insn("ALU_MAX", uop_end=1, iter_out=1, iter_in=1)
    with pytest.raises(VitaUnsupportedError, match="cannot run 'ALU_MAX': its timing is 'async'") as info:
        simulate(isa.Program(spec, [alu, spec.insn("FINISH")]), np.zeros(1 << 12, np.uint8), CFG)
    assert info.value.pc == 0


def test_an_engine_is_refused_by_name_with_the_reason():
    spec = isa.load_spec_text('[isa]\nname = "vita"\nextends = "vita"\nsummary = "two ALUs"\n'
                              '[instructions.ALU_MAX]\ntiming = { engine = 1 }\n', "engine_alu.toml")
    plan = plan_spec(spec)["ALU_MAX"]
    assert plan.action is None and "names an 'engine', which the VITA machine does not model" in plan.reason


def test_an_operand_in_another_cluster_is_refused_by_name():
    """A ``cluster`` (the copy of a per-cluster space an operand lies in, DianNao's memcpyc) means nothing on
    a machine without clusters: refused, naming the operand."""
    base = isa.load_isa("vita")
    instr = base.instruction("ALU_MAX")
    tensor = next(k for k, op in enumerate(instr.operands) if op.kind == "tensor")
    operands = list(instr.operands)
    cluster = isa.lang.tree.Name("uop_end", "field", "int")
    operands[tensor] = dataclasses.replace(operands[tensor], cluster=cluster)
    spec = dataclasses.replace(base, instructions={**base.instructions, "ALU_MAX": dataclasses.replace(
        instr, operands=tuple(operands))})
    plan = plan_spec(spec)["ALU_MAX"]
    assert plan.action is None
    assert f"operand '{operands[tensor].name}' names a cluster" in plan.reason
