"""The CPU's part of the one ``tandem run`` flow (tandem/flows/run.py): an int8 conv2d or GEMM scheduled with
UNIT's rewriter, compiled with the LLVM backend for this CPU, run for real, compared with numpy bit for bit
and timed.

Parameters besides the layer (conv2d: ``H W IC OC K S P``; gemm: ``M N K``): ``isa`` (x86-vnni, the default,
x86-avx512, x86-avx2 or none), ``instruction`` (the spec's instruction x86-vnni sums with), ``threads``
(default: every core), ``tuning`` (a ``compiler.ops.cpu.CpuTuning``), ``tune`` (> 0: time the first ``tune``
candidates of ``cpu_tuning.tuning_space``, UNIT's two breaking points, and keep the fastest; the first is
UNIT's default pair, a fused parallel extent under 3000 and a small unroll; 0, the default: PolyDL's
top-ranked order and parallel loop around that first candidate's tile, chosen by the data-reuse analysis of
``tandem.flows.polydl`` with nothing timed; the report's ``selection`` says which way was taken, and why where
the analysis could not rank the variants) and ``min_time`` (seconds of timing per measurement, default 0.2),
``epilogue`` (``relu`` or ``relu6``, or ``relu`` true: an element-wise operator on the output, fused into the
operator by PolyDL's Algorithm 3, ``compiler.passes.fuse_elementwise``) and ``bias`` (true or 1: a
per-output-channel bias, a third input, added before the epilogue in the same fused element-wise statement;
conv2d and gemm). ``epilogue=requantize`` (integer types) requantizes each sum plus its bias to 8 bits as
onnxruntime does for a quantized model's conv or GEMM (``compiler.ops.cpu_epilogue.Requantize``): by a float32
scale per output channel (a fourth input), rounded half to even, plus the zero point ``ZP``, saturated to
[``LO``, ``HI``] (defaults 0, 0, 255), in the same fused statement; ``epilogue=shift`` as a power-of-two int8
network does (``compiler.ops.cpu_epilogue.ShiftClip``): shifted right by ``shift``, clipped to [``LO``,
``HI``] (defaults 8, -128, 127). On a real CPU the report's

- ``seconds`` is the median time of one call, timed by a native loop of back-to-back calls
  (``CpuKernel.time``, as TVM's time_evaluator: what a Python call adds, about 9 µs, is not the kernel's),
  and ``cycles`` the time-stamp counter's ticks in that time;
- ``instructions`` counts the tensor instructions the loop nest issues (the product of the loop extents
  around each, so an upper bound where a tile's tail is guarded); ``scalar_instructions`` is null (not
  counted on a real CPU); ``scalar_fallback`` is the number of marked statements left scalar, with
  ``unmatched`` saying why;
- ``gops``, ``seconds`` (per call) and ``peak_gops`` (this CPU's vpdpbusd peak on the same number of
  threads, measured by ``measure_peak``: independent accumulators, no memory traffic) are top-level keys;
- ``utilization["vpdpbusd"]`` is ``gops`` over ``peak_gops`` and ``roofline_cycles`` the operator's ops at
  that peak, in TSC ticks. On a CPU without AVX-512 VNNI the peak is that of the instruction the layer runs
  on (``utilization["vpmaddwd_256"]`` on an AVX2 CPU, its peak measured from its spec); under the
  ``x86-avx512`` and ``none`` isas there is no such peak: ``peak_gops``, ``roofline_cycles`` and
  ``roofline_pct`` are null and ``utilization`` is empty.

The flows here: ``CpuLayerFlow`` (conv2d and gemm), ``CpuContractionFlow`` (batch matmul, as GEMMs),
``CpuWindowFlow`` (TensorIR's convolution kinds, the window read in the kernel), ``CpuUserFlow`` (an operator
of the user's own) and ``CpuNetworkOpFlow`` (compiler/ops/network.py's operators). What the CPU does with a
layer (schedule, packing, reference, check) is tandem/flows/cpu_layers.py; its tunings,
tandem/flows/cpu_tuning.py and tandem/flows/polydl.py.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler import te
from compiler.analysis.issued import issued_instructions
from compiler.backend import aligned
from compiler.backend.llvm import CpuKernel, build, default_threads, host_cpu
from compiler.backend.llvm_operands import instruction_runs_on_cpu
from compiler.backend.llvm_probe import measure_instruction_peak, measure_peak, tsc_hz
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.functor import loads_in
from compiler.lower import lower
from compiler.ops import contractions, cpu, cpu_epilogue, network
from compiler.ops.nn import GemmShape
from compiler.passes.reindex import IntrinsicMapping
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from compiler.schedule import create_schedule
from compiler.target import Target
from isa.instance import operand_shape
from tandem.flows import cpu_layers, flow
from tandem.flows.check import Check
from tandem.flows.contraction import (
    ContractionFlow,
    ContractionJob,
    canonical_mapping,
    check_contraction_inputs,
    contraction_inputs,
    contraction_of,
    pads_less_transposed,
    repeated,
)
from tandem.flows.cpu_layers import DEFAULT_OPTIONS, CpuOptions, Layer
from tandem.flows.cpu_tuning import select
from tandem.flows.flow import ByOperator, Execution, RunError, RunReport, TargetFlow
from tandem.flows.run import run
from tandem.flows.targets import load_target
from tandem.flows.user_ops import UserOp, load_user_op

ISAS = ("x86-vnni", "x86-avx512", "x86-avx2", "none")   # what x86-64 CPUs run; arm-dot is the arm target's
OPS = ("conv2d", "gemm")
#: the GEMM-shaped kernels (M, N, K): the GEMM, and the GEMM transposed (``CpuOptions.transposed``), which the
#: contraction flow runs for a GEMM of few columns
GEMM_KERNELS = ("gemm", "gemm_t")
OPTIONS = ("isa", "instruction", "threads", "tune", "tuning", "min_time", "dtype", "relu", "epilogue")
#: the kernels run for real: a network's whole inference is timed end to end (tandem/network/run.py)
RUNS_FOR_REAL = True
#: each byte of a checked run's output before the kernel writes it (an element left unwritten fails the check,
#: but for an 8-bit one that happens to hold 0x5A: ``poisoned``)
POISON = 0x5A
#: the requantizing epilogues: their kind and parameters with their defaults (the zero point and uint8's
#: range; the shift and int8's range)
REQUANTIZERS = {"requantize": (cpu_epilogue.Requantize, {"ZP": 0, "LO": 0, "HI": 255}),
                "shift": (cpu_epilogue.ShiftClip, {"shift": 8, "LO": -128, "HI": 127})}


@dataclass(frozen=True)
class CpuJob:
    """A layer to run on this CPU, computed as ``options`` say, with the isa, threads, timing and candidate
    tunings of the run and the instruction's packing."""

    layer: Layer
    options: CpuOptions
    isa: str
    threads: int
    min_time: float
    candidates: tuple[cpu.CpuTuning, ...]
    packing: cpu.Packing
    selection: dict[str, Any] = dataclasses.field(default_factory=dict)   # how the candidates were chosen
    #: the weights last packed (the array, held) and their packed layout: a kernel called again on new data
    #: with the same weights (a network's inference, tandem/network/inference.py) does not pack them again
    packed_weights: list = dataclasses.field(default_factory=list, compare=False, repr=False)


