"""Typing of the ISA language (isa/README.md, "The expression language"): weak literals, strict dtypes, casts,
reductions, index rules, extent inference and the reads/writes of semantics; every error names its column."""

from __future__ import annotations

import pytest

from isa.errors import ParseError
from isa.lang.parser import parse_expr, parse_statements
from isa.lang.tree import Access, Binary, Call, Cast, Name, Num, Reduce, to_text, walk
from isa.lang.typecheck import Semantics, TensorSig, check_scalar, typecheck

SCALARS = {"n": "field", "m": "field", "VEC": "param", "ADD": "enum"}


def sig(dtype: str, *shape: str) -> TensorSig:
    return TensorSig(dtype, tuple(parse_expr(s) for s in shape))


def check(text: str, tensors: dict[str, TensorSig], indices: dict, types: dict | None = None) -> Semantics:
    """Typecheck ``text``; ``indices`` maps a name to "spatial"/"reduce" or to (kind, extent text)."""
    idx = {name: (spec, None) if isinstance(spec, str) else (spec[0], parse_expr(spec[1]))
           for name, spec in indices.items()}
    return typecheck(text, parse_statements(text), tensors=tensors, indices=idx, scalars=SCALARS,
                     types=types or {})


def fails(text: str, tensors: dict[str, TensorSig], indices: dict, types: dict | None = None) -> ParseError:
    with pytest.raises(ParseError) as info:
        check(text, tensors, indices, types)
    return info.value


def col(text: str, needle: str, start: int = 0) -> int:
    """1-based column of the first ``needle`` at or after offset ``start`` (in a one-line text)."""
    return text.index(needle, start) + 1


V8 = {"d": sig("i8", "n"), "a": sig("i8", "n"), "b": sig("i8", "n")}
MIXED = {"d8": sig("i8", "n"), "d32": sig("i32", "n"), "df": sig("f32", "n"), "dh": sig("f16", "n"),
         "dbool": sig("bool", "n"), "a8": sig("i8", "n"), "a16": sig("i16", "n"), "a32": sig("i32", "n"),
         "u8": sig("u8", "n"), "af": sig("f32", "n"), "ah": sig("f16", "n")}
IDX_I = {"i": "spatial"}


def value(sem: Semantics, k: int = 0):
    return sem.statements[k].value


# ------------------------------------------------------------------------------------------ weak typing

@pytest.mark.parametrize(("rhs", "dtype"), [
    ("a8[i] + 1", "i8"),          # an integer literal takes the other side's dtype
    ("300 * a8[i]", "i8"),
    ("a8[i] * n", "i8"),          # so do fields ...
    ("a8[i] - VEC", "i8"),        # ... parameters ...
    ("a8[i] + ADD", "i8"),        # ... enum values ...
    ("a8[i] + (2 * i + 1)", "i8"),  # ... and index arithmetic
    ("max(a8[i], 0)", "i8"),
    ("select(i < n, a8[i], 0)", "i8"),
    ("-a8[i]", "i8"),
])
def test_weak_operands_take_the_other_sides_dtype(rhs, dtype):
    sem = check(f"d8[i] = {rhs}", MIXED, IDX_I)
    assert value(sem).dtype == dtype
    typed_ops = [e for e in walk(value(sem))
                 if isinstance(e, Binary) and any(isinstance(n, Access) for n in walk(e))]
    weak_ops = [e for e in walk(value(sem)) if isinstance(e, Binary) and e not in typed_ops]
    assert all(b.arg_dtype == dtype for b in typed_ops)
    assert all(b.arg_dtype == "int" for b in weak_ops)  # weak-only arithmetic (2 * i + 1, i < n) stays weak


def test_literals_stay_weak_in_the_typed_tree():
    sem = check("df[i] = af[i] * 0.5 + 2", MIXED, IDX_I)
    nums = [e for e in walk(value(sem)) if isinstance(e, Num)]
    assert [(n.value, n.dtype) for n in nums] == [(0.5, "float"), (2, "int")]
    assert value(sem).dtype == "f32"


