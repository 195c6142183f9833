"""Whole networks on a target: every layer of an int8 graph (tandem/network/quantized.py, either scheme)
compiled and run through the one ``run`` flow (tandem/flows/run.py), each output checked bit for bit
against the integer graph.

    q = quantize(load(tandem.network.models.build("resnet18")))
    report = run_network(q, load_target("vita"))
    report.validated, report.cycles, report.rows[0]

Steps. ``steps`` (tandem/network/steps.py) groups the graph's layers into what a target runs as one kernel:
a Conv, Gemm or MatMul with the ReLU or ReLU6 that alone reads it (the epilogue's clip), an Add with its
ReLU. ``place`` (tandem/network/place.py) says, per target, which ``run`` operator computes a step, with
which parameters and on which arrays in the kernel's layouts, and how its output reads back; a step no
kernel of the target computes runs on the host (the integer graph's own layer), and its row says why. The
layers run in order, each on the outputs the target computed for the layers before it (not the integer
graph's), so the network's output is the target's; each step's output is compared with the integer graph's
value of the same tensor on the same network input: the table's ``validated``. With several ``jobs`` (a
simulated target's kernels by worker processes, tandem/network/jobs.py) each step runs on the integer
graph's values of its inputs instead: the same arrays wherever every step is bit-exact.

Speed. Each distinct kernel is compiled once per network (``run``'s ``cache``: keyed by the operator, its
parameters and the target), so a ResNet's repeated blocks compile once; with a cache on disk
(tandem/flows/kernel_cache.py, ``tandem model``'s default) once per machine, until the code changes. On a
target whose timing does not depend on the data (VITA: no data-dependent control flow or memory access), a
kernel already simulated is not simulated again: its cycles are taken from the first run and its output is the
flow's reference (compiler/ops/reference) on this step's arrays; the row says ``timing: reused`` and names the
step it was measured on (``resimulate=True`` simulates every step).
"""

from __future__ import annotations

import csv
import importlib
import io
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from compiler.target import Target
from sim.core.energy import CostReport, summed
from tandem.flows.check import exact
from tandem.flows.kernel_cache import KernelCache
from tandem.flows.run import FLOWS, Prepared, prepare, reference_of, report_on
from tandem.network.graph import random_inputs
from tandem.network.inference import time_inference
from tandem.network.jobs import jobs_for, kernel_key, kernel_tasks, run_tasks, task_id
from tandem.network.place import place
from tandem.network.quantized import QuantizedGraph
from tandem.network.steps import NotOnTarget, Placement, Step, steps


@dataclass
class Row:
    """One step of the network as it ran: the per-layer table's row."""

    step: str
    op: str
    shape: list[int]
    where: str
    kernel: str
    macs: int
    tensor_macs: int
    cycles: int | None
    seconds: float | None
    utilization: float | None
    dram_bytes: int | None
    validated: bool
    kernel_validated: bool | None
    max_abs_err: float
    timing: str
    compile_s: float
    simulate_s: float
    why: str = ""
    #: each kernel the step ran, in order: its label and cycles (not a CSV column)
    kernels: list[tuple[str, int]] = field(default_factory=list)
    #: the step's kernels' energy and the machine's area (sim/core/energy.py), where the target models them
    costs: CostReport | None = field(default=None, repr=False)

    @property
    def energy_uj(self) -> float | None:
        return None if self.costs is None else self.costs.energy_uj

    def to_json(self) -> dict[str, Any]:
        """The row as ``NetworkReport.to_json``'s layers list it: its fields and its energy, in all and by
        component (the machine's area is the totals')."""
        out = asdict(self)
        del out["costs"]
        energy = {} if self.costs is None else {k: v / 1e6 for k, v in self.costs.energy_pj.items()}
        return {**out, "energy_uj": self.energy_uj, "energy_breakdown_uj": energy}


#: the keys of ``NetworkReport.totals`` besides the energy and area (what a sweep may ``record``)
TOTALS_KEYS = ("model", "target", "config", "validated", "steps", "on_host", "cycles", "seconds",
               "inference_s", "macs", "tensor_macs_share", "dram_bytes", "wall_s")


