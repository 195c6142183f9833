"""The cuts of a conv layer over the DianNao card (``ConvPlan``) and the estimate that picks one
(``conv_plan``), for the conv schedule of compiler/ops/diannao.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import isa
from compiler.errors import ScheduleError
from compiler.ops import nn
from compiler.passes.share_card import cluster_copy


@dataclass(frozen=True)
class ConvPlan:
    """How a conv layer is cut over the card, in one of two forms.

    Private (``sub_rows == 0``): ``row_groups`` x ``cout_groups`` cores on one flat core axis; a core computes
    the output rows of its row group for the output channels of its channel group, staging ``tile_rows``
    output rows' worth of input at a time from GMEM into its NMEM.

    Cluster-shared (``sub_rows > 0``, the two-level tiling of seed 001 Sec. V): ``row_groups`` x
    ``cluster_groups`` clusters take one row group and one channel group each; a cluster's cores split its
    rows ``sub_rows`` ways and its channels ``cout_groups`` ways (``sub_rows * cout_groups`` = a cluster's
    cores). The cluster stages ``smem_rows`` output rows' worth of input in SMEM once, its cores filling it
    together, and each core copies its ``tile_rows`` at a time from SMEM into NMEM. Where several cores of a
    cluster compute the same channels (``sub_rows > 1``), the cluster stages their weights in SMEM once too.
    """

    oh: int
    ow: int
    row_groups: int
    cout_groups: int
    tile_rows: int
    estimate: int  # cycles: the tensor unit's for one core's share plus the GMEM (and SMEM) port time
    sub_rows: int = 0
    smem_rows: int = 0
    cluster_groups: int = 1
    split_ky: bool = False   # each tile's conv as one conv per kernel row (kh = 1) summed on the vector unit

    @property
    def cores(self) -> int:
        """The cores the plan launches."""
        return self.row_groups * self.cluster_groups * self.cout_groups * max(self.sub_rows, 1)

    def describe(self) -> str:
        """The cut in words: groups (row groups, or clusters: row groups x channel groups, x a cluster's
        channel groups), NMEM tile rows, in the cluster-shared form the sub-rows and SMEM tile rows, and
        whether the conv goes one kernel row at a time."""
        shared = f", {self.sub_rows} sub-rows, SMEM {self.smem_rows} rows" if self.sub_rows else ""
        clusters = f"{self.row_groups}x{self.cluster_groups}" if self.cluster_groups > 1 else \
            str(self.row_groups)
        split = ", by kernel rows" if self.split_ky else ""
        return f"{clusters}x{self.cout_groups} groups, tile {self.tile_rows} rows{shared}{split}"

    @property
    def cut(self) -> tuple[int, int, int, int, bool]:
        """The cut without its tile sizes: row groups, the clusters' channel groups, a cluster's (or a
        core's) channel groups, sub-rows, and whether by kernel rows."""
        return self.row_groups, self.cluster_groups, self.cout_groups, self.sub_rows, self.split_ky


def conv_plan(h: int, w: int, cin: int, cout: int, k: int, stride: int, pad: int, itemsize: int, cores: int,
              spec: isa.ISA) -> ConvPlan:
    """The cut with the fewest estimated cycles of ``conv_plans``."""
    return min(conv_plans(h, w, cin, cout, k, stride, pad, itemsize, cores, spec), key=lambda p: p.estimate)


def conv_plans(h: int, w: int, cin: int, cout: int, k: int, stride: int, pad: int, itemsize: int, cores: int,
               spec: isa.ISA) -> list[ConvPlan]:
    """Every cut of the layer over the card that fits, of either form (``ConvPlan``), with its tile sizes
    (for each cut the largest few that fit, tiles double-buffered where there are several: ``double_buffer``),
    each with its estimated cycles. ``itemsize``: bytes of an input element (integer codes of 1 or 2 bytes
    sum into 4-byte outputs).

    The estimate models the pipeline ``double_buffer`` makes of a cut (``_pipelined``): the start-up before a
    core's first conv (the weights every core loads, through SMEM where several of a cluster's cores share
    them, and the first tiles, all through the GMEM port at the spec's DMA rate), then a core's convs and
    the waits for the copies a conv cannot hide (the next SMEM tile of every cluster through the GMEM port;
    the cluster's next NMEM tiles through its SMEM port), or the GMEM port's time for all the traffic if that
    is longer, then the last drain. Cuts use at most ``cores`` cores, a number the card can launch (up to a
    cluster, or whole clusters), and leave no row group empty (an empty group's guards would depend on the
    core in ways loop partitioning cannot split in three pieces). ScheduleError names what cannot fit."""
    p = spec.params
    block = p["CONV_BLOCK"]
    invalid = nn.ConvShape(h, w, cin, cout, k, stride, pad).invalid()
    if invalid or cores < 1:
        raise ScheduleError(f"DianNao conv: {invalid or f'expected at least one core, but got {cores}'}")
    if cout % block:
        raise ScheduleError(f"DianNao conv: cout = {cout} is not a multiple of CONV_BLOCK = {block}")
    field = spec.instruction("conv").field
    layer = _Layer(h, w, cin, cout, k, stride, pad, itemsize, p, max_rows=field("h").hi,
                   max_channels=field("cout").hi, card=cluster_copy(spec) is not None)
    plans = [*_private_plans(layer, cores), *_shared_plans(layer, cores)]
    if not plans:
        raise ScheduleError(f"DianNao conv: no split of {cores} cores fits the weights "
                            f"({k}x{k}x{cin}x{cout}) in WMEM and a tile of output rows in NMEM")
    return plans


@dataclass(frozen=True)
class _Layer:
    """A conv layer's sizes, and the cost of pieces of it on the card described by ``p``."""

    h: int
    w: int
    cin: int
    cout: int
    k: int
    stride: int
    pad: int
    itemsize: int
    p: dict
    max_rows: int  # input rows one conv instruction can take (its h field)
    max_channels: int  # output channels one conv instruction can take (its cout field)
    card: bool = False  # the spec has a copy between clusters' SMEMs (``share_card`` loads weights once)

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.k) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.k) // self.stride + 1

    @property
    def row_bytes(self) -> int:
        """One padded input row."""
        return (self.w + 2 * self.pad) * self.cin * self.itemsize

    def in_rows(self, rows: int) -> int:
        """Input rows that ``rows`` output rows read."""
        return (rows - 1) * self.stride + self.k

    @property
    def out_itemsize(self) -> int:
        """Bytes of an output element: integer codes (1 or 2 bytes) sum in i32 (``qconv``)."""
        return max(self.itemsize, 4)

    @property
    def weight_bytes(self) -> int:
        """All the layer's weights."""
        return self.k * self.k * self.cin * self.cout * self.itemsize

    def weights(self, groups: int) -> int | None:
        """Bytes of one of ``groups`` channel groups' weights, or None when they do not fit WMEM."""
        nbytes = self.k * self.k * self.cin * self.cout // groups * self.itemsize
        return nbytes if nbytes <= self.p["WMEM_BYTES"] else None

    def fits_nmem(self, rows: int, channels: int, copies: int) -> bool:
        """Whether ``copies`` NMEM tiles of ``rows`` output rows of ``channels`` channels (input rows and
        output, each buffer aligned with a VECTOR_ELEMS grain of slack for zero-fill rounding) fit NMEM."""
        output = rows * self.ow * channels * self.out_itemsize
        tile = self.in_rows(rows) * self.row_bytes + output + 2 * self._slack
        return self.in_rows(rows) <= self.max_rows and copies * tile <= self.p["NMEM_BYTES"]

    def fits_smem(self, rows: int, copies: int, staged: int = 0) -> bool:
        """Whether ``copies`` SMEM tiles of ``rows`` output rows' input fit SMEM beside ``staged`` bytes."""
        return staged + copies * (self.in_rows(rows) * self.row_bytes + self._slack) <= self.p["SMEM_BYTES"]

    @property
    def _slack(self) -> int:
        return self.p["VECTOR_ELEMS"] * self.itemsize + self.p["VECTOR_ALIGN"]

    # ---- the estimate's pieces (cycles), at the spec's DMA rates and latencies
    def conv_cycles(self, rows: int, channels: int) -> int:
        """One conv instruction: ``rows`` output rows of ``channels`` channels."""
        macs = rows * self.ow * channels * self.k * self.k * self.cin
        return self.p["TFU_LATENCY"] + math.ceil(macs * self.itemsize / (2 * self.p["TFU_MACS_PER_CYCLE"]))

    def gmem(self, nbytes: float) -> float:
        return nbytes / self.p["DMA_GMEM_BYTES_PER_CYCLE"]

    def smem(self, nbytes: float) -> float:
        return nbytes / self.p["DMA_SMEM_BYTES_PER_CYCLE"]

    def input_bytes(self, rows: int) -> int:
        """The unpadded input rows ``rows`` output rows read from GMEM."""
        return self.in_rows(rows) * self.w * self.cin * self.itemsize

    def new_input_bytes(self, rows: int) -> int:
        """The input rows a later SMEM tile of ``rows`` output rows reads from GMEM: those the tile before
        does not hold (``reuse_rows`` copies the shared ones on chip)."""
        return min(rows * self.stride, self.in_rows(rows)) * self.w * self.cin * self.itemsize

    def splits(self, even: bool, rows: int, channels: int) -> tuple[bool, ...]:
        """Whether a conv may go one kernel row at a time (``ConvPlan.split_ky``): with several kernel rows,
        stride 1, whole vectors per padded input row (each row's conv starts aligned) and per output tile of
        ``rows`` rows of ``channels`` channels (the vector adds of the rows' sums), and tiles that are
        ``even`` (every core's tiles whole: a core with a short tile has guards that leave its tile loop
        unlike its cluster's others)."""
        aligned = self.row_bytes % self.p["VECTOR_ALIGN"] == 0 and \
            rows * self.ow * channels % self.p["VECTOR_ELEMS"] == 0
        return (False, True) if even and self.k > 1 and self.stride == 1 and aligned else (False,)

    def streamed(self, loading: float, step: float) -> float:
        """What loading a core's weights by kernel rows saves before its first tile is done (``loading``
        cycles for all of them at once): the first tile's convs of every row but the last overlap the later
        rows' weights, at most for the time those take; half of that, as each row's copy is issued only when
        the row before is waited for and queues behind every other core's (measured: a 7x7x512 layer's
        8-core cut by kernel rows came out 20% slower than this bound without the half)."""
        return (self.k - 1) / self.k * min(loading, step) / 2

    def split_cycles(self, rows: int, channels: int) -> float:
        """What a tile's conv by kernel rows adds: a conv's latency and a vector add of the tile per row
        after the first."""
        vadd = math.ceil(rows * self.ow * channels * self.out_itemsize / self.p["VFU_BYTES_PER_CYCLE"])
        return (self.k - 1) * (self.p["TFU_LATENCY"] + self.p["VFU_LATENCY"] + vadd)