@pytest.mark.parametrize(("target", "rhs", "dtype"), [
    ("d8", "2 * 3 + n", "int"),        # weak-only arithmetic stays weak and may be assigned to any number
    ("df", "n * 2", "int"),
    ("df", "1 + 0.5", "float"),        # int and float literals make a weak float
    ("df", "0.25", "float"),
])
def test_weak_values_can_be_assigned(target, rhs, dtype):
    assert value(check(f"{target}[i] = {rhs}", MIXED, IDX_I)).dtype == dtype


@pytest.mark.parametrize(("text", "needle", "message"), [
    ("d8[i] = a8[i] + a16[i]", "+", "'+': operands have different types i8 and i16; cast one, e.g. i8(...)"),
    ("d32[i] = a32[i] * af[i]", "*", "operands have different types i32 and f32"),
    ("d8[i] = a8[i] + u8[i]", "+", "operands have different types i8 and u8"),
    ("df[i] = af[i] - ah[i]", "-", "operands have different types f32 and f16"),
    ("d8[i] = max(a8[i], a16[i])", "max", "max(): operands have different types i8 and i16"),
    ("d8[i] = select(n > 0, a8[i], u8[i])", "select", "select(): operands have different types i8 and u8"),
    ("d32[i] = a32[i] + 0.5", "+", "'+': a float literal cannot combine with i32; cast it"),
    ("dbool[i] = a8[i] < a16[i]", "<", "operands have different types i8 and i16"),
])
def test_mismatched_dtypes_are_rejected_at_the_operator(text, needle, message):
    err = fails(text, MIXED, IDX_I)
    assert err.col == col(text, needle)
    assert message in err.detail


@pytest.mark.parametrize(("text", "needle", "message"), [
    ("d8[i] = a32[i]", "a32", "cannot assign a value of type i32 to 'd8' of type i8; cast it, e.g. i8(...)"),
    ("d32[i] = 1.5", "1.5", "cannot assign a value of type float to 'd32' of type i32"),
    ("d32[i] = a8[i] < 0", "<", "cannot assign a value of type bool to 'd32' of type i32"),  # at the top node
    ("dbool[i] = 1.0", "1.0", "cannot assign a value of type float"),
])
def test_the_assigned_value_must_have_the_targets_dtype(text, needle, message):
    err = fails(text, MIXED, IDX_I)
    assert err.col == col(text, needle)
    assert message in err.detail


def test_a_comparison_is_bool_and_its_arguments_share_a_dtype():
    sem = check("dbool[i] = a8[i] < 5 and not (u8[i] == 0) or i >= n", MIXED, IDX_I)
    v = value(sem)
    assert v.dtype == "bool"
    cmps = {e.op: e.arg_dtype for e in walk(v) if isinstance(e, Binary) and e.op in ("<", "==", ">=")}
    assert cmps == {"<": "i8", "==": "u8", ">=": "int"}


# ------------------------------------------------------------------------------------------ operator kinds

@pytest.mark.parametrize("rhs", ["af[i] / af[i]", "af[i] / 2", "ah[i] / 0.5"])
def test_slash_divides_floats(rhs):
    target = "dh" if "ah" in rhs else "df"
    assert value(check(f"{target}[i] = {rhs}", MIXED, IDX_I)).op == "/"


@pytest.mark.parametrize("rhs", ["a32[i] / a32[i]", "a32[i] / 2", "n / 2"])
def test_slash_on_integers_is_rejected(rhs):
    text = f"d32[i] = {rhs}"
    err = fails(text, MIXED, IDX_I)
    assert err.col == col(text, "/")
    assert "'/' divides floats; use '//' for integer division" in err.detail


@pytest.mark.parametrize("op", ["//", "%", "<<", ">>", "&", "|", "^"])
def test_integer_only_operators(op):
    assert value(check(f"d32[i] = a32[i] {op} 3", MIXED, IDX_I)).dtype == "i32"
    text = f"df[i] = af[i] {op} af[i]"
    err = fails(text, MIXED, IDX_I)
    assert err.col == col(text, op)
    assert f"'{op}' needs integer operands, but got f32" in err.detail


