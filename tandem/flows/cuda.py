"""The GPU's part of the one ``tandem run`` flow (tandem/flows/run.py): an fp16 GEMM or conv2d scheduled
for Tensor Cores as UNIT schedules a GPU (``compiler.ops.cuda``), compiled to PTX by the NVPTX backend for
the config's architecture, run on the GPU through the CUDA driver, compared with numpy within a stated bound
and timed.

Parameters besides the layer (conv2d: ``H W IC OC K S P N``; gemm: ``M N K``): ``tuning`` (a
``compiler.ops.cuda.GpuTuning``), ``tune`` (> 0: time the first ``tune`` tunings of the model's ranking,
``compiler.ops.cuda.tuning_space``, on the device and keep the fastest; 0: the model's first) and
``min_time`` (seconds of timing per measurement, default 0.05). The report's

- ``validated``: every output within ``K * 2^-23 * sum_k |a_k b_k|`` of the exact (float64) result of the
  same fp16 inputs: the products of fp16 values are exact in fp32, and each of the K fp32 additions rounds
  by at most 2^-24 of the running sum (the bound doubles that: the Tensor Cores' order and rounding of the
  additions are not specified);
- ``seconds`` (one launch's GPU time: launches captured in a CUDA graph, replayed between CUDA events, so
  that the host's launch overhead is not counted), ``tflops`` (2 x the layer's MACs per
  second, not the padded ones), ``peak_tflops`` (cuBLAS's fp16 throughput on an 8192^3 product, measured on
  the same device in the same process) and ``pct_of_peak``; ``cycles`` are ``seconds`` at the device's SM
  clock, ``roofline_cycles`` the MACs at the measured peak;
- ``instructions``: the PTX's static instruction counts by opcode; ``tensor_instructions`` the Tensor Core
  instructions the launch executes (blocks x warps x steps); ``scalar_fallback`` the marked nests left
  scalar, with ``unmatched`` saying why (none: every mark is a Tensor Core instruction, or the build fails).

Without a GPU (CuPy, a driver and a device), ``run`` stops with a RunError that says why, after the kernel is
compiled; ``compile_gpu`` gives the PTX on any machine.

``tandem compile --target cuda`` calls ``compile_options`` (its options as text: ``WorkloadError`` for a bad
option), ``ptxas_check`` and, with ``--run``, ``run_checks``; the command line only prints what they return.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.backend import cuda_runtime, nvptx
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRVisitor
from compiler.ops import cuda, reference
from compiler.ops.nn import ConvShape
from compiler.passes.tensorize_registers import MARKS, why_not
from compiler.pipeline import compile_func
from compiler.target import Target
from tandem.flows import flow
from tandem.flows.check import Check, within_bound
from tandem.flows.flow import Execution, RunError, TargetFlow
from tandem.flows.params import WorkloadError, int_param, parse_params
from tandem.flows.run import run

OPS = ("gemm", "conv2d")
#: the most multiply-accumulates ``tandem compile --target cuda --run`` runs in the reference interpreter
INTERPRETED_MACS = 1 << 22


@dataclass(frozen=True)
class GpuJob:
    """One operator to run: ``gemm`` (m, n, k) or ``conv2d`` (a ConvShape), and its candidate tunings."""

    op: str
    candidates: tuple[cuda.GpuTuning, ...]
    gemm: tuple[int, int, int] | None = None
    conv: ConvShape | None = None
    min_time: float = 0.05

    @property
    def macs(self) -> int:
        if self.gemm is not None:
            m, n, k = self.gemm
            return m * n * k
        return self.conv.macs

    @property
    def reduction(self) -> int:
        """The K of the contraction (the bound's number of additions)."""
        if self.gemm is not None:
            return self.gemm[2]
        return self.conv.ic * self.conv.k * self.conv.k


@dataclass(frozen=True)
class Compiled:
    schedule: cuda.GpuSchedule
    func: ir.PrimFunc            # the schedule's loop IR after the cuda pipeline (tensorized)
    kernel: nvptx.GpuKernel
    unmatched: tuple[str, ...]


def schedule(job: GpuJob, tuning: cuda.GpuTuning, target: Target) -> cuda.GpuSchedule:
    """The job's kernel with ``tuning`` (ScheduleError if it does not fit the config's shared memory)."""
    limit, features = target.config.shared_bytes, target.config.features
    if job.gemm is not None:
        return cuda.gemm(*job.gemm, tuning, spec=target.spec, shared_limit=limit, features=features)
    return cuda.conv2d(job.conv, tuning, spec=target.spec, shared_limit=limit, features=features)


def compile_gpu(job: GpuJob, tuning: cuda.GpuTuning, target: Target) -> Compiled:
    """Schedule, run the cuda pipeline (compiler/pipeline.py) and compile to PTX for the target's config: runs
    on any machine."""
    s = schedule(job, tuning, target)
    func = compile_func(s.func, target)
    kernel = nvptx.build(func, arch=target.config.arch_for(s.instruction.features),
                         ptx=target.config.ptx_version,
                         shared_limit=target.config.shared_bytes)
    return Compiled(s, func, kernel, tuple(left_scalar(func, target)))


def left_scalar(func: ir.PrimFunc, target: Target) -> list[str]:
    """Why each marked nest that is not a tensor instruction stayed scalar."""
    reasons: list[str] = []

    class _Marks(IRVisitor):
        def visit_Attr(self, s: ir.Attr) -> None:
            if s.key in MARKS and not isinstance(s.body, ir.TensorInsn):
                reasons.append(why_not(s.body, target.spec, str(s.value)) or "not a tensor instruction")
            self.generic_visit(s)

    _Marks().visit(func.body)
    return reasons


class CudaLayerFlow(TargetFlow):
    """GEMM and conv2d on an NVIDIA GPU's Tensor Cores (fp16 x fp16 -> fp32)."""

    kind = "cuda"

    def plan(self, op: str, params: dict[str, Any], target: Target) -> GpuJob:
        where = f"cuda {op}"
        if op not in OPS:
            raise RunError(f"cuda: no schedule for operator {op!r}; expected one of {', '.join(OPS)}")
        dtype = params.pop("dtype", "float16")
        if dtype != "float16":
            raise RunError(f"{where}: dtype must be f16 (fp16 inputs, fp32 accumulation), not {dtype!r}")
        tune = flow.take_int(params, "tune", 0, 0, where)
        min_time = params.pop("min_time", 0.05)
        given = params.pop("tuning", None)
        if op == "gemm":
            shape, conv = flow.take_gemm(params, where), None
            m, n, k, batch = *shape, 1
        else:
            conv, shape = flow.take_conv(params, where, images=True), None
            m, n, k, batch = conv.oc, conv.oh * conv.ow, conv.ic * conv.k * conv.k, conv.n
        flow.reject_unknown(params, (*flow.GEMM_KEYS, *flow.CONV_KEYS, "N"), where)
        insns = _instructions(target, where)
        if given is not None:
            if not isinstance(given, cuda.GpuTuning):
                raise RunError(f"{where}: tuning must be a compiler.ops.cuda.GpuTuning, not {given!r}")
            try:
                insn = cuda.tensor_core_instruction(target.spec, given.instruction, target.config.features)
            except ScheduleError:
                raise RunError(f"{where}: tuning ({given}) names instruction {given.instruction!r}, which is "
                               f"not one of the usable {', '.join(i.name for i in insns)}") from None
            why = given.why_not(insn, target.config.shared_bytes)
            if why:
                raise RunError(f"{where}: tuning ({given}) does not fit: {why}")
            candidates = (given,)
        else:
            cfg = target.config
            ranked = cuda.tuning_space(m, n, k, batch, insns, cfg.shared_bytes, cfg.sm_count,
                                       cfg.sm_shared_bytes, gathered=conv is not None)
            candidates = tuple(ranked[: max(1, tune)])
        job = GpuJob(op, candidates, shape, conv, float(min_time))
        elements = (m * k + k * n + m * n * 2) * batch if conv is None else \
            conv.n * conv.ic * (conv.h + 2 * conv.p) * (conv.w + 2 * conv.p) + m * k + batch * m * n * 2
        flow.check_host_memory(elements * 8, where, params)
        return job

    def inputs(self, job: GpuJob, rng: np.random.Generator) -> list[np.ndarray]:
        return [rng.standard_normal(shape, np.float32).astype(np.float16) for shape in _shapes(job)]

    def check_inputs(self, job: GpuJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        want = _shapes(job)
        if len(given) != 2 or any(np.shape(g) != w for g, w in zip(given, want, strict=True)):
            raise RunError(f"cuda {job.op}: expected two float16 arrays of shapes {want}, but got "
                           f"{[np.shape(g) for g in given]}")
        return [np.asarray(g, np.float16) for g in given]

    def compile(self, job: GpuJob, candidate: cuda.GpuTuning, target: Target) -> Compiled:
        try:
            return compile_gpu(job, candidate, target)
        except ScheduleError as exc:
            raise RunError(str(exc)) from None

    def _launcher(self, job: GpuJob, compiled: Compiled, inputs: list[np.ndarray]):
        reason = cuda_runtime.unavailable()
        if reason:
            raise RunError(f"cuda {job.op}: the kernel compiled to PTX for {compiled.kernel.arch} "
                           f"({len(compiled.kernel.ptx.splitlines())} lines), but cannot run here: {reason}")
        return cuda_runtime.Launcher(compiled.kernel, packed(job, compiled.schedule, inputs))

    def cost(self, job: GpuJob, compiled: Compiled, inputs: list[np.ndarray], target: Target) -> float:
        return self._launcher(job, compiled, inputs).seconds(job.min_time)

    def tuned_entry(self, candidate: cuda.GpuTuning, cost: float) -> dict[str, Any]:
        return {"candidate": str(candidate), "seconds": cost}

    def execute(self, job: GpuJob, compiled: Compiled, inputs: list[np.ndarray], target: Target) -> Execution:
        launcher = self._launcher(job, compiled, inputs)
        launcher.launch()
        got = unpacked(job, launcher.results()[2])
        seconds = launcher.seconds(job.min_time)
        dev = cuda_runtime.device()
        peak = cuda_runtime.tensor_core_peak_tflops()
        tflops = 2 * job.macs / seconds / 1e12
        s, insn = compiled.schedule, compiled.schedule.instruction
        executed = s.macs // (insn.tm * insn.tn * insn.tk)
        name = compiled.schedule.instruction.name
        measured = {"seconds": seconds, "tflops": round(tflops, 3), "peak_tflops": round(peak, 1),
                    "pct_of_peak": round(100 * tflops / peak, 2), "device": dev["name"],
                    "device_arch": dev["arch"], "ptx_arch": compiled.kernel.arch}
        return Execution(
            output=got, cycles=round(seconds * dev["clock_mhz"] * 1e6),
            instructions=compiled.kernel.instructions(),
            tensor_instructions=executed, scalar_instructions=None, scalar_fallback=len(compiled.unmatched),
            unmatched=list(compiled.unmatched), utilization={name: round(tflops / peak, 4)},
            program=compiled.kernel.ptx, measured=measured)

    def reference(self, job: GpuJob, inputs: list[np.ndarray]) -> np.ndarray:
        return exact(job, inputs)

    def validate(self, job: GpuJob, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        return within_bound(got, want, exact(job, [np.abs(x) for x in inputs]), job.reduction)

    def roofline(self, job: GpuJob, target: Target, execution: Execution) -> int | None:
        dev = cuda_runtime.device()
        peak = execution.measured["peak_tflops"] * 1e12
        return math.ceil(2 * job.macs / peak * dev["clock_mhz"] * 1e6)

    def params(self, job: GpuJob, candidate: cuda.GpuTuning, target: Target) -> dict[str, Any]:
        layer = {"M": job.gemm[0], "N": job.gemm[1], "K": job.gemm[2]} if job.gemm is not None else \
            {"H": job.conv.h, "W": job.conv.w, "IC": job.conv.ic, "OC": job.conv.oc, "K": job.conv.k,
             "S": job.conv.s, "P": job.conv.p, "N": job.conv.n}
        return {**layer, "dtype": "float16", "accumulate": "float32", "tuning": str(candidate),
                "arch": target.config.arch, "config": target.config.name}


def packed(job: GpuJob, s: cuda.GpuSchedule, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The kernel's arguments: the inputs in its layout (padded to its tiles) and a zeroed output."""
    if job.gemm is not None:
        return [*cuda.pack_gemm(inputs[0], inputs[1], s), np.zeros((s.m, s.n), np.float32)]
    return [*cuda.pack_conv(inputs[0], inputs[1], job.conv, s), np.zeros((s.batch, s.m, s.n), np.float32)]


def unpacked(job: GpuJob, out: np.ndarray) -> np.ndarray:
    """The operator's result from the kernel's output buffer."""
    return cuda.unpack_gemm(out, job.gemm[0], job.gemm[1]) if job.gemm is not None else \
        cuda.unpack_conv(out, job.conv)


def interpreted(job: GpuJob, func: ir.PrimFunc, s: cuda.GpuSchedule, inputs: Sequence[np.ndarray]) -> Check:
    """Run the kernel's loop IR ``func`` on the reference interpreter and check it like a GPU result."""
    from compiler import interp

    args = packed(job, s, inputs)
    interp.run(func, args)
    got = unpacked(job, args[2])
    return within_bound(got, exact(job, inputs), exact(job, [np.abs(x) for x in inputs]), job.reduction)


def _instructions(target: Target, where: str) -> list[cuda.TensorCoreInstruction]:
    """The spec's Tensor Core instructions this GPU has (its architecture-specific features)."""
    try:
        return cuda.tensor_core_instructions(target.spec, target.config.features)
    except ScheduleError as exc:
        raise RunError(f"{where}: {exc}") from None


def _shapes(job: GpuJob) -> list[tuple[int, ...]]:
    if job.gemm is not None:
        m, n, k = job.gemm
        return [(m, k), (k, n)]
    c = job.conv
    return [(c.n, c.ic, c.h, c.w), (c.oc, c.ic, c.k, c.k)]


def exact(job: GpuJob, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The exact (float64) result of the operator on ``inputs`` (compiler/ops/reference)."""
    if job.gemm is not None:
        return reference.dense(inputs[0], np.ascontiguousarray(inputs[1].T))
    c = job.conv
    return reference.conv2d(inputs[0], inputs[1], c.s, c.p)


FLOW = CudaLayerFlow()


@dataclass(frozen=True)
class OptionsBuild:
    """``tandem compile --target cuda``'s kernel: the job, its first tuning compiled, the run's parameters
    (the layer and dtype as ``run`` takes them) and the seed of the checks' inputs."""

    job: GpuJob
    compiled: Compiled
    params: dict[str, Any]
    seed: int

    @property
    def stages(self) -> list[tuple[str, str]]:
        """The loop IR after each step: the schedule, then tensorization."""
        return [("schedule (compiler/ops/cuda.py)", str(self.compiled.schedule.func)),
                ("tensorize", str(self.compiled.func))]


def compile_options(op: str, shape: str | None, dtype: str | None, params: Sequence[str], target: Target
                    ) -> OptionsBuild:
    """``tandem compile --target cuda``'s options compiled with the first tuning of the plan: the layer as
    ``-p KEY=VALUE`` (integers; no ``--shape``), ``--dtype`` f16 or float16. WorkloadError for a bad option,
    RunError for a bad parameter."""
    if shape is not None:
        raise WorkloadError("--shape", "target 'cuda' takes the layer as -p (gemm: M, N, K; conv2d: H, "
                                       "W, IC, OC, K, S, P, N)")
    values = {k: int_param(k, v, 0 if k in ("seed", "P") else 1) for k, v in parse_params(params).items()}
    if dtype is not None:
        values["dtype"] = {"f16": "float16"}.get(dtype, dtype)
    seed = values.pop("seed", 0)
    job = FLOW.plan(op, dict(values), target)
    return OptionsBuild(job, compile_gpu(job, job.candidates[0], target), values, seed)


def ptxas_check(kernel: nvptx.GpuKernel) -> tuple[bool | None, str]:
    """NVIDIA's assembler on the kernel's PTX: ``(True, "assembles")``, ``(False, "does not assemble:
    ERROR")``, or ``(None, "not run: WHY")`` where ptxas is not installed."""
    tool = nvptx.ptxas()
    if tool is None:
        return None, 'not run: ptxas is not installed (pip install -e ".[ptxas]")'
    error = nvptx.assemble(kernel, tool)
    return (True, "assembles") if error is None else (False, f"does not assemble: {error}")


def run_checks(build: OptionsBuild, op: str, target: Target) -> list[tuple[str, Check | str]]:
    """``--run``'s checks by name: the loop IR in the reference interpreter (up to ``INTERPRETED_MACS``),
    then the kernel on this machine's GPU through ``run`` (or why either cannot run here)."""
    job, s = build.job, build.compiled.schedule
    inputs = FLOW.inputs(job, np.random.default_rng(build.seed))
    checks: list[tuple[str, Check | str]] = [
        ("interpreter", interpreted(job, build.compiled.func, s, inputs) if job.macs <= INTERPRETED_MACS
         else f"{job.macs:,} MACs: too many to interpret (at most {INTERPRETED_MACS:,})")]
    reason = cuda_runtime.unavailable()
    if reason:
        checks.append(("GPU", reason))
    else:
        report = run(op, target, {**build.params, "seed": build.seed, "tuning": job.candidates[0]})
        checks.append(("GPU", Check(report.validated, report.max_abs_err, report.detail)))
    return checks