def _candidates(share: int, fits) -> list[int]:
    """Tile sizes for a share of ``share`` rows: each count of tiles' balanced size (``ceil(share /
    tiles)``) that ``fits``, largest first."""
    sizes = sorted({math.ceil(share / tiles) for tiles in range(1, share + 1)}, reverse=True)
    return [rows for rows in sizes if fits(rows)]


def _no_empty_group(n: int, groups: int) -> bool:
    return math.ceil(n / groups) * (groups - 1) < n


def _pipelined(layer: _Layer, startup: float, steps: int, step: int, waits: float, traffic: float,
               queue: float, drain: float) -> int:
    """A pipeline's cycles: the start-up before the first conv, then the longest of: the convs of every step
    (``steps`` of ``step`` cycles) and the waits for copies they cannot hide; the GMEM port's time for the
    rest of the ``traffic`` bytes; a core's DMA unit's time for its copies, one after another (``queue``);
    then the last drain (every core's last output tile, ``drain`` bytes, through the GMEM port)."""
    body = max(steps * step + waits, layer.gmem(traffic - drain) - startup, queue)
    return math.ceil(startup + body + layer.gmem(drain) + layer.p["GMEM_LATENCY"])


def _output_row_bytes(layer: _Layer, channels: int) -> int:
    return layer.ow * channels * layer.out_itemsize


