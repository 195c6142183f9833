"""The one matcher of instruction selection (compiler/passes/match.py): each rule, as a specification.

tensorize, tensorize_tiles and the UNIT Inspector all match through ``TreeMatch``; their own tests show the
rules at work in each pass, these show each rule alone.
"""

from __future__ import annotations

import pytest

import isa
from compiler.ir import Buffer, Var, cast, const, dtypes
from compiler.ir import nodes as ir
from compiler.passes.match import NoTreeMatch, TreeMatch, same_index

A = Buffer("A", (64,), dtypes.int8)
B = Buffer("B", (64,), dtypes.int8)
i, j = Var("i"), Var("j")

SPEC_HEAD = """
[isa]
name = "match_test"
summary = "one instruction per pattern"
insn_bits = 64

[formats.f]
fields = [{ name = "opcode", bits = 4 }, { name = "imm", bits = 16, signed = true },
          { name = "use_imm", bits = 1 }]
"""


def pattern(value: str, **dtypes_of: str):
    """The typed value tree of ``d[i] = <value>`` with operands a, b, d of the given dtypes (d: that of a)."""
    operands = {"d": dtypes_of.get("d", dtypes_of["a"]), **dtypes_of}
    ops = ", ".join(f'{{ name = "{n}", space = "MEM", dtype = "{dt}", shape = [4] }}'
                    for n, dt in operands.items())
    text = (SPEC_HEAD + '[spaces.MEM]\nbytes = 1024\n\n[instructions.P]\nsummary = "p"\nformat = "f"\n'
            f'fixed = {{ opcode = 1 }}\noperands = [{ops}]\nindices = {{ i = "spatial" }}\n'
            f'semantics = "d[i] = {value}"\n')
    (assign,) = isa.load_spec_text(text, "match_test.toml").instruction("P").typed_semantics().statements
    return assign.value


def test_index_equality_is_affine_form_equality():
    assert same_index(i + j * 4, j * 4 + i)
    assert same_index((i, j + 1), (i, 1 + j))
    assert not same_index(i + 1, i)
    assert not same_index((i,), (i, j))


def test_operators_match_their_node_and_commutative_ones_swap():
    wide = Buffer("W", (64,), dtypes.int32)
    m = TreeMatch()
    m.match(pattern("i32(a[i]) + b[i]", a="i8", b="i32", d="i32"), wide[j] + cast(A[i], "int32"))
    assert {name: buf.name for name, (buf, _) in m.operands.items()} == {"a": "A", "b": "W"}
    with pytest.raises(NoTreeMatch, match="opcode mismatch: the instruction has -"):
        TreeMatch().match(pattern("a[i] - b[i]", a="i8", b="i8"), ir.Add(A[i], B[j]))


def test_a_float_division_matches_the_semantics_division():
    x = Buffer("X", (64,), dtypes.float32)
    m = TreeMatch()
    m.match(pattern("1.0 / a[i]", a="f32"), ir.Div(const(1.0, "float32"), x[i]))
    assert {name: buf.name for name, (buf, _) in m.operands.items()} == {"a": "X"}
    with pytest.raises(NoTreeMatch, match="opcode mismatch: the instruction has /"):
        TreeMatch().match(pattern("1.0 / a[i]", a="f32"), ir.Mul(const(1.0, "float32"), x[i]))


def test_a_sum_with_a_constant_matches_the_subtraction_of_its_negation():
    """``x + imm`` computes ``x - 128``: the simplifier writes ``x + -128`` as a subtraction."""
    x = Buffer("X", (4,), dtypes.int32)
    add = pattern("a[i] + select(use_imm != 0, i32(imm), b[i])", a="i32", b="i32")
    m = TreeMatch(fields=frozenset({"imm", "use_imm"}), field_defaults={"use_imm": 0})
    m.match(add, ir.Sub(x[i], const(128, "int32")))
    assert m.values == {"use_imm": 1, "imm": -128}
    with pytest.raises(NoTreeMatch):   # x - y is no sum
        TreeMatch(fields=frozenset({"imm", "use_imm"}), field_defaults={"use_imm": 0}).match(
            add, ir.Sub(x[i], x[j]))


