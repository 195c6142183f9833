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

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

import isa
from compiler import ops, te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ops import nn
from compiler.ops.diannao_conv_plans import (  # noqa: F401 (API)
    ConvPlan,
    card_shared,
    conv_plan,
    conv_plans,
    rows_covered,
)
from compiler.ops.diannao_tiles import (
    constant_vector,
    fill_constants,
    flat_plan,
    flat_tiles,
    lanes_of,
    mark_intrin,
)
from compiler.ops.diannao_vector import constants_of, vector_choose
from compiler.ops.elementwise import cover_stages, flatten
from compiler.passes.cover import Cover, Selected, Step, in_place, key, strip_noop_casts
from compiler.passes.double_buffer import can_double_buffer
from compiler.passes.share_card import cluster_copy
from compiler.passes.tensorize import SCALAR_MARK
from compiler.schedule import Schedule, create_schedule

BINARY = {"add": ops.add, "sub": ops.sub, "mul": ops.mul, "maximum": ops.maximum}
#: The loops of a conv schedule that split the layer over cores (row groups, a cluster's sub-rows, channel
#: groups, the clusters' channel groups): fused into the core and cluster axes to run, apart in the
#: ``analysis`` form.
CORE_LOOPS = ("rg", "sub", "cg", "ccg")
UNARY = {"relu": ops.relu}


@dataclass(frozen=True)
class DiannaoSchedule:
    """A schedule with its argument tensors (inputs, then the output), the tile it chose, and the record of
    each cover it chose (an element-wise operator's: ``compiler.passes.explain`` reads them)."""

    schedule: Schedule
    args: tuple[te.Tensor, ...]
    cores: int
    tile: int
    selection: tuple[Selected, ...] = ()


def tile_elements(elements_per_core: int, buffers: int, itemsize: int, spec: isa.ISA) -> int:
    """The tile (elements) that fits ``buffers`` NMEM buffers, balanced over the tiles of a core's share and
    rounded up to the vector unit's element multiple (VECTOR_ELEMS) unless that would exceed the share."""
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
                tile: int | None = None, *, spec: isa.ISA) -> DiannaoSchedule:
    """``op`` (add, sub, mul, maximum, relu) over ``shape``: per core, tiles copied GMEM -> NMEM, one vector
    instruction per tile, and the result copied back; relu computes in place in its output tile.

    ``tile`` (elements) defaults to ``tile_elements``; a tile is never larger than a core's share."""
    if op not in BINARY and op not in UNARY:
        raise ScheduleError(f"DianNao element-wise: unknown op {op!r}; expected one of "
                            f"{', '.join([*BINARY, *UNARY])}")
    n = math.prod(shape)
    inputs = tuple(te.placeholder((n,), dtype, name=x) for x in ("A", "B")[: 1 if op in UNARY else 2])
    out = UNARY[op](inputs[0]) if op in UNARY else BINARY[op](*inputs)
    return _tiled(inputs, out, op, cores, tile, spec, stage_inputs=op in BINARY)


