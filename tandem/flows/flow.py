"""What a target contributes to the one ``tandem run`` flow (tandem/flows/run.py), and the records it passes.

- ``TargetFlow``: the steps a target implements (``plan``, ``inputs``, ``check_inputs``, ``compile``,
  ``execute``, ``reference``, ``validate``, ``roofline``, ``params``; ``cost`` and ``tuned_entry`` when it
  tunes); ``ByOperator`` combines several, each operator to the flow that compiles it (``Routed`` jobs);
- ``RunError``: a request a flow cannot serve, naming the parameter; ``Execution``: what an executor
  measured; ``RunReport``: what ``run`` reports (the ``tandem run --json`` object); a flow's ``selection``
  gives the covers its schedules chose, which the report's ``selection`` explains;
- the parameter steps the flows share: ``take_int``, ``take_conv`` (``CONV_KEYS``, ``CONV_DEFAULTS``),
  ``take_gemm`` (``GEMM_KEYS``), ``reject_unknown``, ``check_host_memory``, and ``random_bias``;
  ``extremes``, the inputs at their types' extremes that a flow's ``extreme_inputs`` may give.

A flow compares its output with the reference through tandem/flows/check.py (``exact`` by default).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.ops.nn import ConvShape
from compiler.target import Target
from sim.core.energy import CostReport
from tandem.flows.check import Check, exact

if TYPE_CHECKING:
    from compiler.passes.cover import Selected

CONV_KEYS = ("H", "W", "IC", "OC", "K", "S", "P")
GEMM_KEYS = ("M", "N", "K")
CONV_DEFAULTS = {"H": 56, "W": 56, "IC": 64, "OC": 16, "K": 3, "S": 1, "P": 1, "N": 1}


class RunError(ValueError):
    """A request ``run`` cannot serve: an unknown operator, dtype or parameter, or a layer nothing fits."""


class UnknownParameter(RunError):
    """A parameter no step of the run takes: ``key``, and the ones ``where`` takes (``known``), so that the
    command line can name the option it came from."""

    def __init__(self, where: str, key: str, known: Sequence[str]) -> None:
        self.where, self.key, self.known = where, key, tuple(sorted({*known, "seed"}))
        super().__init__(f"{where}: unknown parameter {key!r}; expected {', '.join(self.known)}")


#: every key a target's executor may add to the report (``Execution.measured``)
MEASURED_KEYS = ("dram_bytes", "gops", "seconds", "peak_gops", "tflops", "peak_tflops", "pct_of_peak",
                 "device", "device_arch", "ptx_arch")


@dataclass
class RunReport:
    """What one compile + execute + validate run measured (the ``--json`` object, described in
    tandem/flows/run.py)."""

    op: str
    target: str
    params: dict
    validated: bool
    max_abs_err: float
    cycles: int
    instructions: dict[str, int]
    tensor_instructions: int
    scalar_instructions: int | None
    scalar_fallback: int
    unmatched: list[str]
    utilization: dict[str, float]
    roofline_cycles: int | None
    roofline_pct: float | None
    compile_s: float
    simulate_s: float
    wall_s: float
    detail: str = ""
    #: what instruction selection chose per covered statement, and with --explain the unused instructions
    #: (compiler/passes/explain.py's ``selection``)
    selection: dict[str, Any] = field(default_factory=lambda: {"statements": [], "unused": None})
    #: a target's own measures (the CPU's gops, seconds, peak_gops), top-level keys of the JSON object
    measured: dict[str, Any] = field(default_factory=dict)
    #: energy of the run and area of the machine (simulated targets), top-level keys of the JSON object
    costs: CostReport | None = None
    # what was compared and run, for callers that show it (not part of the JSON object)
    output: np.ndarray | None = field(default=None, repr=False, compare=False)
    reference: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: what ran, whose ``str`` is its listing (a VITA or DianNao program, LLVM IR, PTX): formatted where shown
    program: Any = field(default="", repr=False, compare=False)

    #: fields that are not keys of the JSON object (arrays, the program; measured and costs are spread)
    NOT_IN_JSON = ("output", "reference", "program", "measured", "costs")

    def to_json(self) -> dict:
        # the arrays and the program left out before asdict copies every field
        report = asdict(replace(self, output=None, reference=None, program="", measured={}, costs=None))
        for key in self.NOT_IN_JSON:
            del report[key]
        return {**report, **self.measured, **(self.costs.to_json() if self.costs is not None else {})}


@dataclass
class Execution:
    """What a target's executor measured running one compiled kernel on the inputs."""

    output: np.ndarray
    cycles: int
    instructions: dict[str, int]
    tensor_instructions: int
    scalar_instructions: int | None
    scalar_fallback: int
    unmatched: list[str]
    utilization: dict[str, float]
    program: Any = ""   # what ran, whose ``str`` is its listing (RunReport.program)
    #: what the schedule chose that the request did not say (DianNao's tile), added to the report's params
    chosen: dict[str, Any] = field(default_factory=dict)
    #: a target's own measures, top-level keys of the report's JSON object
    measured: dict[str, Any] = field(default_factory=dict)
    #: the run's energy and the machine's area (sim/core/energy.py), where the target models them
    costs: CostReport | None = None


