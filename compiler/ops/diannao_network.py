"""DianNao schedules for the operators a network needs besides its convolutions and matmuls: clip, pooling,
global average pooling, concat, softmax, layer norm and GELU (compiler/ops/network.py defines them; residual
add and ReLU are one vector instruction each and take ``diannao.elementwise_of``, as a user's operator).

Every computation is a vector instruction of the spec: clip and GELU are element-wise trees covered by the
spec's instructions (``diannao.covered``, compiler/passes/cover.py), the others found by the one matcher from
a loose mark (seed 001 Sec. IV-B); every input reaches NMEM by a marked copy; what no instruction computes
stays scalar and is reported (``unmatched``): the start value of a max reduction (-inf) and the constant
vectors (1 / K^2, GELU's coefficients, clip's bounds), LANES scalar stores once per core. The vector
instructions have immediate NMEM addresses, so the loops that walk a tile's vectors are unrolled.

The card's layouts (``pack`` converts network.py's on the host, as VITA's flow packs its blocks):

    max_pool, avg_pool       x [H, W, C] -> [OH, OW, C]: channels innermost, as the card's conv takes them;
                             each tap of a window is one strided copy of an output row's pixels (a gather
                             by the DMA), the taps combined by vmax / vadd, the mean scaled by 1 / K^2
    global_avg_pool          x [H * W, C] -> [C], C padded to whole vectors: channels on the lanes, one
                             vadd per pixel
    clip, gelu               x [N]: whole-tile vector operations against constant vectors
    concat                   a [P, C], b [P, C2] -> [P, C + C2]: two strided copies
    softmax, layer_norm      x [D, R] -> [D, R], R padded to whole vectors: rows on the vector lanes, so a
                             row's max, sum and mean are vector operations across lanes (D of them per
                             tile of LANES rows)

LANES is the spec's VECTOR_ELEMS. Float results differ from numpy's by f32 rounding (``x * (1 / K^2)`` for
``x / K^2``, ``e * (1 / sum)`` for ``e / sum``, ``1 / sqrt`` as one instruction); integer ones (clip,
max_pool, concat) are bit-exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

import isa
from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ops.diannao import DiannaoSchedule, covered
from compiler.ops.diannao_tiles import (
    constant_vector,
    fill_constants,
    lanes_of,
    launchable,
    mark_intrin,
    per_core,
)
from compiler.ops.network import EPS
from compiler.ops.nn import round_up
from compiler.schedule import Schedule, create_schedule

OPERATORS = ("clip", "max_pool", "avg_pool", "global_avg_pool", "concat", "softmax", "layer_norm", "gelu")
MAX_TAPS = 64   # a pool's taps (and partial results) are nested buffers: more nest deeper than the IR's
#                passes recurse (a reduction over a tap axis would take any window; see the issue notes)
GELU_C = float(np.sqrt(2.0 / np.pi))   # GELU's tanh form: 0.5 x (1 + tanh(GELU_C (x + 0.044715 x^3)))




def _f32(value: float) -> ir.Expr:
    return te.const(float(value), "float32")


def _nmem_check(where: str, need: int, spec: isa.ISA, hint: str) -> None:
    have = spec.params["NMEM_BYTES"]
    if need > have:
        raise ScheduleError(f"{where}: a core's buffers need {need:,} bytes of NMEM, but it has {have:,} "
                            f"(NMEM_BYTES); {hint}")
















def _reduce_by_vectors(s: Schedule, t: te.Tensor, mark: str) -> None:
    """A reduction over its first reduce axis whose output is one vector: the reduce loop outside and
    unrolled, one vector instruction (``mark``) per step."""
    (axis,), (raxis,) = t.op.axis, t.op.reduce_axis
    s[t].reorder(raxis, axis)
    mark_intrin(s[t], axis, mark, unroll=[raxis])


# ------------------------------------------------------------------------------------------ pooling

def pool(kind: str, h: int, w: int, c: int, k: int, stride: int, dtype: str, cores: int, *,
         spec: isa.ISA) -> DiannaoSchedule:
    """A K x K ``kind`` ("max" or "avg") pool with stride S of x [H, W, C] (HWC) into [OH, OW, C]. Each core
    takes a share of the output rows; per output row, each tap (ry, rx) is one strided copy GMEM -> NMEM of
    the row's OW input pixels (C contiguous elements each, S * C apart), the taps are combined pairwise
    (vmax / vadd over OW * C elements) and avg scales the sum by 1 / K^2 (vmul, LANES elements at a time
    against a constant vector)."""
    where = f"DianNao {kind}_pool"
    if kind not in ("max", "avg"):
        raise ScheduleError(f"{where}: expected the kind 'max' or 'avg'")
    if kind == "avg" and dtype != "float32":
        raise ScheduleError(f"{where}: the mean is float32 (compiler/ops/network.py), not {dtype}")
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    if min(oh, ow) < 1:
        raise ScheduleError(f"{where}: a window of K = {k} is larger than the {h} x {w} input")
    if k * k > MAX_TAPS:
        raise ScheduleError(f"{where}: a {k} x {k} window has {k * k} taps; this schedule gathers each into "
                            f"a buffer of its own and takes at most {MAX_TAPS} (K <= 8)")
    lanes = lanes_of(spec)
    row = ow * c
    taps_n = k * k
    buffers = 2 * taps_n - 1 + (2 if kind == "avg" else 0)
    itemsize = np.dtype(dtype).itemsize
    _nmem_check(where, buffers * _padded(row * itemsize, spec) + lanes * 4, spec,
                "a smaller W or C, or a smaller K")
    x = te.placeholder((h, w, c), dtype, name="x")
    shape = (oh, ow, c)

    def gather(ry: int, rx: int) -> te.Tensor:
        return te.compute(shape, lambda y, xo, ch: x[y * stride + ry, xo * stride + rx, ch],
                          name=f"tap{ry}_{rx}")

    def combine(a: te.Tensor, b: te.Tensor, n: int) -> te.Tensor:
        op = ir.Max if kind == "max" else ir.Add
        return te.compute(shape, lambda *i: op(a[i], b[i]), name=f"{kind}{n}")

    taps = [gather(ry, rx) for ry in range(k) for rx in range(k)]
    partial = [taps[0]]
    for n, tap in enumerate(taps[1:], 1):
        partial.append(combine(partial[-1], tap, n))
    last, consts = partial[-1], []
    if kind == "avg":
        consts = [constant_vector(1.0 / taps_n, row, lanes, "inv_area")]
        area = consts[0][-1]
        total = last
        last = te.compute(shape, lambda y, xo, ch: total[y, xo, ch] * area[xo * c + ch], name="mean")
        partial.append(last)
    out = te.compute(shape, lambda *i: last[i], name="out")
    s = create_schedule(out)
    for t in (*taps, *partial[1:]):
        s[t].set_scope("nmem")
    cores = launchable(cores, oh, spec)
    y, _, _ = out.op.axis
    core, rest = per_core(s, out, y, cores)
    for t in (*taps, *partial[1:]):
        s[t].compute_at(s[out], rest)
    for t in taps:
        mark_intrin(s[t], s[t].op.axis[0], "copy")
    for t in partial[1:]:
        mark = "mul" if t is last and kind == "avg" else "maximum" if kind == "max" else "add"
        mark_intrin(s[t], s[t].fuse(*s[t].op.axis), mark)
    fill_constants(s, consts, s[out], core)
    mark_intrin(s[out], s[out].op.axis[1], "copy")
    return DiannaoSchedule(s, (x, out), cores, row)


def _padded(nbytes: int, spec: isa.ISA) -> int:
    align = spec.params["VECTOR_ALIGN"]
    return -(-nbytes // align) * align


def global_avg_pool(pixels: int, c: int, cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """The mean over ``pixels`` of x [pixels, C] (float32, HWC with H x W flattened) into [C]. Each core
    takes a share of the channels (whole vectors where C allows); it stages the pixels in chunks (one
    strided copy each) and adds them one vadd per pixel into its sums, which start at zero (vzero), then
    scales them by 1 / pixels (vmul against a constant vector)."""
    where = "DianNao global_avg_pool"
    lanes = lanes_of(spec)
    cores = launchable(cores, -(-c // lanes), spec)
    share = -(-c // (cores * lanes)) * lanes   # whole vectors
    chunk = max(d for d in range(1, min(pixels, lanes) + 1) if pixels % d == 0)   # no partial chunk
    _nmem_check(where, _padded(chunk * share * 4, spec) + 4 * _padded(max(share, lanes) * 4, spec), spec,
                "fewer channels")
    x = te.placeholder((pixels, c), "float32", name="x")
    p = te.reduce_axis(pixels, "p")
    total = te.compute((c,), lambda ch: te.sum(x[p, ch], axis=p), name="total")
    consts = [constant_vector(1.0 / pixels, share, lanes, "inv_area")]
    scale = consts[0][-1]
    mean = te.compute((c,), lambda ch: total[ch] * scale[ch % share], name="mean")
    out = te.compute((c,), lambda ch: mean[ch], name="out")
    s = create_schedule(out)
    staged = s.cache_read(x, "nmem", [total])
    for t in (total, mean):
        s[t].set_scope("nmem")
    vec, _ = s[out].split(out.op.axis[0], factor=lanes, names=("vec", "lane"))
    core, rest = per_core(s, out, vec, cores)
    for t in (total, mean):
        s[t].compute_at(s[out], core)
    fill_constants(s, consts, s[out], core)
    (ch,), (red,) = total.op.axis, total.op.reduce_axis
    po, pi = s[total].split(red, factor=chunk, names=("p.chunk", "p"))
    s[total].reorder(po, pi, ch)
    s[staged].compute_at(s[total], po)
    mark_intrin(s[staged], s[staged].op.axis[0], "copy")
    mark_intrin(s[total], ch, "add", unroll=[pi])
    mark_intrin(s[mean], mean.op.axis[0], "mul")
    mark_intrin(s[out], rest, "copy")
    return DiannaoSchedule(s, (x, out), cores, share)


# ------------------------------------------------------------------------------------------ clip

def clip(n: int, lo: int, hi: int, dtype: str, cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """x [N] clipped to [LO, HI], ``min(max(x, LO), HI)`` covered by the spec's vector instructions
    (``diannao.covered``: vmax against a vector of LO, vmin against one of HI, the constant vectors filled
    once per core)."""
    x = te.placeholder((n,), dtype, name="x")
    bounds = ir.const(lo, dtype), ir.const(hi, dtype)
    out = te.compute((n,), lambda i: ir.Min(ir.Max(x[i], bounds[0]), bounds[1]), name="res")
    return covered((x,), out, cores, spec=spec)


# ------------------------------------------------------------------------------------------ concat

def concat(pixels: int, c1: int, c2: int, dtype: str, cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """a [pixels, C1] and b [pixels, C2] (HWC) joined along the channels into [pixels, C1 + C2]: each core
    takes a share of the pixels, stages tiles of them in NMEM (two strided copies: a's channels, then b's,
    once loop partitioning has split the channel loop at C1) and copies each tile out."""
    where = "DianNao concat"
    c = c1 + c2
    itemsize = np.dtype(dtype).itemsize
    cores = launchable(cores, pixels, spec)
    share = -(-pixels // cores)
    tile = max(1, min(share, spec.params["NMEM_BYTES"] // 2 // (c * itemsize)))
    _nmem_check(where, _padded(tile * c * itemsize, spec), spec, "fewer channels")
    a = te.placeholder((pixels, c1), dtype, name="a")
    b = te.placeholder((pixels, c2), dtype, name="b")
    joined = te.compute((pixels, c), lambda px, ch: te.if_then_else(
        ch < c1, a[px, ir.Min(ch, te.const(c1 - 1, "int32"))], b[px, ir.Max(ch - c1, te.const(0, "int32"))]),
        name="joined")
    out = te.compute((pixels, c), lambda px, ch: joined[px, ch], name="out")
    s = create_schedule(out)
    s[joined].set_scope("nmem")
    px, _ = out.op.axis
    _, rest = per_core(s, out, px, cores)
    outer, inner = s[out].split(rest, factor=tile, names=("tile", "px"))
    s[joined].compute_at(s[out], outer)
    mark_intrin(s[joined], s[joined].op.axis[0], "copy")
    mark_intrin(s[out], inner, "copy")
    return DiannaoSchedule(s, (a, b, out), cores, tile)


# ------------------------------------------------------------------------------------------ row-wise

def _row_tiles(s: Schedule, out: te.Tensor, rows: int, lanes: int, cores: int, spec: isa.ISA):
    """``out`` [D, R] in tiles of LANES rows (columns of the layout), the tiles shared by the cores: returns
    (launched cores, the core loop, the tile loop, out's D axis, out's lane axis), loops ordered
    core, tile, D, lane."""
    d, r = out.op.axis
    tile, lane = s[out].split(r, factor=lanes, names=("tile", "lane"))
    cores = launchable(cores, rows // lanes, spec)
    core, rest = per_core(s, out, tile, cores)
    s[out].reorder(core, rest, d, lane)
    return cores, core, rest, d, lane


def _check_rows(where: str, rows: int, lanes: int) -> None:
    if rows % lanes:
        raise ScheduleError(f"{where}: R = {rows} rows is not a multiple of the {lanes} vector lanes "
                            f"(VECTOR_ELEMS); pad the rows")


def softmax(rows: int, d: int, cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """The softmax of each row of x [D, R] (float32, rows on the lanes), per tile of LANES rows: the tile
    staged (one strided copy), the rows' max (vmax per element of the row, from -inf), e = exp(x - max)
    (vsub, vexp), their sum (vzero, vadd), its reciprocal (vrecip) and e times it (vmul)."""
    where = "DianNao softmax"
    lanes = lanes_of(spec)
    _check_rows(where, rows, lanes)
    _nmem_check(where, 3 * d * lanes * 4 + 4 * lanes * 4, spec, "a smaller D")
    x = te.placeholder((d, rows), "float32", name="x")
    j, k = te.reduce_axis(d, "j"), te.reduce_axis(d, "k")
    peak = te.compute((rows,), lambda r: te.max(x[j, r], axis=j), name="peak")
    shifted = te.compute((d, rows), lambda i, r: x[i, r] - peak[r], name="shifted")
    e = te.compute((d, rows), lambda i, r: te.exp(shifted[i, r]), name="e")
    total = te.compute((rows,), lambda r: te.sum(e[k, r], axis=k), name="total")
    inv = te.compute((rows,), lambda r: _f32(1.0) / total[r], name="inv")
    res = te.compute((d, rows), lambda i, r: e[i, r] * inv[r], name="res")
    out = te.compute((d, rows), lambda i, r: res[i, r], name="out")
    s = create_schedule(out)
    staged = s.cache_read(x, "nmem", [peak, shifted])
    for t in (peak, shifted, e, total, inv, res):
        s[t].set_scope("nmem")
    cores, _, tile, row, _ = _row_tiles(s, out, rows, lanes, cores, spec)
    for t in (staged, peak, e, total, inv, res):
        s[t].compute_at(s[out], tile)
    s[shifted].compute_at(s[e], e.op.axis[0])
    mark_intrin(s[staged], s[staged].op.axis[0], "copy")
    _reduce_by_vectors(s, peak, "maximum")
    _reduce_by_vectors(s, total, "add")
    for t, mark in ((shifted, "sub"), (e, "exp"), (res, "mul")):
        mark_intrin(s[t], t.op.axis[1], mark, unroll=[t.op.axis[0]])
    mark_intrin(s[inv], inv.op.axis[0], "recip")
    mark_intrin(s[out], row, "copy")
    return DiannaoSchedule(s, (x, out), cores, lanes)


def layer_norm(rows: int, d: int, cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """Layer norm of each row of x [D, R] (float32, rows on the lanes) with gamma and beta given as
    [D, LANES] (each element repeated on the lanes: the weights' layout), per tile of LANES rows: the
    tile staged, the mean (vadd per element, vmul by 1 / D), the variance of x - mean (vsub, vmul, vadd,
    vmul by 1 / D), 1 / sqrt(var + EPS) (vadd, vrsqrt), then per element (x - mean) * that * gamma + beta
    (vsub, vmul, vmul, vadd), written out in chunks of LANES elements (gamma and beta staged per chunk)."""
    where = "DianNao layer_norm"
    lanes = lanes_of(spec)
    _check_rows(where, rows, lanes)
    chunk = max(c for c in range(1, min(d, lanes) + 1) if d % c == 0)
    _nmem_check(where, d * lanes * 4 + 4 * chunk * lanes * 4 + 12 * lanes * 4, spec, "a smaller D")
    x = te.placeholder((d, rows), "float32", name="x")
    gamma = te.placeholder((d, lanes), "float32", name="gamma")
    beta = te.placeholder((d, lanes), "float32", name="beta")
    j, k = te.reduce_axis(d, "j"), te.reduce_axis(d, "k")
    consts = [constant_vector(1.0 / d, lanes, lanes, "inv_d"), constant_vector(EPS, lanes, lanes, "eps")]
    (inv_d,), (eps,) = consts

    total = te.compute((rows,), lambda r: te.sum(x[j, r], axis=j), name="total")
    mean = te.compute((rows,), lambda r: total[r] * inv_d[r % lanes], name="mean")
    dev = te.compute((d, rows), lambda i, r: x[i, r] - mean[r], name="dev")
    square = te.compute((d, rows), lambda i, r: dev[i, r] * dev[i, r], name="square")
    squares = te.compute((rows,), lambda r: te.sum(square[k, r], axis=k), name="squares")
    var = te.compute((rows,), lambda r: squares[r] * inv_d[r % lanes], name="var")
    shifted = te.compute((rows,), lambda r: var[r] + eps[r % lanes], name="var_eps")
    scale = te.compute((rows,), lambda r: _f32(1.0) / te.sqrt(shifted[r]), name="scale")
    dev2 = te.compute((d, rows), lambda i, r: x[i, r] - mean[r], name="dev2")
    normed = te.compute((d, rows), lambda i, r: dev2[i, r] * scale[r], name="normed")
    scaled = te.compute((d, rows), lambda i, r: normed[i, r] * gamma[i, r % lanes], name="scaled")
    res = te.compute((d, rows), lambda i, r: scaled[i, r] + beta[i, r % lanes], name="res")
    out = te.compute((d, rows), lambda i, r: res[i, r], name="out")
    s = create_schedule(out)
    staged = s.cache_read(x, "nmem", [total, dev, dev2])
    gamma_l = s.cache_read(gamma, "nmem", [scaled])
    beta_l = s.cache_read(beta, "nmem", [res])
    vectors = (total, mean, squares, var, shifted, scale)
    per_element = (dev, square, dev2, normed, scaled, res)
    for t in (*vectors, *per_element):
        s[t].set_scope("nmem")
    cores, core, tile, row, lane = _row_tiles(s, out, rows, lanes, cores, spec)
    row_o, row_i = s[out].split(row, factor=chunk, names=("chunk", "row"))
    s[out].unroll(row_o)
    fill_constants(s, consts, s[out], core)
    for t in (staged, *vectors):
        s[t].compute_at(s[out], tile)
    for t in (gamma_l, beta_l, res):
        s[t].compute_at(s[out], row_o)
    for t in (dev2, normed, scaled):
        s[t].compute_at(s[res], res.op.axis[0])
    for t in (dev, square):
        s[t].compute_at(s[squares], squares.op.reduce_axis[0])
    for t in (staged, gamma_l, beta_l):
        mark_intrin(s[t], s[t].op.axis[0], "copy")
    _reduce_by_vectors(s, total, "add")
    _reduce_by_vectors(s, squares, "add")
    for t, mark in ((mean, "mul"), (var, "mul"), (shifted, "add"), (scale, "rsqrt")):
        mark_intrin(s[t], t.op.axis[0], mark)
    for t, mark in ((dev, "sub"), (square, "mul"), (dev2, "sub"), (normed, "mul"), (scaled, "mul")):
        mark_intrin(s[t], t.op.axis[1], mark)
    mark_intrin(s[res], res.op.axis[1], "add", unroll=[res.op.axis[0]])
    mark_intrin(s[out], row_i, "copy")
    return DiannaoSchedule(s, (x, gamma, beta, out), cores, lanes)


def gelu(n: int, cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """GELU's tanh form over x [N] (float32), 0.5 x (1 + tanh(GELU_C (x + 0.044715 x^3))) evaluated in this
    order (numpy's), covered by the spec's vector instructions (``diannao.covered``: vmul, vadd, tanh; the
    constants vectors filled once per core)."""
    x = te.placeholder((n,), "float32", name="x")

    def value(i):
        cube = x[i] * x[i] * x[i]
        inner = (x[i] + cube * _f32(0.044715)) * _f32(GELU_C)
        return x[i] * _f32(0.5) * (te.tanh(inner) + _f32(1.0))

    return covered((x,), te.compute((n,), value, name="res"), cores, spec=spec)


# ------------------------------------------------------------------- the network operators' layouts

def schedule(op: str, params: dict[str, int], cores: int, *, spec: isa.ISA) -> DiannaoSchedule:
    """The schedule of network operator ``op`` (compiler/ops/network.py) with its parameters ``params``
    (every one, defaults applied), on the card's layout of its inputs (``pack``)."""
    lanes = lanes_of(spec)
    if op == "clip":
        return clip(params["C"] * params["H"] * params["W"], params["LO"], params["HI"], "int32", cores,
                    spec=spec)
    if op in ("max_pool", "avg_pool"):
        dtype = "int32" if op == "max_pool" else "float32"
        return pool(op[:3], params["H"], params["W"], params["C"], params["K"], params["S"], dtype, cores,
                    spec=spec)
    if op == "global_avg_pool":
        return global_avg_pool(params["H"] * params["W"], round_up(params["C"], lanes), cores, spec=spec)
    if op == "concat":
        return concat(params["H"] * params["W"], params["C"], params["C2"] or params["C"], "int32", cores,
                      spec=spec)
    rows = round_up(params["R"], lanes)
    if op == "softmax":
        return softmax(rows, params["D"], cores, spec=spec)
    if op == "layer_norm":
        return layer_norm(rows, params["D"], cores, spec=spec)
    if op == "gelu":
        return gelu(round_up(params["R"] * params["D"], lanes), cores, spec=spec)
    raise ScheduleError(f"DianNao: no schedule for the network operator {op!r}; expected one of "
                        f"{', '.join(OPERATORS)}")


def pack(op: str, arrays: Sequence[np.ndarray], spec: isa.ISA) -> list[np.ndarray]:
    """The inputs of ``op`` as network.py gives them ([C, H, W] images, [R, D] rows), in the card's layout
    (the module's table), zero-padded to whole vectors where the schedule needs them."""
    lanes = lanes_of(spec)
    if op in ("max_pool", "avg_pool", "concat"):
        return [np.ascontiguousarray(np.moveaxis(x, 0, -1)) for x in arrays]
    if op == "global_avg_pool":
        (x,) = arrays
        c = x.shape[0]
        return [_pad_to(np.moveaxis(x, 0, -1).reshape(-1, c), 1, round_up(c, lanes))]
    if op in ("softmax", "layer_norm"):
        x, *weights = arrays
        rows = _pad_to(np.ascontiguousarray(x.T), 1, round_up(x.shape[0], lanes))
        return [rows, *(np.ascontiguousarray(np.repeat(w[:, None], lanes, axis=1)) for w in weights)]
    if op == "gelu":
        (x,) = arrays
        return [_pad_to(x.reshape(-1), 0, round_up(x.size, lanes))]
    if op == "clip":
        return [np.ascontiguousarray(x.reshape(-1)) for x in arrays]
    raise ScheduleError(f"DianNao: no layout for the network operator {op!r}")


def unpack(op: str, out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The card's output of ``op`` as network.py's ``shape``: the layout undone, the padding dropped."""
    if op in ("max_pool", "avg_pool", "concat"):
        return np.ascontiguousarray(np.moveaxis(out.reshape(shape[1], shape[2], shape[0]), -1, 0))
    if op == "global_avg_pool":
        return out.reshape(-1)[: shape[0]].copy()
    if op in ("softmax", "layer_norm"):
        r, d = shape
        return np.ascontiguousarray(out.reshape(d, -1)[:, :r].T)
    return out.reshape(-1)[: math.prod(shape)].reshape(shape).copy()


def _pad_to(x: np.ndarray, axis: int, size: int) -> np.ndarray:
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return np.ascontiguousarray(np.pad(x, pad))
