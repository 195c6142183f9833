"""The loop IR of a Tensor Core contraction kernel: one thread block's steps, written for one block shape.

    op = Contraction(name="gemm", params=(a, b, c), a=a, out=c, m=m, n=n, k=k, batch=1,
                     b_element=lambda z, row, col, v: ..., b_rows_contiguous=True,
                     out_index=lambda z, row, col: (row, col))
    kernel = contraction_kernel(op, BlockShape.of(tuning, instruction))

``compiler.ops.cuda`` (the ``gemm`` and ``conv2d`` schedules) describes the operator as a ``Contraction``,
``C[z, m, n] = sum_k A[m, k] * B_z[k, n]``, and the block as a ``BlockShape`` (the tuning, the instruction,
the shared tiles and the accumulators); ``_KernelWriter`` writes the kernel a step per method, in the
loop IR's CUDA vocabulary (``compiler.ir.cuda``): the grid of blocks, loops bound to the groups of threads
(warps, or warpgroups) and their lanes, the tile copies from global to shared memory, the marked Tensor
Core nests (``tensorize = <instruction>``, which the ``cuda`` pipeline's ``tensorize_registers`` turns into
the instruction), the main loop of the tuning's pipeline depth and the epilogue.

Non-goals: choosing the instruction or checking the tuning (``compiler.ops.cuda``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.cuda import (
    FRAGMENT,
    THREAD,
    async_commit,
    async_copy,
    async_wait,
    barrier,
    proxy_fence,
    swizzle,
    warpgroup_commit,
    warpgroup_fence,
    warpgroup_wait,
)

if TYPE_CHECKING:
    from compiler.ops.cuda import GpuTuning, TensorCoreInstruction

PAD = 8            # f16 elements added to each shared row: 16 bytes, against bank conflicts
VECTOR = 8         # f16 elements per vector copy (16 bytes)
#: A gathered tile's elements per thread unrolled at most (more: a loop over groups of that many, unrolled;
#: a warpgroup's conv tile of 64 x 256 is 64 per thread, 277 KB of PTX and spilled registers unrolled)
UNROLLED_STEPS = 16
F16, F32 = dtypes.float16, dtypes.float32

#: B's element ``(z, row, col)``, given the lane of a vector copy (None without one).
BElement = Callable[[ir.Expr, ir.Expr, ir.Expr, ir.Expr | None], ir.Expr]
#: C's indices of ``(z, row, col)``.
OutIndex = Callable[[ir.Expr, ir.Expr, ir.Expr], tuple[ir.Expr, ...]]
#: One element's statement of a tile copy: ``move(ty, tx, it, row, col, lane)`` (lane None without a vector).
Move = Callable[[ir.Var, ir.Var, ir.Expr, ir.Expr, ir.Expr, ir.Var | None], ir.Stmt]


@dataclass(frozen=True)
class Contraction:
    """The operator a kernel computes: ``C[z, m, n] = sum_k A[m, k] * B_z[k, n]`` for ``z`` below ``batch``,
    over extents padded to the block's tiles. ``params`` are the kernel's parameters in order, ``a`` a
    row-major ``[m, k]`` buffer, ``b_element`` B's element (read as vectors where ``b_rows_contiguous``),
    ``out_index`` C's indices in ``out``."""

    name: str
    params: tuple[ir.Buffer, ...]
    a: ir.Buffer
    out: ir.Buffer
    m: int
    n: int
    k: int
    batch: int
    b_element: BElement
    b_rows_contiguous: bool
    out_index: OutIndex


