"""Tests of ``loop_partition`` (compiler/passes/loop_partition.py), seed 001's Algorithm 2.

1. Golden: the paper's copy example. ``(H, W) = (4, 14)``, W split over 4 cores, each core copying
   its ``4 x 4`` block into a local buffer ``AL`` of 16 elements. The result must have exactly two
   pieces, ``tid < 3`` with inner loops of extent 4 and the last core with inner loops of extent 2,
   and no guard.
2. The paper's add example (``[14, 14]`` split over 4 cores), serial splits, 2-D splits and a
   dense with a split reduce axis: every guard is gone. Hand-written IR covers guards decided over
   the whole loop, else branches, the three-piece cap, the rule that a split must not copy guards,
   and marked ``if_then_else`` conditions.
3. Loops without guards, and guards that mention no loop variable, stay unchanged.
4. Properties (hypothesis): random element-wise and conv-like schedules with non-dividing splits,
   core counts that do not divide the work (1-16) and nested splits, lowered or built (flattened).
   The function before and after the pass gives bit-equal results on random inputs, and the pass
   never adds guards. It leaves no guard at all in element-wise and convolution functions, except
   where a nested split is cached at its outer loop: there the cache region is wider than the
   loop's step, and the copy's boundary depends on two loops (the pass's documented limit).

"Guards" are counted by ``guards`` below: ``IfThenElse`` nodes that are not piece selectors, i.e.
not the ``if tid < c`` chains that choose a piece inside a bound loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from compiler import ops, te
from compiler.errors import IRTypeError
from compiler.interp import run
from compiler.ir import (
    GE,
    LT,
    Attr,
    Buffer,
    Call,
    FloorDiv,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IRVisitor,
    PrimFunc,
    Select,
    Stmt,
    Store,
    Var,
    assert_structural_equal,
    const,
    dtypes,
    if_then_else,
    seq,
    structural_equal,
)
from compiler.lower import lower
from compiler.passes import loop_partition
from compiler.pipeline import build
from compiler.schedule import Schedule, create_schedule
from compiler.testing import assert_same_results
from compiler.verify import verify

CORE = ForKind.THREAD_BINDING


def loop(var: Var, extent: int, body: Stmt, kind: ForKind = ForKind.SERIAL, thread: str = "") -> For:
    return For(var, const(0), const(extent), body, kind, thread)


def loop_from(var: Var, lo: int, end: int, body: Stmt) -> For:
    """``for var in range(lo, end)``."""
    return For(var, const(lo), const(end - lo), body)


def bound_loop(var: Var, extent: int, body: Stmt) -> For:
    return For(var, const(0), const(extent), body, CORE, "core")


def guards(node) -> int:
    """IfThenElse nodes in ``node`` that are not piece selectors.

    A piece selector is an ``if v < c`` / ``if v >= c`` on a bound loop's variable ``v`` that is the
    loop's body or a branch of another selector of that loop.
    """
    count = 0

    class _Count(IRVisitor):
        def visit_IfThenElse(self, s: IfThenElse) -> None:
            nonlocal count
            count += 1
            self.generic_visit(s)

        def visit_For(self, s: For) -> None:
            self.visit(s.min)
            self.visit(s.extent)
            if s.kind is CORE:
                self.selectors(s.var, s.body)
            else:
                self.visit(s.body)

        def selectors(self, var: Var, s: Stmt) -> None:
            is_selector = (
                isinstance(s, IfThenElse)
                and isinstance(s.cond, LT | GE)
                and s.cond.a is var
                and isinstance(s.cond.b, IntImm)
            )
            if not is_selector:
                self.visit(s)
                return
            self.selectors(var, s.then_case)
            if s.else_case is not None:
                self.selectors(var, s.else_case)

    _Count().visit(node.body if isinstance(node, PrimFunc) else node)
    return count


def marked_selects(func: PrimFunc) -> int:
    """``if_then_else`` calls inside ``pragma_*``/``tensorize`` marks (guards the pass may decide)."""
    count = 0

    class _Count(IRVisitor):
        marked = 0

        def visit_Attr(self, s: Attr) -> None:
            marked = s.key == "tensorize" or s.key.startswith("pragma_")
            self.marked += marked
            self.visit(s.body)
            self.marked -= marked

        def visit_Call(self, e: Call) -> None:
            nonlocal count
            count += bool(self.marked) and e.name == "if_then_else"
            self.generic_visit(e)

    _Count().visit(func.body)
    return count


def partitioned(before: PrimFunc, stage: str = "loop-ir") -> PrimFunc:
    """loop_partition(before), checked to verify and to compute what ``before`` computes."""
    after = loop_partition(before)
    verify(after, stage, after="loop_partition")
    assert_same_results(before, after, "loop_partition")
    assert guards(after) <= guards(before), f"guards added:\n{before}\n--- after ---\n{after}"
    return after


def check(before: PrimFunc, expected: PrimFunc) -> PrimFunc:
    """``partitioned(before)`` equals ``expected`` structurally."""
    after = partitioned(before)
    assert_structural_equal(after, expected)
    return after


# --------------------------------------------------------------------------------------------------
# 1. the paper's copy example


MEMCPY_AFTER = """\
def memcpy(A: i32[56], B: i32[56]):
  for tid in bind(core, 4):
    if tid < 3:
      with alloc(A.nmem, i32[16], "nmem"):
        with attr('pragma_intrin', 'MEMCPY'):
          for ax0 in range(4):
            for ax1 in range(4):
              A.nmem[ax0*4 + ax1] = A[ax0*14 + tid*4 + ax1]
        for i in range(4):
          for j in range(4):
            B[i*14 + tid*4 + j] = A.nmem[i*4 + j]
    else:
      with alloc(A.nmem, i32[16], "nmem"):
        with attr('pragma_intrin', 'MEMCPY'):
          for ax0 in range(4):
            for ax1 in range(2):
              A.nmem[ax0*4 + ax1] = A[ax0*14 + tid*4 + ax1]
        for i in range(4):
          for j in range(2):
            B[i*14 + tid*4 + j] = A.nmem[i*4 + j]"""


def test_seed_001_memcpy_becomes_two_guard_free_pieces(seed_001_memcpy) -> None:
    """Sec. IV-C: split on tid (tid < 3 vs tid = 3), then on j in the last piece (j >= 2 is dropped)."""
    before = seed_001_memcpy
    # the paper's input: a 16-element local buffer per core and the guard tid*4 + j < 14
    assert "if tid*4 + ax1 < 14:" in str(before)
    assert 'alloc(A.nmem, i32[16], "nmem")' in str(before)
    after = partitioned(before, "flat")
    assert str(after) == MEMCPY_AFTER
    a = np.arange(56, dtype=np.int32).reshape(4, 14)
    b = np.zeros((4, 14), dtype=np.int32)
    run(after, [a, b])
    np.testing.assert_array_equal(b, a)


# --------------------------------------------------------------------------------------------------
# 2. guards gone in the paper's add example and other schedules


def test_seed_001_add_on_four_cores() -> None:
    A, B = (te.placeholder((14, 14), "float32", name=n) for n in "AB")
    C = te.compute((14, 14), lambda xx, j: A[xx, j] + B[xx, j], name="C")
    s = create_schedule(C)
    xo, xi = s[C].split(C.op.axis[0], nparts=4, names=("xxo", "i"))
    s[C].bind(xo, te.thread_axis("core", name="tid"))
    s[C].pragma(xi, "intrin", "TADD")
    before = lower(s, [A, B, C], "add")
    assert guards(before) == 1

    a, b, c = (Buffer(n, (14, 14), dtypes.float32) for n in "ABC")
    tid, i, j = Var("tid"), Var("i"), Var("j")
    row = tid * 4 + i
    store = Store(c, (row, j), a[row, j] + b[row, j])

    def rows(n: int) -> Stmt:
        return Attr("pragma_intrin", "TADD", loop(i, n, loop(j, 14, store)))

    expected = PrimFunc("add", (a, b, c), bound_loop(tid, 4, IfThenElse(tid < 3, rows(4), rows(2))))
    check(before, expected)


def test_serial_split_becomes_consecutive_loops() -> None:
    A = te.placeholder((14,), "int32", name="A")
    B = te.compute((14,), lambda x: A[x] * 2, name="B")
    s = create_schedule(B)
    s[B].split(B.op.axis[0], factor=4, names=("xo", "xi"))
    before = lower(s, [A, B], "double")
    assert guards(before) == 1

    a, b = Buffer("A", (14,), dtypes.int32), Buffer("B", (14,), dtypes.int32)
    xo, xi = Var("xo"), Var("xi")
    x = xo * 4 + xi
    store = Store(b, (x,), a[x] * 2)
    expected = PrimFunc(
        "double",
        (a, b),
        seq(loop(xo, 3, loop(xi, 4, store)), loop_from(xo, 3, 4, loop(xi, 2, store))),
    )
    check(before, expected)


def test_two_split_axes_over_cores_lose_every_guard() -> None:
    A, B = (te.placeholder((14, 10), "int32", name=n) for n in "AB")
    C = ops.add(A, B)
    s = create_schedule(C)
    yo, yi = s[C].split(C.op.axis[0], nparts=4)
    xo, xi = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(yo, xo, yi, xi)
    s[C].bind(yo, te.thread_axis("core", name="tid"))
    before = lower(s, [A, B, C], "add2d")
    assert guards(before) == 1
    after = partitioned(before)
    assert guards(after) == 0
    assert "if tid < 3:" in str(after)


def test_nested_split_over_cores_uses_the_inner_split_bound() -> None:
    """13 = 6 + 6 + 1 with the 6 split again by 4: the guard's second conjunct bounds io*4 + ii."""
    A, B = (te.placeholder((13,), "int32", name=n) for n in "AB")
    C = ops.add(A, B)
    s = create_schedule(C)
    outer, inner = s[C].split(C.op.axis[0], factor=6)
    s[C].split(inner, factor=4)
    s[C].bind(outer, te.thread_axis("core", name="tid"))
    before = lower(s, [A, B, C], "add")
    assert "if tid*6 + ax0.inner.outer*4 + ax0.inner.inner < 13 and" in str(before)
    after = partitioned(before)
    assert guards(after) == 0
    assert "if tid < 2:" in str(after)


