"""PolyDL's choice of a CPU tuning (Tavarageri et al., Sec. 4): the outer loops around a fixed microkernel,
ranked by their data reuse in this CPU's caches, with nothing run.

    choice = choose(layer, tuning_space(layer)[0], "x86-vnni", 1, load_target("cpu"))   # 1 thread
    choice.tuning        # the top-ranked variant; choice.ranked: every variant, cheapest first

The microkernel is UNIT's unrolled tile (``tuning_space``'s first: the register rules pick it, as LIBXSMM's
JIT picks PolyDL's). The variants are the loops outside it (conv: batch, oc blocks, rows, column tiles; GEMM:
oc blocks, row tiles) in every order (a convolution keeps its batch outermost), each with every parallel
breaking point (the first loops of the order fused into the one parallel loop) that does not fuse a column-
tile loop with a tail and, on several threads, gives each thread two iterations. Each variant is lowered with
no loop fused (fusing leaves floordiv indices, outside the polyhedral model; the order of the iterations is
the same) and analysed: the working set of every dependence in this CPU's cache lines
(``compiler.analysis.working_set``, Algorithm 1; PolyDL counts elements: see ``choose``; the loops the variant
fuses are parallel when it runs on more than one thread, cut into one contiguous chunk per thread as the
backend runs them, so a reuse across them is each thread's own, in order, with every thread's working set in
the caches at once: PolyDL's rule, everything the parallel iterations touch, assumes any order and ranked
output channels innermost on Fast R-CNN's 2-thread int8 layers at 0.66-0.87 of the best), placed in this CPU's
caches as the OS reports them and costed (``compiler.analysis.poly_rank``, Algorithm 2 and Eq. 1). Only the
first order is lowered: the others are its polyhedral nest with the outer loops reordered (``Nest.reordered``;
same statements, domains and accesses, other times), which is what lowering them gives. Variants of one order
and different breaking points share one nest and its dependences (on one thread their whole analysis: their
iterations run in the same order; on more, each dependence's sequential working set, ``working_sets_each``).
Ties keep the order of ``variants``, whose first is ``tuning_space``'s own first candidate.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from compiler.analysis.poly_rank import MEMORY, MemoryLevel, Ranked, cache_line_bytes, cpu_caches, ranked
from compiler.analysis.working_set import Nest, NotAnalysable, polyhedral, working_sets_each
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.ops import cpu
from compiler.ops.nn import GemmShape
from compiler.target import Target
from tandem.flows.cpu_layers import DEFAULT_OPTIONS, CpuOptions, Layer, fused_extents, schedule


@dataclass(frozen=True)
class Choice:
    """PolyDL's verdict: the chosen tuning, every variant ranked (cheapest first), the memory levels they
    were placed in and the seconds the analysis took."""

    tuning: cpu.CpuTuning
    ranked: tuple[Ranked, ...]
    levels: tuple[MemoryLevel, ...]
    seconds: float


def variants(layer: Layer, first: cpu.CpuTuning, threads: int, lanes: int = cpu.LANES,
             options: CpuOptions = DEFAULT_OPTIONS) -> list[cpu.CpuTuning]:
    """PolyDL's variants of ``layer`` (computed as ``options`` say, tandem/flows/cpu_layers.py) around the
    microkernel of ``first`` (``tuning_space``'s first candidate, which comes first): see the module
    docstring. On more than one thread a parallel loop of fewer than two iterations per thread is no
    variant."""
    extents = list(fused_extents(layer, lanes, options))
    count, columns = len(extents), len(extents) - 1
    tail = extents[columns] % first.unroll_x != 0
    gemm = isinstance(layer, GemmShape)
    oc_axis = 0 if gemm else 1
    extents[oc_axis] = -(-extents[oc_axis] // first.unroll_oc)   # the loops' extents outside the tile
    extents[columns] = -(-extents[columns] // first.unroll_x)
    fixed = 0 if gemm else 1   # a convolution's batch stays outermost
    head = tuple(range(fixed))
    out = [first]
    # a GEMM in K blocks keeps BLIS's order (N blocks, K blocks, M tiles) and its one parallel loop: M tiles
    # outside stream all of B's block through the caches once per row tile, which the ranking does not see
    # (measured on AMD EPYC znver5, long-K 1024 x 1024 x 32768: 52% of the peak against 89%)
    if first.k_block:
        return [first]
    for rest in itertools.permutations(range(fixed, count)):
        order = head + rest
        widest = order.index(columns) if tail else count   # never fuse a column-tile loop with a tail
        for parallel in range(1, max(1, widest) + 1):
            if threads > 1 and math.prod(extents[k] for k in order[:parallel]) < 2 * threads:
                continue
            out.append(replace(first, parallel=parallel, order=() if order == tuple(range(count)) else order))
    return list(dict.fromkeys(out))


def analysis_nest(layer: Layer, isa: str, tuning: cpu.CpuTuning, target: Target,
                  options: CpuOptions = DEFAULT_OPTIONS) -> ir.Stmt:
    """The loop nest PolyDL analyses for ``tuning``: its schedule lowered with no loop fused."""
    sched = schedule(layer, isa, replace(tuning, parallel=1), target, options)
    return lower(sched.schedule, sched.args).body


def fused_loops(body: ir.Stmt, count: int) -> tuple[ir.Var, ...]:
    """The loops a variant of ``count`` fused loops runs in parallel: the outermost ``count`` of ``body``."""
    fused, s = [], body
    while len(fused) < count and isinstance(s, ir.For | ir.Attr | ir.Allocate):
        if isinstance(s, ir.For):
            fused.append(s.var)
        s = s.body
    return tuple(fused)


def choose(layer: Layer, first: cpu.CpuTuning, isa: str, threads: int, target: Target,
           levels: Sequence[MemoryLevel] | None = None, memory: MemoryLevel = MEMORY,
           line_bytes: int | str | None = "os", options: CpuOptions = DEFAULT_OPTIONS) -> Choice:
    """Rank ``variants(layer, first, threads)`` (``layer`` computed as ``options`` say) in ``levels``
    (default: this CPU's caches) and take the cheapest; NotAnalysable (naming the variant) where a variant's
    loop nest is outside the polyhedral model. Working sets count cache lines of ``line_bytes`` (``"os"``,
    the default: this CPU's, ``cache_line_bytes``), or with None elements, as PolyDL's do: measured on AMD
    EPYC znver4 (1 thread), counting elements chose the column tiles outermost on Fast R-CNN's large 1 x 1
    layers (each line of the data touched for a quarter of its bytes, then again a whole sweep later) and ran
    them at 0.50-0.86 of the best variant, counting lines at 0.74-0.99."""
    start = time.perf_counter()
    levels = tuple(cpu_caches() if levels is None else levels)
    line = cache_line_bytes() if line_bytes == "os" else line_bytes
    lanes = cpu.packing(isa, options.dtype, target.spec, options.instruction).lanes
    candidates = variants(layer, first, threads, lanes, options)
    by_order: dict[tuple[int, ...], list[cpu.CpuTuning]] = {}
    for tuning in candidates:
        by_order.setdefault(tuning.order, []).append(tuning)
    found: dict[cpu.CpuTuning, list] = {}
    count = len(fused_extents(layer, cpu.LANES, options))
    base: tuple[Nest, dict[int, ir.Var]] | None = None   # the first order's nest and its loop of each axis
    for order, group in by_order.items():   # the variants of one order share one nest and its dependences
        axes = order or tuple(range(count))
        try:
            nest = outer = None
            if base is not None:   # the first order's nest with its outer loops reordered: no lowering
                outer = tuple(base[1][a] for a in axes)
                try:
                    nest = base[0].reordered(outer)
                except ValueError:
                    nest = None
            if nest is None:
                body = analysis_nest(layer, isa, group[0], target, options)
                nest, outer = polyhedral(body, line_bytes=line), fused_loops(body, count)
                if base is None and len(outer) == count:
                    base = nest, dict(zip(axes, outer, strict=True))
            # on one thread the breaking point changes no order: the variants of one order share a result
            parallel = {t: outer[: t.parallel] if threads > 1 else () for t in group}
            each = working_sets_each(nest, list(dict.fromkeys(parallel.values())), threads)
        except NotAnalysable as exc:
            raise NotAnalysable(f"the variant {group[0]}: {exc}") from None
        found.update({t: each[parallel[t]] for t in group})
    out = sorted((ranked(t, found[t], levels, memory) for t in candidates), key=lambda r: r.cost)
    return Choice(out[0].name, tuple(out), levels, time.perf_counter() - start)
