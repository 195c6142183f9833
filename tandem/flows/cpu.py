"""The CPU's part of the one ``tandem run`` flow (tandem/flows/run.py): an int8 conv2d or GEMM scheduled with
UNIT's rewriter, compiled with the LLVM backend for this CPU, run for real, compared with numpy bit for bit
and timed.

Parameters besides the layer (conv2d: ``H W IC OC K S P``; gemm: ``M N K``): ``isa`` (x86-vnni, the default,
x86-avx512 or none), ``threads`` (default: every core), ``tuning`` (a ``compiler.ops.cpu.CpuTuning``),
``tune`` (> 0: time the first ``tune`` candidates of ``tuning_space``, UNIT's two breaking points, and keep
the fastest; the first is UNIT's default pair, a fused parallel extent under 3000 and a small unroll; 0, the
default: PolyDL's top-ranked order and parallel loop around that first candidate's tile, chosen by the
data-reuse analysis of ``tandem.flows.polydl`` with nothing timed; the report's ``selection`` says which way
was
taken, and why where the analysis could not rank the variants) and ``min_time`` (seconds of timing per
measurement, default 0.2), ``epilogue`` (``relu`` or ``relu6``, or ``relu`` true: an element-wise operator on
the output, fused into the operator by PolyDL's Algorithm 3, ``compiler.passes.fuse_elementwise``) and
``bias`` (true or 1: a per-output-channel bias, a third input, added before the epilogue in the same fused
element-wise statement; conv2d and gemm). On a real CPU the report's

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
  that peak, in TSC ticks. On a CPU without AVX-512 VNNI (the ``x86-avx512`` and ``none`` isas still run)
  there is no such peak: ``peak_gops``, ``roofline_cycles`` and ``roofline_pct`` are null and
  ``utilization`` is empty.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.analysis.working_set import NotAnalysable
from compiler.backend.llvm import CpuKernel, build, default_threads, host_cpu
from compiler.backend.llvm_probe import measure_peak, tsc_hz
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.ops import contractions, cpu, network, reference
from compiler.ops.nn import ConvShape
from compiler.passes.fuse_elementwise import fuse_elementwise, fusions
from compiler.passes.reindex import IntrinsicMapping
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from compiler.schedule import create_schedule
from compiler.target import Target
from tandem.flows import polydl as cpu_polydl
from tandem.flows.check import Check, exact, within_bound
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
from tandem.flows.flow import (
    CONV_KEYS,
    GEMM_KEYS,
    ByOperator,
    Execution,
    RunError,
    RunReport,
    TargetFlow,
    check_host_memory,
    random_bias,
    reject_unknown,
    take_conv,
    take_gemm,
    take_int,
)
from tandem.flows.run import run
from tandem.flows.targets import load_target
from tandem.flows.user_ops import UserOp, load_user_op

ISAS = ("x86-vnni", "x86-avx512", "none")   # what this x86-64 CPU runs; arm-dot is the arm target's
OPS = ("conv2d", "gemm")
#: the GEMM-shaped kernels (M, N, K): their schedule, packing and unpacking; besides the GEMM, the GEMM
#: transposed, which the contraction flow runs for a GEMM of few columns
GEMM_KERNELS = {"gemm": (cpu.gemm, cpu.pack_gemm, lambda out, m, n: cpu.unpack_gemm(out, n)),
                "gemm_t": (cpu.gemm_t, cpu.pack_gemm_t, lambda out, m, n: cpu.unpack_gemm_t(out, m))}
OPTIONS = ("isa", "threads", "tune", "tuning", "min_time", "dtype", "relu", "epilogue")


@dataclass(frozen=True)
class CpuLayer:
    """What ``run_cpu`` runs: a conv2d layer, a GEMM ``A[m, k] x B[n, k]ᵀ`` (``gemm``, or ``gemm_t``: the same
    GEMM with the rows on the lanes), or (``window``) a direct convolution of TensorIR's kinds."""

    op: str
    conv: ConvShape | None = None
    mnk: tuple[int, int, int] | None = None
    dtype: str = "uint8"   # u8 data x s8 weights; or int16 x int16 (compiler.ops.cpu.DTYPES)
    window: cpu.Window | None = None   # op "window": a direct convolution of TensorIR's kinds
    epilogue: str | None = None   # an element-wise operator on the output (EPILOGUES), fused (Algorithm 3)
    bias: bool = False   # a per-output-channel bias added before the epilogue (conv2d, gemm, gemm_t), fused

    def __post_init__(self) -> None:
        if self.bias and self.window is not None:
            raise ValueError(f"CpuLayer: a bias is for conv2d, gemm and gemm_t, not a {self.op} of "
                             f"TensorIR's kinds")

    @staticmethod
    def conv2d(h: int, w: int, ic: int, oc: int, k: int = 3, s: int = 1, p: int = 1,
               dtype: str = "uint8") -> CpuLayer:
        return CpuLayer("conv2d", conv=ConvShape(h, w, ic, oc, k, s, p), dtype=dtype)

    @staticmethod
    def gemm(m: int, n: int, k: int, dtype: str = "uint8") -> CpuLayer:
        return CpuLayer("gemm", mnk=(m, n, k), dtype=dtype)


    @property
    def macs(self) -> int:
        if self.window is not None:
            return self.window.macs
        return self.conv.macs if self.conv is not None else math.prod(self.mnk)

    @property
    def params(self) -> dict[str, int]:
        if self.window is not None:
            w = self.window
            return {"N": w.n, "sizes": list(w.sizes), "IC": w.ic, "OC": w.oc, "K": w.k, "S": w.s,
                    "DIL": w.dil, "depthwise": w.depthwise}
        if self.conv is not None:
            c = self.conv
            return {"H": c.h, "W": c.w, "IC": c.ic, "OC": c.oc, "K": c.k, "S": c.s, "P": c.p}
        m, n, k = self.mnk
        return {"M": m, "N": n, "K": k}

    @property
    def options(self) -> dict[str, str]:
        """The layer's element type, bias and epilogue as ``run`` parameters (none for the defaults: u8 x s8,
        no bias, no epilogue)."""
        return {**({"dtype": self.dtype} if self.dtype != "uint8" else {}),
                **({"bias": True} if self.bias else {}),
                **({"epilogue": self.epilogue} if self.epilogue else {})}

    def schedule(self, isa: str, tuning: cpu.CpuTuning, target: Target) -> cpu.CpuSchedule:
        if self.window is not None:
            return cpu.conv(self.window, isa, tuning, spec=target.spec, dtype=self.dtype)
        if self.conv is not None:
            return cpu.conv2d(self.conv, isa, tuning, spec=target.spec, dtype=self.dtype)
        return GEMM_KERNELS[self.op][0](*self.mnk, isa, tuning, spec=target.spec, dtype=self.dtype)

    def inputs(self, seed: int | np.random.Generator) -> tuple[np.ndarray, ...]:
        """Seeded data and weights in the operator's plain layout (NCHW/OIHW, or [M, K]/[N, K]), each over
        its element type's whole range (``compiler.ops.cpu.DTYPES``: u8 and s8, s8 and s8, or int16), or
        uniform in [-1, 1) for float32; with ``bias``, then the bias, one per output channel (conv2d: OC;
        a GEMM: N) in the result's type: int32 in [-2^16, 2^16), or float32 in [-1, 1)."""
        rng = np.random.default_rng(seed)
        if self.window is not None:
            w = self.window
            taps = (w.k,) * len(w.sizes)
            shapes = ((w.n, w.ic, *w.sizes), (w.oc, *taps) if w.depthwise else (w.oc, w.ic, *taps))
        elif self.conv is not None:
            c = self.conv
            shapes = ((1, c.ic, c.h, c.w), (c.oc, c.ic, c.k, c.k))
        else:
            m, n, k = self.mnk
            shapes = ((m, k), (n, k))
        arrays = tuple(rng.uniform(-1, 1, shape).astype(t) if np.dtype(t).kind == "f" else
                       rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, shape).astype(t)
                       for shape, t in zip(shapes, cpu.DTYPES[self.dtype], strict=True))
        if not self.bias:
            return arrays
        channels = self.conv.oc if self.conv is not None else self.mnk[1]
        return (*arrays, random_bias(rng, channels, np.float32 if self.is_float else np.int32))

    def pack(self, data: np.ndarray, weight: np.ndarray, pk: cpu.Packing = cpu.U8,
             bias: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """The kernel's inputs in its packed layouts: data and weights, and the bias where given, laid out
        as the output's channels are (``bias_axes``)."""
        packed = self._pack(data, weight, pk)
        if bias is None:
            return packed
        if len(self.bias_axes) == 1:   # the output's rows are its channels: one bias value per row
            return (*packed, np.ascontiguousarray(bias))
        blocks = np.zeros(-(-bias.size // pk.lanes) * pk.lanes, bias.dtype)
        blocks[: bias.size] = bias
        return (*packed, blocks.reshape(-1, pk.lanes))

    @property
    def bias_axes(self) -> tuple[int, ...]:
        """The axes of the packed output that say its element's channel, which index the packed bias
        (``pack``): conv2d's output ``[1, OC/y, OH, OW, y]`` and gemm's ``[M, N/y, y]`` read bias
        ``[OC/y, y]`` at axes 1 and -1; gemm_t's ``[N, M/y, y]`` reads bias ``[N]`` at axis 0."""
        return (0,) if self.op == "gemm_t" else (1, -1)

    def _pack(self, data: np.ndarray, weight: np.ndarray, pk: cpu.Packing) -> tuple[np.ndarray, np.ndarray]:
        if self.window is not None and self.window.depthwise:
            return cpu.pack_depthwise(data, weight, self.window.k, self.window.dil, pk)
        if self.window is not None and self.window.pixels:
            return cpu.pack_pixels(data, weight, self.window, pk)
        if self.window is not None:
            return cpu.pack_window(data, weight, pk)
        if self.conv is not None:
            return cpu.pack_conv(data, weight, self.conv, pk)
        return GEMM_KERNELS[self.op][1](data, weight, pk)

    def unpack(self, out: np.ndarray) -> np.ndarray:
        if self.window is not None and self.window.pixels:
            return cpu.unpack_pixels(out, self.window.out[-1])
        if self.window is not None:
            return cpu.unpack_window(out, self.window.oc)
        if self.conv is not None:
            return cpu.unpack_conv(out, self.conv)
        return GEMM_KERNELS[self.op][2](out, *self.mnk[:2])

    @property
    def is_float(self) -> bool:
        return self.dtype == "float32"

    def reference(self, data: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """numpy's result (its bias added and its epilogue applied): int32 for the integer types, exact
        (float64) for float32."""
        if self.window is not None:
            w = self.window
            kernels, groups = (weight[:, None], w.ic) if w.depthwise else (weight, 1)
            out = reference.conv_nd(data, kernels, w.s, 0, w.dil, groups)
        elif self.conv is not None:
            out = reference.conv2d(data, weight, self.conv.s, self.conv.p)
        else:
            out = reference.dense(data, weight)
        if bias is not None:   # one per output channel: NCHW's C, or the GEMM's N
            out = out + bias.astype(out.dtype).reshape((-1, 1, 1) if self.conv is not None else (-1,))
        if self.epilogue is not None:
            out = EPILOGUES[self.epilogue][1](out)
        return out.astype(np.float64 if self.is_float else np.int32)

    def magnitude(self, data: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """Each output's sum of its products' magnitudes and its bias's (float64, no epilogue): what
        ``check`` scales a float result's rounding bound by."""
        return dataclasses.replace(self, epilogue=None).reference(
            np.abs(data), np.abs(weight), None if bias is None else np.abs(bias))

    def check(self, got: np.ndarray, want: np.ndarray, magnitude: np.ndarray | None = None) -> Check:
        """``got`` against numpy's ``want``: integers bit for bit; float32 within K * 2^-23 * ``magnitude``
        of the exact result, K the reduction's length, one more with a bias (each of its roundings, fused or
        not, errs by at most 2^-24 of a partial sum, and a ReLU or ReLU6 after it only narrows the
        difference)."""
        if not self.is_float:
            return exact(got, want)
        return within_bound(got, want, magnitude, self.macs // max(1, want.size) + self.bias)

    def fused_extents(self, lanes: int = cpu.LANES) -> tuple[int, ...]:
        """Extents of the data-parallel loops outside the unrolled tile (before tiling), with ``lanes``
        output channels per instruction."""
        if self.window is not None and self.window.pixels:
            w = self.window
            return (w.n, w.oc, *w.out[:-1], -(-w.out[-1] // lanes))
        if self.window is not None:
            return (self.window.n, -(-self.window.oc // lanes), *self.window.out)
        if self.conv is not None:
            c = self.conv
            return (1, -(-c.oc // lanes), c.oh, c.ow)
        m, n, _ = self.mnk
        return (-(-m // lanes), n) if self.op == "gemm_t" else (-(-n // lanes), m)


def tuning_space(layer: CpuLayer, lanes: int = cpu.LANES, threads: int = 1) -> list[cpu.CpuTuning]:
    """Candidate breaking points (UNIT Sec. IV.B), the likeliest first.

    The unrolled tile (oc blocks x columns, one accumulator register each) holds at most 24 instructions, so
    that the accumulators, a weight vector per oc block and the broadcasts fit in AVX-512's 32 registers. A
    GEMM prefers tiles that divide it (no tail), then those of at least 16 instructions (enough to hide
    vpdpbusd's latency at its throughput), then the widest; its parallel loop fuses as many outer loops as
    keep its extent under 3000 (Sec. VI.B: "fused extent < 3000, unroll < 8" is the optimum for more than
    half of UNIT's layers), and each tile is tried with one fused loop fewer as well. A convolution prefers
    tiles with no tail of at least 8 instructions, the fewest, with 2 output-channel blocks where it can,
    and a parallel loop of the fewest outer loops that give each of ``threads`` two iterations (then the
    same tile with UNIT's parallel loop): measured on AMD EPYC znver4, 1 thread, 2 blocks x 4 columns with
    that loop ran ResNet-18's C2/C3/C5 at 97.8/93.8/93.7% of the vpdpbusd peak, UNIT's (4, 2, 8) at
    95.9/87.1/89.1%: fusing the rows into the parallel loop costs time even on one thread, and a 1 x 1
    conv's short reduction favours a small tile. A depthwise
    conv's instructions each take a data register of their own (shuffled from memory, not a broadcast): at
    most 14 per tile, sorted as a GEMM's, with the rows out of the parallel loop (fused: 21-25% of peak on
    7 x 7 x 1024 and 112 x 112 x 32 against 39-45%). A column-tile loop with a tail is never fused into the
    parallel loop, so that loop partitioning can split the tail off. Outputs narrower than 4 columns (a GEMV,
    a 1x1 feature map) get tiles of their own width. ``lanes``: the instruction's output lanes (16 for
    vpdpbusd; AArch64's sdot has 4, and 32 registers as AVX-512 has).
    """
    outer = list(layer.fused_extents(lanes))
    oc_axis, columns = (0 if layer.mnk is not None else 1), outer[-1]
    blocks = outer[oc_axis]
    depthwise = layer.window is not None and layer.window.depthwise
    most = 14 if depthwise else 24

    def tiles_of(widths: tuple[int, ...]) -> list[tuple[int, int]]:
        return [(oc, x) for oc in (1, 2, 3, 4) for x in widths
                if oc * x <= most and x <= columns and oc <= blocks]

    def tail(t: tuple[int, int]) -> bool:
        return columns % t[1] != 0 or blocks % t[0] != 0

    # tiles of fewer than 4 columns only where the output has fewer (a GEMV, a tiny feature map)
    tiles = tiles_of((16, 14, 12, 8, 7, 6, 5, 4)) or tiles_of((3, 2, 1))
    if layer.mnk is not None or depthwise:
        tiles.sort(key=lambda t: (tail(t), -min(t[0] * t[1], 16), -t[1]))
    else:
        tiles.sort(key=lambda t: (tail(t), t[0] * t[1] < 8, abs(t[0] * t[1] - 8), abs(t[0] - 2), -t[1]))
    space = []
    for oc, x in tiles:
        extents = list(outer)
        extents[oc_axis], extents[-1] = -(-blocks // oc), -(-columns // x)
        limit = len(extents) if columns % x == 0 else len(extents) - 1
        widest = max([1] + [p for p in range(1, limit + 1) if math.prod(extents[:p]) < 3000])
        if layer.mnk is not None:
            space += [cpu.CpuTuning(p, oc, x) for p in (widest, widest - 1) if p >= 1]
            continue
        fewest = next((p for p in range(1, limit + 1) if math.prod(extents[:p]) >= 2 * threads), limit)
        space += [cpu.CpuTuning(p, oc, x) for p in ((min(fewest, 2),) if depthwise else (fewest, widest))]
    return list(dict.fromkeys(space))


@dataclass(frozen=True)
class CpuJob:
    layer: CpuLayer
    isa: str
    threads: int
    min_time: float
    candidates: tuple[cpu.CpuTuning, ...]
    packing: cpu.Packing
    selection: dict[str, Any] = dataclasses.field(default_factory=dict)   # how the candidates were chosen


#: where PolyDL's analysis cannot rank a layer's variants, this many of ``tuning_space`` are timed instead
MEASURED_FALLBACK = 4


def _select(layer: CpuLayer, isa: str, threads: int, tune: int, tuning: cpu.CpuTuning | None,
            target: Target) -> tuple[list[cpu.CpuTuning], dict[str, Any]]:
    """The candidates to compile and how they were chosen: the ``tuning`` given; with ``tune`` > 0 the
    first ``tune`` of ``tuning_space``, to be timed; otherwise PolyDL's top-ranked variant, nothing timed
    (``tandem.flows.polydl``), or, where its analysis cannot rank them, the first ``MEASURED_FALLBACK`` of
    ``tuning_space``, timed, and why."""
    if tuning is not None:
        return [tuning], {"by": "given"}
    space = tuning_space(layer, threads=threads)
    if tune > 0:
        return space[:tune], {"by": "measured", "candidates": len(space[:tune])}
    try:
        choice = cpu_polydl.choose(layer, space[0], isa, threads, target)
    except NotAnalysable as exc:
        return space[:MEASURED_FALLBACK], {"by": "measured", "candidates": len(space[:MEASURED_FALLBACK]),
                                           "why": f"PolyDL cannot rank this layer's variants: {exc}"}
    return [choice.tuning], {"by": "polydl", "variants": len(choice.ranked),
                             "analysis_s": round(choice.seconds, 4), "cost": choice.ranked[0].cost}

class CpuFlow(TargetFlow):
    kind = "cpu"

    def plan(self, op: str, params: dict[str, Any], target: Target) -> CpuJob:
        if op not in (*OPS, *GEMM_KERNELS):
            raise RunError(f"cpu: no schedule for operator {op!r}; expected one of {', '.join(OPS)} (or "
                           f"FILE.py:NAME, an operator of your own)")
        where = f"cpu {op}"
        dtype = take_dtype(params, where, floats=True)
        epilogue = _take_epilogue(params, where)
        bias = params.pop("bias", False)
        if not isinstance(bias, bool | int | np.integer) or bias not in (0, 1):
            raise RunError(f"{where}: bias must be true or false (1 or 0), but got {bias!r}")
        if op in GEMM_KERNELS:
            layer, keys = CpuLayer(op, mnk=tuple(take_gemm(params, where)), dtype=dtype), GEMM_KEYS
        else:
            c = take_conv(params, where)
            layer = CpuLayer.conv2d(c.h, c.w, c.ic, c.oc, c.k, c.s, c.p, dtype=dtype)
            keys = (*CONV_KEYS, "shape")
        return self.plan_layer(dataclasses.replace(layer, epilogue=epilogue, bias=bool(bias)), params, keys,
                               target, where)

    def plan_layer(self, layer: CpuLayer, params: dict[str, Any], keys: Sequence[str], target: Target,
                   where: str) -> CpuJob:
        """The job of running ``layer``: its options popped from ``params`` (any key left that is not one of
        ``keys`` is refused), its tunings, the instruction's packing."""
        _fits(layer, where)
        dtype = layer.dtype
        isa = params.pop("isa", "x86-avx512" if layer.is_float else "x86-vnni")   # no float dot product
        if isa not in ISAS:
            raise RunError(f"cpu: unknown isa {isa!r}; expected one of {', '.join(ISAS)}")
        if isa == "x86-vnni" and not host_cpu()["avx512vnni"]:
            raise RunError("cpu: this CPU has no AVX-512 VNNI; use --isa x86-avx512 or none")
        threads = _threads(params, where)
        tune = take_int(params, "tune", 0, 0, where)
        tuning = params.pop("tuning", None)
        if tuning is not None and not isinstance(tuning, cpu.CpuTuning):
            raise RunError(f"{where}: tuning must be a compiler.ops.cpu.CpuTuning, but got {tuning!r}")
        min_time = params.pop("min_time", 0.2)
        if not isinstance(min_time, int | float) or not min_time > 0:
            raise RunError(f"{where}: min_time must be a number of seconds > 0, but got {min_time!r}")
        reject_unknown(params, (*keys, *OPTIONS), where)
        try:
            pk = cpu.packing(isa, dtype, target.spec)
            candidates, selection = _select(layer, isa, threads, tune, tuning, target)
        except ScheduleError as exc:
            raise RunError(f"{where}: {exc}") from None
        return CpuJob(layer, isa, threads, float(min_time), tuple(candidates), pk, selection)

    def inputs(self, job: CpuJob, rng: np.random.Generator) -> list[np.ndarray]:
        return list(job.layer.inputs(rng))

    def check_inputs(self, job: CpuJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in given]
        want = [(a.shape, a.dtype) for a in job.layer.inputs(0)]
        if [(a.shape, a.dtype) for a in arrays] != want:
            got = [(list(a.shape), str(a.dtype)) for a in arrays]
            names = "data, weights, bias" if job.layer.bias else "data, weights"
            raise RunError(f"cpu {job.layer.op}: expected {[(list(s), str(d)) for s, d in want]} ({names}), "
                           f"but got {got}")
        return arrays

    def compile(self, job: CpuJob, candidate: cpu.CpuTuning, target: Target) -> tuple[ir.PrimFunc, CpuKernel]:
        return compile_layer(job.layer, job.isa, candidate, job.threads, target)

    def cost(self, job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
             target: Target) -> float:
        """Seconds per call (measured for half the time of the final measurement)."""
        return self._seconds(job, compiled, _packed(job, inputs), job.min_time / 2)

    def execute(self, job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
                target: Target) -> Execution:
        func, kernel = compiled
        packed = _packed(job, inputs)
        seconds = self._seconds(job, compiled, packed, job.min_time)
        out = np.zeros(func.params[-1].shape, func.params[-1].dtype.numpy)
        kernel(*packed, out)
        cycles = round(seconds * tsc_hz())   # the time-stamp counter's ticks in the median call
        gops = 2 * job.layer.macs / seconds / 1e9
        name, peak = peak_of(job)
        counts = issued_instructions(func)
        left = unmatched(func, target.spec)
        return Execution(
            output=job.layer.unpack(out), cycles=cycles, instructions=counts,
            tensor_instructions=sum(counts.values()), scalar_instructions=None, scalar_fallback=len(left),
            unmatched=[str(x) for x in left], utilization={name: gops / peak} if peak else {},
            program=kernel.llvm_ir, measured={"gops": gops, "seconds": seconds, "peak_gops": peak})

    @staticmethod
    def _seconds(job: CpuJob, compiled: tuple[ir.PrimFunc, CpuKernel], packed, min_time: float) -> float:
        func, kernel = compiled
        out = np.zeros(func.params[-1].shape, func.params[-1].dtype.numpy)
        return kernel.time(*packed, out, min_time=min_time / 5)

    def reference(self, job: CpuJob, inputs: list[np.ndarray]) -> np.ndarray:
        return job.layer.reference(*inputs)

    def validate(self, job: CpuJob, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        return job.layer.check(got, want, job.layer.magnitude(*inputs) if job.layer.is_float else None)

    def roofline(self, job: CpuJob, target: Target, execution: Execution) -> int | None:
        return roofline_ticks(job.layer.macs, execution)

    def params(self, job: CpuJob, candidate: cpu.CpuTuning, target: Target) -> dict[str, Any]:
        names = {"uint8": "u8 x s8 -> s32", "int8": "s8 x s8 -> s32", "int16": "s16 x s16 -> s32",
                 "float32": "f32 x f32 -> f32"}
        return {**job.layer.params, "isa": job.isa, "threads": job.threads, "tuning": str(candidate),
                "selection": job.selection, "cpu": host_cpu()["cpu"], "dtype": names[job.layer.dtype],
                "instruction": job.packing.instruction, "bias": job.layer.bias,
                "epilogue": job.layer.epilogue}

    def tuned_entry(self, candidate: cpu.CpuTuning, cost: float) -> dict[str, Any]:
        return {"tuning": str(candidate), "seconds": cost}


def _packed(job: CpuJob, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The job's inputs (data, weights and, with a bias, the bias) in the kernel's layouts."""
    return job.layer.pack(inputs[0], inputs[1], job.packing, *inputs[2:])


def peak_of(job: CpuJob) -> tuple[str, float | None]:
    """The instruction whose measured peak the run is held to, and that peak in GOPS on the job's threads:
    float32, the fp32 FMA's (GFLOPS); an integer type, vpdpbusd's (64 multiply-adds per instruction) in
    proportion to the operator's instruction's own multiply-adds (vpdpwssd: 16 lanes x 2 = 32, at the same
    rate). None where this CPU has no such instruction."""
    if job.layer.is_float:
        return "fma", measure_peak(job.threads, "fma") if host_cpu()["avx512f"] else None
    per_insn = job.packing.lanes * job.packing.group / 64
    return "vpdpbusd", measure_peak(job.threads) * per_insn if host_cpu()["avx512vnni"] else None


def roofline_ticks(macs: int, execution: Execution) -> int | None:
    """``macs`` multiply-adds at the measured vpdpbusd peak, in TSC ticks; None without a peak."""
    peak = execution.measured["peak_gops"]
    return int(2 * macs / (peak * 1e9) * tsc_hz()) if peak else None


def _take_epilogue(params: dict[str, Any], where: str) -> str | None:
    """Pop ``epilogue`` (relu or relu6) and ``relu`` (a true one is ``epilogue=relu``)."""
    relu = params.pop("relu", None)
    epilogue = params.pop("epilogue", None)
    if relu:
        if epilogue not in (None, "relu"):
            raise RunError(f"{where}: relu and epilogue={epilogue!r} are two epilogues; give one")
        epilogue = "relu"
    if epilogue is not None and epilogue not in EPILOGUES:
        raise RunError(f"{where}: unknown epilogue {epilogue!r}; expected one of {', '.join(EPILOGUES)}")
    return epilogue


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
    threads = take_int(params, "threads", None, 1, where) or default_threads()
    if threads > default_threads():
        raise RunError(f"{where}: threads = {threads}, but this process may run on {default_threads()} cores")
    return threads


def _fits(layer: CpuLayer, where: str) -> None:
    """RunError unless each of ``layer``'s arrays (data, weights, output) has fewer than 2**31 elements (the
    compiler's int32 extents) and all of them, with the copies the run makes (packed inputs; the int32
    output, numpy's int64 reference and their float64 difference), fit in this machine's memory."""
    if layer.window is not None:
        w = layer.window
        taps = w.k ** len(w.sizes)
        inputs = [w.n * w.ic * math.prod(w.sizes), w.oc * taps * (1 if w.depthwise else w.ic)]
        output = w.n * w.oc * math.prod(w.out)
    elif layer.conv is not None:
        c = layer.conv
        inputs, output = [c.ic * c.h * c.w, c.oc * c.ic * c.k * c.k], max(c.oc * c.oh * c.ow, 0)
    else:
        m, n, k = layer.mnk
        inputs, output = [m * k, n * k], m * n
    item = np.dtype(cpu.DTYPES[layer.dtype][0]).itemsize
    if max(*inputs, output) >= 2**31:
        raise RunError(f"{where} {layer.params}: an array of {max(*inputs, output):,} elements; the "
                       f"compiler's extents are int32, so each array must have fewer than 2**31")
    check_host_memory(2 * item * sum(inputs) + 32 * output, where, layer.params)


GEMM_FLOW = CpuFlow()


class CpuContractionFlow(ContractionFlow):
    """Batch matmul on this CPU (tandem/flows/contraction.py): mapped onto the canonical GEMM of the data and
    weight types, run as the GEMMs of CpuFlow (UNIT's tunings, vpdpbusd or the spec's instruction), timed on
    this CPU; the int32 sums are the output. The convolution kinds run directly (``CpuWindowFlow``)."""

    kind = "cpu"
    gemm_flow = GEMM_FLOW
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
        check_host_memory(count * (4 * (m * k + n * k) + 32 * m * n), where, {"gemms": count, "M": m, "N": n,
                                                                              "K": k})

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
        operator = contraction_of(op, params, cpu.DTYPES[dtype], where, self.options)
        window, count = cpu.window_of(operator)
        # few output channels: pixels on the lanes (with stride 1 each lane's data is the next 4 bytes)
        if not window.depthwise and window.s == 1 and \
                pads_less_transposed((window.out[-1], window.oc, 0), 1, cpu.LANES):
            window = dataclasses.replace(window, pixels=True)
        layer = CpuLayer("window", window=window, dtype=dtype)
        job = GEMM_FLOW.plan_layer(layer, options, (), target, where)
        return WindowJob(operator, job, count)

    def inputs(self, job: WindowJob, rng: np.random.Generator) -> list[np.ndarray]:
        return contraction_inputs(job.op, rng)

    def check_inputs(self, job: WindowJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        return check_contraction_inputs(job.op, given)

    def compile(self, job: WindowJob, candidate: cpu.CpuTuning, target: Target) -> Any:
        return GEMM_FLOW.compile(job.job, candidate, target)

    def cost(self, job: WindowJob, compiled: Any, inputs: list[np.ndarray], target: Target) -> float:
        """Every group runs the same kernel on arrays of one shape: the first's cost, times their count."""
        return GEMM_FLOW.cost(job.job, compiled, self._problems(job, inputs)[0], target) * job.count

    def execute(self, job: WindowJob, compiled: Any, inputs: list[np.ndarray], target: Target) -> Execution:
        runs = [GEMM_FLOW.execute(job.job, compiled, arrays, target)
                for arrays in self._problems(job, inputs)]
        output = np.stack([r.output for r in runs], axis=1)   # [n, group, channels, *out]
        if job.op.kind == "depthwise":
            output = output[:, 0]
        return repeated(runs, job.op.layout_out(output), job.op.macs)

    def _problems(self, job: WindowJob, inputs: list[np.ndarray]) -> list[list[np.ndarray]]:
        """Each direct convolution's data ``[N, C, *padded]`` and weights (``[O, C, *k]``; depthwise
        ``[C, k, k]``), from the expression's layouts."""
        data, weight = job.op.layout_data(inputs[0]), job.op.layout_weight(inputs[1])
        if job.op.kind == "depthwise":   # [n, C, 1, H, W] and [C, 1, 1, k, k]
            return [[data[:, :, 0], weight[:, 0, 0]]]
        return [[data[:, g], weight[g]] for g in range(job.count)]

    def reference(self, job: WindowJob, inputs: list[np.ndarray]) -> np.ndarray:
        return job.op.reference(*inputs).astype(np.int32)

    def roofline(self, job: WindowJob, target: Target, execution: Execution) -> int | None:
        return roofline_ticks(job.op.macs, execution)

    def params(self, job: WindowJob, candidate: cpu.CpuTuning, target: Target) -> dict[str, Any]:
        w = job.job.layer.window
        return {**job.op.params, **{k: v for k, v in GEMM_FLOW.params(job.job, candidate, target).items()
                                     if k not in job.job.layer.params},
                "window": {"count": job.count, **job.job.layer.params, "out": list(w.out)},
                "mapping": "lanes = channels, reduction = taps along W" if w.depthwise else
                           "lanes = output pixels along W, reduction = input channels" if w.pixels else
                           "lanes = output channels, reduction = input channels"}

    def tuned_entry(self, candidate: cpu.CpuTuning, cost: float) -> dict[str, Any]:
        return GEMM_FLOW.tuned_entry(candidate, cost)


@dataclass(frozen=True)
class CpuUserJob:
    user: UserOp
    threads: int
    min_time: float
    candidates: tuple = (None,)


class CpuUserFlow(TargetFlow):
    """A user's operator (tandem/flows/user_ops.py) on this CPU: its tensor expression with the outermost loop
    parallel, compiled by the ``cpu`` pipeline and LLVM, run for real and timed. No instruction is selected
    (UNIT's rewriter schedules conv2d and gemm only); ``gops`` and the roofline are null (the operator's
    work is not known)."""

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
        if job.threads > 1:
            sch[out].parallel(out.op.axis[0])
        func = compile_func(lower(sch, [*job.user.inputs, out], job.user.name), target)
        return func, build(func, threads=job.threads)

    def execute(self, job: CpuUserJob, compiled: tuple[ir.PrimFunc, CpuKernel], inputs: list[np.ndarray],
                target: Target) -> Execution:
        func, kernel = compiled
        out = np.zeros(job.user.output.shape, job.user.output.dtype.numpy)
        seconds = kernel.time(*inputs, out, min_time=job.min_time / 5)
        out[...] = 0
        kernel(*inputs, out)
        result = out.copy()
        cycles = round(seconds * tsc_hz())
        counts = issued_instructions(func)
        return Execution(output=result, cycles=cycles, instructions=counts,
                         tensor_instructions=sum(counts.values()), scalar_instructions=None,
                         scalar_fallback=0, unmatched=[], utilization={}, program=kernel.llvm_ir,
                         measured={"gops": None, "seconds": seconds, "peak_gops": None})

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


class NetworkOpFlow(CpuUserFlow):
    """The operators of compiler/ops/network.py (pooling, residual add, ReLU, clip) on this CPU: written as
    operators of our own, run like a user's (their tensor expressions compiled by LLVM, timed)."""

    def plan(self, op: str, params: dict[str, Any], target: Target) -> CpuUserJob:
        return super().plan(network.user_op(op), params, target)


#: the kinds that run as direct convolutions (the rest: batch_matmul, mapped onto the GEMM)
WINDOW_KINDS = ("conv1d", "conv3d", "dilated_conv", "group_conv", "depthwise", "conv_transpose")
FLOW = ByOperator("cpu", {**dict.fromkeys(OPS, GEMM_FLOW),
                          **dict.fromkeys(contractions.KINDS.keys() - set(OPS), CpuContractionFlow()),
                          **dict.fromkeys(WINDOW_KINDS, CpuWindowFlow()),
                          **dict.fromkeys(network.OPERATORS, NetworkOpFlow())})


def compile_layer(
    layer: CpuLayer, isa: str, tuning: cpu.CpuTuning, threads: int, target: Target
) -> tuple[ir.PrimFunc, CpuKernel]:
    """Schedule, run the ``cpu`` pipeline for ``target`` (its x86 spec) and build with LLVM; a layer's bias
    and epilogue are an element-wise nest after the operator's, fused into it by PolyDL's Algorithm 3
    (``fuse_elementwise``; RunError if it cannot be)."""
    sched = layer.schedule(isa, tuning, target)
    func = lower(sched.schedule, sched.args)
    if layer.epilogue is not None or layer.bias:
        func = _fused_epilogue(func, layer)
    func = compile_func(func, target)
    return func, build(func, threads=threads)


#: the element-wise operators a CPU conv2d or GEMM can end with: the loop IR of one element, and numpy's
EPILOGUES = {
    "relu": (lambda x: ir.max_(x, ir.const(0, x.dtype)), lambda a: np.maximum(a, 0)),
    "relu6": (lambda x: ir.min_(ir.max_(x, ir.const(0, x.dtype)), ir.const(6, x.dtype)),
              lambda a: np.clip(a, 0, 6)),
}


def _fused_epilogue(func: ir.PrimFunc, layer: CpuLayer) -> ir.PrimFunc:
    """``func`` followed by ``layer``'s bias add and epilogue on every element of its output (one element-wise
    nest; the bias a new parameter before the output, ``CpuLayer.pack``'s layout), fused into it."""
    out = func.params[-1]
    index = tuple(ir.Var(f"e{d}") for d in range(len(out.shape)))
    value, params = out[index], func.params
    if layer.bias:
        bias = ir.Buffer("bias", tuple(out.shape[a] for a in layer.bias_axes), out.dtype)
        value, params = value + bias[tuple(index[a] for a in layer.bias_axes)], (*params[:-1], bias, out)
    if layer.epilogue is not None:
        value = EPILOGUES[layer.epilogue][0](value)
    nest: ir.Stmt = ir.Store(out, index, value)
    for var, extent in reversed(list(zip(index, out.shape, strict=True))):
        nest = ir.For(var, ir.const(0), ir.const(extent), nest)
    both = dataclasses.replace(func, params=params, body=ir.seq(func.body, nest))
    fused = fuse_elementwise(both)
    if fused is both:   # left as it was: say why
        what = " and ".join(x for x in ("bias" if layer.bias else "", layer.epilogue or "") if x)
        raise RunError(f"cpu: the {what} epilogue cannot be fused into {func.name}: {fusions(both)[-1].why}")
    return fused


def run_cpu(
    layer: CpuLayer,
    isa: str | None = None,
    threads: int | None = None,
    tune: int = 0,
    seed: int = 0,
    tuning: cpu.CpuTuning | None = None,
    min_time: float = 0.2,
    target: Target | None = None,
) -> RunReport:
    """``run`` for this CPU: compile ``layer``, run it on seeded inputs, compare with numpy and time it.
    ``isa`` None: the flow's default (x86-vnni; x86-avx512 for float32). ``target`` is the cpu target (its x86
    spec); by default the built-in spec."""
    params = {**layer.params, **layer.options, "threads": threads, "tune": tune, "seed": seed,
              "tuning": tuning, "min_time": min_time, **({"isa": isa} if isa is not None else {})}
    return run(layer.op, target or load_target("cpu"), params)


def issued_instructions(func: ir.PrimFunc) -> dict[str, int]:
    """How many times each tensor instruction is issued: the product of the constant extents around it."""
    counts: dict[str, int] = {}

    def walk(s: ir.Stmt, times: int) -> None:
        if isinstance(s, ir.TensorInsn):
            counts[s.name] = counts.get(s.name, 0) + times
        elif isinstance(s, ir.For):
            walk(s.body, times * (s.extent.value if isinstance(s.extent, ir.IntImm) else 1))
        elif isinstance(s, ir.Seq):
            for x in s.stmts:
                walk(x, times)
        elif isinstance(s, ir.IfThenElse):
            walk(s.then_case, times)
            if s.else_case is not None:
                walk(s.else_case, times)
        elif isinstance(s, ir.Allocate | ir.Attr | ir.Let):
            walk(s.body, times)

    walk(func.body, 1)
    return counts
