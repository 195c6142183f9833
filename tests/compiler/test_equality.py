"""Tests of structural equality (``compiler.ir.equality``): equal up to a bijective renaming."""

from __future__ import annotations

import pytest

from compiler.ir import (
    Add,
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Store,
    Var,
    assert_structural_equal,
    const,
    dtypes,
    seq,
    structural_equal,
)


def scale(
    n: int = 14, factor: int = 2, *, kind=ForKind.SERIAL, thread: str = "", name: str = "f"
) -> PrimFunc:
    """B[i] = A[i] * factor under a guard, with a scratch buffer; fresh variables and buffers each call."""
    a, b = Buffer("A", (n,), dtypes.int32), Buffer("B", (n,), dtypes.int32)
    t = Buffer("T", (1,), dtypes.int32, scope="local")
    i = Var("i")
    body = Allocate(
        t,
        For(
            i,
            const(0),
            const(n),
            IfThenElse(i < n - 1, seq(Store(t, (const(0),), a[i] * factor), Store(b, (i,), t[const(0)]))),
            kind,
            thread,
        ),
    )
    return PrimFunc(name, (a, b), body)


def test_independently_built_programs_are_equal() -> None:
    f, g = scale(), scale()
    assert f != g  # different Var and Buffer objects: not ==
    assert structural_equal(f, g)
    assert_structural_equal(f, g)


def test_renamed_variables_and_buffers_are_equal() -> None:
    i, k = Var("i"), Var("k")
    a, b = Buffer("A", (4,), dtypes.int32), Buffer("Other", (4,), dtypes.int32)
    assert structural_equal(
        For(i, const(0), const(4), Store(a, (i,), i)), For(k, const(0), const(4), Store(b, (k,), k))
    )
    assert structural_equal(Add(i, const(1)), Add(k, const(1)))  # free variables are renamed too


@pytest.mark.parametrize(
    "other",
    [
        scale(n=15),
        scale(factor=3),
        scale(kind=ForKind.UNROLLED),
        scale(kind=ForKind.THREAD_BINDING, thread="core"),
        scale(name="g"),
    ],
    ids=["extent", "constant", "loop kind", "bound loop", "function name"],
)
def test_programs_that_differ_in_structure_are_not_equal(other: PrimFunc) -> None:
    assert not structural_equal(scale(), other)
    assert not structural_equal(other, scale())


@pytest.mark.parametrize(
    ("lhs", "rhs"),
    [
        (Add(Var("i"), const(1)), Add(Var("i"), const(2))),
        (Add(Var("i"), const(1)), Add(Var("i"), const(1, "int32")) * 1),
        (const(1), const(1, "int8")),
        (Var("i"), Var("i", dtypes.int8)),
        (Var("i"), const(0)),
        (Buffer("A", (4,), dtypes.int32)[const(0)], Buffer("A", (5,), dtypes.int32)[const(0)]),
        (Buffer("A", (4,), dtypes.int32)[const(0)], Buffer("A", (4,), dtypes.int8)[const(0)]),
        (Buffer("A", (4,), dtypes.int32)[const(0)], Buffer("A", (4,), dtypes.int32, "nmem")[const(0)]),
        (seq(Store(Buffer("A", (1,), dtypes.int32), (const(0),), const(0))), seq()),
    ],
    ids=[
        "constant",
        "node type",
        "dtype of constant",
        "dtype of var",
        "var vs constant",
        "shape",
        "dtype",
        "scope",
        "statement count",
    ],
)
def test_expressions_that_differ_are_not_equal(lhs, rhs) -> None:
    assert not structural_equal(lhs, rhs)


def test_the_renaming_is_a_bijection() -> None:
    i, j, k = Var("i"), Var("j"), Var("k")
    assert not structural_equal(Add(i, j), Add(k, k))  # two variables cannot both map to k
    assert not structural_equal(Add(k, k), Add(i, j))  # nor one variable to two
    assert structural_equal(Add(i, j), Add(j, i))  # i <-> j is a bijection
    assert not structural_equal(Add(Add(i, j), i), Add(Add(j, i), i))  # ... applied consistently
    a, b, c = (Buffer(n, (4,), dtypes.int32) for n in "ABC")
    assert not structural_equal(Add(a[i], b[i]), Add(c[i], c[i]))
    assert not structural_equal(Add(c[i], c[i]), Add(a[i], b[i]))
    assert structural_equal(Add(a[i], b[i]), Add(b[j], a[j]))


def test_a_loop_variable_maps_consistently_across_sibling_loops() -> None:
    x = Buffer("X", (4,), dtypes.int32)
    i, j = Var("i"), Var("j")
    same_var = seq(
        For(i, const(0), const(4), Store(x, (i,), i)), For(i, const(0), const(4), Store(x, (i,), i))
    )
    two_vars = seq(
        For(i, const(0), const(4), Store(x, (i,), i)), For(j, const(0), const(4), Store(x, (j,), j))
    )
    # identity of variables is structure: the same variable twice is not two distinct variables
    assert not structural_equal(same_var, two_vars)


def test_assert_structural_equal_shows_both_printouts_and_where() -> None:
    with pytest.raises(AssertionError) as info:
        assert_structural_equal(scale(), scale(factor=3))
    message = str(info.value)
    assert message.startswith("IR differs at PrimFunc.body > Allocate.body > For.body > IfThenElse.then_case")
    actual, expected = message.split("--- expected ---")
    assert "--- actual ---" in actual
    assert "T[0] = A[i]*2" in actual and "T[0] = A[i]*3" not in actual
    assert "T[0] = A[i]*3" in expected
    assert "def f(A: i32[14], B: i32[14]):" in actual and "def f(A: i32[14], B: i32[14]):" in expected


def test_assert_structural_equal_at_the_root() -> None:
    with pytest.raises(AssertionError, match=r"IR differs at <root>\n--- actual ---\ni\n--- expected ---\n0"):
        assert_structural_equal(Var("i"), const(0))