def default_isa(options: CpuOptions, target: Target) -> str:
    """The isa a layer runs with when none is asked for: the vectorized schedule (``vectorized_isa``) for
    floats, which no dot-product instruction sums; for integers ``x86-vnni`` where the spec has an
    instruction that sums the layer's products and this CPU runs it (vpdpbusd; on an AVX2 CPU vpmaddwd),
    else the vectorized schedule, so that a CPU without one runs the layer rather than refusing it."""
    if options.is_float:
        return vectorized_isa()
    found = cpu.packings(options.dtype, target.spec)
    if not found:
        return "x86-vnni"   # plan_layer names why the spec has none
    return "x86-vnni" if any(_runs(pk, target) for pk in found) else vectorized_isa()


def vectorized_isa() -> str:
    """The vectorized schedule for this CPU's registers: ``x86-avx512`` (16 lanes) with AVX-512, else
    ``x86-avx2`` (8 lanes: AVX2's 256-bit registers; on an AVX2 CPU x86-avx512's 16 lanes are two registers
    each, and its tiles spill)."""
    return "x86-avx512" if host_cpu()["avx512f"] else "x86-avx2"


def host_packing(isa: str, options: CpuOptions, target: Target) -> cpu.Packing:
    """The packing ``isa`` runs ``options``' products with on this CPU: for a tensorized isa,
    ``options.instruction``, which this CPU must run, or by default the first instruction of
    ``compiler.ops.cpu.packings`` it runs (vpdpbusd_512 on AVX-512 VNNI; vpmaddwd_256, on operands widened to
    int16, on an AVX2 CPU); RunError naming what each needs where it runs none."""
    try:
        if isa not in cpu.TENSORIZED:
            return cpu.packing(isa, options.dtype, target.spec)
        candidates = [cpu.packing(isa, options.dtype, target.spec, options.instruction)] \
            if options.instruction is not None else cpu.packings(options.dtype, target.spec) or \
            [cpu.packing(isa, options.dtype, target.spec)]   # the spec has none: packing says so
    except ScheduleError as exc:
        raise RunError(f"cpu: {exc}") from None
    for pk in candidates:
        if _runs(pk, target):
            return pk
    needs = "; ".join(f"{pk.instruction} needs "
                      f"{' or '.join('+'.join(f) for f in target.spec.instruction(pk.instruction).features)}"
                      for pk in candidates)
    if options.instruction is not None:
        raise RunError(f"cpu: this CPU ({host_cpu()['cpu']}) cannot run {needs}; leave the instruction out "
                       f"(the first of the spec's this CPU runs) or use --isa {vectorized_isa()} or none")
    raise RunError(f"cpu: this CPU ({host_cpu()['cpu']}) runs none of the spec's instructions for "
                   f"{options.dtype} products ({needs}); use --isa {vectorized_isa()} or none")


def _runs(pk: cpu.Packing, target: Target) -> bool:
    return instruction_runs_on_cpu(target.spec.instruction(pk.instruction))


