"""compare: integers bit-exact, floats bit-exact or allclose at the dtype's precision."""

import numpy as np

from tandem.flows.check import compare


def test_compare_is_bit_exact_for_ints() -> None:
    want = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert compare(want.copy(), want).validated
    off = want.copy()
    off[1, 2] += 1
    result = compare(off, want)
    assert not result.validated and "(1, 2)" in result.detail and "expected 5, but got 6" in result.detail
    assert "dtype" in compare(want.astype(np.int64), want).detail
    assert "shape" in compare(want.reshape(3, 2), want).detail


def test_compare_is_allclose_for_floats() -> None:
    want = np.linspace(-1, 1, 8, dtype=np.float32)
    assert compare(want.copy(), want).detail.startswith("bit-exact")
    assert compare(want + np.float32(1e-9), want).validated
    result = compare(want + np.float32(0.5), want)
    assert not result.validated and "not allclose" in result.detail