def test_dense_with_split_reduce_axis_loses_its_three_guards() -> None:
    """The k.outer*3 + k < 8 guards of two cache copies and the update: k.outer = 2 keeps 2 of 3."""
    X = te.placeholder((3, 8), "int8", name="X")
    W = te.placeholder((2, 8), "int8", name="W")
    D = ops.dense(X, W, out_dtype="int32")
    s = create_schedule(D)
    DL = s.cache_write(D, "acc")
    XL = s.cache_read(X, "nmem", [DL])
    WL = s.cache_read(W, "nmem", [DL])
    s[DL].compute_at(s[D], s[D].op.axis[1])
    ko, _ = s[DL].split(s[DL].op.reduce_axis[0], factor=3)
    s[XL].compute_at(s[DL], ko)
    s[WL].compute_at(s[DL], ko)
    before = lower(s, [X, W, D], "dense")
    assert guards(before) == 3
    after = partitioned(before)
    assert guards(after) == 0
    assert "for k.outer in range(2):" in str(after)
    assert "for k.outer in range(2, 3):" in str(after)


def test_guard_decided_over_the_whole_loop_goes_without_a_split() -> None:
    a, b = Buffer("A", (8,), dtypes.int32), Buffer("B", (8,), dtypes.int32)
    i = Var("i")
    store = Store(b, (i,), a[i])
    before = PrimFunc("f", (a, b), loop(i, 8, IfThenElse(i < 100, store)))
    check(before, PrimFunc("f", (a, b), loop(i, 8, store)))


