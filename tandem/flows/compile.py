"""The ``tandem compile`` flow: build an operator's workload, compile it, optionally run and check it.

``compile_op`` parses the command-line text (operator, shape, dtype, ``KEY=VALUE`` params), builds the
workload (``tandem.flows.catalogue``), and runs ``compiler.pipeline.build`` on its schedule, keeping the
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
from compiler.ir import nodes as ir
from compiler.target import Target
from tandem.flows.catalogue import Workload, build_op, parse_params, parse_shape
from tandem.flows.check import Check, compare

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
    return compare(out, w.reference(inputs), w.output.dtype)
