"""Integer conv2d and GEMM for the CPU, scheduled as UNIT schedules a tensorized instruction (Sec. III.C).

Operators (batch 1, int32 results) of three integer element types: ``uint8`` (u8 activations x s8 weights,
vpdpbusd's), ``int8`` (s8 x s8, ARM's sdot's) and ``int16`` (int16 x int16, vpdpwssd's where a spec has it);
and ``float32`` (f32 x f32 -> f32 on the untensorized isas, where a ``fp_contract`` pragma around the
reduction lets LLVM fuse each multiply and add into an FMA, PolyDL's fp32 setting),
in the layouts UNIT uses (Sec. VI: data NCHW[x]c, kernel KCRS[y]k[x]c, with x the instruction's reduction
width and y its output lanes: 4 and 16 for vpdpbusd, 4 and 4 for sdot's 128-bit form, 2 and 16 for
vpdpwssd; ``Packing``):
- ``conv2d``: data ``[1, C/z, H + 2p, W + 2p, z]`` (already padded, as UNIT's graph-level padding leaves
  it; Table I's input sizes include the padding; ``z``: ``data_lanes``, y where C holds y channels, else
  x), kernel ``[K/y, C/x, R, S, y, x]``, output ``[1, K/y, OH, OW, y]``; channels are padded with zeros to
  multiples of z and y by ``pack_conv``. Data in blocks of y channels is the layout the kernel writes its
  output in: the next conv reads it as it is;
- ``gemm``: ``A[M, K]`` x ``B[N, K]``ᵀ with B packed ``[N/y, K/x, y, x]``, output ``[M, N/y, y]``.
``pack_*`` / ``unpack_*`` convert from and to NCHW / row-major numpy arrays.

The schedule is UNIT's rewriter: the Inspector's mapping (``compiler.passes.inspector``) says which loops
the instruction computes; those are tiled by its extents, moved innermost and marked ``tensorize``; the other
data-parallel loops are organized by two breaking points (``CpuTuning``, Fig. 7): loops before the first
are fused and parallel, loops between run serially, and the innermost ones are moved below the reduction
loops and unrolled, so that several independent instructions follow each other. ``isa`` says how:
``x86-vnni`` or ``arm-dot`` (tensorized: the spec's instruction that sums the operator's products into int32
lanes, found from its semantics, its blocking read from its operands; vpdpbusd for uint8 in the built-in x86
spec, sdot_v4i32 for int8 in the built-in arm spec: UNIT's AVX-512 VNNI and ARM DOT, Sec. III.A. The two
names are the same schedule; which instruction is used is the spec's, not the name's), ``x86-avx512`` (no
tensorized instruction: the 16 output lanes are a vectorized loop of 32-bit multiply-adds), ``x86-avx2``
(the same on 8 lanes, AVX2's 256-bit registers), ``none``
(scalar loops; LLVM may still vectorize them).

What a conv or GEMM ends with (a bias, a ReLU, a requantization to 8 bits) is
``compiler.ops.cpu_epilogue``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ops.contractions import Contraction
from compiler.ops.nn import ConvShape
from compiler.passes.inspector import Mapping, NotApplicable, inspect_op
from compiler.schedule import Schedule, create_schedule
from isa import ISA
from isa.lang.scalar import evaluate as evaluate_scalar

ISAS = ("x86-vnni", "arm-dot", "x86-avx512", "x86-avx2", "none")
#: the isas that tensorize onto the spec's dot-product instruction (UNIT's names for x86 and ARM)
TENSORIZED = ("x86-vnni", "arm-dot")
#: the operator's element types: data (activations) and weights
DTYPES = {"uint8": ("uint8", "int8"), "int8": ("int8", "int8"), "int16": ("int16", "int16"),
          "float32": ("float32", "float32")}
LANES = 16   # int32 outputs per 512-bit register, the blocking of the untensorized schedules
#: the vectorized (untensorized) isas and their lanes: 32-bit elements per vector register
VECTORIZED = {"x86-avx512": 16, "x86-avx2": 8}


@dataclass(frozen=True)
class Packing:
    """The blocking an instruction imposes: ``lanes`` int32 outputs per instruction, each the sum of
    ``group`` products of a ``data`` and a ``weight`` element; ``instruction`` None for the untensorized
    schedules (16 lanes, as many products as fill 32 bits)."""

    data: str
    weight: str
    lanes: int
    group: int
    instruction: str | None = None

    @property
    def acc(self) -> str:
        """The type products are summed in: int32, or float32 for float operands."""
        return "float32" if dtypes.dtype(self.data).is_float else "int32"


U8 = Packing("uint8", "int8", LANES, 4)   # the layout of u8 x s8 operators (vpdpbusd's), the default


def packing(isa: str, dtype: str, spec: ISA, instruction: str | None = None) -> Packing:
    """The blocking of ``dtype``'s operators under ``isa``: for a tensorized isa (``x86-vnni``,
    ``arm-dot``), that of ``instruction`` (by default the first of ``packings``), with its lane count and
    reduction width read from its operands and indices; for the others, 16 lanes of as many products as fill
    32 bits."""
    if isa not in ISAS:
        raise ScheduleError(f"cpu: unknown isa {isa!r}; expected one of {', '.join(ISAS)}")
    if dtype not in DTYPES:
        raise ScheduleError(f"cpu: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    data, weight = DTYPES[dtype]
    if isa not in TENSORIZED:
        return Packing(data, weight, VECTORIZED.get(isa, LANES), max(1, 32 // dtypes.dtype(data).bits))
    found = packings(dtype, spec)
    for pk in found:
        if instruction in (None, pk.instruction):
            return pk
    if instruction is not None and instruction not in spec.instructions:
        raise ScheduleError(f"cpu: the spec {spec.source} has no instruction {instruction!r} (its "
                            f"instructions: {', '.join(spec.instructions)})")
    what = f"{instruction} does not sum" if instruction else \
        f"the spec {spec.source} has no instruction that sums"
    raise ScheduleError(f"cpu: {what} {data} x {weight} products into int32 register lanes (those "
                        f"that do: {', '.join(pk.instruction for pk in found) or 'none'}; the spec's "
                        f"instructions: {', '.join(spec.instructions)}); use an untensorized isa "
                        f"(x86-avx512, none) or another dtype, or a spec that adds one")


def packings(dtype: str, spec: ISA) -> list[Packing]:
    """Every instruction of ``spec`` that sums ``dtype``'s products exactly into int32 register lanes, as
    its blocking, the likeliest first: those whose operands are the operator's element types (vpdpbusd for
    u8 x s8), then those whose wider integer operands hold them (vpmaddwd's int16 for u8 x s8 or s8 x s8:
    the operands are widened when packed, ``pack_*``, and every product is the same); within each, the
    instructions the spec's own file declares first (``ISA.declared``): an extension that adds one for
    these products (vpdpbusds over x86's vpdpbusd) is asking for it."""
    data, weight = DTYPES[dtype]
    ranked = []
    for instr in sorted(spec.instructions.values(), key=lambda i: i.name not in spec.declared):
        found = _packing_of(instr, spec, data, weight)
        if found is not None:
            ranked.append(found)
    return sorted(ranked, key=lambda pk: (pk.data, pk.weight) != (data, weight))


def _packing_of(instr, spec: ISA, data: str, weight: str) -> Packing | None:
    """The instruction's blocking if it is a dot product into int32 lanes (one reduce index, one written
    int32 register) of two registers that hold ``data`` and ``weight`` elements exactly, else None."""
    if not instr.operands or any(op.kind != "register" for op in instr.operands):
        return None
    sem = instr.typed_semantics()
    reduce = [iv for iv in sem.indices if iv.kind == "reduce"]
    if len(sem.writes) != 1 or len(reduce) != 1:
        return None
    out = instr.operand(sem.writes[0])
    factors = [op.dtype for op in instr.operands if op.dtype != "i32"]
    if out.dtype != "i32" or len(factors) != 2 or not set(factors) <= dtypes.NAMES:
        return None
    factors = [dtypes.dtype(f) for f in factors]
    lanes = int(evaluate_scalar(out.shape[0], spec.params))
    group = int(evaluate_scalar(reduce[0].extent, spec.params))
    want = dtypes.dtype(data), dtypes.dtype(weight)
    if sorted(f.name for f in factors) == sorted(w.name for w in want):
        return Packing(data, weight, lanes, group, instr.name)
    for a, b in (factors, factors[::-1]):
        if _holds(a, want[0]) and _holds(b, want[1]):
            return Packing(a.name, b.name, lanes, group, instr.name)
    return None


def _holds(wide: dtypes.DType, narrow: dtypes.DType) -> bool:
    """Whether every ``narrow`` integer is a ``wide`` one."""
    return wide.is_int and narrow.is_int and wide.min_value <= narrow.min_value and \
        narrow.max_value <= wide.max_value


@dataclass(frozen=True)
class CpuTuning:
    """UNIT's two breaking points (Fig. 7) over the data-parallel loops ``[oc blocks, rows, columns]``.

    The data-parallel loops outside the unrolled tile are, outermost first, conv's ``[batch, oc blocks, rows,
    column tiles]`` or gemm's ``[oc blocks, row tiles]``. ``parallel`` (the first breaking point): how many
    of them, from the outermost, are fused into the one parallel loop; the others run serially.
    ``unroll_oc`` x ``unroll_x`` (the second): the output-channel blocks and columns (gemm: rows) moved
    below the reduction loops and unrolled, each pair one instruction with its own accumulator register.
    ``order`` (PolyDL's loop interchange, empty: the order above): the data-parallel loops outside the tile,
    outermost first, as positions in that order (conv ``(0, 2, 1, 3)``: rows outside the oc blocks);
    ``parallel`` then fuses the first loops of this order. ``k_block`` (a GEMM's; 0: none): the reduction's
    groups of x summed per visit of a tile, BLIS's k_c: a loop over the blocks of K sits just inside the
    parallel loop (``parallel`` 1: the first loop of the order alone), each tile's sums are kept in the
    output between blocks (LLVM holds them in registers within a block), so that a tile's operands over
    one block stay in L2 however long K is. ``stream``: the tile is copied out with non-temporal stores
    (a line written to memory, never read into the caches first), for an output larger than the last
    cache that nothing reads before it leaves them (``tandem.flows.cpu_tuning.streams_output``).
    """

    parallel: int = 3
    unroll_oc: int = 2
    unroll_x: int = 7
    order: tuple[int, ...] = ()
    k_block: int = 0
    stream: bool = False

    def __str__(self) -> str:
        text = f"parallel={self.parallel} unroll_oc={self.unroll_oc} unroll_x={self.unroll_x}"
        text += f" order={','.join(map(str, self.order))}" if self.order else ""
        text += f" k_block={self.k_block}" if self.k_block else ""
        return text + (" stream" if self.stream else "")


@dataclass(frozen=True)
class CpuSchedule:
    """A scheduled operator: the schedule, its arguments, the tuning and the Inspector's verdict."""

    schedule: Schedule
    args: tuple[te.Tensor, ...]
    tuning: CpuTuning
    isa: str
    mapping: Mapping | NotApplicable | None
    packing: Packing | None = None


def _blocks(n: int, size: int) -> int:
    return -(-n // size)


def data_lanes(channels: int, pk: Packing) -> int:
    """The channels of a block of a conv's data (``conv``, ``pack_window``): the packing's output lanes y
    where the channels are a multiple of y and y of its group x (the layout the conv writes its output in,
    NCHW[y]c, so that the next conv reads it as it is; the kernel's reduction runs over the blocks, then
    the groups of x in a block), else the group x (the stem's 3 channels, MobileNet's 24)."""
    if pk.group > 1 and pk.lanes % pk.group == 0 and channels % pk.lanes == 0:
        return pk.lanes
    return pk.group


def conv2d(layer: ConvShape, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *,
           spec: ISA, dtype: str = "uint8", instruction: str | None = None) -> CpuSchedule:
    """The conv2d of ``layer`` on packed, padded data, scheduled by UNIT's rewriter for ``isa``."""
    window = Window((layer.h + 2 * layer.p, layer.w + 2 * layer.p), layer.ic, layer.oc, layer.k, layer.s)
    return conv(window, isa, tuning, spec=spec, dtype=dtype, instruction=instruction)


@dataclass(frozen=True)
class Window:
    """A direct convolution on this CPU, its window read in the kernel (no im2col): ``n`` images of ``ic``
    channels and 1 to 3 zero-padded spatial ``sizes``, ``oc`` output channels, a kernel of ``k`` in every
    spatial dimension, stride ``s``, dilation ``dil``; ``depthwise``: every channel its own kernel
    (``ic == oc``)."""

    sizes: tuple[int, ...]
    ic: int
    oc: int
    k: int
    s: int = 1
    dil: int = 1
    n: int = 1
    depthwise: bool = False
    pixels: bool = False   # output pixels along the last dimension on the lanes (``conv_pixels``)

    @property
    def out(self) -> tuple[int, ...]:
        reach = self.dil * (self.k - 1) + 1
        return tuple((size - reach) // self.s + 1 for size in self.sizes)

    @property
    def macs(self) -> int:
        per_output = self.k ** len(self.sizes) * (1 if self.depthwise else self.ic)
        return self.n * self.oc * math.prod(self.out) * per_output

    def invalid(self) -> str | None:
        """Why this is no convolution, or None."""
        if not 1 <= len(self.sizes) <= 3:
            return f"{len(self.sizes)} spatial dimensions; a window has 1 to 3"
        if min(self.ic, self.oc, self.k, self.s, self.dil, self.n, *self.sizes) < 1:
            return f"a size below 1 in {self}"
        if self.depthwise and self.ic != self.oc:
            return f"a depthwise window has as many outputs as inputs, but ic = {self.ic}, oc = {self.oc}"
        if self.depthwise and len(self.sizes) != 2:
            return "a depthwise window is 2-D"
        if self.depthwise and self.pixels:
            return "a depthwise window has its channels on the lanes"
        if min(self.out) < 1:
            return f"a kernel of {self.k} with dilation {self.dil} reaches past the input {self.sizes}"
        return None


def window_of(op: Contraction) -> tuple[Window, int]:
    """One of TensorIR's convolution kinds (``compiler.ops.contractions``) as direct convolutions: the
    window of one channel group, the batch inside it (channels on the lanes), and how many groups run it (a
    depthwise conv is one window of all its channels)."""
    if op.kind == "batch_matmul":
        raise ScheduleError("cpu: a batch matmul has no window; it runs as GEMMs")
    n, groups, ic, *sizes = op.data.shape
    _, oc, _, *taps = op.weight.shape
    stride, dil = (1, 1) if op.kind == "conv_transpose" else (op.params["S"], op.params["DIL"])
    if op.kind == "depthwise":
        return Window(tuple(sizes), groups, groups, taps[0], stride, dil, n, depthwise=True), 1
    return Window(tuple(sizes), ic, oc, taps[0], stride, dil, n), groups


def conv(window: Window, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *, spec: ISA,
         dtype: str = "uint8", instruction: str | None = None) -> CpuSchedule:
    """A convolution of 1 to 3 spatial dimensions on packed, padded data, scheduled by UNIT's rewriter:
    data ``[N, C/z, *sizes, z]`` (z: ``data_lanes``), kernel ``[K/y, C/x, *[k] * dims, y, x]``, output
    ``[N, K/y, *out, y]``; output channels on the instruction's lanes, input channels its reduction, the
    window read in the kernel. A depthwise window goes to ``depthwise``."""
    why = window.invalid()
    if why:
        raise ScheduleError(f"cpu conv: {why}")
    if window.depthwise:
        return depthwise(window, isa, tuning, spec=spec, dtype=dtype, instruction=instruction)
    if window.pixels:
        return conv_pixels(window, isa, tuning, spec=spec, dtype=dtype, instruction=instruction)
    pk = packing(isa, dtype, spec, instruction)
    c4, k16 = _blocks(window.ic, pk.group), _blocks(window.oc, pk.lanes)
    dims, lanes = len(window.sizes), data_lanes(window.ic, pk)
    per = lanes // pk.group   # groups of x per block of the data: the reduction's blocks, then its groups
    data = te.placeholder((window.n, window.ic // lanes if per > 1 else c4, *window.sizes, lanes), pk.data,
                          name="data")
    kernel = te.placeholder((k16, c4, *[window.k] * dims, pk.lanes, pk.group), pk.weight, name="kernel")
    blocks = [te.reduce_axis(window.ic // lanes, "cb"), te.reduce_axis(per, "cg")] if per > 1 else \
        [te.reduce_axis(c4, "co")]
    ci = te.reduce_axis(pk.group, "ci")
    taps = _taps(window)

    def product(n, ko, *rest):
        xs, ki = rest[:-1], rest[-1]
        block, co, at = (blocks[0], blocks[0] * per + blocks[1], blocks[1] * pk.group + ci) if per > 1 else \
            (blocks[0], blocks[0], ci)
        a = ir.cast(data[(n, block, *_window_index(window, xs, taps), at)], pk.acc)
        return te.sum(a * ir.cast(kernel[(ko, co, *taps, ki, ci)], pk.acc), axis=[*blocks, *taps, ci])

    names = ["n", "ko", *("z", "y", "x")[3 - dims:], "ki"]
    out = te.compute((window.n, k16, *window.out, pk.lanes), product, name="conv", axis_names=names)
    return _unit_schedule(out, (data, kernel, out), isa, pk, tuning or CpuTuning(), spec,
                          outer=tuple(range(dims + 1)), columns=dims + 1, oc=1)


def gemm(m: int, n: int, k: int, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *,
         spec: ISA, dtype: str = "uint8", instruction: str | None = None) -> CpuSchedule:
    """``C[m, n] = sum_k A[m, k] * B[n, k]`` with B packed, scheduled by UNIT's rewriter for ``isa``."""
    pk = packing(isa, dtype, spec, instruction)
    _check_extents("gemm", m, n, k)
    group, lanes = pk.group, pk.lanes
    k4, n16 = _blocks(k, group), _blocks(n, lanes)
    a = te.placeholder((m, k4 * group), pk.data, name="A")
    b = te.placeholder((n16, k4, lanes, group), pk.weight, name="B")
    ko, kk = te.reduce_axis(k4, "ko"), te.reduce_axis(group, "kk")
    out = te.compute(
        (m, n16, lanes),
        lambda i, no, ni: te.sum(
            ir.cast(a[i, ko * group + kk], pk.acc) * ir.cast(b[no, ko, ni, kk], pk.acc), axis=[ko, kk]
        ),
        name="gemm",
    )
    return _unit_schedule(out, (a, b, out), isa, pk, tuning or CpuTuning(), spec, outer=(1,), columns=0,
                          oc=1, streamed=b)


def gemm_t(m: int, n: int, k: int, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *,
           spec: ISA, dtype: str = "uint8", instruction: str | None = None) -> CpuSchedule:
    """The GEMM transposed, ``C^T[n, m] = sum_k B[n, k] * A[m, k]``, for a GEMM of few columns (a transposed
    convolution to RGB): the data's rows fill the instruction's lanes, A packed ``[M/y, K/x, y, x]``, each
    weight group broadcast from B ``[N, K]``, output ``[N, M/y, y]``. Data and weights keep their operands
    (u8 data, s8 weights for vpdpbusd): only which one the lanes walk changes."""
    pk = packing(isa, dtype, spec, instruction)
    _check_extents("gemm_t", m, n, k)
    group, lanes = pk.group, pk.lanes
    k4, m16 = _blocks(k, group), _blocks(m, lanes)
    a = te.placeholder((m16, k4, lanes, group), pk.data, name="A")
    b = te.placeholder((n, k4 * group), pk.weight, name="B")
    ko, kk = te.reduce_axis(k4, "ko"), te.reduce_axis(group, "kk")
    out = te.compute(
        (n, m16, lanes),
        lambda j, mo, mi: te.sum(
            ir.cast(a[mo, ko, mi, kk], pk.acc) * ir.cast(b[j, ko * group + kk], pk.acc), axis=[ko, kk]
        ),
        name="gemm_t",
    )
    return _unit_schedule(out, (a, b, out), isa, pk, tuning or CpuTuning(), spec, outer=(1,), columns=0,
                          oc=1, streamed=a)


def conv_pixels(window: Window, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *, spec: ISA,
                dtype: str = "uint8", instruction: str | None = None) -> CpuSchedule:
    """``conv`` with the output pixels on the lanes, for a convolution of few output channels (a transposed
    conv to RGB): y consecutive outputs along the last dimension, each lane with its own data (with stride
    1 the x channels of y consecutive pixels, one contiguous run of the packed data), each weight group
    broadcast. Data ``[N, C/x, *sizes', x]`` (the last size widened by ``pixels_width`` so that every lane
    of the last block reads inside), kernel ``[K, C/x, *[k] * dims, x]``, output
    ``[N, K, *out[:-1], OW/y, y]``."""
    pk = packing(isa, dtype, spec, instruction)
    group, lanes = pk.group, pk.lanes
    c4, dims = _blocks(window.ic, group), len(window.sizes)
    *front, last = window.out
    sizes = (*window.sizes[:-1], pixels_width(window, lanes))
    data = te.placeholder((window.n, c4, *sizes, group), pk.data, name="data")
    kernel = te.placeholder((window.oc, c4, *[window.k] * dims, group), pk.weight, name="kernel")
    co, ci = te.reduce_axis(c4, "co"), te.reduce_axis(group, "ci")
    taps = _taps(window)

    def product(n, o, *rest):
        *xs, xo, xi = rest
        a = ir.cast(data[(n, co, *_window_index(window, [*xs, xo * lanes + xi], taps), ci)], pk.acc)
        return te.sum(a * ir.cast(kernel[(o, co, *taps, ci)], pk.acc), axis=[co, *taps, ci])

    names = ["n", "o", *("z", "y", "x")[3 - dims:3 - 1], "xo", "xi"]
    shape = (window.n, window.oc, *front, _blocks(last, lanes), lanes)
    out = te.compute(shape, product, name="conv", axis_names=names)
    return _unit_schedule(out, (data, kernel, out), isa, pk, tuning or CpuTuning(), spec,
                          outer=tuple(range(dims + 1)), columns=dims + 1, oc=1)


def _taps(window: Window) -> list:
    """The kernel's reduction iterators, one per spatial dimension."""
    return [te.reduce_axis(window.k, name) for name in ("q", "r", "s")[3 - len(window.sizes):]]


def _window_index(window: Window, xs, taps) -> list:
    """The input position of output ``xs`` at kernel tap ``taps``: x * stride + tap * dilation (factors of 1
    left out, so that a plain conv2d's expression is UNIT's)."""
    st, dil = window.s, window.dil
    return [(x * st if st != 1 else x) + (t * dil if dil != 1 else t) for x, t in zip(xs, taps, strict=True)]


def pixels_width(window: Window, lanes: int) -> int:
    """The last spatial size ``conv_pixels`` reads: every lane of the last output block inside."""
    blocks = _blocks(window.out[-1], lanes)
    return max(window.sizes[-1], (blocks * lanes - 1) * window.s + window.dil * (window.k - 1) + 1)


def depthwise(window: Window, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *, spec: ISA,
              dtype: str = "uint8", instruction: str | None = None) -> CpuSchedule:
    """A depthwise conv2d (every channel its own k x k kernel) with the window read in the kernel:
    channels on the instruction's lanes, each lane with its own data, and a row's taps in groups of x along
    W as the instruction's reduction (taps past k have zero weights). Data ``[N, C/y, Hp, Wq, y]`` (zero
    padded; Wq: the padded width and the columns the last group's extra taps reach), kernel
    ``[C/y, k, ceil(k/x), y, x]``, output ``[N, C/y, OH, OW, y]``. With dilation 1 an operand is x
    consecutive pixels of y channels, one contiguous run, shuffled into lane order (vpermb on x86)."""
    pk = packing(isa, dtype, spec, instruction)
    group, lanes = pk.group, pk.lanes
    (hp, wp), k, s, dil = window.sizes, window.k, window.s, window.dil
    c16, taps = _blocks(window.oc, lanes), _blocks(k, group)
    data = te.placeholder((window.n, c16, hp, depthwise_width(wp, k, dil, group), lanes), pk.data,
                          name="data")
    kernel = te.placeholder((c16, k, taps, lanes, group), pk.weight, name="kernel")
    r, so, t = te.reduce_axis(k, "r"), te.reduce_axis(taps, "so"), te.reduce_axis(group, "t")

    def product(n, cb, y, x, ci):
        a = ir.cast(data[n, cb, y * s + r * dil, x * s + (so * group + t) * dil, ci], pk.acc)
        return te.sum(a * ir.cast(kernel[cb, r, so, ci, t], pk.acc), axis=[r, so, t])

    out = te.compute((window.n, c16, *window.out, lanes), product, name="depthwise")
    return _unit_schedule(
        out, (data, kernel, out), isa, pk, tuning or CpuTuning(), spec, outer=(0, 1, 2), columns=3, oc=1
    )


def depthwise_width(wp: int, k: int, dil: int, group: int) -> int:
    """The packed width of a depthwise conv's data: the padded width and the columns that the last tap
    group's taps past ``k`` (zero weights) reach."""
    return wp + (_blocks(k, group) * group - k) * dil


def _check_extents(name: str, m: int, n: int, k: int) -> None:
    for key, value in (("M", m), ("N", n), ("K", k)):
        if not isinstance(value, int) or value < 1:
            raise ScheduleError(f"{name}: {key} must be a positive int, but got {value!r}")


def _unit_schedule(
    out: te.Tensor, args, isa: str, pk: Packing, tuning: CpuTuning, spec: ISA, outer: tuple[int, ...],
    columns: int, oc: int, streamed: te.Tensor | None = None
) -> CpuSchedule:
    """UNIT's rewriter: tile the mapped loops innermost and mark them, then place the others (Fig. 7).

    ``outer``: the positions of the output's data-parallel loops outside the unrolled ones, outermost first;
    ``columns`` and ``oc`` the loops whose inner parts are unrolled below the reduction. The reduction runs
    into a local accumulator tile (``cache_write``), one tile per iteration of the serial loops, so that
    LLVM keeps the tile's instructions' accumulators in registers; the tile is then copied out.

    ``streamed``: the operand that the ``oc`` loop walks tile by tile (a GEMM's packed weights), whose next
    tile is prefetched a line at a time through the reduction (``Stage.prefetch``): read cold from memory,
    a tile's first row pass would wait for it (measured on AMD EPYC znver5, 1 thread, BERT's 128 x 3072 x
    768 with its caches flushed between calls: 706 us, prefetched 609 us; 588 us warm). Not for a conv:
    prefetching a 3x3 conv's next weights measured 5-8% slower warm and cold, and ResNet-50's 1x1 convs,
    though 5-15% faster flushed on 1 thread, made the whole network's kernels 5% slower on 2.
    """
    if tuning.parallel < 1 or tuning.unroll_oc < 1 or tuning.unroll_x < 1 or tuning.k_block < 0:
        raise ScheduleError(f"cpu: bad tuning {tuning}: every field must be positive")
    if tuning.k_block and tuning.stream:
        raise ScheduleError(f"cpu: bad tuning {tuning}: stream stores a tile's copy-out past the caches, and "
                            f"a tile blocked in K (k_block) sums into its output in place, read again")
    if tuning.k_block and (outer != (1,) or tuning.parallel != 1):
        raise ScheduleError(f"cpu: bad tuning {tuning}: k_block blocks a GEMM's reduction, inside a parallel "
                            f"loop of one loop (parallel=1)")
    sch = create_schedule(out)
    if tuning.k_block:
        return _k_blocked(sch, out, args, isa, pk, tuning, spec)
    acc = sch.cache_write(out, "local")
    mapping = _mapping(acc.op, spec, pk)
    lanes, group = acc.op.axis[-1], acc.op.reduce_axis[-1]
    stage, axes = sch[out], out.op.axis
    oc_o, oc_i = stage.split(axes[oc], min(tuning.unroll_oc, axes[oc].extent))
    x_o, x_i = stage.split(axes[columns], min(tuning.unroll_x, axes[columns].extent))
    loops = _ordered([oc_o if k == oc else x_o if k == columns else axes[k] for k in (*outer, columns)],
                     tuning)
    stage.reorder(*loops, oc_i, x_i, axes[-1])
    parallel = min(tuning.parallel, len(loops))
    fused = stage.fuse(*loops[:parallel]) if parallel > 1 else loops[0]
    stage.parallel(fused)
    stage.vectorize(axes[-1])
    if tuning.stream:   # the copy-out nest: a full-line vector store per lane loop, past the caches
        stage.pragma(oc_i, "nontemporal")
    tile = loops[-1] if parallel < len(loops) else fused
    sch[acc].compute_at(stage, tile)
    inner = sch[acc]
    a_axes = acc.op.axis
    rest = [a for k, a in enumerate(a_axes[:-1]) if k not in (oc, columns)]
    tile_loops = (a_axes[oc], a_axes[columns], *_lane_loops(pk, lanes, group))
    inner.reorder(*rest, *acc.op.reduce_axis[:-1], *tile_loops)
    if streamed is not None:   # the next oc tile: oc_o's next iteration, within a fused loop its stride
        step = 1 if oc_o not in loops[:parallel] or parallel == 1 else \
            math.prod(stage.extent_of(loop) for loop in loops[loops.index(oc_o) + 1:parallel])
        inner.prefetch(streamed, acc.op.reduce_axis[0], oc_o if parallel == 1 or oc_o not in
                       loops[:parallel] else fused, step)
    _mark_tile(inner, a_axes[oc], a_axes[columns], lanes, group, acc.op.reduce_axis[0], pk, isa)
    return CpuSchedule(sch, tuple(args), tuning, isa, mapping, pk)


def _mapping(op: te.ComputeOp, spec: ISA, pk: Packing) -> Mapping | None:
    """The Inspector's mapping of ``pk``'s instruction onto ``op`` (None untensorized), which must be the
    packed lane and group loops (ScheduleError otherwise)."""
    mapping = inspect_op(op, spec, pk.instruction) if pk.instruction else None
    if isinstance(mapping, NotApplicable):
        raise ScheduleError(f"cpu: {mapping}")
    lanes, group = op.axis[-1], op.reduce_axis[-1]
    if mapping is not None and (
        mapping.loops["i"].var is not lanes.var or mapping.loops["j"].var is not group.var
    ):
        raise ScheduleError(f"cpu: the Inspector mapped {mapping}, not the packed lane and group loops")
    return mapping


def _ordered(loops: list, tuning: CpuTuning) -> list:
    """The outer loops in ``tuning.order`` (ScheduleError unless it is a permutation of them)."""
    if not tuning.order:
        return loops
    if sorted(tuning.order) != list(range(len(loops))):
        raise ScheduleError(f"cpu: bad tuning {tuning}: order must be a permutation of 0.."
                            f"{len(loops) - 1}, the loops {', '.join(a.var.name for a in loops)}")
    return [loops[k] for k in tuning.order]


def _lane_loops(pk: Packing, lanes, group) -> tuple:
    """The instruction's lanes, then its group; a group of one (float32: one product per lane) goes outside,
    so that the lanes are the innermost loop, one straight-line vector statement."""
    return (group, lanes) if pk.group == 1 and not pk.instruction else (lanes, group)


def _mark_tile(stage, oc, x, lanes, group, reduction, pk: Packing, isa: str) -> None:
    """The unrolled tile of ``oc`` x ``x`` instructions: the lanes tensorized with ``pk``'s instruction (or
    vectorized), and where the sums are float, each multiply and add free to fuse into one FMA inside
    ``reduction``."""
    stage.unroll(oc)
    stage.unroll(x)
    if pk.instruction:
        stage.tensorize(lanes, pk.instruction)
    elif isa in VECTORIZED:
        stage.unroll(group)
        stage.vectorize(lanes)
    if dtypes.dtype(pk.acc).is_float:   # one rounding per FMA
        stage.pragma(reduction, "fp_contract")


def _k_blocked(sch: Schedule, out: te.Tensor, args, isa: str, pk: Packing, tuning: CpuTuning, spec: ISA
               ) -> CpuSchedule:
    """A GEMM's ``_unit_schedule`` with its reduction in blocks of ``tuning.k_block`` groups (BLIS's k_c
    loop): [the parallel loop, K blocks, the other outer loop, the block's groups, the unrolled tile]. The
    tile sums into the output itself (its init nest zeroes it first): within a block its loads and stores
    do not depend on the reduction loop, so LLVM keeps them in registers across it (LICM; the backend
    gives it indices it can bound and compare, ``compiler.backend.llvm_emit``). Measured on AMD EPYC
    znver5, 1 thread, PolyDL's long-K GEMM, 1024 x 1024 x 32768: 89-95% of the vpdpbusd peak in blocks of
    1024 or 2048 groups, 71% unblocked."""
    mapping = _mapping(out.op, spec, pk)
    stage, (rows, blocks, lanes) = sch[out], out.op.axis
    ko, group = out.op.reduce_axis
    oc_o, oc_i = stage.split(blocks, min(tuning.unroll_oc, blocks.extent))
    x_o, x_i = stage.split(rows, min(tuning.unroll_x, rows.extent))
    k_o, k_i = stage.split(ko, min(tuning.k_block, ko.extent))
    loops = _ordered([oc_o, x_o], tuning)
    stage.reorder(loops[0], k_o, loops[1], k_i, oc_i, x_i, *_lane_loops(pk, lanes, group))
    stage.parallel(loops[0])
    _mark_tile(stage, oc_i, x_i, lanes, group, k_i, pk, isa)
    return CpuSchedule(sch, tuple(args), tuning, isa, mapping, pk)


# -------------------------------------------------------------------------------------------- numpy side


def pack_conv(data: np.ndarray, kernel: np.ndarray, layer: ConvShape, pk: Packing = U8, fill: int = 0,
              blocked: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """NCHW data and OIHW kernel -> NCHW[z]c data padded by the layer's ``p`` with ``fill`` (a quantized
    input's zero point: the value that stands for 0.0) and KCRS[y]k[x]c kernel (zeros fill the channels);
    ``blocked``: z (None: ``data_lanes``, ``conv``'s)."""
    return pack_window(data, kernel, pk, layer.p, fill, blocked)


def pack_window(data: np.ndarray, kernel: np.ndarray, pk: Packing = U8, pad: int = 0, fill: int = 0,
                blocked: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``[N, C, *sizes]`` data and ``[O, C, *k]`` kernels -> ``conv``'s ``[N, C/z, *sizes + 2 pad, z]`` (the
    data written once into its blocks of z = ``blocked`` channels, ``data_lanes`` by default, bordered by
    ``pad`` elements of ``fill`` on every spatial side) and ``[O/y, C/x, *k, y, x]`` (zeros fill the
    channels)."""
    group, lanes = pk.group, pk.lanes
    (n, c, *sizes), (o, _, *taps) = data.shape, kernel.shape
    c4, k16, dims = _blocks(c, group), _blocks(o, lanes), len(sizes)
    block = blocked or data_lanes(c, pk)
    padded = [size + 2 * pad for size in sizes]
    packed_data = np.empty((n, _blocks(c, block), *padded, block), pk.data)
    for axis in range(2, 2 + dims) if pad else ():   # the border, alone: every element is written once
        edge = [slice(None)] * packed_data.ndim
        for side in (slice(0, pad), slice(-pad, None)):
            edge[axis] = side
            packed_data[tuple(edge)] = fill
    inside = packed_data[(slice(None),) * 2 + tuple(slice(pad, pad + s) for s in sizes)]
    if c % block:   # the last block's channels past C hold the fill: they meet the kernel's zero channels
        inside[:, -1] = fill
    to_blocks(inside, data, block)
    w = np.zeros((k16 * lanes, c4 * group, *taps), pk.weight)
    w[:o, :c] = kernel
    packed = w.reshape(k16, lanes, c4, group, *taps).transpose(0, 2, *range(4, 4 + dims), 1, 3)
    return packed_data, np.ascontiguousarray(packed)


def pack_pixels(data: np.ndarray, kernel: np.ndarray, window: Window, pk: Packing = U8
                ) -> tuple[np.ndarray, np.ndarray]:
    """Padded ``[N, C, *sizes]`` data and ``[O, C, *k]`` kernels -> ``conv_pixels``'s ``[N, C/x, *sizes', x]``
    (the last size widened with zeros) and ``[O, C/x, *k, x]``."""
    group = pk.group
    (n, c, *sizes), (o, _, *taps) = data.shape, kernel.shape
    c4, dims = _blocks(c, group), len(sizes)
    d = np.zeros((n, c4 * group, *sizes[:-1], pixels_width(window, pk.lanes)), pk.data)
    d[:, :c, ..., : sizes[-1]] = data
    packed_data = d.reshape(n, c4, group, *d.shape[2:]).transpose(0, 1, *range(3, 3 + dims), 2)
    w = np.zeros((o, c4 * group, *taps), pk.weight)
    w[:, :c] = kernel
    packed = w.reshape(o, c4, group, *taps).transpose(0, 1, *range(3, 3 + dims), 2)
    return np.ascontiguousarray(packed_data), np.ascontiguousarray(packed)


def unpack_pixels(out: np.ndarray, ow: int) -> np.ndarray:
    """``[N, K, *out[:-1], OW/y, y]`` -> ``[N, K, *out]`` (the lanes past OW dropped)."""
    return out.reshape(*out.shape[:-2], -1)[..., :ow]


def pack_depthwise(data: np.ndarray, kernel: np.ndarray, k: int, dil: int, pk: Packing = U8
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Padded ``[N, C, Hp, Wp]`` data and ``[C, k, k]`` kernels -> ``depthwise``'s ``[N, C/y, Hp, Wq, y]``
    and ``[C/y, k, ceil(k/x), y, x]`` (zeros fill)."""
    group, lanes = pk.group, pk.lanes
    n, c, hp, wp = data.shape
    c16, taps = _blocks(c, lanes), _blocks(k, group)
    packed_data = np.zeros((n, c16, hp, depthwise_width(wp, k, dil, group), lanes), pk.data)
    to_blocks(packed_data[..., :wp, :], data, lanes)
    w = np.zeros((c16 * lanes, k, taps * group), pk.weight)
    w[: kernel.shape[0], :, :k] = kernel   # (c channels; none where only the data is packed)
    packed = w.reshape(c16, lanes, k, taps, group).transpose(0, 2, 3, 1, 4)
    return packed_data, np.ascontiguousarray(packed)


def unpack_conv(out: np.ndarray, layer: ConvShape) -> np.ndarray:
    """``[1, K/y, OH, OW, y]`` -> NCHW ``[1, K, OH, OW]`` (padding channels dropped)."""
    return unpack_window(out, layer.oc)


def unpack_window(out: np.ndarray, oc: int) -> np.ndarray:
    """``[N, K/y, *out, y]`` -> ``[N, K, *out]`` (padding channels dropped)."""
    n, k16, *sizes, lanes = out.shape
    plain = np.empty((n, oc, *sizes), out.dtype)
    for j in range(min(lanes, oc)):   # lane by lane, as ``to_blocks`` writes them
        plain[:, j::lanes] = out[:, : len(range(j, oc, lanes)), ..., j]
    return plain


def to_blocks(blocked: np.ndarray, plain: np.ndarray, group: int) -> None:
    """Write ``plain`` ``[N, C, ...]`` into ``blocked`` ``[N, C/group, ..., group]``: channel
    ``b * group + j`` at block ``b``, lane ``j``; lane by lane, each a copy of whole rows (numpy's fast
    loop, where moving the channel axis innermost in one copy scatters every element). Lanes past C are
    left as they are."""
    c = plain.shape[1]
    for j in range(min(group, c)):
        blocked[:, : len(range(j, c, group)), ..., j] = plain[:, j::group]


#: an unsigned integer type of each size: a group of narrow elements moved as one wide one (``reblock``)
_UNITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def reblock(src: np.ndarray, dst: np.ndarray, offset: int = 0) -> None:
    """Write the blocked ``src`` ``[N, B, *sizes, L]`` (a kernel's output: channel ``b * L + j`` at block
    ``b``, lane ``j``, each value in a wider integer) into the blocked ``dst`` ``[N, D, *sizes, G]`` (a next
    kernel's data, or the inside of its padded data), each value plus ``offset`` in ``dst``'s type: channel
    ``c`` at block ``c // G``, lane ``c % G``, for the first ``D * G`` channels. ``G`` must divide ``L``:
    ``dst``'s block ``b * L / G + i`` is then ``src``'s block ``b``, lanes ``i * G`` to ``(i + 1) * G``, moved
    as one element of ``G`` times the width (``to_blocks``'s lane-by-lane copy, on a quarter as many
    elements for u8 x s8's G = 4). Lanes past the tensor's channels carry whatever ``src`` holds there."""
    lanes, group, blocks = src.shape[-1], dst.shape[-1], dst.shape[1]
    unit = _UNITS.get(group * dst.itemsize)
    if lanes % group or (unit is None and lanes != group) or src.shape[2:-1] != dst.shape[2:-1] or \
            blocks * group > src.shape[1] * lanes:
        raise ValueError(f"reblock: {list(src.shape)} does not regroup into {list(dst.shape)} (the group "
                         f"must divide the lanes, the sizes agree and the source hold every block)")
    if lanes == group:   # the same blocks: one pass
        moved(src[:, :blocks], offset, dst)
        return
    same = offset == 0 and src.dtype == dst.dtype
    narrowed = src if same else moved(src, offset, np.empty(src.shape, dst.dtype))
    units, into = narrowed.view(unit), dst.view(unit)[..., 0]   # [N, B, *sizes, L / G] and [N, D, *sizes]
    per = lanes // group
    for i in range(per):
        into[:, i::per] = units[:, : len(range(i, blocks, per)), ..., i]


def moved(src: np.ndarray, offset: int, out: np.ndarray) -> np.ndarray:
    """``src + offset`` written into ``out`` (of ``out``'s type, which holds every sum) and returned: 8-bit
    into 8-bit in one pass modulo 256 (the same bits as the sum's: an int8 moved to uint8 by 128 is its bits
    with the top one flipped)."""
    if src.dtype.itemsize == out.dtype.itemsize == 1:
        np.add(src.view(out.dtype), np.array(offset % 256, np.uint8).view(out.dtype), out=out)
    elif offset == 0:
        np.copyto(out, src, casting="unsafe")
    else:
        np.copyto(out, src.astype(np.int32) + offset, casting="unsafe")
    return out


def pack_gemm(a: np.ndarray, b: np.ndarray, pk: Packing = U8) -> tuple[np.ndarray, np.ndarray]:
    """``A[M, K]`` and ``B[N, K]`` -> A with K padded to x and B as ``[N/y, K/x, y, x]``."""
    (m, k), n = a.shape, b.shape[0]
    group, lanes = pk.group, pk.lanes
    k4, n16 = _blocks(k, group), _blocks(n, lanes)
    pa = np.zeros((m, k4 * group), pk.data)
    pa[:, :k] = a
    pb = np.zeros((n16 * lanes, k4 * group), pk.weight)
    pb[:n, :k] = b
    return pa, np.ascontiguousarray(pb.reshape(n16, lanes, k4, group).transpose(0, 2, 1, 3))


def pack_columns(b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``b[..., K, N]`` (a GEMM's second operand as a MatMul holds it, columns its output channels) into
    ``out[..., N/y, K/x, y, x]`` (``pack_gemm``'s weights of each leading index, K and N multiples of x
    and y): each group of x values of a column gathered into one x-element word by shifts and ors over
    whole rows, then whole words moved (numpy's strided byte moves cost 2.4x more)."""
    *lead, k, n = b.shape
    y, x = out.shape[-2:]
    word = np.dtype(f"u{x * b.itemsize}")
    columns = np.swapaxes(b, -1, -2)   # [..., N, K]
    if columns.strides[-1] == b.itemsize:   # a transposed view whose groups are words already: move them
        words = columns.view(word)
        np.copyto(out.view(word).reshape(*lead, n // y, k // x, y),
                  np.swapaxes(words.reshape(*lead, n // y, y, k // x), -1, -2))
        return out
    unsigned = b.view(f"u{b.itemsize}").reshape(*lead, k // x, x, n)
    words = unsigned[..., x - 1, :].astype(word)
    for j in range(x - 2, -1, -1):
        np.left_shift(words, 8 * b.itemsize, out=words)
        np.bitwise_or(words, unsigned[..., j, :], out=words)
    grouped = words.reshape(*lead, k // x, n // y, y)
    np.copyto(out.view(word).reshape(*lead, n // y, k // x, y), np.swapaxes(grouped, -3, -2))
    return out


def pack_gemm_t(a: np.ndarray, b: np.ndarray, pk: Packing = U8) -> tuple[np.ndarray, np.ndarray]:
    """``A[M, K]`` and ``B[N, K]`` -> A as ``[M/y, K/x, y, x]`` and B with K padded to x (zeros fill)."""
    packed_b, packed_a = pack_gemm(b, a, Packing(pk.weight, pk.data, pk.lanes, pk.group))
    return packed_a, packed_b


def unpack_gemm_t(out: np.ndarray, m: int) -> np.ndarray:
    """``[N, M/y, y]`` -> ``[M, N]``."""
    return out.reshape(out.shape[0], -1)[:, :m].T


def unpack_gemm(out: np.ndarray, n: int) -> np.ndarray:
    """``[M, N/y, y]`` -> ``[M, N]``."""
    return out.reshape(out.shape[0], -1)[:, :n]
