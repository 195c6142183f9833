"""``prove``: a table of conditions, variable ranges and the expected True / False / None."""

import pytest

from compiler.arith import Interval, prove
from compiler.errors import IRTypeError
from compiler.ir import EQ, NE, Var, as_expr, const, if_then_else, max_, min_

i, j, x, y, tid = Var("i"), Var("j"), Var("x"), Var("y"), Var("tid")


def R(lo, hi):  # noqa: N802 - reads like a math interval in the table
    return Interval(lo, hi)


def eq(a, b):
    return EQ(as_expr(a), as_expr(b))


def ne(a, b):
    return NE(as_expr(a), as_expr(b))


TRUE, FALSE = const(True, "bool"), const(False, "bool")

# (condition, ranges, expected): None = depends on the assignment (or cannot be decided)
CASES = [
    # plain comparisons against ranges
    (i < 10, {i: R(0, 9)}, True),
    (i < 10, {i: R(0, 20)}, None),
    (i < 10, {i: R(10, 20)}, False),
    (i <= 9, {i: R(0, 9)}, True),
    (i >= 0, {i: R(0, 9)}, True),
    (i > 9, {i: R(0, 9)}, False),
    (i < j, {i: R(0, 4), j: R(5, 9)}, True),
    (i < j, {i: R(0, 5), j: R(5, 9)}, None),
    (tid * 4 + i < 16, {tid: R(0, 3), i: R(0, 3)}, True),
    (tid * 4 + i < 14, {tid: R(0, 3), i: R(0, 3)}, None),
    (x * y >= 0, {x: R(0, 3), y: R(0, 3)}, True),
    (x * y < 0, {x: R(-1, 1), y: R(0, 3)}, None),
    # shared terms cancel, even for unbounded variables
    (i + j < i + j + 1, {}, True),
    (i - j < 0, {}, None),
    (eq(i * 3, i + i + i), {}, True),
    (eq(x, x + 1), {}, False),
    (eq(i + j, i + j), {}, True),
    (i < 10, {}, None),
    # EQ / NE, including divisibility
    (eq(i * 2, 1), {}, False),
    (ne(i * 2 + j * 4, 3), {}, True),
    (eq(i, j), {}, None),
    (ne(i, j), {i: R(0, 3), j: R(4, 7)}, True),
    (ne(i, j), {}, None),
    (eq(i, 5), {i: R(5, 5)}, True),
    # floordiv / floormod
    (i % 4 < 4, {}, True),
    (i % 4 >= 0, {}, True),
    (eq(i % 4, 5), {}, False),
    (i // 4 <= 2, {i: R(0, 11)}, True),
    (i // 4 < 2, {i: R(0, 11)}, None),
    (eq((x * 4 + y) // 4, x), {y: R(0, 3)}, True),
    (eq((x * 4 + y) % 4, y), {y: R(0, 3)}, True),
    (eq((x * 4 + y) % 4, y), {y: R(0, 7)}, None),
    (x // 4 * 4 <= x, {}, True),
    (eq(x - x % 4, x // 4 * 4), {}, True),
    (eq((i + 4) % 4, i % 4), {}, True),
    (eq(i // 2 * 2, i), {}, None),
    (i % 8 < 4, {i: R(8, 11)}, True),
    # min / max / select
    (min_(i, j) <= i, {}, True),
    (max_(i, 5) >= 5, {}, True),
    (min_(i, j) < 3, {i: R(0, 9)}, None),
    (if_then_else(i < 5, 1, 2) >= 1, {}, True),
    # And / Or / Not and constants
    ((i < 10) & (j < 10), {i: R(0, 9), j: R(0, 9)}, True),
    ((i < 10) & (j < 5), {i: R(0, 9), j: R(0, 9)}, None),
    ((i < 10) & (j > 20), {i: R(0, 9), j: R(0, 9)}, False),
    ((i < 5) | (j < 10), {i: R(0, 9), j: R(0, 9)}, True),
    ((i > 10) | (j > 10), {i: R(0, 9), j: R(0, 9)}, False),
    ((i < 5) | (j < 5), {i: R(0, 9), j: R(0, 9)}, None),
    (~(i < 10), {i: R(0, 9)}, False),
    (~(i < 5), {i: R(0, 9)}, None),
    (~~(i < 10), {i: R(0, 9)}, True),
    (TRUE, {}, True),
    (FALSE, {}, False),
    (TRUE & (i < 3), {}, None),
]


@pytest.mark.parametrize(
    ("cond", "ranges", "expected"),
    CASES,
    ids=[f"{c}|{','.join(f'{v.name}:{r}' for v, r in rs.items())}->{e}" for c, rs, e in CASES],
)
def test_prove(cond, ranges, expected):
    assert prove(cond, ranges) is expected


def test_prove_rejects_non_bool():
    with pytest.raises(IRTypeError, match="prove: expected a bool condition, but got 'i' of dtype"):
        prove(i)


def test_prove_rejects_bad_ranges():
    with pytest.raises(IRTypeError, match="expected an Interval for 'i'"):
        prove(i < 3, {i: (0, 4)})
