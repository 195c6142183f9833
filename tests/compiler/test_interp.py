"""Tests of the reference interpreter (``compiler.interp``) on loop IR built by hand."""

from __future__ import annotations

import math
import re
import struct

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from compiler.errors import InterpError
from compiler.interp import evaluate, run
from compiler.ir import (
    EQ,
    Allocate,
    Attr,
    Buffer,
    Call,
    Cast,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Let,
    Max,
    Min,
    PrimFunc,
    Reduce,
    ReduceCombiner,
    Select,
    Store,
    Var,
    cast,
    const,
    dtypes,
    if_then_else,
    seq,
)

RNG_SEED = 42


def loop(var: Var, extent: int, body, *, lo: int = 0, kind=ForKind.SERIAL, thread: str = "") -> For:
    return For(var, const(lo), const(extent), body, kind, thread)


def ewise(name: str, shape: tuple[int, int], dt, op) -> PrimFunc:
    """C[i, j] = op(A[i, j], B[i, j]) over a 2-D shape."""
    a, b, c = (Buffer(x, shape, dtypes.dtype(dt)) for x in "ABC")
    i, j = Var("i"), Var("j")
    body = loop(i, shape[0], loop(j, shape[1], Store(c, (i, j), op(a[i, j], b[i, j]))))
    return PrimFunc(name, (a, b, c), body)


def gemm_i8(m: int, n: int, k: int) -> PrimFunc:
    """C = A @ B with int8 inputs and int32 accumulation, zeroing C first."""
    a = Buffer("A", (m, k), dtypes.int8)
    b = Buffer("B", (k, n), dtypes.int8)
    c = Buffer("C", (m, n), dtypes.int32)
    i, j, r = Var("i"), Var("j"), Var("k")
    update = Store(c, (i, j), c[i, j] + cast(a[i, r], "int32") * cast(b[r, j], "int32"))
    body = loop(i, m, loop(j, n, seq(Store(c, (i, j), const(0)), loop(r, k, update))))
    return PrimFunc("gemm", (a, b, c), body)


def copy_1d(n: int, dt, value_of) -> tuple[PrimFunc, Buffer, Buffer, Var]:
    """B[i] = value_of(A, i) for i in range(n)."""
    a, b = Buffer("A", (n,), dtypes.dtype(dt)), Buffer("B", (n,), dtypes.dtype(dt))
    i = Var("i")
    return PrimFunc("copy", (a, b), loop(i, n, Store(b, (i,), value_of(a, i)))), a, b, i


# --------------------------------------------------------------------------------------------------
# Arithmetic against numpy


def test_elementwise_add_f32_matches_numpy():
    rng = np.random.default_rng(RNG_SEED)
    a, b = (rng.standard_normal((14, 14), dtype=np.float32) for _ in range(2))
    c = np.zeros((14, 14), np.float32)
    run(ewise("add", (14, 14), "float32", lambda x, y: x + y), [a, b, c])
    np.testing.assert_array_equal(c, a + b)


def test_int8_add_wraps_like_numpy():
    a = np.array([[127, -128, 100, -1]], np.int8)
    b = np.array([[1, -1, 100, 1]], np.int8)
    c = np.zeros_like(a)
    run(ewise("add", (1, 4), "int8", lambda x, y: x + y), [a, b, c])
    np.testing.assert_array_equal(c, a + b)
    assert c.tolist() == [[-128, 127, -56, 0]]


def test_int8_gemm_int32_accumulation_is_bit_exact():
    rng = np.random.default_rng(RNG_SEED)
    a = rng.integers(-128, 128, (12, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 10), dtype=np.int8)
    a[0, :] = -128  # extreme products
    b[:, 0] = -128
    c = np.full((12, 10), 7, np.int32)  # the program zeroes C itself
    run(gemm_i8(12, 10, 16), [a, b, c])
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_uint8_sub_wraps_like_numpy():
    a = np.array([[3, 0, 255, 10]], np.uint8)
    b = np.array([[5, 1, 0, 10]], np.uint8)
    c = np.zeros_like(a)
    run(ewise("sub", (1, 4), "uint8", lambda x, y: x - y), [a, b, c])
    np.testing.assert_array_equal(c, a - b)
    assert c.tolist() == [[254, 255, 255, 0]]


