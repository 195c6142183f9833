"""Tests of tandem/demo.py that do not need the compiler: references, comparison, error rows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tandem.demo as demo


@pytest.mark.parametrize(("stride", "pad"), [(1, 1), (2, 0), (2, 1)])
def test_conv2d_reference_matches_naive_loops(stride: int, pad: int) -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(-128, 128, (2, 3, 6, 5), dtype=np.int8)
    kernel = rng.integers(-128, 128, (4, 3, 3, 2), dtype=np.int8)
    got = demo._conv2d_nchw_reference(data, kernel, stride=stride, pad=pad)

    padded = np.pad(data.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, w = padded.shape
    o, _, kh, kw = kernel.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    want = np.zeros((n, o, oh, ow), np.int64)
    for b, f, y, x in itertools.product(range(n), range(o), range(oh), range(ow)):
        win = padded[b, :, y * stride : y * stride + kh, x * stride : x * stride + kw]
        want[b, f, y, x] = int((win * kernel[f].astype(np.int64)).sum())
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_run_demo_turns_exceptions_into_failed_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(rng: np.random.Generator):
        raise ValueError("expected a positive factor, but got 0")

    def fine(rng: np.random.Generator):
        out = np.ones(3, np.int32)
        return out, out.copy(), "ir text"

    monkeypatch.setattr(demo, "CHECKS", [("boom", boom), ("fine", fine)])
    checks = demo.run_demo()
    assert [c.name for c in checks] == ["boom", "fine"]
    assert not checks[0].passed and checks[0].detail.startswith("ValueError: expected a positive")
    assert checks[1].passed and checks[1].ir == "ir text"