@dataclass(frozen=True)
class BlockShape:
    """A thread block of ``tuning`` with ``insn``: ``warps`` groups of ``lanes`` threads (warps, or
    warpgroups for a warpgroup instruction), each keeping ``tile_m x tile_n`` accumulators in ``acc`` (a
    fragment), and ``stages`` shared tiles of A and B (unpadded where the instruction reads shared rows
    itself: they are swizzled)."""

    tuning: GpuTuning
    insn: TensorCoreInstruction
    a_shared: ir.Buffer
    b_shared: ir.Buffer
    acc: ir.Buffer

    @classmethod
    def of(cls, t: GpuTuning, insn: TensorCoreInstruction) -> BlockShape:
        """The block of ``t`` with ``insn``, its shared tiles and accumulators."""
        bm, bn = t.block(insn)
        pad = 0 if insn.shared else PAD
        return cls(t, insn, ir.Buffer("A_shared", (t.stages, bm, t.bk + pad), F16, "shared"),
                   ir.Buffer("B_shared", (t.stages, t.bk, bn + pad), F16, "shared"),
                   ir.Buffer("acc", (t.warps, t.p * insn.tm, t.q * insn.tn), F32, FRAGMENT))

    @property
    def lanes(self) -> int:
        """Threads of one group: a warp, or a warpgroup."""
        return self.insn.threads

    @property
    def threads(self) -> int:
        """Threads of the block."""
        return self.tuning.warps * self.lanes

    @property
    def tile_m(self) -> int:
        """Rows of one group's accumulators."""
        return self.tuning.p * self.insn.tm

    @property
    def tile_n(self) -> int:
        """Columns of one group's accumulators."""
        return self.tuning.q * self.insn.tn

    @property
    def k_steps(self) -> int:
        """The instructions' steps along k each group takes of one reduction step."""
        return self.tuning.bk // self.insn.tk // self.tuning.split_k

    @property
    def in_flight(self) -> int:
        """Groups of warpgroup instructions left in flight into the next step: 1 for a warpgroup instruction
        over a ring of buffers (its Tensor Cores busy across the barrier and the copies; the copies then
        run one step less ahead, so that the buffer they fill is the one the group before last read)."""
        return 1 if self.insn.shared and self.tuning.stages > 2 else 0


def contraction_kernel(op: Contraction, block: BlockShape) -> ir.PrimFunc:
    """The kernel of ``op`` in blocks of ``block``: the grid of blocks over the batch and C's tiles."""
    return _KernelWriter(op, block).kernel()


