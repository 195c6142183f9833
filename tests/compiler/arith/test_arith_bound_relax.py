"""``Interval``, ``bound`` and ``relax``: worked examples and error messages."""

import pytest

from compiler.arith import Interval, bound, relax, simplify
from compiler.errors import IRTypeError, LoweringError
from compiler.ir import Buffer, Cast, Reduce, ReduceCombiner, Select, Var, dtypes, max_, min_

i, j, k, x, y = Var("i"), Var("j"), Var("k"), Var("x"), Var("y")
fo, fi = Var("fo"), Var("fi")
c = Var("c", dtypes.bool_)
Q = Buffer("Q", (8,), dtypes.int8)
F = Buffer("F", (8,), dtypes.float32)
EVERYTHING = Interval(None, None)


def R(lo, hi):  # noqa: N802 - reads like a math interval in the tables
    return Interval(lo, hi)


# ---------------------------------------------------------------------------------------------
# Interval


def test_interval_constructors():
    assert Interval.from_extent(2, 3) == R(2, 4)
    assert Interval.point(5) == R(5, 5)
    assert Interval.point(5).is_const and not R(0, 1).is_const
    assert R(0, 3).extent == 4 and R(0, None).extent is None
    assert str(R(None, 3)) == "[-inf, 3]"


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Interval(3, 1), r"expected lo <= hi, but got \[3, 1\]"),
        (lambda: Interval.from_extent(0, 0), "expected a positive extent, but got 0"),
        (lambda: Interval(0.5, 1), "expected an int or None, but got 0.5"),
    ],
)
def test_interval_rejects_bad_bounds(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_interval_arithmetic():
    assert R(0, 3) + R(1, 2) == R(1, 5)
    assert R(0, 3) - R(1, 2) == R(-2, 2)
    assert R(0, None) * R(-1, 1) == EVERYTHING
    assert R(0, None) * R(2, 3) == R(0, None)
    assert R(0, 0) * EVERYTHING == R(0, 0)
    assert R(-3, 5).floordiv(R(2, 2)) == R(-2, 2)
    assert R(-3, 5).floordiv(R(-2, -2)) == R(-3, 1)
    assert R(0, 9).floordiv(R(-1, 1)) == EVERYTHING
    assert R(0, 9).floordiv(R(2, None)) == R(0, 4)
    assert R(8, 11).floormod(R(4, 4)) == R(0, 3)
    assert R(8, 13).floormod(R(4, 4)) == R(0, 3)
    assert R(0, 9).floormod(R(-4, -4)) == R(-3, 0)
    assert R(0, 2).floormod(R(3, 7)) == R(0, 2)
    assert R(0, 9).min(R(None, 4)) == R(None, 4)
    assert R(0, 9).union(R(20, 30)) == R(0, 30)
    assert R(0, 9).intersect(R(20, 30)) is None
    assert R(2, 3).within(R(0, None)) and not R(None, 3).within(R(0, None))


# ---------------------------------------------------------------------------------------------
# bound

BOUNDS = [
    (i - i + 3, {}, R(3, 3)),
    (i * 4 + j, {i: R(0, 3), j: R(0, 3)}, R(0, 15)),
    (i * 4 - j, {i: R(0, 3), j: R(0, 3)}, R(-3, 12)),
    (i * j, {i: R(-2, 3), j: R(1, 4)}, R(-8, 12)),
    (i, {}, EVERYTHING),
    (i + j, {i: R(0, 3)}, EVERYTHING),
    (x % 4, {}, R(0, 3)),
    (x % 8, {x: R(8, 11)}, R(0, 3)),
    (x % -4, {}, R(-3, 0)),
    (x // 4, {x: R(-5, 9)}, R(-2, 2)),
    (x // -2, {x: R(0, 9)}, R(-5, 0)),
    (x // y, {x: R(0, 9)}, EVERYTHING),
    (x // y, {x: R(0, 9), y: R(1, 3)}, R(0, 9)),
    (min_(i, j), {i: R(0, 9), j: R(3, 5)}, R(0, 5)),
    (max_(i, j), {i: R(0, 9), j: R(3, 5)}, R(3, 9)),
    (min_(i, j) - i, {}, R(None, 0)),
    (Select(c, i, j + 10), {i: R(0, 3), j: R(0, 3)}, R(0, 13)),
    (Cast(Q[i], dtypes.int32), {}, R(-128, 127)),
    (Cast(i, dtypes.int64), {i: R(0, 9)}, R(0, 9)),
    (Cast(i, dtypes.int8), {i: R(0, 300)}, R(-128, 127)),
    (Cast(Cast(i, dtypes.int64), dtypes.int32), {}, EVERYTHING),
    (Cast(F[i], dtypes.int32), {}, EVERYTHING),
    (i < 3, {}, R(0, 1)),
]


@pytest.mark.parametrize(("expr", "ranges", "expected"), BOUNDS, ids=[str(e) for e, _, _ in BOUNDS])
def test_bound(expr, ranges, expected):
    assert bound(expr, ranges) == expected


def test_bound_rejects_floats():
    with pytest.raises(IRTypeError, match="bound: expected an integer expression, but got 'F"):
        bound(F[i])


# ---------------------------------------------------------------------------------------------
# relax

RELAX = [
    # affine in the relaxed variables: exact
    (i * 4 + j, {j: R(0, 3)}, {}, "i*4", 4),
    (i * 4 + j, {i: R(0, 2), j: R(0, 3)}, {}, "0", 12),
    (x + i * 4 - j * 2, {i: R(1, 2), j: R(0, 3)}, {}, "x - 2", 11),
    (x * 4 + 1, {j: R(0, 3)}, {}, "x*4 + 1", 1),
    (i - i + j, {i: R(None, None), j: R(2, 4)}, {}, "2", 3),
    # non-affine atoms depending on relaxed variables: constant bounds ...
    ((i * 4 + j) // 2, {j: R(0, 3)}, {}, "i*2", 2),
    (x + (i * j), {i: R(0, 3), j: R(0, 3)}, {}, "x", 10),
    ((x * 4 + j) % 4, {j: R(0, 3)}, {}, "0", 4),
    # ... or a symbolic minimum for div/mod by constants when that is tighter
    ((fo * 8 + fi) // 14, {fi: R(0, 7)}, {fo: R(0, 1000)}, "fo*4//7", 2),
    ((fo * 8 + fi) // 4, {fi: R(0, 7)}, {}, "fo*2", 2),
    ((fo * 8 + fi) % 16, {fi: R(0, 3)}, {}, "0", 16),
    ((fo * 16 + fi) % 8, {fi: R(2, 5)}, {}, "2", 4),
    ((fo * 8 + fi) % 14, {fi: R(0, 7)}, {fo: R(0, 1000)}, "0", 14),
]


@pytest.mark.parametrize(
    ("expr", "relaxed", "ranges", "low", "extent"), RELAX, ids=[str(r[0]) for r in RELAX]
)
def test_relax(expr, relaxed, ranges, low, extent):
    got_low, got_extent = relax(expr, relaxed, ranges)
    assert (str(got_low), got_extent) == (low, extent)


def test_relax_unbounded_relaxed_variable():
    with pytest.raises(
        LoweringError, match=r"cannot bound 'i \+ j': relaxed variable 'j' has the "
    ):
        relax(i + j, {j: R(0, None)})


def test_relax_unbounded_variable_in_atom():
    with pytest.raises(LoweringError, match=r"cannot bound 'x\*j' in .*variable 'x' \(no range\)"):
        relax(x * j, {j: R(0, 3)})


def test_relax_rejects_non_index():
    with pytest.raises(IRTypeError, match="relax: expected an int32/int64 index expression"):
        relax(i < 3, {i: R(0, 3)})


def test_reduce_source_is_simplified_with_axis_ranges():
    r = Var("r")
    e = Reduce(ReduceCombiner.SUM, Cast(Q[(i * 4 + r) // 4], dtypes.int32), (r,), ((0, 4),))
    assert str(simplify(e)) == "sum(i32(Q[i]), axis=[r in range(4)])"
