"""Tests of ``TensorInsn``, one instruction of an ISA spec as an IR statement: the node, its printed form,
traversal, verification, and the reference interpreter running it like the scalar loop it replaces."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from compiler.errors import InterpError, IRTypeError, VerifyError
from compiler.interp import run
from compiler.ir import (
    Allocate,
    Buffer,
    For,
    InsnField,
    IRMutator,
    Max,
    PrimFunc,
    Region,
    Store,
    TensorInsn,
    Var,
    buffers_of,
    cast,
    const,
    dtypes,
    format_node,
    free_vars,
    seq,
    structural_equal,
    substitute,
)
from compiler.verify import verify

RNG_SEED = 7


def loop(var: Var, extent, body) -> For:
    return For(var, const(0), extent if not isinstance(extent, int) else const(extent), body)


def insn(name: str, fields: dict, regions: dict, spec: str = "diannao") -> TensorInsn:
    """TensorInsn of the built-in ``spec``'s ``name`` from {field: int or Expr} and {operand: (buffer, offset
    int or Expr)}."""
    return TensorInsn(
        isa.load_isa(spec),
        name,
        tuple(InsnField(k, const(v) if isinstance(v, int) else v) for k, v in fields.items()),
        tuple(
            Region(op, buf, const(off) if isinstance(off, int) else off) for op, (buf, off) in regions.items()
        ),
    )


def vectors(dt, n: int, names: str = "ABC") -> tuple[Buffer, ...]:
    return tuple(Buffer(x, (n,), dtypes.dtype(dt)) for x in names)


def random_array(rng: np.random.Generator, dt: str, shape) -> np.ndarray:
    """Values at the dtype's edges: ints that wrap when added, floats that round and (f16) overflow."""
    np_dt = np.dtype(dt)
    if np_dt.kind == "i":
        info = np.iinfo(np_dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np_dt)
    scale = 40000.0 if np_dt == np.float16 else 1e3
    with np.errstate(over="ignore"):  # f16: some values overflow to +-inf, on purpose
        return (rng.standard_normal(shape) * scale).astype(np_dt)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal element for element, bit for bit (NaN only where NaN is expected, payloads aside)."""
    assert actual.dtype == expected.dtype
    if actual.dtype.kind == "f":
        nan = np.isnan(expected)
        assert np.array_equal(np.isnan(actual), nan)
        actual, expected = actual[~nan], expected[~nan]
    assert actual.tobytes() == expected.tobytes()


def run_both(loop_func: PrimFunc, insn_func: PrimFunc, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Run both functions on copies of ``arrays``; assert identical results; return them."""
    by_loop = [a.copy() for a in arrays]
    by_insn = [a.copy() for a in arrays]
    run(loop_func, by_loop)
    run(insn_func, by_insn)
    for x, y in zip(by_insn, by_loop, strict=True):
        assert_same_bits(x, y)
    return by_insn


# --------------------------------------------------------------------------------------------------
# the interpreter runs a TensorInsn like the scalar loop it stands for


@pytest.mark.parametrize("dt", ["float32", "float16", "int8", "int32"])
def test_vadd_is_the_elementwise_add_loop(dt: str) -> None:
    n = 192
    a, b, c = vectors(dt, n)
    i = Var("i")
    by_loop = PrimFunc("vadd_loop", (a, b, c), loop(i, n, Store(c, (i,), a[i] + b[i])))
    by_insn = PrimFunc("vadd", (a, b, c), insn("vadd", {"n": n}, {"dst": (c, 0), "a": (a, 0), "b": (b, 0)}))
    rng = np.random.default_rng(RNG_SEED)
    x, y = random_array(rng, dt, n), random_array(rng, dt, n)
    _, _, out = run_both(by_loop, by_insn, [x, y, np.zeros(n, dt)])
    with np.errstate(over="ignore"):
        assert_same_bits(out, x + y)  # numpy: ints wrap, floats round once to the dtype


def test_vadd_int8_wraps_around() -> None:
    a, b, c = vectors("int8", 4)
    func = PrimFunc("vadd", (a, b, c), insn("vadd", {"n": 4}, {"dst": (c, 0), "a": (a, 0), "b": (b, 0)}))
    x, y = np.array([127, -128, 100, -1], np.int8), np.array([1, -1, 100, 1], np.int8)
    out = np.zeros(4, np.int8)
    run(func, [x, y, out])
    assert out.tolist() == [(int(p) + int(q) + 128) % 256 - 128 for p, q in zip(x, y, strict=True)]


