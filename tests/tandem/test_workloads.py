"""Tests of the ``tandem compile`` operator registry (tandem/flows/catalogue.py) against the compiler."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.interp import run
from compiler.ir import dtypes
from compiler.ops import reference
from compiler.pipeline import build
from compiler.schedule import create_schedule
from tandem.flows.catalogue import OPS, build_op
from tandem.flows.compile import check_output
from tandem.flows.params import WorkloadError, parse_params, parse_shape


def run_workload(op: str, shape=None, dtype=None, params=None, seed: int = 0):
    w = build_op(op, shape, dtype, params or {})
    inputs = w.random_inputs(np.random.default_rng(seed))
    return w, inputs, interpreted(w, w.schedule, inputs)


def interpreted(w, schedule, inputs):
    func = build(schedule, list(w.tensors), name=w.name)
    out = np.zeros(w.output.shape, w.output.dtype.numpy)
    run(func, [*inputs, out])
    return out


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_operator_with_its_defaults_matches_its_reference_bit_exactly(op: str) -> None:
    w, inputs, got = run_workload(op)
    assert w.name == op
    assert [x.dtype for x in inputs] == [t.dtype.numpy for t in w.tensors[:-1]]
    assert [x.shape for x in inputs] == [t.shape for t in w.tensors[:-1]]
    assert got.shape == w.reference(inputs).shape
    check = check_output(w, got, inputs)
    assert check.validated and check.detail.startswith("bit-exact with numpy"), check.detail


def test_the_references_are_compiler_ops_reference() -> None:
    rng = np.random.default_rng(0)
    for op, ref in (("dense", reference.dense), ("gemm", reference.gemm)):
        w = build_op(op, None, None, {})
        a, b = w.random_inputs(rng)
        np.testing.assert_array_equal(w.reference([a, b]), ref(a, b))
        assert w.reduction == 32
    nchw = build_op("conv2d", (2, 3, 6, 5), None, {"k": "4", "stride": "2"})
    data, kernel = nchw.random_inputs(rng)
    np.testing.assert_array_equal(nchw.reference([data, kernel]), reference.conv2d(data, kernel, 2, 1))
    assert nchw.reduction == 3 * 3 * 3
    nhwc = build_op("conv2d", (2, 3, 6, 5), None, {"k": "4", "stride": "2", "layout": "nhwc"})
    want = reference.conv2d(data, kernel, 2, 1).transpose(0, 2, 3, 1)
    got = nhwc.reference([data.transpose(0, 2, 3, 1), kernel.transpose(2, 3, 1, 0)])
    np.testing.assert_array_equal(got, want)
    relu = build_op("relu", (5,), "int8", {})
    np.testing.assert_array_equal(relu.reference([np.int8([-3, 0, 4, -128, 127])]), [0, 0, 4, 0, 127])
    assert relu.reduction == 0


@pytest.mark.parametrize(
    ("op", "dt", "out"),
    [
        ("add", None, dtypes.float32),
        ("relu", "int8", dtypes.int8),
        ("dense", None, dtypes.int32),
        ("gemm", "float32", dtypes.float32),
        ("conv2d", None, dtypes.int32),
        ("conv2d", "float16", dtypes.float16),
    ],
)
def test_default_and_output_dtypes(op: str, dt: str | None, out: dtypes.DType) -> None:
    assert build_op(op, None, dt, {}).output.dtype == out


@pytest.mark.parametrize(
    ("op", "shape", "dtype", "params"),
    [
        ("dense", (3, 5, 7), "bfloat16", {}),
        ("gemm", (4, 6, 33), "float16", {"split": "2:8"}),
        ("conv2d", (1, 3, 6, 5), "float32", {"layout": "nhwc", "stride": "2", "k": "5", "r": "3"}),
        ("conv2d", (2, 2, 5, 5), "bfloat16", {"padding": "0", "r": "2"}),
        ("mul", (3, 4, 5), "float16", {"nparts": "1:3", "bind": "0:core"}),
        ("sub", (17,), "int8", {"split": "0:4"}),
    ],
)
def test_float_and_integer_variants_match_their_references(op, shape, dtype, params) -> None:
    """Integers and element-wise floats bit-exact; a float sum within its bound of the exact result, and bit
    for bit the sum of the unscheduled loop nest (a schedule does not change the order of the sum)."""
    w, inputs, got = run_workload(op, shape, dtype, params)
    check = check_output(w, got, inputs)
    assert check.validated, check.detail
    if w.reduction and not w.output.dtype.is_int:
        bits = {"float32": 23, "float16": 10, "bfloat16": 7}[dtype]
        assert check.detail.startswith(f"every output within K * 2^-{bits} * sum|a*b| (K = {w.reduction})")
        np.testing.assert_array_equal(got, interpreted(w, create_schedule(w.output), inputs))
    else:
        assert check.detail.startswith("bit-exact with numpy")


def test_tensors_are_inputs_then_output() -> None:
    w = build_op("conv2d", (1, 4, 8, 8), None, {"layout": "nhwc", "k": "6", "r": "1", "padding": "0"})
    assert [t.name for t in w.tensors] == ["data", "kernel", "conv2d"]
    assert [t.shape for t in w.tensors] == [(1, 8, 8, 4), (1, 1, 4, 6), (1, 8, 8, 6)]
    assert [x.shape for x in w.random_inputs(np.random.default_rng(0))] == [(1, 8, 8, 4), (1, 1, 4, 6)]


def test_schedule_params_split_then_bind_the_output_loops() -> None:
    w = build_op("add", (14, 14), None, {"nparts": "0:4", "bind": "0:core"})
    stage = w.schedule[w.output]
    assert [iv.name for iv in stage.leaf_iter_vars] == ["ax0.outer", "ax0.inner", "ax1"]
    assert stage.attrs[stage.leaf_iter_vars[0]].thread.thread_tag == "core"
    by_name = build_op("dense", None, None, {"split": "k:8"})
    assert [iv.name for iv in by_name.schedule[by_name.output].leaf_iter_vars] == [
        "m",
        "n",
        "k.outer",
        "k.inner",
    ]


def test_parse_shape_and_params() -> None:
    assert parse_shape("256x56x56") == (256, 56, 56)
    assert parse_shape("7") == (7,)
    assert parse_params(["split=0:4", " k = 3 "]) == {"split": "0:4", "k": "3"}
    for bad in ("14x", "x14", "14x-1", "a", "", "1.5x2"):
        with pytest.raises(WorkloadError, match="--shape: expected positive integers joined by 'x'"):
            parse_shape(bad)


def test_workload_error_is_a_value_error_with_a_one_line_str() -> None:
    with pytest.raises(ValueError) as info:
        build_op("conv", None, None, {})
    assert (
        str(info.value)
        == "OP: expected one of add, conv2d, dense, gemm, maximum, mul, relu, sub, but got 'conv'"
    )
