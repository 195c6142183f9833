"""The CPU backend (compiler/backend/llvm.py): compiled code computes exactly what the interpreter computes.

Every case builds a function, runs it through the reference interpreter and through the LLVM build on the
same inputs, and compares bit for bit; the parts of the build that matter for speed (vector IR for vectorized
loops, threads for parallel loops, intrinsics for tensor instructions) are checked in the generated IR.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import isa
from compiler import interp, te
from compiler.arith.float_bounds import float_bounds
from compiler.backend.llvm import build, cpu_unsupported, plan
from compiler.backend.llvm_operands import runs_on_cpu
from compiler.errors import CodegenError, CpuRuntimeError, InterpError
from compiler.ir import (
    EQ,
    Allocate,
    Buffer,
    Cast,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    Max,
    Min,
    PrimFunc,
    Region,
    Select,
    Store,
    TensorInsn,
    Var,
    const,
    dtypes,
    if_then_else,
    seq,
)
from compiler.pipeline import build as lower_and_run
from compiler.schedule import create_schedule

N = 64


def loop(var: Var, extent: int, body, kind: ForKind = ForKind.SERIAL) -> For:
    return For(var, const(0), const(extent), body, kind)


def same_as_interpreter(func: PrimFunc, *arrays: np.ndarray, threads: int = 2) -> list[np.ndarray]:
    """Run ``func`` both ways on copies of ``arrays``; every array must end bit-identical; the JIT's."""
    want = [a.copy() for a in arrays]
    got = [a.copy() for a in arrays]
    interp.run(func, want)
    build(func, threads=threads)(*got)
    for p, x, y in zip(func.params, want, got, strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8), err_msg=f"parameter {p.name}")
    return got


def edge_values(dt: dtypes.DType, rng: np.random.Generator) -> np.ndarray:
    """N values of ``dt``: extremes, zeros, signs, and random ones (NaN and infinities for floats)."""
    if dt.is_bool:
        return rng.integers(0, 2, N).astype(bool)
    if dt.is_int:
        info = np.iinfo(dt.numpy)
        special = [info.min, info.max, 0, 1, -1 if dt.kind == "int" else 2, info.min + 1, info.max - 1]
        values = rng.integers(info.min, info.max, N, endpoint=True, dtype=np.int64)
        values[: len(special)] = special
        return values.astype(dt.numpy)
    values = (rng.standard_normal(N) * 100).astype(np.float32)
    values[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.5, 65504.0]
    if dt == dtypes.bfloat16:
        values = dtypes.round_bfloat16(values)
    return values.astype(dt.numpy)


INT_TYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64]
FLOAT_TYPES = [dtypes.float16, dtypes.bfloat16, dtypes.float32]


@pytest.mark.parametrize("dt", INT_TYPES + FLOAT_TYPES, ids=str)
def test_arithmetic_min_max_and_compares_of_every_dtype(dt) -> None:
    a, b = Buffer("A", (N,), dt), Buffer("B", (N,), dt)
    outs = [Buffer(f"O{k}", (N,), dt) for k in range(5)] + [Buffer("L", (N,), dtypes.bool_)]
    i = Var("i")
    x, y = a[i], b[i]
    body = seq(
        Store(outs[0], (i,), x + y), Store(outs[1], (i,), x - y), Store(outs[2], (i,), x * y),
        Store(outs[3], (i,), Min(x, y)), Store(outs[4], (i,), Max(x, y)),
        Store(outs[5], (i,), (x < y) | EQ(x, y)),
    )
    func = PrimFunc("f", (a, b, *outs), loop(i, N, body))
    rng = np.random.default_rng(0)
    inputs = [edge_values(dt, rng), edge_values(dt, rng)[::-1].copy()]
    zeros = [np.zeros(N, o.dtype.numpy) for o in outs]
    same_as_interpreter(func, *inputs, *zeros)


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64], ids=str)
def test_floor_division_and_modulo_round_toward_minus_infinity(dt) -> None:
    a, b = Buffer("A", (N,), dt), Buffer("B", (N,), dt)
    q, r = Buffer("Q", (N,), dt), Buffer("R", (N,), dt)
    i = Var("i")
    func = PrimFunc("f", (a, b, q, r), loop(i, N, seq(Store(q, (i,), FloorDiv(a[i], b[i])),
                                                      Store(r, (i,), FloorMod(a[i], b[i])))))
    rng = np.random.default_rng(1)
    divisors = edge_values(dt, rng)
    divisors[divisors == 0] = 3
    same_as_interpreter(func, edge_values(dt, rng), divisors, np.zeros(N, dt.numpy), np.zeros(N, dt.numpy))


