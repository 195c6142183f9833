"""Helpers for checking passes: run a function before and after a transformation on the same inputs.

Used by the pass tests (STYLE rule 17: every pass is checked by running the IR before and after it)
and usable by anyone writing a new pass.
"""

from __future__ import annotations

import numpy as np

from compiler.backend.llvm import build, cpu_unsupported
from compiler.interp import run
from compiler.ir import nodes as ir


def random_args(func: ir.PrimFunc, rng: np.random.Generator) -> list[np.ndarray]:
    """Random arrays for every parameter of ``func``: ints in [-100, 100), floats standard normal."""
    args = []
    for b in func.params:
        if b.dtype.is_int:
            args.append(rng.integers(-100, 100, b.shape).astype(b.dtype.numpy))
        else:
            args.append(rng.standard_normal(b.shape).astype(b.dtype.numpy))
    return args


_KERNELS: dict[str, object] = {}


def _compiled(func: ir.PrimFunc):
    """The LLVM build of ``func``, reused for a function that prints the same (tests compile many twice)."""
    key = str(func)
    kernel = _KERNELS.get(key)
    if kernel is None:
        if len(_KERNELS) >= 256:
            _KERNELS.clear()
        kernel = _KERNELS[key] = build(func, threads=2)
    return kernel


def assert_same_results(before: ir.PrimFunc, after: ir.PrimFunc, what: str, seeds: int = 3,
                        rtol: float = 0.0, jit: bool = True) -> None:
    """Interpret ``before`` and ``after`` on the same random inputs; every parameter must end equal.

    ``after`` may have flattened parameters (same element count). Raises AssertionError naming the
    parameter, the seed and ``what`` changed it. ``rtol`` > 0 allows float parameters that relative
    difference (a pass that reorders a float sum, as replacing a loop by a conv instruction does);
    integers are always compared exactly. With ``jit``, each of the two that can run on this CPU (see
    ``compiler.backend.llvm.cpu_unsupported``) is also compiled with the LLVM backend and must compute
    exactly what the interpreter computes for it.
    """
    runnable = [(k, f) for k, f in enumerate((before, after)) if jit and cpu_unsupported(f) is None]
    kernels = [(k, f, _compiled(f)) for k, f in runnable]
    for seed in range(seeds):
        want = random_args(before, np.random.default_rng(seed))
        got = [a.copy() for a in want]
        compiled = {k: [a.copy() for a in want] for k, _, _ in kernels}
        run(before, want)
        run(after, got)
        for b, x, y in zip(before.params, want, got, strict=True):
            if rtol and not b.dtype.is_int:
                np.testing.assert_allclose(y, x, rtol=rtol, atol=rtol,
                                           err_msg=f"{what} changed {b.name} (seed {seed})")
            else:
                np.testing.assert_array_equal(y, x, err_msg=f"{what} changed {b.name} (seed {seed})")
        for k, f, kernel in kernels:
            arrays = compiled[k]
            kernel(*arrays)
            interpreted = (want, got)[k]
            for b, x, y in zip(before.params, interpreted, arrays, strict=True):
                np.testing.assert_array_equal(
                    y, x, err_msg=f"the LLVM build of {f.name} {('before', 'after')[k]} {what} "
                                  f"differs from the interpreter on {b.name} (seed {seed})")
