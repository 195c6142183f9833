"""Default schedules for the VITA target (TVM Sec. 3.4-3.5 and 5.3): int8 conv2d and dense in VTA's packed
layouts, tiled into the INP/WGT/ACC buffers, with the GEMM micro-op marked for tensorization, a shift+clip
epilogue in the accumulators and an optional virtual-thread binding.

Layouts (BATCH and BLOCK = BLOCK_IN = BLOCK_OUT of the ISA, 1 and 16 by default):

    conv2d  data   (1, IC/BLOCK, H, W, BATCH, BLOCK)           NCHW{BATCH}n{BLOCK}c: a batch of BATCH images
            kernel (OC/BLOCK, IC/BLOCK, K, K, BLOCK, BLOCK)    OIHW{BLOCK}o{BLOCK}i
            out    (1, OC/BLOCK, OH, OW, BATCH, BLOCK)  int8
    dense   data   (M/BATCH, K/BLOCK, BATCH, BLOCK)
            weight (N/BLOCK, K/BLOCK, BLOCK, BLOCK)
            out    (M/BATCH, N/BLOCK, BATCH, BLOCK)     int8

Channel counts that are not a multiple of BLOCK (a GEMM's M not a multiple of BATCH) are padded to it: the
layouts hold ceil(IC/BLOCK) blocks, the lanes past IC are zero, and the machine computes the extra output
lanes, which come out zero (seed 001 Algorithm 1, COM: harmless extra compute instead of guards VITA cannot
run). ``pack_conv``/``pack_dense`` and ``unpack_*`` are these layout transforms.

Both compute ``clip(sum(i32(data) * i32(weight)) >> shift, lo, 127)`` with ``lo = 0`` for relu, else
-128 (the shift is written ``floordiv(x, 2**shift)``, which is an arithmetic right shift). Stages:

- ``res`` (scope "acc"): the convolution, computed per output tile; for each chunk of ``ic_block`` input
  channel blocks the padded input rows are staged in "inp" and the kernel chunk in "wgt" (marked
  ``dma_copy``), then the GEMM nest runs over the tile (marked ``tensorize = "gemm"``);
- ``shr``, ``lo``, ``hi`` (scope "acc"): the epilogue, one ALU operation each (marked ``alu``); ``lo`` and
  ``hi`` are one stage, ``clip``, when the spec has an instruction that clips in one pass;
- ``out``: the tile copied to DRAM as int8 (marked ``dma_copy``).

``vthreads = n > 1`` splits the output channel blocks (or the output rows, ``vthread_axis="h"``) into n
parts bound to "vthread": ``inject_virtual_thread`` gives each part its own buffers and interleaves them,
so that the loads of one overlap the GEMM of the other (Sec. 3.5's latency hiding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import isa
from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, loads_in, substitute
from compiler.ops import nn, reference, vita_alu
from compiler.ops.elementwise import flatten
from compiler.ops.nn import ConvShape, round_up
from compiler.ops.vita_tiling import (  # noqa: F401  (the tiling API, re-exported: vita.Tiling, ...)
    MachineCosts,
    Tiling,
    batch_of,
    block_of,
    choose_tiling,
    estimate_cycles,
    loaded_rows,
    rank_tilings,
    shared_weights,
    strided_1x1,
    tile_fits,
    to_blocks,
    uneven,
)
from compiler.schedule import Schedule, create_schedule


@dataclass(frozen=True)
class VitaSchedule:
    """A schedule with its argument tensors (inputs, then the output), the tiling it uses, and the record
    of each cover it chose (the epilogue, an ALU operator: ``compiler.passes.explain`` reads them)."""

    schedule: Schedule
    args: tuple[te.Tensor, ...]
    tiling: Tiling
    selection: tuple[vita_alu.covering.Selected, ...] = ()


# --------------------------------------------------------------------------------------------------
# Operators


def _epilogue(res: te.Tensor, shift: int, bounds: tuple[int, int], spec: isa.ISA, uops: int,
              bias: te.Tensor | None = None) -> tuple[vita_alu.AluStages, te.Tensor]:
    """The epilogue stages in the accumulators, and the int8 cast: ``min(max((res + bias) >> shift, lo),
    hi)`` (the per-channel ``bias`` one accumulator tile per output channel block, the same for every
    pixel) covered by the spec's ALU instructions with the fewest cycles for ``uops`` tiles
    (``compiler.ops.vita_alu``: a shift and a clip, or a max and a min, or one fused instruction)."""
    _check_epilogue(shift, bounds)
    axis = [ir.Var(f"i{d}") for d in range(len(res.shape))]
    value = epilogue_expr(res[tuple(axis)], shift, bounds,
                          bias[axis[1], axis[-2], axis[-1]] if bias is not None else None)
    stages = vita_alu.alu_stages(value, axis, res.shape, spec, uops, "VITA epilogue")
    out = te.compute(res.shape, lambda *i: ir.cast(stages.result[i], "int8"), name="out")
    return stages, out


def _check_epilogue(shift: int, bounds: tuple[int, int]) -> None:
    if not 0 <= shift < 31:
        raise ScheduleError(f"VITA: shift must be in [0, 31), but got {shift}")
    lo, hi = bounds
    if not -128 <= lo <= hi <= 127:
        raise ScheduleError(f"VITA: the clip [{lo}, {hi}] must lie in int8's [-128, 127], which STORE_OUT "
                            f"keeps")


def epilogue_expr(acc: ir.Expr, shift: int, bounds: tuple[int, int], bias: ir.Expr | None = None) -> ir.Expr:
    """VTA's epilogue of one accumulator value: ``min(max((acc + bias) >> shift, lo), hi)``."""
    value = acc + bias if bias is not None else acc
    if shift:
        value = ir.FloorDiv(value, ir.const(1 << shift))
    return ir.Min(ir.Max(value, ir.const(bounds[0])), ir.const(bounds[1]))