@pytest.mark.parametrize("divisor", [7, -4, -1])
def test_floor_division_by_constants(divisor: int) -> None:
    a, q, r = (Buffer(name, (N,), dtypes.int32) for name in "AQR")
    i = Var("i")
    body = seq(Store(q, (i,), a[i] // divisor), Store(r, (i,), a[i] % divisor))
    func = PrimFunc("f", (a, q, r), loop(i, N, body))
    values = edge_values(dtypes.int32, np.random.default_rng(2))
    same_as_interpreter(func, values, *np.zeros((2, N), np.int32))


ALL_TYPES = INT_TYPES + FLOAT_TYPES + [dtypes.bool_]
CASTS = [(s, d) for s in ALL_TYPES for d in ALL_TYPES if s != d and not (s.is_float and d.is_int)]


@pytest.mark.parametrize(("src", "dst"), CASTS, ids=lambda d: str(d))
def test_casts_between_every_pair_of_dtypes(src, dst) -> None:
    a, o = Buffer("A", (N,), src), Buffer("O", (N,), dst)
    i = Var("i")
    func = PrimFunc("f", (a, o), loop(i, N, Store(o, (i,), Cast(a[i], dst))))
    same_as_interpreter(func, edge_values(src, np.random.default_rng(3)), np.zeros(N, dst.numpy))


@pytest.mark.parametrize("dst", INT_TYPES, ids=str)
def test_float_to_int_casts_truncate_and_fault_out_of_range(dst) -> None:
    a, o = Buffer("A", (4,), dtypes.float32), Buffer("O", (4,), dst)
    i = Var("i")
    func = PrimFunc("f", (a, o), loop(i, 4, Store(o, (i,), Cast(a[i], dst))))
    same_as_interpreter(func, np.array([1.9, -0.5, 0.0, 2.5 if dst.kind == "uint" else -3.7], np.float32),
                        np.zeros(4, dst.numpy))
    with pytest.raises(CpuRuntimeError, match="cast out of range"):
        build(func)(np.array([0, 1, np.nan, 3], np.float32), np.zeros(4, dst.numpy))


@pytest.mark.parametrize("dst", [dtypes.int32, dtypes.uint8, dtypes.int8], ids=str)
def test_a_clamped_float_casts_with_a_nan_check_alone(dst) -> None:
    """``min(max(x, lo), hi)`` (a requantization's clamp, then its rounding constant added and taken off)
    lies in [lo, hi] unless x is nan: the cast converts it straight from float32, no range check in double,
    the same values as the interpreter's, and a nan still faults."""
    a, o = Buffer("A", (N,), dtypes.float32), Buffer("O", (N,), dst)
    i = Var("i")
    lo, hi = (0.0, 255.0) if dst.kind == "uint" else (-128.0, 127.0)
    clamped = Min(Max(a[i] * FloatImm(0.37), FloatImm(lo)), FloatImm(hi))
    rounded = (clamped + FloatImm(12582912.0)) - FloatImm(12582912.0)
    func = PrimFunc("f", (a, o), loop(i, N, Store(o, (i,), Cast(rounded, dst)), ForKind.VECTORIZED))
    assert "double" not in build(func).llvm_ir
    values = np.random.default_rng(4).uniform(-2000, 2000, N).astype(np.float32)
    values[:3] = [np.inf, -np.inf, 0.5]
    same_as_interpreter(func, values, np.zeros(N, dst.numpy))
    with pytest.raises(CpuRuntimeError, match="cast of nan"):
        build(func)(np.where(np.arange(N) == 5, np.nan, values).astype(np.float32), np.zeros(N, dst.numpy))


@pytest.mark.parametrize("bound", [-3.0, 252.0, 0.0, -0.0, math.inf])
def test_min_and_max_by_a_constant_keep_numpys_nan_and_signed_zero_rules(bound: float) -> None:
    """min(a, c) and max(a, c) by a constant c (one vminps/vmaxps where c is a nonzero finite number) equal
    the interpreter's (numpy's) on nan, infinities, signed zeros and the constant itself."""
    a, lo, hi = Buffer("A", (N,), dtypes.float32), Buffer("L", (N,), dtypes.float32), Buffer("H", (N,),
                                                                                            dtypes.float32)
    i = Var("i")
    body = seq(Store(lo, (i,), Min(a[i], FloatImm(bound))), Store(hi, (i,), Max(a[i], FloatImm(bound))))
    func = PrimFunc("f", (a, lo, hi), loop(i, N, body, ForKind.VECTORIZED))
    values = np.random.default_rng(5).uniform(-300, 300, N).astype(np.float32)
    values[:7] = [np.nan, np.inf, -np.inf, 0.0, -0.0, bound, -bound]
    same_as_interpreter(func, values, np.zeros(N, np.float32), np.zeros(N, np.float32))


def test_float_bounds_follow_clamps_constants_and_integer_conversions() -> None:
    x = Var("x", dtypes.float32)
    assert float_bounds(x) is None and float_bounds(x + FloatImm(1.0)) is None
    assert float_bounds(Min(Max(x, FloatImm(-3.0)), FloatImm(252.0))) == (-3.0, 252.0)
    assert float_bounds(Max(x, FloatImm(0.0))) == (0.0, math.inf)
    low, high = float_bounds(Cast(Var("k", dtypes.int8), dtypes.float32) - FloatImm(0.5))
    assert low <= -128.5 and 126.5 <= high < 127


def test_select_and_lazy_if_then_else_guard_out_of_range_loads() -> None:
    a, o = Buffer("A", (N,), dtypes.float32), Buffer("O", (N + 4,), dtypes.float32)
    i = Var("i")
    padded = if_then_else((i >= 2) & (i < N + 2), a[i - 2], 0.0)
    func = PrimFunc("f", (a, o), loop(i, N + 4, Store(o, (i,), Select(i < 10, padded * 2.0, padded))))
    values = edge_values(dtypes.float32, np.random.default_rng(4))
    same_as_interpreter(func, values, np.zeros(N + 4, np.float32))


def test_guards_allocations_lets_and_unrolled_loops() -> None:
    a, o = Buffer("A", (8, 8), dtypes.int32), Buffer("O", (8,), dtypes.int32)
    acc = Buffer("acc", (8,), dtypes.int32, "local")
    big = Buffer("big", (300_000,), dtypes.int32, "local")  # past the stack limit: malloc'ed
    i, j, k = Var("i"), Var("j"), Var("k")
    body = Allocate(acc, Allocate(big, seq(
        loop(j, 8, Store(acc, (j,), const(0)), ForKind.UNROLLED),
        loop(j, 8, loop(k, 8, IfThenElse(a[j, k] > 0, Store(acc, (j,), acc[j] + a[j, k] * 3),
                                         Store(acc, (j,), acc[j] - 1)), ForKind.UNROLLED)),
        Store(big, (const(299_999),), acc[7]),
        loop(j, 8, Store(o, (j,), acc[j] + big[299_999])),
    )))
    func = PrimFunc("f", (a, o), loop(i, 2, body, ForKind.PARALLEL))
    same_as_interpreter(func, np.random.default_rng(5).integers(-9, 9, (8, 8)).astype(np.int32),
                        np.zeros(8, np.int32))


def _vector_add(kind: ForKind) -> PrimFunc:
    A = te.placeholder((32, 48), "float32", "A")
    B = te.placeholder((32, 48), "float32", "B")
    C = te.compute((32, 48), lambda i, j: A[i, j] * B[i, j] + A[i, j], name="C")
    s = create_schedule(C)
    _, inner = s[C].split(C.op.axis[1], 16)
    if kind is ForKind.VECTORIZED:
        s[C].vectorize(inner)
    s[C].parallel(C.op.axis[0])
    return lower_and_run(s, [A, B, C])


def test_vectorized_loops_become_vector_loads_and_parallel_loops_threads() -> None:
    func = _vector_add(ForKind.VECTORIZED)
    kernel = build(func)
    assert "load <16 x float>" in kernel.llvm_ir and "store <16 x float>" in kernel.llvm_ir
    (seg,) = plan(func)[1]
    assert seg.parallel is not None and seg.iterations == 32
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 32 * 48)).astype(np.float32)
    for threads in (1, 2):
        same_as_interpreter(func, a, b, np.zeros(32 * 48, np.float32), threads=threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_time_runs_the_whole_kernel_back_to_back_in_a_native_loop(threads: int) -> None:
    """Every call of the timing loop runs every segment (a parallel one on every slice): an increment of each
    element counts the calls, the same number for all."""
    o = Buffer("O", (32 * 48,), dtypes.int32)
    i = Var("i")
    func = PrimFunc("count", (o,), loop(i, 32 * 48, Store(o, (i,), o[i] + 1), ForKind.PARALLEL))
    kernel = build(func)
    out = np.zeros(32 * 48, np.int32)
    seconds = kernel.time(out, min_time=0.002, repeats=3, threads=threads)
    # a time, sane for 1,536 increments even on a loaded 2-core machine (how fast is benchmarks/' business)
    assert 0 < seconds < 0.1 and out.min() == out.max() > 3
    with pytest.raises(CpuRuntimeError, match="time\\(\\) takes one C-contiguous, writeable numpy array"):
        kernel.time(out[::2], min_time=0.001)


def test_a_bound_call_runs_on_the_arrays_current_contents() -> None:
    """``bind`` checks the arrays once; each call then computes on what they hold at that moment, and
    reports a fault as a call does."""
    a, o = Buffer("A", (8,), dtypes.int32), Buffer("O", (8,), dtypes.int32)
    i = Var("i")
    kernel = build(PrimFunc("gather", (a, o), loop(i, 8, Store(o, (i,), a[a[i]]))))
    data, out = np.arange(8, dtype=np.int32)[::-1].copy(), np.zeros(8, np.int32)
    call = kernel.bind(data, out)
    call()
    np.testing.assert_array_equal(out, data[data])
    data[:] = np.arange(8)
    call()
    np.testing.assert_array_equal(out, np.arange(8))
    data[0] = 9
    with pytest.raises(CpuRuntimeError, match=r"out-of-bounds access in 'A\[A\[i\]\]'"):
        call()
    with pytest.raises(CpuRuntimeError, match="bind\\(\\) takes one C-contiguous"):
        kernel.bind(data.astype(np.int64), out)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_bound_call_runs_every_slice_of_a_parallel_segment_once(threads: int) -> None:
    """A bound call is one native call of every segment (a parallel one cut into a slice per thread): an
    increment of each element counts the calls, the same number for all."""
    o = Buffer("O", (32 * 48,), dtypes.int32)
    i = Var("i")
    kernel = build(PrimFunc("count", (o,), loop(i, 32 * 48, Store(o, (i,), o[i] + 1), ForKind.PARALLEL)),
                   threads=threads)
    out = np.zeros(32 * 48, np.int32)
    call = kernel.bind(out)
    for _ in range(3):
        call()
    np.testing.assert_array_equal(out, np.full(32 * 48, 3))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_call_on_many_sets_of_arrays_runs_the_kernel_once_on_each(threads: int) -> None:
    """``bind_each``: one native call runs every segment (a parallel one whole, on one thread) once on each
    set of arrays, the sets shared among the threads (attention's heads, a GEMM each); a fault in any set
    is reported as a call's."""
    a, o = Buffer("A", (8,), dtypes.int32), Buffer("O", (8,), dtypes.int32)
    i, j = Var("i"), Var("j")
    body = seq(loop(i, 8, Store(o, (i,), a[a[i]]), ForKind.PARALLEL), loop(j, 8, Store(o, (j,), o[j] * 2)))
    kernel = build(PrimFunc("gather", (a, o), body), threads=threads)
    sets = [(np.roll(np.arange(8, dtype=np.int32), s), np.zeros(8, np.int32)) for s in range(5)]
    call = kernel.bind_each(sets)
    for _ in range(2):
        call()
    for data, out in sets:
        np.testing.assert_array_equal(out, 2 * data[data])
    sets[3][0][2] = 8
    with pytest.raises(CpuRuntimeError, match=r"out-of-bounds access in 'A\[A\[i\]\]'"):
        call()


def test_time_reports_a_fault_inside_the_loop_as_a_call_does() -> None:
    a, o = Buffer("A", (8,), dtypes.int32), Buffer("O", (8,), dtypes.int32)
    i = Var("i")
    kernel = build(PrimFunc("f", (a, o), loop(i, 8, Store(o, (i,), a[a[i]]))))
    with pytest.raises(CpuRuntimeError, match=r"out-of-bounds access in 'A\[A\[i\]\]'"):
        kernel.time(np.full(8, 9, np.int32), np.zeros(8, np.int32), min_time=0.001)


def test_vectorized_gathers_and_lane_dependent_bodies_stay_correct() -> None:
    a, o = Buffer("A", (64,), dtypes.int32), Buffer("O", (64,), dtypes.int32)
    i, j = Var("i"), Var("j")
    strided = loop(j, 16, Store(o, (i * 16 + j,), a[j * 4 % 64] + a[i]), ForKind.VECTORIZED)
    shifted = loop(j, 16, Store(o, (j + 1,), o[j] + 1), ForKind.VECTORIZED)  # reads the previous lane's write
    func = PrimFunc("f", (a, o), seq(loop(i, 4, strided), shifted))
    same_as_interpreter(func, np.arange(64, dtype=np.int32), np.zeros(64, np.int32))


def test_run_time_faults_are_typed_errors_naming_the_statement() -> None:
    a, o = Buffer("A", (8,), dtypes.int32), Buffer("O", (8,), dtypes.int32)
    i = Var("i")
    func = PrimFunc("f", (a, o), loop(i, 8, Store(o, (i,), a[a[i]] // a[i])))
    with pytest.raises(CpuRuntimeError, match=r"out-of-bounds access in 'A\[A\[i\]\]'"):
        build(func)(np.full(8, 9, np.int32), np.zeros(8, np.int32))
    with pytest.raises(CpuRuntimeError, match="division by zero"):
        build(func)(np.zeros(8, np.int32), np.zeros(8, np.int32))
    with pytest.raises(InterpError):
        interp.run(func, [np.zeros(8, np.int32), np.zeros(8, np.int32)])


def test_bad_arguments_are_typed_errors() -> None:
    a, o = Buffer("A", (8,), dtypes.int32), Buffer("O", (8,), dtypes.int32)
    i = Var("i")
    kernel = build(PrimFunc("f", (a, o), loop(i, 8, Store(o, (i,), a[i]))))
    with pytest.raises(CpuRuntimeError, match="argument 1, 'O' to f: expected dtype int32"):
        kernel(np.zeros(8, np.int32), np.zeros(8, np.float32))
    with pytest.raises(CpuRuntimeError, match="expected 2 arguments"):
        kernel(np.zeros(8, np.int32))
    shared = np.zeros(8, np.int32)
    with pytest.raises(CpuRuntimeError, match="share memory"):
        kernel(shared, shared)
    out = np.zeros((8, 2), np.int32)[:, 0]  # not contiguous: worked on as a copy, written back
    kernel(np.arange(8, dtype=np.int32), out)
    assert out.tolist() == list(range(8))


def test_accelerator_instructions_cannot_run_on_the_cpu() -> None:
    x = Buffer("X", (64,), dtypes.float32)
    insn = TensorInsn(isa.load_isa("diannao"), "vadd", (),
                      (Region("dst", x, const(0)), Region("a", x, const(0)), Region("b", x, const(0))))
    func = PrimFunc("f", (x,), insn)
    assert "not an instruction of this CPU" in cpu_unsupported(func)
    with pytest.raises(CodegenError, match="diannao.vadd"):
        build(func)


needs_vnni = pytest.mark.skipif(not runs_on_cpu(TensorInsn(isa.load_isa("x86"), "vpdpbusd_512", (), ())),
                                reason="this CPU has no AVX-512 VNNI")


@needs_vnni
def test_vpdpbusd_with_broadcast_and_gathered_operands_matches_the_spec() -> None:
    """UNIT's conv operands: a broadcast 4 bytes, b 16 rows of 4 bytes at a row stride, c/d 16 int32 lanes."""
    data = Buffer("data", (32,), dtypes.uint8)
    wgt = Buffer("wgt", (16 * 8,), dtypes.int8)
    flat_out = Buffer("out", (32,), dtypes.int32)
    k = Var("k")
    insn = TensorInsn(isa.load_isa("x86"), "vpdpbusd_512", (), (
        Region("d", flat_out, k * 16), Region("c", flat_out, k * 16),
        Region("a", data, k * 4, (16, 4), (const(0), const(1))),
        Region("b", wgt, k * 4, (16, 4), (const(8), const(1))),
    ))
    func = PrimFunc("f", (data, wgt, flat_out), loop(k, 2, insn))
    kernel = build(func)
    assert "llvm.x86.avx512.vpdpbusd.512" in kernel.llvm_ir
    rng = np.random.default_rng(7)
    data_v = rng.integers(0, 256, 32).astype(np.uint8)
    wgt_v = rng.integers(-128, 128, 128).astype(np.int8)
    acc = rng.integers(-1000, 1000, 32).astype(np.int32)
    got = same_as_interpreter(func, data_v, wgt_v, acc)[2]
    # lane i of tile k: acc + sum_j data[4k + j] * wgt[4k + 8i + j], computed here without the spec
    want = [acc[16 * k + i] + sum(int(data_v[4 * k + j]) * int(wgt_v[4 * k + 8 * i + j]) for j in range(4))
            for k in range(2) for i in range(16)]
    assert got.tolist() == want


def test_quiet_blas_holds_numpys_blas_to_one_thread_and_restores_it() -> None:
    """While a network's CPU kernels run (tandem/network/run.py), OpenBLAS keeps to one thread: its idle
    workers spin, and on two cores one held the core a kernel's second thread needed (8 ms per call)."""
    from threadpoolctl import threadpool_info

    from compiler.backend.blas import quiet_blas

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    with quiet_blas():
        assert all(n == 1 for n in blas_threads())
    assert blas_threads() == before