def test_false_guard_keeps_its_else_branch_in_its_piece() -> None:
    a, b = Buffer("A", (8,), dtypes.int32), Buffer("B", (8,), dtypes.int32)
    i = Var("i")
    low, high = Store(b, (i,), a[i]), Store(b, (i,), a[i] + 1)
    before = PrimFunc("f", (a, b), loop(i, 8, IfThenElse(i < 3, low, high)))
    check(before, PrimFunc("f", (a, b), seq(loop(i, 3, low), loop_from(i, 3, 8, high))))


def test_only_the_decided_part_of_a_conjunction_goes() -> None:
    """Partitioning i decides ``i < 3`` and keeps ``j < 5``; j's own partition then removes it."""
    a = Buffer("A", (8, 8), dtypes.int32)
    i, j = Var("i"), Var("j")
    store = Store(a, (i, j), const(1))
    before = PrimFunc("f", (a,), loop(i, 8, loop(j, 8, IfThenElse((i < 3) & (j < 5), store))))
    expected = PrimFunc("f", (a,), loop(i, 3, loop(j, 5, store)))
    check(before, expected)


@pytest.mark.parametrize("spelling", ["j < 2", "2 > j", "-j > -2", "j*3 <= 5"])
def test_a_conjunct_bounds_the_variables_of_the_others(spelling: str) -> None:
    """With j < 2 known, i + j < 4 holds for every i in [0, 2]: i stays one loop, j is cut at 2."""
    a = Buffer("A", (3, 4), dtypes.int32)
    i, j = Var("i"), Var("j")
    bound = {"j < 2": j < 2, "2 > j": const(2) > j, "-j > -2": -j > -2, "j*3 <= 5": j * 3 <= 5}[spelling]
    store = Store(a, (i, j), const(1))
    before = PrimFunc("f", (a,), loop(i, 3, loop(j, 4, IfThenElse((i + j < 4) & bound, store))))
    check(before, PrimFunc("f", (a,), loop(i, 3, loop(j, 2, store))))


