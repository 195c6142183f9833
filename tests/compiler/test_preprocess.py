"""Tests of ``preprocess`` (compiler/passes/preprocess.py), seed 001's Algorithm 1.

1. COM + ALIGN: a vector statement whose count breaks ``n % VECTOR_ELEMS == 0`` is extended to the next
   accepted count; the extra elements it reads are zero-filled first (one vzero), the allocation grows
   when it must, and nothing extra is copied out. Golden printouts.
2. LAYOUT: an out-of-place statement for an in-place instruction (relu) becomes a copy plus the in-place
   instruction.
3. COM (fission): a loop around two copies into disjoint channels of one buffer (a concat, partitioned)
   becomes two loops, each one strided copy; a loop whose statements depend on each other is kept.
4. What it cannot fix it leaves alone (a guard; an operand in global memory).
5. Interpreted before and after on random inputs: the same results.
"""

from __future__ import annotations

import numpy as np

import isa
from compiler.interp import run
from compiler.ir import Allocate, Attr, Buffer, For, PrimFunc, Store, Var, const, dtypes, max_, seq
from compiler.passes import preprocess, tensorize
from compiler.passes.tensorize import unmatched
from compiler.testing import assert_same_results

DIANNAO = isa.load_isa("diannao")


def loop(var: Var, extent: int, body) -> For:
    return For(var, const(0), const(extent), body)


def preprocessed(before: PrimFunc) -> PrimFunc:
    after = preprocess(before, DIANNAO)
    assert_same_results(before, after, "preprocess")
    return after


def tail_add(alloc: int, n: int) -> PrimFunc:
    """Add ``n`` f32 elements through NMEM buffers of ``alloc`` elements: copy in, add, copy out."""
    x, y, z = (Buffer(name, (n,), dtypes.float32) for name in "XYZ")
    a, b, c = (Buffer(name, (alloc,), dtypes.float32, "nmem") for name in "abc")
    i = Var("i")
    body = seq(
        Attr("pragma_intrin", "copy", loop(i, n, Store(a, (i,), x[i]))),
        Attr("pragma_intrin", "copy", loop(i, n, Store(b, (i,), y[i]))),
        Attr("pragma_intrin", "add", loop(i, n, Store(c, (i,), a[i] + b[i]))),
        Attr("pragma_intrin", "copy", loop(i, n, Store(z, (i,), c[i]))),
    )
    return PrimFunc("tail", (x, y, z), Allocate(a, Allocate(b, Allocate(c, body))))


TAIL_ADD_14 = """\
def tail(X: f32[14], Y: f32[14], Z: f32[14]):
  with alloc(a, f32[64], "nmem"):
    with attr('pragma_intrin', 'zero'):
      for i in range(64):
        a[i] = f32(0.0)
    with alloc(b, f32[64], "nmem"):
      with attr('pragma_intrin', 'zero'):
        for i_1 in range(64):
          b[i_1] = f32(0.0)
      with alloc(c, f32[64], "nmem"):
        with attr('pragma_intrin', 'copy'):
          for i_2 in range(14):
            a[i_2] = X[i_2]
        with attr('pragma_intrin', 'copy'):
          for i_2 in range(14):
            b[i_2] = Y[i_2]
        with attr('pragma_intrin', 'add'):
          for i_2 in range(64):
            c[i_2] = a[i_2] + b[i_2]
        with attr('pragma_intrin', 'copy'):
          for i_2 in range(14):
            Z[i_2] = c[i_2]"""


def test_com_extends_the_count_and_zero_fills_what_it_reads() -> None:
    before = tail_add(64, 14)
    (why,) = [u for u in unmatched(before, DIANNAO) if u.constraint is not None]
    assert why.instruction == "vadd" and "n = 14" in why.reason
    after = preprocessed(before)
    assert str(after) == TAIL_ADD_14
    final = tensorize(after, DIANNAO)
    assert unmatched(final, DIANNAO) == []
    assert "diannao.vzero(dst_space=2, n=256, dst=a[0])" in str(final)
    assert "diannao.vadd(n=64, dst=c[0], a=a[0], b=b[0])" in str(final)


def test_align_grows_an_allocation_too_small_for_the_extra_compute() -> None:
    before = tail_add(14, 14)
    after = preprocessed(before)
    assert str(after).count('f32[64], "nmem"') == 3
    assert unmatched(tensorize(after, DIANNAO), DIANNAO) == []
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(14).astype(np.float32), rng.standard_normal(14).astype(np.float32)
    z = np.zeros(14, np.float32)
    run(tensorize(after, DIANNAO), [x, y, z])
    np.testing.assert_array_equal(z, x + y)


