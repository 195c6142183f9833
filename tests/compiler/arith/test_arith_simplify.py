"""``simplify`` and ``linear_form``: the printed form (``str``) of simplified expressions."""

import pytest

from compiler.arith import Interval, linear_form, simplify
from compiler.errors import IRTypeError
from compiler.ir import (
    EQ,
    LT,
    Buffer,
    Cast,
    FloatImm,
    IntImm,
    Select,
    Var,
    as_expr,
    const,
    dtypes,
    if_then_else,
    max_,
    min_,
)

i, j, k, x, y, tid = Var("i"), Var("j"), Var("k"), Var("x"), Var("y"), Var("tid")
c = Var("c", dtypes.bool_)
f = Var("f", dtypes.float32)
A = Buffer("A", (64,), dtypes.float32)


def R(lo, hi):  # noqa: N802 - reads like a math interval in the tables
    return Interval(lo, hi)


def eq(a, b):
    return EQ(as_expr(a), as_expr(b))


# (expression, ranges, expected str(simplify(expression, ranges)))
CASES = [
    # affine canonical form: first-appearance order, constant last
    (tid * 4 + i, {}, "tid*4 + i"),
    ((tid * 4 + i) * 14 + j, {}, "tid*56 + i*14 + j"),
    (x * 0, {}, "0"),
    (x - x, {}, "0"),
    (const(2) + 3, {}, "5"),
    (x + 1 - 1, {}, "x"),
    (1 + x, {}, "x + 1"),
    (3 * x, {}, "x*3"),
    (x - y * 2, {}, "x - y*2"),
    (x - 5, {}, "x - 5"),
    (0 - x, {}, "0 - x"),
    (10 - i, {}, "10 - i"),
    (0 - i - 3, {}, "0 - i - 3"),
    (0 - i + j, {}, "j - i"),
    (x * 2 + y - x * 2, {}, "y"),
    ((x + 3) * (y + 1), {}, "(x + 3)*(y + 1)"),
    ((x + 3) * (y + 1) * 2, {}, "(x + 3)*(y + 1)*2"),
    (i, {i: R(4, 4)}, "4"),
    # floordiv / floormod by positive constants
    ((x * 4 + y) // 4, {}, "x + y//4"),
    ((x * 4 + y) // 4, {y: R(0, 3)}, "x"),
    ((x * 4 + y) // 4, {y: R(4, 7)}, "x + 1"),
    ((x * 4 + y) % 4, {}, "y%4"),
    ((x * 4 + y) % 4, {y: R(0, 3)}, "y"),
    (y // 4, {y: R(0, 3)}, "0"),
    (y % 4, {y: R(0, 3)}, "y"),
    (y % 4, {y: R(8, 11)}, "y - 8"),
    (x // 2 // 3, {}, "x//6"),
    (x % 12 % 4, {}, "x%4"),
    (x % 12 % 5, {}, "x%12%5"),
    (x // 1, {}, "x"),
    (x % 1, {}, "0"),
    ((x * 8) % 4, {}, "0"),
    ((x * 8) // 4, {}, "x*2"),
    ((x * 8 + 5) % 4, {}, "1"),
    ((x * 6 + 2) // 4, {}, "(x*3 + 1)//2"),
    ((x * 6 + 2) % 4, {}, "(x + 1)%2*2"),
    ((x * 5 + y) % 4, {}, "(x + y)%4"),
    ((x + 5) % 4, {}, "(x + 1)%4"),
    ((x + 5) // 4, {}, "(x + 5)//4"),
    ((x * 4 + y + 5) // 4, {}, "x + (y + 5)//4"),
    ((i * 8 + j * 4 + k) // 4, {k: R(0, 3)}, "i*2 + j"),
    (x // 4 * 4 + x % 4, {}, "x"),
    (x - x // 4 * 4, {}, "x%4"),
    ((tid * 8 + i) // 14 * 14 + (tid * 8 + i) % 14, {}, "tid*8 + i"),
    (x // 6 * 6 + x // 2 % 3 * 2 + x % 2, {}, "x"),  # a fused (3 loops) index collapses
    (x // 6 * 6 + x // 2 % 3 * 2, {}, "x//2*2"),
    (x // 2 - x // 6 * 3, {}, "x//2%3"),
    (x // -2, {}, "x//(-2)"),
    (const(7) // -2, {}, "-4"),
    (const(7) % -2, {}, "-1"),
    (x // y, {}, "x//y"),
    # min / max
    (min_(x, x + 1), {}, "x"),
    (max_(x, x + 1), {}, "x + 1"),
    (max_(i, 10), {i: R(0, 9)}, "10"),
    (min_(i, j), {}, "min(i, j)"),
    (min_(const(3), 5), {}, "3"),
    (min_(i * 4 + j, 14), {i: R(0, 2), j: R(0, 3)}, "i*4 + j"),
    (min_(i * 4 + j, 14), {i: R(0, 3), j: R(0, 3)}, "min(i*4 + j, 14)"),
    # comparisons: decided by ranges, else constants move right
    (x + 1 < 5, {}, "x < 4"),
    (tid * 4 + i < 14, {}, "tid*4 + i < 14"),
    (tid * 4 + i < 14, {tid: R(0, 2), i: R(0, 1)}, "True"),
    (tid * 4 + i < 14, {tid: R(4, 5), i: R(0, 3)}, "False"),
    (i < 10, {i: R(0, 9)}, "True"),
    (5 < x - 3, {}, "x > 8"),
    (LT(const(5), x - 3), {}, "8 < x"),
    (x < y + 4, {}, "x < y + 4"),
    (x + 2 < y + 6, {}, "x < y + 4"),
    (x * 2 < x + 3, {}, "x < 3"),
    (x < x * 2 + 3, {}, "x > -3"),
    (eq(x + 1, y), {}, "x == y - 1"),
    (x // 4 * 4 + y <= x, {}, "y <= x%4"),
    # bool logic, select, if_then_else, casts
    ((i < 10) & (j < 5), {i: R(0, 9)}, "j < 5"),
    ((i < 10) | (j < 5), {i: R(0, 9)}, "True"),
    ((i > 10) & (j < 5), {i: R(0, 9)}, "False"),
    ((j < 5) & (j < 5), {}, "j < 5"),
    (~~(j < 5), {}, "j < 5"),
    (~(x < 3), {}, "x >= 3"),
    (~c, {}, "not c"),
    (Select(as_expr(True), x, y), {}, "x"),
    (Select(c, x + 0, x), {}, "x"),
    (Select(c, x + 0, y), {}, "select(c, x, y)"),
    (if_then_else(i < 10, x, y), {i: R(0, 9)}, "x"),
    (
        if_then_else(i < 10, A[i], FloatImm(0.0)),
        {i: R(0, 20)},
        "if_then_else(i < 10, A[i], f32(0.0))",
    ),
    (Cast(const(300), dtypes.int8), {}, "i8(44)"),
    (Cast(IntImm(5, dtypes.int8), dtypes.int32), {}, "5"),
    (Cast(x, dtypes.int32), {}, "x"),
    (Cast(x * 2 - x, dtypes.int64), {}, "i64(x)"),
    # data expressions: float arithmetic untouched, integer-constant subtrees fold
    (FloatImm(1.0) + FloatImm(2.0), {}, "f32(1.0) + f32(2.0)"),
    (f * 1.0 + 0.0, {}, "f*f32(1.0) + f32(0.0)"),
    (A[i * 4 + j - j], {}, "A[i*4]"),
    (A[i] * Cast(const(2) + 3, dtypes.float32), {}, "A[i]*f32(5)"),
    (IntImm(100, dtypes.int8) + IntImm(100, dtypes.int8), {}, "i8(-56)"),
]


@pytest.mark.parametrize(("expr", "ranges", "expected"), CASES, ids=[e for _, _, e in CASES])
def test_simplify(expr, ranges, expected):
    out = simplify(expr, ranges)
    assert str(out) == expected
    assert simplify(out, ranges) == out  # idempotent


def test_simplify_keeps_unchanged_nodes():
    e = A[i * 4 + j] * f
    assert simplify(e) is e
    assert simplify(e + 0.0).a is e


def test_int64_constants():
    a = Var("a", dtypes.int64)
    assert str(simplify((a * 4 + 1) * 2)) == "a*i64(8) + i64(2)"


def test_linear_form_order_and_atoms():
    lf = linear_form(tid * 4 + i)
    assert list(lf.terms.items()) == [(tid, 4), (i, 1)]
    assert lf.const == 0
    lf = linear_form((x * 4 + y) // 4 * 3 - 2 + x)
    assert [(str(a), k) for a, k in lf.terms.items()] == [("x", 4), ("y//4", 3)]
    assert lf.const == -2
    assert str(lf) == "x*4 + y//4*3 - 2"
    assert linear_form(x - x + 7).terms == {}
    assert linear_form(x - x + 7).const == 7


def test_linear_form_of_non_integer_is_none():
    assert linear_form(f * 2.0) is None
    assert linear_form(i < 3) is None


def test_simplify_rejects_non_expressions():
    with pytest.raises(IRTypeError, match="simplify: expected an IR expression, but got 3"):
        simplify(3)
    with pytest.raises(IRTypeError, match="expected a mapping Var -> Interval"):
        simplify(i, [(i, R(0, 1))])
