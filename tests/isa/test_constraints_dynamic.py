"""Static and dynamic rules: ``reads_operands`` and ``check_constraints(..., which=...)``.

A rule that reads an operand (a register holding an address, an element of a tensor) is dynamic: it can only
be checked when the instruction runs, on the operand's value then. Field ranges, types and every other rule
are static: the instance's fields decide them. ``which="static"`` checks the static part, ``"dynamic"`` the
dynamic part on the tensors given, ``"all"`` (the default) both. Expected verdicts are written by hand below.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from isa.instance import check_constraints, reads_operands

DIANNAO = isa.load_isa("diannao")
VITA = isa.load_isa("vita")

# a valid memcpyr: 4 rows of 256 bytes, 1024 apart, from GMEM R2 - 64 to NMEM R1 + 64, 256 apart
MEMCPYR = dict(dst_space="NMEM", src_space="GMEM", rd=1, rs1=2, dst_off=64, src_off=-64, len=256, count=4,
               dst_stride=256, src_stride=1024)
SPACES = ["GMEM", "SMEM", "NMEM", "WMEM"]


def registers(**values: int) -> np.ndarray:
    """The 32 registers R, zero except ``values`` (``r1=4096`` sets R[1])."""
    r = np.zeros(32, np.int32)
    for name, v in values.items():
        r[int(name[1:])] = v
    return r


def memcpyr(**changes):
    """The valid MEMCPYR with ``changes``."""
    return DIANNAO.insn("memcpyr", **{**MEMCPYR, **changes})


def reads_registers(v) -> list[tuple[str, int]]:
    """The operand values a violation lists (the register reads), in order."""
    return [(k, x) for k, x in v.values if k.startswith("R[")]


# ------------------------------------------------------------------------------------- reads_operands

def test_only_the_register_addressed_copies_rules_read_operands_among_the_diannao_rules():
    dynamic = [(name, c.kind) for name, instr in DIANNAO.instructions.items() for c in instr.constraints
               if reads_operands(c)]
    assert dynamic == [*((name, kind) for name in ("memcpyr", "memcpyr_async")
                         for kind in ("capacity", "capacity", "other")),
                       ("memcpyc", "range"), ("memcpyc", "capacity"), ("memcpyc", "capacity")]
    # memcpyr's direction, byte-count and row-layout rules read fields alone
    assert [(c.kind, reads_operands(c)) for c in DIANNAO.instruction("memcpyr").constraints] == [
        ("space", False), ("range", False), ("layout", False), ("layout", False),
        ("capacity", True), ("capacity", True), ("other", True)]


def test_no_vita_rule_reads_an_operand():
    rules = [c for instr in VITA.instructions.values() for c in instr.constraints]
    assert len(rules) > 0
    assert not any(reads_operands(c) for c in rules)


# A register-addressed load of n words, with a static rule after each dynamic one: the alignment of the
# offset (static), the words inside MEM (reads R twice), at least one word (static), and a rule that reads an
# element of the memory operand m and two registers.
TINY = """
[isa]
name = "tiny"
summary = "a register-addressed load with static and dynamic rules"
insn_bits = 32

[params]
NREGS = 8
LIMIT = 100

[spaces.MEM]
bytes = 256

[formats.ld]
fields = [
  { name = "opcode", bits = 4 },
  { name = "rd", bits = 3, kind = "reg" },
  { name = "rs", bits = 3, kind = "reg" },
  { name = "off", bits = 8, signed = true },
  { name = "n", bits = 8 },
]

[instructions.ld]
summary = "R[rd] = MEM[R[rs] + off]"
format = "ld"
fixed = { opcode = 1 }
operands = [
  { name = "R", kind = "register", dtype = "i32", shape = ["NREGS"] },
  { name = "m", kind = "tensor", space = "MEM", dtype = "i32", shape = ["n"], addr = "R[rs] + off" },
]
semantics = "R[rd] = m[0]"

[[instructions.ld.constraints]]
kind = "align"
rule = "off % 4 == 0"
message = "the offset is a multiple of 4"

[[instructions.ld.constraints]]
kind = "capacity"
rule = "R[rs] + off >= 0 and R[rs] + off + 4 * n <= capacity(MEM)"
message = "the words lie inside MEM"

[[instructions.ld.constraints]]
kind = "range"
rule = "n >= 1"
message = "at least one word"

[[instructions.ld.constraints]]
kind = "other"
rule = "m[0] < LIMIT or R[rs] == R[rd]"
message = "the first word is below LIMIT unless rs is rd"
"""


@pytest.fixture(scope="module")
def tiny() -> isa.ISA:
    return isa.load_spec_text(TINY, "tiny.toml")


def tiny_regs(rs: int, rd: int = 0) -> np.ndarray:
    """The tiny ISA's 8 registers, zero but for R[2] = ``rs`` and R[1] = ``rd`` (instances use rs=2, rd=1)."""
    r = np.zeros(8, np.int32)
    r[2], r[1] = rs, rd
    return r


