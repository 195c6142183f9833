"""The one ``tandem run`` flow: compile an operator for a target, execute it, validate it, report.

    report = run("conv2d", load_target("vita", "tvm-paper"), {"H": 14, "W": 14, "IC": 256, "OC": 256})

``run`` takes the same steps for every target; a target contributes only what differs, as a ``TargetFlow``
(the interface and its records: tandem/flows/flow.py; one per target: tandem/flows/diannao.py,
tandem/flows/vita.py, tandem/flows/cpu.py, tandem/flows/cuda.py, found through ``FLOWS``): its schedules and
data layouts, its executor (a simulator, or this CPU) and its roofline. This module is the driver: ``run``
(``prepare``: steps 1-3 below, then ``report_on``: 4-6), ``flow_for`` (a target's flow, or its ``USER_FLOW``
for an operator of the user's, tandem/flows/user_ops.py) and ``reference_of``. The steps:

1. ``plan``: check the operator and every parameter before any work (``RunError`` naming the parameter),
   and list the schedule candidates: one, or the tuning candidates the target ranks likeliest first;
2. ``inputs``: seeded random arrays in the layout the kernel takes (or the caller's arrays, checked);
3. ``compile``: schedule, pass pipeline and emitter, for each candidate; with several, each one's ``cost``
   is measured (simulated cycles, or seconds on this CPU) and the cheapest kept (a candidate that does not
   compile is skipped, its error in ``tuned``; if none compiles, the first error is raised);
4. ``execute``: simulate the program (DianNao, VITA) or run the kernel on this CPU;
5. ``reference`` and ``validate``: the result of compiler/ops/reference on the same inputs, compared bit for
   bit (integers and element-wise floats) or within a stated bound (float convolutions); with seeded inputs,
   also on the flow's ``extreme_inputs`` (the CPU's integer layers: every array at its type's maximum or
   minimum, and alternating), each run again (``output``) and compared the same way, so that a kernel
   whose instruction saturates or wraps where the operator's sum does not is caught;
6. ``roofline``: the machine's bound for the operator.

Parameters: ``seed`` (default 0) for every target, the layer (conv2d: ``H W IC OC K S P``, with ``N`` images
on VITA, or ``shape`` = (H, W, IC); gemm: ``M N K``; element-wise: ``shape``) and each target's own options
(documented on its flow). The report is the JSON contract of ``tandem run --json``:

- ``op``, ``target``, ``params`` (the layer, the options, the ``seed``, the schedule used and the ``tuned``
  candidates measured, each with its cost);
- ``validated`` and ``max_abs_err`` against the numpy reference, and ``detail`` saying how they compared;
- ``cycles`` (simulated, or time-stamp-counter ticks of one call on the CPU), ``instructions`` by name,
  ``tensor_instructions`` and ``scalar_instructions`` (null where not counted);
- ``scalar_fallback``: scalar instructions executed in statements marked for tensorization (0 when every
  marked statement became a tensor instruction), with ``unmatched``, why each such statement stayed scalar;
- ``utilization`` per unit, ``roofline_cycles`` and ``roofline_pct`` (null where the machine has no bound);
- ``compile_s`` (every candidate compiled), ``simulate_s`` (the final execution) and ``wall_s``;
- ``selection``: what instruction selection chose (compiler/passes/explain.py), an object of
  ``statements``, one per statement a cover chose instructions for (VITA's epilogue and ALU operators,
  DianNao's element-wise operators; empty elsewhere), each ``{statement, expression, chosen, alternatives}``,
  a cover being ``{instructions, cycles, steps: [{instruction, node, cycles, reason?}]}`` and the
  alternatives the best cover with each other instruction at the root, cheapest first; and ``unused``
  (null unless ``explain``): each candidate instruction no chosen cover uses, ``{instruction, statement,
  reason}``, the statement where it came closest and why not (the matcher's reason, or "costs N cycles where
  the chosen cover costs M");
- a target's own measures at the top level (the CPU's ``gops``, ``seconds`` and ``peak_gops``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.errors import LoweringError
from compiler.target import Target
from tandem.flows.check import Check
from tandem.flows.flow import RunError, RunReport, TargetFlow
from tandem.flows.user_ops import is_user_op

if TYPE_CHECKING:
    from tandem.flows.kernel_cache import KernelCache

#: Where each target kind's flow lives (imported when first used: the CPU's needs LLVM).
FLOWS = {"diannao": "tandem.flows.diannao", "vita": "tandem.flows.vita", "cpu": "tandem.flows.cpu",
         "cuda": "tandem.flows.cuda"}


def flow_for(kind: str, op: str | None = None) -> TargetFlow:
    """The flow of target ``kind`` (RunError for a kind nothing runs); for a user's operator ``op``
    (``FILE.py:NAME``, tandem/flows/user_ops.py), the target's ``USER_FLOW``, where it has one."""
    if kind not in FLOWS:
        raise RunError(f"unknown target {kind!r}; expected one of {', '.join(FLOWS)}")
    module = importlib.import_module(FLOWS[kind])
    if op is not None and is_user_op(op):
        if not hasattr(module, "USER_FLOW"):
            takers = [k for k, m in FLOWS.items() if hasattr(importlib.import_module(m), "USER_FLOW")]
            raise RunError(f"{op}: operators of your own do not run on {kind} (its flow compiles "
                           f"{', '.join(module.OPS)}); they run on {', '.join(takers)}")
        return module.USER_FLOW
    return module.FLOW


