"""The ``tandem compile`` flow: build an operator's workload, compile it, optionally run and check it.

``compile_op`` parses the command-line text (operator, shape, dtype, ``KEY=VALUE`` params), builds the
workload (``tandem.flows.catalogue``), and runs ``compiler.pipeline.build`` on its schedule, keeping the
printed IR after every pass. ``check_on_random_inputs`` runs the compiled function in the reference
interpreter on seeded random inputs and compares the output with the workload's numpy reference
(compiler/ops/reference.py's exact result) through ``check_output``: bit-exact for integers (the exact
result wrapped to the output's type), bit-exact or ``allclose`` at the dtype's precision for element-wise
floats, and within ``K`` roundings of the summed products' magnitude for float sums of ``K`` products.

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
from compiler.target import Target
from tandem.flows.catalogue import Workload, build_op
from tandem.flows.check import Check, compare, within_bound
from tandem.flows.params import parse_params, parse_shape

SEED = 0


@dataclass(frozen=True)
class Compiled:
    """A compiled workload: the final function and the printed IR after each step (lower, passes)."""

    workload: Workload
    func: ir.PrimFunc
    stages: tuple[tuple[str, str], ...]


def compile_op(
    op: str,
    shape: str | None = None,
    dtype: str | None = None,
    params: Sequence[str] = (),
    target: Target | str = "reference",
) -> Compiled:
    """Build operator ``op`` from command-line text and compile it for ``target`` (a Target, or the name
    ``reference``)."""
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
    return check_output(w, out, inputs)


def check_output(workload: Workload, got: np.ndarray, inputs: Sequence[np.ndarray]) -> Check:
    """``got``, the compiled output on ``inputs``, against the workload's exact reference: integers and
    element-wise floats by ``compare`` with the exact result stored in the output's dtype (integers wrapped,
    floats rounded once); a float sum of ``K`` products ``within_bound`` of it (``K`` roundings at the
    output dtype's precision, relative to the sum of the products' magnitudes)."""
    dt = workload.output.dtype
    want = workload.reference(inputs)
    if dt.is_int or not workload.reduction:
        stored = want.astype(dt.numpy)
        return compare(got, dtypes.round_bfloat16(stored) if dt.kind == "bfloat" else stored, dt)
    magnitude = workload.reference([np.abs(x) for x in inputs])
    return within_bound(got, want, magnitude, workload.reduction, dt)
