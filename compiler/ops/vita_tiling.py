"""How VITA's conv and dense schedules (``compiler.ops.vita``) cut a layer into tiles: the ``Tiling``, whether
it fits the machine's buffers (``tile_fits``), and the first-order cost model that ranks the tilings
(``estimate_cycles``, ``rank_tilings``; TVM Sec. 5.3's VITA, whose timing ``MachineCosts`` carries from the
spec and config: ``tandem.flows.vita.machine_costs``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import isa
from compiler.errors import ScheduleError
from compiler.ops.nn import ConvShape, round_up


@dataclass(frozen=True)
class Tiling:
    """How one output tile is cut: ``rows`` output rows (all columns), ``oc_block`` output channel blocks,
    and chunks of ``ic_block`` input channel blocks staged at a time; ``vthreads`` virtual threads over
    ``vthread_axis`` ("oc" or "h"), 0 or 1 for none."""

    rows: int
    oc_block: int
    ic_block: int
    vthreads: int = 0
    vthread_axis: str = "oc"

    @property
    def threads(self) -> int:
        return max(self.vthreads, 1)


def block_of(spec: isa.ISA) -> int:
    p = spec.params
    if p["BLOCK_IN"] != p["BLOCK_OUT"]:
        raise ScheduleError(f"VITA schedules need BLOCK_IN = BLOCK_OUT, but the ISA has "
                            f"BLOCK_IN={p['BLOCK_IN']}, BLOCK_OUT={p['BLOCK_OUT']}")
    return p["BLOCK_IN"]


def batch_of(spec: isa.ISA) -> int:
    """BATCH: the input rows one GEMM micro-op multiplies at once (the packed layouts' batch block)."""
    return spec.params["BATCH"]


def to_blocks(layer: ConvShape, spec: isa.ISA) -> ConvShape:
    """``layer`` with its input and output channels rounded up to whole BLOCKs: the layer the machine
    computes (the extra lanes are zero inputs and discarded outputs)."""
    block = block_of(spec)
    return dataclasses.replace(layer, ic=round_up(layer.ic, block), oc=round_up(layer.oc, block))


# --------------------------------------------------------------------------------------------------
# Tiling choice


def tile_fits(layer: ConvShape, t: Tiling, spec: isa.ISA, bias: bool = False) -> str | None:
    """Why tiling ``t`` does not fit the buffers of ``spec`` (each virtual thread has its own; with ``bias``,
    a tile's bias takes one accumulator tile per output channel block), or None."""
    p = spec.params
    n = t.threads
    in_rows = loaded_rows(layer, t.rows)
    in_cols = layer.w + 2 * layer.p
    need = {
        "INP": t.ic_block * in_rows * in_cols,
        "WGT": t.oc_block * t.ic_block * layer.k * layer.k,
        "ACC": t.oc_block * t.rows * layer.ow + (t.oc_block if bias else 0),
    }
    depth = {"INP": p["INP_BUFF_DEPTH"], "WGT": p["WGT_BUFF_DEPTH"], "ACC": p["ACC_BUFF_DEPTH"]}
    for space, tiles in need.items():
        copies = 1 if space == "WGT" and shared_weights(layer, t, spec) else n
        if tiles * copies > depth[space]:
            return f"{space} needs {tiles} x {copies} tiles, has {depth[space]}"
    return None


def shared_weights(layer: ConvShape, t: Tiling, spec: isa.ISA) -> bool:
    """Whether the virtual threads of ``t`` read the same weights, loaded once for all of them
    (``_schedule_tiles``): threads over rows, every input channel in one chunk, one output channel block."""
    block = block_of(spec)
    layer = to_blocks(layer, spec)
    return (t.threads > 1 and t.vthread_axis == "h" and t.ic_block * block >= layer.ic
            and t.oc_block * block >= layer.oc)


def loaded_rows(layer: ConvShape, rows: int) -> int:
    """The input rows a tile of ``rows`` output rows loads into INP: the window's span, or for a strided
    1 x 1 conv only the rows it reads (``_strided_rows``)."""
    return rows if strided_1x1(layer) else layer.in_rows(rows)


def strided_1x1(layer: ConvShape) -> bool:
    """Whether ``layer`` is a 1 x 1 conv of stride > 1, whose tiles load only the rows they read."""
    return layer.k == 1 and layer.s > 1


def uneven(layer: ConvShape, t: Tiling) -> str | None:
    """Why ``t`` does not cut ``layer`` into whole tiles (a partial tile would need guards, which VITA
    cannot run), or None."""
    if layer.oh % t.rows:
        return f"{t.rows} rows do not divide the {layer.oh} output rows"
    if t.vthread_axis == "h" and layer.oh // t.rows % t.threads:
        return f"{layer.oh // t.rows} row tiles do not split over {t.threads} virtual threads"
    return None


@dataclass(frozen=True)
class MachineCosts:
    """What ``estimate_cycles`` knows of the machine's timing (sim/vita's config holds the real numbers;
    the defaults are the tvm-paper config's)."""

    dram_bytes_per_cycle: int = 8
    dram_latency: int = 40
    pipeline_fill: int = 4     # GEMM and ALU, per instruction
    alu_cycles_per_uop: int = 2
    epilogue_ops: int = 3      # ALU instructions per tile: shift, max, min (or shift and one clip)
    reset_per_vector: int = 1  # GEMM_RESET's micro-op per output vector (0 where the first GEMM overwrites)


def estimate_cycles(layer: ConvShape, t: Tiling, spec: isa.ISA, costs: MachineCosts = MachineCosts()) -> int:
    """A first-order cost of ``layer`` under tiling ``t``, per unit and per chunk of input channels.

    Per tile: each chunk loads its input rows and weights (``load``) and runs its GEMMs (``gemm``); then
    the epilogue (the reset and ``costs.epilogue_ops`` ALU operations) and the store. With one chunk a
    channel block's weights are loaded once for all its row tiles (``_schedule_tiles``). One thread cannot
    load a chunk while its GEMMs read the previous one: a tile's chunks take turns with their loads, and
    the next tile's first load (with a new block's weights) overlaps this tile's epilogue and store and the
    next reset. With n threads the units overlap: a round of n chunks costs the most of n GEMMs, n loads,
    and one load plus one GEMM (a thread's next load waits for its own GEMM); a round of n tiles at least
    the DRAM port's time for their loads and stores (one port serves both). With several chunks the threads
    share one chunk loop (``inject_virtual_thread`` interleaves them per iteration), so a thread's store and
    next load wait for the other threads' last chunks: one more load and store between rounds, less the
    threads' ALU epilogues, which run meanwhile. The threads' resets (or first GEMMs) of a round come
    one after another, so the last thread's waits for its own store from the round before: the store
    less the others' resets, plus, with several chunks, the time the store waits for the DRAM port behind
    the next round's first loads. The first load, the weights' loads and the last epilogue and store stick
    out."""
    block = block_of(spec)
    c = costs
    layer = to_blocks(layer, spec)
    oc_b, ic_b = layer.oc // block, layer.ic // block
    co_tiles = math.ceil(oc_b / t.oc_block)
    tiles = math.ceil(layer.oh / t.rows) * co_tiles
    chunks = math.ceil(ic_b / t.ic_block)
    vectors = t.oc_block * t.rows * layer.ow   # accumulator rows of one tile

    def dram(nbytes: int) -> int:
        return math.ceil(nbytes / c.dram_bytes_per_cycle)

    inp = dram(t.ic_block * loaded_rows(layer, t.rows) * (layer.w + 2 * layer.p) * block)
    wgt = dram(t.oc_block * t.ic_block * layer.k * layer.k * block * block)
    stays = chunks == 1   # the weights stay: loaded once per channel block (and thread), not per tile
    port = inp + (0 if stays else wgt)   # a chunk's time on the DRAM port
    load = port + (1 if stays else 2) * c.dram_latency
    fill = wgt + c.dram_latency if stays else 0   # a channel block's weights, loaded once
    gemm = vectors * t.ic_block * layer.k * layer.k + c.pipeline_fill
    alu = c.epilogue_ops * (c.alu_cycles_per_uop * vectors + c.pipeline_fill)
    reset = c.reset_per_vector * vectors
    store_port = dram(vectors * block)
    store = store_port + c.dram_latency
    n = t.threads
    if n == 1:
        def between(loads: int) -> int:   # from a tile's last GEMM to the next tile's first
            return max(alu + store + reset, loads)
        inner = chunks * gemm + (chunks - 1) * load
        return (tiles * inner + (tiles - co_tiles) * between(load) + (co_tiles - 1) * between(load + fill)
                + load + fill + alu + store)
    # each thread loads its blocks' weights, unless they share one copy
    fills = fill * co_tiles * (n if t.vthread_axis == "h" and not shared_weights(layer, t, spec) else 1)
    round_ = max(chunks * max(n * gemm, n * load, load + gemm) + n * (reset + alu),
                 n * (chunks * port + store_port))
    rounds = math.ceil(tiles / n)
    # between rounds, what of a thread's store and next load the threads' ALU epilogues do not cover,
    # and the last thread's wait for its accumulator (its store, behind the next round's first loads)
    first = reset if c.reset_per_vector else gemm   # the first write of a thread's accumulator
    port_wait = max(0, n * port + (n - 1) * store_port - n * alu - (n - 1) * gemm) if chunks > 1 else 0
    turnover = max(0, port_wait + store - (n - 1) * first)
    wait = max(load + store - n * alu, turnover, 0) if chunks > 1 else turnover
    return rounds * round_ + (rounds - 1) * wait + load + store + fills


def rank_tilings(layer: ConvShape, vthreads: int = 0, *, spec: isa.ISA,
                 costs: MachineCosts = MachineCosts(), bias: bool = False) -> list[Tiling]:
    """Every tiling of ``layer`` that fits the buffers (with a ``bias``: ``tile_fits``) and cuts it into
    whole tiles, for ``vthreads`` virtual threads over output channels or rows, cheapest
    ``estimate_cycles`` first (ties: bigger tiles first). ScheduleError when there is none."""
    block = block_of(spec)
    layer = to_blocks(layer, spec)
    oc_b, ic_b = layer.oc // block, layer.ic // block
    n = max(vthreads, 1)
    axes = ["oc"] if oc_b % n == 0 and oc_b >= n else []
    axes += ["h"] if layer.oh >= n else []
    ranked: list[tuple[tuple[int, ...], Tiling]] = []
    for axis in axes:
        oc_share = oc_b // n if axis == "oc" else oc_b
        row_share = math.ceil(layer.oh / n) if axis == "h" else layer.oh
        for ob in (d for d in range(1, oc_share + 1) if oc_share % d == 0):
            for ib in (d for d in range(1, ic_b + 1) if ic_b % d == 0):
                for rows in range(1, row_share + 1):
                    t = Tiling(rows, ob, ib, vthreads, axis)
                    if tile_fits(layer, t, spec, bias) is not None:
                        break  # more rows only need more
                    if uneven(layer, t):
                        continue
                    cost = estimate_cycles(layer, t, spec, costs)
                    ranked.append(((cost, -rows, -ob, -ib, axis != "oc"), t))
    if not ranked:
        raise ScheduleError(f"VITA conv2d {layer}: no tiling with {n} virtual thread(s) fits the buffers "
                            f"and cuts the layer into whole tiles")
    return [t for _, t in sorted(ranked, key=lambda x: x[0])]


def choose_tiling(layer: ConvShape, vthreads: int = 0, *, spec: isa.ISA,
                  costs: MachineCosts = MachineCosts(), bias: bool = False) -> Tiling:
    """The first of ``rank_tilings``: the tiling with the lowest ``estimate_cycles``."""
    return rank_tilings(layer, vthreads, spec=spec, costs=costs, bias=bias)[0]