@pytest.mark.parametrize("dt", ["float32", "float16", "int16"])
def test_relu_in_place_is_the_max_with_zero_loop(dt: str) -> None:
    n = 100
    (a,) = vectors(dt, n, "A")
    i = Var("i")
    zero = cast(0, a.dtype)
    by_loop = PrimFunc("relu_loop", (a,), loop(i, n, Store(a, (i,), Max(a[i], zero))))
    by_insn = PrimFunc("relu", (a,), insn("relu", {"n": n}, {"dst": (a, 0)}))
    x = random_array(np.random.default_rng(RNG_SEED), dt, n)
    if x.dtype.kind == "f":
        x[:4] = [np.inf, -np.inf, np.nan, -0.0]
    by_loop_out, by_insn_out = x.copy(), x.copy()
    run(by_loop, [by_loop_out])
    run(by_insn, [by_insn_out])
    # values, not bits: for -0.0 the scalar Max(x, 0) keeps -0.0 and the spec's max gives +0.0
    np.testing.assert_array_equal(by_insn_out, by_loop_out)
    np.testing.assert_array_equal(by_insn_out, np.where(np.isnan(x) | (x > 0), x, 0).astype(dt))


def test_memcpy_strided_rows_between_f32_buffers() -> None:
    """memcpy counts in bytes: 4 rows of 3 f32 (12 bytes) from A's columns 2..4 (rows 24 bytes apart)."""
    a, b = Buffer("A", (4, 6), dtypes.float32), Buffer("B", (4, 3), dtypes.float32)
    r, c = Var("r"), Var("c")
    by_loop = PrimFunc("copy_loop", (a, b), loop(r, 4, loop(c, 3, Store(b, (r, c), a[r, c + 2]))))
    fields = {"len": 3 * 4, "count": 4, "dst_stride": 3 * 4, "src_stride": 6 * 4}
    by_insn = PrimFunc("copy", (a, b), insn("memcpy", fields, {"dst": (b, 0), "src": (a, 2)}))
    x = random_array(np.random.default_rng(RNG_SEED), "float32", (4, 6))
    _, out = run_both(by_loop, by_insn, [x, np.zeros((4, 3), np.float32)])
    assert_same_bits(out, x[:, 2:5])


def test_memcpy_into_and_out_of_an_allocation() -> None:
    """Copy two rows into an uninitialized NMEM buffer, add them there, copy the sum back (byte views)."""
    a = Buffer("A", (2, 8), dtypes.float32)
    c = Buffer("C", (4,), dtypes.float32)
    al = Buffer("AL", (8,), dtypes.float32, scope="nmem")
    row = {"len": 16, "count": 2, "dst_stride": 16, "src_stride": 32}
    body = Allocate(
        al,
        seq(
            insn("memcpy", row, {"dst": (al, 0), "src": (a, 4)}),  # AL = [A[0, 4:8], A[1, 4:8]]
            insn("vadd", {"n": 4}, {"dst": (al, 0), "a": (al, 0), "b": (al, 4)}),
            insn("memcpy", {"len": 16, "count": 1}, {"dst": (c, 0), "src": (al, 0)}),
        ),
    )
    x = random_array(np.random.default_rng(RNG_SEED), "float32", (2, 8))
    out = np.zeros(4, np.float32)
    run(PrimFunc("stage", (a, c), body), [x, out])
    assert_same_bits(out, x[0, 4:] + x[1, 4:])


def test_vadd_in_a_loop_with_offsets_and_a_field_of_the_loop_var() -> None:
    """for core: vadd(n=core + 1, at core*16) is for core: for i in range(core + 1): C[core*16 + i] = ..."""
    a, b, c = vectors("float32", 64)
    core, i = Var("core"), Var("i")
    at = core * 16
    scalar = loop(i, core + 1, Store(c, (at + i,), a[at + i] + b[at + i]))
    by_loop = PrimFunc("partial_loop", (a, b, c), loop(core, 4, scalar))
    step = insn("vadd", {"n": core + 1}, {"dst": (c, at), "a": (a, at), "b": (b, at)})
    by_insn = PrimFunc("partial", (a, b, c), loop(core, 4, step))
    rng = np.random.default_rng(RNG_SEED)
    arrays = [random_array(rng, "float32", 64) for _ in range(3)]
    out = run_both(by_loop, by_insn, arrays)[2]
    touched = np.zeros(64, bool)
    for k in range(4):
        touched[16 * k : 16 * k + k + 1] = True
    assert_same_bits(out[touched], (arrays[0] + arrays[1])[touched])
    assert_same_bits(out[~touched], arrays[2][~touched])


