"""narrow_output (compiler/passes/narrow_output.py): a kernel whose output values are proved to fit 8 bits
writes them as 8 bits, its copy-out forwarded into the epilogue's store. Each function is run by the
interpreter before and after the pass."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.arith.bound import bound_expr
from compiler.arith.float_bounds import float_bounds, never_nan
from compiler.errors import ScheduleError
from compiler.interp import run
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ops import network
from compiler.passes.narrow_output import narrow_output

I32, F32 = dtypes.int32, dtypes.float32
N = 8
i = ir.Var("i")
A, SCALE = ir.Buffer("A", (N,), I32), ir.Buffer("scale", (N,), F32)
ACC, OUT = ir.Buffer("acc", (N,), I32, "local"), ir.Buffer("out", (N,), I32)


def requantizing(value: ir.Expr, zero_point: int = 3, lo: int = 0, hi: int = 255) -> ir.PrimFunc:
    """out[i] = acc[i] (a copy-out), then out[i] requantized in place (a fused epilogue's store)."""
    epilogue = network.requantized(OUT[i], SCALE[i], zero_point, lo, hi)
    body = ir.seq(ir.Store(ACC, (i,), A[i] * 3),
                  ir.Store(OUT, (i,), value), ir.Store(OUT, (i,), epilogue))
    return ir.PrimFunc("f", (A, SCALE, OUT), ir.Allocate(ACC, ir.For(i, ir.const(0), ir.const(N), body)))


def outputs(f: ir.PrimFunc) -> np.ndarray:
    rng = np.random.default_rng(0)
    args = {"A": rng.integers(-5000, 5000, N).astype(np.int32),
            "scale": rng.uniform(0.001, 0.2, N).astype(np.float32),
            "out": np.zeros(N, f.params[-1].dtype.numpy)}
    run(f, args)
    return args["out"]


@pytest.mark.parametrize(("lo", "hi", "dtype"), [(0, 255, "uint8"), (-128, 127, "int8"), (3, 127, "int8")])
def test_a_requantized_output_is_written_as_8_bits_with_the_same_values(lo, hi, dtype):
    f = requantizing(ACC[i], 3, lo, hi)
    narrowed = narrow_output(f, network.narrow_type(lo, hi))
    assert narrowed.params[-1].dtype == dtypes.dtype(dtype) and network.narrow_type(lo, hi) == dtype
    assert str(narrowed.body).count("out[i] =") == 1 and "acc[i] + " not in str(narrowed.body)
    want, got = outputs(f), outputs(narrowed)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, want) and want.min() >= lo


def test_the_copy_out_is_forwarded_into_the_epilogue_store():
    narrowed = narrow_output(requantizing(ACC[i]), "uint8")
    stores = [line.strip() for line in str(narrowed.body).splitlines() if line.strip().startswith("out[")]
    assert len(stores) == 1 and stores[0].startswith("out[i] = u8(") and "f32(acc[i])" in stores[0]


def test_a_value_not_proved_to_fit_is_refused_by_name():
    unclamped = ir.PrimFunc("f", (A, SCALE, OUT), ir.For(i, ir.const(0), ir.const(N),
                                                          ir.Store(OUT, (i,), A[i] + 1)))
    with pytest.raises(ScheduleError, match=r"stores A\[i\] \+ 1 into out, not proved to lie in uint8's"):
        narrow_output(unclamped, "uint8")
    with pytest.raises(ScheduleError, match="int8's range"):   # [0, 255] does not fit int8
        narrow_output(requantizing(ACC[i], 0, 0, 255), "int8")


def test_an_output_read_after_the_forwarding_is_refused():
    reads = ir.PrimFunc("f", (A, SCALE, OUT), ir.For(i, ir.const(0), ir.const(N), ir.seq(
        ir.Store(OUT, (i,), ir.const(1)), ir.Store(ACC, (i,), OUT[i]))))
    with pytest.raises(ScheduleError, match="still reads its output out"):
        narrow_output(ir.PrimFunc("f", reads.params, ir.Allocate(ACC, reads.body)), "uint8")


def test_the_rounding_idiom_and_a_float_conversion_are_bounded_exactly():
    x = ir.Var("x", F32)
    clamped = ir.Min(ir.Max(x, ir.const(-3.0, F32)), ir.const(252.0, F32))
    rounder = ir.const(12582912.0, F32)
    assert float_bounds((clamped + rounder) - rounder) == (-3.0, 252.0)
    assert float_bounds((x + rounder) - rounder) is None   # x unbounded
    too_wide = ir.Min(ir.Max(x, ir.const(-1e7, F32)), ir.const(1e7, F32))   # past 2**22: no exact rounding
    low, high = float_bounds((too_wide + rounder) - rounder)
    assert low < -1e7 and high > 1e7
    converted = ir.cast((clamped + rounder) - rounder, I32) + 3
    assert (bound_expr(converted, {}).lo, bound_expr(converted, {}).hi) == (0, 255)
    assert bound_expr(ir.cast(x, I32), {}).lo is None


