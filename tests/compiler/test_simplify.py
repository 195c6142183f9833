"""Tests of the ``simplify`` pass (compiler/passes/simplify.py): before/after, and run before and after.

Each case builds ``before`` and ``expected`` by hand, checks ``simplify(before)`` against ``expected``
structurally, and runs ``before`` and the result in the reference interpreter on the same random inputs
(every pass is checked by running the IR before and after it).
"""

from __future__ import annotations

import pytest

from compiler.ir import (
    Allocate,
    Attr,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Let,
    Not,
    PrimFunc,
    Stmt,
    Store,
    Var,
    assert_structural_equal,
    const,
    dtypes,
    seq,
)
from compiler.passes import simplify
from compiler.testing import assert_same_results

SEED = 0


def loop(var: Var, extent: int, body: Stmt, kind: ForKind = ForKind.SERIAL, thread: str = "") -> For:
    return For(var, const(0), const(extent), body, kind, thread)


def check(before: PrimFunc, expected: PrimFunc) -> PrimFunc:
    """simplify(before) == expected structurally, and both compute the same on random inputs."""
    after = simplify(before)
    assert_structural_equal(after, expected)
    assert_same_results(before, after, "simplify")
    return after


def buffers():
    return Buffer("A", (16,), dtypes.float32), Buffer("B", (16,), dtypes.float32)


def test_provably_true_guard_is_removed() -> None:
    a, b = buffers()
    i, j = Var("i"), Var("j")
    flat = i * 4 + j
    before = PrimFunc("f", (a, b), loop(i, 4, loop(j, 4, IfThenElse(flat < 16, Store(b, (flat,), a[flat])))))
    expected = PrimFunc("f", (a, b), loop(i, 4, loop(j, 4, Store(b, (flat,), a[flat]))))
    check(before, expected)


def test_undecided_guard_is_kept() -> None:
    """seed 001's guard: 14 rows in 4 parts of 4; rows 14 and 15 must not be touched."""
    a, b = buffers()
    t, i = Var("t"), Var("i")
    row = t * 4 + i
    body = loop(
        t, 4, loop(i, 4, IfThenElse(row < 14, Store(b, (row,), a[row]))), ForKind.THREAD_BINDING, "core"
    )
    before = PrimFunc("f", (a, b), body)
    after = check(before, before)
    assert after.body == before.body  # nothing to do: the same tree (same variables and buffers)


def test_provably_false_guard_keeps_only_the_else_branch() -> None:
    a, b = buffers()
    i = Var("i")
    then, other = Store(b, (i,), a[i]), Store(b, (i,), a[i] + 1.0)
    before = PrimFunc("f", (a, b), loop(i, 4, IfThenElse(i >= 4, then, other)))
    check(before, PrimFunc("f", (a, b), loop(i, 4, other)))
    without_else = PrimFunc(
        "f", (a, b), seq(loop(i, 4, IfThenElse(i >= 4, then)), Store(b, (const(0),), a[const(1)]))
    )
    check(without_else, PrimFunc("f", (a, b), Store(b, (const(0),), a[const(1)])))


def test_loop_of_extent_zero_is_removed() -> None:
    a, b = buffers()
    i = Var("i")
    last = Store(b, (const(0),), a[const(1)])
    before = PrimFunc("f", (a, b), seq(loop(i, 0, Store(b, (i,), a[i])), last))
    check(before, PrimFunc("f", (a, b), last))


def test_serial_loop_of_extent_one_is_replaced_by_its_body() -> None:
    a, b = buffers()
    i, j = Var("i"), Var("j")
    before = PrimFunc("f", (a, b), loop(j, 3, For(i, j * 2, const(1), Store(b, (i + 2,), a[i * 3]))))
    expected = PrimFunc("f", (a, b), loop(j, 3, Store(b, (j * 2 + 2,), a[j * 6])))
    check(before, expected)


@pytest.mark.parametrize(
    ("kind", "thread"), [(ForKind.THREAD_BINDING, "core"), (ForKind.UNROLLED, ""), (ForKind.PARALLEL, "")]
)
def test_other_loops_of_extent_one_stay_but_are_simplified_inside(kind: ForKind, thread: str) -> None:
    a, b = buffers()
    i = Var("i")
    before = PrimFunc("f", (a, b), loop(i, 1, Store(b, (i + 2,), a[i * 3]), kind, thread))
    expected = PrimFunc("f", (a, b), loop(i, 1, Store(b, (const(2),), a[const(0)]), kind, thread))
    check(before, expected)