@settings(max_examples=30)
@given(n=st.integers(1, 40), off=st.integers(0, 24), seed=st.integers(0, 2**16))
def test_vadd_at_any_offset_matches_the_loop(n: int, off: int, seed: int) -> None:
    size = 64
    a, b, c = vectors("float16", size)
    i = Var("i")
    by_loop = PrimFunc("loop", (a, b, c), loop(i, n, Store(c, (i + off,), a[i + off] + b[i + off])))
    regions = {"dst": (c, off), "a": (a, off), "b": (b, off)}
    by_insn = PrimFunc("insn", (a, b, c), insn("vadd", {"n": n}, regions))
    rng = np.random.default_rng(seed)
    run_both(by_loop, by_insn, [random_array(rng, "float16", size) for _ in range(3)])


def test_an_output_written_only_by_an_instruction_must_be_writeable_and_is_written_back() -> None:
    a, b, c = vectors("int32", 4)
    func = PrimFunc("vadd", (a, b, c), insn("vadd", {"n": 4}, {"dst": (c, 0), "a": (a, 0), "b": (b, 0)}))
    x, y = np.arange(4, dtype=np.int32), np.full(4, 10, np.int32)
    frozen = np.zeros(4, np.int32)
    frozen.flags.writeable = False
    with pytest.raises(InterpError, match="argument 2, 'C' to vadd: expected a writeable array"):
        run(func, [x, y, frozen])
    strided = np.zeros(8, np.int32)[::2]  # not C-contiguous: worked on as a copy, then written back
    run(func, [x, y, strided])
    assert strided.tolist() == (x + y).tolist()


# --------------------------------------------------------------------------------------------------
# the node: printing, traversal, equality, verification


def staged_add() -> PrimFunc:
    a, b, c = vectors("float32", 256)
    al = Buffer("AL", (64,), dtypes.float32, scope="nmem")
    core = Var("core")
    at = core * 64
    body = loop(
        core,
        4,
        Allocate(
            al,
            seq(
                insn("memcpy", {"len": 256, "count": 1}, {"dst": (al, 0), "src": (a, at)}),
                insn("vadd", {"n": 64}, {"dst": (c, at), "a": (al, 0), "b": (b, at)}),
                insn("relu", {"n": 64}, {"dst": (c, at)}),
            ),
        ),
    )
    return PrimFunc("staged_add", (a, b, c), body)


def test_tensor_insn_prints_fields_then_regions(golden) -> None:
    text = format_node(staged_add())
    golden.check(text)
    assert "      diannao.vadd(n=64, dst=C[core*64], a=AL[0], b=B[core*64])" in text.splitlines()
    core = Var("core")
    assert str(InsnField("n", core + 1)) == "n=core + 1"
    assert str(Region("a", Buffer("A", (8,), dtypes.int8), core * 2)) == "a=A[core*2]"


def test_tensor_insn_traversal_sees_fields_offsets_and_buffers() -> None:
    a, b, c = vectors("float32", 64)
    core = Var("core")
    step = insn("vadd", {"n": core + 1}, {"dst": (c, core * 16), "a": (a, core * 16), "b": (b, 0)})
    assert free_vars(step) == {core}
    assert buffers_of(step) == [c, a, b]
    assert free_vars(loop(core, 4, step)) == set()
    fixed = substitute(step, {core: const(2)})
    expected = insn(
        "vadd", {"n": const(2) + 1}, {"dst": (c, const(2) * 16), "a": (a, const(2) * 16), "b": (b, 0)}
    )
    assert fixed == expected
    assert IRMutator().mutate(step) is step  # nothing changed: the same object


