"""The ``tandem compile`` flow: build an operator's workload, compile it, optionally run and check it.

``compile_op`` parses the command-line text (operator, shape, dtype, ``KEY=VALUE`` params), builds the
workload (``tandem.workloads``), and runs ``compiler.pipeline.build`` on its schedule, keeping the
printed IR after every pass. ``check_on_random_inputs`` runs the compiled function in the reference
interpreter on seeded random inputs and compares the output with the workload's numpy reference:
bit-exact for integers, ``allclose`` at the dtype's precision for floats.

Errors: ``WorkloadError`` for bad command-line values, ``TandemError`` subclasses from the compiler;
the CLI prints either as one ``error: ...`` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler import interp, pipeline
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from tandem.workloads import Workload, build_op, parse_params, parse_shape

SEED = 0

#: Relative and absolute tolerance of float comparisons, by dtype name.
FLOAT_TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}


@dataclass(frozen=True)
class Compiled:
    """A compiled workload: the final function and the printed IR after each step (lower, passes)."""

    workload: Workload
    func: ir.PrimFunc
    stages: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Check:
    """The result of running a compiled function against numpy: whether it matched, and how."""

    passed: bool
    detail: str


def compile_op(
    op: str,
    shape: str | None = None,
    dtype: str | None = None,
    params: Sequence[str] = (),
    target: str = "reference",
) -> Compiled:
    """Build operator ``op`` from command-line text and compile it for ``target``."""
    workload = build_op(op, parse_shape(shape) if shape is not None else None, dtype, parse_params(params))
    stages: list[tuple[str, str]] = []
    func = pipeline.build(
        workload.schedule,
        list(workload.tensors),
        name=workload.name,
        target=target,
        dump=lambda name, f: stages.append((name, str(f))),
    )
    return Compiled(workload, func, tuple(stages))


def check_on_random_inputs(compiled: Compiled, seed: int = SEED) -> Check:
    """Interpret the compiled function on seeded random inputs and compare with the numpy reference."""
    w = compiled.workload
    inputs = w.random_inputs(np.random.default_rng(seed))
    out = np.zeros(w.output.shape, w.output.dtype.numpy)
    interp.run(compiled.func, [*inputs, out])
    return compare(out, w.reference(inputs), w.output.dtype)


def compare(got: np.ndarray, want: np.ndarray, dt: dtypes.DType) -> Check:
    """Bit-exact comparison for integers; ``allclose`` at ``FLOAT_TOLERANCE`` for floats."""
    if got.shape != want.shape:
        return Check(False, f"expected shape {want.shape}, but got {got.shape}")
    n = want.size
    if dt.is_int:
        bad = np.argwhere(got != want)
        if bad.size:
            idx = tuple(int(v) for v in bad[0])
            first = f"first at {idx}: expected {want[idx]}, but got {got[idx]}"
            return Check(False, f"{len(bad)} of {n} elements differ; {first}")
        return Check(True, f"bit-exact with numpy ({dt}, {n} elements)")
    if np.array_equal(got, want, equal_nan=True):
        return Check(True, f"bit-exact with numpy ({dt}, {n} elements)")
    tol = FLOAT_TOLERANCE.get(dt.name, 1e-5)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if not np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True):
        idx = tuple(int(v) for v in np.unravel_index(int(np.nanargmax(err)), err.shape))
        return Check(False, f"not allclose; worst at {idx}: expected {want[idx]}, but got {got[idx]}")
    return Check(True, f"allclose to numpy ({dt}, {n} elements, max |err| {float(np.nanmax(err)):.3g})")
