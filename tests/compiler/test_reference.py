"""The one numpy reference per operator (compiler/ops/reference.py) against its definition, as loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from compiler.ops import reference


def naive_conv(data: np.ndarray, kernel: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """``out[n, o, y, x] = sum over c, r, q of in[n, c, y*stride + r, x*stride + q] * w[o, c, r, q]``."""
    padded = np.pad(data.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, w = padded.shape
    o, _, kh, kw = kernel.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    want = np.zeros((n, o, oh, ow), np.int64)
    for b, f, y, x in itertools.product(range(n), range(o), range(oh), range(ow)):
        win = padded[b, :, y * stride : y * stride + kh, x * stride : x * stride + kw]
        want[b, f, y, x] = int((win * kernel[f].astype(np.int64)).sum())
    return want


@pytest.mark.parametrize(("stride", "pad"), [(1, 1), (2, 0), (2, 1)])
def test_conv2d_is_the_definition_in_both_layouts(stride: int, pad: int) -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(-128, 128, (2, 3, 6, 5), dtype=np.int8)
    kernel = rng.integers(-128, 128, (4, 3, 3, 2), dtype=np.int8)
    want = naive_conv(data, kernel, stride, pad)
    got = reference.conv2d(data, kernel, stride, pad)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    hwc = reference.conv2d(data[0].transpose(1, 2, 0), kernel.transpose(0, 2, 3, 1), stride, pad,
                           layout="HWC")
    np.testing.assert_array_equal(hwc, want[0].transpose(1, 2, 0))


def test_float_inputs_sum_in_float64_and_an_unknown_layout_is_refused() -> None:
    x = np.full((1, 1, 3, 3), 0.1, np.float32)
    got = reference.conv2d(x, np.ones((1, 1, 3, 3), np.float32))
    assert got.dtype == np.float64 and got[0, 0, 0, 0] == pytest.approx(9 * float(np.float32(0.1)), abs=0)
    with pytest.raises(ValueError, match="layout must be one of NCHW, HWC"):
        reference.conv2d(x, x, layout="NHWC")


def test_dense_and_the_shift_clip_epilogue() -> None:
    a = np.array([[1, 2], [3, 4]], np.int8)
    b = np.array([[5, 6], [7, 8], [-1, 0]], np.int8)
    np.testing.assert_array_equal(reference.dense(a, b), [[17, 23, -1], [39, 53, -3]])
    acc = np.array([-(2**20), -3, 0, 2**11, 2**20])
    np.testing.assert_array_equal(reference.shift_clip(acc, 4), [-128, -1, 0, 127, 127])
    np.testing.assert_array_equal(reference.shift_clip(acc, 4, relu=True), [0, 0, 0, 127, 127])


def test_gemm_is_dense_with_the_second_operand_transposed() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (5, 7), dtype=np.int8)
    b = rng.integers(-128, 128, (7, 4), dtype=np.int8)
    got = reference.gemm(a, b)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    np.testing.assert_array_equal(got, reference.dense(a, b.T))


def test_element_wise_operators_are_exact_and_do_not_wrap() -> None:
    a = np.array([127, -128, 3], np.int8)
    b = np.array([1, 1, -5], np.int8)
    np.testing.assert_array_equal(reference.sub(a, b), [126, -129, 8])
    np.testing.assert_array_equal(reference.mul(a, b), [127, -128, -15])
    np.testing.assert_array_equal(reference.maximum(a, b), [127, 1, 3])
    assert reference.sub(a, b).dtype == reference.mul(a, b).dtype == np.int64
    x, y = np.float32([0.1, 3.0]), np.float32([0.2, -1.5])
    assert reference.mul(x, y).dtype == np.float64
    np.testing.assert_array_equal(reference.mul(x, y), x.astype(np.float64) * y.astype(np.float64))
    np.testing.assert_array_equal(reference.maximum(x, y), [y[0], x[1]])


def test_integer_sums_are_exact_beyond_float64s_mantissa() -> None:
    """Sums that float64 cannot hold exactly take the int64 path: still the exact result."""
    a = np.full((1, 4), 2**30 + 1, np.int64)
    b = np.full((1, 4), 2**30 + 1, np.int64)
    assert int(reference.dense(a, b)[0, 0]) == 4 * (2**30 + 1) ** 2     # 2**62 + 2**33 + 4: not a float64


@pytest.mark.parametrize(("stride", "pad", "k"), [(1, 0, 3), (2, 1, 3), (3, 2, 4), (2, 0, 2)])
def test_conv_transpose_nd_is_the_adjoint_of_conv2d(stride, pad, k):
    """<conv2d(x, w), g> == <x, conv_transpose_nd(g, w)> for every x and g: the transposed convolution is
    conv2d's adjoint (its gradient with respect to the input), which defines it."""
    rng = np.random.default_rng(stride * 10 + k)
    h = stride * 3 + k - 2 * pad          # an input whose windows tile it exactly
    x = rng.integers(-9, 10, (2, 3, h, h + stride))
    w = rng.integers(-9, 10, (4, 3, k, k))
    y = reference.conv2d(x, w, stride, pad)
    g = rng.integers(-9, 10, y.shape)
    back = reference.conv_transpose_nd(g, w, stride, pad)
    assert back.shape == x.shape
    assert int((y * g).sum()) == int((x * back).sum())


@pytest.mark.parametrize(("stride", "pad"), [(1, 0), (2, 1)])
def test_conv_nd_in_two_dimensions_is_conv2d_and_groups_split_the_channels(stride, pad):
    rng = np.random.default_rng(stride)
    x, w = rng.integers(-9, 10, (2, 6, 7, 8)), rng.integers(-9, 10, (4, 6, 3, 3))
    np.testing.assert_array_equal(reference.conv_nd(x, w, stride, pad), reference.conv2d(x, w, stride, pad))
    wg = rng.integers(-9, 10, (4, 3, 3, 3))   # two groups of 3 input and 2 output channels
    halves = [reference.conv2d(x[:, 3 * q:3 * q + 3], wg[2 * q:2 * q + 2], stride, pad) for q in range(2)]
    np.testing.assert_array_equal(reference.conv_nd(x, wg, stride, pad, groups=2), np.concatenate(halves, 1))


def test_a_dilated_conv_nd_is_conv2d_with_zeros_between_the_kernel_taps():
    rng = np.random.default_rng(7)
    x, w = rng.integers(-9, 10, (1, 2, 9, 9)), rng.integers(-9, 10, (3, 2, 3, 3))
    spread = np.zeros((3, 2, 5, 5), w.dtype)
    spread[:, :, ::2, ::2] = w
    want = reference.conv2d(x, spread, 1, 2)
    np.testing.assert_array_equal(reference.conv_nd(x, w, 1, 2, dilation=2), want)