def test_tensor_insn_structural_equality() -> None:
    def build(n: int = 16, operand: str = "a") -> PrimFunc:
        a, b, c = vectors("float32", 64)
        core = Var("core")
        step = insn("vadd", {"n": n}, {"dst": (c, core * 16), operand: (a, core * 16), "b": (b, 0)})
        return PrimFunc("f", (a, b, c), loop(core, 4, step))

    assert structural_equal(build(), build())
    assert not structural_equal(build(), build(n=32))
    assert not structural_equal(build(), build(operand="x"))


def test_verify_checks_the_regions_buffers() -> None:
    verify(staged_add())
    a, b, c = vectors("float32", 8)
    stray = Buffer("S", (8,), dtypes.float32)
    func = PrimFunc("f", (a, b, c), insn("vadd", {"n": 8}, {"dst": (c, 8), "a": (stray, 0), "b": (b, 0)}))
    with pytest.raises(VerifyError) as info:
        verify(func)
    assert "operand 'a' on buffer S, which is neither a parameter nor allocated here" in str(info.value)
    assert "operand 'dst' on C: constant offset 8 is outside [0, 8)" in str(info.value)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: TensorInsn(isa.load_isa("diannao"), "vadd", (InsnField("n", const(1)),) * 2, ()),
            "field names must be unique",
        ),
        (
            lambda: TensorInsn(
                isa.load_isa("diannao"), "relu", (),
                (Region("dst", Buffer("A", (4,), dtypes.int8), const(0)),) * 2
            ),
            "region names must be unique, but ['dst'] repeat",
        ),
        (lambda: InsnField("n", const(1.5, "float32")), "InsnField n: expected an integer expression"),
        (lambda: InsnField("n", 3), "InsnField n: expected an integer expression, but got 3"),
        (
            lambda: Region("a", Buffer("A", (4,), dtypes.int8), const(True, "bool")),
            "Region a of A: expected an integer offset, but got True",
        ),
        (lambda: TensorInsn(isa.load_isa("diannao"), "vadd", [], ()), "expected a tuple of InsnField"),
        (lambda: TensorInsn("diannao", "vadd", (), ()), "expected an isa.ISA spec, but got 'diannao'"),
    ],
)
def test_malformed_nodes_are_rejected(build, message: str) -> None:
    with pytest.raises(IRTypeError, match=re.escape(message)):
        build()


# --------------------------------------------------------------------------------------------------
# errors name the instruction as printed and the problem


def vadd_func(dt_a="float32", dt_b="float32", *, spec="diannao", name="vadd", fields=None, regions=None):
    a = Buffer("A", (8,), dtypes.dtype(dt_a))
    b = Buffer("B", (8,), dtypes.dtype(dt_b))
    c = Buffer("C", (8,), dtypes.dtype(dt_a))
    regions = regions or {"dst": (c, 0), "a": (a, 0), "b": (b, 0)}
    return PrimFunc("f", (a, b, c), insn(name, fields or {"n": 8}, regions, spec=spec)), (a, b, c)


def arrays_for(func: PrimFunc) -> list[np.ndarray]:
    return [np.ones(p.shape, p.dtype.numpy) for p in func.params]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"name": "vfoo"},
            "diannao.vfoo(n=8, dst=C[0], a=A[0], b=B[0]): ISA 'diannao' has no instruction 'vfoo'",
        ),
        ({"fields": {"n": 8, "m": 1}}, "unknown field 'm'; fields are T, dst, a, b, n"),
        ({"fields": {"n": 8, "T": 4}}, "type field 'T' is set, but it follows the region dtypes"),
        ({"dt_b": "int8"}, "dtype mismatch: the operands of type T are dst=C (f32), a=A (f32), b=B (i8)"),
        (
            {"dt_a": "uint8", "dt_b": "uint8"},
            "expected T in ['i8', 'i16', 'i32', 'f16', 'f32'], but the buffers hold u8",
        ),
    ],
)
def test_static_faults_are_reported_before_anything_runs(kwargs: dict, message: str) -> None:
    func, _ = vadd_func(**kwargs)
    arrays = arrays_for(func)
    with pytest.raises(InterpError, match=re.escape(message)):
        run(func, arrays)
    assert all((x == 1).all() for x in arrays)


