"""Adding an instruction takes a spec file and no code: tests/isa/fixtures/fused_vector.toml.

The acceptance item: an instruction that exists only in a test fixture TOML (a fused multiply-add-relu
vector op, ``vfmarelu``) loads, shows in ``tandem isa show``, executes, and checks its constraints, with no
code change in isa/. Results are compared with hand-written numpy references, instruction words with a layout
worked out by hand from the fixture's format table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import isa
from isa.binary import decode_insn, encode_insn
from isa.errors import EncodingError
from isa.instance import check_constraints, execute, operand_shape, timing_of
from tandem.cli.app import app

FIXTURE = Path(__file__).parent / "fixtures" / "fused_vector.toml"
ISA_DIR = Path(isa.__file__).parent
SPEC = isa.load_spec_file(FIXTURE)
DTYPE_CODE = {"i8": 0, "i16": 1, "i32": 2, "f16": 3, "f32": 4}   # the fixture's enum dtype, in order


def vfmarelu(t: str = "f32", *, dst: int = 0, a: int = 0x1000, b: int = 0x2000, c: int = 0x3000,
             n: int = 64) -> isa.spec.Insn:
    return SPEC.insn("vfmarelu", T=t, dst=dst, a=a, b=b, c=c, n=n)


# ---------------------------------------------------------------------------------------------- no code


def test_the_instruction_is_known_to_no_file_of_isa() -> None:
    assert "fused_vector" not in isa.builtin_specs()
    for path in ISA_DIR.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".toml", ".md"):
            text = path.read_text(encoding="utf-8")
            assert "vfmarelu" not in text and "fused_vector" not in text, path


def test_the_fixture_loads_as_a_complete_isa() -> None:
    assert (SPEC.name, SPEC.insn_bits) == ("fused_vector", 128)
    assert list(SPEC.instructions) == ["vfmarelu"]
    assert SPEC.spaces["VMEM"].bytes == 65536
    instr = SPEC.instruction("vfmarelu")
    assert instr.types == {"T": ("f16", "f32", "i16")}
    assert instr.format.name == "vec3" and instr.format.bits == 128 and dict(instr.fixed) == {"opcode": 0x2A}
    assert [c.kind for c in instr.constraints] == ["align"] * 4 + ["divisible", "capacity"]
    for t in ("f16", "f32", "i16"):
        assert str(instr.typed_semantics({"T": t})) == "dst[i] = max(a[i] * b[i] + c[i], 0)"
    assert operand_shape(SPEC, vfmarelu(n=48), "dst") == (48,)


def test_parameters_of_the_fixture_can_be_overridden() -> None:
    small = isa.load_spec_file(FIXTURE, params={"VMEM_BYTES": 4096})
    assert small.spaces["VMEM"].bytes == 4096
    insn = vfmarelu("f32", dst=4096 - 128, a=0x100, b=0x200, c=0x300, n=64)
    assert check_constraints(SPEC, insn) == []
    assert [v.rule for v in check_constraints(small, insn)] == ["dst + n * bytes(T) <= VMEM_BYTES"]
    # an address field's largest meaningful value follows the parameter too
    (v,) = check_constraints(small, vfmarelu("f32", dst=0, a=0x1000, b=0x200, c=0x300, n=64))
    assert (v.kind, v.rule) == ("range", "a <= 4095")


# ---------------------------------------------------------------------------------------------- execution


def reference_float(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Each operation rounded to the operands' float type (exact in float64 before rounding), then relu."""
    ft = a.dtype.type
    prod = ft(a.astype(np.float64) * b.astype(np.float64))
    total = ft(prod.astype(np.float64) + c.astype(np.float64))
    return np.where(total > 0, total, ft(0))


def reference_i16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """i16 arithmetic wraps modulo 2**16 after the multiply and after the add, then relu."""
    def wrap(x):
        return ((x + 2**15) % 2**16 - 2**15).astype(np.int16)
    prod = wrap(a.astype(np.int64) * b.astype(np.int64))
    total = wrap(prod.astype(np.int64) + c.astype(np.int64))
    return np.maximum(total, np.int16(0))


@pytest.mark.parametrize("t", ["f16", "f32"])
def test_vfmarelu_executes_like_numpy_for_floats(t: str) -> None:
    ft = np.float16 if t == "f16" else np.float32
    rng = np.random.default_rng(11)
    n = 128
    a, b, c = (rng.normal(0.0, 3.0, n).astype(ft) for _ in range(3))
    big = np.finfo(ft).max
    a[:6] = [0.0, -0.0, 1.0, big, -2.0, 1.0]
    b[:6] = [5.0, 5.0, -1.0, 2.0, 3.0, 1.0]              # 1 * -1 + 1 = 0; big * 2 overflows to inf
    c[:6] = [-1.0, 1.0, 1.0, 0.0, 6.0, -1.0]             # -2 * 3 + 6 = 0; 1 * 1 - 1 = 0
    junk = np.full(n, np.nan, ft)
    with np.errstate(over="ignore"):
        expected = reference_float(a, b, c)
        out = execute(SPEC, vfmarelu(t, n=n), {"dst": junk, "a": a, "b": b, "c": c})
    assert set(out) == {"dst"} and out["dst"].dtype == ft
    # both sides round exactly once per operation (float64 holds every product and sum of two f16/f32 values
    # exactly), so the tolerance is zero
    assert np.array_equal(out["dst"], expected)
    assert out["dst"][3] == np.inf and np.all(out["dst"] >= 0)
    assert np.count_nonzero(expected == 0) > n // 4           # relu clipped the negative half