def test_int16_mul_and_add_wrap_like_numpy():
    rng = np.random.default_rng(RNG_SEED)
    a, b = (rng.integers(-32768, 32768, (6, 7), dtype=np.int16) for _ in range(2))
    c = np.zeros_like(a)
    run(ewise("mac", (6, 7), "int16", lambda x, y: x * y + x), [a, b, c])
    np.testing.assert_array_equal(c, a * b + a)


def test_float16_rounds_after_every_op():
    rng = np.random.default_rng(RNG_SEED)
    a, b = (rng.standard_normal((5, 9)).astype(np.float16) * 30 for _ in range(2))
    a[0, 0], b[0, 0] = 2048, 1  # 2049 is not a float16: ties to even gives 2048
    c = np.zeros_like(a)
    run(ewise("fma", (5, 9), "float16", lambda x, y: x * y + x), [a, b, c])
    np.testing.assert_array_equal(c, a * b + a)
    run(ewise("add", (5, 9), "float16", lambda x, y: x + y), [a, b, c])
    assert c[0, 0] == 2048


def test_bfloat16_add_rounds_to_bfloat16():
    rng = np.random.default_rng(RNG_SEED)
    a, b = (dtypes.round_bfloat16(rng.standard_normal((4, 8), dtype=np.float32)) for _ in range(2))
    a[0, 0], b[0, 0] = 256.0, 1.0  # 257 needs 9 significant bits: rounds to 256
    c = np.zeros((4, 8), np.float32)
    run(ewise("add", (4, 8), "bfloat16", lambda x, y: x + y), [a, b, c])
    np.testing.assert_array_equal(c, dtypes.round_bfloat16(a + b))
    assert c[0, 0] == 256.0


def test_bfloat16_parameter_values_are_rounded_when_loaded():
    f, *_ = copy_1d(1, "bfloat16", lambda a, i: a[i])
    b = np.zeros(1, np.float32)
    run(f, [np.array([1.0 + 2.0**-10], np.float32), b])
    assert b[0] == 1.0


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@given(x=st.floats(allow_nan=False))
@example(x=65519.99)
@example(x=65520.0)
@example(x=3.4028235677973366e38)
@example(x=1e-310)
@example(x=float(np.finfo(np.float32).max) * (1 + 2.0**-25))
@example(x=5.9604644775390625e-08)
@example(x=2.0**-149 * 0.5)
@example(x=-0.0)
def test_float_values_round_like_dtypes_round_to(dt, x):
    v = Var("x", dtypes.dtype(dt))
    got = evaluate(v, {v: x})
    with np.errstate(over="ignore"):
        want = dtypes.round_to(x, v.dtype)
    assert struct.pack("<d", got) == struct.pack("<d", want)


def test_nan_survives_rounding():
    v = Var("x", dtypes.float16)
    assert math.isnan(evaluate(v + 1.0, {v: math.nan}))


def test_floor_div_and_mod_with_negative_operands():
    a = np.array([[7, -7, 7, -7, 0, -1]], np.int32)
    b = np.array([[2, 2, -2, -2, 3, 5]], np.int32)
    q, r = np.zeros_like(a), np.zeros_like(a)
    run(ewise("div", (1, 6), "int32", FloorDiv), [a, b, q])
    run(ewise("mod", (1, 6), "int32", FloorMod), [a, b, r])
    assert q.tolist() == [[3, -4, -4, 3, 0, -1]]
    assert r.tolist() == [[1, 1, -1, -1, 0, 4]]
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)


def test_int8_min_floordiv_minus_one_wraps():
    x = Var("x", dtypes.int8)
    assert evaluate(FloorDiv(x, const(-1, "int8")), {x: -128}) == -128


def test_division_by_zero_names_the_expression():
    a = np.array([[6, 6, 6]], np.int32)
    b = np.array([[1, 2, 0]], np.int32)
    with pytest.raises(
        InterpError, match=re.escape("division by zero in 'A[i, j]//B[i, j]' at i=0, j=2")
    ):
        run(ewise("div", (1, 3), "int32", FloorDiv), [a, b, np.zeros_like(a)])
    with pytest.raises(InterpError, match="division by zero in 'A.*%B"):
        run(ewise("mod", (1, 3), "int32", FloorMod), [a, b, np.zeros_like(a)])


