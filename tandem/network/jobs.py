"""A network's kernels compiled and simulated in a process pool (``run_network(..., jobs=N)``, ``tandem model
--jobs``): the kernels a network runs, each distinct one once, shared out among ``jobs`` worker processes.

Which kernels and on which arrays is found first, in order, as the network's run would find them
(``kernel_tasks``): each step placed on the integer graph's tensors, a step of several kernels fed the
reference outputs of the kernels before it. The workers compile, run and check each kernel
(``tandem.flows.run.prepare`` and ``report_on``, the one run flow) and send its report back; the network's
run then takes each step's reports from them. So in a pool every step runs on the integer graph's values of
its inputs, not on the target's outputs of the steps before it: the same arrays wherever every step is
bit-exact, and a step that is not fails alone instead of every step after it.

The workers are forked from the running process (they inherit the graph and the target, nothing is pickled
but each kernel's arrays and report); where the platform cannot fork, the kernels run here, in order. Only
a simulated target's kernels go to a pool: a CPU kernel's timing must have the machine to itself.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from compiler.target import Target
from tandem.flows.flow import RunReport
from tandem.flows.kernel_cache import KernelCache
from tandem.flows.run import prepare, reference_of, report_on
from tandem.network.place import place
from tandem.network.quantized import QuantizedGraph
from tandem.network.steps import NotOnTarget, Step

#: a kernel as a network runs it: (operator, run parameters, input arrays, the step that first runs it)
Task = tuple[str, dict, list[np.ndarray], str]


def kernel_key(op: str, params: Mapping[str, Any], arrays: Sequence[np.ndarray]) -> tuple:
    """What makes two of a network's kernels the same kernel (the same timing on a target whose timing does
    not depend on the data): the operator, its parameters and its inputs' shapes and types."""
    return op, repr(sorted(params.items())), tuple((a.shape, a.dtype.str) for a in arrays)


def task_id(key: tuple, step: int, part: int, reuse: bool) -> tuple:
    """How a kernel's result is found again: by its key where equal kernels share one run (``reuse``),
    else by its place in the network."""
    return key if reuse else (step, part)


def kernel_tasks(q: QuantizedGraph, target: Target, plan: Sequence[Step], oracle: Mapping[str, np.ndarray],
                 options: Mapping[str, Any] | None, reuse: bool) -> dict[tuple, Task]:
    """Every kernel the network runs on ``target`` (each distinct one once where ``reuse``), in order,
    on the integer graph's tensors ``oracle``, keyed by ``task_id``."""
    tasks: dict[tuple, Task] = {}
    for index, step in enumerate(plan):
        try:
            placement = place(step, q, dict(oracle), target)
        except NotOnTarget:
            continue
        outs: list[np.ndarray] = []
        for k, part in enumerate(placement.parts):
            arrays = part.inputs(outs) if callable(part.inputs) else part.inputs
            params = {**(options or {}), **part.params}
            tasks.setdefault(task_id(kernel_key(part.op, params, arrays), index, k, reuse),
                             (part.op, params, list(arrays), step.name))
            if any(callable(later.inputs) for later in placement.parts[k + 1:]):   # a later part reads it
                outs.append(part.unpack(reference_of(part.op, target, params, arrays)))
    return tasks


def jobs_for(jobs: int) -> int:
    """The worker count ``jobs`` asks for: itself, or one per CPU this process may use for 0."""
    if jobs < 0:
        raise ValueError(f"jobs must be 0 (one per CPU) or more, but got {jobs}")
    if jobs:
        return jobs
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_tasks(tasks: Mapping[tuple, Task], target: Target, jobs: int,
              progress: Callable[[int, int, str], None] | None = None,
              cache: KernelCache | None = None) -> dict[tuple, RunReport]:
    """Each task's report (compiled, run and checked by the run flow), by ``jobs`` worker processes
    (here, in order, where there is one job, one task, or no fork); ``progress(done, total, step)`` after
    each. ``cache``: where compiled kernels are found and kept (each worker has a copy: its disk folder is
    shared, its memory is the worker's); default: in memory."""
    keys, work = list(tasks), list(tasks.values())
    cache = KernelCache() if cache is None else cache
    forkable = "fork" in multiprocessing.get_all_start_methods()
    if jobs <= 1 or len(work) <= 1 or not forkable:
        reports = []
        for n, task in enumerate(work):
            reports.append(_run_task(task, target, cache))
            if progress is not None:
                progress(n + 1, len(work), task[3])
        return dict(zip(keys, reports, strict=True))
    global _TARGET, _CACHE
    _TARGET, _CACHE = target, cache   # the workers fork with them: nothing of the target is pickled
    reports = []
    try:   # a worker that dies (a crash in native code) breaks the pool: an error here, never a hang
        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(jobs, len(work)), mp_context=fork) as pool:
            for n, report in enumerate(pool.map(_in_worker, work)):
                reports.append(report)
                if progress is not None:
                    progress(n + 1, len(work), work[n][3])
    finally:
        _TARGET, _CACHE = None, None
    return dict(zip(keys, reports, strict=True))


_TARGET: Target | None = None        # the target of the pool being run (set before its workers fork)
_CACHE: KernelCache | None = None    # and its kernel cache (each worker's copy: equal kernels compile once)


def _in_worker(task: Task) -> RunReport:
    """A task's report, as the parent receives it: without the program (it holds the spec, which the
    parent has; the network's rows do not show it)."""
    assert _TARGET is not None and _CACHE is not None, "a pool's worker runs with what it was forked with"
    return replace(_run_task(task, _TARGET, _CACHE), program="")


def _run_task(task: Task, target: Target, cache: KernelCache) -> RunReport:
    op, params, arrays, _ = task
    return report_on(prepare(op, target, params, inputs=arrays, cache=cache))