def test_an_operand_met_twice_must_be_the_same_place():
    m = TreeMatch()
    m.match(pattern("a[i] * a[i]", a="i8"), A[i + 1] * A[1 + i])
    with pytest.raises(NoTreeMatch, match=r"operand a is both A\[i \+ 1\] and A\[i\]"):
        TreeMatch().match(pattern("a[i] * a[i]", a="i8"), A[i + 1] * A[i])


def test_a_cast_matches_a_cast_or_a_value_already_of_its_type():
    TreeMatch().match(pattern("i32(a[i])", a="i8", d="i32"), cast(A[i], "int32"))
    wide = Buffer("W", (64,), dtypes.int32)
    TreeMatch().match(pattern("i32(a[i])", a="i32"), wide[i])
    with pytest.raises(NoTreeMatch, match="expected a cast to i32"):
        TreeMatch().match(pattern("i32(a[i])", a="i8", d="i32"), cast(A[i], "int16"))


def test_a_constant_matches_the_same_value_and_sign():
    TreeMatch().match(pattern("max(a[i], 0)", a="i8"), ir.Max(A[i], const(0, "int8")))
    f = Buffer("F", (4,), dtypes.float32)
    with pytest.raises(NoTreeMatch, match="expected the constant"):
        TreeMatch().match(pattern("max(a[i], 0.0)", a="f32"), ir.Max(f[i], const(-0.0, "float32")))


def test_with_dtype_checks_every_node_has_the_patterns_dtype():
    with pytest.raises(NoTreeMatch, match="dtype mismatch: the instruction has i8"):
        TreeMatch(check_dtypes=True).match(pattern("a[i]", a="i8"), Buffer("U", (4,), dtypes.uint8)[i])


def test_fields_take_constants_and_select_the_branch_their_flag_makes_true():
    m = TreeMatch(fields=frozenset({"imm", "use_imm"}), field_defaults={"use_imm": 0})
    m.match(pattern("min(a[i], select(use_imm != 0, i32(imm), b[i]))", a="i32", b="i32"),
            ir.Min(Buffer("X", (4,), dtypes.int32)[i], const(127, "int32")))
    assert m.values == {"use_imm": 1, "imm": 127}


def test_a_shift_matches_a_floor_division_by_a_power_of_two():
    x = Buffer("X", (4,), dtypes.int32)
    m = TreeMatch(fields=frozenset({"imm"}), shifts=True)
    m.match(pattern("a[i] >> imm", a="i32"), ir.FloorDiv(x[i], const(256, "int32")))
    assert m.values == {"imm": 8}
    with pytest.raises(NoTreeMatch, match="power of two"):
        TreeMatch(fields=frozenset({"imm"}), shifts=True).match(pattern("a[i] >> imm", a="i32"),
                                                                ir.FloorDiv(x[i], const(3, "int32")))


def test_a_field_modulo_a_constant_matches_a_constant_below_it():
    """A shifter that keeps the amount's low 5 bits (``x >> imm % 32``) still serves ``x // 2**k`` for k < 32,
    with imm = k; an amount of 32 or more is not what ``imm % 32`` can give."""
    x = Buffer("X", (4,), dtypes.int32)
    m = TreeMatch(fields=frozenset({"imm"}), shifts=True)
    m.match(pattern("a[i] >> imm % 32", a="i32"), ir.FloorDiv(x[i], const(256, "int32")))
    assert m.values == {"imm": 8}
    with pytest.raises(NoTreeMatch, match=r"imm % 32 needs a constant in \[0, 32\), found 40"):
        TreeMatch(fields=frozenset({"imm"})).match(pattern("a[i] + imm % 32", a="i32"),
                                                   ir.Add(x[i], const(40, "int32")))