def test_vfmarelu_executes_like_numpy_for_i16_with_wraparound() -> None:
    rng = np.random.default_rng(12)
    n = 64
    a, b, c = (rng.integers(-(2**15), 2**15, n).astype(np.int16) for _ in range(3))
    a[:5] = [-32768, 32767, 300, 200, -1]
    b[:5] = [-1, 32767, 300, 200, 1]                     # -32768 * -1 wraps to -32768; 300 * 300 wraps
    c[:5] = [0, 0, 0, 32767, -32768]                     # 40000 + 32767 wraps; -1 - 32768 wraps to 32767
    out = execute(SPEC, vfmarelu("i16", n=n), {"dst": np.zeros(n, np.int16), "a": a, "b": b, "c": c})
    expected = reference_i16(a, b, c)
    assert out["dst"].dtype == np.int16 and np.array_equal(out["dst"], expected)
    assert list(expected[:5]) == [0, 1, 24464, 7231, 32767]


# ---------------------------------------------------------------------------------------------- constraints


def test_a_well_formed_instance_breaks_no_rule() -> None:
    assert check_constraints(SPEC, vfmarelu("f16", dst=0xFF00, n=128)) == []   # ends exactly at 64 KiB


def test_check_constraints_reports_a_misaligned_address() -> None:
    (v,) = check_constraints(SPEC, vfmarelu(a=0x1044))
    assert (v.kind, v.rule) == ("align", "a % VECTOR_BYTES == 0")
    assert str(v) == ("vfmarelu: a must be aligned to a 64-byte vector: violated 'a % VECTOR_BYTES == 0' "
                      "(VECTOR_BYTES = 64, a = 4164)")


@pytest.mark.parametrize("n", [40, 0, 17])
def test_check_constraints_reports_a_bad_count(n: int) -> None:
    (v,) = check_constraints(SPEC, vfmarelu(n=n))
    assert (v.kind, v.rule) == ("divisible", "n % LANES == 0 and n > 0")
    assert "n must be a positive multiple of 16" in str(v) and f"n = {n}" in str(v)


def test_check_constraints_reports_every_broken_rule_and_capacity_depends_on_the_type() -> None:
    insn = vfmarelu("f32", dst=0xFF04, b=0x2001, n=72)
    assert [v.kind for v in check_constraints(SPEC, insn)] == ["align", "align", "divisible", "capacity"]
    assert [v.kind for v in check_constraints(SPEC, vfmarelu("f32", dst=0xFF40, n=64))] == ["capacity"]
    assert check_constraints(SPEC, vfmarelu("f16", dst=0xFF40, n=64)) == []   # 64 elements of 2 bytes fit


def test_check_constraints_rejects_a_type_the_instruction_does_not_support() -> None:
    (v,) = check_constraints(SPEC, vfmarelu("i8"))
    assert v.kind == "type" and "i8" in str(v)


def test_timing_counts_vector_bytes_per_cycle() -> None:
    assert timing_of(SPEC, vfmarelu("f32", n=64)) == ("vfu", 6, 4)    # 256 bytes at 64 per cycle
    assert timing_of(SPEC, vfmarelu("f16", n=80)) == ("vfu", 6, 3)    # 160 bytes: 3 cycles, rounded up


# ---------------------------------------------------------------------------------------------- encoding


def hand_encoded(t: str, dst: int, a: int, b: int, c: int, n: int) -> int:
    """The fixture's vec3 layout, LSB first: opcode 8 | T 3 | dst 16 | a 16 | b 16 | c 16 | n 16 bits."""
    return 0x2A | DTYPE_CODE[t] << 8 | dst << 11 | a << 27 | b << 43 | c << 59 | n << 75


def test_encoding_follows_the_fixture_layout() -> None:
    word = encode_insn(SPEC, vfmarelu("f16", dst=0x40, a=0x80, b=0xC0, c=0x100, n=0x20))
    assert word == hand_encoded("f16", 0x40, 0x80, 0xC0, 0x100, 0x20)
    assert word == 0x0001_0008_0006_0004_0002_032A    # n | c | b | a | dst | T, opcode in 16-bit groups
    assert word < 1 << 91                              # 91 of the 128 bits are used


@given(t=st.sampled_from(["f16", "f32", "i16"]), dst=st.integers(0, 0xFFFF), a=st.integers(0, 0xFFFF),
       b=st.integers(0, 0xFFFF), c=st.integers(0, 0xFFFF), n=st.integers(0, 0xFFFF))
def test_encode_decode_round_trip(t: str, dst: int, a: int, b: int, c: int, n: int) -> None:
    insn = vfmarelu(t, dst=dst, a=a, b=b, c=c, n=n)
    word = encode_insn(SPEC, insn)
    assert word == hand_encoded(t, dst, a, b, c, n)
    assert decode_insn(SPEC, word) == insn


def test_a_word_with_another_opcode_does_not_decode() -> None:
    with pytest.raises(EncodingError):
        decode_insn(SPEC, hand_encoded("f32", 0, 0, 0, 0, 16) ^ 0x01)


# ---------------------------------------------------------------------------------------------- tandem isa


def test_tandem_isa_show_lists_the_fixture_instruction_with_semantics_and_constraints() -> None:
    result = CliRunner().invoke(app, ["isa", "show", str(FIXTURE)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "fused_vector" in out and "vfmarelu" in out
    assert "dst[i] = max(a[i] * b[i] + c[i], 0)" in out
    for rule in ("dst % VECTOR_BYTES == 0", "a % VECTOR_BYTES == 0", "n % LANES == 0 and n > 0",
                 "dst + n * bytes(T) <= VMEM_BYTES"):
        assert rule in out, rule
    assert "f16, f32, i16" in out


def test_tandem_isa_check_accepts_the_fixture() -> None:
    result = CliRunner().invoke(app, ["isa", "check", str(FIXTURE)])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output and "1 instruction" in result.output
