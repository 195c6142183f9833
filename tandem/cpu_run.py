"""The ``tandem run --target cpu`` flow: schedule an int8 conv2d or GEMM with UNIT's rewriter, compile it with
the LLVM backend for this CPU, run it for real, compare with numpy bit for bit and time it.

``run_cpu`` returns a ``CpuRunReport``: the ``RunReport`` of the accelerator targets (the ``--json`` contract
of tandem/run.py) plus ``gops``, ``seconds`` and ``peak_gops``. On a real CPU:

- ``cycles`` are time-stamp-counter ticks of one call (median), read with LLVM's ``readcyclecounter``;
- ``instructions`` counts the tensor instructions the loop nest issues (the product of the loop extents
  around each, so an upper bound where a tile's tail is guarded); ``scalar_instructions`` is null (not
  counted on a real CPU); ``scalar_fallback`` is the number of marked statements left scalar, with
  ``unmatched`` saying why;
- ``utilization["vpdpbusd"]`` is ``gops`` over ``peak_gops``, this CPU's vpdpbusd peak on the same number
  of threads, measured by ``measure_peak`` (independent accumulators, no memory traffic);
- ``roofline_cycles`` is the operator's ops at that peak, in TSC ticks. On a CPU without AVX-512 VNNI (the
  ``x86-avx512`` and ``none`` isas still run) there is no such peak: ``peak_gops``, ``roofline_cycles`` and
  ``roofline_pct`` are null and ``utilization`` is empty.

``tune`` > 0 measures the first ``tune`` candidates of ``tuning_space`` (UNIT's two breaking points: the
first is UNIT's default pair, a fused parallel extent under 3000 and a small unroll) and keeps the fastest;
``params["tuned"]`` lists what was measured.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import numpy as np

from baselines.cpu_peers import time_callable
from compiler.backend.llvm import CpuKernel, build, default_threads, host_cpu
from compiler.backend.llvm_probe import measure_peak, tsc_hz, tsc_ticks
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.ops import cpu, reference
from compiler.ops.nn import ConvShape
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from compiler.target import Target
from tandem.run import RunError, RunReport
from tandem.targets import load_target

ISAS = tuple(cpu.ISAS)


@dataclass(frozen=True)
class CpuLayer:
    """What ``run_cpu`` runs: a conv2d layer, or a GEMM ``A[m, k] x B[n, k]ᵀ``."""

    op: str
    conv: ConvShape | None = None
    mnk: tuple[int, int, int] | None = None

    @staticmethod
    def conv2d(h: int, w: int, ic: int, oc: int, k: int = 3, s: int = 1, p: int = 1) -> CpuLayer:
        return CpuLayer("conv2d", conv=ConvShape(h, w, ic, oc, k, s, p))

    @staticmethod
    def gemm(m: int, n: int, k: int) -> CpuLayer:
        return CpuLayer("gemm", mnk=(m, n, k))

    @property
    def macs(self) -> int:
        return self.conv.macs if self.conv is not None else math.prod(self.mnk)

    @property
    def params(self) -> dict[str, int]:
        if self.conv is not None:
            c = self.conv
            return {"H": c.h, "W": c.w, "IC": c.ic, "OC": c.oc, "K": c.k, "S": c.s, "P": c.p}
        m, n, k = self.mnk
        return {"M": m, "N": n, "K": k}

    def schedule(self, isa: str, tuning: cpu.CpuTuning, target: Target) -> cpu.CpuSchedule:
        if self.conv is not None:
            return cpu.conv2d(self.conv, isa, tuning, spec=target.spec)
        return cpu.gemm(*self.mnk, isa, tuning, spec=target.spec)

    def inputs(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Seeded u8 data and s8 weights in the operator's plain layout (NCHW/OIHW, or [M, K]/[N, K])."""
        rng = np.random.default_rng(seed)
        if self.conv is not None:
            c = self.conv
            return (
                rng.integers(0, 256, (1, c.ic, c.h, c.w)).astype(np.uint8),
                rng.integers(-128, 128, (c.oc, c.ic, c.k, c.k)).astype(np.int8),
            )
        m, n, k = self.mnk
        return rng.integers(0, 256, (m, k)).astype(np.uint8), rng.integers(-128, 128, (n, k)).astype(np.int8)

    def pack(self, data: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (
            cpu.pack_conv(data, weight, self.conv) if self.conv is not None else cpu.pack_gemm(data, weight)
        )

    def unpack(self, out: np.ndarray) -> np.ndarray:
        return cpu.unpack_conv(out, self.conv) if self.conv is not None else cpu.unpack_gemm(out, self.mnk[1])

    def reference(self, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
        if self.conv is not None:
            return reference.conv2d(data, weight, self.conv.s, self.conv.p).astype(np.int32)
        return reference.dense(data, weight).astype(np.int32)

    def fused_extents(self) -> tuple[int, ...]:
        """Extents of the data-parallel loops outside the unrolled tile (before tiling)."""
        if self.conv is not None:
            c = self.conv
            return (1, -(-c.oc // cpu.LANES), c.oh, c.ow)
        m, n, _ = self.mnk
        return (-(-n // cpu.LANES), m)


def tuning_space(layer: CpuLayer) -> list[cpu.CpuTuning]:
    """Candidate breaking points (UNIT Sec. IV.B), the likeliest first.

    The unrolled tile (oc blocks x columns, one accumulator register each) holds at most 24 instructions, so
    that the accumulators, a weight vector per oc block and the broadcasts fit in AVX-512's 32 registers;
    tiles that divide the layer come first (no tail), then those of at least 16 instructions (enough to hide
    vpdpbusd's latency at its throughput), then the widest. The parallel loop fuses as many outer loops as
    keep its extent under 3000 (Sec. VI.B: "fused extent < 3000, unroll < 8" is the optimum for more than
    half of UNIT's layers), but never the column-tile loop of a tile with a tail: that loop stays serial so
    that loop partitioning can split the tail off; each tile is tried with one fused loop fewer as well.
    """
    outer = list(layer.fused_extents())
    oc_axis, columns = (1 if layer.conv is not None else 0), outer[-1]
    blocks = outer[oc_axis]
    tiles = [(oc, x) for oc in (1, 2, 3, 4) for x in (16, 14, 12, 8, 7, 6, 5, 4)
             if oc * x <= 24 and x <= columns and oc <= blocks]
    tiles.sort(key=lambda t: (columns % t[1] != 0 or blocks % t[0] != 0, -min(t[0] * t[1], 16), -t[1]))
    space = []
    for oc, x in tiles:
        extents = list(outer)
        extents[oc_axis], extents[-1] = -(-blocks // oc), -(-columns // x)
        limit = len(extents) if columns % x == 0 else len(extents) - 1
        parallel = max([1] + [p for p in range(1, limit + 1) if math.prod(extents[:p]) < 3000])
        space.append(cpu.CpuTuning(parallel, oc, x))
        if parallel > 1:
            space.append(cpu.CpuTuning(parallel - 1, oc, x))
    return list(dict.fromkeys(space))


@dataclass
class CpuRunReport(RunReport):
    """``RunReport`` plus what a real run measures: GOPS, seconds per call, and the peak it is held to."""

    gops: float = 0.0
    seconds: float = 0.0
    peak_gops: float | None = None


def compile_layer(
    layer: CpuLayer, isa: str, tuning: cpu.CpuTuning, threads: int, target: Target
) -> tuple[ir.PrimFunc, CpuKernel]:
    """Schedule, run the ``cpu`` pipeline for ``target`` (its x86 spec) and build with LLVM."""
    sched = layer.schedule(isa, tuning, target)
    func = compile_func(lower(sched.schedule, sched.args), target)
    return func, build(func, threads=threads)


def run_cpu(
    layer: CpuLayer,
    isa: str = "x86-vnni",
    threads: int | None = None,
    tune: int = 0,
    seed: int = 0,
    tuning: cpu.CpuTuning | None = None,
    min_time: float = 0.2,
    target: Target | None = None,
) -> CpuRunReport:
    """Compile ``layer`` for this CPU, run it on seeded inputs, compare with numpy and time it.

    ``target`` is the cpu target (its x86 spec); by default the built-in spec."""
    target = target or load_target("cpu")
    if isa not in ISAS:
        raise RunError(f"cpu: unknown isa {isa!r}; expected one of {', '.join(ISAS)}")
    if isa == "x86-vnni" and not host_cpu()["avx512vnni"]:
        raise RunError("cpu: this CPU has no AVX-512 VNNI; use --isa x86-avx512 or none")
    threads = threads or default_threads()
    start = time.perf_counter()
    data, weight = layer.inputs(seed)
    packed = layer.pack(data, weight)
    want = layer.reference(data, weight)
    candidates = [tuning] if tuning is not None else tuning_space(layer)[: max(1, tune)]
    tuned, best = [], None
    compile_s = 0.0
    for t in candidates:
        t0 = time.perf_counter()
        func, kernel = compile_layer(layer, isa, t, threads, target)
        compile_s += time.perf_counter() - t0
        out = np.zeros(func.params[-1].shape, np.int32)
        seconds = time_callable(
            lambda k=kernel, o=out: k(*packed, o),
            min_time=(min_time if len(candidates) == 1 else min_time / 2) / 5,
        )
        tuned.append({"tuning": str(t), "seconds": seconds})
        if best is None or seconds < best[0]:
            best = (seconds, t, func, kernel, out)
    seconds, t, func, kernel, out = best
    t0 = time.perf_counter()
    kernel(*packed, out)
    got = layer.unpack(out)
    validated = bool(np.array_equal(got, want))
    cycles = int(statistics.median(tsc_ticks(lambda: kernel(*packed, out)) for _ in range(5)))
    run_s = time.perf_counter() - t0
    ops = 2 * layer.macs
    gops = ops / seconds / 1e9
    peak = measure_peak(threads) if host_cpu()["avx512vnni"] else None  # no vpdpbusd, no peak to hold to
    counts = issued_instructions(func)
    left = unmatched(func, target.spec)
    roofline = int(ops / (peak * 1e9) * tsc_hz()) if peak else None
    return CpuRunReport(
        op=layer.op,
        target="cpu",
        params={
            **layer.params,
            "isa": isa,
            "threads": threads,
            "tuning": str(t),
            "tuned": tuned,
            "cpu": host_cpu()["cpu"],
            "dtype": "u8 x s8 -> s32",
        },
        validated=validated,
        max_abs_err=float(np.max(np.abs(got.astype(np.int64) - want))) if got.size else 0.0,
        cycles=cycles,
        instructions=counts,
        tensor_instructions=sum(counts.values()),
        scalar_instructions=None,
        scalar_fallback=len(left),
        unmatched=[str(x) for x in left],
        utilization={"vpdpbusd": gops / peak} if peak else {},
        roofline_cycles=roofline,
        roofline_pct=100.0 * roofline / cycles if roofline and cycles else None,
        compile_s=compile_s,
        simulate_s=run_s,
        wall_s=time.perf_counter() - start,
        detail="bit-exact" if validated else "differs from numpy",
        output=got,
        reference=want,
        program=kernel.llvm_ir,
        gops=gops,
        seconds=seconds,
        peak_gops=peak,
    )


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
