"""Default schedules for the DianNao target (seed 001 Sec. IV-A and V): split the work across the cores of
the card, tile each core's share by the capacity of its neuron memory, stage tiles through NMEM with marked
copies, and mark the compute for a vector instruction.

An element-wise operator over a contiguous tensor computes the same on its flat view, so the schedules work
on one dimension of ``prod(shape)`` elements: each of ``cores`` cores takes a contiguous share (``split
nparts``), which it walks in tiles (``split factor``). When the sizes do not divide, lowering leaves guards:
loop partitioning and preprocessing are what make the result tensorizable.

Marks name instructions loosely on purpose: a copy is marked ``"copy"`` and an add ``"add"``; the
instruction that matches is found from the isa/ semantics (``compiler.passes.tensorize``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import isa
from compiler import ops, te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ops import nn
from compiler.schedule import Schedule, create_schedule

BINARY = {"add": ops.add, "sub": ops.sub, "mul": ops.mul, "maximum": ops.maximum}
UNARY = {"relu": ops.relu}


@dataclass(frozen=True)
class DiannaoSchedule:
    """A schedule with its argument tensors (inputs, then the output) and the tile it chose."""

    schedule: Schedule
    args: tuple[te.Tensor, ...]
    cores: int
    tile: int


def tile_elements(elements_per_core: int, buffers: int, itemsize: int, spec: isa.ISA | None = None) -> int:
    """The tile (elements) that fits ``buffers`` NMEM buffers, balanced over the tiles of a core's share and
    rounded up to the vector unit's element multiple (VECTOR_ELEMS) unless that would exceed the share."""
    spec = spec or isa.load_isa("diannao")
    vec = spec.params["VECTOR_ELEMS"]
    align = spec.params["VECTOR_ALIGN"]
    per_buffer = spec.params["NMEM_BYTES"] // buffers // align * align
    max_tile = per_buffer // itemsize // vec * vec
    if max_tile < vec:
        raise ScheduleError(f"DianNao: {buffers} buffers of {vec} elements do not fit NMEM")
    tiles = math.ceil(elements_per_core / max_tile)
    rounded = math.ceil(math.ceil(elements_per_core / tiles) / vec) * vec
    return min(max_tile, rounded, elements_per_core)  # a tile never spans two cores' shares


def elementwise(op: str, shape: tuple[int, ...], dtype: str = "float32", cores: int = 16,
                tile: int | None = None) -> DiannaoSchedule:
    """``op`` (add, sub, mul, maximum, relu) over ``shape``: per core, tiles copied GMEM -> NMEM, one vector
    instruction per tile, and the result copied back; relu computes in place in its output tile.

    ``tile`` (elements) defaults to ``tile_elements``; a tile is never larger than a core's share."""
    if op not in BINARY and op not in UNARY:
        raise ScheduleError(f"DianNao element-wise: unknown op {op!r}; expected one of "
                            f"{', '.join([*BINARY, *UNARY])}")
    if not 1 <= cores:
        raise ScheduleError(f"DianNao element-wise: expected at least one core, but got {cores}")
    n = math.prod(shape)
    inputs = tuple(te.placeholder((n,), dtype, name=x) for x in ("A", "B")[: 1 if op in UNARY else 2])
    out = UNARY[op](inputs[0]) if op in UNARY else BINARY[op](*inputs)
    s = create_schedule(out)
    itemsize = out.dtype.bits // 8
    share = math.ceil(n / cores)
    buffers = len(inputs) + 1 if op in BINARY else 1
    tile = min(tile, share) if tile else tile_elements(share, buffers, itemsize)
    staged = [s.cache_read(x, "nmem", [out]) for x in inputs] if op in BINARY else []
    local = s.cache_write(out, "nmem")
    core, rest = s[out].split(out.op.axis[0], nparts=cores, names=("core", "rest"))
    outer, inner = s[out].split(rest, factor=tile, names=("tile", "e"))
    s[out].bind(core, te.thread_axis("core", name="tid"))
    for t in (*staged, local):
        s[t].compute_at(s[out], outer)
    for t in staged:
        s[t].pragma(s[t].op.axis[0], "intrin", "copy")
    s[local].pragma(s[local].op.axis[0], "intrin", op)
    s[out].pragma(inner, "intrin", "copy")
    return DiannaoSchedule(s, (*inputs, out), cores, tile)


