"""Every operator of compiler/ops, with its default schedule, computes what numpy computes."""

import numpy as np
import pytest

from compiler import ops, te
from compiler.errors import IRTypeError
from compiler.interp import run
from compiler.pipeline import build
from compiler.schedule import create_schedule


def _run(args, out_dtype=None):
    """Build the default schedule of the last tensor in ``args``, run it, return the output."""
    out = args[-1]
    func = build(create_schedule(out), args, name=out.name)
    rng = np.random.default_rng(7)
    arrays = []
    for t in args[:-1]:
        if t.dtype.is_int:
            lo, hi = (-128, 128) if t.dtype.name == "int8" else (-1000, 1000)
            arrays.append(rng.integers(lo, hi, t.shape).astype(t.dtype.numpy))
        else:
            arrays.append(rng.standard_normal(t.shape).astype(t.dtype.numpy))
    result = np.zeros(out.shape, out.dtype.numpy)
    run(func, [*arrays, result])
    return arrays, result


@pytest.mark.parametrize("dtype", ["int8", "int32", "float32", "float16"])
@pytest.mark.parametrize(
    "name, fn",
    [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("maximum", np.maximum)],
)
def test_elementwise_binary_matches_numpy(name, fn, dtype):
    a = te.placeholder((3, 5, 4), dtype, name="a")
    b = te.placeholder((3, 5, 4), dtype, name="b")
    (x, y), out = _run([a, b, getattr(ops, name)(a, b)])
    with np.errstate(over="ignore"):
        expected = fn(x, y)
    np.testing.assert_array_equal(out, expected)  # integer wrap and IEEE rounding are exact


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_relu_matches_numpy(dtype):
    a = te.placeholder((7, 9), dtype, name="a")
    (x,), out = _run([a, ops.relu(a)])
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_dense_int8_accumulates_in_int32():
    x = te.placeholder((5, 33), "int8", name="x")
    w = te.placeholder((6, 33), "int8", name="w")
    (xv, wv), out = _run([x, w, ops.dense(x, w, out_dtype="int32")])
    np.testing.assert_array_equal(out, xv.astype(np.int32) @ wv.astype(np.int32).T)


def test_gemm_float32():
    a = te.placeholder((4, 6), "float32", name="a")
    b = te.placeholder((6, 3), "float32", name="b")
    (av, bv), out = _run([a, b, ops.gemm(a, b)])
    np.testing.assert_allclose(out, av @ bv, rtol=1e-5, atol=1e-5)


def _conv_nchw_reference(data, kernel, stride, padding):
    n, c, h, w = data.shape
    k, _, r, s = kernel.shape
    p = np.pad(data.astype(np.int64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - r) // stride + 1
    ow = (w + 2 * padding - s) // stride + 1
    out = np.zeros((n, k, oh, ow), np.int64)
    for y in range(oh):
        for x in range(ow):
            window = p[:, :, y * stride : y * stride + r, x * stride : x * stride + s]
            out[:, :, y, x] = np.einsum("ncrs,kcrs->nk", window, kernel.astype(np.int64))
    return out


@pytest.mark.parametrize("stride, padding", [(1, 0), (1, 1), (2, 1), (2, 0)])
def test_conv2d_nchw_int8(stride, padding):
    data = te.placeholder((1, 3, 7, 6), "int8", name="data")
    kernel = te.placeholder((4, 3, 3, 3), "int8", name="kernel")
    conv = ops.conv2d_nchw(data, kernel, stride=stride, padding=padding, out_dtype="int32")
    (d, k), out = _run([data, kernel, conv])
    np.testing.assert_array_equal(out, _conv_nchw_reference(d, k, stride, padding).astype(np.int32))


@pytest.mark.parametrize("layout", ["HWIO", "OHWI"])
def test_conv2d_nhwc_int8_both_kernel_layouts(layout):
    data = te.placeholder((1, 6, 5, 3), "int8", name="data")
    kshape = (3, 3, 3, 4) if layout == "HWIO" else (4, 3, 3, 3)
    kernel = te.placeholder(kshape, "int8", name="kernel")
    conv = ops.conv2d_nhwc(data, kernel, stride=1, padding=1, out_dtype="int32", kernel_layout=layout)
    (d, k), out = _run([data, kernel, conv])
    k_oihw = k.transpose(3, 2, 0, 1) if layout == "HWIO" else k.transpose(0, 3, 1, 2)
    expected = _conv_nchw_reference(d.transpose(0, 3, 1, 2), k_oihw, 1, 1).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out, expected.astype(np.int32))


def test_conv2d_nchw_float32():
    data = te.placeholder((1, 2, 5, 5), "float32", name="data")
    kernel = te.placeholder((3, 2, 3, 3), "float32", name="kernel")
    (d, k), out = _run([data, kernel, ops.conv2d_nchw(data, kernel, padding=1)])
    expected = np.zeros(out.shape)
    p = np.pad(d.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for y in range(5):
        for x in range(5):
            expected[0, :, y, x] = np.einsum("crs,kcrs->k", p[0, :, y : y + 3, x : x + 3], k)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_pad_fills_the_border():
    a = te.placeholder((2, 3), "int16", name="a")
    (x,), out = _run([a, ops.pad(a, (1, 0), (2, 1), value=7)])
    np.testing.assert_array_equal(out, np.pad(x, ((1, 2), (0, 1)), constant_values=7))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ops.add(te.placeholder((2, 3)), te.placeholder((3, 2))), r"add: operand shapes differ"),
        (
            lambda: ops.add(te.placeholder((2,), "int8"), te.placeholder((2,), "int32")),
            r"add: operand dtypes differ",
        ),
        (
            lambda: ops.dense(te.placeholder((2, 3)), te.placeholder((4, 5))),
            r"dense: reduction sizes differ",
        ),
        (
            lambda: ops.conv2d_nchw(te.placeholder((1, 3, 5, 5)), te.placeholder((4, 2, 3, 3))),
            r"data has 3 channels but the kernel expects 2",
        ),
        (
            lambda: ops.conv2d_nchw(te.placeholder((1, 1, 2, 2)), te.placeholder((1, 1, 3, 3))),
            r"kernel 3 with padding 0 does not fit an input of size 2",
        ),
        (
            lambda: ops.conv2d_nhwc(te.placeholder((1, 4, 4, 1)), te.placeholder((3, 3, 1, 1)), stride=0),
            r"conv2d_nhwc: bad stride 0",
        ),
        (
            lambda: ops.conv2d_nhwc(
                te.placeholder((1, 4, 4, 1)), te.placeholder((3, 3, 1, 1)), kernel_layout="XYZW"
            ),
            r"kernel_layout must be HWIO or OHWI",
        ),
    ],
)
def test_operator_misuse_is_a_clear_type_error(make, match):
    with pytest.raises(IRTypeError, match=match):
        make()