def test_float_div_follows_ieee():
    x, y = Var("x", dtypes.float32), Var("y", dtypes.float32)
    assert evaluate(x / y, {x: 1.0, y: 4.0}) == 0.25
    assert evaluate(x / y, {x: -1.0, y: 0.0}) == -math.inf
    assert math.isnan(evaluate(x / y, {x: 0.0, y: 0.0}))
    assert evaluate(x / y, {x: 1.0, y: 3.0}) == float(np.float32(1.0) / np.float32(3.0))


def test_min_max_and_logic():
    x, y = Var("x"), Var("y")
    assert evaluate(Min(x, y), {x: 3, y: -2}) == -2
    assert evaluate(Max(x, y), {x: 3, y: -2}) == 3
    assert evaluate((x < y) | EQ(x, const(3)), {x: 3, y: -2}) is True
    assert evaluate((x < y) & (x > y), {x: 3, y: -2}) is False
    assert evaluate(~(x < y), {x: 3, y: -2}) is True
    f = Var("f", dtypes.float32)
    assert math.isnan(evaluate(Min(f, const(1.0, "float32")), {f: math.nan}))


# --------------------------------------------------------------------------------------------------
# Casts


def test_cast_float_to_int_truncates_toward_zero():
    a = Buffer("A", (6,), dtypes.float32)
    b = Buffer("B", (6,), dtypes.int8)
    i = Var("i")
    f = PrimFunc("trunc", (a, b), loop(i, 6, Store(b, (i,), cast(a[i], "int8"))))
    out = np.zeros(6, np.int8)
    run(f, [np.array([2.7, -2.7, 0.5, -0.5, 127.9, -128.9], np.float32), out])
    assert out.tolist() == [2, -2, 0, 0, 127, -128]


@pytest.mark.parametrize("value", [128.0, -129.0, math.inf, math.nan])
def test_cast_float_to_int_out_of_range_raises(value):
    a = Buffer("A", (2,), dtypes.float32)
    b = Buffer("B", (2,), dtypes.int8)
    i = Var("i")
    f = PrimFunc("trunc", (a, b), loop(i, 2, Store(b, (i,), cast(a[i], "int8"))))
    pattern = rf"cast of {re.escape(repr(float(value)))} to int8 is out of range \[-128, 127\] "
    with pytest.raises(InterpError, match=pattern + re.escape("in 'i8(A[i])' at i=1")):
        run(f, [np.array([1.0, value], np.float32), np.zeros(2, np.int8)])


def test_integer_and_bool_casts():
    x = Var("x")
    assert evaluate(cast(x, "int8"), {x: 200}) == -56
    assert evaluate(cast(x, "uint8"), {x: -1}) == 255
    assert evaluate(cast(x, "bool"), {x: -3}) is True
    assert evaluate(cast(cast(x, "bool"), "int32"), {x: 9}) == 1
    assert evaluate(cast(x, "float16"), {x: 2049}) == 2048.0  # ties to even


def test_int_to_float_casts_round_once():
    x = Var("x", dtypes.int64)
    # Rounding through float32 first would give 2**24 (two ties to even); one rounding goes up.
    assert evaluate(cast(x, "bfloat16"), {x: 2**24 + 2**16 + 1}) == 2**24 + 2**17
    # Rounding through a double first would give 2**54.
    assert evaluate(cast(x, "float32"), {x: 2**54 + 2**30 + 1}) == 2**54 + 2**31
    assert evaluate(cast(x, "float16"), {x: 65520}) == math.inf
    assert evaluate(cast(x, "float16"), {x: -65519}) == -65504.0
    rng = np.random.default_rng(RNG_SEED)
    for v in rng.integers(-(2**31), 2**31, 50):
        assert evaluate(cast(x, "float32"), {x: int(v)}) == float(np.float32(v))


# --------------------------------------------------------------------------------------------------
# Memory faults


def tiled_copy() -> PrimFunc:
    """B[tid*4 + i, j] = A[tid*4 + i, j] for 16 rows; A has 14, so loading row 14 faults."""
    a, b = Buffer("A", (14, 14), dtypes.float32), Buffer("B", (16, 14), dtypes.float32)
    tid, i, j = Var("tid"), Var("i"), Var("j")
    row = tid * 4 + i
    inner = loop(i, 4, loop(j, 14, Store(b, (row, j), a[row, j])))
    return PrimFunc("copy", (a, b), loop(tid, 4, inner, kind=ForKind.THREAD_BINDING, thread="core"))