def _private_plans(layer: _Layer, cores: int):
    """Each core stages its tiles straight from GMEM (double-buffered where it has several): start-up is
    every core's weights and first tile through the GMEM port; each later tile's fill, all cores at once,
    hides behind a conv unless the port needs longer."""
    p, blocks = layer.p, layer.cout // layer.p["CONV_BLOCK"]
    per_cluster = p["CORES_PER_CLUSTER"]
    for cg in (g for g in range(1, blocks + 1) if blocks % g == 0):
        weights, channels = layer.weights(cg), layer.cout // cg
        if channels > layer.max_channels:
            continue   # more output channels than one conv instruction computes
        for rg in range(1, layer.oh + 1):
            used = rg * cg
            if not (used <= min(cores, per_cluster) or (used <= cores and used % per_cluster == 0)):
                continue
            share = math.ceil(layer.oh / rg)
            if weights is None or not _no_empty_group(layer.oh, rg):
                continue
            for tile in _candidates(share, lambda r, s=share, c=channels: layer.fits_nmem(
                    r, c, 1 if r == s else 2))[:4]:
                for split in layer.splits(layer.oh % rg == 0 and share % tile == 0, tile, channels):
                    steps, step = math.ceil(share / tile), layer.conv_cycles(tile, channels)
                    step += layer.split_cycles(tile, channels) if split else 0.0
                    fill = layer.gmem(used * layer.input_bytes(tile))
                    loading = layer.gmem(used * weights)
                    startup = loading + fill + p["GMEM_LATENCY"]
                    startup -= layer.streamed(loading, step) if split else 0.0
                    traffic = used * weights + used * steps * layer.input_bytes(tile) + _output_bytes(layer)
                    waits = (steps - 1) * max(0.0, fill - step)
                    queue = steps * (2 * p["GMEM_LATENCY"] + layer.gmem(
                        layer.input_bytes(tile) + tile * _output_row_bytes(layer, channels)))
                    drain = used * tile * _output_row_bytes(layer, channels)
                    estimate = _pipelined(layer, startup, steps, step, waits, traffic, queue, drain)
                    yield ConvPlan(layer.oh, layer.ow, rg, cg, tile, estimate, split_ky=split)


