"""Tests of the DianNao backend (compiler/backend/diannao.py): flat loop IR -> SPMD programs for sim/diannao.

Every program test compiles a function, runs it on the simulated card and compares every parameter array,
bit for bit, with the reference interpreter (compiler.interp.run) on the same function and the same random
inputs; where numpy says the same thing simply, the result is also checked against numpy.

1. Functions from the real front end (te + schedule + pipeline.build): cached reads into NMEM, non-dividing
   splits bound to 1, 3, 4, 8 and 16 cores, guards and scalar code for add/sub/mul/max/relu in i8, i32, f16
   and f32.
2. Scalar code: f16 arithmetic computed in f32 and rounded once is numpy's f16; narrow integers wrap before
   they are compared; divisions by powers of two; selects, lets, casts, float constants; loops of run-time
   extent; SMEM slices per core.
3. Tensor instructions: the seed's MEMCPY example, vadd + relu in NMEM, zero fill + strided copy (padding),
   conv and qconv with weights in WMEM, copies longer or with more rows than memcpyr's fields hold.
4. Fallback counts, on-chip bytes, determinism, and the errors that name what the backend cannot compile.
"""

from __future__ import annotations

import itertools
import re
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from compiler import te
from compiler.backend import diannao as backend
from compiler.backend.diannao import DiannaoKernel, Piece, split_copy
from compiler.errors import LoweringError
from compiler.interp import run
from compiler.ir import (
    EQ,
    LE,
    LT,
    Allocate,
    And,
    Attr,
    Buffer,
    Evaluate,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    InsnField,
    Let,
    Not,
    Or,
    PrimFunc,
    Region,
    Select,
    Stmt,
    Store,
    TensorInsn,
    Var,
    cast,
    const,
    dtypes,
    if_then_else,
    max_,
    min_,
    seq,
)
from compiler.pipeline import build
from compiler.schedule import create_schedule
from sim.diannao.config import DiannaoConfig
from tandem.flows.diannao import run_kernel

RNG_SEED = 2024
SPEC = isa.load_isa("diannao")
SPACE = {name: s.id for name, s in SPEC.spaces.items()}


def codegen(func: PrimFunc, spec: isa.ISA = SPEC) -> DiannaoKernel:
    """The backend's codegen, for the built-in spec unless told otherwise."""
    return backend.codegen(func, spec)
SCOPE_SPACE = {"global": "GMEM", "nmem": "NMEM", "wmem": "WMEM", "smem": "SMEM"}


# --------------------------------------------------------------------------------------------------
# helpers


def loop(var: Var, extent, body: Stmt, lo: int = 0) -> For:
    return For(var, const(lo), extent if not isinstance(extent, int) else const(extent), body)


def on_cores(var: Var, cores: int, body: Stmt) -> For:
    return For(var, const(0), const(cores), body, ForKind.THREAD_BINDING, "core")


def vec(name: str, n: int, dt: str, scope: str = "global") -> Buffer:
    return Buffer(name, (n,), dtypes.dtype(dt), scope)


def insn(name: str, fields: dict, regions: dict) -> TensorInsn:
    """TensorInsn(SPEC, name) from {field: int or Expr} and {operand: (buffer, offset int or Expr)}."""
    return TensorInsn(
        SPEC,
        name,
        tuple(InsnField(k, const(v) if isinstance(v, int) else v) for k, v in fields.items()),
        tuple(Region(op, b, const(off) if isinstance(off, int) else off) for op, (b, off) in regions.items()),
    )


def copy(dst: Buffer, dst_off, src: Buffer, src_off, length: int, count: int = 1, dst_stride: int = 0,
         src_stride: int = 0) -> TensorInsn:
    """memcpy of ``count`` rows of ``length`` bytes; the space fields follow the buffers' scopes."""
    fields = {"dst_space": SPACE[SCOPE_SPACE[dst.scope]], "src_space": SPACE[SCOPE_SPACE[src.scope]],
              "len": length, "count": count, "dst_stride": dst_stride, "src_stride": src_stride}
    return insn("memcpy", fields, {"dst": (dst, dst_off), "src": (src, src_off)})


def sample(rng: np.random.Generator, dt: str, n: int, scale: float = 8.0) -> np.ndarray:
    np_dt = np.dtype(dt)
    if np_dt.kind == "i":
        info = np.iinfo(np_dt)
        return rng.integers(info.min, info.max, n, endpoint=True).astype(np_dt)
    return (rng.standard_normal(n) * scale).astype(np_dt)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal element for element, bit for bit (NaN only where NaN is expected, payloads aside)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind == "f":
        nan = np.isnan(expected)
        assert np.array_equal(np.isnan(actual), nan)
        actual, expected = actual[~nan], expected[~nan]
    assert actual.tobytes() == expected.tobytes(), np.nonzero(actual != expected)


def compile_and_run(func: PrimFunc, arrays: list[np.ndarray]):
    """codegen(func) run on the card on copies of ``arrays``: (kernel, result, arrays after the run)."""
    kernel = codegen(func)
    result, outputs = run_kernel(kernel, [a.copy() for a in arrays])
    return kernel, result, outputs


def compile_and_compare(func: PrimFunc, arrays: list[np.ndarray]):
    """``compile_and_run`` and the interpreter on copies of ``arrays``: every array comes back bit-equal."""
    expected = [a.copy() for a in arrays]
    run(func, expected)
    kernel, result, outputs = compile_and_run(func, arrays)
    for got, want in zip(outputs, expected, strict=True):
        assert_same_bits(got, want)
    return kernel, result, outputs


def program_insns(kernel: DiannaoKernel, name: str) -> list[isa.Insn]:
    return [i for i in kernel.program.insns if i.name == name]


# --------------------------------------------------------------------------------------------------
# 1. functions from the front end


ELEMENTWISE = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "max": max_,
    "relu_of_mul_sub": lambda x, y: max_(x * y - x, 0),  # intermediate wraps (i8) and roundings (f16)
    "relu": lambda x: max_(x, 0),
}
UNARY = {"relu"}
DTYPES = ["int8", "int32", "float16", "float32"]
CORE_COUNTS = [1, 3, 4, 8, 16]