def test_out_of_bounds_load_names_buffer_index_shape_and_loop_vars():
    a, b = np.ones((14, 14), np.float32), np.zeros((16, 14), np.float32)
    msg = "out-of-bounds load A[14, 0] (shape [14, 14]) at tid=3, i=2, j=0"
    with pytest.raises(InterpError, match=re.escape(msg)):
        run(tiled_copy(), [a, b])
    assert b[:14].all()  # every in-bounds row was copied before the fault


def test_out_of_bounds_store_names_buffer_index_shape_and_loop_vars():
    a, b = Buffer("A", (8,), dtypes.int32), Buffer("B", (16,), dtypes.int32)
    i, j = Var("i"), Var("j")
    f = PrimFunc("f", (a, b), loop(i, 2, loop(j, 8, Store(b, (j * 2 - i,), a[j]))))
    msg = "out-of-bounds store B[-1] (shape [16]) at i=1, j=0"
    with pytest.raises(InterpError, match=re.escape(msg)):
        run(f, [np.zeros(8, np.int32), np.zeros(16, np.int32)])


def test_negative_index_is_out_of_bounds_not_wrapped():
    f, *_ = copy_1d(4, "int32", lambda a, i: a[i - 1])
    with pytest.raises(InterpError, match=re.escape("out-of-bounds load A[-1] (shape [4]) at i=0")):
        run(f, [np.zeros(4, np.int32), np.zeros(4, np.int32)])


def test_uninitialized_read_of_allocated_buffer():
    out = Buffer("out", (16,), dtypes.int32)
    al = Buffer("AL", (16,), dtypes.int32, scope="nmem")
    i, k = Var("i"), Var("i")
    body = Allocate(
        al, seq(loop(i, 8, Store(al, (i,), i)), loop(k, 16, Store(out, (k,), al[k] * 2)))
    )
    o = np.full(16, -1, np.int32)
    msg = "read of uninitialized element AL[8] (shape [16]) at i=8"
    with pytest.raises(InterpError, match=re.escape(msg)):
        run(PrimFunc("f", (out,), body), [o])
    assert o[:8].tolist() == [0, 2, 4, 6, 8, 10, 12, 14]


def test_allocate_is_fresh_on_every_entry():
    """A value stored in one iteration's allocation is not visible in the next one's."""
    out = Buffer("out", (2,), dtypes.int32)
    al = Buffer("AL", (1,), dtypes.int32)
    i = Var("i")
    zero = const(0)
    body = IfThenElse(EQ(i, zero), Store(al, (zero,), const(5)), Store(out, (i,), al[zero]))
    f = PrimFunc("f", (out,), loop(i, 2, Allocate(al, seq(body, Store(out, (zero,), al[zero])))))
    with pytest.raises(InterpError, match=re.escape("read of uninitialized element AL[0]")):
        run(f, [np.zeros(2, np.int32)])


def test_allocated_multidim_buffer_round_trip():
    out = Buffer("out", (2, 3, 4), dtypes.float16)
    al = Buffer("AL", (2, 3, 4), dtypes.float16)
    i, j, k = Var("i"), Var("j"), Var("k")
    value = cast(i * 12 + j * 4 + k, "float16")

    def nest(stmt):
        return loop(i, 2, loop(j, 3, loop(k, 4, stmt)))

    body = Allocate(
        al, seq(nest(Store(al, (i, j, k), value)), nest(Store(out, (i, j, k), al[i, j, k])))
    )
    o = np.zeros((2, 3, 4), np.float16)
    run(PrimFunc("f", (out,), body), [o])
    np.testing.assert_array_equal(o, np.arange(24, dtype=np.float16).reshape(2, 3, 4))


# --------------------------------------------------------------------------------------------------
# Arguments