def _shared_plans(layer: _Layer, cores: int):
    """Clusters take row groups x channel groups; a cluster stages its input rows in SMEM tiles (and the
    weights several of its cores share), its cores split rows x channels (``ConvPlan``); SMEM and NMEM tiles
    are double-buffered across the cluster's whole walk (``double_buffer``)."""
    p, blocks = layer.p, layer.cout // layer.p["CONV_BLOCK"]
    per_cluster = p["CORES_PER_CLUSTER"]
    for ccg in (g for g in range(1, min(blocks, p["CLUSTERS"]) + 1) if blocks % g == 0):
        for rg in range(1, min(cores // per_cluster, p["CLUSTERS"]) // ccg + 1):
            if not _no_empty_group(layer.oh, rg):
                continue
            share = math.ceil(layer.oh / rg)   # output rows per cluster
            for cg in range(1, per_cluster + 1):
                if (blocks // ccg) % cg == 0 and per_cluster % cg == 0:
                    yield from _shared_cuts(layer, rg, ccg, cg, share)


def _shared_cuts(layer: _Layer, rg: int, ccg: int, cg: int, share: int):
    p = layer.p
    per_cluster = p["CORES_PER_CLUSTER"]
    rs, channels = per_cluster // cg, layer.cout // (ccg * cg)
    weights = layer.weights(ccg * cg)
    if channels > layer.max_channels:
        return   # more output channels than one conv instruction computes
    if weights is None:
        return
    staged = weights * cg if card_shared(rs, rg, ccg, layer.card) else 0   # the cluster's weights, in SMEM
    # SMEM tiles of every size that divides the share (a short last SMEM tile would part a cluster's cores:
    # no tile could be shared), largest first (of equal estimates the first listed is chosen); small ones
    # cost little since reuse_rows copies their halo on chip
    for smem_rows in (r for r in range(share, 0, -1) if share % r == 0):
        smem_tiles = math.ceil(share / smem_rows)
        rows = math.ceil(smem_rows / rs)   # a core's rows of one SMEM tile
        if not layer.fits_smem(smem_rows, 1 if smem_rows == share else 2, staged) or \
                not sub_rows_fit(layer.oh, rg, smem_rows, rs):
            continue
        single = smem_tiles == 1   # one SMEM tile and one NMEM tile: nothing doubled
        for tile in _candidates(rows, lambda r, n=rows, one=single: layer.fits_nmem(
                r, channels, 1 if r == n and one else 2))[:4]:
            even = layer.oh % rg == 0 and smem_rows % rs == 0 and rows % tile == 0
            for split in layer.splits(even, tile, channels):
                estimate = _shared_estimate(layer, (rg, ccg, cg, rs), weights, staged, smem_rows, tile, split)
                yield ConvPlan(layer.oh, layer.ow, rg, cg, tile, estimate, rs, smem_rows, ccg, split)


def _shared_estimate(layer: _Layer, cut: tuple[int, int, int, int], weights: int, staged: int, smem_rows: int,
                     tile: int, split: bool) -> int:
    """The estimated cycles of a cluster-shared cut (``conv_plans``): row groups, clusters' channel groups,
    a cluster's channel groups, sub-rows; a core's ``weights`` bytes, ``staged`` in SMEM or not."""
    p, (rg, ccg, cg, rs) = layer.p, cut
    per_cluster, clusters = p["CORES_PER_CLUSTER"], rg * ccg
    channels, share = layer.cout // (ccg * cg), math.ceil(layer.oh / rg)
    smem_tiles, rows = math.ceil(share / smem_rows), math.ceil(smem_rows / rs)
    steps = smem_tiles * math.ceil(rows / tile)
    step = layer.conv_cycles(tile, channels) + (layer.split_cycles(tile, channels) if split else 0.0)
    first = layer.gmem(clusters * layer.input_bytes(smem_rows))   # every cluster's first SMEM tile
    fill = layer.gmem(clusters * layer.new_input_bytes(smem_rows))   # and each later one
    nmem = layer.smem(per_cluster * layer.in_rows(tile) * layer.row_bytes)   # a step's NMEM fills
    wmem = layer.smem(per_cluster * weights) if staged else 0.0
    card = staged and rg > 1 and ccg == 1 and layer.card   # loaded once, a part per cluster, sent on
    loaded = layer.weight_bytes if card else \
        rg * layer.weight_bytes if staged else clusters * per_cluster * weights
    # a card fill: each cluster's SMEM port takes its part in, sends it to the others and takes theirs in
    sent = layer.smem(layer.weight_bytes * (2 * rg - 1) / rg) if card else 0.0
    # the first SMEM tile crosses the GMEM port while the cores copy their weights into WMEM (``hoist_fill``),
    # and while they send them, where they are card filled
    startup = layer.gmem(loaded) + max(sent + wmem, first) if card else \
        layer.gmem(loaded) + max(wmem, first)
    startup += nmem + p["GMEM_LATENCY"] + p["SMEM_LATENCY"]
    if split:   # the weights stream in by kernel rows: from SMEM where the cluster stages them (what the
        # first tile's fill does not hide), else GMEM
        startup -= layer.streamed(max(0.0, wmem - first) if staged else layer.gmem(loaded), step)
    if rows <= tile and smem_tiles > 1:
        startup += fill   # a core's one NMEM tile per SMEM tile: the second SMEM tile before the first conv
    waits = (smem_tiles - 1) * (max(0.0, fill - step) + p["BARRIER_LATENCY"]) + steps * max(0.0, nmem - step)
    traffic = loaded if staged else rg * layer.weight_bytes * rs
    traffic += _output_bytes(layer) + \
        clusters * (layer.input_bytes(smem_rows) + (smem_tiles - 1) * layer.new_input_bytes(smem_rows))
    queue = steps * (p["SMEM_LATENCY"] + layer.smem(layer.in_rows(tile) * layer.row_bytes) +
                     p["GMEM_LATENCY"] + layer.gmem(tile * _output_row_bytes(layer, channels))) + \
        smem_tiles * (p["GMEM_LATENCY"] + layer.gmem(layer.new_input_bytes(smem_rows) / per_cluster))
    drain = clusters * per_cluster * tile * _output_row_bytes(layer, channels)
    return _pipelined(layer, startup, steps, step, waits, traffic, queue, drain)


def card_shared(sub_rows: int, row_groups: int, cluster_groups: int, card: bool) -> bool:
    """Whether a cluster-shared cut stages its weights in SMEM: where several of a cluster's cores compute
    the same channels (``sub_rows`` > 1), or where every cluster needs the same weights (``row_groups`` > 1
    clusters of one channel group) and the spec can send them between clusters (``card``: ``share_card``
    then loads them through GMEM once)."""
    return sub_rows > 1 or (card and row_groups > 1 and cluster_groups == 1)


def sub_rows_fit(oh: int, clusters: int, smem_rows: int, sub_rows: int) -> bool:
    """Whether every SMEM tile of every cluster either has rows for all ``sub_rows`` cores of a channel group
    or for none, but the last of several tiles of the last cluster (a layer's odd last rows): a core with
    nothing to do in another tile its cluster's other cores compute would part from them in a way that leaves
    the cluster filling the tile a different number of times per core (a core idle in the pipeline's last
    tile only leaves the pipeline there, after its last fill)."""
    share, per_core = math.ceil(oh / clusters), math.ceil(smem_rows / sub_rows)
    tiles = math.ceil(share / smem_rows)
    for q in range(clusters):
        for ys in range(tiles):
            rows = min(smem_rows, share - ys * smem_rows, oh - q * share - ys * smem_rows)
            last = q == clusters - 1 and ys == tiles - 1 and tiles > 1
            if 0 < rows <= (sub_rows - 1) * per_core and not last:
                return False
    return True


def rows_covered(plan: ConvPlan) -> int:
    """Output rows the loops of the cluster-shared form cover: whole SMEM tiles in every cluster."""
    share = math.ceil(plan.oh / plan.row_groups)
    return (plan.row_groups - 1) * share + math.ceil(share / plan.smem_rows) * plan.smem_rows


def _output_bytes(layer: _Layer) -> int:
    return layer.oh * layer.ow * layer.cout * layer.out_itemsize


