"""The VITA spec (isa/specs/vita.toml) is TVM's VTA ISA: its configuration and derived depths are VTA's, its
instruction and micro-op layouts are hw_spec.h's C bit-fields bit for bit, its semantics compute what VTA's
functional simulator (sim_driver.cc) computes, and its constraints reject what VTA rejects.

Every expected value here is written by hand from VTA's sources or computed with numpy/ctypes, never with isa
code.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from isa.binary import decode_insn, decode_record, encode_insn, encode_record
from isa.instance import check_constraints, execute, operand_shape, timing_of
from isa.lang.scalar import evaluate

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


@cache
def vita(**params: int) -> isa.ISA:
    return isa.load_isa("vita", params=params or None)


def wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32."""
    x = np.asarray(x, dtype=np.int64)
    return (((x + 2**31) % 2**32) - 2**31).astype(np.int32)


def wrap8(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.int64)
    return (((x + 128) % 256) - 128).astype(np.int8)


def layout(fmt: isa.Format) -> dict[str, tuple[int, int]]:
    return {f.name: (f.lsb, f.bits) for f in fmt.fields}


# ---------------------------------------------------------------------------------------------- configuration

def test_default_parameters_are_vta_config_json():
    p = vita().params
    assert {k: p[k] for k in ("LOG_INP_WIDTH", "LOG_WGT_WIDTH", "LOG_ACC_WIDTH", "LOG_BATCH", "LOG_BLOCK",
                              "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE",
                              "LOG_ACC_BUFF_SIZE")} == {
        "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5, "LOG_BATCH": 0, "LOG_BLOCK": 4,
        "LOG_UOP_BUFF_SIZE": 15, "LOG_INP_BUFF_SIZE": 15, "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17}


def test_derived_values_are_pkg_config_and_hw_spec_const():
    p = vita().params
    # pkg_config.py
    assert (p["LOG_BLOCK_IN"], p["LOG_BLOCK_OUT"], p["LOG_OUT_WIDTH"]) == (4, 4, 3)
    assert p["LOG_OUT_BUFF_SIZE"] == 15
    # hw_spec_const.h: 15-0-4-3+3, 18-4-4-3+3, 17-0-4-5+3, 15-5+3, 15-0-4-3+3
    depths = ("LOG_INP_BUFF_DEPTH", "LOG_WGT_BUFF_DEPTH", "LOG_ACC_BUFF_DEPTH", "LOG_UOP_BUFF_DEPTH",
              "LOG_OUT_BUFF_DEPTH")
    assert [p[k] for k in depths] == [11, 10, 11, 13, 11]
    assert (p["BATCH"], p["BLOCK_IN"], p["BLOCK_OUT"]) == (1, 16, 16)
    assert (p["INP_BUFF_DEPTH"], p["WGT_BUFF_DEPTH"], p["ACC_BUFF_DEPTH"], p["UOP_BUFF_DEPTH"]) == (
        2048, 1024, 2048, 8192)


def test_memory_spaces_have_vta_ids_and_tile_sized_units():
    spaces = vita().spaces
    expected = {  # name: (VTA_MEM_ID_*, bytes, bytes of one tile)
        "UOP": (0, 2**15, 4), "WGT": (1, 2**18, 256), "INP": (2, 2**15, 16), "ACC": (3, 2**17, 64),
        "OUT": (4, 2**15, 16)}
    for name, (code, size, unit) in expected.items():
        s = spaces[name]
        assert (s.id, s.bytes, s.unit_bytes) == (code, size, unit), name
    assert spaces["DRAM"].id not in {0, 1, 2, 3, 4, 5}  # 5 is VTA_MEM_ID_ACC_8BIT
    assert spaces["DRAM"].bytes == 2**32


def test_opcodes_alu_opcodes_and_groups():
    spec = vita()
    assert dict(spec.enums["opcode"].values) == {"LOAD": 0, "STORE": 1, "GEMM": 2, "FINISH": 3, "ALU": 4}
    assert dict(spec.enums["alu_op"].values) == {"MIN": 0, "MAX": 1, "ADD": 2, "SHR": 3, "MUL": 4}
    fixed = {n: dict(i.fixed) for n, i in spec.instructions.items()}
    assert fixed == {
        "LOAD_INP": {"opcode": 0, "memory_type": 2}, "LOAD_WGT": {"opcode": 0, "memory_type": 1},
        "LOAD_ACC": {"opcode": 0, "memory_type": 3}, "LOAD_UOP": {"opcode": 0, "memory_type": 0},
        "STORE_OUT": {"opcode": 1, "memory_type": 4},
        "GEMM": {"opcode": 2, "reset_reg": 0}, "GEMM_RESET": {"opcode": 2, "reset_reg": 1},
        "ALU_MIN": {"opcode": 4, "alu_opcode": 0}, "ALU_MAX": {"opcode": 4, "alu_opcode": 1},
        "ALU_ADD": {"opcode": 4, "alu_opcode": 2}, "ALU_SHR": {"opcode": 4, "alu_opcode": 3},
        "ALU_MUL": {"opcode": 4, "alu_opcode": 4}, "FINISH": {"opcode": 3}}
    groups = {n: i.group for n, i in spec.instructions.items()}
    assert groups == {"LOAD_INP": "load", "LOAD_WGT": "load", "LOAD_ACC": "load", "LOAD_UOP": "load",
                      "STORE_OUT": "store", "GEMM": "gemm", "GEMM_RESET": "gemm", "ALU_MIN": "alu",
                      "ALU_MAX": "alu", "ALU_ADD": "alu", "ALU_SHR": "alu", "ALU_MUL": "alu",
                      "FINISH": "finish"}


# ---------------------------------------------------------------------------------------------- bit layouts

HEADER = {"opcode": (0, 3), "pop_prev_dep": (3, 1), "pop_next_dep": (4, 1), "push_prev_dep": (5, 1),
          "push_next_dep": (6, 1)}
# VTAMemInsn: 7 + 3 + 16 + 32 = 58 bits in word 0; y_size (16) would straddle bit 64, so it starts there
MEM = {**HEADER, "memory_type": (7, 3), "sram_base": (10, 16), "dram_base": (26, 32), "y_size": (64, 16),
       "x_size": (80, 16), "x_stride": (96, 16), "y_pad_0": (112, 4), "y_pad_1": (116, 4),
       "x_pad_0": (120, 4), "x_pad_1": (124, 4)}
# VTAGemInsn: 7 + 1 + 13 + 14 + 14 + 14 = 63 bits in word 0; 11 + 11 + 11 + 11 + 10 + 10 = 64 in word 1
LOOP = {**HEADER, "reset_reg": (7, 1), "uop_bgn": (8, 13), "uop_end": (21, 14), "iter_out": (35, 14),
        "iter_in": (49, 14), "dst_factor_out": (64, 11), "dst_factor_in": (75, 11),
        "src_factor_out": (86, 11), "src_factor_in": (97, 11)}
GEMM = {**LOOP, "wgt_factor_out": (108, 10), "wgt_factor_in": (118, 10)}
# VTAAluInsn: word 1 is 4 x 11 + 3 + 1 + 16 = 64 bits, imm ends exactly at bit 127
ALU = {**LOOP, "alu_opcode": (108, 3), "use_imm": (111, 1), "imm": (112, 16)}
# VTAUop: 11 + 11 + 10 = 32 bits
UOP = {"dst_idx": (0, 11), "src_idx": (11, 11), "wgt_idx": (22, 10)}


@pytest.mark.parametrize(("insn", "expected"), [
    ("LOAD_INP", MEM), ("LOAD_UOP", MEM), ("STORE_OUT", MEM), ("GEMM", GEMM), ("GEMM_RESET", GEMM),
    ("ALU_ADD", ALU), ("ALU_SHR", ALU), ("FINISH", HEADER)])
def test_instruction_fields_sit_at_hw_spec_h_bit_positions(insn, expected):
    fmt = vita().instruction(insn).format
    assert fmt.bits == 128
    assert layout(fmt) == expected


def test_uop_record_is_32_bits_with_src_idx_as_wide_as_the_deeper_of_inp_and_acc():
    fmt = vita().data["uop"].format
    assert fmt.bits == 32
    assert layout(fmt) == UOP


def test_field_widths_follow_the_configuration():
    # a deeper INP paid for with a shallower ACC: the GEMM word 1 still holds 10+10+12+12+10+10 = 64 bits
    spec = vita(LOG_ACC_BUFF_SIZE=16, LOG_INP_BUFF_SIZE=16)
    assert (spec.params["LOG_ACC_BUFF_DEPTH"], spec.params["LOG_INP_BUFF_DEPTH"]) == (10, 12)
    gemm = layout(spec.instruction("GEMM").format)
    assert {k: gemm[k] for k in ("dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in",
                                 "wgt_factor_out", "wgt_factor_in")} == {
        "dst_factor_out": (64, 10), "dst_factor_in": (74, 10), "src_factor_out": (84, 12),
        "src_factor_in": (96, 12), "wgt_factor_out": (108, 10), "wgt_factor_in": (118, 10)}
    alu = layout(spec.instruction("ALU_MAX").format)  # ALU's src is an ACC index: 10 bits
    assert (alu["src_factor_out"], alu["src_factor_in"], alu["alu_opcode"], alu["imm"]) == (
        (84, 10), (94, 10), (104, 3), (108, 16))
    # the micro-op's src_idx is an INP index for GEMM and an ACC index for the ALU: the deeper INP's 12 bits
    assert layout(spec.data["uop"].format) == {"dst_idx": (0, 10), "src_idx": (10, 12), "wgt_idx": (22, 10)}
    # a smaller micro-op buffer narrows uop_bgn / uop_end and moves the loop counts down
    small = layout(vita(LOG_UOP_BUFF_SIZE=13).instruction("GEMM").format)
    assert (small["uop_bgn"], small["uop_end"], small["iter_out"], small["iter_in"]) == (
        (8, 11), (19, 12), (31, 14), (45, 14))
    # and the shapes of the semantics follow BATCH
    two = vita(LOG_BATCH=1)
    assert operand_shape(two, two.insn("GEMM"), "acc") == (2, 16)
    assert operand_shape(two, two.insn("GEMM"), "inp") == (2, 16)


def test_a_configuration_vta_cannot_encode_is_rejected():
    # LOG_ACC_BUFF_SIZE = 18 alone makes both ACC factors 12 bits: word 1 of VTAGemInsn would need 66 bits
    with pytest.raises(isa.ISASpecError, match=r"format 'gemm'.*beyond the 128-bit word"):
        isa.load_isa("vita", params={"LOG_ACC_BUFF_SIZE": 18})


# ---------------------------------------------------------------------------------------------- encodings
# The words below are built with explicit shifts from the layouts above.

def test_load_word_by_hand():
    spec = vita()
    insn = spec.insn("LOAD_INP", pop_next_dep=1, push_next_dep=1, sram_base=0x1A5, dram_base=0xDEADBEEF,
                     y_size=7, x_size=9, x_stride=300, y_pad_0=1, y_pad_1=2, x_pad_0=3, x_pad_1=15)
    word = (0 | 0 << 3 | 1 << 4 | 0 << 5 | 1 << 6 | 2 << 7 | 0x1A5 << 10 | 0xDEADBEEF << 26
            | 7 << 64 | 9 << 80 | 300 << 96 | 1 << 112 | 2 << 116 | 3 << 120 | 15 << 124)
    assert encode_insn(spec, insn) == word
    assert decode_insn(spec, word) == insn


def test_store_word_by_hand():
    spec = vita()
    insn = spec.insn("STORE_OUT", pop_prev_dep=1, push_prev_dep=1, sram_base=0xFFFF, dram_base=1,
                     y_size=0xFFFF, x_size=1, x_stride=0x8000)
    word = 1 | 1 << 3 | 1 << 5 | 4 << 7 | 0xFFFF << 10 | 1 << 26 | 0xFFFF << 64 | 1 << 80 | 0x8000 << 96
    assert encode_insn(spec, insn) == word
    assert decode_insn(spec, word) == insn


def test_gemm_and_gemm_reset_words_by_hand():
    spec = vita()
    values = dict(uop_bgn=5, uop_end=8191, iter_out=16383, iter_in=3, dst_factor_out=2047, dst_factor_in=1,
                  src_factor_out=2, src_factor_in=1024, wgt_factor_out=1023, wgt_factor_in=512)
    body = (5 << 8 | 8191 << 21 | 16383 << 35 | 3 << 49 | 2047 << 64 | 1 << 75 | 2 << 86 | 1024 << 97
            | 1023 << 108 | 512 << 118)
    gemm = spec.insn("GEMM", pop_prev_dep=1, **values)
    assert encode_insn(spec, gemm) == 2 | 1 << 3 | 0 << 7 | body
    assert decode_insn(spec, 2 | 1 << 3 | body) == gemm
    reset = spec.insn("GEMM_RESET", push_next_dep=1, **values)
    assert encode_insn(spec, reset) == 2 | 1 << 6 | 1 << 7 | body
    assert decode_insn(spec, 2 | 1 << 6 | 1 << 7 | body) == reset


def test_alu_word_by_hand_with_a_negative_immediate():
    spec = vita()
    insn = spec.insn("ALU_SHR", uop_bgn=1, uop_end=2, iter_out=4, iter_in=5, dst_factor_out=6,
                     dst_factor_in=7, src_factor_out=8, src_factor_in=2047, use_imm=1, imm=-3)
    word = (4 | 1 << 8 | 2 << 21 | 4 << 35 | 5 << 49 | 6 << 64 | 7 << 75 | 8 << 86 | 2047 << 97 | 3 << 108
            | 1 << 111 | (-3 & 0xFFFF) << 112)
    assert word >> 112 == 0xFFFD
    assert encode_insn(spec, insn) == word
    assert decode_insn(spec, word) == insn
    low = spec.insn("ALU_MIN", imm=-32768)
    assert encode_insn(spec, low) == 4 | 0 << 108 | 0x8000 << 112
    assert decode_insn(spec, 4 | 0x8000 << 112)["imm"] == -32768


def test_finish_and_uop_words_by_hand():
    spec = vita()
    finish = spec.insn("FINISH", pop_prev_dep=1, push_next_dep=1)
    assert encode_insn(spec, finish) == 3 | 1 << 3 | 1 << 6
    assert decode_insn(spec, 3 | 1 << 3 | 1 << 6) == finish
    uop = spec.insn("uop", dst_idx=2047, src_idx=5, wgt_idx=1000)
    assert encode_record(spec, uop) == 2047 | 5 << 11 | 1000 << 22
    assert decode_record(spec, "uop", 2047 | 5 << 11 | 1000 << 22) == uop


# hw_spec.h's structs, laid out by ctypes exactly as a C compiler lays out uint64_t bit-fields
def _c_struct(name: str, fields: list[tuple[str, int]], *, signed: tuple[str, ...] = (),
              base=ctypes.c_uint64) -> type[ctypes.Structure]:
    sint = ctypes.c_int64 if base is ctypes.c_uint64 else ctypes.c_int32
    c_fields = [(n, sint if n in signed else base, b) for n, b in fields]
    return type(name, (ctypes.Structure,), {"_fields_": c_fields})


_HDR = [("opcode", 3), ("pop_prev_dep", 1), ("pop_next_dep", 1), ("push_prev_dep", 1), ("push_next_dep", 1)]
_LOOP = [*_HDR, ("reset_reg", 1), ("uop_bgn", 13), ("uop_end", 14), ("iter_out", 14), ("iter_in", 14),
         ("dst_factor_out", 11), ("dst_factor_in", 11)]
C_STRUCTS = {
    "mem": _c_struct("VTAMemInsn", [*_HDR, ("memory_type", 3), ("sram_base", 16), ("dram_base", 32),
                                    ("y_size", 16), ("x_size", 16), ("x_stride", 16), ("y_pad_0", 4),
                                    ("y_pad_1", 4), ("x_pad_0", 4), ("x_pad_1", 4)]),
    "gemm": _c_struct("VTAGemInsn", [*_LOOP, ("src_factor_out", 11), ("src_factor_in", 11),
                                     ("wgt_factor_out", 10), ("wgt_factor_in", 10)]),
    "alu": _c_struct("VTAAluInsn", [*_LOOP, ("src_factor_out", 11), ("src_factor_in", 11), ("alu_opcode", 3),
                                    ("use_imm", 1), ("imm", 16)], signed=("imm",)),
    "uop": _c_struct("VTAUop", [("dst_idx", 11), ("src_idx", 11), ("wgt_idx", 10)], base=ctypes.c_uint32),
}


def _random_values(rng: np.random.Generator, fields) -> dict[str, int]:
    return {f.name: int(rng.integers(f.lo, f.hi, endpoint=True)) for f in fields}


@pytest.mark.parametrize("insn_name", ["LOAD_WGT", "STORE_OUT", "GEMM", "GEMM_RESET", "ALU_MUL", "ALU_SHR"])
def test_instruction_words_equal_the_c_structs_bytes(insn_name):
    spec = vita()
    instr = spec.instruction(insn_name)
    struct = C_STRUCTS[instr.format.name]
    assert ctypes.sizeof(struct) == 16
    rng = np.random.default_rng(11)
    for _ in range(20):
        values = _random_values(rng, instr.fields)
        c = struct(**values, **instr.fixed)
        assert encode_insn(spec, spec.insn(insn_name, **values)) == int.from_bytes(bytes(c), "little")


def test_uop_words_equal_the_c_structs_bytes():
    spec = vita()
    assert ctypes.sizeof(C_STRUCTS["uop"]) == 4
    rng = np.random.default_rng(12)
    for _ in range(20):
        values = _random_values(rng, spec.data["uop"].format.fields)
        c = C_STRUCTS["uop"](**values)
        assert encode_record(spec, spec.insn("uop", **values)) == int.from_bytes(bytes(c), "little")


@pytest.mark.parametrize("insn_name", list(vita().instructions))
@settings(max_examples=40)
@given(data=st.data())
def test_every_instruction_round_trips_through_its_word(insn_name, data):
    spec = vita()
    values = {f.name: data.draw(st.integers(f.lo, f.hi), label=f.name)
              for f in spec.instruction(insn_name).fields}
    insn = spec.insn(insn_name, **values)
    word = encode_insn(spec, insn)
    assert 0 <= word < 2**128
    assert decode_insn(spec, word) == insn


@settings(max_examples=60)
@given(dst=st.integers(0, 2047), src=st.integers(0, 2047), wgt=st.integers(0, 1023))
def test_uop_round_trips_through_its_word(dst, src, wgt):
    spec = vita()
    uop = spec.insn("uop", dst_idx=dst, src_idx=src, wgt_idx=wgt)
    word = encode_record(spec, uop)
    assert 0 <= word < 2**32
    assert decode_record(spec, "uop", word) == uop


# ---------------------------------------------------------------------------------------------- semantics

I8_EDGES = np.array([-128, -127, -1, 0, 1, 127], dtype=np.int8)
I32_EDGES = np.array([I32_MIN, I32_MIN + 1, -1, 0, 1, I32_MAX - 1, I32_MAX], dtype=np.int32)


def rand_i8(rng, shape):
    a = rng.integers(-128, 127, size=shape, endpoint=True).astype(np.int8)
    flat = a.reshape(-1)
    flat[: len(I8_EDGES)] = I8_EDGES[: flat.size]
    return a


def rand_i32(rng, shape):
    a = rng.integers(I32_MIN, I32_MAX, size=shape, endpoint=True).astype(np.int32)
    flat = a.reshape(-1)
    flat[: len(I32_EDGES)] = I32_EDGES[: flat.size]
    return a


@pytest.mark.parametrize("params", [{}, {"LOG_BATCH": 1}])
def test_gemm_adds_inp_times_transposed_wgt_into_acc_wrapping_at_32_bits(params):
    spec = vita(**params)
    batch = 2 ** spec.params["LOG_BATCH"]
    rng = np.random.default_rng(1)
    for trial in range(4):
        inp = rand_i8(rng, (batch, 16))
        wgt = rand_i8(rng, (16, 16))
        acc = rand_i32(rng, (batch, 16))
        if trial == 0:  # extreme products: 16 * (-128 * -128) = 262144 added to INT32_MAX overflows
            inp[:] = -128
            wgt[:] = -128
            acc[:] = I32_MAX
        expected = wrap32(acc.astype(np.int64) + inp.astype(np.int64) @ wgt.astype(np.int64).T)
        got = execute(spec, spec.insn("GEMM", uop_end=1), {"acc": acc, "inp": inp, "wgt": wgt})
        assert set(got) == {"acc"}
        assert got["acc"].dtype == np.int32
        assert np.array_equal(got["acc"], expected)


def test_gemm_overflow_wraps():
    spec = vita()
    acc = np.full((1, 16), I32_MAX, dtype=np.int32)
    inp = np.full((1, 16), -128, dtype=np.int8)
    wgt = np.full((16, 16), -128, dtype=np.int8)
    got = execute(spec, spec.insn("GEMM", uop_end=1), {"acc": acc, "inp": inp, "wgt": wgt})["acc"]
    assert np.all(got == I32_MIN + 16 * 128 * 128 - 1)  # INT32_MAX + 262144 wraps


def test_gemm_reset_zeroes_the_acc_tile():
    spec = vita()
    acc = rand_i32(np.random.default_rng(2), (1, 16))
    got = execute(spec, spec.insn("GEMM_RESET", uop_end=1), {"acc": acc})
    assert set(got) == {"acc"}
    assert np.array_equal(got["acc"], np.zeros((1, 16), np.int32))
    assert not np.all(acc == 0)  # the input is not modified


def _shr(x: int, y: int) -> int:
    """VTA's SHR: right by y, or left by -y when y < 0, the amount taken modulo 32 (the shifter keeps its
    low 5 bits), the result wrapped to 32 bits."""
    if y >= 0:
        return x >> (y % 32)
    return int(wrap32(x << (-y % 32)))


ALU_REF = {
    "ALU_MIN": lambda x, y: np.minimum(x, y),
    "ALU_MAX": lambda x, y: np.maximum(x, y),
    "ALU_ADD": lambda x, y: wrap32(x + y),
    "ALU_MUL": lambda x, y: wrap32(x * y),
    "ALU_SHR": lambda x, y: wrap32(np.array([_shr(int(a), int(b)) for a, b in zip(x.ravel(), y.ravel(),
                                                                                    strict=True)])),
}


@pytest.mark.parametrize("use_imm", [0, 1])
@pytest.mark.parametrize("name", list(ALU_REF))
def test_alu_ops_on_src_tiles_and_immediates(name, use_imm):
    spec = vita()
    rng = np.random.default_rng(3)
    imms = [-32768, -32, -31, -5, -1, 0, 1, 7, 31, 32, 32767]
    for k in range(len(imms)):
        dst = rand_i32(rng, (1, 16))
        src = rand_i32(rng, (1, 16))
        if name == "ALU_SHR" and not use_imm:  # shift amounts: small both ways, 31/32 edges, and extremes
            src = np.array([[-40, -33, -32, -31, -8, -1, 0, 1, 5, 30, 31, 32, 33, 100, I32_MIN, I32_MAX]],
                           dtype=np.int32)
            src = rng.permuted(src, axis=1)
        imm = imms[k]
        y = np.full((1, 16), imm, np.int64) if use_imm else src.astype(np.int64)
        expected = ALU_REF[name](dst.astype(np.int64), y).reshape(1, 16).astype(np.int32)
        insn = spec.insn(name, uop_end=1, use_imm=use_imm, imm=imm)
        got = execute(spec, insn, {"dst": dst, "src": src})
        assert set(got) == {"dst"}
        assert got["dst"].dtype == np.int32
        assert np.array_equal(got["dst"], expected), (name, use_imm, imm)


def test_alu_edge_cases_spelled_out():
    spec = vita()
    zeros = np.zeros((1, 16), np.int32)

    def run(name, dst, **f):
        d = np.full((1, 16), dst, np.int32)
        got = execute(spec, spec.insn(name, uop_end=1, use_imm=1, **f), {"dst": d, "src": zeros})
        return int(got["dst"][0, 0])

    assert run("ALU_ADD", I32_MAX, imm=1) == I32_MIN
    assert run("ALU_ADD", I32_MIN, imm=-1) == I32_MAX
    assert run("ALU_MUL", I32_MIN, imm=-1) == I32_MIN
    assert run("ALU_MUL", 1 << 20, imm=4096) == 0           # 2^32 wraps to 0
    assert run("ALU_MUL", 1 << 20, imm=-2048) == I32_MIN
    assert run("ALU_SHR", -17, imm=2) == -5           # arithmetic: floor(-17 / 4)
    assert run("ALU_SHR", -1, imm=31) == -1
    assert run("ALU_SHR", 3, imm=-30) == I32_MIN + 2**30   # 3 << 30 wraps
    assert run("ALU_SHR", -64, imm=33) == -32          # amounts modulo 32: >> 33 is >> 1
    assert run("ALU_SHR", 5, imm=32) == 5              # >> 32 is >> 0
    assert run("ALU_SHR", 5, imm=-33) == 10            # << 33 is << 1
    assert run("ALU_SHR", 5, imm=-32768) == 5          # << 32768 is << 0
    assert run("ALU_MIN", 5, imm=-32768) == -32768     # the immediate is sign-extended
    assert run("ALU_MAX", -70000, imm=-32768) == -32768


@pytest.mark.parametrize(("name", "dtype", "tile"), [
    ("LOAD_INP", np.int8, 16), ("LOAD_WGT", np.int8, 256), ("LOAD_ACC", np.int32, 16),
    ("LOAD_UOP", np.uint32, 1)])
def test_load_copies_a_block_and_zero_pads_it_like_np_pad(name, dtype, tile):
    spec = vita()
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    for y_size, x_size, pads in [(3, 4, (1, 2, 3, 0)), (1, 1, (0, 0, 0, 0)), (2, 5, (15, 0, 0, 15)),
                                 (4, 2, (0, 1, 1, 0))]:
        dram = rng.integers(info.min, info.max, size=(y_size, x_size, tile), endpoint=True, dtype=dtype)
        flat = dram.reshape(-1)
        flat[:2] = [info.min, info.max][: flat.size]
        yp0, yp1, xp0, xp1 = pads
        sram = rng.integers(1, 100, size=(yp0 + y_size + yp1, xp0 + x_size + xp1, tile)).astype(dtype)
        insn = spec.insn(name, y_size=y_size, x_size=x_size, x_stride=x_size + 3, y_pad_0=yp0, y_pad_1=yp1,
                         x_pad_0=xp0, x_pad_1=xp1)
        got = execute(spec, insn, {"sram": sram, "dram": dram})
        assert set(got) == {"sram"}
        expected = np.pad(dram, ((yp0, yp1), (xp0, xp1), (0, 0)))
        assert got["sram"].dtype == dtype
        assert np.array_equal(got["sram"], expected), (name, pads)


def test_load_operands_describe_the_strided_dram_block_and_the_sram_tiles():
    spec = vita()
    insn = spec.insn("LOAD_WGT", sram_base=3, dram_base=10, y_size=2, x_size=3, x_stride=7, y_pad_0=1,
                     x_pad_1=2)
    instr = spec.instruction("LOAD_WGT")
    env = spec.scalar_env(insn.values)
    dram = instr.operand("dram")
    assert dram.space == "DRAM"
    assert [evaluate(e, env) for e in dram.strides] == [7 * 256, 256, 1]
    assert evaluate(dram.addr, env) == 10 * 256
    sram = instr.operand("sram")
    assert sram.space == "WGT"
    assert evaluate(sram.addr, env) == 3
    assert operand_shape(spec, insn, "sram") == (3, 5, 256)
    assert operand_shape(spec, insn, "dram") == (2, 3, 256)


def test_store_truncates_accumulators_to_int8():
    spec = vita()
    rng = np.random.default_rng(5)
    acc = rand_i32(rng, (2, 3, 16))
    acc[0, 0, :6] = [128, 255, 256, -129, 0x12345680, -0x7FFFFF01]
    got = execute(spec, spec.insn("STORE_OUT", y_size=2, x_size=3, x_stride=8),
                  {"sram": acc, "dram": np.zeros((2, 3, 16), np.int8)})
    assert set(got) == {"dram"}
    assert got["dram"].dtype == np.int8
    assert np.array_equal(got["dram"], wrap8(acc))
    assert got["dram"][0, 0, :6].tolist() == [-128, -1, 0, 127, -128, -1]
    assert np.array_equal(got["dram"], acc.astype(np.int8))  # numpy's C-style cast agrees
    st_ = spec.instruction("STORE_OUT")
    assert (st_.operand("sram").space, st_.operand("dram").space) == ("ACC", "DRAM")


def test_finish_writes_nothing():
    spec = vita()
    assert execute(spec, spec.insn("FINISH"), {}) == {}
    assert spec.instruction("FINISH").operands == ()


# ---------------------------------------------------------------------------------------------- timing

def test_timing_units_and_cycles():
    spec = vita()
    loop = dict(uop_bgn=2, uop_end=6, iter_out=3, iter_in=5)
    mem = dict(y_size=4, x_size=6, x_stride=6)
    # GEMM and ALU instructions first fill their pipeline (latency), then take 1 or 2 cycles per micro-op
    assert timing_of(spec, spec.insn("GEMM", **loop)) == ("compute", 4, 3 * 5 * 4)
    assert timing_of(spec, spec.insn("GEMM_RESET", **loop))[2] == 3 * 5 * 4
    assert timing_of(spec, spec.insn("ALU_ADD", **loop)) == ("compute", 4, 2 * 3 * 5 * 4)
    assert timing_of(vita(GEMM_PIPELINE_CYCLES=9), spec.insn("GEMM", **loop))[1] == 9
    assert timing_of(spec, spec.insn("LOAD_INP", **mem)) == ("load", None, 4 * 6 * 16 // 8)
    assert timing_of(spec, spec.insn("LOAD_WGT", **mem)) == ("load", None, 4 * 6 * 256 // 8)
    assert timing_of(spec, spec.insn("LOAD_ACC", **mem)) == ("compute", None, 4 * 6 * 64 // 8)
    assert timing_of(spec, spec.insn("LOAD_UOP", y_size=1, x_size=3, x_stride=3)) == ("compute", None, 2)
    assert timing_of(spec, spec.insn("STORE_OUT", **mem)) == ("store", None, 4 * 6 * 16 // 8)
    assert timing_of(spec, spec.insn("FINISH")) == ("compute", None, 1)
    assert vita(DRAM_BYTES_PER_CYCLE=16).params["DRAM_BYTES_PER_CYCLE"] == 16
    fast = vita(DRAM_BYTES_PER_CYCLE=16)
    assert timing_of(fast, fast.insn("LOAD_INP", **mem))[2] == 4 * 6 * 16 // 16


# ---------------------------------------------------------------------------------------------- constraints

LOAD_OK = dict(sram_base=5, dram_base=0x100, y_size=2, x_size=3, x_stride=4, y_pad_0=1, y_pad_1=1, x_pad_0=1,
               x_pad_1=1)
LOOP_OK = dict(uop_bgn=0, uop_end=4, iter_out=2, iter_in=3, dst_factor_out=16, dst_factor_in=1,
               src_factor_out=16, src_factor_in=1)
VALID = {
    **{n: LOAD_OK for n in ("LOAD_INP", "LOAD_WGT", "LOAD_ACC", "LOAD_UOP")},
    "STORE_OUT": dict(sram_base=5, dram_base=0x100, y_size=2, x_size=3, x_stride=8),
    "GEMM": {**LOOP_OK, "wgt_factor_out": 8, "wgt_factor_in": 1},
    "GEMM_RESET": LOOP_OK,
    **{n: {**LOOP_OK, "use_imm": 1, "imm": -1}
       for n in ("ALU_MIN", "ALU_MAX", "ALU_ADD", "ALU_SHR", "ALU_MUL")},
    "FINISH": {},
}

# depth of each load's SRAM, in tiles (hand-computed above), and its tile bytes
LOAD_DEPTH = {"LOAD_INP": (2048, 16), "LOAD_WGT": (1024, 256), "LOAD_ACC": (2048, 64), "LOAD_UOP": (8192, 4)}


def _load_breakers(name: str) -> list[tuple[str, dict]]:
    depth, tile_bytes = LOAD_DEPTH[name]
    return [
        # the padded block is 4 x 5 = 20 tiles: one past the end
        ("the padded block must fit", {"sram_base": depth - 19}),
        ("32-bit physical address space", {"dram_base": 2**32 // tile_bytes - 6}),
    ]


ALU_BREAKERS = [
    ("must not be empty", {"uop_bgn": 4, "uop_end": 4}),
    ("inside the UOP buffer", {"uop_bgn": 8190, "uop_end": 8193}),
    ("destination tiles alone leave the ACC buffer", {"iter_out": 3, "dst_factor_out": 1024}),
    ("source tiles alone leave the ACC buffer", {"iter_out": 3, "src_factor_out": 1024}),
    ("reset_reg must be 0", {"reset_reg": 1}),
]
BREAKERS = {
    **{n: _load_breakers(n) for n in LOAD_DEPTH},
    "STORE_OUT": [
        ("a store cannot pad", {"x_pad_1": 1}),
        ("inside the accumulator", {"sram_base": 2048 - 5}),
        ("DRAM rows must not overlap", {"x_stride": 2}),
        ("32-bit physical address space", {"dram_base": 2**28 - 10}),
    ],
    "GEMM": [
        ("must not be empty", {"uop_bgn": 5, "uop_end": 4}),
        ("inside the UOP buffer", {"uop_end": 8193}),
        ("accumulator tiles alone leave the ACC buffer", {"iter_out": 3, "dst_factor_out": 1024}),
        ("input tiles alone leave the INP buffer", {"iter_in": 3, "src_factor_in": 1024, "iter_out": 1}),
        ("weight tiles alone leave the WGT buffer", {"iter_in": 3, "wgt_factor_in": 512}),
    ],
    "GEMM_RESET": [
        ("must not be empty", {"uop_end": 0}),
        ("inside the UOP buffer", {"uop_end": 16383}),
        ("accumulator tiles alone leave the ACC buffer", {"iter_in": 2049}),
    ],
    **{n: ALU_BREAKERS for n in ("ALU_MIN", "ALU_MAX", "ALU_ADD", "ALU_SHR", "ALU_MUL")},
    "FINISH": [],
}


def test_every_instruction_has_a_valid_example_and_a_breaker_for_each_constraint():
    spec = vita()
    assert set(VALID) == set(spec.instructions) == set(BREAKERS)
    for name, instr in spec.instructions.items():
        messages = [c.message for c in instr.constraints]
        covered = [next((m for m in messages if needle in m), None) for needle, _ in BREAKERS[name]]
        assert None not in covered, (name, covered)
        assert sorted(covered) == sorted(messages), f"{name}: some constraint has no violating example"


@pytest.mark.parametrize("name", list(VALID))
def test_a_valid_instance_satisfies_every_constraint(name):
    spec = vita()
    assert check_constraints(spec, spec.insn(name, **VALID[name])) == []


@pytest.mark.parametrize(("name", "needle", "change"),
                         [(n, needle, ch) for n, cases in BREAKERS.items() for needle, ch in cases])
def test_each_constraint_has_an_instance_that_violates_it_and_says_so(name, needle, change):
    spec = vita()
    insn = spec.insn(name, **{**VALID[name], **change})
    problems = check_constraints(spec, insn)
    assert len(problems) == 1, [str(p) for p in problems]
    (p,) = problems
    assert needle in p.message
    assert needle in str(p) and name in str(p)
    assert p.rule in [c.text for c in spec.instruction(name).constraints]


def test_constraint_boundaries_are_exact():
    spec = vita()
    # the padded 4 x 5 block ends exactly at the end of INP: allowed; one tile further: not
    assert check_constraints(spec, spec.insn("LOAD_INP", **{**LOAD_OK, "sram_base": 2048 - 20})) == []
    assert len(check_constraints(spec, spec.insn("LOAD_INP", **{**LOAD_OK, "sram_base": 2048 - 19}))) == 1
    # one row may be wider than the stride
    assert check_constraints(spec, spec.insn("LOAD_INP", **{**LOAD_OK, "y_size": 1, "x_stride": 0})) == []
    # an empty load without padding is fine
    assert check_constraints(spec, spec.insn("LOAD_ACC", y_size=0, x_size=0)) == []
    # uop_end may equal the depth
    ok = {**VALID["GEMM"], "uop_bgn": 8191, "uop_end": 8192}
    assert check_constraints(spec, spec.insn("GEMM", **ok)) == []
    # the last DRAM byte of a 16-byte tile block may be the last byte of the address space
    last = {**VALID["STORE_OUT"], "dram_base": 2**28 - 11}  # (2^28 - 11 + 8 + 3) * 16 = 2^32
    assert check_constraints(spec, spec.insn("STORE_OUT", **last)) == []


def test_a_micro_op_can_address_every_tile_of_the_deeper_buffer():
    """A 32x32 core with 64 KiB of inputs has 2048 INP tiles but 1024 ACC tiles: the micro-op's src_idx
    must reach INP tile 2047 (found by experiments/vta_dse.py, where it was as wide as ACC's index)."""
    spec = vita(LOG_BLOCK=5, LOG_INP_BUFF_SIZE=16)
    assert (spec.params["LOG_INP_BUFF_DEPTH"], spec.params["LOG_ACC_BUFF_DEPTH"]) == (11, 10)
    uop = spec.insn("uop", dst_idx=1023, src_idx=2047, wgt_idx=0)   # an EncodingError when it does not fit
    assert dict(uop.fields)["src_idx"] == 2047