def test_bad_argument_count_shape_dtype_name_the_parameter():
    f = ewise("add", (14, 14), "float32", lambda x, y: x + y)
    ok = np.zeros((14, 14), np.float32)
    with pytest.raises(
        InterpError, match=re.escape("add: expected 3 arguments (A, B, C), but got 2")
    ):
        run(f, [ok, ok])
    msg = "argument 1, 'B' to add: expected shape [14, 14], but got [14, 13]"
    with pytest.raises(InterpError, match=re.escape(msg)):
        run(f, [ok, np.zeros((14, 13), np.float32), ok])
    msg = "argument 2, 'C' to add: expected dtype float32, but got float64"
    with pytest.raises(InterpError, match=re.escape(msg)):
        run(f, [ok, ok, np.zeros((14, 14))])
    with pytest.raises(
        InterpError, match="argument 0, 'A' to add: expected a numpy array, but got list"
    ):
        run(f, [ok.tolist(), ok, ok])
    bf = ewise("add", (2, 2), "bfloat16", lambda x, y: x + y)
    msg = "argument 0, 'A' to add: expected dtype float32 (storage of bfloat16), but got float16"
    with pytest.raises(InterpError, match=re.escape(msg)):
        run(bf, [np.zeros((2, 2), np.float16)] * 3)


def test_arguments_by_name():
    f = ewise("add", (2, 2), "int32", lambda x, y: x + y)
    a, b, c = np.ones((2, 2), np.int32), np.full((2, 2), 2, np.int32), np.zeros((2, 2), np.int32)
    run(f, {"C": c, "A": a, "B": b})
    assert (c == 3).all()
    with pytest.raises(InterpError, match=r"add: missing arguments \['B'\]"):
        run(f, {"C": c, "A": a})
    with pytest.raises(InterpError, match=r"but got unknown \['D'\]"):
        run(f, {"C": c, "A": a, "B": b, "D": b})


def test_read_only_input_is_fine_but_output_must_be_writeable():
    f = ewise("add", (2, 2), "int32", lambda x, y: x + y)
    a = np.broadcast_to(np.int32(1), (2, 2))  # read-only view
    c = np.zeros((2, 2), np.int32)
    run(f, [a, a, c])
    assert (c == 2).all()
    with pytest.raises(InterpError, match="argument 2, 'C' to add: expected a writeable array"):
        run(f, [c, c, a])


def test_non_contiguous_output_is_written_back():
    f = ewise("add", (3, 2), "int32", lambda x, y: x + y)
    a = np.arange(6, dtype=np.int32).reshape(3, 2)
    big = np.zeros((3, 4), np.int32)
    run(f, [a, a, big[:, ::2]])
    assert big.tolist() == [[0, 0, 2, 0], [4, 0, 6, 0], [8, 0, 10, 0]]


def test_aliased_arguments_see_each_others_writes():
    """In place: B and A may be the same array, so B[i] = A[i] + A[i-1] is a running sum."""
    a, b = Buffer("A", (5,), dtypes.int32), Buffer("B", (5,), dtypes.int32)
    i = Var("i")
    f = PrimFunc("scan", (a, b), loop(i, 4, Store(b, (i + 1,), a[i + 1] + a[i])))
    x = np.ones(5, np.int32)
    run(f, [x, x])
    assert x.tolist() == [1, 2, 3, 4, 5]


# --------------------------------------------------------------------------------------------------
# Control flow and binding


def test_select_evaluates_both_branches_but_if_then_else_is_lazy():
    a, b = Buffer("A", (14,), dtypes.float32), Buffer("B", (16,), dtypes.float32)
    i = Var("i")
    zero = const(0.0, "float32")

    def pad(value):
        return PrimFunc("pad", (a, b), loop(i, 16, Store(b, (i,), value)))

    x, out = np.arange(14, dtype=np.float32), np.full(16, -1, np.float32)
    with pytest.raises(
        InterpError, match=re.escape("out-of-bounds load A[14] (shape [14]) at i=14")
    ):
        run(pad(Select(i < 14, a[i], zero)), [x, out])
    run(pad(if_then_else(i < 14, a[i], zero)), [x, out])
    np.testing.assert_array_equal(out, np.concatenate([x, [0, 0]]))


@pytest.mark.parametrize(
    ("kind", "thread"),
    [
        (ForKind.THREAD_BINDING, "core"),
        (ForKind.PARALLEL, ""),
        (ForKind.UNROLLED, ""),
        (ForKind.VECTORIZED, ""),
    ],
)
def test_every_loop_kind_runs_all_iterations(kind, thread):
    out = Buffer("out", (4, 3), dtypes.int32)
    t, i = Var("t"), Var("i")
    body = loop(i, 3, Store(out, (t, i), t * 10 + i))
    o = np.full((4, 3), -1, np.int32)
    run(PrimFunc("f", (out,), loop(t, 4, body, kind=kind, thread=thread)), [o])
    assert o.tolist() == [[0, 1, 2], [10, 11, 12], [20, 21, 22], [30, 31, 32]]