def clip_bounds(relu: bool = False, bounds: tuple[int, int] | None = None) -> tuple[int, int]:
    """The epilogue's clip: ``bounds`` where given, else [0, 127] for relu and int8's range otherwise."""
    return bounds if bounds is not None else (0 if relu else -128, 127)


def epilogue_cover(spec: isa.ISA, relu: bool = False, bias: bool = False,
                   bounds: tuple[int, int] | None = None, shift: int = 8, uops: int = 16
                   ) -> vita_alu.covering.Cover:
    """The ALU instructions the epilogue takes per tile on ``spec`` (the cover ``_epilogue`` uses)."""
    batch, block = batch_of(spec), block_of(spec)
    acc = ir.Buffer("acc", (batch * block,), dtypes.int32, "acc")
    tile = ir.Buffer("bias", (batch * block,), dtypes.int32, "acc")
    i = ir.Var("i")
    value = epilogue_expr(acc[i], shift, clip_bounds(relu, bounds), tile[i] if bias else None)
    return vita_alu.alu_cover(value, spec, uops, "VITA epilogue")


def epilogue_ops(spec: isa.ISA, relu: bool = False, bias: bool = False,
                 bounds: tuple[int, int] | None = None) -> int:
    """How many ALU instructions the epilogue issues per tile (its cover's steps)."""
    return len(epilogue_cover(spec, relu, bias, bounds).steps)