def elementwise(op: str, dt: str, shape: tuple[int, int], cores: int) -> PrimFunc:
    """C = op(A, B): rows split into ``cores`` parts bound to the cores, A cached in NMEM per core, the
    inner loop marked for a tensor instruction (it stays scalar code)."""
    A, B = (te.placeholder(shape, dt, name=n) for n in "AB")
    fn = ELEMENTWISE[op]
    if op in UNARY:
        C = te.compute(shape, lambda i, j: fn(A[i, j]), name="C")
    else:
        C = te.compute(shape, lambda i, j: fn(A[i, j], B[i, j]), name="C")
    s = create_schedule(C)
    AL = s.cache_read(A, "nmem", [C])
    xo, xi = s[C].split(C.op.axis[0], nparts=cores, names=("xo", "xi"))
    s[C].bind(xo, te.thread_axis("core", name="tid"))
    s[AL].compute_at(s[C], xo)
    s[C].pragma(xi, "intrin", op.upper())
    return build(s, [A, C] if op in UNARY else [A, B, C], op)


def run_elementwise(op: str, dt: str, shape: tuple[int, int], cores: int, seed: int) -> None:
    func = elementwise(op, dt, shape, cores)
    assert "if " in str(func) or shape[0] % cores == 0  # non-dividing splits leave guards
    rng = np.random.default_rng(seed)
    n = shape[0] * shape[1]
    arrays = [sample(rng, dt, n), sample(rng, dt, n), np.zeros(n, dt)]
    if op in UNARY:
        del arrays[1]
    kernel, result, outputs = compile_and_compare(func, arrays)
    assert kernel.cores == cores
    assert 0 < kernel.fallback_count(result.executed) < result.scalar_instructions
    a, b, c = arrays[0], arrays[1], outputs[-1]
    with np.errstate(over="ignore"):
        expected = {"add": a + b, "sub": a - b, "mul": a * b, "max": np.maximum(a, b),
                    "relu": np.maximum(a, np.array(0, dt))}.get(op)
    if expected is not None:
        assert_same_bits(c, expected.astype(dt))


@pytest.mark.parametrize(
    ("op", "dt", "cores"),
    [(op, dt, CORE_COUNTS[k % len(CORE_COUNTS)])
     for k, (op, dt) in enumerate(itertools.product(ELEMENTWISE, DTYPES))],
)
def test_front_end_elementwise_functions_run_bit_exact(op: str, dt: str, cores: int) -> None:
    run_elementwise(op, dt, (19, 7), cores, RNG_SEED)


@settings(max_examples=15)
@given(op=st.sampled_from(sorted(ELEMENTWISE)), dt=st.sampled_from(DTYPES),
       cores=st.sampled_from(CORE_COUNTS), rows=st.integers(1, 20), cols=st.integers(1, 6),
       seed=st.integers(0, 2**16))
def test_any_split_of_an_elementwise_function_runs_bit_exact(op, dt, cores, rows, cols, seed) -> None:
    run_elementwise(op, dt, (rows, cols), cores, seed)


# --------------------------------------------------------------------------------------------------
# 2. scalar code


def wide_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """f16 values from subnormals to beyond the largest finite value, and the special values."""
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(n) * np.exp2(rng.integers(-26, 17, n))).astype(np.float16)
    x[:7] = [np.inf, -np.inf, 0.0, -0.0, 65504.0, 6e-8, np.nan]
    return x


def one_loop(name: str, params: tuple[Buffer, ...], n: int, body) -> PrimFunc:
    i = Var("i")
    return PrimFunc(name, params, loop(i, n, body(i)))


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_f16_arithmetic_done_in_f32_and_rounded_once_is_numpy_f16(op: str) -> None:
    n = 300
    A, B, C = (vec(x, n, "float16") for x in "ABC")
    fn = ELEMENTWISE[op]
    func = one_loop(op, (A, B, C), n, lambda i: Store(C, (i,), fn(A[i], B[i])))
    rng = np.random.default_rng(RNG_SEED)
    a, b = wide_f16(rng, n), wide_f16(rng, n)
    _, _, (_, _, c) = compile_and_compare(func, [a, b, np.zeros(n, np.float16)])
    with np.errstate(all="ignore"):
        assert_same_bits(c, fn(a, b))


def test_chained_f16_operations_round_every_intermediate_like_numpy() -> None:
    n = 300
    A, B, C = (vec(x, n, "float16") for x in "ABC")
    func = one_loop("chain", (A, B, C), n, lambda i: Store(C, (i,), A[i] * B[i] + A[i] - B[i] * B[i]))
    rng = np.random.default_rng(RNG_SEED)
    a, b = wide_f16(rng, n), wide_f16(rng, n)
    _, _, (_, _, c) = compile_and_compare(func, [a, b, np.zeros(n, np.float16)])
    with np.errstate(all="ignore"):
        assert_same_bits(c, a * b + a - b * b)


@pytest.mark.parametrize("dt", ["int8", "int16"])
def test_narrow_integers_wrap_before_they_are_compared(dt: str) -> None:
    n = 200
    A, B, C, D = (vec(x, n, dt) for x in "ABCD")
    func = one_loop("wrap", (A, B, C, D), n, lambda i: seq(
        Store(C, (i,), max_(A[i] + B[i], A[i] - B[i])),
        Store(D, (i,), Select(A[i] * B[i] < B[i], min_(A[i], B[i] * B[i]), A[i] + 1))))
    rng = np.random.default_rng(RNG_SEED)
    a, b = sample(rng, dt, n), sample(rng, dt, n)
    _, _, (_, _, c, d) = compile_and_compare(func, [a, b, np.zeros(n, dt), np.zeros(n, dt)])
    assert_same_bits(c, np.maximum(a + b, a - b))
    assert_same_bits(d, np.where(a * b < b, np.minimum(a, b * b), a + np.array(1, dt)))