@dataclass
class NetworkReport:
    """What running a network on a target measured (``to_json``/``to_csv``), and its int8 output."""

    model: str
    target: str
    config: str
    rows: list[Row]
    wall_s: float
    output: np.ndarray = field(repr=False)
    reference: np.ndarray = field(repr=False)
    #: on a target that runs for real (this CPU): the median seconds of one whole inference, end to end
    #: (tandem/network/inference.py), and how many were timed; None where the target is simulated
    inference_s: float | None = None
    inference_runs: int = 0
    #: whether the timed inferences gave the output the checked steps gave (None: none timed)
    inference_validated: bool | None = None
    #: the steps on the target that the timed inference placed again on every call, each with why (the
    #: others ran on runners of their own: tandem/network/inference.py)
    inference_placed: dict[str, str] = field(default_factory=dict)

    @property
    def validated(self) -> bool:
        return all(r.validated for r in self.rows) and bool(np.array_equal(self.output, self.reference)) \
            and self.inference_validated is not False

    @property
    def cycles(self) -> int:
        return sum(r.cycles or 0 for r in self.rows)

    @property
    def macs(self) -> int:
        return sum(r.macs for r in self.rows)

    @property
    def tensor_macs_share(self) -> float:
        """The share of the network's multiply-adds computed by tensor instructions on the target."""
        return sum(r.tensor_macs for r in self.rows) / self.macs if self.macs else 0.0

    def totals(self) -> dict[str, Any]:
        """The network's figures (``TOTALS_KEYS``, and its energy and area where the target models them)."""
        on_host = [r.step for r in self.rows if r.where == "host"]
        return {"model": self.model, "target": self.target, "config": self.config,
                "validated": self.validated,
                "steps": len(self.rows), "on_host": on_host, "cycles": self.cycles,
                "seconds": _total([r.seconds for r in self.rows]),
                "inference_s": None if self.inference_s is None else round(self.inference_s, 6),
                "macs": self.macs, "tensor_macs_share": round(self.tensor_macs_share, 6),
                "dram_bytes": _total([r.dram_bytes for r in self.rows]), "wall_s": round(self.wall_s, 3),
                **self.costs()}

    def costs(self) -> dict[str, Any]:
        """The network's energy on the target (the steps it ran there: the host's are not counted) and
        the machine's area, where the target models them (else nothing)."""
        ran = [r.costs for r in self.rows if r.where != "host"]
        if not ran or None in ran:
            return {}
        return summed(ran).to_json()

    def to_json(self) -> dict[str, Any]:
        return {**self.totals(), "layers": [r.to_json() for r in self.rows]}

    def to_csv(self) -> str:
        buf = io.StringIO()
        hidden = ("kernels", "energy_breakdown_uj")
        names = [k for k in self.rows[0].to_json() if k not in hidden] if self.rows else []
        writer = csv.DictWriter(buf, fieldnames=names, extrasaction="ignore")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({k: "x".join(map(str, v)) if k == "shape" else v for k, v in r.to_json().items()})
        return buf.getvalue()

    def chrome_trace(self, clock_mhz: float) -> dict:
        """The network as one Chrome/Perfetto trace (sim/core/trace.py): a "steps" track with a slice per step
        and a "kernels" track with a slice per kernel, end to end in the order they ran, at ``clock_mhz``
        (the simulator's clock, or on the CPU the time-stamp counter's); a step on the host is an instant
        slice on the "host" track, its reason in the name."""
        from sim.core.trace import chrome_trace

        slices, now = [], 0
        for r in self.rows:
            if r.where == "host":
                slices.append(("host", f"{r.step} ({r.op}): {r.why}", now, now, "host"))
                continue
            start = now
            for label, cycles in r.kernels:
                slices.append(("kernels", f"{r.step}: {label}", now, now + cycles, "kernel"))
                now += cycles
            slices.append(("steps", f"{r.step} ({r.op}, {'x'.join(map(str, r.shape))})", start, now,
                           "step" if r.validated else "step (differs)"))
        return chrome_trace(slices, ("steps", "kernels", "host"), clock_mhz, now)


def _total(values: list) -> Any:
    """The sum of the measured values (None where no step measured any)."""
    given = [v for v in values if v is not None]
    return sum(given) if given else None


def run_inputs(g, seed: int) -> dict[str, np.ndarray]:
    """The inputs ``tandem model --target`` and a sweep run a network on for ``seed``: seeded apart from
    the calibration inputs the quantizer draws from ``seed`` (so the run is not on a calibration input)."""
    return random_inputs(g, np.random.default_rng(seed + 1))


