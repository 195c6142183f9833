"""Tests of the IR nodes (``compiler.ir.nodes``): immutability, dtype checks, constructors, equality."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler import te
from compiler.errors import IRTypeError
from compiler.ir import (
    EQ,
    LT,
    Add,
    Allocate,
    And,
    Buffer,
    Cast,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Let,
    Load,
    Max,
    Mul,
    Not,
    Select,
    Seq,
    Store,
    Sub,
    Var,
    as_expr,
    cast,
    const,
    dtypes,
    if_then_else,
    max_,
    seq,
)

i, j = Var("i"), Var("j")
x8 = Var("x", dtypes.int8)
f = Var("f", dtypes.float32)
A = Buffer("A", (4, 4), dtypes.float32)
X = Buffer("X", (8,), dtypes.int32)


def store(k: Var) -> Store:
    return Store(X, (k,), k)


# --------------------------------------------------------------------------------------------------
# immutability


@pytest.mark.parametrize(
    ("node", "field"),
    [
        (i, "name"),
        (const(3), "value"),
        (Add(i, j), "a"),
        (A[i, j], "indices"),
        (store(i), "value"),
        (For(i, const(0), const(8), store(i)), "extent"),
        (seq(store(i), store(j)), "stmts"),
        (A, "shape"),
        (dtypes.int8, "bits"),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, str) else x,
)
def test_assigning_a_field_raises(node, field: str) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(node, field, getattr(node, field))


def test_nodes_have_no_instance_dict() -> None:
    with pytest.raises((AttributeError, TypeError)):
        Add(i, j).extra = 1  # slotted: no new attributes either


def test_replace_builds_a_new_node_and_leaves_the_old_one() -> None:
    old = Add(i, const(1))
    new = dataclasses.replace(old, b=const(2))
    assert old.b == const(1) and new.b == const(2) and new.a is i


# --------------------------------------------------------------------------------------------------
# dtype checks


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Add(x8, i), r"Add: operand dtypes differ \(int8 vs int32\) in 'x' and 'i'; insert a cast"),
        (lambda: Mul(f, i), r"Mul: operand dtypes differ \(float32 vs int32\) in 'f' and 'i'"),
        (lambda: LT(x8, i), r"LT: operand dtypes differ \(int8 vs int32\)"),
        (lambda: Max(f, x8), r"Max: operand dtypes differ"),
        (
            lambda: Store(X, (i,), FloatImm(1.0)),
            r"Store to X: value dtype float32 differs from the buffer's int32",
        ),
        (lambda: Store(A, (i,), f), r"Store of A: expected 2 indices for shape \[4, 4\], but got 1"),
        (lambda: Load(A, (i, j, i)), r"Load of A: expected 2 indices for shape \[4, 4\], but got 3"),
        (lambda: A[f, i], r"Load of A: index 'f' is not an integer expression"),
        (lambda: IfThenElse(i, store(i)), r"IfThenElse: expected a bool operand, but got 'i'"),
        (lambda: Select(i, i, j), r"Select: expected a bool operand, but got 'i'"),
        (lambda: Select(LT(i, j), i, f), r"Select: operand dtypes differ \(int32 vs float32\)"),
        (lambda: And(LT(i, j), i), r"And: expected a bool operand, but got 'i'"),
        (lambda: Not(f), r"Not: expected a bool operand, but got 'f'"),
        (lambda: if_then_else(i, 1, 2), r"if_then_else: expected a bool operand, but got 'i'"),
        (lambda: Add(LT(i, j), LT(j, i)), r"Add: arithmetic on bool operands 'i < j'"),
        (lambda: Div(i, j), r"Div: expected float operands, but got int32; use FloorDiv"),
        (lambda: Let(i, f, store(i)), r"Let i: value dtype float32 != int32"),
        (lambda: IntImm(128, dtypes.int8), r"IntImm: 128 does not fit in int8"),
        (lambda: IntImm(1, dtypes.float32), r"IntImm: expected an integer dtype, but got float32"),
        (lambda: FloatImm(1.0, dtypes.int32), r"FloatImm: expected a float dtype, but got int32"),
        (lambda: Buffer("B", (4, 0), dtypes.int8), r"buffer B: expected positive int dims, got \(4, 0\)"),
        (
            lambda: For(i, const(0), const(4), store(i), ForKind.THREAD_BINDING),
            r"For i: a bound loop needs a thread axis name",
        ),
        (lambda: For(i, const(0), const(4), store(i), thread="core"), r"For i: a bound loop needs"),
        (lambda: Add(i, 1), r"Add: expected two expressions, but got .* and 1"),
        (lambda: dtypes.dtype("int7"), r"unknown dtype 'int7': expected one of bool, int8"),
    ],
)
def test_ill_typed_nodes_raise_irtypeerror_naming_the_operands(build, message: str) -> None:
    with pytest.raises(IRTypeError, match=message):
        build()


def test_an_expression_is_not_a_python_bool() -> None:
    with pytest.raises(IRTypeError, match=r"cannot use the IR expression 'i < 4' as a Python bool"):
        if i < 4:  # noqa: SIM108 - the point is that this raises
            pass


def test_python_operators_build_nodes_with_constants_of_the_operand_dtype() -> None:
    assert x8 + 1 == Add(x8, IntImm(1, dtypes.int8))
    assert 2 * f == Mul(FloatImm(2.0), f)
    assert i // 4 == FloorDiv(i, const(4))
    assert i % 4 == FloorMod(i, const(4))
    assert 10 - i == Sub(const(10), i)
    assert -i == Sub(const(0), i)
    assert (i < 4) == LT(i, const(4))
    assert (i < 4) & (j < 4) == And(LT(i, const(4)), LT(j, const(4)))
    assert ~(i < 4) == Not(LT(i, const(4)))
    assert max_(x8, 0) == Max(x8, IntImm(0, dtypes.int8))


# --------------------------------------------------------------------------------------------------
# constructors


def test_seq_flattens_nested_sequences_and_drops_none() -> None:
    a, b, c = store(i), store(j), Evaluate(i)
    assert seq(a, seq(b, c), None) == Seq((a, b, c))
    assert seq(seq(a, b), seq(c)) == Seq((a, b, c))
    assert seq(None, a, None) is a  # one statement stays itself
    assert seq() == Seq(())
    assert seq(seq()) == Seq(())


def test_a_seq_built_directly_is_not_flattened() -> None:
    inner = Seq((store(i), store(j)))
    assert Seq((inner,)).stmts == (inner,)


@pytest.mark.parametrize(
    ("value", "dt", "expected"),
    [
        (True, None, IntImm(1, dtypes.bool_)),
        (False, None, IntImm(0, dtypes.bool_)),
        (3, None, IntImm(3, dtypes.int32)),
        (-3, "int8", IntImm(-3, dtypes.int8)),
        (3, "float16", FloatImm(3.0, dtypes.float16)),
        (1.5, None, FloatImm(1.5, dtypes.float32)),
        (1.5, "bfloat16", FloatImm(1.5, dtypes.bfloat16)),
        (np.int64(7), None, IntImm(7, dtypes.int64)),  # numpy scalars keep their dtype
        (np.int8(7), "int8", IntImm(7, dtypes.int8)),
        (np.float32(0.5), None, FloatImm(0.5, dtypes.float32)),
    ],
)
def test_as_expr_converts_python_numbers(value, dt, expected) -> None:
    got = as_expr(value, dt)
    assert got == expected
    assert got.dtype == expected.dtype


def test_as_expr_passes_expressions_through_and_unwraps_iter_vars() -> None:
    e = Add(i, j)
    assert as_expr(e) is e
    assert as_expr(e, "float32") is e  # an expression keeps its dtype; cast() converts
    k = te.reduce_axis(4, name="k")
    assert as_expr(k) is k.var


@pytest.mark.parametrize(
    ("value", "dt", "message"),
    [
        (1.5, "int32", r"expected an integer constant of type int32, but got 1.5"),
        ("3", None, r"expected an IR expression or a Python number, but got '3'"),
        (None, None, r"expected an IR expression or a Python number, but got None"),
        (300, "int8", r"IntImm: 300 does not fit in int8"),
    ],
)
def test_as_expr_rejects_what_it_cannot_convert(value, dt, message: str) -> None:
    with pytest.raises(IRTypeError, match=message):
        as_expr(value, dt)


def test_cast_is_a_no_op_for_the_same_dtype() -> None:
    assert cast(i, "int32") is i
    assert cast(i, "int8") == Cast(i, dtypes.int8)
    assert cast(3, "float32") == FloatImm(3.0, dtypes.float32)
    assert const(2, "int16") == IntImm(2, dtypes.int16)


# --------------------------------------------------------------------------------------------------
# equality and hashing


def test_vars_compare_by_identity_other_nodes_by_value() -> None:
    i2 = Var("i")
    assert i == i and i != i2  # same name, different variables
    assert Add(i, const(1)) == Add(i, const(1))  # same structure, same variable objects
    assert Add(i, const(1)) != Add(i2, const(1))
    assert A[i, j] == A[i, j]
    assert A[i, j] != Buffer("A", (4, 4), dtypes.float32)[i, j]  # buffers are identities too
    assert const(1) != const(1, "int8")  # the dtype is part of the value
    assert store(i) == store(i) and store(i) != store(j)


def test_equal_nodes_hash_equal_and_work_as_keys() -> None:
    a, b = Add(i, const(1)), Add(i, const(1))
    assert a is not b and hash(a) == hash(b)
    table = {a: "x", i: "var", A: "buffer"}
    assert table[b] == "x"
    assert table[i] == "var" and Var("i") not in table
    assert table[A] == "buffer" and Buffer("A", (4, 4), dtypes.float32) not in table
    assert len({For(i, const(0), const(4), store(i)), For(i, const(0), const(4), store(i))}) == 1
    assert len({Var("i"), Var("i")}) == 2


def test_statements_compare_structurally_under_variable_identity() -> None:
    body = Allocate(Buffer("T", (4,), dtypes.int32), Evaluate(EQ(i, j)))
    assert body == dataclasses.replace(body)  # a copy is equal
    assert body != Allocate(Buffer("T", (4,), dtypes.int32), Evaluate(EQ(i, j)))  # another buffer
