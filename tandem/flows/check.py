"""Comparing a computed result with its numpy reference (shared by ``demo``, ``compile`` and ``run``).

Integers must be bit-exact; floats are accepted when bit-exact or ``allclose`` at the dtype's
precision (``FLOAT_TOLERANCE``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.ir import dtypes

#: Relative and absolute tolerance of float comparisons, by dtype name.
FLOAT_TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}


@dataclass(frozen=True)
class Comparison:
    """Whether a result matched its reference, and a one-line account of how."""

    passed: bool
    detail: str


def compare(got: np.ndarray, want: np.ndarray, dt: dtypes.DType | None = None) -> Comparison:
    """Bit-exact comparison for integers; ``allclose`` at ``FLOAT_TOLERANCE`` for floats."""
    dt = dtypes.dtype(want.dtype) if dt is None else dt
    if got.shape != want.shape:
        return Comparison(False, f"expected shape {want.shape}, but got {got.shape}")
    if got.dtype != want.dtype:
        return Comparison(False, f"expected dtype {want.dtype}, but got {got.dtype}")
    n = want.size
    if dt.is_int:
        bad = np.argwhere(got != want)
        if bad.size:
            idx = tuple(int(v) for v in bad[0])
            first = f"first at {idx}: expected {want[idx]}, but got {got[idx]}"
            return Comparison(False, f"{len(bad)} of {n} elements differ; {first}")
        return Comparison(True, f"bit-exact with numpy ({dt}, {n} elements)")
    if np.array_equal(got, want, equal_nan=True):
        return Comparison(True, f"bit-exact with numpy ({dt}, {n} elements)")
    tol = FLOAT_TOLERANCE.get(dt.name, 1e-5)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if not np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True):
        idx = tuple(int(v) for v in np.unravel_index(int(np.nanargmax(err)), err.shape))
        return Comparison(False, f"not allclose; worst at {idx}: expected {want[idx]}, but got {got[idx]}")
    return Comparison(True, f"allclose to numpy ({dt}, {n} elements, max |err| {float(np.nanmax(err)):.3g})")
