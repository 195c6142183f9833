"""Loop IR -> LLVM IR for NVIDIA GPUs: the kernel emitter of the NVPTX backend (``compiler.backend.nvptx``).

A ``KernelEmitter`` is the CPU's ``FunctionEmitter`` (expressions, loops, bounds checks, vector loops: the
same semantics, bit for bit, as the reference interpreter) with what a GPU adds (TensorIR Sec. 8.2's
thread bindings and memory scopes; UNIT Sec. III.A's Tensor Core instructions). The constructs are the
loop IR's CUDA vocabulary (``compiler.ir.cuda``); the launch shape is ``compiler.backend.nvptx_launch``'s,
the matrix instructions' geometry and register layouts ``compiler.backend.nvptx_matrix``'s:

- **The kernel**: ``void @name(ptr addrspace(1) noalias %buffer..., ptr addrspace(1) %fault)``, with the
  ``ptx_kernel`` calling convention. A run-time fault (an index out of bounds, a division by zero) writes its
  1-based code to ``fault[0]`` and returns from the thread.
- **Thread bindings**: a loop bound to ``blockIdx.x/y/z`` or ``threadIdx.x/y/z`` is no loop: its variable
  is the thread's index on that axis. The launch's extent on an axis is the largest bound loop's; a loop
  bound to fewer threads runs in the threads below its extent only. Statements outside every
  ``threadIdx.x`` loop run in all 32 lanes of a warp: warp instructions, and stores that every lane
  repeats with the same value.
- **Memory scopes**: ``shared`` allocations are module globals in address space 3 (one per block) while
  they fit CUDA's 48 KB of static shared memory; above it, all of them are parts of one ``extern``
  dynamic array (``dynamic_shared``, each part 128-byte aligned), whose size the launch passes;
  ``global`` parameters are address space 1; ``local`` allocations are the thread's stack. A ``thread``
  allocation holds one slice per thread: its first two axes are indexed by the variables bound to
  ``threadIdx.y`` and ``threadIdx.x`` (so that loop IR run sequentially, and the interpreter, see every
  thread's slice), and each thread keeps only its own, on its stack (in registers once the indices of the
  rest are constants).
  ``Attr("barrier", ...)`` is ``bar.sync 0`` (``__syncthreads``).
- **Asynchronous copies** (sm_80+): ``async_copy(loop)``, a vectorized loop copying 4, 8 or 16 contiguous
  bytes of a global buffer into a shared one, is one ``cp.async`` per thread; ``async_commit()`` closes
  the thread's group of copies issued so far (``cp.async.commit_group``) and ``async_wait(k)`` waits until
  at most ``k`` of its groups are still in flight (``cp.async.wait_group k``). Sequentially (the
  interpreter) a copy is done when it is issued, so the two others do nothing.
- **Fragments**: a ``fragment`` allocation holds a warp's register fragments of a warp-level matrix
  instruction (the Tensor Core accumulator): its first axis is the warp (indexed by a variable bound to
  ``threadIdx.y``/``z``), the rest the warp's own tiles of the instruction's operand shape. Each thread
  keeps its part of every tile of its warp in registers (an array that LLVM promotes when every tile index
  is a constant: loops around fragment accesses must be unrolled). Fragments are written three ways: a
  loop nest storing a constant into whole tiles (fill), a ``TensorInsn`` whose operand lives there (the
  instruction reads and writes the registers), and read one way: a loop nest copying whole tiles to memory
  (a fragment store, row-major with a leading dimension).
- **Warp-level matrix instructions** (``TensorInsn`` of a spec whose instruction names an
  ``llvm.nvvm.wmma`` intrinsic, isa/specs/cuda.toml): each operand is loaded into registers from its region
  (``wmma.load.a/b/c``, row-major with the region's leading dimension) unless it is a fragment, the
  intrinsic is called, and the written operand is stored back (``wmma.store.d``) unless it is a fragment.
  The register layout of each operand (how many registers of which type a thread holds) is LLVM's NVVM
  fragment ABI, computed from the operand's role, element type and shape (``fragment_registers``).

- **Warpgroup matrix instructions** (sm_90a; a spec instruction whose intrinsic is a PTX
  ``wgmma.mma_async`` and whose ``threads`` is 128): the operands a and b are regions of shared buffers in a
  128-byte swizzled layout, passed as matrix descriptors (start address, the strides between 8x16-byte core
  matrices, the swizzle), either major order (the transpose flags say which); the accumulator is a fragment
  held by the warpgroup's 128 threads (``threadIdx.x``), N/2 f32 registers each in the PTX manual's
  layout. ``warpgroup_fence()`` (``wgmma.fence``), ``warpgroup_commit()`` and ``warpgroup_wait(k)`` order
  them: the accumulator registers are tied through the fence and the wait, so that nothing reads or writes
  them while an instruction is in flight. ``proxy_fence()`` (``fence.proxy.async``) makes the threads'
  writes to shared memory visible to the instructions, which read it through the async proxy.
- **Swizzled shared buffers**: ``swizzle(allocate)`` (Hopper's 128-byte swizzle, ``compiler.ir.cuda``):
  every access goes through the mapping of ``swizzled_offset``, computed in LLVM; loop IR (and the
  interpreter) sees the logical layout. The buffer is 1024-byte aligned (checked at run time).

Non-goals: warp shuffles, atomics, and fragment accesses at indices known only at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir as ll

from compiler.arith import linear_form, simplify
from compiler.backend.llvm_emit import FunctionEmitter, _const_int, _flat_expr
from compiler.backend.llvm_types import I32, declare, memory_type, value_type
from compiler.backend.nvptx_launch import Launch, shared_bytes
from compiler.backend.nvptx_matrix import Geometry, fragment_registers, geometry, operand_region
from compiler.errors import CodegenError
from compiler.ir import dtypes
from compiler.ir import nodes as n
from compiler.ir.cuda import (
    ASYNC_COMMIT,
    ASYNC_COPY,
    ASYNC_WAIT,
    BARRIER,
    BLOCK_AXES,
    CHUNK,
    FRAGMENT,
    PROXY_FENCE,
    STATIC_SHARED_LIMIT,
    SWIZZLE,
    SWIZZLE_ALIGN,
    SWIZZLE_BYTES,
    SWIZZLE_ROWS,
    THREAD,
    THREAD_AXES,
    WARP,
    WG_COMMIT,
    WG_FENCE,
    WG_WAIT,
)
from compiler.ir.functor import IRVisitor, substitute

#: The PTX special register each hardware axis reads.
_SREG = {**{a: f"llvm.nvvm.read.ptx.sreg.ctaid.{a[-1]}" for a in BLOCK_AXES},
         **{a: f"llvm.nvvm.read.ptx.sreg.tid.{a[-1]}" for a in THREAD_AXES}}
GLOBAL_AS, SHARED_AS = 1, 3
#: The alignment of each buffer in dynamic shared memory (bytes).
DYNAMIC_ALIGN = 128


def _struct(ty: ll.Type, count: int) -> ll.LiteralStructType:
    return ll.LiteralStructType([ty] * count)


def _ptx_type(dtype: str) -> str:
    return {"f16": "f16", "f32": "f32", "s32": "s32", "s8": "s8", "u8": "u8"}[dtype]



@dataclass
class _Fragments:
    """A fragment allocation: each thread's registers for its warp's tiles."""

    buffer: n.Buffer
    geometry: Geometry
    role: str
    tiles: int                  # tiles per warp
    tile_cols: int              # tiles per row of the warp's part
    storage: ll.Value           # alloca [tiles x {regs}]
    regs: ll.LiteralStructType

    @property
    def part(self) -> int:
        """Elements of one warp's part (the coefficient of the warp index in a flat offset)."""
        return self.buffer.size // self.buffer.shape[0]