@pytest.mark.parametrize("spelling", ["j >= 2", "1 < j", "-j <= -2", "j*3 >= 4"])
def test_a_conjunct_gives_lower_bounds_too(spelling: str) -> None:
    """With j >= 2 known, i + j >= 2 holds everywhere: only j's cut at 2 is left."""
    a = Buffer("A", (3, 4), dtypes.int32)
    i, j = Var("i"), Var("j")
    bound = {"j >= 2": j >= 2, "1 < j": const(1) < j, "-j <= -2": -j <= -2, "j*3 >= 4": j * 3 >= 4}[spelling]
    store = Store(a, (i, j), const(1))
    before = PrimFunc("f", (a,), loop(i, 3, loop(j, 4, IfThenElse((i + j >= 2) & bound, store))))
    check(before, PrimFunc("f", (a,), loop(i, 3, loop_from(j, 2, 4, store))))


def test_bound_loop_with_an_empty_first_piece_selects_the_rest() -> None:
    a = Buffer("A", (8,), dtypes.int32)
    tid = Var("tid")
    store = Store(a, (tid,), const(1))
    before = PrimFunc("f", (a,), bound_loop(tid, 8, IfThenElse(tid >= 5, store)))
    check(before, PrimFunc("f", (a,), bound_loop(tid, 8, IfThenElse(GE(tid, const(5)), store))))


def test_at_most_three_pieces_per_loop() -> None:
    """Four runs of verdicts (i < 2, i < 5, i < 8): the longest run is the middle piece."""
    a = Buffer("A", (3, 10), dtypes.int32)
    i = Var("i")
    s0, s1, s2 = (Store(a, (const(k), i), const(k)) for k in range(3))
    body = seq(IfThenElse(i < 2, s0), IfThenElse(i < 5, s1), IfThenElse(i < 8, s2))
    before = PrimFunc("f", (a,), loop(i, 10, body))
    expected = PrimFunc(
        "f",
        (a,),
        seq(
            loop(i, 2, seq(s0, s1, s2)),
            loop_from(i, 2, 5, seq(s1, s2)),
            loop_from(i, 5, 10, IfThenElse(i < 8, s2)),
        ),
    )
    check(before, expected)


