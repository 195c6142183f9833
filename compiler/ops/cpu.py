"""Integer conv2d and GEMM for the CPU, scheduled as UNIT schedules a tensorized instruction (Sec. III.C).

Operators (batch 1, int32 results) of three element types: ``uint8`` (u8 activations x s8 weights,
vpdpbusd's), ``int8`` (s8 x s8, ARM's sdot's) and ``int16`` (int16 x int16, vpdpwssd's where a spec has it),
in the layouts UNIT uses (Sec. VI: data NCHW[x]c, kernel KCRS[y]k[x]c, with x the instruction's reduction
width and y its output lanes: 4 and 16 for vpdpbusd, 4 and 4 for sdot's 128-bit form, 2 and 16 for
vpdpwssd; ``Packing``):
- ``conv2d``: data ``[1, C/x, H + 2p, W + 2p, x]`` (already padded, as UNIT's graph-level padding leaves
  it; Table I's input sizes include the padding), kernel ``[K/y, C/x, R, S, y, x]``, output
  ``[1, K/y, OH, OW, y]``; channels are padded with zeros to multiples of x and y by ``pack_conv``;
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
tensorized instruction: the 16 output lanes are a vectorized loop of 32-bit multiply-adds), ``none``
(scalar loops; LLVM may still vectorize them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ops.nn import ConvShape
from compiler.passes.inspector import Mapping, NotApplicable, inspect_op
from compiler.schedule import Schedule, create_schedule
from isa import ISA
from isa.lang.scalar import evaluate as evaluate_scalar

ISAS = ("x86-vnni", "arm-dot", "x86-avx512", "none")
#: the isas that tensorize onto the spec's dot-product instruction (UNIT's names for x86 and ARM)
TENSORIZED = ("x86-vnni", "arm-dot")
#: the operator's element types: data (activations) and weights
DTYPES = {"uint8": ("uint8", "int8"), "int8": ("int8", "int8"), "int16": ("int16", "int16")}
LANES = 16   # int32 outputs per 512-bit register, the blocking of the untensorized schedules


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


U8 = Packing("uint8", "int8", LANES, 4)   # the layout of u8 x s8 operators (vpdpbusd's), the default


def packing(isa: str, dtype: str, spec: ISA) -> Packing:
    """The blocking of ``dtype``'s operators under ``isa``: for a tensorized isa (``x86-vnni``,
    ``arm-dot``), that of the first instruction of ``spec`` whose semantics sum ``dtype``'s products into
    int32 register lanes, with its lane count and reduction width read from its operands and indices."""
    if isa not in ISAS:
        raise ScheduleError(f"cpu: unknown isa {isa!r}; expected one of {', '.join(ISAS)}")
    if dtype not in DTYPES:
        raise ScheduleError(f"cpu: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    data, weight = DTYPES[dtype]
    if isa not in TENSORIZED:
        return Packing(data, weight, LANES, 32 // dtypes.dtype(data).bits)
    for instr in spec.instructions.values():
        found = _packing_of(instr, spec, data, weight)
        if found is not None:
            return found
    raise ScheduleError(f"cpu: the spec {spec.source} has no instruction that sums {data} x {weight} "
                        f"products into int32 register lanes (its instructions: "
                        f"{', '.join(spec.instructions)}); use an untensorized isa (x86-avx512, none) or "
                        f"another dtype, or a spec that adds one")


def _packing_of(instr, spec: ISA, data: str, weight: str) -> Packing | None:
    """The instruction's blocking if it is a dot product of ``data`` x ``weight`` registers into int32
    lanes (one reduce index, one written int32 register), else None."""
    if not instr.operands or any(op.kind != "register" for op in instr.operands):
        return None
    sem = instr.typed_semantics()
    reduce = [iv for iv in sem.indices if iv.kind == "reduce"]
    if len(sem.writes) != 1 or len(reduce) != 1:
        return None
    out = instr.operand(sem.writes[0])
    factors = sorted(op.dtype for op in instr.operands if op.dtype != "i32")
    if out.dtype != "i32" or factors != sorted((dtypes.dtype(data).short, dtypes.dtype(weight).short)):
        return None
    lanes = int(evaluate_scalar(out.shape[0], spec.params))
    group = int(evaluate_scalar(reduce[0].extent, spec.params))
    return Packing(data, weight, lanes, group, instr.name)


@dataclass(frozen=True)
class CpuTuning:
    """UNIT's two breaking points (Fig. 7) over the data-parallel loops ``[oc blocks, rows, columns]``.

    The data-parallel loops outside the unrolled tile are, outermost first, conv's ``[batch, oc blocks, rows,
    column tiles]`` or gemm's ``[oc blocks, row tiles]``. ``parallel`` (the first breaking point): how many
    of them, from the outermost, are fused into the one parallel loop; the others run serially.
    ``unroll_oc`` x ``unroll_x`` (the second): the output-channel blocks and columns (gemm: rows) moved
    below the reduction loops and unrolled, each pair one instruction with its own accumulator register.
    """

    parallel: int = 3
    unroll_oc: int = 2
    unroll_x: int = 7

    def __str__(self) -> str:
        return f"parallel={self.parallel} unroll_oc={self.unroll_oc} unroll_x={self.unroll_x}"


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


def conv2d(layer: ConvShape, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *,
           spec: ISA, dtype: str = "uint8") -> CpuSchedule:
    """The conv2d of ``layer`` on packed, padded data, scheduled by UNIT's rewriter for ``isa``."""
    pk = packing(isa, dtype, spec)
    c4, k16 = _blocks(layer.ic, pk.group), _blocks(layer.oc, pk.lanes)
    hp, wp = layer.h + 2 * layer.p, layer.w + 2 * layer.p
    data = te.placeholder((1, c4, hp, wp, pk.group), pk.data, name="data")
    kernel = te.placeholder((k16, c4, layer.k, layer.k, pk.lanes, pk.group), pk.weight, name="kernel")
    co, r, s, ci = (
        te.reduce_axis(c4, "co"),
        te.reduce_axis(layer.k, "r"),
        te.reduce_axis(layer.k, "s"),
        te.reduce_axis(pk.group, "ci"),
    )
    st = layer.s

    def product(n, ko, y, x, ki):
        row, col = (y * st, x * st) if st != 1 else (y, x)
        a = ir.cast(data[n, co, row + r, col + s, ci], "int32")
        return te.sum(a * ir.cast(kernel[ko, co, r, s, ki, ci], "int32"), axis=[co, r, s, ci])

    out = te.compute((1, k16, layer.oh, layer.ow, pk.lanes), product, name="conv")
    return _unit_schedule(
        out, (data, kernel, out), isa, pk, tuning or CpuTuning(), spec, outer=(0, 1, 2), columns=3, oc=1
    )


