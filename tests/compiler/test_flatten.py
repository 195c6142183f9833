"""Tests of the ``flatten`` pass (compiler/passes/flatten.py): before/after, and run before and after.

Each case builds ``before`` and ``expected`` by hand, checks ``flatten(before)`` against ``expected``
structurally, and runs both in the reference interpreter on the same random inputs (the flattened
function takes the same C-contiguous arrays).
"""

from __future__ import annotations

from compiler.ir import (
    Allocate,
    Buffer,
    Cast,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    Store,
    Var,
    assert_structural_equal,
    const,
    dtypes,
    seq,
)
from compiler.passes import flatten
from compiler.testing import assert_same_results
from compiler.verify import verify


def loop(var: Var, extent: int, body: Stmt, kind: ForKind = ForKind.SERIAL, thread: str = "") -> For:
    return For(var, const(0), const(extent), body, kind, thread)


def check(before: PrimFunc, expected: PrimFunc) -> PrimFunc:
    """flatten(before) == expected structurally and verifies as flat; both compute the same."""
    after = flatten(before)
    assert_structural_equal(after, expected)
    verify(after, "flat")
    assert_same_results(before, after, "flatten")
    return after


def test_seed_001_add_flattens_row_major() -> None:
    """14x14 add, rows in 4 parts bound to cores: ``C[tid*56 + i*14 + j]``."""
    a, b, c = (Buffer(n, (14, 14), dtypes.float32) for n in "ABC")
    tid, i, j = Var("tid"), Var("i"), Var("j")
    row = tid * 4 + i
    body = IfThenElse(row < 14, Store(c, (row, j), a[row, j] + b[row, j]))
    before = PrimFunc(
        "add", (a, b, c), loop(tid, 4, loop(i, 4, loop(j, 14, body)), ForKind.THREAD_BINDING, "core")
    )

    fa, fb, fc = (Buffer(n, (196,), dtypes.float32) for n in "ABC")
    flat = tid * 56 + i * 14 + j
    flat_body = IfThenElse(row < 14, Store(fc, (flat,), fa[flat] + fb[flat]))
    expected = PrimFunc(
        "add", (fa, fb, fc), loop(tid, 4, loop(i, 4, loop(j, 14, flat_body)), ForKind.THREAD_BINDING, "core")
    )
    after = check(before, expected)
    assert "C[tid*56 + i*14 + j] = A[tid*56 + i*14 + j] + B[tid*56 + i*14 + j]" in str(after)


def test_three_dimensional_buffers_use_row_major_strides() -> None:
    a = Buffer("A", (2, 3, 4), dtypes.int32)
    b = Buffer("B", (4, 3, 2), dtypes.int32)
    x, y, z = Var("x"), Var("y"), Var("z")
    before = PrimFunc("t", (a, b), loop(x, 2, loop(y, 3, loop(z, 4, Store(b, (z, y, x), a[x, y, z])))))
    fa, fb = Buffer("A", (24,), dtypes.int32), Buffer("B", (24,), dtypes.int32)
    expected = PrimFunc(
        "t",
        (fa, fb),
        loop(x, 2, loop(y, 3, loop(z, 4, Store(fb, (z * 6 + y * 2 + x,), fa[x * 12 + y * 4 + z])))),
    )
    check(before, expected)


def test_allocations_are_flattened_and_keep_their_scope() -> None:
    a = Buffer("A", (4, 8), dtypes.int8)
    out = Buffer("O", (4,), dtypes.int32)
    t = Buffer("T", (2, 8), dtypes.int32, scope="nmem")
    i, r, k = Var("i"), Var("r"), Var("k")
    body = loop(
        i,
        4,
        Allocate(
            t,
            seq(
                loop(r, 2, loop(k, 8, Store(t, (r, k), Cast(a[i, k], dtypes.int32) * (r + 1)))),
                Store(out, (i,), t[const(1), const(7)] - t[const(0), const(7)]),
            ),
        ),
    )
    before = PrimFunc("g", (a, out), body)

    fa, ft = Buffer("A", (32,), dtypes.int8), Buffer("T", (16,), dtypes.int32, scope="nmem")
    flat_body = loop(
        i,
        4,
        Allocate(
            ft,
            seq(
                loop(r, 2, loop(k, 8, Store(ft, (r * 8 + k,), Cast(fa[i * 8 + k], dtypes.int32) * (r + 1)))),
                Store(out, (i,), ft[const(15)] - ft[const(7)]),
            ),
        ),
    )
    after = check(before, PrimFunc("g", (fa, out), flat_body))
    assert after.params[1] is out  # a one-dimensional buffer is kept as it is


def test_flatten_simplifies_the_linear_indices() -> None:
    """An index that is already linear in the loop variables folds with the strides."""
    a = Buffer("A", (4, 4), dtypes.float32)
    b = Buffer("B", (16,), dtypes.float32)
    k = Var("k")
    before = PrimFunc("h", (a, b), loop(k, 16, Store(b, (k,), a[k // 4, k % 4])))
    fa = Buffer("A", (16,), dtypes.float32)
    check(before, PrimFunc("h", (fa, b), loop(k, 16, Store(b, (k,), fa[k]))))


def test_flatten_of_a_flat_function_changes_nothing() -> None:
    a = Buffer("A", (8,), dtypes.int32)
    i = Var("i")
    before = PrimFunc("id", (a,), loop(i, 8, Store(a, (i,), a[i] + 1)))
    after = check(before, before)
    assert after.params == before.params
