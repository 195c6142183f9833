"""Tests of tensor expressions (``compiler.te``): placeholder, compute, reduce_axis, reductions, casts."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import te
from compiler.errors import IRTypeError
from compiler.interp import run
from compiler.ir import (
    Add,
    Cast,
    FloatImm,
    IntImm,
    Load,
    Mul,
    Reduce,
    ReduceCombiner,
    Var,
    dtypes,
)
from compiler.pipeline import build
from compiler.schedule import create_schedule


def compile_and_run(out: te.Tensor, inputs: list[te.Tensor], arrays: list[np.ndarray]) -> np.ndarray:
    """Lower + compile ``out`` with a default schedule and interpret it on ``arrays``."""
    func = build(create_schedule(out), [*inputs, out], name=out.name)
    result = np.zeros(out.shape, out.dtype.numpy)
    run(func, [*arrays, result])
    return result


# --------------------------------------------------------------------------------------------------
# placeholder and compute


def test_placeholder_is_a_tensor_whose_indexing_loads_its_buffer() -> None:
    a = te.placeholder((3, 4), "int8", name="A")
    assert (a.name, a.shape, a.dtype, a.ndim) == ("A", (3, 4), dtypes.int8, 2)
    assert isinstance(a.op, te.PlaceholderOp) and a.op.input_tensors == ()
    i = Var("i")
    load = a[i, 2]
    assert load == Load(a.buffer, (i, IntImm(2)))
    assert load.dtype == dtypes.int8
    assert te.tensor_of(a.buffer) is a
    assert te.placeholder(5).shape == (5,)


@pytest.mark.parametrize(
    ("build_it", "message"),
    [
        (
            lambda: te.placeholder((3, 0), name="P"),
            r"placeholder P: expected a non-empty shape of positive ints",
        ),
        (lambda: te.placeholder((), name="P"), r"placeholder P: expected a non-empty shape"),
        (lambda: te.placeholder((2,), "int7"), r"unknown dtype 'int7'"),
        (
            lambda: te.placeholder((3, 4), name="A")[0],
            r"tensor A: expected 2 indices for shape \[3, 4\], but got 1",
        ),
        (
            lambda: te.placeholder((3,), name="A")[FloatImm(1.0)],
            r"tensor A: index 'f32\(1.0\)' has dtype float32, expected an int",
        ),
        (lambda: te.placeholder((3,), name="A")[1.5], r"tensor A: expected an integer index, but got 1.5"),
    ],
)
def test_bad_placeholders_and_indices_raise(build_it, message: str) -> None:
    with pytest.raises(IRTypeError, match=message):
        build_it()


def test_compute_names_its_axes_after_the_lambda_parameters() -> None:
    a = te.placeholder((4, 5), name="A")
    c = te.compute((4, 5), lambda yy, xx: a[yy, xx] * 2.0, name="C")
    assert [iv.name for iv in c.op.axis] == ["yy", "xx"]
    assert [iv.dom for iv in c.op.axis] == [(0, 4), (0, 5)]
    assert all(iv.kind is te.IterKind.SPATIAL for iv in c.op.axis)
    assert c.op.body == Mul(a[c.op.axis[0].var, c.op.axis[1].var], FloatImm(2.0))
    assert c.op.input_tensors == (a,)
    assert (c.name, c.shape, c.dtype) == ("C", (4, 5), dtypes.float32)
    star = te.compute((4, 5), lambda *i: a[i], name="D")
    assert [iv.name for iv in star.op.axis] == ["ax0", "ax1"]
    named = te.compute((4, 5), lambda *i: a[i], name="E", axis_names=["row", "col"])
    assert [iv.name for iv in named.op.axis] == ["row", "col"]


def test_compute_checks_the_lambda_against_the_shape() -> None:
    a = te.placeholder((4,), name="A")
    with pytest.raises(
        IRTypeError, match=r"compute C: fcompute takes 2 indices but the shape \[4\] has 1 dims"
    ):
        te.compute((4,), lambda i, j: a[i], name="C")


def test_compute_dtype_casts_the_body_and_constants_become_expressions() -> None:
    a = te.placeholder((4,), "int8", name="A")
    wide = te.compute((4,), lambda i: a[i], name="W", dtype="int32")
    assert wide.dtype == dtypes.int32 and isinstance(wide.op.body, Cast)
    const = te.compute((4,), lambda i: 7, name="K")
    assert const.op.body == IntImm(7) and const.dtype == dtypes.int32
    half = te.compute((4,), lambda i: 1.5, name="H", dtype="float16")
    assert half.op.body == FloatImm(1.5, dtypes.float16)


def test_cast_converts_and_is_a_no_op_for_the_same_dtype() -> None:
    a = te.placeholder((4,), "int8", name="A")
    i = Var("i")
    assert te.cast(a[i], "int32") == Cast(a[i], dtypes.int32)
    assert te.cast(a[i], "int8") == a[i]
    assert te.cast(3, "float32") == FloatImm(3.0)


# --------------------------------------------------------------------------------------------------
# reductions


def test_reduce_axis_and_sum_build_a_reduce_node() -> None:
    a = te.placeholder((4, 6), name="A")
    k = te.reduce_axis(6, name="k")
    assert (k.name, k.dom, k.extent, k.kind) == ("k", (0, 6), 6, te.IterKind.REDUCE)
    assert te.reduce_axis((2, 5), name="r").dom == (2, 3)
    c = te.compute((4,), lambda i: te.sum(a[i, k], axis=k), name="C")
    body = c.op.body
    assert isinstance(body, Reduce) and body.combiner is ReduceCombiner.SUM
    assert body.axis == (k.var,) and body.ranges == ((0, 6),)
    assert c.op.reduce_axis == (k,)
    assert te.max(a[0, k], axis=[k]).combiner is ReduceCombiner.MAX
    assert te.min(a[0, k], axis=k).combiner is ReduceCombiner.MIN


@pytest.mark.parametrize(
    ("build_it", "message"),
    [
        (lambda: te.reduce_axis(0, name="k"), r"reduce_axis k: expected a non-empty range, but got \[0, 0\)"),
        (
            lambda: te.reduce_axis((3, 1), name="k"),
            r"reduce_axis k: expected a non-empty range, but got \[3, 1\)",
        ),
        (lambda: te.reduce_axis(2.5, name="k"), r"reduce_axis k: expected an int extent or \(lo, hi\)"),
        (lambda: te.sum(1, axis=Var("k")), r"sum: expected reduce axes made by reduce_axis\(\)"),
        (lambda: te.sum(1, axis=[]), r"sum: expected reduce axes made by reduce_axis\(\)"),
    ],
)
def test_bad_reductions_raise(build_it, message: str) -> None:
    with pytest.raises(IRTypeError, match=message):
        build_it()


def test_a_reduce_axis_twice_and_nested_reductions_raise() -> None:
    a = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(IRTypeError, match="sum: a reduce axis appears twice"):
        te.sum(a[k, k], axis=[k, k])
    with pytest.raises(IRTypeError, match="compute C: a reduction must be the whole body"):
        te.compute((4,), lambda i: te.sum(a[i, k], axis=k) + 1.0, name="C")


def test_reduce_identity() -> None:
    assert te.reduce_identity(ReduceCombiner.SUM, dtypes.int32) == IntImm(0)
    assert te.reduce_identity(ReduceCombiner.MAX, dtypes.int8) == IntImm(-128, dtypes.int8)
    assert te.reduce_identity(ReduceCombiner.MIN, dtypes.uint8) == IntImm(255, dtypes.uint8)
    assert te.reduce_identity(ReduceCombiner.MAX, dtypes.float32) == FloatImm(float("-inf"))
    assert te.reduce_identity(ReduceCombiner.MIN, dtypes.float16) == FloatImm(float("inf"), dtypes.float16)


def test_iter_var_arithmetic_builds_index_expressions() -> None:
    """Convolution-style indices: ``yy*2 + ry`` mixes a spatial variable and a reduce axis."""
    a = te.placeholder((9,), "int32", name="A")
    ry = te.reduce_axis(3, name="ry")
    c = te.compute((4,), lambda yy: te.sum(a[yy * 2 + ry], axis=ry), name="C")
    yy = c.op.axis[0]
    assert c.op.body.source == a[Add(Mul(yy.var, IntImm(2)), ry.var)]
    assert ry * 2 + yy == Add(Mul(ry.var, IntImm(2)), yy.var)  # IterVars stand for their variables
    assert (ry < 2) == (ry.var < 2)
    assert te.iter_var_of(ry.var) is ry and te.iter_var_of(Var("ry")) is None
    x = np.arange(9, dtype=np.int32)
    got = compile_and_run(c, [a], [x])
    np.testing.assert_array_equal(got, [x[2 * y : 2 * y + 3].sum() for y in range(4)])


@pytest.mark.parametrize("dt", ["int8", "float32"])
def test_max_reduction_lowers_and_runs_like_numpy_max(dt: str) -> None:
    rng = np.random.default_rng(0)
    a = te.placeholder((5, 7), dt, name="A")
    k = te.reduce_axis(7, name="k")
    c = te.compute((5,), lambda i: te.max(a[i, k], axis=k), name="C")
    x = rng.integers(-128, 128, (5, 7)).astype(dt) if dt == "int8" else rng.standard_normal((5, 7)).astype(dt)
    np.testing.assert_array_equal(compile_and_run(c, [a], [x]), x.max(axis=1))


@pytest.mark.parametrize("dt", ["int8", "float32"])
def test_min_reduction_over_two_axes_runs_like_numpy_min(dt: str) -> None:
    rng = np.random.default_rng(1)
    a = te.placeholder((3, 4, 5), dt, name="A")
    r, s = te.reduce_axis(4, name="r"), te.reduce_axis(5, name="s")
    c = te.compute((3,), lambda i: te.min(a[i, r, s], axis=[r, s]), name="C")
    x = (
        rng.integers(-128, 128, (3, 4, 5)).astype(dt)
        if dt == "int8"
        else rng.standard_normal((3, 4, 5)).astype(dt)
    )
    np.testing.assert_array_equal(compile_and_run(c, [a], [x]), x.min(axis=(1, 2)))


def test_sum_over_a_shifted_reduce_range() -> None:
    a = te.placeholder((10,), "int32", name="A")
    k = te.reduce_axis((3, 8), name="k")
    c = te.compute((1,), lambda i: te.sum(a[k], axis=k), name="C")
    x = np.arange(10, dtype=np.int32) ** 2
    np.testing.assert_array_equal(compile_and_run(c, [a], [x]), [x[3:8].sum()])


# --------------------------------------------------------------------------------------------------
# low-precision floats


def test_float16_add_equals_numpy_float16() -> None:
    rng = np.random.default_rng(2)
    a, b = te.placeholder((6, 6), "float16", name="A"), te.placeholder((6, 6), "float16", name="B")
    c = te.compute((6, 6), lambda i, j: a[i, j] + b[i, j], name="C")
    assert c.dtype == dtypes.float16
    x, y = (
        (rng.standard_normal((6, 6)) * 100).astype(np.float16),
        rng.standard_normal((6, 6)).astype(np.float16),
    )
    np.testing.assert_array_equal(compile_and_run(c, [a, b], [x, y]), x + y)


def test_bfloat16_add_rounds_like_round_bfloat16_of_the_float32_sum() -> None:
    rng = np.random.default_rng(3)
    a, b = te.placeholder((6, 6), "bfloat16", name="A"), te.placeholder((6, 6), "bfloat16", name="B")
    c = te.compute((6, 6), lambda i, j: a[i, j] + b[i, j], name="C")
    assert c.dtype == dtypes.bfloat16
    x = dtypes.round_bfloat16(rng.standard_normal((6, 6)).astype(np.float32) * 100)
    y = dtypes.round_bfloat16(rng.standard_normal((6, 6)).astype(np.float32))
    want = dtypes.round_bfloat16(x + y)
    assert not np.array_equal(want, x + y)  # the rounding matters for these inputs
    np.testing.assert_array_equal(compile_and_run(c, [a, b], [x, y]), want)


def test_bfloat16_compute_from_float32_casts_and_rounds() -> None:
    rng = np.random.default_rng(4)
    a = te.placeholder((16,), "float32", name="A")
    c = te.compute((16,), lambda i: te.cast(a[i], "bfloat16"), name="C")
    x = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_array_equal(compile_and_run(c, [a], [x]), dtypes.round_bfloat16(x))


def test_thread_axis() -> None:
    t = te.thread_axis("core", name="tid")
    assert (t.name, t.thread_tag, t.kind, t.dom) == ("tid", "core", te.IterKind.THREAD, None)
    assert te.thread_axis("cluster").name == "cluster"
    with pytest.raises(IRTypeError, match="thread_axis: expected a non-empty tag string"):
        te.thread_axis("")


def test_an_intermediate_tensor_nobody_holds_survives_garbage_collection():
    """Regression: conv2d's pad tensor was held only weakly, so a garbage collection between building the
    operator and scheduling it dropped the pad and data stages (a flaky 'not part of this schedule')."""
    import gc

    from compiler import ops

    data = te.placeholder((1, 4, 8, 8), "int8", name="data")
    kernel = te.placeholder((8, 4, 3, 3), "int8", name="kernel")
    out = ops.conv2d_nchw(data, kernel, 1, 1, out_dtype="int32")
    gc.collect()
    stages = [stage.op.name for stage in create_schedule(out).stages]
    assert stages == ["data", "conv2d.pad", "kernel", "conv2d"]