def test_empty_statements_are_dropped() -> None:
    a, b = buffers()
    i, j = Var("i"), Var("j")
    t = Buffer("T", (4,), dtypes.float32, scope="local")
    keep = Store(b, (const(0),), a[const(0)])
    before = PrimFunc(
        "f",
        (a, b),
        seq(
            Allocate(t, seq()),
            Attr("pragma_x", 1, loop(i, 4, seq())),
            loop(i, 4, IfThenElse(i < 2, seq())),
            loop(i, 4, Let(j, i * 2, loop(Var("k"), 0, Store(b, (j,), a[j])))),
            keep,
        ),
    )
    check(before, PrimFunc("f", (a, b), keep))
    check(PrimFunc("f", (a, b), Allocate(t, seq())), PrimFunc("f", (a, b), seq()))


def test_guard_with_an_empty_then_branch_becomes_its_negation() -> None:
    a, b = buffers()
    i, t = Var("i"), Var("t")
    other = Store(b, (i,), a[i])
    before = PrimFunc("f", (a, b), loop(t, 4, loop(i, 4, IfThenElse(i < t, seq(), other))))
    expected = PrimFunc("f", (a, b), loop(t, 4, loop(i, 4, IfThenElse(Not(i < t), other))))
    check(before, expected)


def test_index_arithmetic_is_simplified_under_loop_ranges() -> None:
    a, b = buffers()
    i, j = Var("i"), Var("j")
    before = PrimFunc(
        "f",
        (a, b),
        loop(i, 4, loop(j, 4, Store(b, ((i * 8) // 2 + j * 1,), a[(i * 4 + j) % 16] + a[(i * 4 + j) // 16]))),
    )
    expected = PrimFunc(
        "f", (a, b), loop(i, 4, loop(j, 4, Store(b, (i * 4 + j,), a[i * 4 + j] + a[const(0)])))
    )
    check(before, expected)


def test_let_bound_variable_gets_the_range_of_its_value() -> None:
    a, b = buffers()
    i, j = Var("i"), Var("j")
    before = PrimFunc("f", (a, b), loop(i, 8, Let(j, i // 2, Store(b, (j % 4,), a[j]))))
    expected = PrimFunc("f", (a, b), loop(i, 8, Let(j, i // 2, Store(b, (j,), a[j]))))
    check(before, expected)


def test_loop_with_symbolic_bounds_gives_its_variable_a_range() -> None:
    a, b = buffers()
    i, j = Var("i"), Var("j")
    lo = i // 2
    before = PrimFunc(
        "f", (a, b), loop(i, 8, For(j, lo, const(2), IfThenElse(j < 6, Store(b, (j + i,), a[j - lo]))))
    )
    # j is in [0, 5] whatever i is, so the guard goes; the indices are already simple
    expected = PrimFunc("f", (a, b), loop(i, 8, For(j, lo, const(2), Store(b, (j + i,), a[j - lo]))))
    check(before, expected)


def test_simplify_keeps_name_params_and_attrs() -> None:
    a, b = buffers()
    before = PrimFunc("g", (a, b), Store(b, (const(1) + 2,), a[IntImm(0)]), attrs=(("target", "reference"),))
    after = check(
        before, PrimFunc("g", (a, b), Store(b, (const(3),), a[const(0)]), attrs=(("target", "reference"),))
    )
    assert after.params == (a, b)


def test_an_already_simple_function_comes_back_as_the_same_objects():
    """STYLE rule 6: unchanged subtrees stay shared, so simplify of a simplified function is identity."""
    from compiler import te
    from compiler.lower import lower
    from compiler.passes import simplify
    from compiler.schedule import create_schedule

    a = te.placeholder((14, 14), "float32", name="A")
    c = te.compute((14, 14), lambda i, j: a[i, j] * 2.0, name="C")
    s = create_schedule(c)
    s[c].split(c.op.axis[0], factor=4)
    once = simplify(lower(s, [a, c]))
    assert simplify(once).body is once.body