def test_a_split_that_would_only_copy_guards_is_not_made() -> None:
    """Splitting at i = 4 removes one guard but copies two undecidable ones into both pieces."""
    a, b = Buffer("A", (8,), dtypes.int32), Buffer("B", (8,), dtypes.int32)
    i = Var("i")
    body = seq(
        IfThenElse(i < 4, Store(b, (i,), const(0))),
        IfThenElse(a[i] > 0, Store(b, (i,), const(1))),
        IfThenElse(a[i] < -5, Store(b, (i,), const(2))),
    )
    before = PrimFunc("f", (a, b), loop(i, 8, body))
    after = partitioned(before)
    assert after is before


def test_if_then_else_in_a_marked_region_is_decided() -> None:
    """Padding read: if_then_else(x >= 1, A[x - 1], 0) in a tensorize mark is split at x = 1."""
    a, b = Buffer("A", (8,), dtypes.int32), Buffer("B", (9,), dtypes.int32)
    x = Var("x")
    before = PrimFunc(
        "f", (a, b), Attr("tensorize", "TCOPY", loop(x, 9, Store(b, (x,), if_then_else(x >= 1, a[x - 1], 0))))
    )
    pieces = seq(loop(x, 1, Store(b, (x,), const(0))), loop_from(x, 1, 9, Store(b, (x,), a[x - 1])))
    check(before, PrimFunc("f", (a, b), Attr("tensorize", "TCOPY", pieces)))


def test_select_in_a_marked_region_is_decided() -> None:
    a, b = Buffer("A", (9,), dtypes.int32), Buffer("B", (9,), dtypes.int32)
    x = Var("x")
    low, high = a[x], a[x] * 2
    before = PrimFunc(
        "f", (a, b), Attr("pragma_intrin", "TMUL", loop(x, 9, Store(b, (x,), Select(x < 4, low, high))))
    )
    pieces = seq(loop(x, 4, Store(b, (x,), low)), loop_from(x, 4, 9, Store(b, (x,), high)))
    check(before, PrimFunc("f", (a, b), Attr("pragma_intrin", "TMUL", pieces)))


def test_if_then_else_outside_marked_regions_is_left_alone() -> None:
    a, b = Buffer("A", (8,), dtypes.int32), Buffer("B", (9,), dtypes.int32)
    x = Var("x")
    before = PrimFunc("f", (a, b), loop(x, 9, Store(b, (x,), if_then_else(x >= 1, a[x - 1], 0))))
    assert partitioned(before) is before


def test_loop_partition_rejects_what_is_not_a_function() -> None:
    with pytest.raises(IRTypeError, match="loop_partition: expected a PrimFunc, but got For"):
        loop_partition(loop(Var("i"), 4, Store(Buffer("A", (4,), dtypes.int32), (const(0),), const(0))))


# --------------------------------------------------------------------------------------------------
# 3. unchanged


def test_loops_without_guards_are_unchanged() -> None:
    a, b = Buffer("A", (4, 6), dtypes.float32), Buffer("B", (4, 6), dtypes.float32)
    i, j = Var("i"), Var("j")
    before = PrimFunc("f", (a, b), loop(i, 4, loop(j, 6, Store(b, (i, j), a[i, j] * 2.0)), CORE, "core"))
    after = partitioned(before)
    assert after is before
    assert structural_equal(after, before)


def test_guards_on_no_loop_variable_are_unchanged() -> None:
    a, b = Buffer("A", (4,), dtypes.int32), Buffer("B", (4,), dtypes.int32)
    i, t = Var("i"), Var("t")
    body = seq(
        IfThenElse(a[0] > 0, Store(b, (i,), a[i])),
        IfThenElse(IntImm(1, dtypes.bool_), Store(b, (i,), a[i] + b[i])),
    )
    before = PrimFunc("f", (a, b), loop(t, 2, loop(i, 4, body), CORE, "core"))
    after = partitioned(before)
    assert after is before
    assert structural_equal(after, before)


def test_a_second_run_changes_nothing() -> None:
    before = build(*_memcpy_like(14, 4))
    once = loop_partition(before)
    assert_structural_equal(loop_partition(once), once)


