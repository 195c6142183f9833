"""Tests of ``tensorize`` (compiler/passes/tensorize.py): instruction selection by tree-pattern matching whose
patterns come from the isa/ semantics (seed 001 Sec. IV-D).

1. Golden: the paper's copy example becomes exactly its two memcpy instructions after loop partitioning.
2. Each element-wise operator finds its vector instruction from the semantics alone (the mark names the
   operator, not the instruction), for every dtype the spec allows; contiguous loop nests merge into one
   dimension; a strided 2-D copy becomes one memcpy with its strides.
3. What does not match stays scalar, and ``unmatched`` says why: a guard, a violated constraint, a
   non-contiguous byte copy, an operand in the wrong memory space.
4. Every rewrite computes what the statement did: functions are interpreted before and after.
"""

from __future__ import annotations

import numpy as np
import pytest

import isa
from compiler.interp import run
from compiler.ir import (
    Allocate,
    Attr,
    Buffer,
    For,
    PrimFunc,
    Store,
    TensorInsn,
    Var,
    const,
    dtypes,
    max_,
    min_,
    seq,
)
from compiler.ir.functor import post_order_visit
from compiler.passes import loop_partition, tensorize
from compiler.passes.tensorize import unmatched
from compiler.testing import assert_same_results

DIANNAO = isa.load_isa("diannao")


def insns(func: PrimFunc) -> list[TensorInsn]:
    found: list[TensorInsn] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, TensorInsn) else None)
    return found


def tensorized(before: PrimFunc) -> PrimFunc:
    """tensorize(before, DIANNAO), checked to compute what ``before`` computes."""
    after = tensorize(before, DIANNAO)
    assert_same_results(before, after, "tensorize")
    return after


def marked(name: str, params, body, hint: str) -> PrimFunc:
    return PrimFunc(name, tuple(params), Attr("pragma_intrin", hint, body))


def loop(var: Var, extent: int, body, lo: int = 0) -> For:
    return For(var, const(lo), const(extent), body)


# --------------------------------------------------------------------------------------------------
# 1. the paper's copy example


MEMCPY_TENSORIZED = """\
def memcpy(A: i32[56], B: i32[56]):
  for tid in bind(core, 4):
    if tid < 3:
      with alloc(A.nmem, i32[16], "nmem"):
        with attr('pragma_intrin', 'MEMCPY'):
          diannao.memcpy(dst_space=2, src_space=0, len=16, count=4, dst_stride=16, src_stride=56, \
dst=A.nmem[0], src=A[tid*4])
        for i in range(4):
          for j in range(4):
            B[i*14 + tid*4 + j] = A.nmem[i*4 + j]
    else:
      with alloc(A.nmem, i32[16], "nmem"):
        with attr('pragma_intrin', 'MEMCPY'):
          diannao.memcpy(dst_space=2, src_space=0, len=8, count=4, dst_stride=16, src_stride=56, \
dst=A.nmem[0], src=A[tid*4])
        for i in range(4):
          for j in range(2):
            B[i*14 + tid*4 + j] = A.nmem[i*4 + j]"""


def test_seed_001_memcpy_example_becomes_the_papers_two_memcpys(seed_001_memcpy) -> None:
    """Sec. IV-C: ``memcpy(AL, A+tid*4, 14, 4, 4)`` for tid < 3 and ``memcpy(AL, A+tid*4, 14, 2, 4)`` for the
    last core. The paper counts elements; the spec's memcpy counts bytes (i32: 4 bytes an element), so the
    source stride 14 is 56 bytes, the row lengths 4 and 2 are 16 and 8 bytes, and the count is 4 rows."""
    before = seed_001_memcpy
    guarded = "memcpy: the statement is guarded by `if tid*4 + ax1 < 14`"
    assert [str(x) for x in unmatched(before, DIANNAO)] == [guarded]
    after = tensorized(loop_partition(before))
    assert str(after) == MEMCPY_TENSORIZED
    assert unmatched(after, DIANNAO) == []
    a = np.arange(56, dtype=np.int32).reshape(4, 14)
    b = np.zeros((4, 14), np.int32)
    run(after, [a, b])
    np.testing.assert_array_equal(b, a)