def test_reads_operands_is_true_for_rules_that_read_a_register_or_a_tensor_element(tiny):
    assert [reads_operands(c) for c in tiny.instruction("ld").constraints] == [False, True, False, True]


# ----------------------------------------------------------------------------------- which = ...

def test_a_tiny_instance_breaking_every_rule_splits_into_static_and_dynamic_violations(tiny):
    insn = tiny.insn("ld", rd=1, rs=2, off=-2, n=0)  # misaligned, no words
    tensors = {"R": tiny_regs(rs=1), "m": np.zeros(0, np.int32)}  # n = 0 words: m has no element 0
    static = check_constraints(tiny, insn, tensors, which="static")
    assert [v.kind for v in static] == ["align", "range"]
    assert check_constraints(tiny, insn, which="static") == static  # tensors do not matter to static rules
    # R[rs] + off = -1: below 0; m[0] does not exist
    dynamic = check_constraints(tiny, insn, tensors, which="dynamic")
    assert [v.kind for v in dynamic] == ["capacity", "other"]
    assert "cannot evaluate" not in dynamic[0].message and "cannot evaluate" in dynamic[1].message
    # "all" keeps the declaration order, static and dynamic rules interleaved
    assert check_constraints(tiny, insn, tensors) == [static[0], dynamic[0], static[1], dynamic[1]]


def test_a_dynamic_violation_lists_each_operand_value_it_read_once(tiny):
    insn = tiny.insn("ld", rd=1, rs=2, off=4, n=4)
    v, = check_constraints(tiny, insn, {"R": tiny_regs(rs=250, rd=7), "m": np.zeros(4, np.int32)}, "dynamic")
    assert v.kind == "capacity"  # 250 + 4 + 16 > 256
    assert v.values == (("n", 4), ("off", 4), ("rs", 2), ("R[rs]", 250))  # R[rs] is read twice, listed once
    assert str(v) == ("ld: the words lie inside MEM: violated 'R[rs] + off >= 0 and R[rs] + off + 4 * n <= "
                      "capacity(MEM)' (n = 4, off = 4, rs = 2, R[rs] = 250)")
    m = np.array([200, 0, 0, 0], np.int32)
    v, = check_constraints(tiny, insn, {"R": tiny_regs(rs=8, rd=7), "m": m}, "dynamic")
    assert v.kind == "other"
    assert v.values == (("LIMIT", 100), ("rd", 1), ("rs", 2), ("m[0]", 200), ("R[rs]", 8), ("R[rd]", 7))
    assert check_constraints(tiny, insn, {"R": tiny_regs(rs=8, rd=8), "m": m}, "dynamic") == []  # rs is rd


def test_dynamic_checks_no_field_range_or_type():
    sigmoid = DIANNAO.insn("sigmoid", T="i8", dst=0, n=64)
    assert [v.kind for v in check_constraints(DIANNAO, sigmoid, which="static")] == ["type"]
    assert check_constraints(DIANNAO, sigmoid, which="dynamic") == []
    # a register number above NUM_REGS - 1 is a static range violation; the dynamic rule cannot read R[rd]
    small = isa.load_isa("diannao", params={"NUM_REGS": 16})
    insn = small.insn("memcpyr", **{**MEMCPYR, "rd": 20})
    regs = registers(r2=4160)[:16]  # the source at 4160 - 64 in GMEM
    static = check_constraints(small, insn, {"R": regs}, which="static")
    assert [v.kind for v in static] == ["range"] and "rd <= 15" in str(static[0])
    dynamic = check_constraints(small, insn, {"R": regs}, which="dynamic")
    assert [v.kind for v in dynamic] == ["capacity"]
    assert "cannot evaluate: 'R[rd]'" in dynamic[0].message and "out of range" in dynamic[0].message


def test_which_must_be_all_static_or_dynamic():
    with pytest.raises(ValueError, match="which must be 'all', 'static' or 'dynamic', not 'both'"):
        check_constraints(DIANNAO, memcpyr(), which="both")


# ---------------------------------------------------------------------------- memcpyr, static/dynamic

def test_memcpyr_with_its_registers_splits_into_static_and_dynamic_violations():
    # WMEM -> WMEM (space), 2 rows 128 apart of 255 bytes (the destination rows overlap), the destination at
    # R1 + 64 = -36 (negative), the source at R2 - 64 = 2**30 - 100 (past the end of WMEM)
    insn = memcpyr(dst_space="WMEM", src_space="WMEM", len=255, count=2, dst_stride=128, src_stride=255)
    regs = registers(r1=-100, r2=2**30 - 36)
    static = check_constraints(DIANNAO, insn, {"R": regs}, which="static")
    assert [(v.kind, v.rule) for v in static] == [("space", "dst_space != WMEM or src_space != WMEM"),
                                                  ("layout", "count <= 1 or dst_stride >= len")]
    dynamic = check_constraints(DIANNAO, insn, {"R": regs}, which="dynamic")
    assert [v.kind for v in dynamic] == ["capacity", "capacity"]  # the ranges are far apart: no overlap
    assert reads_registers(dynamic[0]) == [("R[rd]", -100)] and "capacity(dst_space)" in dynamic[0].rule
    assert reads_registers(dynamic[1]) == [("R[rs1]", 2**30 - 36)]
    assert "capacity(src_space)" in dynamic[1].rule
    assert check_constraints(DIANNAO, insn, {"R": regs}) == static + dynamic
    assert "R[rs1] = 1073741788" in str(dynamic[1])