class KernelEmitter(FunctionEmitter):
    """Emits one kernel body (``func.body``, thread-bound loops outermost) as one PTX kernel function."""

    def __init__(self, module: ll.Module, name: str, buffers: list[n.Buffer], errors, launch: Launch) -> None:
        self.launch = launch
        super().__init__(module, name, buffers, errors)
        self.spaces: dict[n.Buffer, int] = dict.fromkeys(buffers, GLOBAL_AS)
        self.bound: dict[n.Var, str] = {}          # thread-bound variable -> its axis
        self.consts: dict[n.Var, int] = {}         # unrolled loop variable -> its value here
        self.fragments: dict[n.Buffer, _Fragments] = {}
        self.slices: dict[n.Buffer, n.Buffer] = {}   # a thread buffer -> this thread's slice
        self.shared_bytes = 0
        self.dynamic: ll.GlobalVariable | None = None   # the extern array of dynamic shared memory
        self.swizzled: set[n.Buffer] = set()       # shared buffers in the 128-byte swizzled layout

    def emit(self, stmt: n.Stmt, parallel: n.For | None = None) -> ll.Function:
        """Emit the kernel; its shared buffers are static while they fit ``STATIC_SHARED_LIMIT``, else
        parts of one dynamic array (``shared_bytes`` is then the size the launch passes)."""
        if shared_bytes(stmt) > STATIC_SHARED_LIMIT:
            ty = ll.ArrayType(ll.IntType(8), 0)
            self.dynamic = ll.GlobalVariable(self.module, ty, "dynamic_shared", addrspace=SHARED_AS)
            self.dynamic.linkage = "external"
            self.dynamic.align = SWIZZLE_ALIGN
            self.dynamic.type = ll.PointerType(addrspace=SHARED_AS)
        return super().emit(stmt, parallel)

    def declare_function(self, name: str, buffers: list[n.Buffer]) -> ll.Function:
        gptr = ll.PointerType(addrspace=GLOBAL_AS)
        fn = ll.Function(self.module, ll.FunctionType(ll.VoidType(), [gptr] * (len(buffers) + 1)), name)
        fn.calling_convention = "ptx_kernel"
        for arg in fn.args[: len(buffers)]:
            arg.add_attribute("noalias")
        self.fault = fn.args[-1]
        self.begin = self.end = None
        return fn

    def ret(self, fault: str | None) -> None:
        """Return from the thread, first writing the code of ``fault`` (if any) to the fault word."""
        if fault is not None:
            self.builder.store(ll.Constant(I32, self.errors.code(fault)), self.fault)
        self.builder.ret_void()

    # ---------------------------------------------------------------------------------------- statements
    def stmt_Attr(self, s: n.Attr) -> None:
        void = ll.VoidType()
        if s.key == BARRIER:
            self.builder.call(declare(self.module, "llvm.nvvm.barrier0", ll.FunctionType(void, [])), [])
        elif s.key == ASYNC_COMMIT:
            commit = declare(self.module, "llvm.nvvm.cp.async.commit.group", ll.FunctionType(void, []))
            self.builder.call(commit, [])
        elif s.key == ASYNC_WAIT:
            wait = declare(self.module, "llvm.nvvm.cp.async.wait.group", ll.FunctionType(void, [I32]))
            self.builder.call(wait, [ll.Constant(I32, int(s.value))])
        elif s.key == ASYNC_COPY:
            self._async_copy(s.body)
        elif s.key == PROXY_FENCE:
            self._asm("fence.proxy.async.shared::cta;")
        elif s.key == WG_COMMIT:
            self._asm("wgmma.commit_group.sync.aligned;")
        elif s.key in (WG_FENCE, WG_WAIT):
            op = "wgmma.fence.sync.aligned;" if s.key == WG_FENCE else \
                f"wgmma.wait_group.sync.aligned {int(s.value)};"
            self._asm(op)
            self._tie_accumulators()
        elif s.key == SWIZZLE:
            self._swizzled_allocation(s)
        else:
            self.stmt(s.body)

    def _asm(self, text: str, ty: ll.Type | None = None, constraints: str = "~{memory}",
             args: list[ll.Value] = ()) -> ll.Value:
        """Inline PTX ``text`` (volatile, a memory clobber) returning ``ty`` (void by default)."""
        fty = ll.FunctionType(ty or ll.VoidType(), [a.type for a in args])
        return self.builder.asm(fty, text, constraints, list(args), side_effect=True)

    def _tie_accumulators(self) -> None:
        """Pass every warpgroup accumulator through an empty asm (after a wgmma.fence or wait_group): the
        registers are read and written there, so no other instruction moves across it."""
        for frag in self.fragments.values():
            if not frag.geometry.shared:
                continue
            count = len(frag.regs.elements)
            tied = ",".join(["=f"] * count + [str(i) for i in range(count)])
            for t in range(frag.tiles):
                ptr = self._tile_ptr(frag, t)
                packed = self.builder.load(ptr, typ=frag.regs)
                regs = [self.builder.extract_value(packed, i) for i in range(count)]
                self.builder.store(self._asm("", frag.regs, tied, regs), ptr)

    def _swizzled_allocation(self, s: n.Attr) -> None:
        alloc = s.body
        b = alloc.buffer if isinstance(alloc, n.Allocate) else None
        if b is None or b.scope != "shared" or int(s.value) != SWIZZLE_BYTES:
            raise CodegenError(f"nvptx: a {SWIZZLE} attribute wraps the allocation of a shared buffer, with "
                               f"a span of {SWIZZLE_BYTES} bytes (got {s.value} around "
                               f"{type(alloc).__name__})")
        elem = b.dtype.bits // 8
        if len(b.shape) < 2 or b.shape[-2] % SWIZZLE_ROWS or (b.shape[-1] * elem) % SWIZZLE_BYTES:
            raise CodegenError(f"nvptx: swizzled buffer {b.name}{list(b.shape)}: its rows must be a multiple "
                               f"of {SWIZZLE_ROWS} and its row a multiple of {SWIZZLE_BYTES} bytes")
        self.swizzled.add(b)
        self.stmt(alloc)
        self.swizzled.discard(b)

    def _async_copy(self, loop: n.Stmt) -> None:
        """One ``cp.async`` of the vector a vectorized loop copies from global to shared memory."""
        text = str(loop).strip().replace("\n", " ")
        store = loop.body if isinstance(loop, n.For) and loop.kind is n.ForKind.VECTORIZED else None
        load = store.value if isinstance(store, n.Store) else None
        if not isinstance(load, n.Load):
            raise CodegenError(f"nvptx: '{text}': an asynchronous copy is a vectorized loop of one store "
                               "of a load")
        lanes = _const_int(loop.extent)
        size = (lanes or 0) * store.buffer.dtype.bits // 8
        if self.spaces.get(store.buffer) != SHARED_AS or self.spaces.get(load.buffer) != GLOBAL_AS or \
                store.buffer.dtype != load.buffer.dtype or size not in (4, 8, 16):
            raise CodegenError(f"nvptx: '{text}': an asynchronous copy moves 4, 8 or 16 bytes of one type "
                               f"from a global buffer to a shared one, not {size} bytes from "
                               f"{load.buffer.name} ({load.buffer.dtype}) to {store.buffer.name} "
                               f"({store.buffer.dtype})")

        def issue() -> None:
            ends = []
            for buffer, indices in ((store.buffer, store.indices), (load.buffer, load.indices)):
                if self._vector_access(buffer, indices) != "contiguous":
                    raise CodegenError(f"nvptx: '{text}': the lanes of {buffer.name} are not contiguous")
                ends.append(self.element_ptr(buffer, self._lane0_index(buffer, indices, text)))
            cache = "cg" if size == 16 else "ca"   # 16 bytes may bypass L1; smaller copies may not
            fn = declare(self.module, f"llvm.nvvm.cp.async.{cache}.shared.global.{size}",
                         ll.FunctionType(ll.VoidType(), [e.type for e in ends]))
            self.builder.call(fn, ends)

        self._vectorized(loop, issue)

    def stmt_For(self, s: n.For) -> None:
        if s.kind is n.ForKind.THREAD_BINDING:
            self._bound(s)
            return
        if self._fragment_nest(s):
            return
        extent, lo = _const_int(s.extent), _const_int(s.min)
        if s.kind is n.ForKind.UNROLLED and extent is not None and lo is not None:
            for v in range(lo, lo + extent):
                self.consts[s.var] = v
                self._bind(s.var, ll.Constant(value_type(s.var.dtype), v), n.const(v, s.var.dtype))
                self.stmt(s.body)
                self._unbind(s.var)
                del self.consts[s.var]
            return
        super().stmt_For(s)

    def _bound(self, s: n.For) -> None:
        axis, extent = s.thread, _const_int(s.extent)
        reg = self.builder.call(declare(self.module, _SREG[axis], ll.FunctionType(I32, [])), [])
        value = reg if s.var.dtype == dtypes.int32 else self.builder.zext(reg, ll.IntType(s.var.dtype.bits))
        self._bind(s.var, value, s.var)
        self.ranges[s.var] = self._loop_range(s)
        self.bound[s.var] = axis
        full = (self.launch.grid + self.launch.block)[(BLOCK_AXES + THREAD_AXES).index(axis)]
        if extent < full:
            inside = self.fn.append_basic_block(f"{s.var.name}.in")
            after = self.fn.append_basic_block(f"{s.var.name}.out")
            below = self.builder.icmp_unsigned("<", reg, ll.Constant(I32, extent))
            self.builder.cbranch(below, inside, after)
            self.builder.position_at_end(inside)
            self.stmt(s.body)
            self.builder.branch(after)
            self.builder.position_at_end(after)
        else:
            self.stmt(s.body)
        self._unbind(s.var)
        del self.bound[s.var]

    def stmt_Allocate(self, s: n.Allocate) -> None:
        b = s.buffer
        if b.scope == "shared":
            align = SWIZZLE_ALIGN if b in self.swizzled else DYNAMIC_ALIGN
            if self.dynamic is not None:
                offset = -(-self.shared_bytes // align) * align
                gv = self.allocas.gep(self.dynamic, [ll.Constant(I32, offset)], source_etype=ll.IntType(8),
                                      name=f"{b.name}.shared")
                self.shared_bytes = offset + b.nbytes
            else:
                ty = ll.ArrayType(memory_type(b.dtype), b.size)
                gv = ll.GlobalVariable(self.module, ty, self.module.get_unique_name(f"{b.name}.shared"),
                                       addrspace=SHARED_AS)
                gv.linkage = "internal"
                gv.initializer = ll.Constant(ty, ll.Undefined)
                gv.align = 16 if b not in self.swizzled else SWIZZLE_ALIGN
                gv.type = ll.PointerType(addrspace=SHARED_AS)   # an opaque pointer, as LLVM 22 has them
                self.shared_bytes += b.nbytes
            self.ptrs[b], self.spaces[b] = gv, SHARED_AS
            if b in self.swizzled:   # the swizzle's pattern repeats at absolute 1024-byte boundaries
                low = self.builder.and_(self.builder.ptrtoint(gv, ll.IntType(64)),
                                        ll.Constant(ll.IntType(64), SWIZZLE_ALIGN - 1))
                self.fail(self.builder.icmp_unsigned("==", low, ll.Constant(ll.IntType(64), 0)),
                          f"swizzled shared buffer {b.name} is not {SWIZZLE_ALIGN}-byte aligned")
            self.stmt(s.body)
            del self.ptrs[b], self.spaces[b]
            return
        if b.scope == FRAGMENT:
            self.fragments[b] = self._fragments(s)
            self.stmt(s.body)
            del self.fragments[b]
            return
        if b.scope == THREAD:
            if len(b.shape) < 3 or b.shape[:2] != (self.launch.block[1], self.launch.block[0]):
                raise CodegenError(f"nvptx: {b.name}{list(b.shape)}: a {THREAD} buffer's first axes are the "
                                   f"block's threads (threadIdx.y, threadIdx.x) = {self.launch.block[1]}, "
                                   f"{self.launch.block[0]}")
            view = n.Buffer(b.name, b.shape[2:], b.dtype, "local")
            self.slices[b] = view
            super().stmt_Allocate(n.Allocate(view, s.body))
            del self.slices[b]
            return
        if b.scope not in ("global", "local"):
            raise CodegenError(f"nvptx: allocation {b.name} in scope {b.scope!r}; a GPU kernel allocates in "
                               f"local, shared or {FRAGMENT}")
        super().stmt_Allocate(s)

    def _fragments(self, s: n.Allocate) -> _Fragments:
        b = s.buffer
        uses = set()

        class _Uses(IRVisitor):
            def visit_TensorInsn(self, t: n.TensorInsn) -> None:
                for r in t.regions:
                    if r.buffer is b:
                        uses.add((t.isa, t.name, r.operand))

        _Uses().visit(s.body)
        if len(uses) != 1:
            what = "no instruction" if not uses else f"several ({sorted((u[1], u[2]) for u in uses)})"
            raise CodegenError(f"nvptx: fragment {b.name} is the operand of {what}; a fragment holds one "
                               "operand of one matrix instruction")
        spec, name, operand = next(iter(uses))
        geo = geometry(spec, name)
        role = next(r for r, o in geo.roles.items() if o == operand)
        rows, cols = geo.shape(role)
        if len(b.shape) != 3 or b.shape[1] % rows or b.shape[2] % cols:
            raise CodegenError(f"nvptx: fragment {b.name}{list(b.shape)} must be [warps, rows, cols] with "
                               f"rows and cols multiples of the {rows}x{cols} operand {operand} of {name}")
        elem, count = fragment_registers(role, geo.dtypes[role], (rows, cols), geo.threads)
        regs = _struct(elem, count)
        tiles = b.shape[1] // rows * (b.shape[2] // cols)
        storage = self.allocas.alloca(ll.ArrayType(regs, tiles), name=b.name)
        storage.type = ll.PointerType()
        return _Fragments(b, geo, role, tiles, b.shape[2] // cols, storage, regs)

    # ---------------------------------------------------------------------------------------- fragments
    def _tile(self, frag: _Fragments, offset: n.Expr, text: str) -> int:
        """The tile of the warp's part at flat ``offset`` (which must start a tile), at compile time."""
        lf = linear_form(self._unrolled(offset))
        if lf is None:
            raise CodegenError(f"nvptx: {text}: the offset {offset} in fragment {frag.buffer.name} is not "
                               "affine")
        rest = lf.const
        for atom, coef in lf.terms.items():
            if not (isinstance(atom, n.Var) and self.bound.get(atom) in THREAD_AXES[1:]):
                raise CodegenError(f"nvptx: {text}: fragment {frag.buffer.name} is indexed by {atom}, which "
                                   "is not known at compile time (unroll the loops around fragment accesses)")
            if coef % frag.part:
                raise CodegenError(f"nvptx: {text}: fragment {frag.buffer.name}'s first axis is the warp, "
                                   f"but {atom} steps it by {coef} elements")
        rows, cols = frag.geometry.shape(frag.role)
        width = frag.buffer.shape[2]
        r, c = divmod(rest % frag.part, width)
        if r % rows or c % cols:
            raise CodegenError(f"nvptx: {text}: offset ({r}, {c}) in fragment {frag.buffer.name} does not "
                               f"start a {rows}x{cols} tile")
        return r // rows * frag.tile_cols + c // cols

    def _unrolled(self, e: n.Expr) -> n.Expr:
        """``e`` with the variables of the unrolled loops around it replaced by their values here."""
        return simplify(substitute(e, {v: n.const(c, v.dtype) for v, c in self.consts.items()}))

    def _tile_ptr(self, frag: _Fragments, tile: int) -> ll.Value:
        return self.builder.gep(frag.storage, [ll.Constant(I32, 0), ll.Constant(I32, tile)],
                                source_etype=ll.ArrayType(frag.regs, frag.tiles))

    def _space_suffix(self, buffer: n.Buffer) -> str:
        return f"p{self.spaces.get(buffer, 0)}"

    def stmt_TensorInsn(self, s: n.TensorInsn) -> None:
        text = str(s).strip()
        geo = geometry(s.isa, s.name)
        regions = {r.operand: r for r in s.regions}
        if geo.shared:
            self._warpgroup_mma(geo, regions, text)
            return
        values: list[ll.Value] = []
        for role in ("a", "b", "c"):
            r = operand_region(geo, regions, role, text)
            elem, count = fragment_registers(role, geo.dtypes[role], geo.shape(role))
            regs = _struct(elem, count)
            if r.buffer in self.fragments:
                frag = self.fragments[r.buffer]
                tile = self._tile_ptr(frag, self._tile(frag, r.offset, text))
                packed = self.builder.load(tile, typ=regs)
            else:
                ptr, ld = self._matrix_ptr(r, geo.shape(role), text)
                dtype, space = _ptx_type(geo.dtypes[role]), self._space_suffix(r.buffer)
                load = geo.name(f"load.{role}.row.stride.{dtype}.{space}")
                fn = declare(self.module, load, ll.FunctionType(regs, [ptr.type, I32]))
                packed = self.builder.call(fn, [ptr, ld])
            values += [self.builder.extract_value(packed, i) for i in range(count)]
        c_elem, c_count = fragment_registers("c", geo.dtypes["c"], geo.shape("c"))
        dty = _struct(c_elem, c_count)
        mma = declare(self.module, geo.intrinsic, ll.FunctionType(dty, [v.type for v in values]))
        d = self.builder.call(mma, values)
        out = regions[geo.roles["c"]]
        if out.buffer in self.fragments:
            frag = self.fragments[out.buffer]
            self.builder.store(d, self._tile_ptr(frag, self._tile(frag, out.offset, text)))
        else:
            self._store_d(geo, d, out.buffer, out.offset, self._region_ld(out, geo.shape("c"), text), text)

    def _warpgroup_mma(self, geo: Geometry, regions: dict[str, n.Region], text: str) -> None:
        """One ``wgmma.mma_async``: a and b as descriptors of swizzled shared regions, the accumulator a
        fragment tile (its registers in and out of the inline PTX)."""
        descs, flips = [], []
        for role in ("a", "b"):
            desc, flip = self._descriptor(operand_region(geo, regions, role, text), role, geo, text)
            descs.append(desc)
            flips.append(flip)
        out = regions.get(geo.roles["c"])
        if out is None or out.buffer not in self.fragments:
            raise CodegenError(f"nvptx: {text}: the accumulator of {geo.instruction} is a fragment")
        frag = self.fragments[out.buffer]
        ptr = self._tile_ptr(frag, self._tile(frag, out.offset, text))
        count = len(frag.regs.elements)
        packed = self.builder.load(ptr, typ=frag.regs)
        regs = [self.builder.extract_value(packed, i) for i in range(count)]
        d = ", ".join(f"${i}" for i in range(count))
        body = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${2 * count + 2}, 0;\n{geo.intrinsic} {{{d}}}, "
                f"${2 * count}, ${2 * count + 1}, p, 1, 1, {flips[0]}, {flips[1]};\n}}")
        constraints = ",".join(["=f"] * count + [str(i) for i in range(count)] + ["l", "l", "r"])
        result = self._asm(body, frag.regs, constraints, [*regs, *descs, ll.Constant(I32, 1)])
        self.builder.store(result, ptr)

    def _descriptor(self, r: n.Region, role: str, geo: Geometry, text: str) -> tuple[ll.Value, int]:
        """The 64-bit shared-memory matrix descriptor of operand region ``r`` (PTX ISA, "Matrix Descriptor
        Format") and its transpose flag: 0 when the reduction index is the contiguous one (K-major), 1 when
        the other is (MN-major). Core matrices are 8 rows of 16 bytes; in the 128-byte swizzle, K-major
        8-row groups are 1024 bytes apart (the stride offset; the leading one is unused), MN-major ones are
        1024 bytes apart along K (stride) and one column panel apart along M/N (leading)."""
        b = r.buffer
        if b not in self.swizzled:
            raise CodegenError(f"nvptx: {text}: operand {r.operand} of {geo.instruction} is read through a "
                               f"descriptor; buffer {b.name} must be a swizzled shared buffer")
        rows, cols = b.shape[-2], b.shape[-1]
        elem = b.dtype.bits // 8
        span = SWIZZLE_BYTES // elem
        shape = geo.shape(role)
        strides = [_const_int(x) for x in r.strides] if r.strides else [shape[1], 1]
        k_axis = 1 if role == "a" else 0
        k_stride, mn_stride = strides[k_axis], strides[1 - k_axis]
        k_extent, mn_extent = shape[k_axis], shape[1 - k_axis]
        if (k_stride, mn_stride) == (1, cols):
            flip, lead, stride = 0, CHUNK, SWIZZLE_ALIGN
            row_extent, col_extent, col_align = mn_extent, k_extent, CHUNK // elem
        elif (k_stride, mn_stride) == (cols, 1):
            flip, lead, stride = 1, rows * SWIZZLE_BYTES, SWIZZLE_ALIGN
            row_extent, col_extent, col_align = k_extent, mn_extent, span
        else:
            raise CodegenError(f"nvptx: {text}: operand {r.operand} in {b.name} has strides {strides}; a "
                               f"descriptor reads rows of the buffer ({cols} elements) along K or along M/N")
        flat = self.as_i64(self.expr(r.offset), r.offset.dtype)
        i64 = ll.IntType(64)

        def c(v: int) -> ll.Value:
            return ll.Constant(i64, v)

        row = self.builder.urem(self.builder.udiv(flat, c(cols)), c(rows))
        col = self.builder.urem(flat, c(cols))
        bad = self.builder.or_(self.builder.urem(row, c(SWIZZLE_ROWS)), self.builder.urem(col, c(col_align)))
        ok = self.builder.and_(self.builder.icmp_unsigned("==", bad, c(0)), self.builder.and_(
            self.builder.icmp_unsigned("<=", self.builder.add(row, c(row_extent)), c(rows)),
            self.builder.icmp_unsigned("<=", self.builder.add(self.builder.urem(col, c(span)),
                                                              c(min(col_extent, span))), c(span))))
        self.fail(ok, f"operand {r.operand} of '{text}' does not start an 8-row group of one swizzle panel "
                      f"of {b.name}")
        addr = self.builder.ptrtoint(self.element_ptr(b, flat), i64)
        desc = self.builder.lshr(self.builder.and_(addr, c(0x3FFFF)), c(4))
        desc = self.builder.or_(desc, c((lead >> 4) << 16 | (stride >> 4) << 32 | 1 << 62))
        return desc, flip

    def element_ptr(self, buffer: n.Buffer, flat: ll.Value) -> ll.Value:
        """As the CPU's, through the swizzle of a swizzled buffer (``swizzled_offset``, in LLVM)."""
        if buffer not in self.swizzled:
            return super().element_ptr(buffer, flat)
        rows, cols = buffer.shape[-2], buffer.shape[-1]
        elem = buffer.dtype.bits // 8
        span, vec = SWIZZLE_BYTES // elem, CHUNK // elem
        b, ty = self.builder, flat.type

        def c(v: int) -> ll.Value:
            return ll.Constant(ty, v)

        col, rest = b.urem(flat, c(cols)), b.udiv(flat, c(cols))
        row, lead = b.urem(rest, c(rows)), b.udiv(rest, c(rows))
        panel, inner = b.udiv(col, c(span)), b.urem(col, c(span))
        chunk = b.xor(b.udiv(inner, c(vec)), b.urem(row, c(SWIZZLE_ROWS)))
        phys = b.add(b.add(b.mul(lead, c(rows * cols)), b.mul(panel, c(rows * span))),
                     b.add(b.mul(row, c(span)), b.add(b.mul(chunk, c(vec)), b.urem(inner, c(vec)))))
        return super().element_ptr(buffer, phys)

    def _region_ld(self, r: n.Region, shape: tuple[int, int], text: str) -> n.Expr:
        """The leading dimension of a row-major region (its row stride); CodegenError for another layout."""
        if not r.strides:
            return n.const(shape[1])
        inner = _const_int(r.strides[-1])
        if len(r.strides) != 2 or inner != 1:
            raise CodegenError(f"nvptx: {text}: operand {r.operand} in {r.buffer.name} is not row-major "
                               f"(view {list(r.shape)}, strides {[str(x) for x in r.strides]}); the "
                               "instruction loads row-major operands")
        return r.strides[0]

    def _matrix_ptr(self, r: n.Region, shape: tuple[int, int], text: str) -> tuple[ll.Value, ll.Value]:
        ld = self._region_ld(r, shape, text)
        offset = self.as_i64(self.expr(r.offset), r.offset.dtype)
        self._check_rows(r.buffer, r.offset, ld, shape, offset, text)
        return self.element_ptr(r.buffer, offset), self._i32(ld)

    def _check_rows(self, buffer: n.Buffer, offset_expr: n.Expr, ld: n.Expr, shape, offset, text) -> None:
        last = simplify(offset_expr + ld * (shape[0] - 1) + (shape[1] - 1))
        lo_hi = [self._bound_of(offset_expr), self._bound_of(last)]
        if lo_hi[0].lo is not None and lo_hi[0].lo >= 0 and lo_hi[1].hi is not None and \
                lo_hi[1].hi < buffer.size:
            return
        end = self.as_i64(self.expr(last), last.dtype)
        ok = self.builder.and_(self.builder.icmp_signed(">=", offset, ll.Constant(offset.type, 0)),
                               self.builder.icmp_signed("<", end, ll.Constant(end.type, buffer.size)))
        self.fail(ok, f"a matrix operand of '{text}' leaves buffer {buffer.name}")

    def _bound_of(self, e: n.Expr):
        from compiler.arith import bound

        return bound(e, self.ranges)

    def _i32(self, e: n.Expr) -> ll.Value:
        v = self.expr(e)
        return v if v.type == I32 else self.builder.trunc(v, I32)

    def _store_d(self, geo: Geometry, d: ll.Value, buffer: n.Buffer, offset: n.Expr, ld: n.Expr,
                 text: str) -> None:
        off = self.as_i64(self.expr(offset), offset.dtype)
        self._check_rows(buffer, offset, ld, geo.shape("c"), off, text)
        if geo.shared:
            self._store_warpgroup_d(geo, d, buffer, off, ld)
            return
        ptr = self.element_ptr(buffer, off)
        c_elem, count = fragment_registers("c", geo.dtypes["c"], geo.shape("c"))
        name = geo.name(f"store.d.row.stride.{_ptx_type(geo.dtypes['c'])}.{self._space_suffix(buffer)}")
        fn = declare(self.module, name, ll.FunctionType(ll.VoidType(), [ptr.type] + [c_elem] * count + [I32]))
        regs = [self.builder.extract_value(d, i) for i in range(count)]
        self.builder.call(fn, [ptr, *regs, self._i32(ld)])

    def _store_warpgroup_d(self, geo: Geometry, d: ll.Value, buffer: n.Buffer, off: ll.Value, ld: n.Expr
                           ) -> None:
        """A warpgroup accumulator m64nN (f32) stored row-major: thread t of the warpgroup (warp w = t / 32,
        lane l) holds, for each 8 columns i, (16w + l/4, 8i + 2(l%4) + {0, 1}) in registers 4i, 4i+1 and
        the same 8 rows below in 4i+2, 4i+3 (PTX ISA, "Register fragment layout for accumulator matrix D"
        of wgmma .m64nNk16)."""
        b, i64 = self.builder, ll.IntType(64)
        tid = b.call(declare(self.module, _SREG["threadIdx.x"], ll.FunctionType(I32, [])), [])
        t = b.zext(b.urem(tid, ll.Constant(I32, geo.threads)), i64)
        warp, lane = b.udiv(t, ll.Constant(i64, WARP)), b.urem(t, ll.Constant(i64, WARP))
        stride = self.as_i64(self.expr(ld), ld.dtype)
        row = b.add(b.mul(warp, ll.Constant(i64, 16)), b.udiv(lane, ll.Constant(i64, 4)))
        col = b.mul(b.urem(lane, ll.Constant(i64, 4)), ll.Constant(i64, 2))
        base = b.add(off, b.add(b.mul(row, stride), col))
        below = b.mul(stride, ll.Constant(i64, 8))
        for i in range(geo.n // 8):
            for half in (0, 1):
                at = b.add(base, ll.Constant(i64, 8 * i))
                at = b.add(at, below) if half else at
                for e in (0, 1):
                    value = b.extract_value(d, 4 * i + 2 * half + e)
                    b.store(value, self.element_ptr(buffer, b.add(at, ll.Constant(i64, e))))

    # fragment fills and stores: a loop nest over whole tiles
    def _fragment_nest(self, s: n.For) -> bool:
        loops, body = [], s
        while isinstance(body, n.For) and body.kind is not n.ForKind.THREAD_BINDING:
            loops.append(body)
            body = body.body
        if not isinstance(body, n.Store):
            return False
        load = body.value.value if isinstance(body.value, n.Cast) else body.value
        if body.buffer in self.fragments:
            if not isinstance(body.value, n.IntImm | n.FloatImm):
                raise CodegenError(f"nvptx: '{str(body).strip()}': a fragment is written whole, by a "
                                   "constant or an instruction, not element by element")
            self._fill(loops, body)
            return True
        if isinstance(load, n.Load) and load.buffer in self.fragments:
            if load is not body.value:
                raise CodegenError(f"nvptx: '{str(body).strip()}': a fragment is stored as it is (no cast)")
            self._store_tiles(loops, body, load)
            return True
        return False

    def _points(self, loops: list[n.For], index: n.Expr, frag: _Fragments, text: str
                ) -> tuple[np.ndarray, np.ndarray]:
        """Every iteration of ``loops`` (their values, one row each) and the warp-part offset it touches."""
        for loop in loops:
            if _const_int(loop.min) is None or _const_int(loop.extent) is None:
                raise CodegenError(f"nvptx: {text}: loop {loop.var.name} around a fragment access must "
                                   "have constant bounds")
        lf = linear_form(self._unrolled(index))
        loop_vars = {loop.var for loop in loops}
        if lf is None or any(a not in loop_vars and not (isinstance(a, n.Var) and self.bound.get(a) in
                                                         THREAD_AXES[1:]) for a in lf.terms):
            raise CodegenError(f"nvptx: {text}: the fragment index is not affine in its loops and the warp")
        grids = np.meshgrid(*[np.arange(_const_int(lp.min), _const_int(lp.min) + _const_int(lp.extent))
                              for lp in loops], indexing="ij")
        values = np.stack([g.ravel() for g in grids], axis=1)
        offsets = np.full(len(values), lf.const % frag.part, dtype=np.int64)
        for k, loop in enumerate(loops):
            offsets += values[:, k] * lf.terms.get(loop.var, 0)
        return values, offsets

    def _covered(self, frag: _Fragments, offsets: np.ndarray, text: str) -> list[int]:
        rows, cols = frag.geometry.shape(frag.role)
        width = frag.buffer.shape[2]
        r, c = offsets // width, offsets % width
        tiles = (r // rows) * frag.tile_cols + c // cols
        found = sorted(set(tiles.tolist()))
        for t in found:
            if len(set(offsets[tiles == t].tolist())) != rows * cols:
                raise CodegenError(f"nvptx: {text}: the loops cover part of tile {t} of fragment "
                                   f"{frag.buffer.name}; fragments are filled and stored in whole tiles")
        return found

    def _fill(self, loops: list[n.For], store: n.Store) -> None:
        text = str(store).strip()
        frag = self.fragments[store.buffer]
        _, offsets = self._points(loops, _flat_expr(store.buffer, store.indices), frag, text)
        elem, count = frag.regs.elements[0], len(frag.regs.elements)
        scalar = memory_type(store.buffer.dtype)
        value = dtypes.round_to(float(store.value.value), store.buffer.dtype) if store.buffer.dtype.is_float \
            else int(store.value.value)
        one = ll.Constant(scalar, value)
        if isinstance(elem, ll.VectorType):
            one = ll.Constant(elem, [value] * elem.count)
        packed = ll.Constant(frag.regs, [one] * count)
        for t in self._covered(frag, offsets, text):
            self.builder.store(packed, self._tile_ptr(frag, t))

    def _store_tiles(self, loops: list[n.For], store: n.Store, load: n.Load) -> None:
        text = str(store).strip()
        frag = self.fragments[load.buffer]
        if store.buffer.dtype != load.buffer.dtype:
            raise CodegenError(f"nvptx: {text}: fragment {load.buffer.name} holds {load.buffer.dtype}, "
                               f"stored into {store.buffer.name} of {store.buffer.dtype}")
        values, offsets = self._points(loops, _flat_expr(load.buffer, load.indices), frag, text)
        dst = _flat_expr(store.buffer, store.indices)
        rows, cols = frag.geometry.shape(frag.role)
        width = frag.buffer.shape[2]
        ld = self._destination_ld(loops, load, dst, width, text)
        for t in self._covered(frag, offsets, text):
            origin = (t // frag.tile_cols) * rows * width + (t % frag.tile_cols) * cols
            at = int(np.flatnonzero(offsets == origin)[0])
            point = {loop.var: n.const(int(values[at, k]), loop.var.dtype) for k, loop in enumerate(loops)}
            offset = simplify(substitute(dst, point))
            packed = self.builder.load(self._tile_ptr(frag, t), typ=frag.regs)
            self._store_d(frag.geometry, packed, store.buffer, offset, ld, text)

    def _destination_ld(self, loops: list[n.For], load: n.Load, dst: n.Expr, width: int, text: str) -> n.Expr:
        """The row stride of the destination: each loop steps the destination as it steps the fragment,
        a fragment column by 1 and a fragment row by the leading dimension."""
        src = linear_form(_flat_expr(load.buffer, load.indices))
        to = linear_form(dst)
        if to is None:
            raise CodegenError(f"nvptx: {text}: the destination index is not affine")
        ld = None
        for loop in loops:
            f, d = src.terms.get(loop.var, 0), to.terms.get(loop.var, 0)
            row, col = divmod(f, width)
            if row and col:
                raise CodegenError(f"nvptx: {text}: loop {loop.var.name} steps the fragment diagonally")
            if col and d != col:
                raise CodegenError(f"nvptx: {text}: the destination is not row-major along the fragment's "
                                   "columns (a fragment store writes rows with unit stride)")
            if row:
                if d % row:
                    raise CodegenError(f"nvptx: {text}: loop {loop.var.name} steps the destination by {d}, "
                                       f"not a multiple of its {row} fragment rows")
                if ld is not None and ld != d // row:
                    raise CodegenError(f"nvptx: {text}: the destination's rows have no one stride")
                ld = d // row
        if ld is None:
            raise CodegenError(f"nvptx: {text}: no loop steps the fragment's rows")
        return n.const(ld)

    # ---------------------------------------------------------------------------------------- memory
    def _slice(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], text: str
               ) -> tuple[n.Buffer, tuple[n.Expr, ...]]:
        """A thread buffer's access as an access of this thread's slice (the first two indices must be the
        variables bound to threadIdx.y and threadIdx.x); any other access as it is."""
        view = self.slices.get(buffer)
        if view is None:
            return buffer, indices
        axes = tuple(self.bound.get(i) if isinstance(i, n.Var) else None for i in indices[:2])
        if axes != ("threadIdx.y", "threadIdx.x"):
            raise CodegenError(f"nvptx: '{text}': a {THREAD} buffer is indexed first by the variables bound "
                               f"to threadIdx.y and threadIdx.x, not by {', '.join(map(str, indices[:2]))}")
        return view, indices[2:]

    def load(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], text: str) -> ll.Value:
        self._swizzled_vector(buffer, indices, text)
        return super().load(*self._slice(buffer, indices, text), text)

    def store(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], value: ll.Value, text: str) -> None:
        self._swizzled_vector(buffer, indices, text)
        super().store(*self._slice(buffer, indices, text), value, text)

    def _swizzled_vector(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], text: str) -> None:
        """A vector access of a swizzled buffer stays inside one 16-byte chunk (the swizzle moves chunks)."""
        if buffer not in self.swizzled or self.vector is None or \
                self._vector_access(buffer, indices) != "contiguous":
            return
        size = self.vector.lanes * buffer.dtype.bits // 8
        if size > CHUNK or self.vector_align(buffer, indices) < size:
            raise CodegenError(f"nvptx: '{text}': a vector access of swizzled buffer {buffer.name} moves "
                               f"{size} bytes not known to lie in one aligned {CHUNK}-byte chunk")

    def vector_align(self, buffer: n.Buffer, indices: tuple[n.Expr, ...]) -> int:
        """Buffers start 16-byte aligned (shared globals by declaration, device allocations by the
        driver): a vector access whose lane-0 offset is a multiple of its lanes may use the vector's
        alignment, up to 16 bytes."""
        elem = buffer.dtype.bits // 8
        lanes = self.vector.lanes
        lf = linear_form(_flat_expr(buffer, indices))
        if lf is None:
            return elem
        parts = [c for a, c in lf.terms.items() if a is not self.vector.var] + [lf.const]
        base = self.vector.base
        if not isinstance(base, ll.Constant) or int(base.constant) % lanes:
            return elem
        if all(p % lanes == 0 for p in parts):
            return min(16, lanes * elem)
        return elem