@pytest.mark.parametrize(("text", "needle", "message"), [
    ("df[i] = ~af[i]", "~", "'~' needs an integer operand, but got f32"),
    ("d8[i] = -(a8[i] < 0)", "-", "'-' needs a number, but got bool"),
    ("d8[i] = i8((a8[i] < 0) + (a8[i] > 0))", "+", "'+' needs numbers, but got bool"),
    ("dbool[i] = (a8[i] < 0) < (a8[i] > 0)", ") <", "'<' needs numbers, but got bool"),
    ("dbool[i] = (a8[i] < 0) == 1", "==", "cannot combine bool and int"),
    ("dbool[i] = a8[i] and n", "a8", "'and' needs a condition, but got a i8 value"),
    ("dbool[i] = not af[i]", "af", "'not' needs a condition, but got a f32 value"),
])
def test_operand_kinds(text, needle, message):
    err = fails(text, MIXED, IDX_I)
    assert err.col == col(text, needle) + (2 if needle == ") <" else 0)
    assert message in err.detail


def test_bools_compare_with_each_other():
    sem = check("dbool[i] = (a8[i] < 0) != (u8[i] > 3)", MIXED, IDX_I)
    assert value(sem).arg_dtype == "bool"


# ------------------------------------------------------------------------------------------ calls

@pytest.mark.parametrize(("rhs", "types", "cast_to"), [
    ("i32(a8[i])", {}, "i32"),
    ("int32(a8[i])", {}, "i32"),
    ("T(a8[i])", {"T": "i32"}, "i32"),
    ("i32(af[i] * 2.5)", {}, "i32"),
    ("i32(a8[i] < 0)", {}, "i32"),
])
def test_casts_including_type_variables(rhs, types, cast_to):
    v = value(check(f"d32[i] = {rhs}", MIXED, IDX_I, types))
    assert isinstance(v, Cast)
    assert v.dtype == cast_to


def test_a_type_variable_casts_to_its_binding():
    text = "d[i] = T(a[i]) * T(2)"
    tensors = {"d": sig("f16", "n"), "a": sig("i8", "n")}
    v = value(check(text, tensors, IDX_I, {"T": "f16"}))
    assert v.dtype == "f16"
    assert [c.dtype for c in walk(v) if isinstance(c, Cast)] == ["f16", "f16"]
    err = fails(text, tensors, IDX_I, {"T": "f32"})  # the same text with another binding no longer fits d
    assert "cannot assign a value of type f32 to 'd' of type f16" in err.detail


@pytest.mark.parametrize(("text", "needle", "message"), [
    ("d32[i] = i32(a8[i], 1)", "i32(", "cast i32(...) takes one argument, but got 2"),
    ("d32[i] = a32[i] * f32", "f32", "'f32' is a type; use it as a cast, e.g. f32(x)"),
    ("d32[i] = a32[i] * T", "T", "'T' is a type; use it as a cast"),
    ("d32[i] = a32", "a32", "tensor 'a32' needs indices, e.g. a32[i]"),
    ("d32[i] = a32[i] + q", "q", "undefined name 'q'"),
    ("d32[i] = nope[i]", "nope", "undefined tensor 'nope'"),
    ("d32[i] = a32[i, i]", "a32", "tensor 'a32' has 1 dimensions, but is indexed with 2"),
    ("d32[i] = a32[0.5]", "0.5", "an index of 'a32' must be an integer, but got float"),
    ("d32[i] = frob(a32[i])", "frob", "unknown function 'frob'"),
    ("d8[i] = max(a8[i])", "max", "max(...) takes at least two values"),
    ("dbool[i] = max(a8[i] < 0, n > 0)", "max", "max() needs numbers, but got bool"),
    ("d8[i] = select(a8[i], 1, 2)", "a8", "'select' needs a condition, but got a i8 value"),
    ("d8[i] = select(n > 0, 1)", "select", "select(cond, a, b) takes three arguments, but got 2"),
    ("d32[i] = exp(a32[i])", "exp", "exp() needs a float, but got i32; cast it"),
    ("df[i] = tanh(af[i], af[i])", "tanh", "tanh(x) takes one argument, but got 2"),
    ("dbool[i] = abs(a8[i] < 0)", "abs", "abs() needs a number, but got bool"),
])
def test_call_errors(text, needle, message):
    err = fails(text, MIXED, IDX_I, {"T": "i32"})
    assert err.col == col(text, needle)
    assert message in err.detail