def test_narrow_type_picks_the_8_bit_type_that_holds_the_range():
    assert [network.narrow_type(*r) for r in ((0, 255), (-128, 127), (0, 127), (10, 200))] == \
        ["uint8", "int8", "int8", "uint8"]
    with pytest.raises(ScheduleError, match="fits neither"):
        network.narrow_type(-1, 200)


def test_a_clamp_written_as_maxps_is_never_nan():
    x = ir.Var("x", F32)
    low, high = ir.const(-3.0, F32), ir.const(252.0, F32)
    clamp = ir.Min(ir.Select(ir.GT(x, low), x, low), high)
    rounder = ir.const(12582912.0, F32)
    assert never_nan(clamp) and never_nan((clamp + rounder) - rounder)
    assert float_bounds(clamp) == (-3.0, 252.0)
    assert not never_nan(ir.Min(ir.Max(x, low), high))   # numpy's maximum keeps a nan
    assert not never_nan(x * ir.const(2.0, F32)) and not never_nan(ir.Select(ir.GT(x, low), low, x))


def test_a_requantization_sends_nan_to_the_lowest_value_and_infinity_to_the_highest_on_the_cpu():
    """MLAS's clamp (``reference.saturated``): the compiled kernel needs no nan check and faults on none."""
    from tandem.flows.run import run
    from tandem.flows.targets import load_target

    acc = np.array([[[5, 5, -5, 0, 100, -100, 7, 9]]], np.int32).repeat(2, axis=0)
    scale = np.array([[[np.nan, np.inf, np.inf, np.inf, 0.5, 0.5, 1e30, -1e30]]], np.float32)
    scale = scale.repeat(2, axis=0)
    report = run(network.user_op("requantize_scaled"), load_target("cpu"),
                 {"C": 2, "H": 1, "W": 8, "ZP": 7, "LO": 0, "HI": 255, "min_time": 0.001},
                 inputs=[acc, np.zeros_like(acc), scale])
    assert report.validated
    assert list(report.output[0, 0]) == [0, 255, 0, 0, 57, 0, 255, 0]


def test_place_output_writes_the_same_values_inside_a_larger_buffer():
    from compiler.passes.place_output import place_output

    f = requantizing(ACC[i])
    placed = place_output(f, (N + 3,), (2,))
    assert placed.params[-1].shape == (N + 3,) and "out[i + 2] =" in str(placed.body)
    want = outputs(f)
    rng = np.random.default_rng(0)
    args = {"A": rng.integers(-5000, 5000, N).astype(np.int32),
            "scale": rng.uniform(0.001, 0.2, N).astype(np.float32), "out": np.full(N + 3, -1, np.int32)}
    run(placed, args)
    assert np.array_equal(args["out"][2:-1], want) and list(args["out"][[0, 1, -1]]) == [-1, -1, -1]
    with pytest.raises(ScheduleError, match=r"at \[4\] does not lie inside \[11\]"):
        place_output(f, (N + 3,), (4,))


def test_a_requantization_rounds_half_to_even_in_one_conversion_on_the_cpu():
    """(x + R) - R of a clamped x is x rounded half to even: the LLVM backend converts it in one instruction
    (llvm.lrint: cvtps2dq on x86), with the same integers on every half."""
    from tandem.flows.run import prepare
    from tandem.flows.targets import load_target

    acc = np.arange(-40, 40, dtype=np.int32).reshape(2, 5, 8)   # times 0.5: every half from -20 to 19.5
    scale = np.full(acc.shape, 0.5, np.float32)
    prepared = prepare(network.user_op("requantize_scaled"), load_target("cpu"),
                       {"C": 2, "H": 5, "W": 8, "ZP": 0, "LO": -128, "HI": 127, "min_time": 0.001},
                       inputs=[acc, np.zeros_like(acc), scale])
    got = prepared.output([acc, np.zeros_like(acc), scale])
    assert np.array_equal(got, np.rint(acc * 0.5).astype(np.int64))
    assert list(got.ravel()[:4]) == [-20, -20, -19, -18]
    assert "llvm.lrint" in prepared.compiled[1].llvm_ir