def test_let_binds_and_shadows_lexically():
    out = Buffer("out", (2, 4), dtypes.int32)
    i, x = Var("i"), Var("x")
    inner = Let(x, x * 10, Store(out, (const(0), i), x))
    body = loop(i, 4, Let(x, i + 1, seq(inner, Store(out, (const(1), i), x))))
    o = np.zeros((2, 4), np.int32)
    run(PrimFunc("f", (out,), body), [o])
    assert o.tolist() == [[10, 20, 30, 40], [1, 2, 3, 4]]


def test_loop_with_nonzero_min():
    out = Buffer("out", (8,), dtypes.int32)
    i = Var("i")
    o = np.full(8, -1, np.int32)
    run(PrimFunc("f", (out,), loop(i, 4, Store(out, (i,), i * i), lo=3)), [o])
    assert o.tolist() == [-1, -1, -1, 9, 16, 25, 36, -1]


def test_loop_bounds_are_evaluated_once_at_entry():
    """The inner extent reads the outer variable: a triangle."""
    out = Buffer("out", (4, 4), dtypes.int32)
    i, j = Var("i"), Var("j")
    inner = For(j, i, const(4) - i, Store(out, (i, j), const(1)))
    o = np.zeros((4, 4), np.int32)
    run(PrimFunc("f", (out,), loop(i, 4, inner)), [o])
    assert o.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1]]


def test_if_then_else_attr_and_evaluate_statements():
    out = Buffer("out", (4,), dtypes.int32)
    i = Var("i")
    branch = IfThenElse(i < 2, Store(out, (i,), const(1)), Store(out, (i,), const(2)))
    effect = Evaluate(if_then_else(i < 2, i, const(0)))
    body = Attr("pragma_unroll", 1, loop(i, 4, seq(effect, branch)))
    o = np.zeros(4, np.int32)
    run(PrimFunc("f", (out,), body), [o])
    assert o.tolist() == [1, 1, 2, 2]


# --------------------------------------------------------------------------------------------------
# Static faults and evaluate()


def test_unbound_variable_is_reported_before_running():
    out = Buffer("out", (4,), dtypes.int32)
    i, n = Var("i"), Var("n")
    o = np.zeros(4, np.int32)
    f = PrimFunc(
        "f", (out,), seq(Store(out, (const(0),), const(1)), loop(i, 4, Store(out, (i,), n)))
    )
    with pytest.raises(InterpError, match="variable 'n' is not bound"):
        run(f, [o])
    assert not o.any()  # nothing ran
    with pytest.raises(InterpError, match="variable 'i' is not bound"):
        evaluate(i + 1)


def test_reduce_unknown_intrinsic_and_unknown_buffer_are_errors():
    k = Var("k")
    a = Buffer("A", (4,), dtypes.int32)
    red = Reduce(ReduceCombiner.SUM, a[k], (k,), ((0, 4),))
    with pytest.raises(InterpError, match="Reduce must be lowered before interpretation"):
        evaluate(red, buffers={a: np.zeros(4, np.int32)})
    with pytest.raises(InterpError, match="unknown intrinsic 'erf'"):
        evaluate(Call("erf", (const(1.0, "float32"),), dtypes.float32))
    with pytest.raises(InterpError, match="buffer 'A' is neither a parameter nor allocated"):
        evaluate(a[const(0)])


def test_evaluate_with_env_and_buffers():
    a = Buffer("A", (2, 3), dtypes.int8)
    i, j = Var("i"), Var("j")
    arr = np.array([[1, 2, 3], [4, 5, 127]], np.int8)
    assert evaluate(a[i, j] + a[i, j], {i: 1, j: 2}, {a: arr}) == -2
    assert evaluate(cast(a[i, j], "int32") * 2, {i: 1, j: 2}, {a: arr}) == 254
    assert evaluate(FloatImm(0.1, dtypes.float32)) == float(np.float32(0.1))
    assert evaluate(IntImm(1, dtypes.bool_)) is True
    assert evaluate(Cast(const(3), dtypes.float32) / 2.0) == 1.5
    with pytest.raises(InterpError, match="buffer 'A': expected shape"):
        evaluate(a[i, j], {i: 0, j: 0}, {a: np.zeros((3, 2), np.int8)})