# ------------------------------------------------------------------------------------------------ conv
@dataclass(frozen=True)
class ConvPlan:
    """How a conv layer is cut: ``row_groups`` x ``cout_groups`` cores (a core computes the output rows of its
    row group for the output channels of its channel group), ``tile_rows`` output rows per NMEM tile."""

    oh: int
    ow: int
    row_groups: int
    cout_groups: int
    tile_rows: int
    estimate: int  # cycles: the tensor unit's for one core's share plus the GMEM traffic's


def conv_plan(h: int, w: int, cin: int, cout: int, k: int, stride: int, pad: int, itemsize: int, cores: int,
              spec: isa.ISA | None = None) -> ConvPlan:
    """The cut with the fewest estimated cycles: per core, the tensor unit's cycles for its share plus the
    card's GMEM traffic (each row group reads its channel groups' weights, each channel group its row
    groups' input rows with their halo) at one DMA stream's rate. Cuts use at most ``cores`` cores, a
    number the card can launch (up to a cluster, or whole clusters), and leave no row group empty (an
    empty group's guards would depend on the core in ways loop partitioning cannot split in three
    pieces). ScheduleError names what cannot fit."""
    spec = spec or isa.load_isa("diannao")
    p = spec.params
    block = p["CONV_BLOCK"]
    if min(h, w, cin, cout, k, stride, cores) < 1 or pad < 0:
        raise ScheduleError(f"DianNao conv: expected positive sizes and pad >= 0, but got h={h}, w={w}, "
                            f"cin={cin}, cout={cout}, k={k}, stride={stride}, pad={pad}, cores={cores}")
    if cout % block:
        raise ScheduleError(f"DianNao conv: cout = {cout} is not a multiple of CONV_BLOCK = {block}")
    hp, wp = h + 2 * pad, w + 2 * pad
    if k > min(hp, wp):
        raise ScheduleError(f"DianNao conv: a {k}x{k} kernel does not fit the padded {hp}x{wp} input")
    oh, ow = (hp - k) // stride + 1, (wp - k) // stride + 1
    best: ConvPlan | None = None
    per_cluster = p["CORES_PER_CLUSTER"]
    max_rows = (1 << spec.instruction("conv").field("h").bits) - 1   # input rows one conv can take
    splits = [(rg, cg) for cg in range(1, cout // block + 1) if (cout // block) % cg == 0
              for rg in range(1, oh + 1)
              if (rg * cg <= min(cores, per_cluster) or (rg * cg <= cores and rg * cg % per_cluster == 0))
              and math.ceil(oh / rg) * (rg - 1) < oh]   # a launchable core count, no row group empty
    for rg, cg in splits:
        co = cout // cg
        if k * k * cin * co * itemsize > p["WMEM_BYTES"]:
            continue
        share = math.ceil(oh / rg)
        tile = _conv_tile_rows(share, stride, k, wp, cin, ow, co, itemsize, p, max_rows)
        if tile is None:
            continue
        weights = k * k * cin * cout * itemsize
        input_rows = rg * math.ceil(share / tile) * ((tile - 1) * stride + k)   # each tile with its halo
        traffic = rg * weights + cg * input_rows * w * cin * itemsize + oh * ow * cout * itemsize
        macs = share * ow * co * k * k * cin
        estimate = math.ceil(macs * itemsize / (2 * p["TFU_MACS_PER_CYCLE"])) + \
            math.ceil(traffic / p["DMA_GMEM_BYTES_PER_CYCLE"])
        if best is None or estimate < best.estimate:
            best = ConvPlan(oh, ow, rg, cg, tile, estimate)
    if best is None:
        raise ScheduleError(f"DianNao conv: no split of {cores} cores fits the weights "
                            f"({k}x{k}x{cin}x{cout}) in WMEM and a tile of output rows in NMEM")
    return best


def _conv_tile_rows(share: int, stride: int, k: int, wp: int, cin: int, ow: int, co: int, itemsize: int,
                    p, max_rows: int) -> int | None:
    """The most output rows (balanced over the tiles of a core's share) whose input rows and output fit NMEM
    (each buffer aligned, with a VECTOR_ELEMS grain of slack for zero-fill rounding)."""
    slack = p["VECTOR_ELEMS"] * itemsize + p["VECTOR_ALIGN"]

    def fits(rows: int) -> bool:
        in_rows = (rows - 1) * stride + k
        return in_rows <= max_rows and in_rows * wp * cin * itemsize + rows * ow * co * itemsize + 2 * slack \
            <= p["NMEM_BYTES"]

    if not fits(1):
        return None
    most = 1
    while most < share and fits(most + 1):
        most += 1
    tiles = math.ceil(share / most)
    return math.ceil(share / tiles)


def conv2d(h: int, w: int, cin: int, cout: int, k: int = 3, stride: int = 1, pad: int = 1,
           dtype: str = "float32", cores: int = 16, plan: ConvPlan | None = None) -> DiannaoSchedule:
    """2-D convolution, input (h, w, cin) HWC, weights blocked (cout/CONV_BLOCK, k, k, cin, CONV_BLOCK) as the
    conv instruction reads them, output (oh, ow, cout) HWC.

    Each core (``conv_plan``) keeps its channel group's weights in WMEM, and walks its row group in tiles:
    the tile's input rows with their halo are staged in NMEM through the padding expression (preprocessing
    turns that copy into a zero-fill plus a strided copy of the interior), one conv computes the tile, and
    its rows are copied out. Sizes that do not divide leave guards for loop partitioning and preprocessing.
    """
    spec = isa.load_isa("diannao")
    block = spec.params["CONV_BLOCK"]
    itemsize = np.dtype(dtype).itemsize
    plan = plan or conv_plan(h, w, cin, cout, k, stride, pad, itemsize, cores, spec)
    x = te.placeholder((h, w, cin), dtype, name="X")
    wb = te.placeholder((cout // block, k, k, cin, block), dtype, name="Wb")
    xp = nn.pad(x, (pad, pad, 0), name="Xp") if pad else x
    ky, kx, ci = te.reduce_axis(k, name="ky"), te.reduce_axis(k, name="kx"), te.reduce_axis(cin, name="ci")
    acc = "int32" if np.dtype(dtype).kind == "i" else dtype  # qconv: i8/i16 products summed in i32

    def product(y, xx, co):
        a = ir.cast(xp[y * stride + ky, xx * stride + kx, ci], acc)
        return a * ir.cast(wb[co // block, ky, kx, ci, co % block], acc)

    out = te.compute((plan.oh, plan.ow, cout),
                     lambda y, xx, co: te.sum(product(y, xx, co), axis=[ky, kx, ci]), name="Y")
    s = create_schedule(out)
    xn = s.cache_read(xp, "nmem", [out])
    wn = s.cache_read(wb, "wmem", [out])
    if pad:
        s[xp].compute_inline()
    local = s.cache_write(out, "nmem")
    y, xx, co = out.op.axis
    rg, yin = s[out].split(y, nparts=plan.row_groups, names=("rg", "yin"))
    cg, coin = s[out].split(co, nparts=plan.cout_groups, names=("cg", "coin"))
    yt, yi = s[out].split(yin, factor=plan.tile_rows, names=("yt", "yi"))
    s[out].reorder(rg, cg, yt, yi, xx, coin)
    core = s[out].fuse(rg, cg)
    s[out].bind(core, te.thread_axis("core", name="tid"))
    s[wn].compute_at(s[out], core)
    s[xn].compute_at(s[out], yt)
    s[local].compute_at(s[out], yt)
    for t in (xn, wn):
        s[t].pragma(s[t].op.axis[0], "intrin", "copy")
    s[local].pragma(s[local].op.axis[0], "intrin", "conv")
    s[out].pragma(yi, "intrin", "copy")
    return DiannaoSchedule(s, (x, wb, out), plan.row_groups * plan.cout_groups, plan.tile_rows)