@dataclass
class Prepared:
    """An operator planned, its inputs checked and its kernel compiled (the cheapest candidate, where there
    were several): what ``run`` executes, validates and reports on (``report_on``), and what a network's
    inference calls again on new arrays (``output``, tandem/network/inference.py)."""

    op: str
    target: Target
    flow: TargetFlow
    job: Any
    data: list[np.ndarray]
    seed: int
    winner: Any
    compiled: Any
    tuned: list[dict[str, Any]]
    compile_s: float
    start: float   # when ``prepare`` began (the report's wall time counts from it)
    seeded: bool   # the inputs were drawn from the seed (then also checked at their types' extremes)

    def output(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """The kernel's output on ``inputs`` (in the operator's layouts, as ``run`` takes them), nothing
        measured or checked."""
        return self.flow.output(self.job, self.compiled, list(inputs), self.target)


def run(op: str, target: Target, params: Mapping[str, Any] | None = None, *,
        inputs: Sequence[np.ndarray] | None = None,
        progress: Callable[[int, int], None] | None = None, cache: KernelCache | None = None,
        explain: bool = False) -> RunReport:
    """Compile ``op`` for ``target``, execute it on ``inputs`` (default: seeded random arrays), compare the
    output with numpy and report what was measured (see the module docstring for the steps and parameters).
    Bad parameters raise RunError before anything is compiled. With several candidates, ``progress(done,
    total)`` is called as each is measured (the command line draws a progress bar with it). ``cache`` (a
    ``KernelCache``, tandem/flows/kernel_cache.py) holds compiled kernels by target, operator, parameters and
    candidate, in memory and, where it has a folder, on disk: a kernel found there is not compiled again
    (``compile_s`` is then the time to find it). ``explain`` adds the unused instructions to
    the report's ``selection`` (the search for why each was not used)."""
    return report_on(prepare(op, target, params, inputs=inputs, progress=progress, cache=cache), explain)


def prepare(op: str, target: Target, params: Mapping[str, Any] | None = None, *,
            inputs: Sequence[np.ndarray] | None = None,
            progress: Callable[[int, int], None] | None = None, cache: KernelCache | None = None
            ) -> Prepared:
    """``run``'s steps 1-3 (plan, inputs, compile and, with several candidates, measure each): the operator
    ready to execute (``run``'s arguments)."""
    start = time.perf_counter()
    flow = flow_for(target.kind, op)
    rest = dict(params or {})
    seed = rest.pop("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise RunError(f"{target.kind} {op}: seed must be an integer >= 0, but got {seed!r}")
    job = flow.plan(op, rest, target)
    if not job.candidates:
        raise RunError(f"{target.kind} {op}: no schedule fits {params}")
    data = (flow.inputs(job, np.random.default_rng(seed)) if inputs is None
            else flow.check_inputs(job, inputs))

    compile_s, tuned, best, failed = 0.0, [], None, None
    for candidate in job.candidates:
        t0 = time.perf_counter()
        stores = flow.stores_kernels(job)
        compiled = None if cache is None else cache.get(stores, target, op, params, candidate)
        if compiled is None:
            try:
                compiled = flow.compile(job, candidate, target)
            except (LoweringError, RunError) as e:   # tuning: a candidate that does not compile is skipped
                if len(job.candidates) == 1:
                    raise
                failed = failed or e
                tuned.append({**flow.tuned_entry(candidate, float("inf")), "error": str(e)})
                continue
            if cache is not None:
                cache.put(stores, target, op, params, candidate, compiled)
        compile_s += time.perf_counter() - t0
        if len(job.candidates) == 1:
            best = (0.0, candidate, compiled)
            break
        cost = flow.cost(job, compiled, data, target)
        tuned.append(flow.tuned_entry(candidate, cost))
        if progress is not None:
            progress(len(tuned), len(job.candidates))
        if best is None or cost < best[0]:
            best = (cost, candidate, compiled)
    if best is None:
        raise failed
    _, winner, compiled = best
    return Prepared(op, target, flow, job, data, seed, winner, compiled, tuned, compile_s, start,
                    seeded=inputs is None)


def report_on(prepared: Prepared, explain: bool = False) -> RunReport:
    """``run``'s steps 4-6 on a prepared operator: execute, validate (also at the inputs' extremes, for
    seeded inputs), roofline, and the report."""
    p = prepared
    flow, job, compiled, target, data = p.flow, p.job, p.compiled, p.target, p.data
    t0 = time.perf_counter()
    execution = flow.execute(job, compiled, data, target)
    simulate_s = time.perf_counter() - t0
    from compiler.backend.blas import quiet_blas  # here: ``tandem --help`` imports this module
    from compiler.passes import explain as explanation

    with quiet_blas():   # numpy's BLAS threads spin after a call: a run timed next would lose its 2nd core
        want = flow.reference(job, data)
        check = flow.validate(job, data, execution.output, want)
        if p.seeded and check.validated:
            check = _at_extremes(flow, job, compiled, target, data, check)
    roof = flow.roofline(job, target, execution)

    chosen = explanation.selection(flow.selection(job, compiled), unused_too=explain)
    return RunReport(
        op=p.op, target=target.kind,
        params={**flow.params(job, p.winner, target), **execution.chosen, "seed": p.seed, "tuned": p.tuned},
        validated=check.validated, max_abs_err=check.max_abs_err, cycles=execution.cycles,
        instructions=execution.instructions, tensor_instructions=execution.tensor_instructions,
        scalar_instructions=execution.scalar_instructions, scalar_fallback=execution.scalar_fallback,
        unmatched=execution.unmatched, utilization=execution.utilization, roofline_cycles=roof,
        roofline_pct=round(100.0 * roof / execution.cycles, 2) if roof and execution.cycles else
        (None if roof is None else 0.0),
        compile_s=round(p.compile_s, 4), simulate_s=round(simulate_s, 4),
        wall_s=round(time.perf_counter() - p.start, 4), detail=check.detail, selection=chosen,
        measured=execution.measured,
        costs=execution.costs, output=execution.output, reference=want, program=execution.program,
    )


def _at_extremes(flow: TargetFlow, job: Any, compiled: Any, target: Target, data: list[np.ndarray],
                 seeded: Check) -> Check:
    """``seeded`` (the check on the seeded inputs), or the first check that fails on the flow's inputs at
    their types' extremes, naming them."""
    cases = flow.extreme_inputs(job, data)
    for name, arrays in cases:
        got = flow.output(job, compiled, arrays, target)
        check = flow.validate(job, arrays, got, flow.reference(job, arrays))
        if not check.validated:
            return Check(False, check.max_abs_err, f"on inputs at their extremes ({name}): {check.detail}")
    if not cases:
        return seeded
    return Check(True, seeded.max_abs_err, f"{seeded.detail}, also on {len(cases)} inputs at their types' "
                                           f"extremes ({'; '.join(name for name, _ in cases)})")


def reference_of(op: str, target: Target, params: Mapping[str, Any], inputs: Sequence[np.ndarray]
                 ) -> np.ndarray:
    """What ``op`` with ``params`` computes on ``inputs`` on ``target``, in its output's layout: the flow's
    reference (compiler/ops/reference), with nothing compiled or executed. The job is planned once per
    distinct request (a network asks again at every step that reuses a kernel's timing)."""
    given = {k: v for k, v in params.items() if k != "seed"}
    key = (target.kind, id(target), op, repr(sorted((k, repr(v)) for k, v in given.items())))
    found = _PLANNED.get(key)
    if found is None or found[0] is not target:
        flow = flow_for(target.kind, op)
        found = (target, flow, flow.plan(op, dict(given), target))
        # not a user's operator (its file may change) nor a parameter printed by its address
        if not is_user_op(op) and " at 0x" not in key[3]:
            if len(_PLANNED) >= 256:
                _PLANNED.clear()
            _PLANNED[key] = found
    _, flow, job = found
    return flow.reference(job, flow.check_inputs(job, inputs))


_PLANNED: dict[tuple, tuple[Target, TargetFlow, Any]] = {}   # reference_of's jobs, by request