def gemm(m: int, n: int, k: int, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *,
         spec: ISA, dtype: str = "uint8") -> CpuSchedule:
    """``C[m, n] = sum_k A[m, k] * B[n, k]`` with B packed, scheduled by UNIT's rewriter for ``isa``."""
    pk = packing(isa, dtype, spec)
    _check_extents("gemm", m, n, k)
    group, lanes = pk.group, pk.lanes
    k4, n16 = _blocks(k, group), _blocks(n, lanes)
    a = te.placeholder((m, k4 * group), pk.data, name="A")
    b = te.placeholder((n16, k4, lanes, group), pk.weight, name="B")
    ko, kk = te.reduce_axis(k4, "ko"), te.reduce_axis(group, "kk")
    out = te.compute(
        (m, n16, lanes),
        lambda i, no, ni: te.sum(
            ir.cast(a[i, ko * group + kk], "int32") * ir.cast(b[no, ko, ni, kk], "int32"), axis=[ko, kk]
        ),
        name="gemm",
    )
    return _unit_schedule(out, (a, b, out), isa, pk, tuning or CpuTuning(), spec, outer=(1,), columns=0,
                          oc=1)


def gemm_t(m: int, n: int, k: int, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *,
           spec: ISA, dtype: str = "uint8") -> CpuSchedule:
    """The GEMM transposed, ``C^T[n, m] = sum_k B[n, k] * A[m, k]``, for a GEMM of few columns (a transposed
    convolution to RGB): the data's rows fill the instruction's lanes, A packed ``[M/y, K/x, y, x]``, each
    weight group broadcast from B ``[N, K]``, output ``[N, M/y, y]``. Data and weights keep their operands
    (u8 data, s8 weights for vpdpbusd): only which one the lanes walk changes."""
    pk = packing(isa, dtype, spec)
    _check_extents("gemm_t", m, n, k)
    group, lanes = pk.group, pk.lanes
    k4, m16 = _blocks(k, group), _blocks(m, lanes)
    a = te.placeholder((m16, k4, lanes, group), pk.data, name="A")
    b = te.placeholder((n, k4 * group), pk.weight, name="B")
    ko, kk = te.reduce_axis(k4, "ko"), te.reduce_axis(group, "kk")
    out = te.compute(
        (n, m16, lanes),
        lambda j, mo, mi: te.sum(
            ir.cast(a[mo, ko, mi, kk], "int32") * ir.cast(b[j, ko * group + kk], "int32"), axis=[ko, kk]
        ),
        name="gemm_t",
    )
    return _unit_schedule(out, (a, b, out), isa, pk, tuning or CpuTuning(), spec, outer=(1,), columns=0,
                          oc=1)


