"""Programs: the text and binary forms round-trip exactly, and bad input is reported with its line or byte."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import isa
from isa.asm import assemble, disassemble, format_insn
from isa.binary import (
    decode_insn,
    decode_program,
    decode_record,
    encode_insn,
    encode_program,
    encode_record,
    instruction_stream,
    record_stream,
)
from isa.errors import AsmError, EncodingError
from isa.program import Program

SPEC = """
[isa]
name = "toy"
summary = "a toy ISA with every field kind"
insn_bits = 64

[params]
NREGS = 16

[enums.dtype]
values = ["i8", "i32", "f32"]
[enums.cmp]
values = ["LT", "GE", "EQ"]

[spaces.MEM]
bytes = 4096

[formats.op]
unit_bits = 32
fields = [
  { name = "opcode", bits = 4 },
  { name = "T", bits = 2, kind = "type", enum = "dtype" },
  { name = "rd", bits = 4, kind = "reg", max = "NREGS - 1" },
  { name = "rs", bits = 4, kind = "reg" },
  { name = "flag", bits = 1, kind = "flag", default = 0 },
  { name = "imm", bits = 16, signed = true },
  { name = "addr", bits = 12, kind = "addr" },
]
[formats.br]
fields = [
  { name = "opcode", bits = 4 },
  { name = "cond", bits = 2, kind = "enum", enum = "cmp" },
  { name = "rs", bits = 4, kind = "reg" },
  { name = "target", bits = 16, kind = "target" },
]
[formats.pair]
bits = 16
fields = [ { name = "lo", bits = 8 }, { name = "hi", bits = 8, signed = true } ]

[instructions.op]
summary = "an operation with a type"
format = "op"
fixed = { opcode = 1 }
types = { T = ["i8", "i32", "f32"] }

[instructions.br]
summary = "a conditional branch"
format = "br"
fixed = { opcode = 2 }

[instructions.halt]
summary = "stop"
format = "br"
fixed = { opcode = 3 }