def _memcpy_like(width: int, cores: int):
    A = te.placeholder((2, width), "int32", name="A")
    B = te.compute((2, width), lambda i, j: A[i, j] + 1, name="B")
    s = create_schedule(B)
    wo, wi = s[B].split(B.op.axis[1], nparts=cores)
    s[B].reorder(wo, B.op.axis[0], wi)
    s[B].bind(wo, te.thread_axis("core", name="tid"))
    return s, [A, B], "copy"


# --------------------------------------------------------------------------------------------------
# 4. properties

EXAMPLES = settings(max_examples=40, deadline=None)


@dataclass(eq=False)
class Case:
    sch: Schedule
    args: list[te.Tensor]
    steps: list[str]  # the schedule in words, for the reproducer
    guard_free: bool = True  # the pass must leave no guard

    def __repr__(self) -> str:
        return f"Case({'; '.join(self.steps)})"


@st.composite
def elementwise(draw):
    """A 1-D or 2-D add (int8 or int32) with random splits, a nested split, cores, a cache, a mark."""
    ndim = draw(st.integers(1, 2), label="ndim")
    shape = tuple(draw(st.integers(1, 20), label=f"dim{d}") for d in range(ndim))
    dtype = draw(st.sampled_from(["int8", "int32"]), label="dtype")
    A, B = (te.placeholder(shape, dtype, name=n) for n in "AB")
    C = ops.add(A, B)
    s = create_schedule(C)
    steps = [f"add {dtype}{list(shape)}"]
    split = []  # (outer, inner) of each axis split exactly once
    nested = False
    for d, axis in enumerate(C.op.axis):
        how = draw(st.sampled_from(["none", "factor", "cores"]), label=f"split axis {d}")
        if how == "none":
            continue
        if how == "cores":
            parts = draw(st.integers(1, 16), label="cores")
            steps.append(f"split(axis{d}, nparts={parts})")
            outer, inner = s[C].split(axis, nparts=parts)
        else:
            factor = draw(st.integers(1, 8), label="factor")
            steps.append(f"split(axis{d}, factor={factor})")
            outer, inner = s[C].split(axis, factor=factor)
        again = draw(st.sampled_from([None, "outer", "inner"]), label=f"nested split {d}")
        if again is None:
            split.append((outer, inner))
            continue
        factor = draw(st.integers(1, 4), label="nested factor")
        steps.append(f"split({again} of axis{d}, factor={factor})")
        s[C].split(outer if again == "outer" else inner, factor=factor)
        nested = True
    if len(split) == 2 and len(s[C].leaf_iter_vars) == 4 and draw(st.booleans(), label="tile"):
        steps.append("reorder(outer0, outer1, inner0, inner1)")
        s[C].reorder(split[0][0], split[1][0], split[0][1], split[1][1])
    first = s[C].leaf_iter_vars[0]
    if draw(st.booleans(), label="bind"):
        steps.append(f"bind({first.name}, core)")
        s[C].bind(first, te.thread_axis("core", name="tid"))
    cached = draw(st.booleans(), label="cache")
    if cached:
        AL = s.cache_read(A, "nmem", [C])
        s[AL].compute_at(s[C], first)
        s[AL].pragma(s[AL].op.axis[-1], "intrin", "MEMCPY")
        steps.append(f"cache_read(A, nmem) at {first.name} with a MEMCPY mark")
    return Case(s, [A, B, C], steps, guard_free=not (nested and cached))