def lanewise_dot(m: int, n: int, k: int, isa: str = "x86-vnni", tuning: CpuTuning | None = None, *,
                 spec: ISA, dtype: str = "uint8") -> CpuSchedule:
    """``C[m, n] = sum_k A[m, n, k] * B[n, k]``, every lane n with its own data (TensorIR's DEP: a depthwise
    convolution's channels), A packed ``[M, N/y, K/x, y, x]``, B ``[N/y, K/x, y, x]``, output ``[M, N/y, y]``:
    gemm's UNIT schedule, the instruction's data operand a vector of its own instead of a broadcast."""
    pk = packing(isa, dtype, spec)
    _check_extents("lanewise_dot", m, n, k)
    group, lanes = pk.group, pk.lanes
    k4, n16 = _blocks(k, group), _blocks(n, lanes)
    a = te.placeholder((m, n16, k4, lanes, group), pk.data, name="A")
    b = te.placeholder((n16, k4, lanes, group), pk.weight, name="B")
    ko, kk = te.reduce_axis(k4, "ko"), te.reduce_axis(group, "kk")
    out = te.compute(
        (m, n16, lanes),
        lambda i, no, ni: te.sum(
            ir.cast(a[i, no, ko, ni, kk], "int32") * ir.cast(b[no, ko, ni, kk], "int32"), axis=[ko, kk]
        ),
        name="dot",
    )
    return _unit_schedule(out, (a, b, out), isa, pk, tuning or CpuTuning(), spec, outer=(1,), columns=0,
                          oc=1)


def _check_extents(name: str, m: int, n: int, k: int) -> None:
    for key, value in (("M", m), ("N", n), ("K", k)):
        if not isinstance(value, int) or value < 1:
            raise ScheduleError(f"{name}: {key} must be a positive int, but got {value!r}")