@pytest.mark.parametrize(("rhs", "target", "dtype"), [
    ("select(a8[i] > 0, a8[i], 0)", "d8", "i8"),
    ("select(n, a8[i], 1)", "d8", "i8"),           # a weak integer is a condition (not zero)
    ("min(a8[i], 3, -3)", "d8", "i8"),
    ("max(u8[i], 255)", "u8", "u8"),
    ("abs(a8[i])", "d8", "i8"),
    ("abs(af[i])", "df", "f32"),
    ("exp(af[i])", "df", "f32"),
    ("sqrt(ah[i]) + log(ah[i])", "dh", "f16"),
])
def test_builtin_functions_keep_their_arguments_dtype(rhs, target, dtype):
    tensors = {**MIXED, "u8": sig("u8", "n")}
    assert value(check(f"{target}[i] = {rhs}", tensors, IDX_I)).dtype == dtype


# ------------------------------------------------------------------------------------------ reductions

GEMM = {"acc": sig("i32", "n", "m"), "inp": sig("i8", "n", "VEC"), "wgt": sig("i8", "m", "VEC")}
GEMM_I = {"b": "spatial", "o": "spatial", "k": "reduce"}


def test_a_free_reduce_index_sums_the_whole_right_side():
    sem = check("acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])", GEMM, GEMM_I)
    v = value(sem)
    assert isinstance(v, Reduce)
    assert (v.op, v.axes, v.dtype) == ("sum", ("k",), "i32")
    assert isinstance(v.body, Binary) and v.body.op == "*"
    assert to_text(v) == "sum(k, i32(inp[b, k]) * i32(wgt[o, k]))"


def test_free_reduce_indices_are_summed_together_in_order_of_appearance():
    tensors = {"d": sig("i32", "n"), "a": sig("i32", "n", "m", "VEC")}
    v = value(check("d[i] = a[i, q, p] + 1", tensors, {"i": "spatial", "p": "reduce", "q": "reduce"}))
    assert (v.op, v.axes) == ("sum", ("q", "p"))


def test_explicit_sums_over_one_or_two_indices():
    tensors = {"d": sig("i32", "n"), "c": sig("i32", "n"), "a": sig("i32", "n", "m", "VEC")}
    idx = {"i": "spatial", "j": "reduce", "k": "reduce"}
    v = value(check("d[i] = c[i] + sum(j, k, a[i, j, k])", tensors, idx))
    assert isinstance(v, Binary)  # the explicit sum is not wrapped in another one
    assert (v.rhs.op, v.rhs.axes, v.rhs.dtype) == ("sum", ("j", "k"), "i32")
    v = value(check("d[i] = sum(j, sum(k, a[i, j, k]))", tensors, idx))
    assert (v.axes, v.body.axes) == (("j",), ("k",))


def test_unit_style_sum_reduces_over_the_free_reduce_indices_of_its_body():
    tensors = {"d": sig("i32", "n"), "a": sig("i32", "n", "m", "VEC")}
    v = value(check("d[i] = 2 * sum(a[i, j, k])", tensors, {"i": "spatial", "j": "reduce", "k": "reduce"}))
    assert (v.rhs.op, v.rhs.axes) == ("sum", ("j", "k"))


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_reduce_when_their_first_argument_is_a_reduce_index(op):
    tensors = {"d": sig("f32", "n"), "a": sig("f32", "n", "m")}
    v = value(check(f"d[i] = {op}(k, a[i, k])", tensors, {"i": "spatial", "k": "reduce"}))
    assert isinstance(v, Reduce)
    assert (v.op, v.axes, v.dtype) == (op, ("k",), "f32")
    v = value(check(f"d[i] = {op}(a[i, 0], a[i, 1])", tensors, {"i": "spatial"}))
    assert isinstance(v, Call)  # an ordinary element-wise max/min