def _steps(chunks: int, threads: int) -> int:
    """The steps ``threads`` threads take to move ``chunks`` chunks, one each per step."""
    return -(-chunks // threads)


def _lane(v: ir.Var | None) -> ir.Expr:
    """The index of vector lane ``v`` (0 without a vector)."""
    return v if v is not None else ir.const(0)


class _KernelWriter:
    """Writes the loop IR of one contraction's kernel for one block shape, a step per method: the loops
    over groups and threads, the tile copies, the Tensor Core nests, the main loop of each pipeline depth
    and the epilogue. ``bz``, ``by``, ``bx`` are the block's indices, ``ko`` the reduction step's."""

    def __init__(self, op: Contraction, block: BlockShape) -> None:
        self.op, self.block = op, block
        self.t, self.insn = block.tuning, block.insn
        self.bm, self.bn = self.t.block(self.insn)
        self.bz, self.by, self.bx = ir.Var("bz"), ir.Var("by"), ir.Var("bx")
        self.m0, self.n0 = self.by * self.bm, self.bx * self.bn
        self.ko = ir.Var("ko")
        self.k_tiles = op.k // self.t.bk
        self.b_vector = VECTOR if op.b_rows_contiguous else 1

    def kernel(self) -> ir.PrimFunc:
        """The accumulators zeroed, the main loop, the epilogue, in the block's buffers, over the grid."""
        block = self.block
        main = self.main_loop()
        body = self.epilogue(main)
        if self.insn.shared:
            body = swizzle(ir.Allocate(block.a_shared, swizzle(ir.Allocate(block.b_shared, body))))
        else:
            body = ir.Allocate(block.a_shared, ir.Allocate(block.b_shared, body))
        grid = ir.For(self.bz, ir.const(0), ir.const(self.op.batch), ir.For(
            self.by, ir.const(0), ir.const(self.op.m // self.bm), ir.For(
                self.bx, ir.const(0), ir.const(self.op.n // self.bn), body, ir.ForKind.THREAD_BINDING,
                "blockIdx.x"),
            ir.ForKind.THREAD_BINDING, "blockIdx.y"), ir.ForKind.THREAD_BINDING, "blockIdx.z")
        return ir.PrimFunc(self.op.name, tuple(self.op.params), grid)

    # ---------------------------------------------------------------------------------- threads
    def position(self, ty: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
        """The group's column and row in the block (``ty`` above ``warps_m x warps_n``: its reduction
        group's)."""
        return ty % self.t.warps_n, (ty // self.t.warps_n) % self.t.warps_m

    def warp_loop(self, label: str, body_of: Callable[[ir.Var], ir.Stmt]) -> ir.Stmt:
        """``body_of(ty)`` in every group ``ty`` of the block (bound to threadIdx.y)."""
        ty = ir.Var(f"warp_{label}")
        return ir.For(ty, ir.const(0), ir.const(self.t.warps), body_of(ty), ir.ForKind.THREAD_BINDING,
                      "threadIdx.y")

    def thread_loop(self, label: str, body_of: Callable[[ir.Var, ir.Var], ir.Stmt]) -> ir.Stmt:
        """``body_of(ty, tx)`` in every thread ``tx`` (bound to threadIdx.x) of every group ``ty``."""
        def each_lane(ty: ir.Var) -> ir.Stmt:
            tx = ir.Var(f"lane_{label}")
            return ir.For(tx, ir.const(0), ir.const(self.block.lanes), body_of(ty, tx),
                          ir.ForKind.THREAD_BINDING, "threadIdx.x")
        return self.warp_loop(label, each_lane)

    def copy(self, label: str, rows: int, cols: int, vector: int, move: Move, asynchronous: bool = False,
             rolled: bool = False) -> ir.Stmt:
        """All threads copy a rows x cols tile, ``vector`` elements per thread and step: ``move(ty, tx,
        it, row, col, v)`` is one element's statement (``v`` the vector lane, None without one), each
        vector an asynchronous copy where ``asynchronous``. The steps are unrolled, unless ``rolled`` and
        a thread has more than ``UNROLLED_STEPS`` of them: then a loop over groups of ``UNROLLED_STEPS``
        unrolled steps (the code stays small, and each group's loads are independent of each other, in
        flight together rather than one global load's latency per step)."""
        threads, lanes = self.block.threads, self.block.lanes
        chunks_per_row = cols // vector
        chunks = rows * chunks_per_row
        steps = _steps(chunks, threads)
        grouped = rolled and steps > UNROLLED_STEPS

        def body(ty: ir.Var, tx: ir.Var) -> ir.Stmt:
            it = ir.Var(f"it_{label}")
            group = ir.Var(f"group_{label}")
            index = group * UNROLLED_STEPS + it if grouped else it
            chunk = (index * self.t.warps + ty) * lanes + tx
            row, col = chunk // chunks_per_row, chunk % chunks_per_row * vector
            if vector > 1:
                v = ir.Var(f"v_{label}")
                inner = ir.For(v, ir.const(0), ir.const(vector), move(ty, tx, index, row, col, v),
                               ir.ForKind.VECTORIZED)
                inner = async_copy(inner) if asynchronous else inner
            else:
                inner = move(ty, tx, index, row, col, None)
            unrolled = UNROLLED_STEPS if grouped else steps
            groups = _steps(steps, unrolled)
            if groups * unrolled * threads != chunks:
                inner = ir.IfThenElse(ir.LT(chunk, ir.const(chunks)), inner)
            loop = ir.For(it, ir.const(0), ir.const(unrolled), inner, ir.ForKind.UNROLLED)
            return ir.For(group, ir.const(0), ir.const(groups), loop, ir.ForKind.SERIAL) if grouped else loop
        return self.thread_loop(label, body)

    # ---------------------------------------------------------------------------------- tiles
    def a_value(self, kt: ir.Expr, row: ir.Expr, col: ir.Expr, v: ir.Var) -> ir.Expr:
        """Element ``(row, col + v)`` of reduction step ``kt``'s A tile."""
        return self.op.a[self.m0 + row, kt * self.t.bk + col + v]

    def b_value(self, kt: ir.Expr, row: ir.Expr, col: ir.Expr, v: ir.Var | None) -> ir.Expr:
        """Element ``(row, col)`` (lane ``v``) of reduction step ``kt``'s B tile."""
        return self.op.b_element(self.bz, kt * self.t.bk + row, self.n0 + col, v)

    def load_tiles(self, kt: ir.Expr, stage: ir.Expr) -> ir.Stmt:
        """Step ``kt``'s A and B tiles from global into shared buffer ``stage`` (asynchronously with 3 or
        more buffers; a gathered B tile, copied element by element, is rolled)."""
        a_sh, b_sh, b_vector = self.block.a_shared, self.block.b_shared, self.b_vector
        a_async, b_async = self.t.stages > 2, self.t.stages > 2 and b_vector > 1
        return ir.seq(
            self.copy("a", self.bm, self.t.bk, VECTOR, lambda ty, tx, it, row, col, v: ir.Store(
                a_sh, (stage, row, col + v), self.a_value(kt, row, col, v)), a_async),
            self.copy("b", self.t.bk, self.bn, b_vector, lambda ty, tx, it, row, col, v: ir.Store(
                b_sh, (stage, row, col + _lane(v)), self.b_value(kt, row, col, v)), b_async,
                rolled=b_vector == 1))

    def next_tiles(self) -> tuple[ir.Buffer, ir.Buffer]:
        """The registers (a ``THREAD`` buffer each: one slice per thread) the next step's A and B tiles are
        loaded into while this step computes."""
        threads, b_vector = self.block.threads, self.b_vector
        a_steps = _steps(self.bm * self.t.bk // VECTOR, threads)
        b_steps = _steps(self.t.bk * self.bn // b_vector, threads)
        regs_a = ir.Buffer("A_next", (self.t.warps, self.block.lanes, a_steps, VECTOR), F16, THREAD)
        regs_b = ir.Buffer("B_next", (self.t.warps, self.block.lanes, b_steps, b_vector), F16, THREAD)
        return regs_a, regs_b

    def fetch(self, kt: ir.Expr, regs_a: ir.Buffer, regs_b: ir.Buffer) -> ir.Stmt:
        """Step ``kt``'s tiles from global memory into each thread's registers."""
        return ir.seq(
            self.copy("fa", self.bm, self.t.bk, VECTOR, lambda ty, tx, it, row, col, v: ir.Store(
                regs_a, (ty, tx, it, v), self.a_value(kt, row, col, v))),
            self.copy("fb", self.t.bk, self.bn, self.b_vector, lambda ty, tx, it, row, col, v: ir.Store(
                regs_b, (ty, tx, it, _lane(v)), self.b_value(kt, row, col, v))))

    def put(self, stage: ir.Expr, regs_a: ir.Buffer, regs_b: ir.Buffer) -> ir.Stmt:
        """The tiles in each thread's registers into shared buffer ``stage``."""
        a_sh, b_sh = self.block.a_shared, self.block.b_shared
        return ir.seq(
            self.copy("pa", self.bm, self.t.bk, VECTOR, lambda ty, tx, it, row, col, v: ir.Store(
                a_sh, (stage, row, col + v), regs_a[ty, tx, it, v])),
            self.copy("pb", self.t.bk, self.bn, self.b_vector, lambda ty, tx, it, row, col, v: ir.Store(
                b_sh, (stage, row, col + _lane(v)), regs_b[ty, tx, it, _lane(v)])))

    # ---------------------------------------------------------------------------------- compute
    def compute(self, stage: ir.Expr) -> ir.Stmt:
        """Every group's Tensor Core nests on shared buffer ``stage``."""
        return self.warp_loop("compute", lambda ty: self.instructions(stage, ty))

    def instructions(self, stage: ir.Expr, ty: ir.Var) -> ir.Stmt:
        """Group ``ty``'s ``p x q`` tiles for each of its steps along k, each one marked nest the
        tensorize pass turns into the instruction. A warpgroup instruction's are asynchronous: fenced,
        committed as one group, the step's group (or, with a ring of buffers, the previous step's) waited
        for before the barrier after which its shared operands may be overwritten."""
        t, insn, block = self.t, self.insn, self.block
        a_sh, b_sh, acc = block.a_shared, block.b_shared, block.acc
        wn, wm = self.position(ty)
        group = ty // (t.warps_n * t.warps_m)
        kk, pi, qj = ir.Var("kk"), ir.Var("pi"), ir.Var("qj")
        i, j, kr = ir.Var("i"), ir.Var("j"), ir.Var("k")
        kstep = (group * block.k_steps + kk) * insn.tk if t.split_k > 1 else kk * insn.tk
        row, col = pi * insn.tm + i, qj * insn.tn + j
        update = ir.Store(acc, (ty, row, col), acc[ty, row, col] + ir.cast(
            a_sh[stage, wm * block.tile_m + row, kstep + kr], F32) * ir.cast(
            b_sh[stage, kstep + kr, wn * block.tile_n + col], F32))
        nest = ir.For(i, ir.const(0), ir.const(insn.tm), ir.For(
            j, ir.const(0), ir.const(insn.tn), ir.For(kr, ir.const(0), ir.const(insn.tk), update)))
        marked = ir.Attr("tensorize", insn.name, nest)
        columns = ir.For(qj, ir.const(0), ir.const(t.q), marked, ir.ForKind.UNROLLED)
        tiles = ir.For(pi, ir.const(0), ir.const(t.p), columns, ir.ForKind.UNROLLED)
        issue = ir.For(kk, ir.const(0), ir.const(block.k_steps), tiles, ir.ForKind.UNROLLED)
        if not insn.shared:
            return issue
        return ir.seq(warpgroup_fence(), issue, warpgroup_commit(), warpgroup_wait(block.in_flight))

    def published(self) -> ir.Stmt:
        """The barrier after which this step's shared tiles are read (preceded, for an instruction that
        reads them through the async proxy, by each thread's proxy fence)."""
        return ir.seq(proxy_fence(), barrier()) if self.insn.shared else barrier()

    # ---------------------------------------------------------------------------------- main loop
    def main_loop(self) -> ir.Stmt:
        """The loop over the reduction steps, for the tuning's pipeline depth."""
        if self.t.stages == 1:
            return self.single_buffered()
        if self.t.stages > 2:
            return self.ring()
        return self.prefetched()

    def single_buffered(self) -> ir.Stmt:
        """One shared buffer: each step's tiles copied, a barrier, the compute, a barrier."""
        return ir.For(self.ko, ir.const(0), ir.const(self.k_tiles), ir.seq(
            self.load_tiles(self.ko, ir.const(0)), self.published(), self.compute(ir.const(0)), barrier()))

    def ring(self) -> ir.Stmt:
        """A ring of ``stages`` buffers filled by asynchronous copies. Step j's copies are the j-th group a
        thread commits (the prologue's groups, empty past the last step, keep the count); at step ko at
        most ahead - 1 groups may be in flight, so step ko's tiles have landed, and past the barrier every
        group is done with the buffer step ko - 1 - in_flight read, which step ko + ahead fills."""
        ko, k_tiles, stages, in_flight = self.ko, self.k_tiles, self.t.stages, self.block.in_flight
        ahead = stages - 1 - in_flight
        prologue = [ir.seq(self.load_tiles(ir.const(j), ir.const(j)), async_commit()) if j < k_tiles
                    else async_commit() for j in range(ahead)]
        if in_flight:
            # no branch between a warpgroup's instructions and their wait (ptxas would serialize them):
            # past the last step the copies repeat the last tiles into a buffer no step reads again
            copies = self.load_tiles(ir.min_(ko + ahead, k_tiles - 1), (ko + ahead) % stages)
        else:
            copies = ir.IfThenElse(ir.LT(ko + ahead, ir.const(k_tiles)),
                                   self.load_tiles(ko + ahead, (ko + ahead) % stages))
        step = ir.seq(async_wait(ahead - 1), self.published(), copies, async_commit(),
                      self.compute(ko % stages))
        main = ir.seq(*prologue, ir.For(ko, ir.const(0), ir.const(k_tiles), step))
        if in_flight:   # the last step's group, before the accumulators are read
            main = ir.seq(main, self.warp_loop("drain", lambda ty: warpgroup_wait(0)))
        return main

    def prefetched(self) -> ir.Stmt:
        """Two shared buffers: the next step's tiles loaded into each thread's registers while this step
        computes, then stored into the other buffer (one barrier per step)."""
        ko, k_tiles = self.ko, self.k_tiles
        regs_a, regs_b = self.next_tiles()
        more = ir.LT(ko + 1, ir.const(k_tiles))
        step = ir.seq(ir.IfThenElse(more, self.fetch(ko + 1, regs_a, regs_b)), self.compute(ko % 2),
                      ir.IfThenElse(more, self.put((ko + 1) % 2, regs_a, regs_b)), self.published())
        main = ir.seq(self.fetch(ir.const(0), regs_a, regs_b), self.put(ir.const(0), regs_a, regs_b),
                      self.published(), ir.For(ko, ir.const(0), ir.const(k_tiles), step))
        return ir.Allocate(regs_a, ir.Allocate(regs_b, main))

    # ---------------------------------------------------------------------------------- epilogue
    def epilogue(self, main: ir.Stmt) -> ir.Stmt:
        """The accumulators zeroed, ``main``, and the result stored: each group's tiles into C, or, with a
        split reduction, spilled to shared memory and summed (in group order) into C by all threads."""
        acc = self.block.acc
        if self.t.split_k == 1:
            store = self.warp_loop("store", self.store_out)
            return ir.Allocate(acc, ir.seq(self.warp_loop("fill", self.fill), main, store))
        partial = ir.Buffer("partial", (self.t.warps, self.block.tile_m, self.block.tile_n), F32, "shared")
        spill = self.warp_loop("spill", lambda ty: self.spill(ty, partial))
        total = self.copy("sum", self.bm, self.bn, 1,
                          lambda ty, tx, it, row, col, v: self.reduce(partial, row, col))
        fill = self.warp_loop("fill", self.fill)
        return ir.Allocate(partial, ir.Allocate(acc, ir.seq(fill, main, ir.seq(spill, barrier(), total))))

    def fill(self, ty: ir.Var) -> ir.Stmt:
        """Group ``ty``'s accumulators set to zero."""
        i, j = ir.Var("i0"), ir.Var("j0")
        return ir.For(i, ir.const(0), ir.const(self.block.tile_m), ir.For(
            j, ir.const(0), ir.const(self.block.tile_n), ir.Store(self.block.acc, (ty, i, j),
                                                                 ir.const(0.0, F32))))

    def store_out(self, ty: ir.Var) -> ir.Stmt:
        """Group ``ty``'s accumulators stored into its tile of C."""
        tile_m, tile_n, acc = self.block.tile_m, self.block.tile_n, self.block.acc
        i, j = ir.Var("i1"), ir.Var("j1")
        wn, wm = self.position(ty)
        dst = self.op.out_index(self.bz, self.m0 + wm * tile_m + i, self.n0 + wn * tile_n + j)
        return ir.For(i, ir.const(0), ir.const(tile_m), ir.For(
            j, ir.const(0), ir.const(tile_n), ir.Store(self.op.out, dst, acc[ty, i, j])))

    def spill(self, ty: ir.Var, partial: ir.Buffer) -> ir.Stmt:
        """Group ``ty``'s accumulators into its slice of shared buffer ``partial``."""
        tile_m, tile_n, acc = self.block.tile_m, self.block.tile_n, self.block.acc
        i, j = ir.Var("i2"), ir.Var("j2")
        return ir.For(i, ir.const(0), ir.const(tile_m), ir.For(
            j, ir.const(0), ir.const(tile_n), ir.Store(partial, (ty, i, j), acc[ty, i, j])))

    def reduce(self, partial: ir.Buffer, row: ir.Expr, col: ir.Expr) -> ir.Stmt:
        """Element ``(row, col)`` of the block's tile of C: the reduction groups' partial sums, in order."""
        t, tile_m, tile_n = self.t, self.block.tile_m, self.block.tile_n
        wm, wn = row // tile_m, col // tile_n
        total = None
        for g in range(t.split_k):
            part = partial[(g * t.warps_m + wm) * t.warps_n + wn, row % tile_m, col % tile_n]
            total = part if total is None else total + part
        return ir.Store(self.op.out, self.op.out_index(self.bz, self.m0 + row, self.n0 + col), total)