[data.pair]
format = "pair"
summary = "a data record"
"""


@pytest.fixture(scope="module")
def toy() -> isa.ISA:
    return isa.load_spec_text(SPEC, "toy.toml")


def sample(toy) -> Program:
    return Program(
        toy,
        [
            toy.insn("op", T="i32", rd=3, rs=4, imm=-5, addr=0x123),
            toy.insn("br", cond="GE", rs=2, target=0),
            toy.insn("op", T="f32", flag=1, imm=32767),
            toy.insn("br", cond="EQ", target=4),
            toy.insn("halt"),
        ],
        {"pair": [toy.insn("pair", lo=255, hi=-128), toy.insn("pair", lo=1, hi=2)]},
    )


def test_disassembly_is_readable_and_labels_branch_targets(toy):
    assert disassemble(sample(toy)) == (
        "# Tandem program for ISA 'toy'\n"
        ".isa toy\n"
        ".data pair\n"
        "    lo=255, hi=-128\n"
        "    lo=1, hi=2\n"
        ".text\n"
        "L0:\n"
        "    op.i32 rd=r3, rs=r4, imm=-5, addr=0x123\n"
        "    br cond=GE, rs=r2, target=L0\n"
        "    op.f32 rd=r0, rs=r0, flag=1, imm=32767, addr=0x0\n"
        "    br cond=EQ, rs=r0, target=L4\n"
        "L4:\n"
        "    halt cond=LT, rs=r0, target=L0\n"
    )


def test_format_insn_leaves_out_fields_at_their_default_and_prints_unnamed_enum_codes_as_numbers(toy):
    assert format_insn(toy, toy.insn("op", T="i8", rd=1, rs=2, flag=0, imm=-1, addr=0xABC)) == (
        "op.i8 rd=r1, rs=r2, imm=-1, addr=0xabc")                  # flag = 0 is its default
    assert format_insn(toy, toy.insn("op", T="i8", flag=1, imm=-32768)) == (
        "op.i8 rd=r0, rs=r0, flag=1, imm=-32768, addr=0x0")
    unnamed = toy.insn("br", cond=3, rs=15, target=0)             # enum cmp names 0, 1 and 2 only
    assert format_insn(toy, unnamed) == "br cond=3, rs=r15, target=0"
    assert format_insn(toy, unnamed, {0: "top"}) == "br cond=3, rs=r15, target=top"
    assert assemble(f"top: {format_insn(toy, unnamed, {0: 'top'})}", isa=toy).insns == (unnamed,)


def test_text_and_binary_forms_round_trip(toy):
    p = sample(toy)
    assert assemble(disassemble(p), isa=toy) == p
    assert decode_program(encode_program(p), spec=toy) == p


def test_positional_arguments_labels_and_comments_assemble(toy):
    text = """
    .isa toy
    top:  op.i8 r1, r2, 0, -7, 0x10   # positional, in field order (type fields excluded)
          br GE, r1, top
    end:  halt
    """
    p = assemble(text, isa=toy)
    assert p.insns[0] == toy.insn("op", T="i8", rd=1, rs=2, imm=-7, addr=16)
    assert p.insns[1]["target"] == 0
    assert p.insns[2] == toy.insn("halt")


def test_instruction_words_place_fields_lsb_first(toy):
    insn = toy.insn("op", T="f32", rd=3, rs=4, flag=1, imm=-2, addr=0xABC)
    # opcode 1 @0, T=2 @4, rd @6, rs @10, flag @14, imm @15 (16 bits), addr: 12 bits would straddle bit 32
    # -> @32
    want = 1 | 2 << 4 | 3 << 6 | 4 << 10 | 1 << 14 | (0xFFFE << 15) | 0xABC << 32
    assert encode_insn(toy, insn) == want
    assert decode_insn(toy, want) == insn
    assert instruction_stream(Program(toy, [insn])) == want.to_bytes(8, "little")


def test_records_encode_with_their_own_format(toy):
    rec = toy.insn("pair", lo=7, hi=-1)
    assert encode_record(toy, rec) == 7 | 0xFF << 8
    assert decode_record(toy, "pair", 0xFF07) == rec
    assert record_stream(Program(toy, [], {"pair": [rec]}), "pair") == bytes([7, 0xFF])


@given(st.data())
def test_random_programs_round_trip(toy, data):
    def field_value(f):
        if f.kind == "type":
            return data.draw(st.sampled_from(["i8", "i32", "f32"]))
        if f.kind == "enum":
            return data.draw(st.sampled_from(list(toy.enums[f.enum].values)))
        return data.draw(st.integers(f.lo, f.hi if f.max is None else f.max))

    n = data.draw(st.integers(1, 6))
    insns = []
    for _ in range(n):
        name = data.draw(st.sampled_from(["op", "br", "halt"]))
        values = {f.name: field_value(f) for f in toy.instruction(name).fields if f.kind != "target"}
        if name in ("br", "halt"):
            values["target"] = data.draw(st.integers(0, n))
        insns.append(toy.insn(name, **values))
    recs = [
        toy.insn("pair", lo=data.draw(st.integers(0, 255)), hi=data.draw(st.integers(-128, 127)))
        for _ in range(data.draw(st.integers(0, 3)))
    ]
    p = Program(toy, insns, {"pair": recs} if recs else {})
    assert assemble(disassemble(p), isa=toy) == p
    assert decode_program(encode_program(p), spec=toy) == p


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("frob r1", r"<asm>:1: unknown instruction 'frob'"),
        ("op r1", r"<asm>:1: op takes \.T, but got 'op'"),
        ("op.i16 r1", r"type T must be one of i8, i32, f32, but got 'i16'"),
        ("br GE, r1, nowhere", r"<asm>:1: br: undefined label 'nowhere'"),
        ("op.i8 imm=40000", r"field 'imm' = 40000 does not fit in 16 signed bits \(-32768..32767\)"),
        ("op.i8 rd=r1, rd=r2", r"field 'rd' is given twice"),
        ("op.i8 bogus=1", r"op has no field 'bogus'"),
        ("br cond=NE", r"field 'cond' takes one of LT, GE, EQ, but got 'NE'"),
        ("\n\n.frob", r"<asm>:3: unknown directive '.frob'"),
        ("x:\nx: halt", r"label 'x' is defined twice"),
    ],
)
def test_bad_assembly_names_the_line_and_the_problem(toy, text, message):
    with pytest.raises(AsmError, match=message):
        assemble(text, isa=toy)


def test_assembly_without_an_isa_is_rejected():
    with pytest.raises(AsmError, match=r"no '\.isa NAME' line"):
        assemble("halt")


def test_decoding_garbage_is_an_encoding_error(toy):
    with pytest.raises(EncodingError, match="decodes to no instruction"):
        decode_insn(toy, 0xF)
    good = encode_program(sample(toy))
    with pytest.raises(EncodingError, match="ends early"):
        decode_program(good[:-3], spec=toy)
    with pytest.raises(EncodingError, match="does not start with"):
        decode_program(b"ELF\x00" + good[4:], spec=toy)
    with pytest.raises(EncodingError, match="unexpected bytes at the end"):
        decode_program(good + b"\x00", spec=toy)


def test_program_rejects_instances_that_do_not_belong(toy):
    with pytest.raises(EncodingError, match="branch target 9 is outside the program"):
        Program(toy, [toy.insn("br", target=9)])
    with pytest.raises(EncodingError, match="has no instruction 'nop'"):
        Program(toy, [isa.spec.Insn("nop")])
