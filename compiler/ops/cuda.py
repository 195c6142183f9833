"""GEMM and conv2d for NVIDIA Tensor Cores, scheduled as UNIT schedules a GPU (Sec. III.C, V.E; Fig. 11).

Operators (fp16 inputs, fp32 accumulation and results), both one contraction ``C[m, n] = sum_k A[m, k] *
B[k, n]`` over padded extents:
- ``gemm``: ``A[M, K]`` x ``B[K, N]`` -> ``C[M, N]``, row-major;
- ``conv2d``: UNIT's H x W fusion: the output pixels of an image are one dimension (``n`` = oh * ow + ow),
  the reduction the input channels and the kernel window (``k`` = (c * R + r) * S + s), the output
  channels the rows: ``A`` = the kernel ``[OC, C * R * S]`` (KCRS, flattened), ``B`` = the im2col view of
  the (already padded) NCHW input, gathered tile by tile into shared memory, ``C`` = the NCHW output with
  its pixels flattened ``[N, OC, OH * OW]``. Extents are padded with zeros to the tiles (``pack_*``).

The instruction comes from the spec: the first of its instructions onto which the Inspector maps the
contraction ``c[i, j] += f32(a[i, k]) * f32(b[k, j])`` of f16 operands (``tensor_core_instruction``; the
built-in isa/specs/cuda.toml's wmma_m16n16k16_f16_f32), with its tile sizes read from the mapping. The
schedule (``GpuTuning``), per thread block:
- ``warps_m x warps_n`` warps each own ``p x q`` accumulator tiles (UNIT's p x p outer product accumulated
  in registers: ``p + q`` operand loads feed ``p * q`` instructions), a block tile of
  ``(warps_m * p * tm) x (warps_n * q * tn)``;
- the reduction is walked ``bk`` at a time: all threads copy the A and B tiles into shared memory (16-byte
  vector copies where the source rows are contiguous), a barrier, then every warp runs its instructions
  on the shared tiles, a barrier;
- ``split_k`` > 1 (UNIT's reduction parallelization, "+SplitK"): that many groups of warps take
  interleaved parts of each ``bk`` step; at the end the groups' accumulators meet in shared memory and are
  summed (in group order) into the output;
- ``stages`` = 2 (software pipelining, beyond UNIT): two shared buffers, the next step's tiles loaded into
  each thread's registers (a ``thread`` buffer: one slice per thread) while this step computes;
- ``stages`` = 3 or 4 (sm_80's asynchronous copies): a ring of that many shared buffers, the tiles of the
  next ``stages - 1`` steps in flight as ``cp.async`` copies (16 bytes each; a conv's gathered im2col
  tile is copied by the threads themselves) while this step computes: per step one wait for the oldest
  group of copies, one barrier, the copy of the step ``stages - 1`` ahead into the buffer the last step
  read, the compute.

With a warpgroup instruction (Hopper's ``wgmma``, whose a and b the Tensor Cores read from shared memory
themselves): each warpgroup (128 threads) owns ``p x q`` tiles of 64 x N; the shared tiles are unpadded and
laid out in the 128-byte swizzle the instruction's descriptors describe (``bk`` a multiple of 64); each
step's instructions are fenced, committed as one group and, over a ring of buffers, left in flight into
the next step (the copies then run ``stages - 2`` steps ahead), so the Tensor Cores work across the barrier.

The result is a ``PrimFunc`` of loop IR (``compiler.ops.cuda_kernel`` writes it) whose marked nests
(``tensorize``) the ``cuda`` pipeline's ``tensorize_registers`` (``compiler.pipeline``) turns into the
instruction; ``compiler.backend.nvptx`` compiles the result and ``compiler.interp`` runs either on any
machine.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.cuda import STATIC_SHARED_LIMIT, SWIZZLE_BYTES, WARP
from compiler.ops.cuda_kernel import F16, F32, PAD, BlockShape, Contraction, contraction_kernel
from compiler.ops.nn import ConvShape
from compiler.passes.inspector import Mapping, inspect_op
from isa import ISA
from isa.instance import timing_of

MAX_ACC_REGS = 128  # accumulator registers per thread a tuning may keep
OTHER_REGS = 64     # registers a thread needs besides its accumulators (addresses, copies), roughly
BLOCK_REGS = 65536  # 32-bit registers of a multiprocessor (sm_70-sm_90), all a block's threads together


@dataclass(frozen=True)
class TensorCoreInstruction:
    """The instruction the Inspector chose and its tile: ``d[tm, tn] += a[tm, tk] x b[tk, tn]``, the
    threads that run one together (a warp, 32, or a warpgroup, 128), whether it reads a and b from shared
    memory itself (``shared``: no fragment loads) and the architecture-specific features it needs."""

    name: str
    tm: int
    tn: int
    tk: int
    cycles: int = 32     # the spec's issue cycles of one instruction on one sub-core (its ``timing``)
    threads: int = WARP
    shared: bool = False
    features: tuple[tuple[str, ...], ...] = ()


def tensor_core_instructions(spec: ISA, features: tuple[str, ...] | None = None
                             ) -> list[TensorCoreInstruction]:
    """The instructions of ``spec`` that compute a tile of an fp16 x fp16 -> fp32 contraction, in the spec's
    order, with their tile sizes (UNIT's Inspector on ``C[i, j] = sum(k, f32(A[i, k]) * f32(B[k, j]))``);
    with ``features`` (a GPU's architecture-specific features), only those it has what they need for.
    ScheduleError when there is none, saying why each instruction is not one."""
    a = te.placeholder((256, 256), "float16", name="A")
    b = te.placeholder((256, 256), "float16", name="B")
    k = te.reduce_axis(256, "k")
    c = te.compute((256, 256), lambda i, j: te.sum(ir.cast(a[i, k], "float32") * ir.cast(b[k, j], "float32"),
                                                    axis=k), name="C")
    why, found = [], []
    for name, instr in spec.instructions.items():
        if features is not None and instr.features and \
                not any(set(group) <= set(features) for group in instr.features):
            why.append(f"{name}: needs {' or '.join('+'.join(g) for g in instr.features)}, which the GPU "
                       f"lacks (it has {', '.join(features) or 'none'})")
            continue
        mapped = inspect_op(c.op, spec, name)
        if isinstance(mapped, Mapping):
            by_var = {axis.var.name: mapped.extents[index] for index, axis in mapped.loops.items()}
            cycles = timing_of(spec, spec.insn(name))[2] or 1
            shared = any(op.kind == "tensor" for op in instr.operands)
            found.append(TensorCoreInstruction(name, by_var["i"], by_var["j"], by_var["k"], cycles,
                                               instr.threads, shared, instr.features))
        else:
            why.append(f"{name}: {mapped}")
    if not found:
        raise ScheduleError(f"cuda: the spec {spec.source} has no instruction that computes a tile of an f16 "
                            f"x f16 -> f32 contraction ({'; '.join(why) or 'it has no instructions'})")
    return found


def tensor_core_instruction(spec: ISA, name: str = "", features: tuple[str, ...] | None = None
                            ) -> TensorCoreInstruction:
    """Instruction ``name`` of ``tensor_core_instructions`` (the first when ``name`` is empty)."""
    usable = tensor_core_instructions(spec, features)
    if not name:
        return usable[0]
    for insn in usable:
        if insn.name == name:
            return insn
    raise ScheduleError(f"cuda: instruction {name!r} is not one of the spec's usable Tensor Core "
                        f"instructions here ({', '.join(i.name for i in usable)})")


@dataclass(frozen=True)
class GpuTuning:
    """UNIT's GPU schedule knobs (Sec. V.E): warps (warpgroups, for a warpgroup instruction) per block along
    M and N, accumulator tiles per warp (``p`` x ``q``), the reduction step ``bk`` (elements), the reduction
    split ``split_k``, the Tensor Core ``instruction`` (a name of the spec's; empty: its first) and
    ``stages``:
    1 copies each step's tiles from global to shared memory between two barriers; 2 double-buffers them,
    each thread loading the next step's part into registers while the warps compute on this one (one
    barrier per step); 3 or 4 keep that many buffers, the next ``stages - 1`` steps' tiles in flight as
    asynchronous copies (one barrier per step)."""

    warps_m: int = 2
    warps_n: int = 2
    p: int = 2
    q: int = 2
    bk: int = 32
    split_k: int = 1
    stages: int = 1
    instruction: str = ""

    def __str__(self) -> str:
        return (f"warps {self.warps_m}x{self.warps_n}, tiles {self.p}x{self.q}, bk {self.bk}, "
                f"split_k {self.split_k}" + (f", stages {self.stages}" if self.stages > 1 else "") +
                (f", {self.instruction}" if self.instruction else ""))

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n * self.split_k

    def block(self, insn: TensorCoreInstruction) -> tuple[int, int]:
        """The block's output tile (rows, columns)."""
        return self.warps_m * self.p * insn.tm, self.warps_n * self.q * insn.tn

    def shared_bytes(self, insn: TensorCoreInstruction) -> int:
        bm, bn = self.block(insn)
        pad = 0 if insn.shared else PAD
        tiles = (bm * (self.bk + pad) + self.bk * (bn + pad)) * 2 * self.stages
        partial = self.warps * self.p * insn.tm * self.q * insn.tn * 4 if self.split_k > 1 else 0
        return tiles + partial

    def why_not(self, insn: TensorCoreInstruction, shared_limit: int) -> str | None:
        """Why this tuning cannot be compiled (None when it can)."""
        if min(self.warps_m, self.warps_n, self.p, self.q, self.bk, self.split_k) < 1:
            return "every knob must be at least 1"
        if self.stages not in (1, 2, 3, 4):
            return (f"stages must be 1 (global -> shared), 2 (the next tiles prefetched through registers) "
                    f"or 3-4 (asynchronous copies that many buffers deep), not {self.stages}")
        if self.bk % insn.tk or (self.bk // insn.tk) % self.split_k:
            return f"bk {self.bk} must be a multiple of {insn.tk} x split_k {self.split_k}"
        if self.instruction and self.instruction != insn.name:   # (the schedule looks it up by name)
            return f"the tuning is for instruction {self.instruction}, not {insn.name}"
        if insn.shared and self.bk * 2 % SWIZZLE_BYTES:
            return (f"bk {self.bk}: {insn.name} reads its operands from shared rows swizzled in "
                    f"{SWIZZLE_BYTES}-byte panels, so bk must be a multiple of {SWIZZLE_BYTES // 2} f16")
        if insn.shared and self.split_k > 1:
            return f"split_k {self.split_k}: {insn.name}'s accumulators are not split (split_k must be 1)"
        if self.warps * insn.threads > 1024:
            return f"{self.warps} groups of {insn.threads} threads exceed 1024 threads per block"
        regs = self.p * self.q * insn.tm * insn.tn // insn.threads
        if regs > MAX_ACC_REGS:
            return (f"{self.p}x{self.q} tiles of {insn.tm}x{insn.tn} keep {regs} accumulator registers per "
                    f"thread; at most {MAX_ACC_REGS} leave room under a thread's 255")
        threads = self.warps * insn.threads
        if threads * (regs + OTHER_REGS) > BLOCK_REGS:
            return (f"{threads} threads x ({regs} accumulator + about {OTHER_REGS} other registers) exceed "
                    f"the {BLOCK_REGS} registers of a multiprocessor")
        if self.shared_bytes(insn) > shared_limit:
            return f"{self.shared_bytes(insn)} bytes of shared memory exceed {shared_limit}"
        return None


@dataclass(frozen=True)
class GpuSchedule:
    """A scheduled operator: the kernel's loop IR (``func``, its Tensor Core nests marked for the ``cuda``
    pipeline's ``tensorize_registers``), the padded extents and the tuning."""

    func: ir.PrimFunc
    m: int
    n: int
    k: int
    tuning: GpuTuning
    instruction: TensorCoreInstruction
    batch: int = 1

    @property
    def macs(self) -> int:
        """Multiply-adds the kernel issues (over the padded extents)."""
        return self.batch * self.m * self.n * self.k


def _ceil(x: int, q: int) -> int:
    return -(-x // q) * q


def gemm(m: int, n: int, k: int, tuning: GpuTuning | None = None, *, spec: ISA,
         shared_limit: int = STATIC_SHARED_LIMIT, features: tuple[str, ...] | None = None) -> GpuSchedule:
    """``C[M, N] = A[M, K] x B[K, N]`` (f16 in, f32 out) over extents padded to the tuning's tiles; the
    tuning's instruction among those the GPU's ``features`` allow."""
    t = tuning or GpuTuning()
    insn = tensor_core_instruction(spec, t.instruction, features)
    _check(t, insn, shared_limit, "gemm")
    bm, bn = t.block(insn)
    mp, np_, kp = _ceil(m, bm), _ceil(n, bn), _ceil(k, t.bk)
    a = ir.Buffer("A", (mp, kp), F16)
    b = ir.Buffer("B", (kp, np_), F16)
    c = ir.Buffer("C", (mp, np_), F32)

    def b_tile(z, row, col, v):
        return b[row, col + v] if v is not None else b[row, col]

    op = Contraction(name="gemm", params=(a, b, c), a=a, out=c, m=mp, n=np_, k=kp, batch=1, b_element=b_tile,
                     b_rows_contiguous=True, out_index=lambda z, row, col: (row, col))
    return GpuSchedule(contraction_kernel(op, BlockShape.of(t, insn)), mp, np_, kp, t, insn)


def conv2d(layer: ConvShape, tuning: GpuTuning | None = None, *, spec: ISA,
           shared_limit: int = STATIC_SHARED_LIMIT, features: tuple[str, ...] | None = None) -> GpuSchedule:
    """NCHW conv2d of ``layer`` (its padding already applied to the input, ``pack_conv``) as UNIT's fused
    H x W contraction: output ``[N, OC, OH * OW]`` (f32) over extents padded to the tuning's tiles."""
    t = tuning or GpuTuning()
    insn = tensor_core_instruction(spec, t.instruction, features)
    _check(t, insn, shared_limit, "conv2d")
    if layer.invalid():
        raise ScheduleError(f"cuda conv2d: {layer.invalid()}")
    bm, bn = t.block(insn)
    hp, wp = layer.h + 2 * layer.p, layer.w + 2 * layer.p
    oh, ow, kk, st = layer.oh, layer.ow, layer.k, layer.s
    crs = layer.ic * kk * kk
    mp, np_, kp = _ceil(layer.oc, bm), _ceil(oh * ow, bn), _ceil(crs, t.bk)
    data = ir.Buffer("data", (layer.n, layer.ic, hp, wp), F16)
    kernel = ir.Buffer("kernel", (mp, kp), F16)
    out = ir.Buffer("out", (layer.n, mp, np_), F32)

    def b_tile(z, row, col, v):
        c, rs = ir.FloorDiv(row, ir.const(kk * kk)), ir.FloorMod(row, ir.const(kk * kk))
        r, s = ir.FloorDiv(rs, ir.const(kk)), ir.FloorMod(rs, ir.const(kk))
        h, w = ir.FloorDiv(col, ir.const(ow)), ir.FloorMod(col, ir.const(ow))
        inside = ir.And(ir.LT(row, ir.const(crs)), ir.LT(col, ir.const(oh * ow)))
        value = data[z, ir.min_(c, layer.ic - 1), ir.min_(h * st + r, hp - 1), ir.min_(w * st + s, wp - 1)]
        return ir.Select(inside, value, ir.const(0.0, F16))

    op = Contraction(name="conv2d", params=(data, kernel, out), a=kernel, out=out, m=mp, n=np_, k=kp,
                     batch=layer.n, b_element=b_tile, b_rows_contiguous=False,
                     out_index=lambda z, row, col: (z, row, col))
    return GpuSchedule(contraction_kernel(op, BlockShape.of(t, insn)), mp, np_, kp, t, insn, layer.n)


def _check(t: GpuTuning, insn: TensorCoreInstruction, shared_limit: int, op: str) -> None:
    why = t.why_not(insn, shared_limit)
    if why:
        raise ScheduleError(f"cuda {op}: tuning ({t}) does not fit: {why}")


# ------------------------------------------------------------------------------------------ data layouts
def pack_gemm(a: np.ndarray, b: np.ndarray, s: GpuSchedule) -> tuple[np.ndarray, np.ndarray]:
    """A [M, K] and B [K, N] as f16, padded with zeros to the schedule's extents."""
    pa = np.zeros((s.m, s.k), np.float16)
    pb = np.zeros((s.k, s.n), np.float16)
    pa[: a.shape[0], : a.shape[1]] = a
    pb[: b.shape[0], : b.shape[1]] = b
    return pa, pb


def unpack_gemm(c: np.ndarray, m: int, n: int) -> np.ndarray:
    return c[:m, :n]


def pack_conv(data: np.ndarray, kernel: np.ndarray, layer: ConvShape, s: GpuSchedule
              ) -> tuple[np.ndarray, np.ndarray]:
    """NCHW data (padded by the layer's padding) and the KCRS kernel flattened to [OC, C*R*S], zero-padded
    to the schedule's extents, as f16."""
    p = layer.p
    padded = np.pad(data.astype(np.float16), ((0, 0), (0, 0), (p, p), (p, p)))
    flat = np.zeros((s.m, s.k), np.float16)
    flat[: layer.oc, : layer.ic * layer.k * layer.k] = kernel.reshape(layer.oc, -1)
    return padded, flat


def unpack_conv(out: np.ndarray, layer: ConvShape) -> np.ndarray:
    """The NCHW output ``[N, OC, OH, OW]`` of the kernel's ``[N, OC', OH*OW']`` (padding dropped)."""
    return out[:, : layer.oc, : layer.oh * layer.ow].reshape(layer.n, layer.oc, layer.oh, layer.ow)


def tuning_space(m: int, n: int, k: int, batch: int,
                 insns: TensorCoreInstruction | Sequence[TensorCoreInstruction], shared_limit: int,
                 sm_count: int, sm_shared: int, gathered: bool = False) -> list[GpuTuning]:
    """The tunings worth measuring for a contraction of ``m x n x k`` (``batch`` times), ranked by a
    simple model (UNIT's tuner measures them; ``--tune K`` takes the first K): enough blocks to fill the
    ``sm_count`` multiprocessors (``sm_shared`` bytes of shared memory each, ``shared_limit`` a block),
    little padding, and many instructions per operand load. The model is rough, so the ranking spreads the
    first K over the space: for each instruction (``insns``; they take turns), the best tuning of each block
    shape (warps, tiles) for each reduction split, the splits taking turns, then the others. ``gathered``: the
    B tile is gathered element by element by the threads (a convolution's im2col view), not copied."""
    if isinstance(insns, TensorCoreInstruction):
        insns = [insns]
    # the first instruction is the default (no name in its tunings); the others are named
    each = [_tuning_space(m, n, k, batch, insn, insn.name if i else "", shared_limit, sm_count, sm_shared,
                          gathered) for i, insn in enumerate(insns)]
    best = min((lst[0][0] for lst in each if lst), default=0.0)
    near = [[t for c, t in lst if c <= NEAR * best] for lst in each]
    far = [[t for c, t in lst if c > NEAR * best] for lst in each]
    return _turns(near) + _turns(far)


#: Instructions a thread spends on one gathered element (index arithmetic, bounds select, load, store).
GATHER_OPS = 8
#: Resident warps that hide one global load's latency behind each other's gathers.
GATHER_WARPS = 8
#: Instructions take turns among the tunings the model puts within this factor of its best; the rest follow
#: (a small convolution needs a split reduction, which a warpgroup instruction's 64-row tiles do not have).
NEAR = 2.0


def _turns(lists: list[list[GpuTuning]]) -> list[GpuTuning]:
    return [t for turn in itertools.zip_longest(*lists) for t in turn if t is not None]


def _tuning_space(m: int, n: int, k: int, batch: int, insn: TensorCoreInstruction, name: str,
                  shared_limit: int, sm_count: int, sm_shared: int, gathered: bool
                  ) -> list[tuple[float, GpuTuning]]:
    """One instruction's tunings in the model's order, with their modelled costs."""
    found = []
    # A warpgroup instruction's tile is 64 x 128 or more, from shared memory: up to four warpgroups, two
    # tiles each, fed by asynchronous copies (its operands are read in place, so every step waits for them)
    if insn.shared:
        warp_shapes, tile_shapes, depths = ((1, 1), (2, 1), (1, 2), (2, 2)), ((1, 1), (2, 1), (1, 2)), (3, 4)
    else:
        warp_shapes = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (2, 4))
        tile_shapes, depths = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (2, 4), (4, 4)), (1, 2, 3, 4)
    for wm, wn in warp_shapes:
        for p, q in tile_shapes:
            for bk in (32, 64):
                for sk in (1, 2, 4):
                    for stages in depths:
                        t = GpuTuning(wm, wn, p, q, bk, sk, stages, name)
                        if t.why_not(insn, shared_limit) is None:
                            found.append(t)

    def cost(t: GpuTuning) -> float:
        """Cycles, roughly: the waves of resident blocks times the reduction steps, each step the longest of
        its Tensor Core work (four sub-cores per multiprocessor, the spec's cycles per instruction), its
        fragment loads from shared memory (128 bytes per cycle), its tile loads (64 bytes per cycle per
        multiprocessor), a gathered B tile's elements (each some GATHER_OPS instructions, 128 lanes a
        cycle) and a global load's latency (shared by the steps whose tiles are in flight; a gathered tile
        is loaded by the threads themselves, not ahead, so only other resident warps hide its latency).
        A warpgroup instruction's gathered tile adds to its step instead: on an H200 its conv tunings ran
        2.3-23x slower than the best wmma ones at batch 1 (27 layers, three runs), while the overlapped
        form ranked them second; added, the model's Kendall tau over the 38 layers' measured tunings rose
        from 0.48 to 0.70, with the order of the wmma tunings unchanged (experiments/README.md)."""
        bm, bn = t.block(insn)
        mp, np_, kp = _ceil(m, bm), _ceil(n, bn), _ceil(k, t.bk)
        blocks = batch * (mp // bm) * (np_ // bn)
        warps = t.warps * insn.threads // WARP
        resident = max(1, min(32, 64 // warps, sm_shared // t.shared_bytes(insn), blocks))
        waves = math.ceil(blocks / (sm_count * resident))
        ksteps = resident * t.warps * (t.bk // insn.tk) / t.split_k
        compute = ksteps * t.p * t.q * insn.cycles * (insn.threads // WARP) / 4
        fragments = ksteps * (t.p * insn.tm * insn.tk + t.q * insn.tk * insn.tn) * 2 / 128
        loads = resident * (bm + bn) * t.bk * 2 / 64
        latency = 1000.0 if t.stages == 1 else 800.0 / t.stages   # prefetched steps wait for less of it
        if not gathered:
            return waves * (kp // t.bk) * max(compute, fragments, loads, latency)
        gather = resident * t.bk * bn * GATHER_OPS / 128
        latency = max(latency, 800.0 * GATHER_WARPS / (resident * warps))
        if insn.shared:   # a warpgroup's own threads gather its B tile: no overlap with its instructions
            return waves * (kp // t.bk) * (max(compute, fragments, loads, latency) + gather)
        return waves * (kp // t.bk) * max(compute, fragments, loads, latency, gather)

    def key(t: GpuTuning) -> tuple:
        """Near-equal costs: less padding, then the bigger block and, of equal ones, the squarer (fewer
        loads per multiply-add), then the deeper pipeline (the H100 runs: the 4-deep ring won 26 of 27
        batch-1 convolutions, and the warpgroup instruction's best GEMMs were 4 deep)."""
        c = costs[t]
        rounded = float(f"{c:.1g}") if c > 0 else 0.0
        bm, bn = t.block(insn)
        return rounded, _ceil(m, bm) * _ceil(n, bn) * _ceil(k, t.bk), -bm * bn, bm + bn, -t.stages, str(t)

    costs = {t: cost(t) for t in found}
    ranked = sorted(found, key=key)
    shapes: set[tuple[int, ...]] = set()
    firsts: dict[int, list[GpuTuning]] = {}
    rest = []
    for t in ranked:
        shape = (t.warps_m, t.warps_n, t.p, t.q, t.split_k, t.stages)
        if shape in shapes:
            rest.append(t)
        else:
            firsts.setdefault(t.split_k, []).append(t)
            shapes.add(shape)
    return [(costs[t], t) for t in _turns(list(firsts.values())) + rest]