def test_overlapping_nmem_to_nmem_memcpyr_is_a_dynamic_violation_naming_both_registers():
    insn = memcpyr(dst_space="NMEM", src_space="NMEM", dst_off=0, src_off=0, len=64, count=1)
    regs = registers(r1=4096, r2=4096 + 63)  # the source starts on the destination's last byte
    assert check_constraints(DIANNAO, insn, {"R": regs}, which="static") == []
    v, = check_constraints(DIANNAO, insn, {"R": regs}, which="dynamic")
    assert v.kind == "other" and "must not overlap" in v.message
    assert reads_registers(v) == [("R[rd]", 4096), ("R[rs1]", 4159)]
    assert check_constraints(DIANNAO, insn, {"R": registers(r1=4096, r2=4096 + 64)}) == []


@pytest.mark.parametrize("dst_space", SPACES)
@pytest.mark.parametrize("src_space", SPACES)
def test_memcpyr_without_registers_statically_breaks_only_the_rules_its_fields_decide(dst_space, src_space):
    insn = memcpyr(dst_space=dst_space, src_space=src_space)
    static = check_constraints(DIANNAO, insn, which="static")
    refused = dst_space == src_space == "WMEM"
    assert [v.kind for v in static] == (["space"] if refused else [])


@pytest.mark.parametrize(("dst_space", "src_space", "unreadable"), [
    ("NMEM", "GMEM", ["capacity", "capacity"]),  # the overlap rule is decided by dst_space != src_space
    ("NMEM", "NMEM", ["capacity", "capacity", "other"]),
    ("GMEM", "GMEM", ["capacity", "capacity", "other"]),
])
def test_memcpyr_without_registers_reports_its_dynamic_rules_as_not_evaluable(dst_space, src_space,
                                                                              unreadable):
    insn = memcpyr(dst_space=dst_space, src_space=src_space)
    dynamic = check_constraints(DIANNAO, insn, which="dynamic")
    assert [v.kind for v in dynamic] == unreadable
    for v in dynamic:
        assert "R[" in v.rule
        assert "(cannot evaluate: " in v.message and "tensor 'R' has no value here" in v.message
        assert reads_registers(v) == []  # no register value to list
    # "all" is the static verdict (the space rule for GMEM -> GMEM) followed by these
    assert check_constraints(DIANNAO, insn) == check_constraints(DIANNAO, insn, which="static") + dynamic


def field_values(data) -> dict:
    """Any memcpyr fields: offsets anywhere in their 25 signed bits, lengths and strides in 16 bits."""
    return dict(dst_space=data.draw(st.sampled_from(SPACES)), src_space=data.draw(st.sampled_from(SPACES)),
                rd=data.draw(st.integers(0, 31)), rs1=data.draw(st.integers(0, 31)),
                dst_off=data.draw(st.integers(-(2**24), 2**24 - 1)),
                src_off=data.draw(st.integers(-(2**24), 2**24 - 1)),
                len=data.draw(st.integers(0, 65535)), count=data.draw(st.integers(0, 255)),
                dst_stride=data.draw(st.integers(0, 65535)), src_stride=data.draw(st.integers(0, 65535)))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_static_and_dynamic_violations_together_are_all_of_them(data):
    insn = DIANNAO.insn("memcpyr", **field_values(data))
    value = st.one_of(st.integers(-4096, 1 << 20), st.integers(-(2**31), 2**31 - 1))
    regs = np.array(data.draw(st.lists(value, min_size=32, max_size=32)), np.int32)
    static = check_constraints(DIANNAO, insn, {"R": regs}, which="static")
    dynamic = check_constraints(DIANNAO, insn, {"R": regs}, which="dynamic")
    assert check_constraints(DIANNAO, insn, {"R": regs}) == static + dynamic  # its dynamic rules come last
    # static never reads R, with or without it; dynamic reads nothing but the rules on R
    assert check_constraints(DIANNAO, insn, which="static") == static
    assert all("R[" not in v.rule and reads_registers(v) == [] for v in static)
    assert all("R[" in v.rule and len(reads_registers(v)) >= 1 for v in dynamic)
    assert all(v.kind in ("capacity", "other") for v in dynamic)