def run_network(q: QuantizedGraph, target: Target, inputs: Mapping[str, np.ndarray] | None = None, *,
                seed: int = 0, options: Mapping[str, Any] | None = None, resimulate: bool = False,
                progress: Callable[[int, int, str], None] | None = None, jobs: int = 1,
                cache: KernelCache | None = None) -> NetworkReport:
    """Run the int8 network ``q`` on ``target`` (the module's steps) for ``inputs`` (float arrays by graph
    input name; default: standard-normal ones from ``seed``); ``options`` are ``run`` parameters every
    kernel takes (the CPU's ``threads``, ``min_time``). ``progress(done, total, step)`` is called before each
    step. On a target that runs for real, numpy's BLAS keeps to one thread meanwhile
    (``compiler.backend.blas.quiet_blas``: its spinning threads would slow the kernels' timings). ``jobs``
    (a simulated target's; 0: one per CPU): the kernels are compiled and simulated by that many worker
    processes first, each step then on the integer graph's inputs (tandem/network/jobs.py); the same
    cycles and rows as one job wherever every step is bit-exact. ``cache``: where compiled kernels are
    found and kept (tandem/flows/kernel_cache.py; default: in memory, each distinct kernel compiled once)."""
    cache = KernelCache() if cache is None else cache
    if not runs_for_real(target):
        return _run_network(q, target, inputs, seed, options, resimulate, progress, jobs, cache)
    from compiler.backend.blas import quiet_blas

    with quiet_blas():
        return _run_network(q, target, inputs, seed, options, resimulate, progress, 1, cache)


def _run_network(q: QuantizedGraph, target: Target, inputs: Mapping[str, np.ndarray] | None, seed: int,
                 options: Mapping[str, Any] | None, resimulate: bool,
                 progress: Callable[[int, int, str], None] | None, jobs: int,
                 cache: KernelCache) -> NetworkReport:
    start = time.perf_counter()
    workers = jobs_for(jobs)   # a bad count refused before any work
    if inputs is None:
        inputs = random_inputs(q.graph, np.random.default_rng(seed))
    oracle = q.run_integer(inputs)
    values = {name: oracle[name] for name in q.graph.inputs}   # the int8 network inputs
    measured: dict[tuple, tuple[str, Any]] = {}   # a kernel's key -> (the step it ran on, its report)
    rows: list[Row] = []
    plan = steps(q)
    reuse = not resimulate and not timing_depends_on_data(target)
    kernels: list[list[Prepared] | None] = []   # each step's compiled kernels, for the inference
    pooled = None   # with several jobs: every kernel's report, run by the workers first
    if workers > 1:
        pooled = run_tasks(kernel_tasks(q, target, plan, oracle, options, reuse), target, workers, progress,
                           cache)
        values = dict(oracle)   # so every step runs on the integer graph's inputs, as the kernels did
    for index, step in enumerate(plan):
        if progress is not None:
            progress(index, len(plan), step.name)
        try:
            placement = place(step, q, values, target)
        except NotOnTarget as why:
            rows.append(_host_row(q, step, values, str(why)))
            kernels.append(None)
            continue
        kernels.append([])
        outs, reports, sources = [], [], []   # each part: measured here, or the step it was measured on
        for k, part in enumerate(placement.parts):
            arrays = part.inputs(outs) if callable(part.inputs) else part.inputs
            part = replace(part, inputs=arrays)
            params = {**(options or {}), **part.params}
            key = kernel_key(part.op, params, part.inputs)
            if reuse and key in measured:   # the same kernel's timing, the output from the reference
                first, report = measured[key]
                output = reference_of(part.op, target, params, part.inputs)
                report = replace(report, output=output, validated=None, compile_s=0.0, simulate_s=0.0)
                sources.append(first)
            else:
                if pooled is not None:
                    report = pooled[task_id(key, index, k, reuse)]
                else:
                    prepared = prepare(part.op, target, params, inputs=part.inputs, cache=cache)
                    report = report_on(prepared)
                    kernels[-1].append(prepared)
                measured.setdefault(key, (step.name, report))
                sources.append(None)
            outs.append(part.unpack(report.output))
            reports.append(report)
        got = placement.join(outs)
        want = oracle[step.output]
        check = exact(got, want)
        values[step.output] = got
        rows.append(_target_row(step, placement, reports, check, _timing(sources, target), target))
    if progress is not None:
        progress(len(plan), len(plan), "")
    out = values[q.graph.output]
    config = getattr(target.config, "name", "")
    report = NetworkReport(q.graph.name, target.kind, config, rows, time.perf_counter() - start,
                           out, oracle[q.graph.output])
    if runs_for_real(target):   # one whole inference, timed end to end, must give the same output
        inference = time_inference(q, target, plan, kernels, inputs, (options or {}).get("min_time", 0.2))
        report.inference_s, report.inference_runs = inference.seconds, inference.runs
        report.inference_validated = bool(np.array_equal(inference.output, out))
        report.inference_placed = {step.name: why for step, why, compiled in
                                   zip(plan, inference.general, kernels, strict=True)
                                   if why is not None and compiled is not None}
    return report