def _unit_schedule(
    out: te.Tensor, args, isa: str, pk: Packing, tuning: CpuTuning, spec: ISA, outer: tuple[int, ...],
    columns: int, oc: int
) -> CpuSchedule:
    """UNIT's rewriter: tile the mapped loops innermost and mark them, then place the others (Fig. 7).

    ``outer``: the positions of the output's data-parallel loops outside the unrolled ones, outermost first;
    ``columns`` and ``oc`` the loops whose inner parts are unrolled below the reduction. The reduction runs
    into a local accumulator tile (``cache_write``), one tile per iteration of the serial loops, so that
    LLVM keeps the tile's instructions' accumulators in registers; the tile is then copied out.
    """
    if tuning.parallel < 1 or tuning.unroll_oc < 1 or tuning.unroll_x < 1:
        raise ScheduleError(f"cpu: bad tuning {tuning}: every field must be positive")
    sch = create_schedule(out)
    acc = sch.cache_write(out, "local")
    instruction = pk.instruction
    mapping = inspect_op(acc.op, spec, instruction) if instruction else None
    if isinstance(mapping, NotApplicable):
        raise ScheduleError(f"cpu: {mapping}")
    lanes, group = acc.op.axis[-1], acc.op.reduce_axis[-1]
    if mapping is not None and (
        mapping.loops["i"].var is not lanes.var or mapping.loops["j"].var is not group.var
    ):
        raise ScheduleError(f"cpu: the Inspector mapped {mapping}, not the packed lane and group loops")
    stage, axes = sch[out], out.op.axis
    oc_o, oc_i = stage.split(axes[oc], min(tuning.unroll_oc, axes[oc].extent))
    x_o, x_i = stage.split(axes[columns], min(tuning.unroll_x, axes[columns].extent))
    loops = [oc_o if k == oc else x_o if k == columns else axes[k] for k in (*outer, columns)]
    stage.reorder(*loops, oc_i, x_i, axes[-1])
    parallel = min(tuning.parallel, len(loops))
    fused = stage.fuse(*loops[:parallel]) if parallel > 1 else loops[0]
    stage.parallel(fused)
    stage.vectorize(axes[-1])
    tile = loops[-1] if parallel < len(loops) else fused
    sch[acc].compute_at(stage, tile)
    inner = sch[acc]
    a_axes = acc.op.axis
    rest = [a for k, a in enumerate(a_axes[:-1]) if k not in (oc, columns)]
    inner.reorder(*rest, *acc.op.reduce_axis[:-1], a_axes[oc], a_axes[columns], lanes, group)
    inner.unroll(a_axes[oc])
    inner.unroll(a_axes[columns])
    if instruction:
        inner.tensorize(lanes, instruction)
    elif isa == "x86-avx512":
        inner.unroll(group)
        inner.vectorize(lanes)
    return CpuSchedule(sch, tuple(args), tuning, isa, mapping, pk)


# -------------------------------------------------------------------------------------------- numpy side


def pack_conv(data: np.ndarray, kernel: np.ndarray, layer: ConvShape, pk: Packing = U8
              ) -> tuple[np.ndarray, np.ndarray]:
    """NCHW data and OIHW kernel -> padded NCHW[x]c data and KCRS[y]k[x]c kernel (zeros fill)."""
    group, lanes = pk.group, pk.lanes
    c4, k16 = _blocks(layer.ic, group), _blocks(layer.oc, lanes)
    p = layer.p
    d = np.zeros((1, c4 * group, layer.h + 2 * p, layer.w + 2 * p), pk.data)
    d[:, : layer.ic, p : p + layer.h, p : p + layer.w] = data
    packed_data = np.ascontiguousarray(d.reshape(1, c4, group, *d.shape[2:]).transpose(0, 1, 3, 4, 2))
    w = np.zeros((k16 * lanes, c4 * group, layer.k, layer.k), pk.weight)
    w[: layer.oc, : layer.ic] = kernel
    packed = w.reshape(k16, lanes, c4, group, layer.k, layer.k).transpose(0, 2, 4, 5, 1, 3)
    return packed_data, np.ascontiguousarray(packed)


def unpack_conv(out: np.ndarray, layer: ConvShape) -> np.ndarray:
    """``[1, K/y, OH, OW, y]`` -> NCHW ``[1, K, OH, OW]`` (padding channels dropped)."""
    k16, lanes = out.shape[1], out.shape[-1]
    return out.transpose(0, 1, 4, 2, 3).reshape(1, k16 * lanes, layer.oh, layer.ow)[:, : layer.oc]


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


def pack_dot(a: np.ndarray, b: np.ndarray, pk: Packing = U8) -> tuple[np.ndarray, np.ndarray]:
    """``A[M, N, K]`` and ``B[N, K]`` -> A as ``[M, N/y, K/x, y, x]`` and B as ``[N/y, K/x, y, x]`` (zeros
    fill); the output unpacks as a GEMM's."""
    (m, n, k) = a.shape
    group, lanes = pk.group, pk.lanes
    k4, n16 = _blocks(k, group), _blocks(n, lanes)
    pa = np.zeros((m, n16 * lanes, k4 * group), pk.data)
    pa[:, :n, :k] = a
    packed = pa.reshape(m, n16, lanes, k4, group).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(packed), pack_gemm(np.zeros((0, k), pk.data), b, pk)[1]


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