class TargetFlow(ABC):
    """What a target contributes to ``run``. ``plan`` returns a job: any object with ``candidates``, the
    schedules to compile (more than one: each is measured with ``cost`` and the cheapest kept)."""

    kind: str

    @abstractmethod
    def plan(self, op: str, params: dict[str, Any], target: Target) -> Any:
        """The job for ``op``: ``params`` checked (RunError naming the first bad one), keys consumed."""

    @abstractmethod
    def inputs(self, job: Any, rng: np.random.Generator) -> list[np.ndarray]:
        """Random input arrays for ``job``, in the layout its kernel takes."""

    @abstractmethod
    def check_inputs(self, job: Any, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The caller's arrays, after checking their number, shapes and dtypes (RunError if not)."""

    @abstractmethod
    def compile(self, job: Any, candidate: Any, target: Target) -> Any:
        """Schedule ``job`` with ``candidate``, run the target's pass pipeline and emit the kernel."""

    def stores_kernels(self, job: Any) -> bool:
        """Whether ``job``'s compiled kernels may be kept on disk between runs (tandem/flows/kernel_cache.py):
        they pickle, naming the target's spec and config, and depend on nothing but the target, the
        operator, its parameters, the candidate and the code. False unless a flow says so (the CPU's kernels
        are machine code loaded into this process)."""
        return False

    @abstractmethod
    def execute(self, job: Any, compiled: Any, inputs: list[np.ndarray], target: Target) -> Execution:
        """Run ``compiled`` on ``inputs``: on the simulator, or on this CPU."""

    @abstractmethod
    def reference(self, job: Any, inputs: list[np.ndarray]) -> np.ndarray:
        """What the operator computes on ``inputs`` (compiler/ops/reference), in the output's layout."""

    @abstractmethod
    def roofline(self, job: Any, target: Target, execution: Execution) -> int | None:
        """The fewest cycles the machine could take for ``job`` (None where it has no such bound)."""

    @abstractmethod
    def params(self, job: Any, candidate: Any, target: Target) -> dict[str, Any]:
        """The report's ``params``: the layer, the options and the schedule ``candidate`` used."""

    def cost(self, job: Any, compiled: Any, inputs: list[np.ndarray], target: Target) -> float:
        """What tuning minimizes for one candidate (default: executed cycles)."""
        return self.execute(job, compiled, inputs, target).cycles

    def tuned_entry(self, candidate: Any, cost: float) -> dict[str, Any]:
        """One measured candidate as ``params["tuned"]`` lists it."""
        return {"candidate": str(candidate), "cost": cost}

    def validate(self, job: Any, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        """Compare the output with the reference (default: bit for bit)."""
        return exact(got, want)

    def extreme_inputs(self, job: Any, inputs: list[np.ndarray]) -> list[tuple[str, list[np.ndarray]]]:
        """Named inputs like ``inputs`` (the seeded ones) but at their types' extremes, on which ``run`` also
        validates the kernel: where a sum saturates or wraps, which random inputs never reach (default:
        none; a flow whose kernels are integer and cheap to run again gives ``extremes(inputs)``)."""
        return []

    def output(self, job: Any, compiled: Any, inputs: list[np.ndarray], target: Target) -> np.ndarray:
        """The output of ``compiled`` on ``inputs`` alone, nothing measured (default: ``execute``'s)."""
        return self.execute(job, compiled, inputs, target).output

    def selection(self, job: Any, compiled: Any) -> tuple[Selected, ...]:
        """The record of each cover ``compiled``'s schedules chose (``VitaSchedule.selection``,
        ``DiannaoSchedule.selection``), what the report's ``selection`` explains (default: none)."""
        return ()


@dataclass(frozen=True)
class Routed:
    """A job of ``ByOperator``: the flow that planned it and its own job."""

    flow: TargetFlow
    job: Any

    @property
    def candidates(self) -> Sequence[Any]:
        return self.job.candidates


class ByOperator(TargetFlow):
    """A target's flow made of several: each operator goes to the flow that compiles it (``flows[op]``), and
    every later step to the flow that planned the job."""

    def __init__(self, kind: str, flows: Mapping[str, TargetFlow]) -> None:
        self.kind = kind
        self.flows = dict(flows)

    def plan(self, op: str, params: dict[str, Any], target: Target) -> Routed:
        if op not in self.flows:
            raise RunError(f"{self.kind}: no schedule for operator {op!r}; expected one of "
                           f"{', '.join(self.flows)}")
        flow = self.flows[op]
        return Routed(flow, flow.plan(op, params, target))

    def inputs(self, job: Routed, rng: np.random.Generator) -> list[np.ndarray]:
        return job.flow.inputs(job.job, rng)

    def check_inputs(self, job: Routed, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        return job.flow.check_inputs(job.job, given)

    def compile(self, job: Routed, candidate: Any, target: Target) -> Any:
        return job.flow.compile(job.job, candidate, target)

    def stores_kernels(self, job: Routed) -> bool:
        return job.flow.stores_kernels(job.job)

    def execute(self, job: Routed, compiled: Any, inputs: list[np.ndarray], target: Target) -> Execution:
        return job.flow.execute(job.job, compiled, inputs, target)

    def reference(self, job: Routed, inputs: list[np.ndarray]) -> np.ndarray:
        return job.flow.reference(job.job, inputs)

    def roofline(self, job: Routed, target: Target, execution: Execution) -> int | None:
        return job.flow.roofline(job.job, target, execution)

    def params(self, job: Routed, candidate: Any, target: Target) -> dict[str, Any]:
        return job.flow.params(job.job, candidate, target)

    def cost(self, job: Routed, compiled: Any, inputs: list[np.ndarray], target: Target) -> float:
        return job.flow.cost(job.job, compiled, inputs, target)

    def tuned_entry(self, candidate: Any, cost: float) -> dict[str, Any]:
        """The first flow's form: a target's flows that tune delegate to one GEMM flow, so they list alike."""
        return next(iter(self.flows.values())).tuned_entry(candidate, cost)

    def validate(self, job: Routed, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        return job.flow.validate(job.job, inputs, got, want)

    def extreme_inputs(self, job: Routed, inputs: list[np.ndarray]) -> list[tuple[str, list[np.ndarray]]]:
        return job.flow.extreme_inputs(job.job, inputs)

    def output(self, job: Routed, compiled: Any, inputs: list[np.ndarray], target: Target) -> np.ndarray:
        return job.flow.output(job.job, compiled, inputs, target)

    def selection(self, job: Routed, compiled: Any) -> tuple[Selected, ...]:
        return job.flow.selection(job.job, compiled)


def memory_key(a: np.ndarray) -> tuple:
    """What says where an array's elements are: their address, shape, strides and type. While an array is
    alive no other can occupy its memory, so an array with its key is a view of the same elements (how the
    CPU keeps weights packed, and their sums, from one inference to the next)."""
    return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str


def random_bias(rng: np.random.Generator, channels: int, dtype: np.dtype | type) -> np.ndarray:
    """A per-output-channel bias of the output's ``dtype``: floats uniform in [-1, 1), integers (an int32
    accumulator's) in [-2^16, 2^16), as a quantized layer's bias would be."""
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-1, 1, channels).astype(dtype)
    return rng.integers(-(1 << 16), 1 << 16, channels).astype(dtype)


def extremes(inputs: Sequence[np.ndarray]) -> list[tuple[str, list[np.ndarray]]]:
    """Arrays shaped and typed as ``inputs`` (integers: data, weights, a bias) at their types' extremes, the
    corners of a sum's range: all at their maxima, all at their minima, the first (the data) at its maximum
    and the others at their minima and the other way round (u8 x s8: 255 x -128, the most negative
    products), and every array alternating maximum and minimum element by element. None where an array is
    not integer."""
    if not inputs or any(np.dtype(a.dtype).kind not in "iu" for a in inputs):
        return []
    lo, hi = ([np.full(a.shape, getattr(np.iinfo(a.dtype), end), a.dtype) for a in inputs]
              for end in ("min", "max"))
    alternating = [np.where(np.arange(a.size).reshape(a.shape) % 2 == 0, h, m).astype(a.dtype)
                   for a, m, h in zip(inputs, lo, hi, strict=True)]
    return [("all max", hi), ("all min", lo), ("data max and others min", [hi[0], *lo[1:]]),
            ("data min and others max", [lo[0], *hi[1:]]), ("alternating max and min", alternating)]


# ---- parameters shared by the flows

def take_int(params: dict[str, Any], key: str, default: int | None, minimum: int, where: str) -> int | None:
    """Pop integer ``key`` from ``params`` (``default`` when absent); RunError unless it is >= ``minimum``."""
    value = params.pop(key, default)
    if value is None:
        return None
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < minimum:
        raise RunError(f"{where}: {key} must be an integer >= {minimum}, but got {value!r}")
    return int(value)


def take_conv(params: dict[str, Any], where: str, images: bool = False) -> ConvShape:
    """Pop a conv2d layer from ``params``: ``H W IC`` (or ``shape`` = (H, W, IC)), ``OC K S P`` and, with
    ``images``, ``N``; the defaults are a 56 x 56 x 64 input, 16 output channels, a 3 x 3 kernel, stride 1,
    padding 1 and one image."""
    shape = take_shape(params, None, where)
    given = [k for k in ("H", "W", "IC") if k in params]
    if shape is not None and given:
        raise RunError(f"{where}: give the conv2d input either as --shape HxWxIC or as -p H= W= IC=, "
                       f"not both")
    if given and len(given) < 3:
        missing = [k for k in ("H", "W", "IC") if k not in params]
        raise RunError(f"{where}: conv2d needs all of H, W and IC (missing {', '.join(missing)})")
    if shape is not None:
        shape = tuple(shape)
        if len(shape) != 3:
            raise RunError(f"{where}: conv2d takes the input shape HxWxIC, but got {len(shape)} dimensions")
        params.update(zip(("H", "W", "IC"), shape, strict=True))
    dims = {k: take_int(params, k, CONV_DEFAULTS[k], 0 if k == "P" else 1, where) for k in CONV_KEYS}
    n = take_int(params, "N", 1, 1, where) if images else 1
    return ConvShape(dims["H"], dims["W"], dims["IC"], dims["OC"], dims["K"], dims["S"], dims["P"], n)


def take_shape(params: dict[str, Any], default: tuple[int, ...] | None, where: str) -> tuple[int, ...] | None:
    """Pop ``shape`` from ``params`` (``default`` without one): positive integers, as a sequence or as the
    command line's text (``"4x64x64"``); RunError naming anything else."""
    shape = params.pop("shape", default)
    if shape is None:
        return None
    if isinstance(shape, str):
        parts = shape.strip().lower().split("x")
        if all(part.isdigit() for part in parts):
            shape = tuple(int(part) for part in parts)
    listed = isinstance(shape, Sequence | np.ndarray) and not isinstance(shape, str | bytes) and len(shape)
    if not listed or not all(isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 1
                             for d in shape):
        raise RunError(f"{where}: shape must be positive integers, as a list or as text like '4x64x64', but "
                       f"got {shape!r}")
    return tuple(int(d) for d in shape)


def take_gemm(params: dict[str, Any], where: str) -> tuple[int, int, int]:
    """Pop a GEMM's ``M N K`` from ``params`` (each 16 by default); --shape is refused."""
    if "shape" in params:
        raise RunError(f"{where}: gemm takes -p M= N= K=, not --shape")
    m, n, k = (take_int(params, key, 16, 1, where) for key in GEMM_KEYS)
    return m, n, k


def reject_unknown(params: dict[str, Any], known: Sequence[str], where: str) -> None:
    """RunError naming the first parameter no step consumed, and the ones ``where`` takes."""
    if params:
        raise UnknownParameter(where, sorted(params)[0], known)


def check_host_memory(need: int, where: str, params: Mapping[str, Any]) -> None:
    """RunError when a run that needs about ``need`` bytes of host memory (its arrays and the copies it makes)
    would not fit in this machine's physical memory: refused in ``plan``, before anything is allocated."""
    have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > have:
        raise RunError(f"{where} {dict(params)}: the run needs about {need:,} bytes of memory, but this "
                       f"machine has {have:,}; give a smaller layer")
