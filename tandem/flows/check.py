"""How a computed result compared with its numpy reference: the one ``Check`` and the functions that make it.

``Check`` (``validated``, ``max_abs_err``, ``detail``: the names of the run report's JSON contract) is what
every comparison returns, for the run flows (tandem/flows/run.py), ``tandem compile``
(tandem/flows/compile.py, tandem/flows/cross.py), the demo's rows (tandem/cli/demo.py) and user operators
(tandem/flows/user_ops.py). The comparisons:

- ``exact``: bit for bit (NaN equals NaN), as the run flows compare integer and element-wise results;
- ``within_bound``: every element within ``K`` roundings of the summed products' magnitude of the exact result
  (``compiler/ops/reference.py``), as float sums are compared;
- ``compare``: integers bit-exact; floats bit-exact or ``allclose`` at the dtype's precision
  (``FLOAT_TOLERANCE``), with the dtype and element count in the detail (``tandem compile --run``, the demo).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.ir import dtypes

#: Relative and absolute tolerance of ``compare``'s float comparisons, by dtype name.
FLOAT_TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}
#: Fraction bits of each float dtype: twice its unit roundoff is ``2^-bits``, the most one rounding (of a
#: product or a partial sum) errs by, relative to the sum of the products' magnitudes.
FRACTION_BITS = {"float32": 23, "float16": 10, "bfloat16": 7}
#: twice fp32's unit roundoff
ROUNDING = 2.0 ** -FRACTION_BITS["float32"]


@dataclass(frozen=True)
class Check:
    """How an output compared with its reference: whether it passed, the largest absolute difference, and a
    one-line account of how they compared."""

    validated: bool
    max_abs_err: float
    detail: str


def max_abs_err(got: np.ndarray, want: np.ndarray) -> float:
    """The largest ``|got - want|`` over the elements (NaNs left out; 0 when there is none)."""
    with np.errstate(invalid="ignore"):
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(np.nanmax(diff)) if diff.size and not np.isnan(diff).all() else 0.0


def exact(got: np.ndarray, want: np.ndarray) -> Check:
    """Bit-for-bit equality (NaN equals NaN), with the largest difference where they differ."""
    if got.shape != want.shape:
        return Check(False, float("inf"), f"output shape {list(got.shape)}, numpy's {list(want.shape)}")
    equal = got == want
    if got.dtype.kind == "f" and want.dtype.kind == "f":
        equal |= np.isnan(got) & np.isnan(want)
    err = max_abs_err(got, want)
    if equal.all():
        return Check(True, err, "bit-exact with numpy")
    return Check(False, err, f"{int(np.count_nonzero(~equal))} of {got.size} outputs differ from numpy "
                             f"(max |err| {err:.3g})")


def within_bound(got: np.ndarray, want: np.ndarray, magnitude: np.ndarray, k: int,
                 dt: dtypes.DType = dtypes.float32) -> Check:
    """Whether every element of ``got`` is within ``k * 2^-bits * magnitude`` of ``want`` (``magnitude`` =
    the sum of the products' absolute values; ``bits`` the fraction bits of ``dt``, the precision the sums
    were rounded to: fp32's 23 by default)."""
    if got.shape != want.shape:
        return Check(False, float("inf"), f"output shape {list(got.shape)}, numpy's {list(want.shape)}")
    bits = FRACTION_BITS[dt.name]
    err = np.abs(got.astype(np.float64) - want)
    bound = k * 2.0 ** -bits * magnitude
    worst = float(err.max()) if err.size else 0.0
    bad = int(np.count_nonzero(err > bound)) + int(np.count_nonzero(~np.isfinite(got)))
    if bad:
        at = np.unravel_index(int(np.argmax(err - bound)), err.shape)
        return Check(False, worst, f"{bad} of {err.size} outputs outside K * 2^-{bits} * sum|a*b| of numpy's "
                                   f"exact result; worst at {tuple(map(int, at))}: {float(got[at])} vs "
                                   f"{float(want[at])}")
    return Check(True, worst, f"every output within K * 2^-{bits} * sum|a*b| (K = {k}) of numpy's exact "
                              f"result of the inputs; largest error {worst:.3g}")


def compare(got: np.ndarray, want: np.ndarray, dt: dtypes.DType | None = None) -> Check:
    """Bit-exact comparison for integers; ``allclose`` at ``FLOAT_TOLERANCE`` for floats."""
    dt = dtypes.dtype(want.dtype) if dt is None else dt
    if got.shape != want.shape:
        return Check(False, float("inf"), f"expected shape {want.shape}, but got {got.shape}")
    err = max_abs_err(got, want)
    if got.dtype != want.dtype:
        return Check(False, err, f"expected dtype {want.dtype}, but got {got.dtype}")
    n = want.size
    if dt.is_int:
        bad = np.argwhere(got != want)
        if bad.size:
            idx = tuple(int(v) for v in bad[0])
            first = f"first at {idx}: expected {want[idx]}, but got {got[idx]}"
            return Check(False, err, f"{len(bad)} of {n} elements differ; {first}")
        return Check(True, err, f"bit-exact with numpy ({dt}, {n} elements)")
    if np.array_equal(got, want, equal_nan=True):
        return Check(True, err, f"bit-exact with numpy ({dt}, {n} elements)")
    tol = FLOAT_TOLERANCE.get(dt.name, 1e-5)
    if not np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True):
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        idx = tuple(int(v) for v in np.unravel_index(int(np.nanargmax(diff)), diff.shape))
        return Check(False, err, f"not allclose; worst at {idx}: expected {want[idx]}, but got {got[idx]}")
    return Check(True, err, f"allclose to numpy ({dt}, {n} elements, max |err| {err:.3g})")
