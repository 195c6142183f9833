"""The CPU's tuning space and the choice among it: UNIT's breaking points (``compiler.ops.cpu.CpuTuning``) for
a layer of the cpu flows (tandem/flows/cpu_layers.py), and which of them a run compiles (``select``:
the one given, the first few timed, or PolyDL's top-ranked variant, tandem/flows/polydl.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from compiler.analysis.poly_rank import cpu_caches
from compiler.analysis.working_set import NotAnalysable
from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_probe import chains_to_peak
from compiler.errors import CodegenError
from compiler.ops import cpu
from compiler.ops.nn import GemmShape
from compiler.target import Target
from tandem.flows import polydl
from tandem.flows.cpu_layers import DEFAULT_OPTIONS, CpuOptions, Layer, fused_extents

#: where PolyDL's analysis cannot rank a layer's variants, this many of ``tuning_space`` are timed instead
MEASURED_FALLBACK = 4


def tuning_space(layer: Layer, lanes: int = cpu.LANES, threads: int = 1,
                 options: CpuOptions = DEFAULT_OPTIONS, registers: int = 32, chains: int = 8,
                 k_cache: int = 0, group: int = 4) -> list[cpu.CpuTuning]:
    """Candidate breaking points (UNIT Sec. IV.B), the likeliest first.

    The unrolled tile (oc blocks x columns, one accumulator register each) holds at most 24 instructions, so
    that the accumulators, a weight vector per oc block and the broadcasts fit in AVX-512's 32 registers. A
    GEMM prefers tiles that divide it (no tail), then those of at least 16 instructions (enough to hide
    vpdpbusd's latency at its throughput), then the fewest instructions (each accumulator a register, and the
    broadcasts need some too), then 2 output-channel blocks (10 loads per 16 instructions): measured on AMD
    EPYC znver5, 1 thread, PolyDL's GNMT-1 (128 x 2048 x 4096) ran at 92-99% of the vpdpbusd peak with 2
    blocks x 8 rows, 49-51% with 1 x 16 (17 loads per 16 instructions) and 40-63% with 3 x 8 or 2 x 12 (24
    accumulators), in fp32 at 88-91% of the FMA peak with 2 x 8 and 43% with 1 x 16. Its parallel loop fuses
    as many outer loops as keep its extent under 3000 (Sec. VI.B: "fused extent < 3000, unroll < 8" is the
    optimum for more than half of UNIT's layers), and each tile is tried with one fused loop fewer as well. A
    convolution prefers tiles with no tail of at least 8 instructions, the fewest, with 2 output-channel
    blocks where it can, and a parallel loop of the fewest outer loops that give each of ``threads`` two
    iterations (then the same tile with UNIT's parallel loop): measured on AMD EPYC znver4, 1 thread, 2 blocks
    x 4 columns with that loop ran ResNet-18's C2/C3/C5 at 97.8/93.8/93.7% of the vpdpbusd peak, UNIT's (4, 2,
    8) at 95.9/87.1/89.1%: fusing the rows into the parallel loop costs time even on one thread, and a 1 x 1
    conv's short reduction favours a small tile. A depthwise conv's instructions each take a data register of
    their own (shuffled from memory, not a broadcast): at most 14 per tile, sorted as a GEMM's, with the rows
    out of the parallel loop (fused: 21-25% of peak on 7 x 7 x 1024 and 112 x 112 x 32 against 39-45%). A
    column-tile loop with a tail is never fused into the parallel loop, so that loop partitioning can split
    the tail off. Outputs narrower than 4 columns (a GEMV, a 1x1 feature map) get tiles of their own width. A
    GEMM's reduction is cut into blocks (``CpuTuning.k_block``, ``k_block``) where a tile's operands over all
    of K exceed ``k_cache`` bytes (0: never; ``select`` gives a quarter of L2 to a tensorized GEMM with no
    epilogue), ``group`` the instruction's reduction width. ``lanes``: the instruction's output lanes (16 for
    vpdpbusd; AArch64's sdot has 4, and 32 registers as AVX-512 has); ``registers``: the CPU's vector
    registers; ``chains``: the independent instructions the CPU needs in flight to reach its peak
    (``compiler.backend.llvm_probe.chains_to_peak``), which a convolution's tile covers where more than 8: on
    AMD EPYC znver5, which issues two vpdpbusd a cycle (12 chains), the 2 x 4 tile ran ResNet-18's C2-C6 at
    80-85% of the peak, 2 x 7 at 94-98%. AVX2's 16 hold tiles of at most 8 instructions (depthwise 4), and
    there a GEMM prefers the squarest: measured on AMD EPYC znver3, 1 thread, a 128 x 768 x 768 fp32 GEMM ran
    at 56-81 GFLOPS with 2 blocks x 4 rows, 53-75 with 4 x 2, 36.4 with 1 x 8 (9 loads for 8 FMAs) and 32.0
    with 3 x 4 (its accumulators spill); the int8 one on vpmaddwd at 125.5 GOPS with 2 x 4 and 33.7 with 1 x
    12.
    """
    gemm = isinstance(layer, GemmShape)
    outer = list(fused_extents(layer, lanes, options))
    oc_axis, columns = (0 if gemm else 1), outer[-1]
    blocks = outer[oc_axis]
    depthwise = isinstance(layer, cpu.Window) and layer.depthwise
    most = (registers - 8) * (14 if depthwise else 24) // 24

    def tiles_of(widths: tuple[int, ...]) -> list[tuple[int, int]]:
        return [(oc, x) for oc in (1, 2, 3, 4) for x in widths
                if oc * x <= most and x <= columns and oc <= blocks]

    def tail(t: tuple[int, int]) -> bool:
        return columns % t[1] != 0 or blocks % t[0] != 0

    # tiles of fewer than 4 columns only where the output has fewer (a GEMV, a tiny feature map)
    tiles = tiles_of((16, 14, 12, 8, 7, 6, 5, 4)) or tiles_of((3, 2, 1))
    if gemm and registers < 32:   # few registers: the squarest tile, the fewest loads per instruction
        tiles.sort(key=lambda t: (tail(t), -min(t[0] * t[1], 16), abs(t[0] - t[1]), -t[1]))
    elif gemm:   # 16 accumulators, 2 weight vectors: 10 loads per 16 instructions
        tiles.sort(key=lambda t: (tail(t), -min(t[0] * t[1], 16), t[0] * t[1], abs(t[0] - 2), -t[1]))
    elif depthwise:
        tiles.sort(key=lambda t: (tail(t), -min(t[0] * t[1], 16), -t[1]))
    else:
        least = max(8, chains)
        tiles.sort(key=lambda t: (tail(t), t[0] * t[1] < least, abs(t[0] * t[1] - least), abs(t[0] - 2),
                                  -t[1]))
    space = []
    for oc, x in tiles:
        extents = list(outer)
        extents[oc_axis], extents[-1] = -(-blocks // oc), -(-columns // x)
        limit = len(extents) if columns % x == 0 else len(extents) - 1
        widest = max([1] + [p for p in range(1, limit + 1) if math.prod(extents[:p]) < 3000])
        if gemm:
            kb = k_block(layer, oc, x, lanes, group, options, k_cache)
            space += _gemm_tunings(oc, x, extents, widest, kb, threads)
            continue
        fewest = next((p for p in range(1, limit + 1) if math.prod(extents[:p]) >= 2 * threads), limit)
        space += [cpu.CpuTuning(p, oc, x) for p in ((min(fewest, 2),) if depthwise else (fewest, widest))]
    return list(dict.fromkeys(space))


def _gemm_tunings(oc: int, x: int, extents: list[int], widest: int, kb: int, threads: int
                  ) -> list[cpu.CpuTuning]:
    """A GEMM's tunings of an ``oc`` x ``x`` tile (``extents``: its outer loops'): in K blocks of ``kb``
    (if any), inside a parallel loop of one loop, BLIS's (oc blocks, K blocks, row tiles), or with one oc
    block the row tiles first (each row's data streams on from block to block: DeepBench, 1024 x 16 x
    500000, ran at 86% of the peak so, 70% in BLIS's order), where that loop has 2 iterations per thread;
    else the widest parallel loop and one fewer."""
    order = (1, 0) if extents[0] == 1 else ()
    if kb and (threads == 1 or extents[order[0] if order else 0] >= 2 * threads):
        return [cpu.CpuTuning(1, oc, x, order, kb)]
    return [cpu.CpuTuning(p, oc, x) for p in (widest, widest - 1) if p >= 1]


def k_block(layer: Layer, oc: int, x: int, lanes: int, group: int, options: CpuOptions, k_cache: int
            ) -> int:
    """BLIS's k_c for a GEMM's ``oc`` x ``x`` tile: 0 (the whole reduction in one visit of a tile) where the
    tile's operands over all of K (``oc`` weight vectors of ``lanes``, ``x`` rows of data) fit in
    ``k_cache`` bytes, else the largest number of ``group``-wide steps that divides K's and fits (measured
    on AMD EPYC znver5, 1 thread, PolyDL's long-K GEMM, 1024 x 1024 x 32768, 2 x 8 tiles: 89-95% of the
    vpdpbusd peak in blocks of 1024 or 2048 steps, 160 or 320 KB of operands, 79-82% in 256 or 512, 71%
    unblocked; fp32's square 4096^3 at 87% of the FMA peak in blocks of 1024, 70% unblocked)."""
    if not isinstance(layer, GemmShape) or k_cache <= 0:
        return 0
    steps = -(-layer.k // group)
    per_step = (oc * lanes + x) * group * np.dtype(cpu.DTYPES[options.dtype][0]).itemsize
    if steps * per_step <= k_cache:
        return 0
    return max([d for d in range(1, steps) if steps % d == 0 and d * per_step <= k_cache], default=0)


def select(layer: Layer, isa: str, threads: int, tune: int, tuning: cpu.CpuTuning | None, target: Target,
           options: CpuOptions = DEFAULT_OPTIONS) -> tuple[list[cpu.CpuTuning], dict[str, Any]]:
    """The candidates to compile and how they were chosen: the ``tuning`` given; with ``tune`` > 0 the
    first ``tune`` of ``tuning_space``, to be timed; otherwise PolyDL's top-ranked variant, nothing timed
    (``tandem.flows.polydl``), or, where its analysis cannot rank them, the first ``MEASURED_FALLBACK`` of
    ``tuning_space``, timed, and why."""
    if tuning is not None:
        return [tuning], {"by": "given"}
    pk = cpu.packing(isa, options.dtype, target.spec, options.instruction)
    registers = host_cpu()["vector_registers"]
    blocked = options.epilogue is None and not options.bias   # an epilogue needs each sum whole
    caches = cpu_caches()   # this CPU's, read once: the K blocks, the ranking and the output's stream
    l2 = next((level.bytes for level in caches if level.name == "L2"), 0)
    space = tuning_space(layer, pk.lanes, threads, options, registers, _chains(pk, target),
                         k_cache=l2 // 4 if blocked else 0, group=pk.group)
    if tune > 0:
        return space[:tune], {"by": "measured", "candidates": len(space[:tune])}
    try:
        choice = polydl.choose(layer, space[0], isa, threads, target, levels=caches, options=options)
    except NotAnalysable as exc:
        return space[:MEASURED_FALLBACK], {"by": "measured", "candidates": len(space[:MEASURED_FALLBACK]),
                                           "why": f"PolyDL cannot rank this layer's variants: {exc}"}
    chosen, by = choice.tuning, "polydl"
    if streams_output(layer, chosen, pk, options, max((level.bytes for level in caches), default=0)):
        chosen = dataclasses.replace(chosen, parallel=1, order=(1, 0), stream=threads == 1)
        by = "polydl, its output streamed" + (" past the caches" if threads == 1 else "")
    return [chosen], {"by": by, "variants": len(choice.ranked),
                      "analysis_s": round(choice.seconds, 4), "cost": choice.ranked[0].cost}


#: the output bytes a GEMM tile may write per instruction before its writes, not its instructions, bound it
#: (two vpdpbusd a cycle against a core's ~10 bytes a cycle to memory)
WRITE_BOUND_BYTES = 4


def streams_output(layer: Layer, tuning: cpu.CpuTuning, pk: cpu.Packing, options: CpuOptions,
                   llc_bytes: int | None = None) -> bool:
    """Whether a GEMM's output streams to memory as it is written: as large as the last cache or larger
    (``llc_bytes``, default this CPU's) and written faster than its instructions run (a short reduction:
    ``WRITE_BOUND_BYTES`` or more a tile writes per instruction). Such a GEMM takes its row tiles outside
    its oc blocks, so that each row is written in order: PolyDL's ranking, which has no notion of a write
    stream, placed GNMT-3's (2048 x 4096 x 32, 32 MB of int32) oc-blocks-outside variant in L3 and chose it
    (measured on AMD EPYC znver5, 1 thread: 12% of the vpdpbusd peak, the rows in order 50%); where the
    reduction is long the order of the ranking stays (long-N, K = 1024: 84% against 34%).

    On one thread its tiles are also stored past the caches (``CpuTuning.stream``, non-temporal stores):
    a core's ordinary stores to memory, each line read first, are slower than the memory's non-temporal
    write rate, two cores' faster (measured on AMD EPYC znver5, GNMT-3, the same run: 1 thread 545 GOPS,
    non-temporal 676; 2 threads 1000-1500, non-temporal 670-680 however many threads)."""
    if not isinstance(layer, GemmShape) or options.transposed or tuning.k_block:
        return False
    if llc_bytes is None:
        llc_bytes = max((level.bytes for level in cpu_caches()), default=0)
    acc = np.dtype(pk.acc).itemsize
    steps = -(-layer.k // pk.group)
    return layer.m * layer.n * acc >= llc_bytes > 0 and pk.lanes * acc >= WRITE_BOUND_BYTES * steps


def _chains(pk: cpu.Packing, target: Target) -> int:
    """The instructions of ``pk`` this CPU needs in flight to reach its peak (``chains_to_peak``); 8 for an
    untensorized schedule or an instruction the probe cannot build."""
    if pk.instruction is None:
        return 8
    try:
        return chains_to_peak(target.spec, pk.instruction)
    except CodegenError:
        return 8