def dense_shape(m: int, n: int, k: int, spec: isa.ISA) -> ConvShape:
    """The conv2d layer ``dense`` tiles: ceil(m / BATCH) rows (each a batch block of BATCH data rows) of one
    pixel, k input and n output channels rounded up to BLOCK, a 1 x 1 kernel. Tilings of a dense are ranked
    on this shape."""
    return to_blocks(ConvShape(-(-m // batch_of(spec)), 1, k, n, 1, 1, 0), spec)


def conv2d(layer: ConvShape, shift: int = 8, relu: bool = False, tiling: Tiling | None = None,
           vthreads: int = 0, *, spec: isa.ISA, bias: bool = False,
           bounds: tuple[int, int] | None = None) -> VitaSchedule:
    """int8 conv2d of ``layer`` in the packed layouts above, tiled by ``tiling`` (default
    ``choose_tiling(layer, vthreads)``) for the VITA machine that ``spec`` describes. With ``bias``, a third
    argument ``bias`` [OC/BLOCK, BATCH, BLOCK] int32 (``pack_bias``) is added to every pixel before the
    shift; ``bounds`` replaces the clip that ``relu`` chooses."""
    block, batch = block_of(spec), batch_of(spec)
    layer = to_blocks(layer, spec)
    if layer.n != batch:
        raise ScheduleError(f"VITA conv2d {layer}: the GEMM core multiplies BATCH = {batch} images at once; "
                            f"give a batch of n = {batch} images, not {layer.n}")
    t = tiling or choose_tiling(layer, vthreads, spec=spec, bias=bias)
    reason = tile_fits(layer, t, spec, bias)
    if reason is not None:
        raise ScheduleError(f"VITA conv2d {layer}: tiling {t} does not fit: {reason}")
    ic_b, oc_b = layer.ic // block, layer.oc // block
    partial = uneven(layer, t)
    if partial:
        raise ScheduleError(f"VITA conv2d {layer}: tiling {t}: {partial}")
    if ic_b % t.ic_block or oc_b % (t.oc_block * t.threads if t.vthread_axis == "oc" else t.oc_block):
        raise ScheduleError(f"VITA conv2d {layer}: tiling {t} does not divide the channel blocks "
                            f"(IC/{block} = {ic_b}, OC/{block} = {oc_b})")
    data = te.placeholder((1, ic_b, layer.h, layer.w, batch, block), "int8", name="data")
    kernel = te.placeholder((oc_b, ic_b, layer.k, layer.k, block, block), "int8", name="kernel")
    padded = nn.pad(data, (0, 0, layer.p, layer.p, 0, 0), name="pad") if layer.p else data
    ico, kh, kw, ici = (te.reduce_axis(ic_b, name="ic_o"), te.reduce_axis(layer.k, name="kh"),
                        te.reduce_axis(layer.k, name="kw"), te.reduce_axis(block, name="ic_i"))
    s_ = layer.s

    rows = _strided_rows(data, layer) if strided_1x1(layer) else None
    source, row_step = (rows, 1) if rows is not None else (padded, s_)

    def product(n, co, y, x, bi, ci):
        a = ir.cast(source[n, ico, y * row_step + kh, x * s_ + kw, bi, ici], "int32")
        return a * ir.cast(kernel[co, ico, kh, kw, ci, ici], "int32")

    res = te.compute((1, oc_b, layer.oh, layer.ow, batch, block),
                     lambda *i: te.sum(product(*i), axis=[ico, kh, kw, ici]), name="res")
    b = te.placeholder((oc_b, batch, block), "int32", name="bias") if bias else None
    epilogue, out = _epilogue(res, shift, clip_bounds(relu, bounds), spec, t.oc_block * t.rows * layer.ow, b)
    s = create_schedule(out)
    if padded is not data:
        s[padded].compute_inline()
    _schedule_tiles(s, res, epilogue, out, t, padded, kernel, spatial=(2, 3), bias=b, staged=rows,
                    shared=shared_weights(layer, t, spec))
    return VitaSchedule(s, (data, kernel, *([b] if b else []), out), t, (epilogue.selected,))


def _strided_rows(data: te.Tensor, layer: ConvShape) -> te.Tensor:
    """The input rows a 1 x 1 conv of stride S reads (every S-th), as a stage the schedule loads into INP
    with one DMA per chunk whose DRAM rows are S rows apart (LOAD_INP's row pitch): a stride-2 1 x 1 conv
    then loads half the input rows instead of all of them."""
    s = layer.s
    return te.compute((*data.shape[:2], layer.oh, *data.shape[3:]),
                      lambda n, c, y, x, b, i: data[n, c, y * s, x, b, i], name="rows")


def dense(m: int, n: int, k: int, shift: int = 8, relu: bool = False, tiling: Tiling | None = None,
          vthreads: int = 0, *, spec: isa.ISA, bias: bool = False,
          bounds: tuple[int, int] | None = None) -> VitaSchedule:
    """int8 dense ``out[m, n] = clip(sum_k data[m, k] * weight[n, k] (+ bias[n]) >> shift)`` in the packed
    layouts above: the conv2d of an m x 1 input with 1 x 1 kernels, tiled the same way (``bias`` and
    ``bounds`` as for ``conv2d``)."""
    block, batch = block_of(spec), batch_of(spec)
    layer = dense_shape(m, n, k, spec)
    m, n, k = layer.h * batch, layer.oc, layer.ic   # padded to the blocks
    t = tiling or choose_tiling(layer, vthreads, spec=spec, bias=bias)
    reason = tile_fits(layer, t, spec, bias)
    if reason is not None:
        raise ScheduleError(f"VITA dense {m}x{n}x{k}: tiling {t} does not fit: {reason}")
    kb, nb = k // block, n // block
    partial = uneven(layer, t)
    if partial or kb % t.ic_block or nb % (t.oc_block * t.threads if t.vthread_axis == "oc" else t.oc_block):
        raise ScheduleError(f"VITA dense {m}x{n}x{k}: tiling {t} does not divide the work: "
                            f"{partial or 'channel blocks'}")
    data = te.placeholder((m // batch, kb, batch, block), "int8", name="data")
    weight = te.placeholder((nb, kb, block, block), "int8", name="weight")
    ko, ki = te.reduce_axis(kb, name="k_o"), te.reduce_axis(block, name="k_i")
    res = te.compute((m // batch, nb, batch, block), lambda i, j, b, o: te.sum(
        ir.cast(data[i, ko, b, ki], "int32") * ir.cast(weight[j, ko, o, ki], "int32"), axis=[ko, ki]),
        name="res")
    b = te.placeholder((nb, batch, block), "int32", name="bias") if bias else None
    epilogue, out = _epilogue(res, shift, clip_bounds(relu, bounds), spec, t.oc_block * t.rows, b)
    s = create_schedule(out)
    _schedule_tiles(s, res, epilogue, out, t, data, weight, spatial=(0,), bias=b,
                    shared=shared_weights(layer, t, spec))
    return VitaSchedule(s, (data, weight, *([b] if b else []), out), t, (epilogue.selected,))


def elementwise(inputs: int, tiles: int, chunk: int, bounds: tuple[int, int], *, spec: isa.ISA
                ) -> VitaSchedule:
    """An element-wise network operator on VITA's ALU: ``inputs`` (1 or 2) int32 tensors of ``tiles``
    accumulator tiles each (``[tiles, BATCH, BLOCK_OUT]``; ``tiles`` a multiple of ``chunk``), summed when
    there are two, clipped to ``bounds`` (within int8's range) and stored as int8. Per chunk of tiles: each
    input loaded into the accumulators (LOAD_ACC), ``min(max(a + b, lo), hi)`` as the ALU instructions of
    its cheapest cover (``compiler.ops.vita_alu``: an add, then a clip or a max and a min), the store
    (STORE_OUT, which keeps the low 8 bits of values the clip leaves in int8's range). Residual add, ReLU
    and clip are these (TVM's VTA offloads the same operators to its ALU)."""
    batch, block = batch_of(spec), block_of(spec)
    lo, hi = bounds
    if not -128 <= lo <= hi <= 127:
        raise ScheduleError(f"VITA element-wise: the clip [{lo}, {hi}] must lie in int8's [-128, 127], "
                            f"which STORE_OUT keeps")
    if inputs not in (1, 2) or tiles < 1 or chunk < 1 or tiles % chunk:
        raise ScheduleError(f"VITA element-wise: {inputs} inputs of {tiles} tiles in chunks of {chunk}")
    args = [te.placeholder((tiles, batch, block), "int32", name=name) for name in ("a", "b")[:inputs]]
    axis = [ir.Var(f"i{d}") for d in range(3)]
    value = args[0][tuple(axis)] + args[1][tuple(axis)] if inputs == 2 else args[0][tuple(axis)]
    stages = vita_alu.alu_stages(ir.Min(ir.Max(value, ir.const(lo)), ir.const(hi)), axis, args[0].shape, spec,
                                 chunk, "VITA element-wise")
    out = te.compute(args[0].shape, lambda *i: ir.cast(stages.result[i], "int8"), name="out")
    return _alu_chunks(args, stages, out, chunk)


def _alu_chunks(args: list[te.Tensor], stages: vita_alu.AluStages, out: te.Tensor, chunk: int
                ) -> VitaSchedule:
    """The schedule of ALU ``stages`` over accumulator tiles: per ``chunk`` of ``out``'s tiles, each input
    loaded into the accumulators for the stages that read it (LOAD_ACC), every stage an ALU pass marked
    with its instruction, the int8 result stored."""
    s = create_schedule(out)
    for stage in stages.tensors:
        s[stage].set_scope("acc")
    readers = [t for t in (*stages.tensors, out) if isinstance(t.op, te.ComputeOp)]
    own = dict(zip(stages.tensors, stages.own_loads, strict=False))
    loaded = []
    for x in args:   # a stage that overwrites an input others read gets its own load of it
        alone = [t for t in readers if own.get(t) is x.buffer]
        shared = [t for t in readers if x in t.op.input_tensors and t not in alone]
        groups = ([shared] if shared else []) + [[t] for t in alone]
        loaded += [s.cache_read(x, "acc", group) for group in groups]
    outer, inner = s[out].split(out.op.axis[0], factor=chunk)
    for stage in (*loaded, *stages.tensors):
        s[stage].compute_at(s[out], outer)
    for stage in loaded:
        s[stage].pragma(s[stage].op.axis[0], "dma_copy")
    for stage, instruction in zip(stages.tensors, stages.instructions, strict=True):
        s[stage].pragma(s[stage].op.axis[0], "alu", instruction)
    s[out].pragma(inner, "dma_copy")
    return VitaSchedule(s, (*args, out), Tiling(rows=chunk, oc_block=1, ic_block=1), (stages.selected,))


def elementwise_of(inputs: tuple[te.Tensor, ...], out: te.Tensor, tiles: int, chunk: int, *,
                   spec: isa.ISA) -> VitaSchedule:
    """A user's element-wise operator on VITA's ALU: ``out`` (int8, any shape) computed from the int32
    placeholders ``inputs`` read at its own index. On the flat view (``elementwise.flatten``) padded to
    ``tiles`` accumulator tiles ``[tiles, BATCH, BLOCK_OUT]`` (a multiple of ``chunk``), per chunk: each
    input loaded into the accumulators (LOAD_ACC), the expression as the ALU instructions of its cheapest
    cover (``compiler.ops.vita_alu``: each ``dst = f(dst, src or imm)`` for whatever tree ``f`` the spec's
    ALU semantics describe; the ``inplace`` pass gives each its dead operand's tiles), the int8 result
    stored (STORE_OUT, which keeps the low 8 bits, as the cast does).
    ScheduleError names what is not element-wise, an input that is not int32, an output not int8, and an
    operation no ALU instruction of the spec computes."""
    where = f"VITA operator {out.name}"
    if out.dtype.name != "int8":
        raise ScheduleError(f"{where}: VITA's store writes int8 (STORE_OUT keeps 8 bits); end the operator "
                            f"with a cast to int8, not {out.dtype.name}")
    for t in inputs:
        if t.dtype.name != "int32":
            raise ScheduleError(f"{where}: input {t.name} is {t.dtype.name}; VITA's ALU loads int32 tiles "
                                f"into its accumulators (LOAD_ACC)")
    flat_inputs, flat_out = flatten(inputs, out, where)
    if tiles < 1 or chunk < 1 or tiles % chunk:
        raise ScheduleError(f"{where}: {tiles} tiles in chunks of {chunk}")
    batch, block = batch_of(spec), block_of(spec)
    shape = (tiles, batch, block)
    args = [te.placeholder(shape, "int32", name=t.name) for t in flat_inputs]
    by_buffer = {t.buffer: a for t, a in zip(flat_inputs, args, strict=True)}
    body = flat_out.op.body
    if not (isinstance(body, ir.Cast) and body.type.name == "int8"):
        body = ir.cast(body, "int8")   # an int8 constant or load: the store's own narrowing
    axis = [ir.Var(f"i{d}") for d in range(3)]
    value = _reading(body.value, by_buffer, axis)
    if not loads_in(value):
        raise ScheduleError(f"{where}: the output is the constant {value}; nothing to compute")
    stages = vita_alu.alu_stages(value, axis, shape, spec, chunk, where)
    result = stages.tensors[-1][tuple(axis)] if stages.tensors else value   # a load alone: the store narrows
    return _alu_chunks(args, stages, te.compute(shape, lambda *i: ir.cast(substitute(
        result, dict(zip(axis, i, strict=True))), "int8"), name="out"), chunk)


def _reading(e: ir.Expr, by_buffer: dict, axis: list[ir.Var]) -> ir.Expr:
    """``e`` with each load of a flat input read from its tiled placeholder at ``axis``."""

    class _Tiles(IRMutator):
        def mutate_Load(self, load: ir.Load) -> ir.Expr:
            if load.buffer in by_buffer:
                return by_buffer[load.buffer][tuple(axis)]
            return self.generic_mutate(load)

    return _Tiles().mutate(e)


@dataclass(frozen=True)
class IntegerMean:
    """How VITA's ALU divides a window's sum of ``count`` int8 values by ``count``, rounding half up, with
    no divide: ``offset`` (the smallest sum's distance from 0 plus count // 2, added in ``adds``
    immediates) makes the sum non-negative, a shift by ``pre_shift`` divides by count's power of two,
    ``mul`` and a shift by ``shift`` divide by its odd part (exact over the range: checked value by value),
    and ``low`` is added back. ``mean_steps`` finds it."""

    count: int
    adds: tuple[int, ...]
    pre_shift: int
    mul: int
    shift: int
    low: int


def mean_steps(count: int, low: int, high: int, imm_bits: int) -> IntegerMean:
    """The ``IntegerMean`` of ``count`` values in [low, high] with immediates of ``imm_bits`` signed bits:
    floor((v + count // 2) / count) for every sum v, in int32 arithmetic; ScheduleError when no multiplier
    that fits the immediate divides exactly."""
    imm_max = (1 << (imm_bits - 1)) - 1
    offset = -low * count + count // 2
    adds = tuple([imm_max] * (offset // imm_max) + ([offset % imm_max] if offset % imm_max else []))
    pre_shift = (count & -count).bit_length() - 1
    odd = count >> pre_shift
    top = (count * (high - low) + count // 2) >> pre_shift   # the largest value left after the pre-shift
    if top * count >= 2**31:
        raise ScheduleError(f"VITA average: the sums of {count} values overflow int32")
    values = np.arange(top + 1, dtype=np.int64)
    want = values // odd
    for shift in range(31):
        mul = -(-(1 << shift) // odd)
        if mul > imm_max or top * mul >= 2**31:
            break
        if np.array_equal((values * mul) >> shift, want):
            return IntegerMean(count, adds, pre_shift, mul, shift, low)
    raise ScheduleError(f"VITA average: no multiplier of at most {imm_max} (ALUOP_IMM_BIT_WIDTH) divides "
                        f"sums of {count} int8 values by {odd} exactly")


def pool(kind: str, blocks: int, h: int, w: int, window: tuple[int, int], s: int, rows: int, *,
         spec: isa.ISA) -> VitaSchedule:
    """A KH x KW ``kind`` ("max" or "avg") pool with stride S on VITA's ALU over int32 data
    ``[H, W, blocks, BATCH, BLOCK_OUT]`` (each tile BATCH x BLOCK_OUT channels of one pixel), ``rows``
    output rows at a time (dividing the output's): the input rows they need loaded once (LOAD_ACC), each
    output tile started at the window's first tap (GEMM_RESET, then ALU ADD: VITA's ALU has no move), the
    other taps ALU MAX (max) or ADD (avg) micro-ops whose source index walks the window; an average then
    divides by the window's size rounding half up (``mean_steps``: ALU ADD, SHR, MUL, SHR and ADD with
    immediates; its inputs are int8 values); then clipped to int8 and stored (``elementwise``'s end)."""
    batch, block = batch_of(spec), block_of(spec)
    kh, kw = window
    oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
    if kind not in ("max", "avg") or min(oh, ow) < 1 or rows < 1 or oh % rows:
        raise ScheduleError(f"VITA {kind}_pool: a {kh} x {kw} window, stride {s}, over {h} x {w} in chunks "
                            f"of {rows} output rows")
    x = te.placeholder((h, w, blocks, batch, block), "int32", name="x")
    shape = (oh, ow, blocks, batch, block)

    def tap(prev: te.Tensor, ry: int, rx: int, first: bool):
        def value(y, xo, cb, b, o):
            at = x[y * s + ry, xo * s + rx, cb, b, o]
            return prev[y, xo, cb, b, o] + at if first or kind == "avg" else ir.Max(prev[y, xo, cb, b, o], at)
        return te.compute(shape, value, name=f"tap{ry}_{rx}")

    def then(prev: te.Tensor, name: str, fn) -> te.Tensor:
        return te.compute(shape, lambda *i: fn(prev[i]), name=name)

    stages = [te.compute(shape, lambda *i: ir.const(0), name="start")]
    for n, (ry, rx) in enumerate((ry, rx) for ry in range(kh) for rx in range(kw)):
        stages.append(tap(stages[-1], ry, rx, n == 0))
    taps = stages[1:]
    if kind == "avg":
        mean = mean_steps(kh * kw, -128, 127, spec.params["ALUOP_IMM_BIT_WIDTH"])
        for n, add in enumerate(mean.adds):
            stages.append(then(stages[-1], f"offset{n}", lambda v, add=add: v + ir.const(add)))
        for name, shift in (("pre_shift", mean.pre_shift),):
            if shift:
                stages.append(then(stages[-1], name, lambda v, d=1 << shift: ir.FloorDiv(v, ir.const(d))))
        if mean.mul != 1 or mean.shift:
            stages.append(then(stages[-1], "mul", lambda v: v * ir.const(mean.mul)))
            stages.append(then(stages[-1], "shift", lambda v: ir.FloorDiv(v, ir.const(1 << mean.shift))))
        stages.append(then(stages[-1], "low", lambda v: v + ir.const(mean.low)))
    clip = vita_alu.clip_stages(stages[-1], (-128, 127), spec, rows * ow * blocks, f"VITA {kind}_pool")
    instructions = ["" for _ in stages] + list(clip.instructions)
    stages += clip.tensors
    out = te.compute(shape, lambda *i: ir.cast(stages[-1][i], "int8"), name="out")
    sch = create_schedule(out)
    for stage in stages:
        sch[stage].set_scope("acc")
    loaded = sch.cache_read(x, "acc", taps)
    outer, inner = sch[out].split(out.op.axis[0], factor=rows)
    for stage in (loaded, *stages):
        sch[stage].compute_at(sch[out], outer)
    sch[loaded].pragma(sch[loaded].op.axis[0], "dma_copy")
    for stage, instruction in zip(stages, instructions, strict=True):
        sch[stage].pragma(sch[stage].op.axis[0], "alu", instruction)
    sch[out].pragma(inner, "dma_copy")
    return VitaSchedule(sch, (x, out), Tiling(rows=rows, oc_block=blocks, ic_block=1), (clip.selected,))


def max_pool(blocks: int, h: int, w: int, k: int, s: int, rows: int, *, spec: isa.ISA) -> VitaSchedule:
    """``pool`` of kind max with a K x K window."""
    return pool("max", blocks, h, w, (k, k), s, rows, spec=spec)


def pool_rows(blocks: int, h: int, w: int, window: tuple[int, int], s: int, spec: isa.ISA) -> int | None:
    """The most output rows of a ``pool`` chunk (dividing the output's) whose input rows and output tiles
    fit in the accumulators together; None when not even one row does."""
    kh, kw = window
    oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
    depth = spec.params["ACC_BUFF_DEPTH"]
    fits = [r for r in range(1, oh + 1)
            if oh % r == 0 and ((r - 1) * s + kh) * w * blocks + r * ow * blocks <= depth]
    return max(fits, default=None)


def conv2d_reference(data: np.ndarray, kernel: np.ndarray, layer: ConvShape, shift: int = 8,
                     relu: bool = False, bias: np.ndarray | None = None,
                     bounds: tuple[int, int] | None = None) -> np.ndarray:
    """What ``conv2d`` computes, on the packed layouts: ``reference.conv2d`` of the NCHW / OIHW arrays
    ``layer`` has (``unpack_conv``), wrapped to int32 as the accumulators are, plus the packed ``bias``,
    then the shift-and-clip epilogue, packed (with zero lanes past OC)."""
    x, w = unpack_conv(data, kernel, layer)
    acc = reference.conv2d(x, w, layer.s, layer.p)
    if bias is not None:
        acc = acc + unpack_bias(bias, layer.oc).reshape(1, -1, 1, 1)
    out = reference.shift_clip(acc.astype(np.int32), shift, bounds=clip_bounds(relu, bounds))
    return _pack_image(out, data.shape[-1])


def dense_reference(data: np.ndarray, weight: np.ndarray, shift: int = 8, relu: bool = False,
                    mnk: tuple[int, int, int] | None = None, bias: np.ndarray | None = None,
                    bounds: tuple[int, int] | None = None) -> np.ndarray:
    """What ``dense`` computes, on the packed layouts: ``reference.dense`` of the (m, k) and (n, k) arrays
    (``unpack_dense``; ``mnk`` gives m, n, k when the layouts are padded), wrapped to int32, plus the packed
    ``bias``, shifted and clipped to int8, packed."""
    a, w = unpack_dense(data, weight, mnk)
    acc = reference.dense(a, w)
    if bias is not None:
        acc = acc + unpack_bias(bias, w.shape[0])
    out = reference.shift_clip(acc.astype(np.int32), shift, bounds=clip_bounds(relu, bounds))
    return _pack_rows(out, data.shape[2], data.shape[3])


# --------------------------------------------------------------------------------------------------
# Layout transforms: plain arrays to the packed layouts, zero-padded to whole blocks, and back


def pack_conv(x: np.ndarray, w: np.ndarray, spec: isa.ISA) -> tuple[np.ndarray, np.ndarray]:
    """NCHW data (n = BATCH images) and OIHW kernel in ``conv2d``'s packed layouts, channels zero-padded to
    whole BLOCKs."""
    block = block_of(spec)
    oc, ic, k, _ = w.shape
    kernel = _pad_axes(w, {0: block, 1: block}).reshape(-1, block, round_up(ic, block) // block, block, k, k)
    return _pack_image(x, block), kernel.transpose(0, 2, 4, 5, 1, 3)


def unpack_conv(data: np.ndarray, kernel: np.ndarray, layer: ConvShape) -> tuple[np.ndarray, np.ndarray]:
    """``pack_conv`` undone: the NCHW data and OIHW kernel of ``layer`` (the padded lanes dropped)."""
    n = data.shape[0] * data.shape[4]
    x = data.transpose(0, 4, 1, 5, 2, 3).reshape(n, -1, layer.h, layer.w)[:, :layer.ic]
    w = kernel.transpose(0, 4, 1, 5, 2, 3).reshape(kernel.shape[0] * kernel.shape[4], -1, layer.k, layer.k)
    return x, w[:layer.oc, :layer.ic]


def pack_dense(a: np.ndarray, w: np.ndarray, spec: isa.ISA) -> tuple[np.ndarray, np.ndarray]:
    """(m, k) data and (n, k) weights in ``dense``'s packed layouts, zero-padded to whole blocks (m to BATCH,
    n and k to BLOCK)."""
    block, batch = block_of(spec), batch_of(spec)
    n, k = w.shape
    weight = _pad_axes(w, {0: block, 1: block}).reshape(-1, block, round_up(k, block) // block, block)
    return _pack_rows(a, batch, block), weight.transpose(0, 2, 1, 3)


def unpack_dense(data: np.ndarray, weight: np.ndarray, mnk: tuple[int, int, int] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``pack_dense`` undone: the (m, k) data and (n, k) weights (all rows and lanes when ``mnk`` is None)."""
    mb, kb, batch, b = data.shape
    a = data.transpose(0, 2, 1, 3).reshape(mb * batch, kb * b)
    w = weight.transpose(0, 2, 1, 3).reshape(weight.shape[0] * b, kb * b)
    if mnk is None:
        return a, w
    m, n, k = mnk
    return a[:m, :k], w[:n, :k]


def pack_bias(b: np.ndarray, spec: isa.ISA) -> np.ndarray:
    """A per-channel int32 bias (OC,) as the epilogue reads it: [OC/BLOCK, BATCH, BLOCK], one accumulator
    tile per channel block, its row repeated for each of the BATCH images, lanes past OC zero."""
    block, batch = block_of(spec), batch_of(spec)
    lanes = _pad_axes(np.asarray(b, np.int32).reshape(-1), {0: block}).reshape(-1, 1, block)
    return np.ascontiguousarray(np.broadcast_to(lanes, (lanes.shape[0], batch, block)))


def unpack_bias(bias: np.ndarray, oc: int) -> np.ndarray:
    """``pack_bias`` undone: the (OC,) bias of the first image's rows."""
    return bias[:, 0, :].reshape(-1)[:oc]


def unpack_out(out: np.ndarray, op: str, oc: int) -> np.ndarray:
    """A packed output in plain layout: NCHW for conv2d, (m, n) for dense; the lanes past ``oc`` dropped (and
    for dense the rows are all kept: slice them with m)."""
    if op == "gemm":
        mb, nb, batch, b = out.shape
        return out.transpose(0, 2, 1, 3).reshape(mb * batch, nb * b)[:, :oc]
    _, ocb, oh, ow, n, b = out.shape
    return out[0].transpose(3, 0, 4, 1, 2).reshape(n, ocb * b, oh, ow)[:, :oc]


def _pack_image(x: np.ndarray, block: int) -> np.ndarray:
    """(n, c, h, w) as (1, ceil(c/block), h, w, n, block), lanes past c zero."""
    n, c, h, w = x.shape
    padded = _pad_axes(x, {1: block}).reshape(n, -1, block, h, w)
    return padded.transpose(1, 3, 4, 0, 2)[None]


def _pack_rows(a: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(m, k) as (ceil(m/batch), ceil(k/block), batch, block), rows and lanes past m, k zero."""
    padded = _pad_axes(a, {0: batch, 1: block})
    return padded.reshape(padded.shape[0] // batch, batch, -1, block).transpose(0, 2, 1, 3)


def _pad_axes(x: np.ndarray, multiples: dict[int, int]) -> np.ndarray:
    """``x`` zero-padded at the end of each axis in ``multiples`` to a multiple of its value."""
    widths = [(0, round_up(size, multiples[axis]) - size if axis in multiples else 0)
              for axis, size in enumerate(x.shape)]
    return np.pad(x, widths) if any(hi for _, hi in widths) else x


def _schedule_tiles(s: Schedule, res: te.Tensor, stages: vita_alu.AluStages, out: te.Tensor,
                    t: Tiling, data: te.Tensor, weight: te.Tensor, spatial: tuple[int, ...],
                    bias: te.Tensor | None = None, staged: te.Tensor | None = None,
                    shared: bool = False) -> None:
    """Tile ``out`` by rows (its axis ``spatial[0]``) and channel blocks (axis 1), compute ``res`` and the
    epilogue per tile in "acc", stage ``data`` per input-channel chunk, ``weight`` per chunk or, with one
    chunk, once per channel block (with ``shared``, once for all virtual threads: ``shared_weights``), and
    the tile's ``bias`` tiles (LOAD_ACC) per output tile."""
    epilogue = stages.tensors
    for stage in (res, *epilogue):
        s[stage].set_scope("acc")
    if staged is not None:   # the input rows a strided 1x1 conv reads, as their own stage (_strided_rows)
        s[staged].set_scope("inp")
        inp = staged
    else:
        inp = s.cache_read(data, "inp", [res])
    wgt = s.cache_read(weight, "wgt", [res])
    acc_bias = s.cache_read(bias, "acc", [x for x in epilogue if bias in x.op.input_tensors]) \
        if bias is not None else None
    axes = list(out.op.axis)
    rows, co = axes[spatial[0]], axes[1]
    co_o, co_i = s[out].split(co, factor=t.oc_block, names=("co.o", "co.i"))
    y_o, y_i = s[out].split(rows, factor=t.rows, names=("y.o", "y.i"))
    threaded = co_o if t.vthread_axis == "oc" else y_o
    one_chunk = res.op.reduce_axis[0].extent <= t.ic_block
    # with one chunk, the row tiles inside a channel block, so that the block's weights stay for all rows
    tiles = [co_o, y_o] if one_chunk else [y_o, co_o]
    if t.threads > 1:
        vt, rest = s[out].split(threaded, nparts=t.threads, names=("vt", f"{threaded.name}.t"))
        tiles = [vt, *(rest if a is threaded else a for a in tiles)]
        s[out].bind(vt, te.thread_axis("vthread", name="vt"))
    batch = [axes[0]] if spatial[0] != 0 else []   # conv's batch axis (extent 1) goes outermost
    others = [a for i, a in enumerate(axes) if i not in (0, 1, spatial[0])]
    # the output tile's loops in DRAM order, so the store is one 2-D DMA: conv's rows are inside a channel
    # block (NCHWc), dense's channel blocks inside a row
    inner = [co_i, y_i, *others] if spatial[0] != 0 else [y_i, co_i, *others]
    s[out].reorder(*batch, *tiles, *inner)
    at = tiles[-1]
    for stage in (*([acc_bias] if acc_bias is not None else []), res, *epilogue):
        s[stage].compute_at(s[out], at)
    if acc_bias is not None:
        s[acc_bias].pragma(s[acc_bias].op.axis[0], "dma_copy")
    raxes = list(res.op.reduce_axis)
    r_o, r_i = s[res].split(raxes[0], factor=t.ic_block, names=("ic.c", "ic.b"))
    sp = list(res.op.axis)
    # chunk loop outermost, then the tile's spatial loops, the rest of the reduction, the GEMM tile last
    tile_sp = sp[:-2]
    s[res].reorder(r_o, *tile_sp, r_i, *raxes[1:-1], sp[-2], sp[-1], raxes[-1])
    s[inp].compute_at(s[res], r_o)
    if shared:   # the threads' weights, once for all of them
        s[wgt].compute_root()
    elif one_chunk:   # one chunk: the weights stay for every row tile of the block
        s[wgt].compute_at(s[out], tiles[-2])
    else:
        s[wgt].compute_at(s[res], r_o)
    for stage in (inp, wgt):
        s[stage].pragma(s[stage].op.axis[0], "dma_copy")
    s[res].tensorize(tile_sp[0], "gemm")
    for stage, instruction in zip(epilogue, stages.instructions, strict=True):
        s[stage].pragma(s[stage].op.axis[0], "alu", instruction)
    s[out].pragma(inner[0], "dma_copy")