@st.composite
def conv_like(draw):
    """A small int8 conv2d (padding inlined: if_then_else reads) with non-dividing splits and marks."""
    c, k = draw(st.integers(1, 2), label="C"), draw(st.integers(1, 3), label="K")
    h, w = draw(st.integers(3, 7), label="H"), draw(st.integers(3, 7), label="W")
    ksize, padding = draw(st.integers(1, 3), label="kernel"), draw(st.integers(0, 1), label="padding")
    D = te.placeholder((1, c, h, w), "int8", name="D")
    K = te.placeholder((k, c, ksize, ksize), "int8", name="K")
    Out = ops.conv2d_nchw(D, K, stride=1, padding=padding, out_dtype="int32")
    s = create_schedule(Out)
    steps = [f"conv2d D{list(D.shape)} K{list(K.shape)} padding={padding}"]
    if padding:
        s[Out.op.input_tensors[0]].compute_inline()
    _, ff, yy, xx = Out.op.axis
    fo, _ = s[Out].split(ff, nparts=draw(st.integers(1, 4), label="cores"))
    _, yi = s[Out].split(yy, factor=draw(st.integers(1, 4), label="y factor"))
    _, xi = s[Out].split(xx, factor=draw(st.integers(1, 4), label="x factor"))
    extents = [s[Out].extent_of(x) for x in (fo, yi, xi)]
    steps.append("split ff over {} cores, yy by {}, xx by {}".format(*extents))
    if draw(st.booleans(), label="split rc"):
        s[Out].split(Out.op.reduce_axis[0], factor=draw(st.integers(1, 2), label="rc factor"))
        steps.append("split rc")
    s[Out].bind(fo, te.thread_axis("core", name="tid"))
    mark = draw(st.sampled_from([None, yi, xi]), label="mark")
    if mark is not None:
        s[Out].pragma(mark, "intrin", "TCONV")
        steps.append(f"pragma({mark.name}, TCONV)")
    return Case(s, [D, K, Out], steps)


def _functions(data, case: Case) -> tuple[PrimFunc, str]:
    """The case lowered, or built (simplified and flattened); notes a one-line reproducer."""
    flat = data.draw(st.booleans(), label="flattened")
    note(" ; ".join(case.steps) + f" ; {'build' if flat else 'lower'}")
    func = build(case.sch, case.args, "f") if flat else lower(case.sch, case.args, "f")
    return func, ("flat" if flat else "loop-ir")


@EXAMPLES
@given(case=elementwise(), data=st.data())
def test_elementwise_results_are_unchanged_and_no_guard_is_left(case: Case, data) -> None:
    before, stage = _functions(data, case)
    after = partitioned(before, stage)
    if case.guard_free:
        assert guards(after) == 0, f"guards left:\n{after}"


@settings(max_examples=25, deadline=None)
@given(case=conv_like(), data=st.data())
def test_conv_results_are_unchanged_and_split_guards_are_gone(case: Case, data) -> None:
    before, stage = _functions(data, case)
    after = partitioned(before, stage)
    assert guards(after) == 0, f"guards left:\n{after}"
    if guards(before) == 0:  # marked padding reads are only copied along with removed guards
        assert marked_selects(after) <= marked_selects(before)


@pytest.mark.parametrize("width, cores", [(14, 4), (13, 16), (16, 4), (7, 3), (1, 5)])
def test_cores_that_do_not_divide_the_work(width: int, cores: int) -> None:
    before = build(*_memcpy_like(width, cores))
    after = partitioned(before, "flat")
    assert guards(after) == 0
    a = np.arange(2 * width, dtype=np.int32).reshape(2, width)
    b = np.zeros_like(a)
    run(after, [a, b])
    np.testing.assert_array_equal(b, a + 1)


def test_cores_grouped_by_tid_floordiv_are_cut_at_a_group_boundary() -> None:
    """Rows of a conv over 2 row groups of 2 cores each (tid // 2): ``tid//2*3 + r < 5`` holds for every r
    in [0, 3) in group 0 and only for r < 2 in group 1, so the bound loop is cut at tid = 2 and the
    guard disappears from both pieces."""
    a = Buffer("A", (4, 3), dtypes.int32)
    tid, r = Var("tid"), Var("r")
    store = Store(a, (tid, r), const(1))
    cond = FloorDiv(tid, const(2)) * 3 + r < 5
    before = PrimFunc("f", (a,), bound_loop(tid, 4, loop(r, 3, IfThenElse(cond, store))))
    after = partitioned(before)
    assert guards(after) == 0
    assert "if tid < 2:" in str(after)