# --------------------------------------------------------------------------------------------------
# 2. instructions found from their semantics


@pytest.mark.parametrize(
    ("op", "instruction"),
    [("add", "vadd"), ("sub", "vsub"), ("mul", "vmul"), ("max", "vmax"), ("min", "vmin")],
)
@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "float16", "float32"])
def test_binary_ops_find_their_vector_instruction(op: str, instruction: str, dt: str) -> None:
    a, b, c = (Buffer(n, (128,), dtypes.dtype(dt), "nmem") for n in "abc")
    x, y, z = (Buffer(n, (128,), dtypes.dtype(dt)) for n in "XYZ")
    i = Var("i")
    value = {"add": a[i] + b[i], "sub": a[i] - b[i], "mul": a[i] * b[i]}.get(op)
    if value is None:
        value = (max_ if op == "max" else min_)(a[i], b[i])
    body = Allocate(a, Allocate(b, Allocate(c, seq(
        loop(i, 128, Store(a, (i,), x[i])),
        loop(i, 128, Store(b, (i,), y[i])),
        Attr("pragma_intrin", op, loop(i, 128, Store(c, (i,), value))),
        loop(i, 128, Store(z, (i,), c[i])),
    ))))
    after = tensorized(PrimFunc(op, (x, y, z), body))
    (found,) = insns(after)
    assert found.name == instruction
    assert [(f.name, f.value.value) for f in found.fields] == [("n", 128)]
    assert [(r.operand, r.buffer.name) for r in found.regions] == [("dst", "c"), ("a", "a"), ("b", "b")]


def test_relu_is_in_place_and_commutes() -> None:
    a = Buffer("a", (64,), dtypes.float32, "nmem")
    i = Var("i")
    for value in (max_(a[i], 0.0), max_(const(0.0, "float32"), a[i])):
        func = marked("relu", (a,), loop(i, 64, Store(a, (i,), value)), "relu")
        (found,) = insns(tensorize(func, DIANNAO))
        assert str(found) == "diannao.relu(n=64, dst=a[0])"


def _bias_nest(bias_index) -> PrimFunc:
    """``y[r, x, c] += b[...]`` over an 8 x 4 x 16 NMEM tile, the bias ``b`` (16) in NMEM too."""
    y = Buffer("y", (512,), dtypes.float32, "nmem")
    b = Buffer("b", (16,), dtypes.float32, "nmem")
    r, x, c = Var("r"), Var("x"), Var("c")
    at = r * 64 + x * 16 + c
    body = loop(r, 8, loop(x, 4, loop(c, 16, Store(y, (at,), y[at] + b[bias_index(r, x, c)]))))
    return marked("bias", (y, b), body, "vcycadd")


def test_an_operand_indexed_by_some_of_the_destinations_variables_is_broadcast_along_the_others() -> None:
    """The cycle add ``dst[r, c] = a[r, c] + b[c]``: the tile's rows (r and x merged: 32) are its count, the
    bias steps 0 along them; the same bias read along the rows (b[r]) is no such instruction."""
    (found,) = insns(tensorized(_bias_nest(lambda r, x, c: c)))
    assert str(found) == "diannao.vcycadd(count=32, m=16, dst=y[0], a=y[0], b=b[0])"
    (why,) = unmatched(tensorize(_bias_nest(lambda r, x, c: r * 2), DIANNAO), DIANNAO)
    assert "b steps 2 along dimension 0, which it is not indexed by" in why.reason