@pytest.mark.parametrize(("text", "needle", "message"), [
    ("d[i] = sum(i, a[i, k])", "i,", "sum() reduces over reduce indices, but 'i' is a spatial index"),
    ("d[i] = sum(n, a[i, k])", "n,", "sum() reduces over reduce indices, but 'n' is not an index"),
    ("d[i] = sum(k, sum(k, a[i, k]))", "k, a", "reduce index 'k' is reduced twice"),
    ("d[i] = sum(k, k, a[i, k])", "k, a", "reduce index 'k' is reduced twice"),
    ("d[i] = sum(a[i, 0])", "sum", "sum(...) body uses no reduce index"),
    ("d[i] = sum()", "sum", "sum() needs a body"),
    ("d[i] = sum(a[i, k] + 1, a[i, k])", "+", "sum(): expected a reduce index name before the body"),
    ("d[i] = sum(k, a[i, k] < 0)", "sum", "sum() needs numbers, but got bool"),
    ("d[i] = sum(k, a[i, k]) + a[i, k]", "sum",
     "reduce index 'k' is reduced by sum(...) and also used outside"),
])
def test_reduction_errors(text, needle, message):
    tensors = {"d": sig("i32", "n"), "a": sig("i32", "n", "m")}
    err = fails(text, tensors, {"i": "spatial", "k": "reduce"})
    assert err.col == col(text, needle, 7)
    assert message in err.detail


# ------------------------------------------------------------------------------------------ index rules

def test_a_reduce_index_may_not_appear_on_the_left():
    text = "d[i, k] = a[i, k]"
    err = fails(text, {"d": sig("i32", "n", "m"), "a": sig("i32", "n", "m")}, {"i": "spatial", "k": "reduce"})
    assert err.col == col(text, "k")
    assert "reduce index 'k' appears on the left side; only spatial indices may" in err.detail


def test_a_spatial_index_must_appear_on_the_left():
    text = "d[i] = a[i, j]"
    err = fails(text, {"d": sig("i32", "n"), "a": sig("i32", "n", "m")}, {"i": "spatial", "j": "spatial"})
    assert err.col == col(text, "j")
    assert "spatial index 'j' is used on the right but not on the left" in err.detail


def test_the_index_rules_hold_per_statement():
    text = "d[i, j] = a[i, j]\ne[i] = a[i, j]"
    err = fails(text, {"d": sig("i32", "n", "m"), "e": sig("i32", "n"), "a": sig("i32", "n", "m")},
                {"i": "spatial", "j": "spatial"})
    assert (err.line, err.col) == (2, 13)


def test_extents_come_from_a_bare_subscript_left_side_first():
    tensors = {"d": sig("i32", "n"), "a": sig("i32", "m + 1", "VEC")}
    sem = check("d[i] = a[i, k]", tensors, {"i": "spatial", "k": "reduce"})
    assert to_text(sem.index("i").extent) == "n"     # d[i] on the left wins over a[i, ...]
    assert to_text(sem.index("k").extent) == "VEC"   # k only subscripts a's second dimension
    assert [(iv.name, iv.kind) for iv in sem.indices] == [("i", "spatial"), ("k", "reduce")]


def test_an_earlier_statements_left_side_counts_before_any_right_side():
    tensors = {"t": sig("i32", "n"), "d": sig("i32", "m"), "a": sig("i32", "VEC")}
    sem = check("t[i] = a[i]\nd[i] = t[i]", tensors, {"i": "spatial"})
    assert to_text(sem.index("i").extent) == "n"


def test_a_declared_extent_wins_and_compound_subscripts_need_one():
    tensors = {"d": sig("i32", "n"), "a": sig("i32", "4 * n")}
    sem = check("d[i] = sum(j, a[4*i + j])", tensors, {"i": "spatial", "j": ("reduce", "4")})
    assert to_text(sem.index("j").extent) == "4"
    assert to_text(sem.index("i").extent) == "n"
    sem = check("d[i] = a[i]", tensors, {"i": ("spatial", "n - 1")})
    assert to_text(sem.index("i").extent) == "n - 1"


def test_an_extent_that_cannot_be_inferred_is_an_error_at_the_index():
    text = "d[i] = sum(j, a[4*i + j])"
    err = fails(text, {"d": sig("i32", "n"), "a": sig("i32", "4 * n")}, {"i": "spatial", "j": "reduce"})
    assert err.col == text.rindex("j") + 1  # the first time j is used as a value
    assert "cannot infer the extent of index 'j'" in err.detail
    assert "declare it with extent = ..." in err.detail