def test_layout_splits_an_out_of_place_relu_into_copy_and_in_place_relu() -> None:
    x, z = Buffer("X", (128,), dtypes.float32), Buffer("Z", (128,), dtypes.float32)
    r = Buffer("r", (128,), dtypes.float32, "nmem")
    i = Var("i")
    body = seq(
        Attr("pragma_intrin", "relu", loop(i, 128, Store(r, (i,), max_(x[i], 0.0)))),
        Attr("pragma_intrin", "copy", loop(i, 128, Store(z, (i,), r[i]))),
    )
    before = PrimFunc("relu", (x, z), Allocate(r, body))
    after = preprocessed(before)
    final = tensorize(after, DIANNAO)
    assert unmatched(final, DIANNAO) == []
    assert [line.strip() for line in str(final).splitlines() if "diannao." in line] == [
        "diannao.memcpy(dst_space=2, src_space=0, len=512, count=1, dst_stride=512, src_stride=512, "
        "dst=r[0], src=X[0])",
        "diannao.relu(n=128, dst=r[0])",
        "diannao.memcpy(dst_space=0, src_space=2, len=512, count=1, dst_stride=512, src_stride=512, "
        "dst=Z[0], src=r[0])",
    ]


def test_guards_and_global_operands_are_left_alone() -> None:
    x, z = Buffer("X", (20,), dtypes.float32), Buffer("Z", (20,), dtypes.float32)
    i = Var("i")
    from compiler.ir import IfThenElse

    guarded = loop(i, 20, IfThenElse(i < 14, Store(z, (i,), x[i] + x[i])))
    glob = loop(i, 14, Store(z, (i,), x[i] + x[i]))
    for stmt in (guarded, glob):
        before = PrimFunc("f", (x, z), Attr("pragma_intrin", "add", stmt))
        assert str(preprocess(before, DIANNAO)) == str(before)


def concat_rows(c1: int, c2: int, pixels: int, later_reads: bool = False) -> PrimFunc:
    """A pixel loop around a's C1 and b's C2 channels copied into one NMEM row of C1 + C2 (what loop
    partitioning leaves of a concat's select), then the tile copied out; ``later_reads``: the second
    copy reads what the first wrote instead of b."""
    a, b = Buffer("A", (pixels * c1,), dtypes.int32), Buffer("B", (pixels * c2,), dtypes.int32)
    z = Buffer("Z", (pixels * (c1 + c2),), dtypes.int32)
    j = Buffer("j", (pixels * (c1 + c2),), dtypes.int32, "nmem")
    p, c, i = Var("p"), Var("c"), Var("i")
    width = c1 + c2
    second = j[p * width + c - c1] if later_reads else b[p * c2 + c - c1]
    rows = loop(p, pixels, seq(loop(c, c1, Store(j, (p * width + c,), a[p * c1 + c])),
                               For(c, const(c1), const(c2), Store(j, (p * width + c,), second))))
    body = seq(Attr("pragma_intrin", "copy", rows),
               Attr("pragma_intrin", "copy", loop(i, pixels * width, Store(z, (i,), j[i]))))
    return PrimFunc("concat", (a, b, z), Allocate(j, body))


def test_fission_splits_a_loop_around_disjoint_copies_into_two_strided_copies() -> None:
    after = preprocessed(concat_rows(3, 5, 4))
    final = tensorize(after, DIANNAO)
    assert unmatched(final, DIANNAO) == []
    assert [line.strip() for line in str(final).splitlines() if "diannao." in line] == [
        "diannao.memcpy(dst_space=2, src_space=0, len=12, count=4, dst_stride=32, src_stride=12, "
        "dst=j[0], src=A[0])",
        "diannao.memcpy(dst_space=2, src_space=0, len=20, count=4, dst_stride=32, src_stride=20, "
        "dst=j[3], src=B[0])",
        "diannao.memcpy(dst_space=0, src_space=2, len=128, count=1, dst_stride=128, src_stride=128, "
        "dst=Z[0], src=j[0])",
    ]


def test_fission_keeps_a_loop_whose_statements_depend_on_each_other() -> None:
    before = concat_rows(3, 3, 4, later_reads=True)
    assert str(preprocess(before, DIANNAO)) == str(before)