def test_contiguous_nests_merge_into_one_dimension() -> None:
    src = Buffer("A", (5, 7, 9), dtypes.float32)
    dst = Buffer("L", (315,), dtypes.float32, "nmem")
    i, j, k = Var("i"), Var("j"), Var("k")
    body = loop(i, 5, loop(j, 7, loop(k, 9, Store(dst, (i * 63 + j * 9 + k,), src[i, j, k]))))
    func = PrimFunc("f", (src,), _alloc(dst, Attr("pragma_intrin", "copy", body)))
    found = insns(tensorize(func, DIANNAO))
    assert [str(x) for x in found] == [
        "diannao.memcpy(dst_space=2, src_space=0, len=1260, count=1, dst_stride=1260, src_stride=1260, "
        "dst=L[0], src=A[0])"
    ]


def test_strided_copy_extracts_both_strides() -> None:
    """A 4 x 6 block out of a 10 x 16 i16 matrix, at row 3 column 5, into a dense local buffer."""
    src = Buffer("A", (10, 16), dtypes.int16)
    dst = Buffer("L", (24,), dtypes.int16, "nmem")
    out = Buffer("B", (24,), dtypes.int16)
    r, c = Var("r"), Var("c")
    copy = loop(r, 4, loop(c, 6, Store(dst, (r * 6 + c,), src[r + 3, c + 5])))
    back = loop(r, 24, Store(out, (r,), dst[r]))
    func = PrimFunc("f", (src, out), Allocate(dst, seq(Attr("pragma_intrin", "memcpy", copy), back)))
    after = tensorized(func)
    (found,) = insns(after)
    assert str(found) == (
        "diannao.memcpy(dst_space=2, src_space=0, len=12, count=4, dst_stride=12, src_stride=32, "
        "dst=L[0], src=A[53])"
    )
    a = np.arange(160, dtype=np.int16).reshape(10, 16)
    b = np.zeros(24, np.int16)
    run(after, [a, b])
    np.testing.assert_array_equal(b, a[3:7, 5:11].reshape(-1))


# --------------------------------------------------------------------------------------------------
# 3. what stays scalar, and why


def _alloc(buf: Buffer, body) -> Allocate:
    return Allocate(buf, body)


def test_vector_count_that_breaks_a_divisibility_rule_stays_scalar() -> None:
    a = Buffer("a", (64,), dtypes.float32, "nmem")
    i = Var("i")
    func = marked("relu", (a,), loop(i, 14, Store(a, (i,), max_(a[i], 0.0))), "relu")
    after = tensorize(func, DIANNAO)
    assert insns(after) == []
    (why,) = unmatched(after, DIANNAO)
    assert why.instruction == "relu"
    assert why.constraint is not None and why.constraint.kind == "divisible"
    assert "n % VECTOR_ELEMS == 0" in why.reason and "n = 14" in why.reason


def test_a_byte_copy_must_be_contiguous_innermost() -> None:
    src = Buffer("A", (64,), dtypes.float32)
    dst = Buffer("L", (32,), dtypes.float32, "nmem")
    i = Var("i")
    func = PrimFunc("f", (src,), _alloc(dst, Attr("pragma_intrin", "memcpy",
                                                   loop(i, 32, Store(dst, (i,), src[i * 2])))))
    (why,) = unmatched(tensorize(func, DIANNAO), DIANNAO)
    assert "not contiguous" in why.reason


def test_vector_operands_must_be_in_nmem() -> None:
    x, y, z = (Buffer(n, (64,), dtypes.float32) for n in "XYZ")
    i = Var("i")
    func = marked("add", (x, y, z), loop(i, 64, Store(z, (i,), x[i] + y[i])), "vadd")
    (why,) = unmatched(tensorize(func, DIANNAO), DIANNAO)
    assert why.reason == "operand dst must be in NMEM, but Z is in GMEM"


def test_unknown_marks_report_the_closest_instruction() -> None:
    a = Buffer("a", (64,), dtypes.float32, "nmem")
    i = Var("i")
    func = marked("f", (a,), loop(i, 64, Store(a, (i,), a[i] * 3.0)), "scale")
    (why,) = unmatched(tensorize(func, DIANNAO), DIANNAO)
    assert why.instruction != "scale" and "(the closest match to mark 'scale')" in why.reason