def test_a_declared_index_must_be_used():
    err = fails("d[i] = 1", {"d": sig("i32", "n")}, {"i": "spatial", "k": "reduce"})
    assert "index 'k' is declared but never used" in err.detail


def test_index_values_are_weak_integers():
    tensors = {"d": sig("i32", "n"), "f": sig("f32", "n")}
    sem = check("d[i] = i * 2; f[i] = f32(i) + 0.5", tensors, IDX_I)
    names = [e for s in sem.statements for e in walk(s.value) if isinstance(e, Name)]
    assert {(e.id, e.kind, e.dtype) for e in names} == {("i", "index", "int")}


def test_names_resolve_to_their_kind():
    v = value(check("d[i] = a[i] * n + VEC + ADD", {"d": sig("i32", "n"), "a": sig("i32", "n")}, IDX_I))
    assert {e.id: e.kind for e in walk(v) if isinstance(e, Name)} == {
        "i": "index", "n": "field", "VEC": "param", "ADD": "enum"}


# ------------------------------------------------------------------------------------------ reads / writes

def test_reads_and_writes_list_each_tensor_once_in_order():
    tensors = {n: sig("i32", "n") for n in ("d", "e", "a", "b")}
    sem = check("d[i] = a[i] + b[i] * a[i]\ne[i] += d[i]\nd[i] = 0", tensors, IDX_I)
    assert sem.reads == ("a", "b", "d", "e")   # a '+=' target is read too
    assert sem.writes == ("d", "e")
    sem = check("d[i] = 1", tensors, IDX_I)
    assert (sem.reads, sem.writes) == ((), ("d",))
    sem = check("d[i] += 1", tensors, IDX_I)
    assert (sem.reads, sem.writes) == (("d",), ("d",))


def test_str_of_semantics_shows_the_typed_statements():
    sem = check("acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])", GEMM, GEMM_I)
    assert str(sem) == "acc[b, o] += sum(k, i32(inp[b, k]) * i32(wgt[o, k]))"


# ----------------------------------------------------------------------------------------- scalar expressions

def test_check_scalar_types_constraints_and_timing():
    e = check_scalar("n % VEC == 0 and ADD < 3", parse_expr("n % VEC == 0 and ADD < 3"), scalars=SCALARS,
                     types={})
    assert e.dtype == "bool"
    e = check_scalar("", parse_expr("ceil_div(n * bytes(T), 128) + log2(VEC)"), scalars=SCALARS,
                     types={"T": "f16"})
    assert e.dtype == "int"
    regs = {"regs": sig("i32", "32")}
    e = check_scalar("", parse_expr("regs[n] + 4"), scalars=SCALARS, types={}, tensors=regs)
    assert e.dtype == "i32"


@pytest.mark.parametrize(("text", "needle", "message"), [
    ("n + q", "q", "undefined name 'q'"),
    ("n / 2", "/", "'/' divides floats"),
    ("bytes(n)", "bytes", "bytes(T) takes a dtype or a type variable"),
    ("ceil_div(n)", "ceil_div", "ceil_div() takes 2 argument(s), but got 1"),
    ("log2(1.5)", "1.5", "log2() takes integer parameters or fields, but got float"),
])
def test_check_scalar_errors_name_the_column(text, needle, message):
    with pytest.raises(ParseError) as info:
        check_scalar(text, parse_expr(text), scalars=SCALARS, types={"T": "i8"})
    assert info.value.col == col(text, needle)
    assert message in info.value.detail


def test_errors_in_multi_line_semantics_name_the_line():
    text = "d[i] = a[i]\n\nd[i] = a[i] + af[i]"
    err = fails(text, {"d": sig("i32", "n"), "a": sig("i32", "n"), "af": sig("f32", "n")}, IDX_I)
    assert (err.line, err.col) == (3, 13)
    assert str(err).startswith("line 3, col 13: ")
    assert err.text == "d[i] = a[i] + af[i]"
