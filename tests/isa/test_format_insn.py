"""``format_insn``: one instruction as the assembly text ``disassemble`` writes for it, on the DianNao spec.

The expected lines are written by hand from the text syntax (isa/asm.py): the mnemonic with a ``.T`` suffix
per type variable, then ``field=value`` in field order; addresses in hex, registers as ``r3``, enum fields by
name, signed fields in decimal, branch targets as a label or, without labels, the bare instruction index.
"""

from __future__ import annotations

import pytest

import isa
from isa.asm import format_insn

SPEC = isa.load_isa("diannao")

LINES = [
    # a typed vector op: the type is the mnemonic's suffix, addresses are hex
    (SPEC.insn("vadd", T="f32", dst=0x40, a=0x80, b=0xC0, n=64), "vadd.f32 dst=0x40, a=0x80, b=0xc0, n=64"),
    (SPEC.insn("relu", T="i8", dst=0, n=128), "relu.i8 dst=0x0, n=128"),
    # enum fields by name
    (SPEC.insn("memcpy", dst_space="NMEM", src_space="GMEM", dst=0x100, src=0x3FFFFFFF, len=14, count=4,
               dst_stride=14, src_stride=56),
     "memcpy dst_space=NMEM, src_space=GMEM, dst=0x100, src=0x3fffffff, len=14, count=4, dst_stride=14, "
     "src_stride=56"),
    (SPEC.insn("rdid", rd=5, which="CLUSTER_ID"), "rdid rd=r5, which=CLUSTER_ID"),
    (SPEC.insn("barrier", scope="ALL"), "barrier scope=ALL"),
    # register fields, signed fields in decimal
    (SPEC.insn("add", rd=1, rs1=2, rs2=31), "add rd=r1, rs1=r2, rs2=r31"),
    (SPEC.insn("addi", rd=3, rs1=3, imm=-4), "addi rd=r3, rs1=r3, imm=-4"),
    (SPEC.insn("li", rd=0, imm=-(2**31)), "li rd=r0, imm=-2147483648"),
    (SPEC.insn("memcpyr", dst_space="WMEM", src_space="SMEM", rd=4, rs1=9, dst_off=-64, src_off=-(2**24),
               len=256, count=2, dst_stride=256, src_stride=512),
     "memcpyr dst_space=WMEM, src_space=SMEM, rd=r4, rs1=r9, dst_off=-64, src_off=-16777216, len=256, "
     "count=2, dst_stride=256, src_stride=512"),
    (SPEC.insn("fld", T="f16", rd=3, rs1=1, space="NMEM", imm=-4),
     "fld.f16 rd=r3, rs1=r1, space=NMEM, imm=-4"),
    # no fields besides the opcode: the mnemonic alone
    (SPEC.insn("halt"), "halt"),
]


@pytest.mark.parametrize(("insn", "line"), LINES)
def test_an_instruction_prints_as_its_mnemonic_and_field_values(insn, line):
    assert format_insn(SPEC, insn) == line
    assert format_insn(SPEC, insn, {0: "top", 7: "loop"}) == line  # labels only name branch targets


@pytest.mark.parametrize(("insn", "bare", "labelled"), [
    (SPEC.insn("blt", rs1=1, rs2=2, target=7), "blt rs1=r1, rs2=r2, target=7",
     "blt rs1=r1, rs2=r2, target=loop"),
    (SPEC.insn("jmp", target=0), "jmp target=0", "jmp target=top"),
])
def test_a_branch_target_prints_as_its_label_or_else_as_the_instruction_index(insn, bare, labelled):
    assert format_insn(SPEC, insn) == bare
    assert format_insn(SPEC, insn, {0: "top", 7: "loop"}) == labelled


def program() -> isa.Program:
    """A loop that copies 4 rows per core: every kind of field, a backward branch and a forward jump."""
    return isa.Program(SPEC, [
        SPEC.insn("rdid", rd=1, which="CORE_ID"),
        SPEC.insn("li", rd=2, imm=4),
        SPEC.insn("memcpyr", dst_space="NMEM", src_space="GMEM", rd=3, rs1=1, dst_off=-64, src_off=4096,
                  len=64, count=4, dst_stride=64, src_stride=256),
        SPEC.insn("vadd", T="f16", dst=0x40, a=0x40, b=0x80, n=64),
        SPEC.insn("addi", rd=2, rs1=2, imm=-1),
        SPEC.insn("bne", rs1=2, rs2=0, target=2),
        SPEC.insn("jmp", target=7),
        SPEC.insn("halt"),
    ])


def test_disassemble_writes_each_instruction_as_format_insn_with_l_labels():
    p = program()
    text = isa.disassemble(p)
    labels = {2: "L2", 7: "L7"}
    body = text.split(".text\n", 1)[1].splitlines()
    lines = ["    " + format_insn(SPEC, insn, labels) for insn in p.insns]
    assert body == [*lines[:2], "L2:", *lines[2:7], "L7:", lines[7]]
    assert body[-4:] == ["    bne rs1=r2, rs2=r0, target=L2", "    jmp target=L7", "L7:", "    halt"]
    assert isa.assemble(text) == p


def test_lines_without_labels_assemble_back_to_the_same_instructions():
    p = program()
    text = ".isa diannao\n.text\n" + "\n".join(format_insn(SPEC, insn) for insn in p.insns) + "\n"
    assert isa.assemble(text) == p  # a bare index is a branch target as well