@pytest.mark.parametrize("dt", ["int8", "int32"])
def test_floor_division_and_modulo_by_powers_of_two(dt: str) -> None:
    n = 200
    A, C = vec("A", n, dt), vec("C", n, dt)

    def body(i):
        x = A[i]
        value = FloorDiv(x, const(8, dt)) + FloorMod(x, const(4, dt)) - FloorDiv(x, const(1, dt))
        return Store(C, (i,), value)

    func = one_loop("divmod", (A, C), n, body)
    a = sample(np.random.default_rng(RNG_SEED), dt, n)
    _, _, (_, c) = compile_and_compare(func, [a, np.zeros(n, dt)])
    assert_same_bits(c, (a // 8 + a % 4 - a).astype(dt))


def test_selects_lets_casts_and_float_constants() -> None:
    n = 64
    X, C = vec("X", n, "float32"), vec("C", n, "float32")
    K, H = vec("K", n, "int32"), vec("H", n, "float16")
    t = Var("t", dtypes.float32)

    def body(i):
        scaled = cast(K[i], "float32") * -0.5  # i32 -> f32 rounds once (the ints go past 2**24)
        return seq(
            Let(t, X[i] * 0.75 + 1.25, Store(C, (i,), if_then_else(EQ(i % 2, const(0)), t, scaled))),
            Store(H, (i,), cast(X[i] * 3.1, "float16") - cast(K[i] % 64, "float16")),
        )

    func = one_loop("mixed", (X, K, C, H), n, body)
    rng = np.random.default_rng(RNG_SEED)
    x = sample(rng, "float32", n, 1e4)
    k = rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int32)
    _, _, (_, _, c, h) = compile_and_compare(func, [x, k, np.zeros(n, np.float32), np.zeros(n, np.float16)])
    even = np.arange(n) % 2 == 0
    t_values = x * np.float32(0.75) + np.float32(1.25)
    assert_same_bits(c, np.where(even, t_values, k.astype(np.float32) * np.float32(-0.5)).astype(np.float32))
    assert_same_bits(h, (x * np.float32(3.1)).astype(np.float16) - (k % 64).astype(np.float16))


def test_conditions_of_and_or_not_and_comparisons_branch_like_the_interpreter() -> None:
    n = 32
    A, B, C = vec("A", n, "int32"), vec("B", n, "int16"), vec("C", n, "int32")
    flag = Var("flag", dtypes.bool_)

    def body(i):
        wanted = Or(i < 3, i >= 27) | (Not(EQ(i, const(5))) & (A[i] > 0))
        return seq(
            IfThenElse(wanted, Store(B, (i,), cast(A[i], "int16")), Store(B, (i,), const(-1, "int16"))),
            Let(flag, And(LE(A[i], const(100)), cast(i % 4 - 1, "bool")),
                Store(C, (i,), Select(flag, A[i] * 2, cast(LT(A[i], i), "int32") - cast(flag, "int32")))),
        )

    func = one_loop("conditions", (A, B, C), n, body)
    a = np.random.default_rng(RNG_SEED).integers(-200, 200, n).astype(np.int32)
    _, _, (_, b, c) = compile_and_compare(func, [a, np.zeros(n, np.int16), np.zeros(n, np.int32)])
    i = np.arange(n)
    wanted = (i < 3) | (i >= 27) | ((i != 5) & (a > 0))
    assert_same_bits(b, np.where(wanted, a, -1).astype(np.int16))
    flags = (a <= 100) & (i % 4 != 1)
    assert_same_bits(c, np.where(flags, a * 2, (a < i).astype(np.int32)).astype(np.int32))


def test_loops_of_run_time_extent_zero_and_one() -> None:
    """Prefix sums with an inner loop whose extent is the outer variable (0 at first); plus loops of extent 0
    and 1."""
    n = 24
    A, B = vec("A", n, "int32"), vec("B", n, "int32")
    i, j, k, m = Var("i"), Var("j"), Var("k"), Var("m")
    body = seq(
        loop(i, n, seq(Store(B, (i,), A[i]), loop(j, i, Store(B, (i,), B[i] + A[j])))),  # i = 0: no j
        loop(k, 0, Store(B, (k,), const(-1))),
        loop(m, 1, Store(B, (m,), B[m] * 2), lo=3),
    )
    a = np.random.default_rng(RNG_SEED).integers(-1000, 1000, n).astype(np.int32)
    _, _, (_, b) = compile_and_compare(PrimFunc("prefix", (A, B), body), [a, np.zeros(n, np.int32)])
    expected = np.cumsum(a).astype(np.int32)
    expected[3] *= 2
    assert_same_bits(b, expected)


def test_smem_buffers_are_per_core_slices_of_the_cluster_smem() -> None:
    """Eight cores (two clusters) stage their rows through an "smem" buffer at the same SMEM offset: each
    core's slice keeps its own data."""
    n, cores = 16, 8
    A, B = vec("A", n * cores, "int32"), vec("B", n * cores, "int32")
    S = vec("S", n, "int32", "smem")
    tid, i = Var("tid"), Var("i")
    body = on_cores(tid, cores, Allocate(S, seq(
        copy(S, 0, A, tid * n, 4 * n),
        loop(i, n, Store(S, (i,), S[i] * 3 + tid)),
        copy(B, tid * n, S, 0, 4 * n),
    )))
    a = np.arange(n * cores, dtype=np.int32)
    kernel, _, (_, b) = compile_and_compare(PrimFunc("smem", (A, B), body), [a, np.zeros_like(a)])
    assert_same_bits(b, a * 3 + np.repeat(np.arange(cores, dtype=np.int32), n))
    assert kernel.onchip_bytes["SMEM"] == 4 * n


# --------------------------------------------------------------------------------------------------
# 3. tensor instructions


def seed_memcpy_example() -> PrimFunc:
    """Seed 001's copy example after loop partitioning: (4, 14) i32, columns split over 4 cores; cores 0-2
    copy 4 columns, core 3 the last 2 (``if tid < 3: memcpy(AL, A + tid*4, 14, 4, 4) else: ...``), then copy
    them back to B."""
    A, B = vec("A", 56, "int32"), vec("B", 56, "int32")
    AL = vec("AL", 16, "int32", "nmem")
    tid = Var("tid")

    def piece(width: int) -> Stmt:
        rows = {"length": 4 * width, "count": 4}
        return seq(
            Attr("pragma_intrin", "MEMCPY", copy(AL, 0, A, tid * 4, **rows, dst_stride=16, src_stride=56)),
            copy(B, tid * 4, AL, 0, **rows, dst_stride=56, src_stride=16),
        )

    return PrimFunc("memcpy", (A, B), on_cores(tid, 4, Allocate(AL, IfThenElse(tid < 3, piece(4), piece(2)))))


def test_seed_001_memcpy_example_copies_with_core_dependent_addresses(golden) -> None:
    a = np.arange(56, dtype=np.int32)
    kernel, result, (_, b) = compile_and_compare(seed_memcpy_example(), [a, np.zeros_like(a)])
    assert_same_bits(b, a)
    assert kernel.cores == 4
    assert result.instructions["memcpyr"] == 8  # two copies per core, no scalar element access
    assert not {"lde", "ste", "ld", "st"} & set(result.instructions)
    assert kernel.fallback_count(result.executed) == 0  # the marked region holds only a copy
    golden.check(str(kernel.program))


@pytest.mark.parametrize("dt", ["float32", "float16", "int8"])
def test_vadd_then_relu_in_nmem_with_copies_in_and_out(dt: str) -> None:
    per_core, cores = 256, 4
    n = per_core * cores
    A, B, C = (vec(x, n, dt) for x in "ABC")
    AL, BL = vec("AL", per_core, dt, "nmem"), vec("BL", per_core, dt, "nmem")
    nbytes = per_core * np.dtype(dt).itemsize
    tid = Var("tid")
    body = on_cores(tid, cores, Allocate(AL, Allocate(BL, seq(
        copy(AL, 0, A, tid * per_core, nbytes),
        copy(BL, 0, B, tid * per_core, nbytes),
        Attr("pragma_intrin", "TADD", insn("vadd", {"n": per_core}, {"dst": (AL, 0), "a": (AL, 0),
                                                                      "b": (BL, 0)})),
        insn("relu", {"n": per_core}, {"dst": (AL, 0)}),
        copy(C, tid * per_core, AL, 0, nbytes),
    ))))
    rng = np.random.default_rng(RNG_SEED)
    a, b = sample(rng, dt, n), sample(rng, dt, n)
    kernel, result, (_, _, c) = compile_and_compare(PrimFunc("add_relu", (A, B, C), body),
                                                    [a, b, np.zeros(n, dt)])
    with np.errstate(over="ignore"):
        assert_same_bits(c, np.maximum(a + b, np.array(0, dt)))
    assert result.instructions["vadd"] == cores and result.instructions["relu"] == cores
    assert kernel.fallback_count(result.executed) == 0
    assert kernel.onchip_bytes["NMEM"] == 2 * nbytes


def test_an_unrolled_loop_gives_each_vector_instruction_its_own_immediate_addresses() -> None:
    """A vector instruction's addresses are immediates: in an unrolled loop its offsets are constants (a
    serial loop would leave them in a register, which the LoweringError of a vector operand reports)."""
    rows, n = 3, 64
    A, C = vec("A", rows * n, "int32"), vec("C", n, "int32")
    AL, acc = vec("AL", rows * n, "int32", "nmem"), vec("acc", n, "int32", "nmem")
    r = Var("r")
    step = insn("vadd", {"n": n}, {"dst": (acc, 0), "a": (acc, 0), "b": (AL, r * n)})
    body = Allocate(AL, Allocate(acc, seq(copy(AL, 0, A, 0, rows * n * 4), copy(acc, 0, A, 0, n * 4),
                                          For(r, const(1), const(rows - 1), step, ForKind.UNROLLED),
                                          copy(C, 0, acc, 0, n * 4))))
    a = np.arange(rows * n, dtype=np.int32)
    kernel, _, (_, c) = compile_and_compare(PrimFunc("rows", (A, C), body), [a, np.zeros(n, np.int32)])
    assert_same_bits(c, a.reshape(rows, n).sum(axis=0).astype(np.int32))
    assert [insn.get("b") for insn in program_insns(kernel, "vadd")] == [n * 4, 2 * n * 4]
    serial = For(r, const(1), const(rows - 1), step)
    with pytest.raises(LoweringError, match="non-constant offset"):
        codegen(PrimFunc("rows", (A, C), Allocate(AL, Allocate(acc, serial))))


def test_zero_fill_and_a_strided_copy_pad_an_image() -> None:
    """Seed 001 Algorithm 1's padding: vzero the padded NMEM buffer, copy the rows in with a wider stride."""
    h, w = 5, 6
    X, Y = vec("X", h * w, "float16"), vec("Y", (h + 2) * (w + 2), "float16")
    P = vec("P", 64, "float16", "nmem")  # 56 elements, rounded up to whole 64-byte vzero blocks
    body = Allocate(P, seq(
        insn("vzero", {"n": 128}, {"dst": (P, 0)}),  # dst_space follows P's scope
        copy(P, (w + 2) + 1, X, 0, 2 * w, count=h, dst_stride=2 * (w + 2), src_stride=2 * w),
        copy(Y, 0, P, 0, 2 * (h + 2) * (w + 2)),
    ))
    x = sample(np.random.default_rng(RNG_SEED), "float16", h * w)
    kernel, _, (_, y) = compile_and_compare(PrimFunc("pad", (X, Y), body), [x, np.ones(56, np.float16)])
    assert_same_bits(y, np.pad(x.reshape(h, w), 1).reshape(-1))
    (zero,) = program_insns(kernel, "vzero")
    assert zero["dst_space"] == SPACE["NMEM"]


def blocked(w: np.ndarray, block: int = 16) -> np.ndarray:
    """(KH, KW, CI, CO) weights as DianNao's [CO // block, KH, KW, CI, block]."""
    kh, kw, ci, co = w.shape
    return np.ascontiguousarray(w.reshape(kh, kw, ci, co // block, block).transpose(3, 0, 1, 2, 4))


@pytest.mark.parametrize(("name", "dt", "out_dt"),
                         [("conv", "float32", "float32"), ("qconv", "int8", "int32")])
def test_conv_with_weights_in_wmem_over_two_cores(name: str, dt: str, out_dt: str) -> None:
    """Each core convolves two output rows: it copies the 4 input rows they need to NMEM and the weights to
    WMEM, runs one conv, and copies its output rows back."""
    cores, rows, h, w, cin, cout, k = 2, 2, 6, 5, 3, 16, 3
    wo, in_rows, size, out_size = w - k + 1, rows + k - 1, np.dtype(dt).itemsize, np.dtype(out_dt).itemsize
    X, W = vec("X", h * w * cin, dt), vec("W", k * k * cin * cout, dt)
    O = vec("O", cores * rows * wo * cout, out_dt)  # noqa: E741
    XL, OL = vec("XL", in_rows * w * cin, dt, "nmem"), vec("OL", rows * wo * cout, out_dt, "nmem")
    WL = vec("WL", k * k * cin * cout, dt, "wmem")
    tid = Var("tid")
    fields = {"h": in_rows, "w": w, "cin": cin, "cout": cout, "kh": k, "kw": k, "s": 1}
    body = on_cores(tid, cores, Allocate(XL, Allocate(WL, Allocate(OL, seq(
        copy(XL, 0, X, tid * rows * w * cin, in_rows * w * cin * size),
        copy(WL, 0, W, 0, k * k * cin * cout * size),
        insn(name, fields, {"out": (OL, 0), "inp": (XL, 0), "wgt": (WL, 0)}),
        copy(O, tid * rows * wo * cout, OL, 0, rows * wo * cout * out_size),
    )))))
    # small integers: every f32 product and sum is exact, so no summation order (which the spec leaves
    # open, see tests/sim/diannao/test_functional.py) changes a bit; i8 spans its whole range
    rng = np.random.default_rng(RNG_SEED)
    lim = 128 if dt == "int8" else 5
    x = rng.integers(-lim, lim, h * w * cin).astype(dt)
    wt = rng.integers(-lim, lim, k * k * cin * cout).astype(dt)
    kernel, result, (_, _, o) = compile_and_compare(
        PrimFunc(name, (X, W, O), body), [x, blocked(wt.reshape(k, k, cin, cout)).reshape(-1),
                                          np.zeros(O.size, out_dt)])
    image = x.reshape(h, w, cin).astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(image, (k, k), (0, 1))
    ref = np.einsum("yxcij,ijco->yxo", windows, wt.reshape(k, k, cin, cout).astype(np.float64))
    assert_same_bits(o, ref.astype(out_dt).reshape(-1))
    assert result.instructions[name] == cores
    (wgt_copy,) = [i for i in program_insns(kernel, "memcpyr") if i["dst_space"] == SPACE["WMEM"]]
    assert wgt_copy["len"] * wgt_copy["count"] == W.size * size


@pytest.mark.parametrize("nbytes", [100_000, 2 * 65537])
def test_a_contiguous_copy_longer_than_a_row_is_split_into_rows_that_fit(nbytes: int) -> None:
    """100000 bytes: 2 equal rows in one memcpyr; 2 * 65537 (65537 is prime): full rows plus a shorter one.
    (The interpreter encodes each instruction, so it cannot run a copy this long: numpy is the oracle.)"""
    A, B, L = vec("A", nbytes, "int8"), vec("B", nbytes, "int8"), vec("L", nbytes, "int8", "nmem")
    body = Allocate(L, seq(copy(L, 0, A, 0, nbytes), copy(B, 0, L, 0, nbytes)))
    a = sample(np.random.default_rng(RNG_SEED), "int8", nbytes)
    kernel, result, (_, b) = compile_and_run(PrimFunc("long", (A, B), body), [a, np.zeros_like(a)])
    assert_same_bits(b, a)
    copies = program_insns(kernel, "memcpyr")
    limit = SPEC.instruction("memcpyr").field("len").hi
    assert all(c["len"] <= limit for c in copies)
    assert sum(c["len"] * c["count"] for c in copies) == 2 * nbytes
    assert len(copies) == (2 if nbytes % 2 == 0 and nbytes // 2 <= limit else 4)
    assert result.bytes_moved == {"GMEM->NMEM": nbytes, "NMEM->GMEM": nbytes}


def test_a_copy_whose_rows_lie_further_apart_than_a_stride_field_holds_goes_row_by_row() -> None:
    """3 rows of 16 bytes 70,000 bytes apart in GMEM (memcpyr strides hold 65,535): one instruction a row."""
    stride = 70_000 // 4
    A, B = vec("A", 3 * stride, "int32"), vec("B", 12, "int32")
    L = vec("L", 12, "int32", "nmem")
    body = Allocate(L, seq(copy(L, 0, A, 0, 16, count=3, dst_stride=16, src_stride=4 * stride),
                           copy(B, 0, L, 0, 48)))
    a = np.arange(3 * stride, dtype=np.int32)
    kernel, _, (_, b) = compile_and_run(PrimFunc("rows", (A, B), body), [a, np.zeros(12, np.int32)])
    assert_same_bits(b, a.reshape(3, stride)[:, :4].reshape(-1))
    loads = [c for c in program_insns(kernel, "memcpyr") if c["dst_space"] == SPACE["NMEM"]]
    assert [(c["len"], c["count"]) for c in loads] == [(16, 1)] * 3


def test_a_copy_of_more_rows_than_the_count_field_holds_takes_several_instructions() -> None:
    """300 rows of 16 bytes: 255 rows, then 45 (numpy is the oracle, as for long rows)."""
    rows, width = 300, 6
    A, B = vec("A", rows * width, "int32"), vec("B", rows * 4, "int32")
    L = vec("L", rows * 4, "int32", "nmem")
    body = Allocate(L, seq(copy(L, 0, A, 1, 16, count=rows, dst_stride=16, src_stride=4 * width),
                           copy(B, 0, L, 0, 16 * rows)))
    a = np.arange(rows * width, dtype=np.int32)
    kernel, _, (_, b) = compile_and_run(PrimFunc("rows", (A, B), body), [a, np.zeros(rows * 4, np.int32)])
    assert_same_bits(b, a.reshape(rows, width)[:, 1:5].reshape(-1))
    counts = [c["count"] for c in program_insns(kernel, "memcpyr") if c["dst_space"] == SPACE["NMEM"]]
    assert counts == [255, 45]


@settings(max_examples=60)
@given(length=st.integers(1, 40), count=st.integers(1, 12), gap_dst=st.integers(0, 5),
       gap_src=st.integers(0, 5), contiguous=st.booleans())
def test_split_copy_moves_exactly_the_bytes_of_the_copy(length, count, gap_dst, gap_src, contiguous) -> None:
    """With fields of at most 10 bytes a row, 3 rows and strides of 12: the pieces copy the same (dst, src)
    byte pairs as the copy, each within the limits (a strided copy that does not fit goes row by row)."""
    ds, ss = (length, length) if contiguous else (length + gap_dst, length + gap_src)
    pieces = split_copy(length, count, ds, ss, max_len=10, max_count=3, max_stride=12)
    wanted = {(r * ds + c, r * ss + c) for r in range(count) for c in range(length)}
    got = [(p.dst + r * p.dst_stride + c, p.src + r * p.src_stride + c)
           for p in pieces for r in range(p.count) for c in range(p.length)]
    assert sorted(got) == sorted(wanted)
    assert all(p.length <= 10 and 1 <= p.count <= 3 for p in pieces)
    assert all(p.count == 1 or (p.dst_stride <= 12 and p.src_stride <= 12) for p in pieces)


def test_split_copy_prefers_equal_rows() -> None:
    assert split_copy(100_000, 1, 0, 0, 65535, 255, 65535) == [Piece(0, 0, 50_000, 2, 50_000, 50_000)]


# --------------------------------------------------------------------------------------------------
# 4. fallback, on-chip bytes, determinism, errors


def test_a_marked_scalar_copy_of_one_element_is_one_load_and_one_store() -> None:
    A, B = vec("A", 4, "int32"), vec("B", 4, "int32")
    func = PrimFunc("one", (A, B), Attr("pragma_intrin", "MEMCPY", Store(B, (const(2),), A[const(1)])))
    a = np.arange(4, dtype=np.int32)
    kernel, result, (_, b) = compile_and_compare(func, [a, np.zeros_like(a)])
    assert b.tolist() == [0, 0, 1, 0]
    assert sorted(kernel.program.insns[pc].name for pc in kernel.fallback_pcs) == ["lde", "ste"]
    assert kernel.fallback_count(result.executed) == 2


def marked_loop_kernel(key: str | None, cores: int = 4) -> PrimFunc:
    """Each core copies its 16 elements with a vector-free scalar loop (inside ``Attr(key)`` when a key is
    given) and then doubles them with a plain scalar loop."""
    n = 16
    A, B = vec("A", n * cores, "int32"), vec("B", n * cores, "int32")
    tid, i, j = Var("tid"), Var("i"), Var("j")
    scalar_copy = loop(i, n, IfThenElse(i < 13, Store(B, (tid * n + i,), A[tid * n + i])))
    double = loop(j, n, Store(B, (tid * n + j,), B[tid * n + j] * 2))
    marked = Attr(key, "X", scalar_copy) if key is not None else None
    return PrimFunc("marked", (A, B), on_cores(tid, cores, seq(marked, double)))


def test_fallback_count_is_every_scalar_instruction_the_marked_region_runs() -> None:
    """The marked kernel runs exactly its fallback instructions more than the same kernel without the
    marked loop; with a key that is no pragma nothing is fallback and the program is the same."""
    a = np.arange(64, dtype=np.int32)
    marked, r_marked, _ = compile_and_compare(marked_loop_kernel("pragma_intrin"), [a, np.zeros_like(a)])
    _, r_without, _ = compile_and_compare(marked_loop_kernel(None), [a, np.zeros_like(a)])
    count = marked.fallback_count(r_marked.executed)
    assert count > 4 * 13 * 2  # at least a load and a store per copied element
    assert count == r_marked.scalar_instructions - r_without.scalar_instructions
    plain, r_plain, _ = compile_and_compare(marked_loop_kernel("note"), [a, np.zeros_like(a)])
    assert str(plain.program) == str(marked.program)
    assert plain.fallback_pcs == frozenset() and plain.fallback_count(r_plain.executed) == 0


def test_fallback_count_needs_one_count_per_pc() -> None:
    kernel = codegen(seed_memcpy_example())
    with pytest.raises(ValueError, match=f"expected execution counts for the {len(kernel.program)} pcs"):
        kernel.fallback_count([0])


def test_onchip_bytes_is_the_peak_of_nested_and_sequential_allocations() -> None:
    """Sequential allocations reuse the space; a nested one starts at the next VECTOR_ALIGN boundary."""
    align = SPEC.params["VECTOR_ALIGN"]
    outer, inner = vec("O", 25, "int32", "nmem"), vec("I", 300, "int8", "nmem")
    later, W = vec("L", 50, "int16", "nmem"), vec("W", 10, "float16", "wmem")

    def zero(b: Buffer) -> TensorInsn:
        return insn("vzero", {"n": align}, {"dst": (b, 0)})

    body = seq(Allocate(outer, Allocate(inner, seq(zero(outer), zero(inner)))), Allocate(later, zero(later)),
               Allocate(W, zero(W)))
    kernel = codegen(PrimFunc("alloc", (), body))
    nested = -(-100 // align) * align + 300
    assert kernel.onchip_bytes == {"SMEM": 0, "NMEM": max(nested, 100), "WMEM": 20, "SMEM_CLUSTER": 0}


def test_the_same_function_gives_the_same_program_text() -> None:
    first = codegen(elementwise("relu_of_mul_sub", "float16", (9, 5), 3))
    second = codegen(elementwise("relu_of_mul_sub", "float16", (9, 5), 3))
    assert str(first.program) == str(second.program)
    assert first.fallback_pcs == second.fallback_pcs


def test_a_kernel_for_a_smaller_card_uses_that_cards_capacities() -> None:
    """codegen reads capacities from the spec it is given: 200 KiB fit the default NMEM, not a 128 KiB one."""
    A, L = vec("A", 51200, "float32"), vec("L", 51200, "float32", "nmem")
    func = PrimFunc("big", (A,), Allocate(L, copy(L, 0, A, 0, 4 * 51200)))
    assert codegen(func).onchip_bytes["NMEM"] == 4 * 51200
    small = DiannaoConfig(name="small", summary="", isa_params=MappingProxyType({"NMEM_BYTES": 131072}))
    with pytest.raises(LoweringError, match=r"allocation L \(204800 bytes\) does not fit in NMEM: .* 131072"):
        codegen(func, small.spec_for(SPEC))


def test_a_vector_operand_offset_must_be_a_constant() -> None:
    A = vec("A", 256, "float32", "nmem")
    tid = Var("tid")
    body = on_cores(tid, 2, Allocate(A, insn("relu", {"n": 64}, {"dst": (A, tid * 64)})))
    with pytest.raises(LoweringError, match=r"relu.*operand 'dst' has the non-constant offset 'tid\*64'"):
        codegen(PrimFunc("f", (), body))


def test_an_allocation_larger_than_its_space_is_refused() -> None:
    capacity = SPEC.spaces["NMEM"].bytes
    A = vec("big", capacity // 4 + 1, "float32", "nmem")
    with pytest.raises(LoweringError, match=f"allocation big \\({capacity + 4} bytes\\) .* {capacity}"):
        codegen(PrimFunc("f", (), Allocate(A, Evaluate(const(0)))))


def test_there_is_no_divide_on_the_scalar_unit() -> None:
    A, B = vec("A", 8, "int32"), vec("B", 8, "int32")
    func = one_loop("div", (A, B), 8, lambda i: Store(B, (i,), FloorDiv(A[i], const(3))))
    with pytest.raises(LoweringError, match=r"no divide on the DianNao scalar unit.*'A\[i\]//3'"):
        codegen(func)


@pytest.mark.parametrize("cores", [5, 6, 17])
def test_a_core_count_the_card_cannot_launch_is_refused(cores: int) -> None:
    A = vec("A", 32, "int32")
    tid = Var("tid")
    func = PrimFunc("f", (A,), on_cores(tid, cores, Store(A, (tid,), tid)))
    with pytest.raises(LoweringError, match=f"cannot launch {cores} cores"):
        codegen(func)


def test_there_is_no_float_to_int_cast() -> None:
    A, B = vec("A", 8, "float32"), vec("B", 8, "int32")
    func = one_loop("trunc", (A, B), 8, lambda i: Store(B, (i,), cast(A[i], "int32")))
    with pytest.raises(LoweringError, match="no float->int conversion"):
        codegen(func)


def test_operands_must_lie_in_the_spaces_the_spec_gives_them() -> None:
    A = vec("A", 64, "float32")
    with pytest.raises(LoweringError, match="operand 'dst' must be in NMEM, but buffer A is in GMEM"):
        codegen(PrimFunc("f", (A,), insn("relu", {"n": 64}, {"dst": (A, 0)})))
    L = vec("L", 64, "float32", "nmem")
    wrong = insn("memcpy", {"dst_space": SPACE["WMEM"], "src_space": SPACE["GMEM"], "len": 256, "count": 1},
                 {"dst": (L, 0), "src": (A, 0)})
    with pytest.raises(LoweringError, match="operand 'dst' must be in WMEM, but buffer L is in NMEM"):
        codegen(PrimFunc("f", (A,), Allocate(L, wrong)))


def test_a_broken_instruction_rule_is_reported_at_compile_time() -> None:
    A = vec("A", 100, "float32", "nmem")
    with pytest.raises(LoweringError, match="multiple of VECTOR_ELEMS"):
        codegen(PrimFunc("f", (), Allocate(A, insn("relu", {"n": 100}, {"dst": (A, 0)}))))


def _refused() -> dict[str, tuple[PrimFunc, str]]:
    """IR the backend refuses, each with the words its error must contain."""
    A, U = vec("A", 64, "float32"), vec("U", 4, "uint8")
    L, M = vec("L", 64, "float32", "nmem"), vec("M", 64, "int8", "nmem")
    S, W8 = vec("S", 64, "float32", "smem"), vec("W8", 432, "int8", "wmem")
    tid, u, i = Var("tid"), Var("u"), Var("i")
    relu = {"dst": (L, 0)}

    def f(body: Stmt, *params: Buffer) -> PrimFunc:
        return PrimFunc("f", params or (A,), body)

    return {
        "two core loops": (f(on_cores(tid, 2, on_cores(u, 2, Store(A, (tid,), A[u])))),
                           "at most one core-bound loop"),
        "core loop from 1": (f(For(tid, const(1), const(2), Store(A, (tid,), A[tid]), ForKind.THREAD_BINDING,
                                   "core")), "expected min 0 and a constant extent"),
        "unknown scope": (f(Allocate(vec("T", 4, "int32", "local"), Evaluate(const(0)))),
                          "scope 'local' is no memory space"),
        "GMEM allocation": (f(Allocate(vec("T", 4, "int32"), Evaluate(const(0)))), "cannot allocate GMEM"),
        "non-flat buffer": (f(Allocate(Buffer("T", (2, 2), dtypes.int32, "nmem"), Evaluate(const(0)))),
                            "buffer T[2, 2] is not flat"),
        "parameter not in GMEM": (f(Evaluate(const(0)), L), "kernel parameters live in GMEM"),
        "effect of a load": (f(Evaluate(A[const(0)])), "cannot evaluate"),
        "another ISA": (f(Allocate(L, TensorInsn(isa.load_isa("vita"), "relu", (),
                                                 (Region("dst", L, const(0)),)))),
                        "not of 'vita' (isa/specs/vita.toml)"),
        "unknown instruction": (f(Allocate(L, insn("vfoo", {"n": 64}, relu))), "has no instruction 'vfoo'"),
        "memcpyr in the IR": (f(Allocate(L, insn("memcpyr", {"len": 4, "count": 1}, {"dst": (L, 0),
                                                                                      "src": (A, 0)}))),
                              "'memcpyr' is not a tensor instruction of the IR"),
        "operand dtypes differ": (f(Allocate(L, Allocate(M, insn("vadd", {"n": 64}, {"dst": (L, 0),
                                                                                      "a": (M, 0),
                                                                                      "b": (L, 0)})))),
                                  "dtype mismatch"),
        "qconv output not i32": (f(Allocate(M, Allocate(W8, insn(
            "qconv", {"h": 3, "w": 3, "cin": 3, "cout": 16, "kh": 3, "kw": 3, "s": 1},
            {"out": (M, 0), "inp": (M, 0), "wgt": (W8, 0)})))),
            "operand 'out' is i32, but buffer M holds int8"),
        "missing region": (f(Allocate(L, insn("vadd", {"n": 64}, {"dst": (L, 0), "a": (L, 0)}))),
                           "no region for operand"),
        "SMEM operand of vzero": (f(Allocate(S, insn("vzero", {"n": 64}, {"dst": (S, 0)}))),
                                  "no fixed address"),
        "unknown field": (f(Allocate(L, insn("relu", {"m": 64}, relu))), "unknown field 'm'"),
        "address field": (f(Allocate(L, insn("relu", {"n": 64, "dst": 0}, relu))),
                          "address field 'dst' is set"),
        "field of a loop variable": (f(Allocate(L, loop(i, 2, insn("relu", {"n": (i + 1) * 64}, relu)))),
                                     "field 'n' must be a constant"),
        "float division": (f(loop(i, 64, Store(A, (i,), A[i] / 3.0))), "no divide"),
        "float comparison": (f(loop(i, 64, IfThenElse(A[i] < 0.0, Store(A, (i,), A[i] * 2.0)))),
                             "no float comparison"),
        "unsigned arithmetic": (f(loop(i, 4, Store(U, (i,), U[i] + U[i])), U), "not uint8"),
    }


@pytest.mark.parametrize("case", sorted(_refused()))
def test_what_the_backend_cannot_compile_is_a_lowering_error_naming_it(case: str) -> None:
    func, words = _refused()[case]
    with pytest.raises(LoweringError, match=re.escape(words)):
        codegen(func)


def test_more_float_constants_than_registers_are_loaded_where_they_are_used() -> None:
    """30 distinct constants, integral and not: 24 live in F registers from the prologue, the rest are loaded
    at their use (li + fcvt, or through the scratch word)."""
    n = 30
    A, C = vec("A", n, "float32"), vec("C", n, "float32")
    values = [float(k) if k % 2 else k + 0.375 for k in range(n)]
    body = seq(*(Store(C, (const(k),), A[const(k)] * v) for k, v in enumerate(values)))
    a = sample(np.random.default_rng(RNG_SEED), "float32", n)
    _, _, (_, c) = compile_and_compare(PrimFunc("consts", (A, C), body), [a, np.zeros(n, np.float32)])
    assert_same_bits(c, a * np.array(values, np.float32))


def test_a_copy_offset_past_the_immediate_range_goes_into_the_address_register() -> None:
    """memcpyr's 25-bit signed offsets reach 16 MiB; a copy from byte 2**24 + 100 of a parameter adds it."""
    size, at = 2**24 + 256, 2**24 + 100
    A, B, L = vec("A", size, "int8"), vec("B", 64, "int8"), vec("L", 64, "int8", "nmem")
    body = Allocate(L, seq(copy(L, 0, A, at, 64), copy(B, 0, L, 0, 64)))
    a = np.arange(size, dtype=np.int64).astype(np.int8)
    kernel, _, (_, b) = compile_and_compare(PrimFunc("far", (A, B), body), [a, np.zeros(64, np.int8)])
    assert_same_bits(b, a[at:at + 64])
    (load,) = [c for c in program_insns(kernel, "memcpyr") if c["src_space"] == SPACE["GMEM"]]
    assert load["src_off"] == 0


def test_running_out_of_registers_names_the_statement() -> None:
    A = vec("A", 1, "int32")
    loops = [Var(f"v{k}") for k in range(16)]
    body: Stmt = Store(A, (const(0),), sum(loops[1:], loops[0]))
    for v in reversed(loops):
        body = loop(v, 2, body)
    with pytest.raises(LoweringError, match="out of registers in 'for v15 in range"):
        codegen(PrimFunc("deep", (A,), body))


def test_only_serial_unrolled_and_core_bound_loops_compile() -> None:
    A = vec("A", 8, "int32")
    i = Var("i")
    parallel = For(i, const(0), const(8), Store(A, (i,), i), ForKind.PARALLEL)
    with pytest.raises(LoweringError, match="a parallel loop has no meaning on one DianNao core"):
        codegen(PrimFunc("f", (A,), parallel))
    vthread = For(i, const(0), const(2), Store(A, (i,), i), ForKind.THREAD_BINDING, "vthread")
    with pytest.raises(LoweringError, match="'core' and 'cluster' axes only, not 'vthread'"):
        codegen(PrimFunc("f", (A,), vthread))
    unrolled = For(i, const(0), const(8), Store(A, (i,), i * 3), ForKind.UNROLLED)
    compile_and_compare(PrimFunc("f", (A,), unrolled), [np.zeros(8, np.int32)])