def elementwise_of(inputs: tuple[te.Tensor, ...], out: te.Tensor, cores: int = 16, tile: int | None = None,
                   *, spec: isa.ISA) -> DiannaoSchedule:
    """A user's element-wise operator: ``out`` computed from the placeholders ``inputs``, each read at the
    output's own index (any shape; constants, the index itself and element-wise stages between them may
    appear too). Scheduled on the flat view (``elementwise.flatten``: the kernel's parameters are 1-D
    versions of ``inputs`` and ``out``), per core and tile: the expression covered by the spec's vector
    instructions with the fewest cycles (``compiler.ops.diannao_vector``), judged on a tile of whole vectors
    (where a core's share is not, preprocessing extends the tile's vector steps). One instruction: as
    ``elementwise`` (the inputs of a binary or wider operator staged into NMEM, a unary one read into its
    output tile so that an in-place instruction computes it there). Several: the inputs staged into NMEM,
    each step a stage of its own NMEM tile (``inplace`` folds a step into the tile it reads when that
    dies), the last copied back; an operation no instruction computes is a scalar step, marked with the
    reason. ScheduleError says why another operator is not element-wise."""
    flat_inputs, flat_out = flatten(inputs, out, f"DianNao operator {out.name}")
    n = flat_out.shape[0]
    share = math.ceil(n / max(cores, 1))
    itemsize = max(t.dtype.bits // 8 for t in (*flat_inputs, flat_out))
    axis = [iv.var for iv in flat_out.op.axis]
    body = strip_noop_casts(flat_out.op.body)
    # the cover's tile: whole vectors, as preprocessing extends a tile's vector steps (seed 001's
    # AddExtraCompute) where a core's share is no whole number of them
    vec = spec.params["VECTOR_ELEMS"]
    estimate = -(-(tile or tile_elements(share, len(flat_inputs) + 1, itemsize, spec)) // vec) * vec
    where = f"DianNao operator {out.name}"
    selected = vector_choose(body, spec, estimate, where)
    chosen = selected.chosen
    if tile is None and n % lanes_of(spec) == 0 and any(x.scalar for x in chosen.steps):
        filled = vector_choose(body, spec, estimate, where, constants=True)   # constants as filled vectors
        if constants_of(filled.chosen) and not any(x.scalar for x in filled.chosen.steps):
            sched = _with_constants(flat_inputs, flat_out, filled.chosen, cores, spec)
            return dataclasses.replace(sched, selection=(filled,))
    if len(chosen.steps) <= 1:
        step = chosen.steps[0] if chosen.steps else None
        instr = spec.instructions[step.instruction] if step is not None and not step.scalar else None
        # an in-place instruction (relu) computes in the output tile the input is read into; others read NMEM
        staged = not in_place(instr) if instr is not None else len(flat_inputs) > 1
        sched = _tiled(flat_inputs, flat_out, instr.name if instr else out.name, cores, tile, spec, staged)
    else:
        stages = cover_stages(chosen, axis, flat_out.shape)
        copy = te.compute(flat_out.shape, lambda i: ir.cast(stages[-1][i], flat_out.dtype),
                          name=flat_out.name)
        marks = [_mark_of(step) for step in chosen.steps]
        sched = _tiled_stages(flat_inputs, stages, marks, copy, cores, tile, spec)
    return dataclasses.replace(sched, selection=(selected,))


def covered(inputs: tuple[te.Tensor, ...], out: te.Tensor, cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """A network operator's element-wise ``out`` (1-D) over ``inputs``: its cheapest cover by the spec's
    vector instructions, constants as vectors filled once per core (``_with_constants``); ScheduleError
    names an operation no vector instruction computes."""
    selected = vector_choose(strip_noop_casts(out.op.body), spec, lanes_of(spec), f"DianNao {out.name}",
                             constants=True)
    scalar = [step.reason for step in selected.chosen.steps if step.scalar]
    if scalar:
        raise ScheduleError(f"DianNao {out.name}: {scalar[0]}")
    sched = _with_constants(inputs, out, selected.chosen, cores, spec)
    return dataclasses.replace(sched, selection=(selected,))


def _with_constants(inputs: tuple[te.Tensor, ...], out: te.Tensor, chosen: Cover, cores: int,
                    spec: isa.ISA) -> DiannaoSchedule:
    """The element-wise schedule of a cover whose instructions read constants: each constant a vector of a
    tile's length filled once per core (``diannao_tiles.fill_constants``), the tiles dividing each core's
    share (``flat_plan``, so that element i of a tile is ``i % tile``), the inputs staged into NMEM, each step
    a marked stage, the last copied back."""
    lanes = lanes_of(spec)
    values = constants_of(chosen)
    itemsize = max(t.dtype.bits // 8 for t in (*inputs, out))
    cores, tile = flat_plan(out.shape[0], len(inputs) + len(chosen.steps) + len(values) + 1, itemsize, cores,
                            spec)   # a buffer per input, step and constant, and a spare (the seeds)
    vectors = [constant_vector(c.value, tile, lanes, f"c{k}", c.dtype.name) for k, c in enumerate(values)]
    leaves = {key(c): (lambda i, v=v[-1]: v[i % tile]) for c, v in zip(values, vectors, strict=True)}
    stages = cover_stages(chosen, [iv.var for iv in out.op.axis], out.shape, leaves)
    copy = te.compute(out.shape, lambda i: ir.cast(stages[-1][i], out.dtype), name=out.name)
    s = create_schedule(copy)
    readers = {x: [t for t in stages if x in t.op.input_tensors] for x in inputs}
    staged = [s.cache_read(x, "nmem", readers[x]) for x in inputs if readers[x]]
    core, outer, inner = flat_tiles(s, copy, cores, tile, lanes)
    fill_constants(s, vectors, s[copy], core)
    for t in (*staged, *stages):
        s[t].compute_at(s[copy], outer)
    for t in staged:
        mark_intrin(s[t], s[t].op.axis[0], "copy")
    for t, step in zip(stages, chosen.steps, strict=True):
        s[t].set_scope("nmem")
        mark_intrin(s[t], s[t].op.axis[0], _mark_of(step))
    mark_intrin(s[copy], inner, "copy")
    return DiannaoSchedule(s, (*inputs, copy), cores, tile)


def _mark_of(step: Step) -> str:
    """A step's mark: its instruction, or ``scalar: <why>`` (``tensorize`` leaves it scalar, ``unmatched``
    says why)."""
    return f"{SCALAR_MARK}{step.reason}" if step.scalar else step.instruction


def _tiled_stages(inputs: tuple[te.Tensor, ...], stages: tuple[te.Tensor, ...], marks: list[str],
                  out: te.Tensor, cores: int, tile: int | None, spec: isa.ISA) -> DiannaoSchedule:
    """The element-wise schedule of several stages: per core and tile, the inputs staged into NMEM, each
    stage computed in an NMEM tile of its own and marked, the last stage copied back to ``out``."""
    n = out.shape[0]
    s = create_schedule(out)
    itemsize = max(t.dtype.bits // 8 for t in (*inputs, *stages, out))
    share = math.ceil(n / cores)
    tile = min(tile, share) if tile else tile_elements(share, len(inputs) + len(stages), itemsize, spec)
    readers = {x: [t for t in stages if x in t.op.input_tensors] for x in inputs}
    staged = [s.cache_read(x, "nmem", readers[x]) for x in inputs if readers[x]]
    core, rest = s[out].split(out.op.axis[0], nparts=cores, names=("core", "rest"))
    outer, inner = s[out].split(rest, factor=tile, names=("tile", "e"))
    s[out].bind(core, te.thread_axis("core", name="tid"))
    for t in (*staged, *stages):
        s[t].compute_at(s[out], outer)
    for t in staged:
        s[t].pragma(s[t].op.axis[0], "intrin", "copy")
    for t, mark in zip(stages, marks, strict=True):
        s[t].set_scope("nmem")
        s[t].pragma(s[t].op.axis[0], "intrin", mark)
    s[out].pragma(inner, "intrin", "copy")
    return DiannaoSchedule(s, (*inputs, out), cores, tile)


def _tiled(inputs: tuple[te.Tensor, ...], out: te.Tensor, mark: str, cores: int, tile: int | None,
           spec: isa.ISA, stage_inputs: bool) -> DiannaoSchedule:
    """The element-wise schedule of a 1-D ``out``: per core, tiles of the inputs copied GMEM -> NMEM (when
    ``stage_inputs``; else the compute reads GMEM into its NMEM output tile), the compute marked ``mark``,
    and the result copied back."""
    if not 1 <= cores:
        raise ScheduleError(f"DianNao element-wise: expected at least one core, but got {cores}")
    n = out.shape[0]
    s = create_schedule(out)
    # the widest element any NMEM buffer holds (an int8 output of int32 inputs stages 4-byte elements)
    itemsize = max(t.dtype.bits // 8 for t in (*(inputs if stage_inputs else ()), out))
    share = math.ceil(n / cores)
    buffers = len(inputs) + 1 if stage_inputs else 1
    tile = min(tile, share) if tile else tile_elements(share, buffers, itemsize, spec)
    read = out.op.input_tensors
    staged = [s.cache_read(x, "nmem", [out]) for x in inputs if x in read] if stage_inputs else []
    local = s.cache_write(out, "nmem")
    core, rest = s[out].split(out.op.axis[0], nparts=cores, names=("core", "rest"))
    outer, inner = s[out].split(rest, factor=tile, names=("tile", "e"))
    s[out].bind(core, te.thread_axis("core", name="tid"))
    for t in (*staged, local):
        s[t].compute_at(s[out], outer)
    for t in staged:
        s[t].pragma(s[t].op.axis[0], "intrin", "copy")
    s[local].pragma(s[local].op.axis[0], "intrin", mark)
    s[out].pragma(inner, "intrin", "copy")
    return DiannaoSchedule(s, (*inputs, out), cores, tile)


# ------------------------------------------------------------------------------------------------ conv
def conv2d(h: int, w: int, cin: int, cout: int, k: int = 3, stride: int = 1, pad: int = 1,
           dtype: str = "float32", cores: int = 16, plan: ConvPlan | None = None, *,
           spec: isa.ISA, analysis: bool = False, relu: bool = False, bias: bool = False) -> DiannaoSchedule:
    """2-D convolution, input (h, w, cin) HWC, weights blocked (cout/CONV_BLOCK, k, k, cin, CONV_BLOCK) as the
    conv instruction reads them, output (oh, ow, cout) HWC.

    Each core (``conv_plan``) keeps its channel group's weights in WMEM, and walks its rows in tiles: the
    tile's input rows with their halo are staged in NMEM, one conv computes the tile, and its rows are
    copied out. In the private form the NMEM tile is filled from GMEM through the padding expression
    (preprocessing turns that copy into a zero-fill plus a strided copy of the interior). In the
    cluster-shared form the padded copy fills an SMEM tile of the cluster's rows instead (its region is the
    cluster's, as bound inference relaxes "smem" buffers over the core axis; ``share_smem`` lets one core
    fill it for all), and the NMEM tiles are copied from it. Sizes that do not divide leave guards for loop
    partitioning and preprocessing.

    ``analysis``: the same schedule with the cores' loops left apart and unbound (row groups, channel
    groups, and in the cluster-shared form the sub-rows): a form to analyse, as fusing them into the core
    axis leaves divisions by the group counts, which no polyhedral analysis reads; not a form to run.

    ``relu``: the epilogue max(out, 0), PolyDL's fusion (Algorithm 3) as the card does it: computed on each
    tile in NMEM right after the conv that finishes it (the reduction is one instruction) and before the
    tile is copied out, so the output crosses GMEM once. The stage reads the conv's NMEM tile at its own
    index, which the ``inplace`` pass turns into the tile itself: the in-place vector ``relu``.

    ``bias``: a per-output-channel bias ``B`` (cout values of the conv's accumulator type, an input between
    the weights and the output) added before the ReLU, the same way: each core copies its channels of ``B``
    into NMEM once, and each output tile, rows of the core's channels (HWC), gets them added by one cycle
    add (the spec's ``dst[r, c] = a[r, c] + b[c]``, Cambricon's ``__bang_cycle_add``), in place.
    """
    block = spec.params["CONV_BLOCK"]
    itemsize = np.dtype(dtype).itemsize
    plan = plan or conv_plan(h, w, cin, cout, k, stride, pad, itemsize, cores, spec)
    x, wb, xp, conv, b, biased, out, split = _conv_tensors(h, w, cin, cout, k, stride, pad, dtype, plan,
                                                           block, relu, bias)
    s = create_schedule(out)
    partials = split.partials if split else []
    reader = partials[0] if partials else conv   # the conv instruction(s)
    xs = s.cache_read(xp, "smem", [reader]) if plan.sub_rows else None
    xn = s.cache_read(xs if xs is not None else xp, "nmem", [reader])
    weights = split.wk if split else conv   # what reads the weights from GMEM (or SMEM)
    # a cluster's cores share them, or every cluster needs them (``share_card`` sends them between clusters)
    staged = plan.sub_rows and card_shared(plan.sub_rows, plan.row_groups, plan.cluster_groups,
                                          cluster_copy(spec) is not None)
    ws = s.cache_read(wb, "smem", [weights]) if staged else None
    if split:
        wn = split.wk
        s[wn].set_scope("wmem")
    else:
        wn = s.cache_read(ws if ws is not None else wb, "wmem", [conv])
    bn = s.cache_read(b, "nmem", [biased]) if bias else None
    if xp is not x:
        s[xp].compute_inline()
    local = s.cache_write(out, "nmem")   # the tile copied out: the conv's, or its epilogue's
    # both tile loops run as software pipelines where the spec has an asynchronous copy and a wait
    pipelined = can_double_buffer(spec, "memcpy")
    core, yt, yi = _core_loops(s, out, plan, xs, analysis, pipelined)
    if ws is not None:
        s[ws].compute_at(s[out], core)
    s[wn].compute_at(s[out], core)
    s[xn].compute_at(s[out], yt)
    # the stages on each tile in NMEM, in order: the conv (or its kernel rows' convs and their sum), the
    # bias's cycle add, the ReLU (the last one is ``local``, the tile copied out); each reads the one before
    # at its own index (``inplace`` folds them)
    convs = [(partials[0], "conv"), *((t, "add") for t in partials[1:])] if partials else [(conv, "conv")]
    stages = [*convs, *([(biased, "vcycadd")] if bias else []), *([(out, "relu")] if relu else [])]
    _mark_tile_stages(s, [(local if t is out else t, intrin) for t, intrin in stages], out, yt, partials)
    s[local].compute_at(s[out], yt)
    if bn is not None:
        s[bn].compute_at(s[out], core)
    for t in (x for x in (xs, xn, ws, wn, bn) if x is not None):
        if partials and t is wn:   # Wk: one copy per kernel row
            s[t].unroll(s[t].op.axis[0])
        s[t].pragma(s[t].op.axis[1 if partials and t is wn else 0], "intrin", "copy")
    s[out].pragma(yi, "intrin", "copy")
    if pipelined:
        s[out].pragma(yt, "double_buffer", 1)
    return DiannaoSchedule(s, (x, wb, *([b] if bias else []), out), plan.cores, plan.tile_rows)


def _mark_tile_stages(s: Schedule, stages: list[tuple[te.Tensor, str]], out: te.Tensor, yt: te.IterVar,
                      partials: list[te.Tensor]) -> None:
    """Compute each of ``conv2d``'s tile stages in NMEM at the tile loop ``yt`` (but the last, the tile copied
    out, which the caller places) and mark it for its instruction."""
    for stage, intrin in stages:
        if stage is not stages[-1][0]:
            s[stage].set_scope("nmem")
            s[stage].compute_at(s[out], yt)
        if intrin in ("relu", "add"):   # one vector: the tile
            s[stage].pragma(s[stage].fuse(*s[stage].op.axis), "intrin", intrin)
        elif partials and stage is partials[0]:   # one conv per kernel row, inside the row loop
            s[stage].pragma(s[stage].op.axis[1], "intrin", intrin)
            s[stage].unroll(s[stage].op.axis[0])
        else:   # the conv; the cycle add: rows of the core's channels, the bias's channels along each
            s[stage].pragma(s[stage].op.axis[0], "intrin", intrin)


def _conv_tensors(h: int, w: int, cin: int, cout: int, k: int, stride: int, pad: int, dtype: str,
                  plan: ConvPlan, block: int, relu: bool, bias: bool) -> tuple:
    """The tensors of ``conv2d``: the input X, the blocked weights Wb, the padded input (X when there is no
    padding), the conv Y, the bias B (None without ``bias``), the biased conv (Y without ``bias``), the
    output (the biased conv without ``relu``), and the conv by kernel rows (``_SplitConv``; None unless the
    plan's ``split_ky``)."""
    x = te.placeholder((h, w, cin), dtype, name="X")
    wb = te.placeholder((cout // block, k, k, cin, block), dtype, name="Wb")
    # the cluster-shared form's last SMEM tiles may cover rows past the layer's: pad below with zeros to the
    # last row they read, so that a tile is filled in full and a core may read all of it
    below = pad + max(0, (rows_covered(plan) - 1) * stride + k - (h + 2 * pad)) if plan.sub_rows else pad
    xp = nn.pad(x, (pad, pad, 0), (below, pad, 0), name="Xp") if pad or below else x
    acc = "int32" if np.dtype(dtype).kind == "i" else dtype  # qconv: i8/i16 products summed in i32
    split = _split_conv(xp, wb, k, stride, plan, acc) if plan.split_ky else None
    if split:
        conv = split.partials[-1]
    else:
        ky, kx = te.reduce_axis(k, name="ky"), te.reduce_axis(k, name="kx")
        ci = te.reduce_axis(cin, name="ci")

        def product(y, xx, co):
            a = ir.cast(xp[y * stride + ky, xx * stride + kx, ci], acc)
            return a * ir.cast(wb[co // block, ky, kx, ci, co % block], acc)

        conv = te.compute((plan.oh, plan.ow, cout),
                          lambda y, xx, co: te.sum(product(y, xx, co), axis=[ky, kx, ci]), name="Y")
    b = te.placeholder((cout,), acc, name="B") if bias else None
    biased = te.compute(conv.shape, lambda y, xx, co: conv[y, xx, co] + b[co], name="Yb") if bias else conv
    out = te.compute(conv.shape, lambda *i: ir.max_(biased[i], ir.const(0, acc)), name="Yr") \
        if relu else biased
    return x, wb, xp, conv, b, biased, out, split


@dataclass(frozen=True)
class _SplitConv:
    """A conv by kernel rows: the weights in kernel-row-major order (``wk``), the partial convs ``P`` and the
    running sums of its rows (``partials``: P, P + P[1], ..., the last one the conv)."""

    wk: te.Tensor
    partials: list[te.Tensor]


def _split_conv(xp: te.Tensor, wb: te.Tensor, k: int, stride: int, plan: ConvPlan, acc: str) -> _SplitConv:
    """The conv as the sum of one partial conv per kernel row: ``P[r] = conv(rows r.., Wk[r])`` with the
    weights in kernel-row-major order ``Wk[r, b, 0, kx, ci, j] = Wb[b, r, kx, ci, j]`` (each row's weights of
    every block contiguous, so a core can start on row 0's before the rest arrive);
    ``Y = P[0] + P[1] + ...``."""
    nb, _, _, cin, block = wb.shape
    wk = te.compute((k, nb, 1, k, cin, block), lambda r, b, z, kx, ci, j: wb[b, r + z, kx, ci, j], name="Wk")
    z, kx, ci = te.reduce_axis(1, name="ky"), te.reduce_axis(k, name="kx"), te.reduce_axis(cin, name="ci")

    def product(r, y, xx, co):
        a = ir.cast(xp[y * stride + r + z, xx * stride + kx, ci], acc)
        return a * ir.cast(wk[r, co // block, z, kx, ci, co % block], acc)

    p = te.compute((k, plan.oh, plan.ow, nb * block),
                   lambda r, y, xx, co: te.sum(product(r, y, xx, co), axis=[z, kx, ci]), name="P")
    partials = [p]
    for r in range(1, k):
        partials.append(_plus_row(partials[-1], p, r))
    return _SplitConv(wk, partials)


def _plus_row(total: te.Tensor, p: te.Tensor, r: int) -> te.Tensor:
    """``total + P[r]`` (``total`` is ``P`` itself for its row 0)."""
    first = total is p
    return te.compute(p.shape[1:], lambda y, xx, co: (p[0, y, xx, co] if first else total[y, xx, co])
                      + p[r, y, xx, co], name=f"P0{r}")


def _core_loops(s: Schedule, out: te.Tensor, plan: ConvPlan, xs: te.Tensor | None,
                analysis: bool, pipelined: bool) -> tuple[te.IterVar, te.IterVar, te.IterVar]:
    """Split ``conv2d``'s output rows over row groups (and in the cluster-shared form, ``xs`` its SMEM copy,
    over SMEM tiles and sub-rows) and its channels over channel groups, then the rows into tiles; fuse the
    groups into the core axis and bind it (left apart and unbound for ``analysis``); with ``pipelined``, the
    SMEM tile loop is marked ``double_buffer``. Returns the core loop
    and the tile's outer and inner row loops."""
    y, xx, co = out.op.axis
    rg, yin = s[out].split(y, nparts=plan.row_groups, names=(CORE_LOOPS[0], "yin"))
    if plan.cluster_groups > 1:   # the clusters' channel groups, then each cluster's cores'
        ccg, co = s[out].split(co, nparts=plan.cluster_groups, names=(CORE_LOOPS[3], "cco"))
    cg, coin = s[out].split(co, nparts=plan.cout_groups, names=(CORE_LOOPS[2], "coin"))
    if xs is None:
        yt, yi = s[out].split(yin, factor=plan.tile_rows, names=("yt", "yi"))
        s[out].reorder(rg, cg, yt, yi, xx, coin)
        core = cg if analysis else s[out].fuse(rg, cg)
    else:
        ys, ysi = s[out].split(yin, factor=plan.smem_rows, names=("ys", "ysi"))
        sub, yr = s[out].split(ysi, nparts=plan.sub_rows, names=(CORE_LOOPS[1], "yr"))
        yt, yi = s[out].split(yr, factor=plan.tile_rows, names=("yt", "yi"))
        clusters = (rg, ccg) if plan.cluster_groups > 1 else (rg,)
        s[out].reorder(*clusters, sub, cg, ys, yt, yi, xx, coin)
        core = cg if analysis else s[out].fuse(sub, cg)
        if not analysis:
            cluster = s[out].fuse(*clusters) if len(clusters) > 1 else rg
            s[out].bind(cluster, te.thread_axis("cluster", name="cl"))
        s[xs].compute_at(s[out], ys)
        if pipelined:
            s[out].pragma(ys, "double_buffer", 1)
    if not analysis:
        s[out].bind(core, te.thread_axis("core", name="tid"))
    return core, yt, yi


def block_weights(w: np.ndarray, block: int = 16) -> np.ndarray:
    """Conv weights (KH, KW, CI, CO) or matmul weights (K, N) in the layout the conv and matmul instructions
    read from WMEM: blocks of ``block`` (CONV_BLOCK) output channels, [CO // block, KH, KW, CI, block] or
    [N // block, K, block]."""
    co = w.shape[-1]
    return np.ascontiguousarray(np.moveaxis(w.reshape(*w.shape[:-1], co // block, block), -2, 0))