def test_operands_must_have_regions_that_name_real_operands() -> None:
    a, b, c = vectors("float32", 8)
    missing = PrimFunc("f", (a, b, c), insn("vadd", {"n": 8}, {"dst": (c, 0), "a": (a, 0)}))
    with pytest.raises(InterpError, match=re.escape("dst=C[0], a=A[0]): no region for operand(s) b")):
        run(missing, arrays_for(missing))
    unknown = PrimFunc("f", (a, b, c), insn("relu", {"n": 8}, {"dst": (c, 0), "x": (a, 0)}))
    with pytest.raises(InterpError, match=re.escape("unknown operand 'x'; operands are dst")):
        run(unknown, arrays_for(unknown))


def test_an_operand_of_fixed_dtype_needs_a_buffer_of_that_dtype() -> None:
    regs, mem = Buffer("R", (32,), dtypes.int32), Buffer("M", (4,), dtypes.float32)
    func = PrimFunc("f", (regs, mem), insn("ld", {"rd": 1}, {"R": (regs, 0), "m": (mem, 0)}))
    with pytest.raises(InterpError, match=re.escape("operand 'm' is i32, but buffer M holds f32")):
        run(func, arrays_for(func))


def test_a_region_outside_its_buffer_names_the_elements_and_the_loop() -> None:
    a, b, c = vectors("float32", 30)
    core = Var("core")
    step = insn("vadd", {"n": 8}, {"dst": (c, core * 8), "a": (a, core * 8), "b": (b, 0)})
    func = PrimFunc("f", (a, b, c), loop(core, 4, step))
    msg = "diannao.vadd(n=8, dst=C[core*8], a=A[core*8], b=B[0]): operand 'dst' covers elements [24, 31] of C"
    with pytest.raises(InterpError, match=re.escape(msg) + r".*outside its 30 elements at core=3"):
        run(func, arrays_for(func))


def test_a_field_that_does_not_fit_is_reported_where_it_happens() -> None:
    a, b, c = vectors("float32", 8)
    i = Var("i")
    func = PrimFunc(
        "f", (a, b, c), loop(i, 2, insn("vadd", {"n": i - 1}, {"dst": (c, 0), "a": (a, 0), "b": (b, 0)}))
    )
    with pytest.raises(InterpError, match=r"field 'n' = -1 does not fit in 21 bits .* at i=0"):
        run(func, arrays_for(func))


def test_reading_uninitialized_allocated_elements_is_an_error() -> None:
    (c,) = vectors("float32", 8, "C")
    al = Buffer("AL", (8,), dtypes.float32, scope="nmem")
    body = Allocate(
        al, seq(Store(al, (const(0),), const(1.0, "float32")), insn("relu", {"n": 8}, {"dst": (al, 0)}))
    )
    func = PrimFunc("f", (c,), body)
    with pytest.raises(
        InterpError, match=re.escape("operand 'dst' reads uninitialized element AL[1] (shape [8])")
    ):
        run(func, arrays_for(func))


def test_a_byte_copy_into_part_of_an_uninitialized_element_is_an_error() -> None:
    (a,) = vectors("float32", 4, "A")
    al = Buffer("AL", (4,), dtypes.float32, scope="nmem")
    body = Allocate(al, insn("memcpy", {"len": 6, "count": 1}, {"dst": (al, 0), "src": (a, 0)}))
    func = PrimFunc("f", (a,), body)
    with pytest.raises(
        InterpError, match=re.escape("operand 'dst' writes part of uninitialized element AL[1] (shape [4])")
    ):
        run(func, arrays_for(func))


def test_scalar_max_and_min_pick_zeros_and_nans_as_numpy_and_the_isa_do():
    """relu as a scalar Max(x, 0.0) equals the spec's relu bit for bit, signed zeros included."""
    import math

    from compiler.interp.numerics import fmax, fmin

    for a, b in [(-0.0, 0.0), (0.0, -0.0), (1.0, math.nan), (math.nan, 1.0), (2.0, 1.0), (1.0, 2.0)]:
        for ours, ref in ((fmax(a, b), np.maximum(a, b)), (fmin(a, b), np.minimum(a, b))):
            assert math.isnan(ours) == math.isnan(ref)
            if not math.isnan(ref):
                assert math.copysign(1.0, ours) == math.copysign(1.0, ref) and ours == ref