class CpuLayerFlow(TargetFlow):
    """conv2d and gemm (and gemm_t, for the contraction flow) on this CPU: UNIT's schedule of the layer, its
    tuning chosen by PolyDL or timed (tandem/flows/cpu_tuning.py), compiled by LLVM, run and timed."""

    kind = "cpu"

    def plan(self, op: str, params: dict[str, Any], target: Target) -> CpuJob:
        if op not in (*OPS, *GEMM_KERNELS):
            raise RunError(f"cpu: no schedule for operator {op!r}; expected one of {', '.join(OPS)} (or "
                           f"FILE.py:NAME, an operator of your own)")
        where = f"cpu {op}"
        dtype = take_dtype(params, where, floats=True)
        epilogue, requantize, bias = _take_fused(params, dtype, where)
        layer: Layer
        if op in GEMM_KERNELS:
            layer, keys = GemmShape(*flow.take_gemm(params, where)), flow.GEMM_KEYS
        else:
            layer, keys = flow.take_conv(params, where), (*flow.CONV_KEYS, "shape")
        options = CpuOptions(dtype, epilogue, bias, transposed=op == "gemm_t", requantize=requantize,
                             pad_value=_take_pad_value(params, op, dtype, where))
        return self.plan_layer(layer, options, params, keys, target, where)

    def plan_layer(self, layer: Layer, options: CpuOptions, params: dict[str, Any], keys: Sequence[str],
                   target: Target, where: str) -> CpuJob:
        """The job of running ``layer`` as ``options`` say: the run's options popped from ``params`` (any key
        left that is not one of ``keys`` is refused), its tunings, the instruction's packing."""
        cpu_layers.fits(layer, where, options)
        isa = params.pop("isa", None) or default_isa(options, target)
        if isa not in ISAS:
            raise RunError(f"cpu: unknown isa {isa!r}; expected one of {', '.join(ISAS)}")
        instruction = params.pop("instruction", options.instruction)
        if instruction is not None and (not isinstance(instruction, str) or isa not in cpu.TENSORIZED):
            raise RunError(f"{where}: instruction names the spec's instruction a tensorized isa "
                           f"({', '.join(i for i in ISAS if i in cpu.TENSORIZED)}) sums the products with, "
                           f"but got {instruction!r} with isa {isa}")
        pk = host_packing(isa, dataclasses.replace(options, instruction=instruction), target)
        options = dataclasses.replace(options, instruction=pk.instruction)
        threads = _threads(params, where)
        tune = flow.take_int(params, "tune", 0, 0, where)
        tuning = params.pop("tuning", None)
        if tuning is not None and not isinstance(tuning, cpu.CpuTuning):
            raise RunError(f"{where}: tuning must be a compiler.ops.cpu.CpuTuning, but got {tuning!r}")
        min_time = params.pop("min_time", 0.2)
        if not isinstance(min_time, int | float) or not min_time > 0:
            raise RunError(f"{where}: min_time must be a number of seconds > 0, but got {min_time!r}")
        flow.reject_unknown(params, (*keys, *OPTIONS), where)
        try:
            candidates, selection = select(layer, isa, threads, tune, tuning, target, options)
        except ScheduleError as exc:
            raise RunError(f"{where}: {exc}") from None
        return CpuJob(layer, options, isa, threads, float(min_time), tuple(candidates), pk, selection)

    def inputs(self, job: CpuJob, rng: np.random.Generator) -> list[np.ndarray]:
        return list(cpu_layers.inputs(job.layer, rng, job.options))

    def check_inputs(self, job: CpuJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in given]
        want = [(a.shape, a.dtype) for a in cpu_layers.inputs(job.layer, 0, job.options)]
        if [(a.shape, a.dtype) for a in arrays] != want:
            got = [(list(a.shape), str(a.dtype)) for a in arrays]
            scaled = job.options.requantize is not None and job.options.requantize.scaled
            names = "data, weights" + ", bias" * job.options.bias + ", scale" * scaled
            raise RunError(f"cpu {cpu_layers.op_of(job.layer, job.options)}: expected "
                           f"{[(list(s), str(d)) for s, d in want]} ({names}), but got {got}")
        return arrays

    def compile(self, job: CpuJob, candidate: cpu.CpuTuning, target: Target) -> tuple[ir.PrimFunc, CpuKernel]:
        return compile_layer(job.layer, job.isa, candidate, job.threads, target, job.options)

    def cost(self, job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
             target: Target) -> float:
        """Seconds per call (measured for half the time of the final measurement)."""
        return self._seconds(job, compiled, _packed(job, inputs), job.min_time / 2)

    def execute(self, job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
                target: Target) -> Execution:
        func, kernel = compiled
        seconds = self._seconds(job, compiled, _packed(job, inputs), job.min_time)
        # an output poisoned first: an element the kernel leaves unwritten fails the check (``output``, run
        # for an inference, leaves it uninitialized)
        output = self._call(job, compiled, inputs, poisoned(func.params[-1]))
        cycles = round(seconds * tsc_hz())   # the time-stamp counter's ticks in the median call
        gops = 2 * job.layer.macs / seconds / 1e9
        name, peak = peak_of(job, target)
        counts = issued_instructions(func)
        left = unmatched(func, target.spec)
        return Execution(
            output=output, cycles=cycles, instructions=counts,
            tensor_instructions=sum(counts.values()), scalar_instructions=None, scalar_fallback=len(left),
            unmatched=[str(x) for x in left], utilization={name: gops / peak} if peak else {},
            program=kernel.llvm_ir, measured={"gops": gops, "seconds": seconds, "peak_gops": peak})

    def output(self, job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
               target: Target) -> np.ndarray:
        """One call of the kernel on ``inputs``, its output in the layer's plain layout (the kernel writes
        every element of its output, as ``execute``'s check makes sure: it starts uninitialized)."""
        out = compiled[0].params[-1]
        return self._call(job, compiled, inputs, aligned.empty(out.shape, out.dtype.numpy))

    @staticmethod
    def _call(job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
              out: np.ndarray) -> np.ndarray:
        compiled[1](*_packed(job, inputs), out)
        return cpu_layers.unpack(job.layer, out, job.options)

    def extreme_inputs(self, job: CpuJob, inputs: list[np.ndarray]) -> list[tuple[str, list[np.ndarray]]]:
        """Integer layers: data, weights and bias at their types' extremes (``flow.extremes``); one more call
        and numpy reference each."""
        ints = inputs[:3]   # a requantization's float32 scale stays as it is
        return [(name, [*arrays, *inputs[3:]]) for name, arrays in flow.extremes(ints)]

    @staticmethod
    def _seconds(job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], packed, min_time: float) -> float:
        func, kernel = compiled
        out = aligned.zeros(func.params[-1].shape, func.params[-1].dtype.numpy)
        return kernel.time(*packed, out, min_time=min_time / 5)

    def reference(self, job: CpuJob, inputs: list[np.ndarray]) -> np.ndarray:
        return cpu_layers.reference(job.layer, *inputs, options=job.options)   # data, weights, bias, scale

    def validate(self, job: CpuJob, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        magnitude = cpu_layers.magnitude(job.layer, *inputs, options=job.options) if job.options.is_float \
            else None
        return cpu_layers.check(job.layer, got, want, magnitude, job.options)

    def roofline(self, job: CpuJob, target: Target, execution: Execution) -> int | None:
        return roofline_ticks(job.layer.macs, execution)

    def params(self, job: CpuJob, candidate: cpu.CpuTuning, target: Target) -> dict[str, Any]:
        names = {"uint8": "u8 x s8 -> s32", "int8": "s8 x s8 -> s32", "int16": "s16 x s16 -> s32",
                 "float32": "f32 x f32 -> f32"}
        return {**cpu_layers.params(job.layer), "isa": job.isa, "threads": job.threads,
                "tuning": str(candidate), "selection": job.selection, "cpu": host_cpu()["cpu"],
                "dtype": names[job.options.dtype], "instruction": job.packing.instruction,
                "bias": job.options.bias,
                "epilogue": cpu_layers.requantize_params(job.options.requantize)["epilogue"]
                if job.options.requantize else job.options.epilogue,
                **({"pad_value": job.options.pad_value} if job.options.pad_value else {})}

    def tuned_entry(self, candidate: cpu.CpuTuning, cost: float) -> dict[str, Any]:
        return {"tuning": str(candidate), "seconds": cost}


def poisoned(out: ir.Buffer) -> np.ndarray:
    """An array for output ``out`` whose every byte is ``POISON``."""
    array = aligned.empty(out.shape, out.dtype.numpy)
    array.view(np.uint8)[...] = POISON
    return array


def _packed(job: CpuJob, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The job's inputs (data, weights and the per-channel bias and scale, where given) in the kernel's
    layouts; the weights packed once for as long as the same array (the same memory) comes back."""
    data, weight, *per_channel = inputs
    held = job.packed_weights
    if not held or not same_memory(held[0], weight):
        packed = cpu_layers.pack_weights(job.layer, weight, job.packing, job.options)
        held[:] = [weight, aligned.aligned(packed)]
    return (aligned.aligned(cpu_layers.pack_data(job.layer, data, job.packing, job.options)), held[1],
            *(aligned.aligned(cpu_layers.pack_channels(v, job.packing, job.options)) for v in per_channel))


def same_memory(held: np.ndarray, given: np.ndarray) -> bool:
    """Whether ``given`` is ``held`` or a view of the same elements (``flow.memory_key``; weights are never
    written)."""
    return given is held or flow.memory_key(given) == flow.memory_key(held)


def peak_of(job: CpuJob, target: Target) -> tuple[str, float | None]:
    """``layer_peak`` of the job's options, packing and threads."""
    return layer_peak(job.options, job.packing, job.threads, target)


def layer_peak(options: CpuOptions, pk: cpu.Packing, threads: int, target: Target
               ) -> tuple[str, float | None]:
    """The instruction whose measured peak a layer of ``options`` packed as ``pk`` is held to, and that peak
    in GOPS on ``threads`` threads: float32, the fp32 FMA's (GFLOPS; without AVX-512, that of
    ``float_multiply_add``); an integer type on a CPU with AVX-512 VNNI, vpdpbusd's (64 multiply-adds per
    instruction) in proportion to the operator's instruction's own multiply-adds (vpdpwssd: 16 lanes x 2 =
    32, at the same rate); elsewhere that of the instruction the operator runs on (vpmaddwd on an AVX2 CPU).
    Without AVX-512, each is measured from its spec (``measure_instruction_peak``). None where this CPU has
    no such instruction."""
    if options.is_float and host_cpu()["avx512f"]:
        return "fma", measure_peak(threads, "fma")
    if options.is_float:
        fma = float_multiply_add(target.spec)
        return fma or "fma", measure_instruction_peak(target.spec, fma, threads) if fma else None
    if host_cpu()["avx512vnni"]:
        return "vpdpbusd", measure_peak(threads) * pk.lanes * pk.group / 64
    if pk.instruction:
        return pk.instruction, measure_instruction_peak(target.spec, pk.instruction, threads)
    return "vpdpbusd", None


def float_multiply_add(spec) -> str | None:
    """The spec's fp32 multiply-add with the most lanes that this CPU runs (vfmadd_ps_256 on an AVX2 CPU):
    an instruction of f32 registers with one result and no reduction; None where it runs none."""
    found = []
    for instr in spec.instructions.values():
        if not instr.operands or any(op.kind != "register" or op.dtype != "f32" for op in instr.operands):
            continue
        sem = instr.typed_semantics()
        if len(sem.writes) == 1 and not any(iv.kind == "reduce" for iv in sem.indices) and \
                instruction_runs_on_cpu(instr):
            found.append((math.prod(operand_shape(spec, spec.insn(instr.name), sem.writes[0])), instr.name))
    return max(found)[1] if found else None


def roofline_ticks(macs: int, execution: Execution) -> int | None:
    """``macs`` multiply-adds at the measured vpdpbusd peak, in TSC ticks; None without a peak."""
    peak = execution.measured["peak_gops"]
    return int(2 * macs / (peak * 1e9) * tsc_hz()) if peak else None


def _take_fused(params: dict[str, Any], dtype: str, where: str
                ) -> tuple[str | None, cpu_epilogue.Requantize | cpu_epilogue.ShiftClip | None, bool]:
    """Pop what is fused after the operator: its element-wise epilogue (None where it requantizes), its
    requantization and whether it adds a bias (a requantization takes one)."""
    epilogue = _take_epilogue(params, where)
    requantize = _take_requantize(params, epilogue, dtype, where)
    bias = params.pop("bias", requantize is not None)
    if not isinstance(bias, bool | int | np.integer) or bias not in (0, 1):
        raise RunError(f"{where}: bias must be true or false (1 or 0), but got {bias!r}")
    if requantize is not None and not bias:
        raise RunError(f"{where}: epilogue={epilogue} takes a bias (its third input); leave bias out or "
                       f"give bias=1")
    return None if requantize else epilogue, requantize, bool(bias)


def _take_epilogue(params: dict[str, Any], where: str) -> str | None:
    """Pop ``epilogue`` (relu or relu6) and ``relu`` (a true one is ``epilogue=relu``)."""
    relu = params.pop("relu", None)
    epilogue = params.pop("epilogue", None)
    if relu:
        if epilogue not in (None, "relu"):
            raise RunError(f"{where}: relu and epilogue={epilogue!r} are two epilogues; give one")
        epilogue = "relu"
    if epilogue is not None and epilogue not in (*cpu_epilogue.EPILOGUES, *REQUANTIZERS):
        raise RunError(f"{where}: unknown epilogue {epilogue!r}; expected one of "
                       f"{', '.join((*cpu_epilogue.EPILOGUES, *REQUANTIZERS))}")
    return epilogue


def _take_pad_value(params: dict[str, Any], op: str, dtype: str, where: str) -> int:
    """Pop ``pad_value`` (conv2d's: what its padded border holds, default 0), a value of the data's type."""
    value = params.pop("pad_value", 0)
    if value == 0 and not isinstance(value, bool):
        return 0
    if op != "conv2d":
        raise RunError(f"{where}: pad_value is the padded border of a conv2d's data; {op} has none")
    if dtype == "float32":
        raise RunError(f"{where}: pad_value is for integer data; float32's border holds 0")
    info = np.iinfo(cpu.DTYPES[dtype][0])
    integer = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not integer or not info.min <= value <= info.max:
        raise RunError(f"{where}: pad_value must be an integer of the data's type {cpu.DTYPES[dtype][0]} "
                       f"({info.min}..{info.max}), but got {value!r}")
    return int(value)


def _take_requantize(params: dict[str, Any], epilogue: str | None, dtype: str, where: str
                     ) -> cpu_epilogue.Requantize | cpu_epilogue.ShiftClip | None:
    """With a requantizing epilogue (``REQUANTIZERS``: ``requantize``, ``shift``), pop its parameters (the
    zero point or the shift, and the bounds) as its ``compiler.ops.cpu`` kind; refused for float32."""
    if epilogue not in REQUANTIZERS:
        return None
    if dtype == "float32":
        raise RunError(f"{where}: epilogue={epilogue} requantizes integer sums; dtype float32 has none")
    kind, keys = REQUANTIZERS[epilogue]
    values = [flow.take_int(params, key, default, -128, where) for key, default in keys.items()]
    try:
        return kind(*values)
    except ScheduleError as exc:
        raise RunError(f"{where}: {exc}") from None


def take_dtype(params: dict[str, Any], where: str, floats: bool = False) -> str:
    """Pop the element type (default uint8) and check that the CPU compiles it (float32 where ``floats``)."""
    dtype = params.pop("dtype", "uint8")
    if dtype not in cpu.DTYPES:
        raise RunError(f"{where}: dtype {dtype!r} is not compiled for the CPU; expected one of "
                       f"{', '.join(cpu.DTYPES)} (uint8: u8 data x s8 weights; int8: s8 x s8)")
    if dtype == "float32" and not floats:
        raise RunError(f"{where}: dtype float32 runs conv2d and gemm only; this operator takes "
                       f"{', '.join(d for d in cpu.DTYPES if d != 'float32')}")
    return dtype


def _threads(params: dict[str, Any], where: str) -> int:
    """Pop ``threads`` (default: every core), at most the cores this process may run on: more would only
    take turns on them, and the peak measurement runs one instruction chain per thread."""
    threads = flow.take_int(params, "threads", None, 1, where) or default_threads()
    if threads > default_threads():
        raise RunError(f"{where}: threads = {threads}, but this process may run on {default_threads()} cores")
    return threads


LAYER_FLOW = CpuLayerFlow()


class CpuContractionFlow(ContractionFlow):
    """Batch matmul on this CPU (tandem/flows/contraction.py): mapped onto the canonical GEMM of the data and
    weight types, run as the GEMMs of CpuLayerFlow (UNIT's tunings, vpdpbusd or the spec's instruction), timed
    on this CPU; the int32 sums are the output. The convolution kinds run directly (``CpuWindowFlow``)."""

    kind = "cpu"
    gemm_flow = LAYER_FLOW
    options = ("isa", "threads", "tune", "dtype", "min_time")

    def mapping(self, op: contractions.Contraction, target: Target, where: str) -> IntrinsicMapping:
        """The canonical GEMM's mapping."""
        return canonical_mapping(op, where)

    def kernel(self, kind: str, mnk: tuple[int, int, int], target: Target, options: dict[str, Any]) -> str:
        """A GEMM whose columns would leave most of the lanes empty runs as ``gemm_t``: the data's rows on
        the lanes (data and weights cannot swap roles here: vpdpbusd multiplies u8 by s8)."""
        return "gemm_t" if kind == "gemm" and pads_less_transposed(mnk, 1, cpu.LANES) else kind

    def dtypes(self, options: dict[str, Any]) -> tuple[str, str]:
        return cpu.DTYPES[take_dtype(dict(options), "cpu")]   # integers only: the GEMMs sum into int32

    def check_size(self, job_shape: tuple[int, int, int, int], target: Target, where: str) -> None:
        """The reindexed operands of every GEMM fit in memory (the GEMM flow checks one GEMM's arrays)."""
        count, m, n, k = job_shape
        flow.check_host_memory(count * (4 * (m * k + n * k) + 32 * m * n), where,
                               {"gemms": count, "M": m, "N": n, "K": k})

    def roofline(self, job: ContractionJob, target: Target, execution: Execution) -> int | None:
        return roofline_ticks(job.op.macs, execution)



@dataclass(frozen=True)
class WindowJob:
    """A convolution of TensorIR's kinds as ``count`` direct convolutions (one per channel group, the batch
    inside each), every one the same ``job.layer``."""

    op: contractions.Contraction
    job: CpuJob
    count: int

    @property
    def candidates(self) -> Sequence[cpu.CpuTuning]:
        return self.job.candidates


class CpuWindowFlow(TargetFlow):
    """TensorIR's convolution kinds on this CPU with the window read in the kernel (``compiler.ops.cpu.conv``,
    UNIT's conv2d schedule in 1 to 3 dimensions with stride and dilation; ``cpu.depthwise``): no im2col, so
    the time measured is the whole operator's but for the layout transform, which moves each byte once
    (blocking channels, padding, splitting groups; a transposed conv's spreading, which also makes the
    conv's stride-1 input). Output channels are the instruction's lanes and input channels its
    reduction -- the mapping the Inspector finds -- while a depthwise conv puts its channels on the lanes,
    each with its own data, and a row's taps on the reduction. A grouped conv runs one convolution per
    group, the batch inside each."""

    kind = "cpu"
    options = ("isa", "threads", "tune", "tuning", "dtype", "min_time")

    def plan(self, op: str, params: dict[str, Any], target: Target) -> WindowJob:
        where = f"cpu {op}"
        options = {key: params.pop(key) for key in self.options if key in params}
        dtype = take_dtype(options, where)
        epilogue, requantize, bias = _take_fused(params, dtype, where)
        if bias and op != "depthwise":
            raise RunError(f"{where}: a bias and an epilogue are fused into conv2d, gemm and depthwise; {op} "
                           f"gives its int32 sums")
        operator = contraction_of(op, params, cpu.DTYPES[dtype], where, self.options)
        window, count = cpu.window_of(operator)
        # few output channels: pixels on the lanes (with stride 1 each lane's data is the next 4 bytes)
        if not window.depthwise and window.s == 1 and \
                pads_less_transposed((window.out[-1], window.oc, 0), 1, cpu.LANES):
            window = dataclasses.replace(window, pixels=True)
        fused = CpuOptions(dtype, epilogue, bias, requantize=requantize)
        job = LAYER_FLOW.plan_layer(window, fused, options, (), target, where)
        return WindowJob(operator, job, count)

    def inputs(self, job: WindowJob, rng: np.random.Generator) -> list[np.ndarray]:
        """Data and weights, then (a depthwise conv with a bias) the bias and the requantization's scale."""
        return [*contraction_inputs(job.op, rng), *cpu_layers.inputs(job.job.layer, rng, job.job.options)[2:]]

    def check_inputs(self, job: WindowJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        per_channel = [np.asarray(a) for a in given[2:]]
        want = [(a.shape, a.dtype) for a in cpu_layers.inputs(job.job.layer, 0, job.job.options)[2:]]
        if [(a.shape, a.dtype) for a in per_channel] != want:
            raise RunError(f"{job.op.kind}: expected after the data and weights "
                           f"{[(list(s), str(d)) for s, d in want]} (a bias, a scale), but got "
                           f"{[(list(a.shape), str(a.dtype)) for a in per_channel]}")
        return [*check_contraction_inputs(job.op, given[:2]), *per_channel]

    def compile(self, job: WindowJob, candidate: cpu.CpuTuning, target: Target) -> Any:
        return LAYER_FLOW.compile(job.job, candidate, target)

    def cost(self, job: WindowJob, compiled: Any, inputs: list[np.ndarray], target: Target) -> float:
        """Every group runs the same kernel on arrays of one shape: the first's cost, times their count."""
        return LAYER_FLOW.cost(job.job, compiled, self.problems(job, inputs)[0], target) * job.count

    def execute(self, job: WindowJob, compiled: Any, inputs: list[np.ndarray], target: Target) -> Execution:
        runs = [LAYER_FLOW.execute(job.job, compiled, arrays, target)
                for arrays in self.problems(job, inputs)]
        return repeated(runs, self._joined(job, [r.output for r in runs]), job.op.macs)

    def output(self, job: WindowJob, compiled: Any, inputs: list[np.ndarray], target: Target) -> np.ndarray:
        return self._joined(job, [LAYER_FLOW.output(job.job, compiled, arrays, target)
                                  for arrays in self.problems(job, inputs)])

    @staticmethod
    def _joined(job: WindowJob, outputs: list[np.ndarray]) -> np.ndarray:
        """Each group's output joined as [n, group, channels, *out], in the operator's layout."""
        output = np.stack(outputs, axis=1)
        return job.op.layout_out(output[:, 0] if job.op.kind == "depthwise" else output)

    def problems(self, job: WindowJob, inputs: list[np.ndarray]) -> list[list[np.ndarray]]:
        """Each direct convolution's data ``[N, C, *padded]`` and weights (``[O, C, *k]``; depthwise
        ``[C, k, k]``), from the expression's layouts."""
        data, weight = job.op.layout_data(inputs[0]), job.op.layout_weight(inputs[1])
        if job.op.kind == "depthwise":   # [n, C, 1, H, W] and [C, 1, 1, k, k], then the bias and scale
            return [[data[:, :, 0], weight[:, 0, 0], *inputs[2:]]]
        return [[data[:, g], weight[g]] for g in range(job.count)]

    def reference(self, job: WindowJob, inputs: list[np.ndarray]) -> np.ndarray:
        sums = job.op.reference(*inputs[:2])
        return cpu_layers.finish(job.job.layer, sums, *inputs[2:], options=job.job.options).astype(np.int32)

    def roofline(self, job: WindowJob, target: Target, execution: Execution) -> int | None:
        return roofline_ticks(job.op.macs, execution)

    def params(self, job: WindowJob, candidate: cpu.CpuTuning, target: Target) -> dict[str, Any]:
        w = job.job.layer
        window = cpu_layers.params(w)
        return {**job.op.params, **{k: v for k, v in LAYER_FLOW.params(job.job, candidate, target).items()
                                     if k not in window},
                "window": {"count": job.count, **window, "out": list(w.out)},
                "mapping": "lanes = channels, reduction = taps along W" if w.depthwise else
                           "lanes = output pixels along W, reduction = input channels" if w.pixels else
                           "lanes = output channels, reduction = input channels"}

    def tuned_entry(self, candidate: cpu.CpuTuning, cost: float) -> dict[str, Any]:
        return LAYER_FLOW.tuned_entry(candidate, cost)


@dataclass(frozen=True)
class CpuUserJob:
    user: UserOp
    threads: int
    min_time: float
    candidates: tuple = (None,)


class CpuUserFlow(TargetFlow):
    """A user's operator (tandem/flows/user_ops.py) on this CPU: its tensor expression with the outermost loop
    parallel (an element-wise one: one flat loop, vectorized 16 lanes at a time, ``elementwise``; a row-wise
    one, every stage's first axis the output's, each stage computed per row inside that loop), compiled
    by the ``cpu`` pipeline and LLVM, run for real and timed. No instruction is selected (UNIT's rewriter
    schedules conv2d and gemm only); ``gops`` and the roofline are null (the operator's work is not
    known)."""

    kind = "cpu"

    def plan(self, op: str, params: dict[str, Any], target: Target) -> CpuUserJob:
        threads = _threads(params, op)
        min_time = params.pop("min_time", 0.2)
        if not isinstance(min_time, int | float) or not min_time > 0:
            raise RunError(f"{op}: min_time must be a number of seconds > 0, but got {min_time!r}")
        user = load_user_op(op, {k: params.pop(k) for k in list(params)})
        return CpuUserJob(user, threads, float(min_time))

    def inputs(self, job: CpuUserJob, rng: np.random.Generator) -> list[np.ndarray]:
        return job.user.random_inputs(rng)

    def check_inputs(self, job: CpuUserJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        return job.user.check_inputs(given)

    def compile(self, job: CpuUserJob, candidate: None, target: Target) -> tuple[ir.PrimFunc, CpuKernel]:
        out = job.user.output
        sch = create_schedule(out)
        size = math.prod(out.shape)
        if elementwise(out) and size % cpu.LANES == 0:   # one flat loop, 16 lanes at a time
            outer, inner = sch[out].split(sch[out].fuse(*out.op.axis), factor=cpu.LANES)
            sch[out].vectorize(inner)
            if job.threads > 1:
                sch[out].parallel(outer)
        else:
            rows = out.op.axis[0]
            for stage in sch.stages:   # a row-wise operator's stages per row: each thread's rows whole
                axes = getattr(stage.op, "axis", ())
                if stage.op is not out.op and axes and axes[0].extent == rows.extent and len(out.op.axis) > 1:
                    stage.compute_at(sch[out], rows)
            if job.threads > 1:
                sch[out].parallel(rows)
        func = compile_func(lower(sch, [*job.user.inputs, out], job.user.name), target)
        return func, build(func, threads=job.threads)

    def execute(self, job: CpuUserJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
                target: Target) -> Execution:
        func, kernel = compiled
        out = np.zeros(job.user.output.shape, job.user.output.dtype.numpy)
        seconds = kernel.time(*inputs, out, min_time=job.min_time / 5)
        result = self.output(job, compiled, inputs, target)
        cycles = round(seconds * tsc_hz())
        counts = issued_instructions(func)
        return Execution(output=result, cycles=cycles, instructions=counts,
                         tensor_instructions=sum(counts.values()), scalar_instructions=None,
                         scalar_fallback=0, unmatched=[], utilization={}, program=kernel.llvm_ir,
                         measured={"gops": None, "seconds": seconds, "peak_gops": None})

    def output(self, job: CpuUserJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
               target: Target) -> np.ndarray:
        """One call of the kernel on ``inputs`` into a zeroed output."""
        out = np.zeros(job.user.output.shape, job.user.output.dtype.numpy)
        compiled[1](*inputs, out)
        return out

    def reference(self, job: CpuUserJob, inputs: list[np.ndarray]) -> np.ndarray:
        return job.user.reference(inputs)

    def validate(self, job: CpuUserJob, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        return job.user.validate(got, want)

    def roofline(self, job: CpuUserJob, target: Target, execution: Execution) -> None:
        return None

    def params(self, job: CpuUserJob, candidate: None, target: Target) -> dict[str, Any]:
        return {"operator": job.user.params, "threads": job.threads, "cpu": host_cpu()["cpu"],
                "dtype": job.user.output.dtype.name}


USER_FLOW = CpuUserFlow()


def elementwise(out: te.Tensor) -> bool:
    """Whether ``out`` is one element-wise stage: no reduction, and every load of its body reads an input
    (a placeholder) at the output's own indices. Such an operator runs as one flat vectorized loop."""
    op = out.op
    if not isinstance(op, te.ComputeOp) or op.reduce_axis:
        return False
    own = tuple(iv.var for iv in op.axis)
    return all(isinstance(t.op, te.PlaceholderOp) for t in op.input_tensors) and \
        all(tuple(load.indices) == own for load in loads_in(op.body))


class CpuNetworkOpFlow(CpuUserFlow):
    """The operators of compiler/ops/network.py (pooling, residual add, ReLU, clip) on this CPU: written as
    operators of our own, run like a user's (their tensor expressions compiled by LLVM, timed)."""

    def plan(self, op: str, params: dict[str, Any], target: Target) -> CpuUserJob:
        return super().plan(network.user_op(op), params, target)


#: the kinds that run as direct convolutions (the rest: batch_matmul, mapped onto the GEMM)
WINDOW_KINDS = ("conv1d", "conv3d", "dilated_conv", "group_conv", "depthwise", "conv_transpose")
FLOW = ByOperator("cpu", {**dict.fromkeys(OPS, LAYER_FLOW),
                          **dict.fromkeys(contractions.KINDS.keys() - set(OPS), CpuContractionFlow()),
                          **dict.fromkeys(WINDOW_KINDS, CpuWindowFlow()),
                          **dict.fromkeys(network.OPERATORS, CpuNetworkOpFlow())})


def compile_layer(layer: Layer, isa: str, tuning: cpu.CpuTuning, threads: int, target: Target,
                  options: CpuOptions = DEFAULT_OPTIONS) -> tuple[ir.PrimFunc, CpuKernel]:
    """Schedule ``layer`` (a tensorized isa with ``options.instruction``, by default the first of the spec's
    that this CPU runs), run the ``cpu`` pipeline for ``target`` (its x86 spec) and build with LLVM; a bias
    and an epilogue (``options``) are an element-wise nest after the operator's, fused into it by PolyDL's
    Algorithm 3 (``compiler.ops.cpu_epilogue.fused_epilogue``; RunError if it cannot be)."""
    if isa in cpu.TENSORIZED and options.instruction is None:   # the first this CPU runs
        options = dataclasses.replace(options, instruction=host_packing(isa, options, target).instruction)
    sched = cpu_layers.schedule(layer, isa, tuning, target, options)
    func = lower(sched.schedule, sched.args)
    if options.epilogue is not None or options.bias:
        try:
            func = cpu_epilogue.fused_epilogue(func, options.epilogue,
                                      cpu_layers.bias_axes(options) if options.bias else None,
                                      options.requantize)
        except ScheduleError as exc:
            raise RunError(f"cpu: {exc}") from None
    func = compile_func(func, target)
    return func, build(func, threads=threads)


def run_cpu(
    layer: Layer,
    isa: str | None = None,
    threads: int | None = None,
    tune: int = 0,
    seed: int = 0,
    tuning: cpu.CpuTuning | None = None,
    min_time: float = 0.2,
    target: Target | None = None,
    options: CpuOptions = DEFAULT_OPTIONS,
) -> RunReport:
    """``run`` for this CPU: compile ``layer`` (a conv2d or a GEMM) as ``options`` say, run it on seeded
    inputs, compare with numpy and time it. ``isa`` None: the flow's default (x86-vnni; the vectorized isa for
    float32). ``target`` is the cpu target (its x86 spec); by default the built-in spec."""
    params = {**cpu_layers.params(layer), **options.params, "threads": threads, "tune": tune, "seed": seed,
              "tuning": tuning, "min_time": min_time, **({"isa": isa} if isa is not None else {})}
    return run(cpu_layers.op_of(layer, options), target or load_target("cpu"), params)