def runs_for_real(target: Target) -> bool:
    """Whether the target runs its kernels for real (its flow module's ``RUNS_FOR_REAL``: this CPU), so
    that a whole inference can be timed end to end; a simulator's cycles are its measure."""
    return getattr(importlib.import_module(FLOWS[target.kind]), "RUNS_FOR_REAL", False)


def timing_depends_on_data(target: Target) -> bool:
    """Whether the target's measured timing may change with the data: its flow module says so
    (``TIMING_DEPENDS_ON_DATA``; a simulator with no data-dependent branch or access says False)."""
    return getattr(importlib.import_module(FLOWS[target.kind]), "TIMING_DEPENDS_ON_DATA", True)


def _host_row(q: QuantizedGraph, step: Step, values: dict[str, np.ndarray], why: str) -> Row:
    """Run ``step`` on the host: the integer graph's layers themselves, on the target's values."""
    for layer in step.layers:
        q.write_outputs(layer, values)
    return Row(step.name, step.op, list(step.shape), "host", "", step.macs, 0, None, None, None, None, True,
               None, 0.0, "", 0.0, 0.0, why, [])


def _timing(sources: list[str | None], target: Target) -> str:
    """How a step's cycles were measured: by running every part, or (some) reused from a step before."""
    ran = "timed" if target.kind == "cpu" else "simulated"
    reused = [s for s in sources if s is not None]
    if not reused:
        return ran
    if len(reused) == len(sources) and len(set(reused)) == 1:
        return f"reused from {reused[0]}"
    return f"{ran} {len(sources) - len(reused)} of {len(sources)} kernels, reused {len(reused)}"


def _target_row(step: Step, placement: Placement, reports: list, check, timing: str, target: Target) -> Row:
    cycles = sum(r.cycles for r in reports)
    costs = summed([r.costs for r in reports]) if all(r.costs is not None for r in reports) else None
    seconds = [r.measured.get("seconds") for r in reports]
    dram = [r.measured.get("dram_bytes") for r in reports]
    busy = [r.utilization.get("gemm", r.utilization.get("vpdpbusd")) for r in reports]
    weights = [r.cycles for r in reports]
    util = (sum(b * w for b, w in zip(busy, weights, strict=True)) / sum(weights)
            if None not in busy and sum(weights) else None)
    summing = [r for r, part in zip(reports, placement.parts, strict=True) if part.sums]
    # on tensor instructions: every summing kernel issued some and left no statement scalar (a CPU without
    # the spec's dot-product instruction sums with vectorized multiply-adds: none of them)
    tensor = step.macs if summing and all(r.scalar_fallback == 0 and r.tensor_instructions > 0
                                          for r in summing) else 0
    names = [p.label or p.op for p in placement.parts]
    label = " + ".join(dict.fromkeys(names))
    if len(set(names)) == 1 < len(names):
        label += f" x{len(names)}"
    kernel_checks = [r.validated for r in reports]
    return Row(step.name, step.op, list(step.shape), target.kind, label,
               step.macs, tensor, cycles, sum(seconds) if None not in seconds else None,
               None if util is None else round(util, 4), sum(dram) if None not in dram else None,
               check.validated, None if None in kernel_checks else all(kernel_checks),
               check.max_abs_err, timing,
               round(sum(r.compile_s for r in reports), 4), round(sum(r.simulate_s for r in reports), 4),
               "" if check.validated else check.detail,
               [(part.label or part.op, r.cycles) for part, r in zip(placement.parts, reports, strict=True)],
               costs)
