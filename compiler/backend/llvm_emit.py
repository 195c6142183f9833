"""Loop IR -> LLVM IR: the code generator of the CPU backend (``compiler.backend.llvm`` drives it).

One ``FunctionEmitter`` turns one statement into one LLVM function ``i32 f(ptr noalias %buf..., i64 %begin,
i64 %end)``: the buffers it touches are its pointer arguments (row-major, elements of the buffer's dtype),
and when the statement is a parallel loop, ``[begin, end)`` is the slice of its iterations this call runs.
It returns 0, or the 1-based number of the run-time fault it hit in its ``errors`` table.

Semantics are the reference interpreter's (``compiler.interp``), bit for bit:
- integers wrap; FloorDiv/FloorMod round toward minus infinity; a zero divisor is a fault, and
  ``INT_MIN // -1`` wraps instead of trapping;
- f32 and f16 arithmetic is LLVM's (one rounding per operation, no contraction into FMAs), except inside a
  ``pragma_fp_contract`` mark, whose float multiplies and adds LLVM may fuse (one rounding where the
  interpreter rounds twice: the one place results may differ from it, in the last bit of each fused step);
  bfloat16 values live in ``float`` registers and are rounded to bfloat16 (nearest even) after every
  operation and when a bfloat16 parameter is loaded;
- Min/Max follow ``np.minimum``/``np.maximum`` (a NaN operand wins; of two equal values, the second);
- Shr/Shl follow ``np.right_shift``/``np.left_shift`` (ashr for signed values, lshr for unsigned; an amount
  outside [0, bits), negative ones too, shifts every bit out: the amount is clamped, LLVM's shifts are not
  defined there);
- casts: float -> int truncates, and a value out of the target's range (or NaN/inf) is a fault;
  int -> bfloat16 rounds once (through an exact double);
- ``if_then_else`` and ``IfThenElse`` evaluate only the chosen branch; Select evaluates both;
- every Load/Store index that interval analysis cannot prove in bounds is checked at run time.

Loops: serial loops become counted loops; unrolled loops with a constant extent of at most
``MAX_UNROLL`` are emitted once per iteration with the variable a constant (so that the indices of small
local buffers fold and LLVM keeps them in registers); a vectorized loop with a constant extent whose body
is straight-line code (Stores, Lets, guards that do not depend on the lane) becomes vector IR, one lane per
iteration: loads and stores contiguous in the loop variable are vector loads and stores, lane-invariant ones
stay scalar, any other is gathered or scattered lane by lane. A vectorized loop that cannot be (a nested
loop, a lane-dependent guard, a buffer both loaded and stored at different indices) runs as a serial loop
(``compiler.backend.llvm_vectorize`` tells them apart).
Parallel and thread-bound loops below the top level run serially inside their thread.

Allocations become stack memory (``alloca`` in the entry block) up to ``STACK_LIMIT`` bytes per function,
heap memory (malloc/free) beyond. Tensor instructions of a real ISA (``TensorInsn(isa="x86")``) become
their LLVM intrinsic; their register operands are prepared from the regions' views
(``compiler.backend.llvm_operands``).

Non-Goals: tracking uninitialized memory (the interpreter does); FloorDiv/FloorMod on floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir as ll

from compiler.arith import Interval, bound, linear_form, simplify
from compiler.arith.float_bounds import float_bounds, never_nan, rounded_operand
from compiler.backend.llvm_types import (
    DOUBLE,
    FLOAT,
    I1,
    I8,
    I32,
    I64,
    PTR,
    ErrorTable,
    declare,
    element_bytes,
    is_vec,
    memory_type,
    resize_float,
    scalar_type,
    value_type,
)
from compiler.backend.llvm_vectorize import _const_int, vectorizable
from compiler.errors import CodegenError
from compiler.ir import dtypes
from compiler.ir import nodes as n
from compiler.ir.dae_tokens import DepToken
from compiler.ir.dtypes import DType
from compiler.ir.functor import free_vars
from compiler.ir.intrinsics import MATH, Call
from compiler.ir.shifts import Shl, Shr

#: the marks (``Attr`` keys) that change how the statements inside them are emitted
MARKS = ("pragma_fp_contract", "pragma_nontemporal")
LINE = 64   # bytes: the vector a non-temporal store writes whole, on a line of its own
MAX_UNROLL = 64
STACK_LIMIT = 512 * 1024

@dataclass(frozen=True)
class VectorLoop:
    """The loop being vectorized: its variable, the scalar value of lane 0 and the number of lanes."""

    var: n.Var
    base: ll.Value
    lanes: int


class FunctionEmitter:
    """Emits one statement as one LLVM function over the buffers it touches."""

    def __init__(self, module: ll.Module, name: str, buffers: list[n.Buffer], errors: ErrorTable,
                 rules: Callable | None = None) -> None:
        self.module, self.errors, self.rules = module, errors, rules
        self.fn = self.declare_function(name, buffers)
        self.ptrs: dict[n.Buffer, ll.Value] = dict(zip(buffers, self.fn.args, strict=False))
        self.params = frozenset(buffers)  # the buffers passed in (an Allocate adds to ``ptrs`` only)
        self.entry = self.fn.append_basic_block("entry")
        self.builder = ll.IRBuilder(self.fn.append_basic_block("body"))
        self.allocas = ll.IRBuilder(self.entry)
        self.vars: dict[n.Var, ll.Value] = {}
        self.ranges: dict[n.Var, Interval] = {}
        self.varying: set[n.Var] = set()  # variables whose value differs between lanes
        self.vector: VectorLoop | None = None
        self.stack_bytes = 0
        self.marks: set[str] = set()   # the MARKS around the statement being emitted
        self.streamed = False          # a non-temporal store was emitted: fence them before returning
        self.heap: list[ll.Value] = []  # malloc'ed buffers live at this point (freed on a fault)

    def declare_function(self, name: str, buffers: list[n.Buffer]) -> ll.Function:
        """The function: one noalias pointer per buffer, then the [begin, end) slice of a parallel loop."""
        fnty = ll.FunctionType(I32, [PTR] * len(buffers) + [I64, I64])
        fn = ll.Function(self.module, fnty, name)
        for arg in fn.args[: len(buffers)]:
            arg.add_attribute("noalias")
        self.begin, self.end = fn.args[-2], fn.args[-1]
        return fn

    # ---------------------------------------------------------------------------------------- driver
    def emit(self, stmt: n.Stmt, parallel: n.For | None = None) -> ll.Function:
        """Emit ``stmt``; when ``parallel`` is the statement, run only its iterations [begin, end), each
        clamped to its extent: LLVM then bounds every index (no wrap), so that LICM keeps a tile's sums in
        registers across a reduction loop (``compiler.ops.cpu``'s ``k_block``)."""
        if parallel is not None:
            ty = value_type(parallel.var.dtype)
            lo, umin = self.expr(parallel.min), self._libc("llvm.umin.i64", I64, [I64, I64])
            count = self.as_i64(self.expr(parallel.extent), parallel.extent.dtype)
            begin, end = (self.builder.call(umin, [x, count]) for x in (self.begin, self.end))
            start = self.builder.add(lo, self.builder.trunc(begin, ty) if ty != I64 else begin)
            stop = self.builder.add(lo, self.builder.trunc(end, ty) if ty != I64 else end)
            self._counted(parallel, start, stop, lambda: self.stmt(parallel.body))
        else:
            self.stmt(stmt)
        self.ret(None)
        self.allocas.branch(self.fn.blocks[1])
        return self.fn

    def ret(self, fault: str | None) -> None:
        """Return: 0, or (freeing the heap buffers) the code of ``fault``."""
        if fault is None:
            if self.streamed:   # non-temporal stores are weakly ordered: done before the caller reads them
                self.builder.fence("seq_cst")
            self.builder.ret(ll.Constant(I32, 0))
            return
        for p in self.heap:
            self.builder.call(self._libc("free", ll.VoidType(), [PTR]), [p])
        self.builder.ret(ll.Constant(I32, self.errors.code(fault)))

    def fail(self, ok: ll.Value, message: str) -> None:
        """Continue where ``ok`` holds; otherwise return the fault ``message`` (``ret``)."""
        bad = self.fn.append_basic_block("fault")
        good = self.fn.append_basic_block("ok")
        self.builder.cbranch(ok, good, bad)
        self.builder.position_at_end(bad)
        self.ret(message)
        self.builder.position_at_end(good)

    def _libc(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        return declare(self.module, name, ll.FunctionType(ret, args))

    # ---------------------------------------------------------------------------------------- statements
    def stmt(self, s: n.Stmt) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise CodegenError(f"llvm: no code generation for {type(s).__name__}: {s}")
        method(s)

    def stmt_Seq(self, s: n.Seq) -> None:
        for x in s.stmts:
            self.stmt(x)

    def stmt_Attr(self, s: n.Attr) -> None:
        if s.key not in MARKS or s.key in self.marks:
            self.stmt(s.body)
            return
        self.marks.add(s.key)
        try:
            self.stmt(s.body)
        finally:
            self.marks.discard(s.key)

    def stmt_DepToken(self, s: DepToken) -> None:
        """Tokens order the units of a decoupled machine; sequential code needs none."""

    def stmt_Evaluate(self, s: n.Evaluate) -> None:
        self.expr(s.value)

    def stmt_Let(self, s: n.Let) -> None:
        value = self.expr(s.value)
        self._bind(s.var, value, s.value)
        self.stmt(s.body)
        self._unbind(s.var)

    def stmt_Store(self, s: n.Store) -> None:
        value = self.expr(s.value)
        self.store(s.buffer, s.indices, value, str(s).strip())

    def stmt_IfThenElse(self, s: n.IfThenElse) -> None:
        cond = self.expr(s.cond)
        if isinstance(cond.type, ll.VectorType):
            raise CodegenError(f"llvm: a guard that differs between vector lanes: {s.cond}")
        then_block = self.fn.append_basic_block("then")
        merge = self.fn.append_basic_block("endif")
        else_block = self.fn.append_basic_block("else") if s.else_case is not None else merge
        self.builder.cbranch(cond, then_block, else_block)
        self.builder.position_at_end(then_block)
        self.stmt(s.then_case)
        self.builder.branch(merge)
        if s.else_case is not None:
            self.builder.position_at_end(else_block)
            self.stmt(s.else_case)
            self.builder.branch(merge)
        self.builder.position_at_end(merge)

    def stmt_Allocate(self, s: n.Allocate) -> None:
        b = s.buffer
        ty = memory_type(b.dtype)
        nbytes = b.size * element_bytes(ty)
        heap = self.stack_bytes + nbytes > STACK_LIMIT
        if heap:
            ptr = self.builder.call(self._libc("malloc", PTR, [I64]), [ll.Constant(I64, nbytes)])
            null = self.builder.icmp_unsigned("!=", ptr, ll.Constant(PTR, None))
            self.fail(null, f"out of memory allocating {b.name} ({nbytes} bytes)")
            self.heap.append(ptr)
        else:
            self.stack_bytes += nbytes
            ptr = self.allocas.alloca(ll.ArrayType(ty, b.size), name=b.name)
            ptr.align = 64
            ptr.type = PTR  # llvmlite types an alloca as a typed pointer; LLVM 22 has only opaque ones
        self.ptrs[b] = ptr
        self.stmt(s.body)
        del self.ptrs[b]
        if heap:
            self.heap.remove(ptr)
            self.builder.call(self._libc("free", ll.VoidType(), [PTR]), [ptr])

    def stmt_For(self, s: n.For) -> None:
        extent = _const_int(s.extent)
        if s.kind is n.ForKind.UNROLLED and extent is not None and extent <= MAX_UNROLL \
                and _const_int(s.min) is not None:
            lo = _const_int(s.min)
            for v in range(lo, lo + extent):
                self._bind(s.var, ll.Constant(value_type(s.var.dtype), v), n.const(v, s.var.dtype))
                self.stmt(s.body)
                self._unbind(s.var)
            return
        if s.kind is n.ForKind.VECTORIZED and self.vector is None and vectorizable(s):
            self._vectorized(s)
            return
        lo = self.expr(s.min)
        hi = self.builder.add(lo, self.expr(s.extent))
        self._counted(s, lo, hi, lambda: self.stmt(s.body))

    def _counted(self, s: n.For, lo: ll.Value, hi: ll.Value, body: Callable[[], None]) -> None:
        """``for var in [lo, hi)``: a loop with a phi for the variable."""
        before = self.builder.block
        header = self.fn.append_basic_block(f"{s.var.name}.head")
        loop = self.fn.append_basic_block(f"{s.var.name}.body")
        exit_ = self.fn.append_basic_block(f"{s.var.name}.exit")
        self.builder.branch(header)
        self.builder.position_at_end(header)
        var = self.builder.phi(lo.type, name=s.var.name)
        var.add_incoming(lo, before)
        self.builder.cbranch(self.builder.icmp_signed("<", var, hi), loop, exit_)
        self.builder.position_at_end(loop)
        self.vars[s.var] = var
        self.ranges[s.var] = self._loop_range(s)
        body()
        del self.vars[s.var], self.ranges[s.var]
        var.add_incoming(self.builder.add(var, ll.Constant(var.type, 1)), self.builder.block)
        self.builder.branch(header)
        self.builder.position_at_end(exit_)

    def _loop_range(self, s: n.For) -> Interval:
        lo = bound(s.min, self.ranges)
        if s.min.dtype != s.extent.dtype:
            return Interval(lo.lo, None)
        last = bound(s.min + s.extent - 1, self.ranges)
        if lo.lo is not None and last.hi is not None and last.hi < lo.lo:  # the loop never runs
            return Interval.point(lo.lo)
        return Interval(lo.lo, last.hi)

    def _vectorized(self, s: n.For, emit: Callable[[], None] | None = None) -> None:
        """``s`` as one vector of its lanes: its body (or ``emit()``, a target's own use of the lanes)
        emitted once with the loop variable a vector."""
        lanes = _const_int(s.extent)
        base = self.expr(s.min)
        ty = value_type(s.var.dtype)
        offsets = ll.Constant(ll.VectorType(ty, lanes), list(range(lanes)))
        self.vector = VectorLoop(s.var, base, lanes)
        self.vars[s.var] = self.builder.add(self.splat(base), offsets)
        self.ranges[s.var] = self._loop_range(s)
        self.varying.add(s.var)
        try:
            emit() if emit is not None else self.stmt(s.body)
        finally:
            self.vector = None
            self.varying.discard(s.var)
            del self.vars[s.var], self.ranges[s.var]

    def stmt_TensorInsn(self, s: n.TensorInsn) -> None:
        if self.rules is None:
            raise CodegenError(f"llvm: no CPU instruction rules for {s}")
        self.rules(self, s)

    # ---------------------------------------------------------------------------------------- bindings
    def _bind(self, var: n.Var, value: ll.Value, expr: n.Expr) -> None:
        self.vars[var] = value
        if var.dtype.is_int:
            self.ranges[var] = bound(expr, self.ranges)
        if isinstance(value.type, ll.VectorType):
            self.varying.add(var)

    def _unbind(self, var: n.Var) -> None:
        self.vars.pop(var)
        self.ranges.pop(var, None)
        self.varying.discard(var)

    # ---------------------------------------------------------------------------------------- memory
    def _flat_index(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], text: str) -> ll.Value:
        """The row-major element offset (i64) of ``buffer[indices]``, checked unless provably in bounds."""
        flat = None
        for index, size in zip(indices, buffer.shape, strict=True):
            v = self.as_i64(self.expr(index), index.dtype)
            within = bound(index, self.ranges)
            if within.lo is None or within.hi is None or within.lo < 0 or within.hi >= size:
                self.check_index(v, size, text)
            if flat is not None:
                v = self.builder.add(self.builder.mul(flat, self._like(v, I64, size)), v)
            flat = v
        return flat

    def check_index(self, v: ll.Value, size: int, text: str) -> None:
        """Fault unless ``0 <= v < size`` (in every lane of a vector)."""
        ok = self.builder.icmp_unsigned("<", v, self._like(v, I64, size))
        if isinstance(ok.type, ll.VectorType):
            ok = self._all_lanes(ok)
        self.fail(ok, f"out-of-bounds access in '{text}' (dimension of size {size})")

    def _all_lanes(self, mask: ll.Value) -> ll.Value:
        lanes = mask.type.count
        bits = self.builder.bitcast(mask, ll.IntType(lanes))
        return self.builder.icmp_unsigned("==", bits, ll.Constant(ll.IntType(lanes), (1 << lanes) - 1))

    def as_i64(self, v: ll.Value, dt: DType) -> ll.Value:
        """An integer value of ``dt`` widened to i64 (sign- or zero-extended by its signedness)."""
        target = self._like(v, I64)
        if v.type == target:
            return v
        return self.builder.sext(v, target) if dt.kind == "int" else self.builder.zext(v, target)

    def element_ptr(self, buffer: n.Buffer, flat: ll.Value) -> ll.Value:
        ptr = self.ptrs.get(buffer)
        if ptr is None:
            raise CodegenError(f"llvm: buffer {buffer.name} is neither a parameter nor allocated here")
        return self.builder.gep(ptr, [flat], source_etype=memory_type(buffer.dtype))

    def load(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], text: str) -> ll.Value:
        mode = self._vector_access(buffer, indices)
        ety = memory_type(buffer.dtype)
        if mode == "contiguous":
            flat = self._lane0_index(buffer, indices, text)
            vty = ll.VectorType(ety, self.vector.lanes)
            raw = self.builder.load(self.element_ptr(buffer, flat), typ=vty,
                                    align=self.vector_align(buffer, indices))
        elif mode == "gather":
            flat = self._flat_index(buffer, indices, text)
            raw = ll.Constant(ll.VectorType(ety, flat.type.count), None)
            for k in range(flat.type.count):
                lane = self.builder.extract_element(flat, ll.Constant(I32, k))
                item = self.builder.load(self.element_ptr(buffer, lane), typ=ety)
                raw = self.builder.insert_element(raw, item, ll.Constant(I32, k))
        else:
            flat = self._flat_index(buffer, indices, text)
            raw = self.builder.load(self.element_ptr(buffer, flat), typ=ety)
        if buffer.dtype.is_bool:
            return self.builder.icmp_unsigned("!=", raw, self._like(raw, I8, 0))
        if buffer.dtype == dtypes.bfloat16 and buffer in self.params:  # allocations hold rounded values
            return self.round_bf16(raw)
        return raw

    def store(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], value: ll.Value, text: str) -> None:
        if buffer.dtype.is_bool:
            value = self.builder.zext(value, self._like(value, I8))
        mode = self._vector_access(buffer, indices)
        if mode == "contiguous":
            flat = self._lane0_index(buffer, indices, text)
            value, ptr = self.splat(value), self.element_ptr(buffer, flat)
            if "pragma_nontemporal" in self.marks and buffer in self.params and \
                    value.type.count * element_bytes(memory_type(buffer.dtype)) == LINE:
                self._stream(value, ptr, self.vector_align(buffer, indices))
                return
            self.builder.store(value, ptr, align=self.vector_align(buffer, indices))
            return
        flat = self._flat_index(buffer, indices, text)
        vec_index = isinstance(flat.type, ll.VectorType)
        if not vec_index and isinstance(value.type, ll.VectorType):
            value = self.builder.extract_element(value, ll.Constant(I32, value.type.count - 1))  # last wins
        if not vec_index:
            self.builder.store(value, self.element_ptr(buffer, flat))
            return
        value = self.splat(value)
        for k in range(flat.type.count):  # scatter in lane order: a later lane's write wins, as serially
            lane = self.builder.extract_element(flat, ll.Constant(I32, k))
            item = self.builder.extract_element(value, ll.Constant(I32, k))
            self.builder.store(item, self.element_ptr(buffer, lane))

    def _stream(self, value: ll.Value, ptr: ll.Value, align: int) -> None:
        """Store the line ``value`` at ``ptr`` non-temporally where ``ptr`` starts a line (the instruction
        needs it; arrays handed to kernels do, ``compiler.backend.aligned``), else as any store."""
        b = self.builder
        on_line = b.icmp_unsigned("==", b.and_(b.ptrtoint(ptr, I64), ll.Constant(I64, LINE - 1)),
                                  ll.Constant(I64, 0))
        with b.if_else(on_line) as (streamed, stored):
            with streamed:
                b.store(value, ptr, align=LINE).set_metadata(
                    "nontemporal", self.module.add_metadata([ll.Constant(I32, 1)]))
            with stored:
                b.store(value, ptr, align=align)
        self.streamed = True

    def vector_align(self, buffer: n.Buffer, indices: tuple[n.Expr, ...]) -> int:
        """The alignment (bytes) a contiguous vector access of ``buffer[indices]`` may assume: one element's
        (a target that knows its buffers' alignment says more)."""
        return element_bytes(memory_type(buffer.dtype))

    def _vector_access(self, buffer: n.Buffer, indices: tuple[n.Expr, ...]) -> str:
        """"scalar" (same address in every lane), "contiguous" (lane k at lane 0's + k) or "gather"."""
        if self.vector is None or not any(v in self.varying for i in indices for v in free_vars(i)):
            return "scalar"
        lf = linear_form(_flat_expr(buffer, indices))
        var = self.vector.var
        if lf is not None and lf.terms.get(var) == 1 and not any(
            atom is not var and any(v in self.varying for v in free_vars(atom)) for atom in lf.terms
        ):
            return "contiguous"
        return "gather"

    def _lane0_index(self, buffer: n.Buffer, indices: tuple[n.Expr, ...], text: str) -> ll.Value:
        """The flat index of lane 0 of a contiguous access, with the whole vector's range checked."""
        vl = self.vector
        vec_value = self.vars[vl.var]
        self.vars[vl.var], self.varying = vl.base, self.varying - {vl.var}
        try:
            flat_expr = simplify(_flat_expr(buffer, indices))   # canonical: LLVM sees constant distances
            flat = self.as_i64(self.expr(flat_expr), flat_expr.dtype)
            within = bound(flat_expr, self.ranges)  # the variable's range covers every lane
            if within.lo is None or within.hi is None or within.lo < 0 or within.hi >= buffer.size:
                last = self.builder.add(flat, ll.Constant(I64, vl.lanes - 1))
                ok = self.builder.and_(self.builder.icmp_signed(">=", flat, ll.Constant(I64, 0)),
                                       self.builder.icmp_signed("<", last, ll.Constant(I64, buffer.size)))
                self.fail(ok, f"out-of-bounds access in '{text}' (buffer of {buffer.size} elements)")
            return flat
        finally:
            self.vars[vl.var] = vec_value
            self.varying = self.varying | {vl.var}

    # ---------------------------------------------------------------------------------------- values
    def splat(self, v: ll.Value) -> ll.Value:
        """``v`` as a vector of the current loop's lanes (a vector stays as it is)."""
        if self.vector is None or isinstance(v.type, ll.VectorType):
            return v
        lanes = self.vector.lanes
        if isinstance(v, ll.Constant):
            return ll.Constant(ll.VectorType(v.type, lanes), [v.constant] * lanes)
        vty = ll.VectorType(v.type, lanes)
        one = self.builder.insert_element(ll.Constant(vty, None), v, ll.Constant(I32, 0))
        zeros = ll.Constant(ll.VectorType(I32, lanes), None)
        return self.builder.shuffle_vector(one, ll.Constant(vty, None), zeros)

    def _like(self, v: ll.Value, ty: ll.Type, value=None):
        """Type ``ty`` shaped like ``v`` (scalar or vector); with ``value``, that constant."""
        t = ll.VectorType(ty, v.type.count) if isinstance(v.type, ll.VectorType) else ty
        if value is None:
            return t
        if isinstance(t, ll.VectorType):
            return ll.Constant(t, [ll.Constant(ty, value).constant] * t.count)
        return ll.Constant(t, value)

    def _pair(self, a: ll.Value, b: ll.Value) -> tuple[ll.Value, ll.Value]:
        if isinstance(a.type, ll.VectorType) or isinstance(b.type, ll.VectorType):
            return self.splat(a), self.splat(b)
        return a, b

    def round_bf16(self, v: ll.Value) -> ll.Value:
        """Round float values to bfloat16 (nearest even); NaN stays as it is (``dtypes.round_bfloat16``)."""
        b = self.builder
        bits = b.bitcast(v, self._like(v, I32))
        keep = b.and_(b.lshr(bits, self._like(bits, I32, 16)), self._like(bits, I32, 1))
        rounded = b.add(b.add(bits, self._like(bits, I32, 0x7FFF)), keep)
        rounded = b.and_(rounded, self._like(bits, I32, 0xFFFF0000))
        nan = b.fcmp_unordered("uno", v, v)
        return b.select(nan, v, b.bitcast(rounded, v.type))

    def expr(self, e: n.Expr) -> ll.Value:
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise CodegenError(f"llvm: no code generation for {type(e).__name__}: {e}")
        return method(e)

    def expr_Var(self, e: n.Var) -> ll.Value:
        try:
            return self.vars[e]
        except KeyError:
            raise CodegenError(f"llvm: variable '{e.name}' is not bound here") from None

    def expr_IntImm(self, e: n.IntImm) -> ll.Value:
        return ll.Constant(value_type(e.dtype), int(e.value))

    def expr_FloatImm(self, e: n.FloatImm) -> ll.Value:
        return ll.Constant(value_type(e.dtype), dtypes.round_to(float(e.value), e.dtype))

    def _arith(self, e: n.BinaryOp, int_op: str, float_op: str) -> ll.Value:
        a, b = self._pair(self.expr(e.a), self.expr(e.b))
        if e.dtype.is_float:
            contract = "pragma_fp_contract" in self.marks and float_op in ("fadd", "fmul")
            flags = ("contract",) if contract else ()
            out = getattr(self.builder, float_op)(a, b, flags=flags)
            return self.round_bf16(out) if e.dtype == dtypes.bfloat16 else out
        return getattr(self.builder, int_op)(a, b)

    def expr_Add(self, e: n.Add) -> ll.Value:
        return self._arith(e, "add", "fadd")

    def expr_Sub(self, e: n.Sub) -> ll.Value:
        return self._arith(e, "sub", "fsub")

    def expr_Mul(self, e: n.Mul) -> ll.Value:
        return self._arith(e, "mul", "fmul")

    def expr_Div(self, e: n.Div) -> ll.Value:
        if not e.dtype.is_float:
            raise CodegenError(f"llvm: Div is float-only, but '{e}' is {e.dtype}")
        return self._arith(e, "fdiv", "fdiv")

    def _divmod(self, e: n.FloorDiv | n.FloorMod) -> ll.Value:
        if e.dtype.is_float:
            raise CodegenError(f"llvm: FloorDiv/FloorMod on floats is not supported: '{e}'")
        b_ = self.builder
        a, d = self._pair(self.expr(e.a), self.expr(e.b))
        zero = self._like(a, scalar_type(a.type), 0)
        divisor = _const_int(e.b)
        if divisor is None:
            nonzero = b_.icmp_signed("!=", d, zero)
            self.fail(self._all_lanes(nonzero) if isinstance(nonzero.type, ll.VectorType) else nonzero,
                      f"division by zero in '{e}'")
        elif divisor == 0:
            self.fail(ll.Constant(I1, 0), f"division by zero in '{e}'")
        is_div = isinstance(e, n.FloorDiv)
        if e.dtype.kind == "uint":
            return b_.udiv(a, d) if is_div else b_.urem(a, d)
        ety = a.type.element if isinstance(a.type, ll.VectorType) else a.type
        one = self._like(a, ety, 1)
        if divisor is None or divisor == -1:  # INT_MIN / -1 traps on x86: divide by 1 and negate instead
            minus_one = b_.icmp_signed("==", d, self._like(a, ety, -1))
            d = b_.select(minus_one, one, d)
        q, r = b_.sdiv(a, d), b_.srem(a, d)
        # floor: when the remainder is nonzero and its sign differs from the divisor's, step down
        adjust = b_.and_(b_.icmp_signed("!=", r, zero),
                         b_.icmp_signed("!=", b_.icmp_signed("<", r, zero), b_.icmp_signed("<", d, zero)))
        if is_div:
            out = b_.sub(q, b_.zext(adjust, q.type))
            if divisor is None or divisor == -1:
                out = b_.select(minus_one, b_.sub(zero, a), out)
            return out
        out = b_.add(r, b_.select(adjust, d, zero))
        if divisor is None or divisor == -1:
            out = b_.select(minus_one, zero, out)
        return out

    def expr_FloorDiv(self, e: n.FloorDiv) -> ll.Value:
        return self._divmod(e)

    def expr_FloorMod(self, e: n.FloorMod) -> ll.Value:
        return self._divmod(e)

    def _shift(self, e: Shr | Shl) -> ll.Value:
        """numpy's shift: an amount outside [0, bits) (unsigned compare) is clamped to bits - 1, where ashr
        sign-fills, and shl/lshr select 0; LLVM's own shifts are poison past the width."""
        bld = self.builder
        a, amount = self._pair(self.expr(e.a), self.expr(e.b))
        ety, bits = scalar_type(a.type), e.dtype.bits
        inside = bld.icmp_unsigned("<", amount, self._like(a, ety, bits))
        amount = bld.select(inside, amount, self._like(a, ety, bits - 1))
        if isinstance(e, Shr) and e.dtype.kind == "int":
            return bld.ashr(a, amount)
        out = bld.lshr(a, amount) if isinstance(e, Shr) else bld.shl(a, amount)
        return bld.select(inside, out, self._like(a, ety, 0))

    expr_Shr = expr_Shl = _shift

    def _minmax(self, e: n.Min | n.Max, less: bool) -> ll.Value:
        a, b = self._pair(self.expr(e.a), self.expr(e.b))
        bld = self.builder
        if e.dtype.is_float and isinstance(e.b, n.FloatImm) and math.isfinite(e.b.value) and e.b.value:
            # a nonzero constant b: b where it is less (greater) than a, else a, nan included (one x86
            # vminps/vmaxps); equal, the two are the same number
            return bld.select(bld.fcmp_ordered("<" if less else ">", b, a), b, a)
        if e.dtype.is_float:
            pick_b = bld.fcmp_ordered("<" if less else ">", b, a)
            plain = bld.select(pick_b, b, a)
            # np.minimum/np.maximum: b when equal (the ordered compare is false, so pick b explicitly)
            plain = bld.select(bld.fcmp_ordered("==", a, b), b, plain)
            out = bld.select(bld.fcmp_unordered("uno", b, b), b, plain)
            return bld.select(bld.fcmp_unordered("uno", a, a), a, out)
        cmp = bld.icmp_signed if e.dtype.kind == "int" else bld.icmp_unsigned
        return bld.select(cmp("<" if less else ">", b, a), b, a)

    def expr_Min(self, e: n.Min) -> ll.Value:
        return self._minmax(e, less=True)

    def expr_Max(self, e: n.Max) -> ll.Value:
        return self._minmax(e, less=False)

    _OPS = {n.EQ: "==", n.NE: "!=", n.LT: "<", n.LE: "<=", n.GT: ">", n.GE: ">="}

    def _compare(self, e: n.CmpOp) -> ll.Value:
        a, b = self._pair(self.expr(e.a), self.expr(e.b))
        op = self._OPS[type(e)]
        dt = e.a.dtype
        if dt.is_float:
            compare = self.builder.fcmp_unordered if op == "!=" else self.builder.fcmp_ordered
            return compare(op, a, b)
        if dt.kind == "int":
            return self.builder.icmp_signed(op, a, b)
        return self.builder.icmp_unsigned(op, a, b)

    expr_EQ = expr_NE = expr_LT = expr_LE = expr_GT = expr_GE = _compare

    def expr_And(self, e: n.And) -> ll.Value:
        return self.builder.and_(*self._pair(self.expr(e.a), self.expr(e.b)))

    def expr_Or(self, e: n.Or) -> ll.Value:
        return self.builder.or_(*self._pair(self.expr(e.a), self.expr(e.b)))

    def expr_Not(self, e: n.Not) -> ll.Value:
        a = self.expr(e.a)
        return self.builder.xor(a, self._like(a, I1, 1))

    def expr_Select(self, e: n.Select) -> ll.Value:
        c, t, f = self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)
        if isinstance(c.type, ll.VectorType) or isinstance(t.type, ll.VectorType) or \
                isinstance(f.type, ll.VectorType):
            c, t, f = self.splat(c), self.splat(t), self.splat(f)
        return self.builder.select(c, t, f)

    def expr_Call(self, e: Call) -> ll.Value:
        if e.name in MATH:   # LLVM's intrinsic of the same name (a libm call, per lane)
            x = self.expr(e.args[0])
            scalar = scalar_type(x.type)
            suffix = {ll.HalfType: "f16", ll.FloatType: "f32", ll.DoubleType: "f64"}[type(scalar)]
            if isinstance(x.type, ll.VectorType):
                suffix = f"v{x.type.count}{suffix}"
            out = self.builder.call(declare(self.builder.module, f"llvm.{e.name}.{suffix}",
                                            ll.FunctionType(x.type, [x.type])), [x])
            return self.round_bf16(out) if e.dtype == dtypes.bfloat16 else out
        if e.name == "fma":   # llvm.fma: one rounding (an FMA instruction where the CPU has one)
            a, b, c = (self.expr(x) for x in e.args)
            if any(isinstance(x.type, ll.VectorType) for x in (a, b, c)):
                a, b, c = self.splat(a), self.splat(b), self.splat(c)
            scalar = scalar_type(a.type)
            suffix = {ll.HalfType: "f16", ll.FloatType: "f32", ll.DoubleType: "f64"}[type(scalar)]
            if isinstance(a.type, ll.VectorType):
                suffix = f"v{a.type.count}{suffix}"
            return self.builder.call(declare(self.builder.module, f"llvm.fma.{suffix}",
                                             ll.FunctionType(a.type, [a.type] * 3)), [a, b, c])
        if e.name == "prefetch":
            return self.prefetch(e)
        if e.name != "if_then_else" or len(e.args) != 3:
            raise CodegenError(f"llvm: unknown intrinsic call '{e}'")
        cond = self.expr(e.args[0])
        if isinstance(cond.type, ll.VectorType):
            raise CodegenError(f"llvm: if_then_else whose condition differs between lanes: '{e}'")
        then_block = self.fn.append_basic_block("ite.then")
        else_block = self.fn.append_basic_block("ite.else")
        merge = self.fn.append_basic_block("ite.end")
        self.builder.cbranch(cond, then_block, else_block)
        self.builder.position_at_end(then_block)
        t = self.expr(e.args[1])
        t_end = self.builder.block
        self.builder.position_at_end(else_block)
        f = self.expr(e.args[2])
        f_end = self.builder.block
        if t.type != f.type:  # one side varies between lanes, the other does not
            self.builder.position_at_end(t_end)
            t = self.splat(t)
            self.builder.position_at_end(f_end)
            f = self.splat(f)
        self.builder.position_at_end(t_end)
        self.builder.branch(merge)
        self.builder.position_at_end(f_end)
        self.builder.branch(merge)
        self.builder.position_at_end(merge)
        phi = self.builder.phi(t.type)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return phi

    def prefetch(self, e: Call) -> ll.Value:
        """``llvm.prefetch`` of the load's element, for reading, into the second-level cache (locality 2:
        prefetcht1 on x86; measured on AMD EPYC znver5, a GEMM's next weight tile: 2% faster than into the
        first level, which the tile in use fills)."""
        load = e.args[0]
        flat = self._flat_index(load.buffer, load.indices, str(e))
        if isinstance(flat.type, ll.VectorType):
            raise CodegenError(f"llvm: a prefetch whose address differs between lanes: '{e}'")
        ptr = self.element_ptr(load.buffer, flat)
        hint = declare(self.builder.module, "llvm.prefetch.p0",
                       ll.FunctionType(ll.VoidType(), [ptr.type, I32, I32, I32]))
        self.builder.call(hint, [ptr, ll.Constant(I32, 0), ll.Constant(I32, 2), ll.Constant(I32, 1)])
        return ll.Constant(I32, 0)

    def expr_Load(self, e: n.Load) -> ll.Value:
        return self.load(e.buffer, e.indices, str(e))

    def expr_Reduce(self, e: n.Reduce) -> ll.Value:
        raise CodegenError(f"llvm: Reduce must be lowered before code generation: '{e}'")

    def expr_Cast(self, e: n.Cast) -> ll.Value:
        v, src, dst = self.expr(e.value), e.value.dtype, e.type
        b = self.builder
        if src == dst:
            return v
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", v, self._like(v, v.type.element if is_vec(v) else v.type, 0.0))
            return b.icmp_unsigned("!=", v, self._like(v, scalar_type(v.type), 0))
        target = self._like(v, value_type(dst))
        if dst.is_float:
            if src.is_float:
                out = resize_float(b, v, target)
                return self.round_bf16(out) if dst == dtypes.bfloat16 else out
            signed = src.kind == "int"
            if dst == dtypes.bfloat16:  # exact in double (<= 32-bit ints), then one rounding to bf16
                wide = (b.sitofp if signed else b.uitofp)(v, self._like(v, DOUBLE))
                return self._double_to_bf16(wide)
            return (b.sitofp if signed else b.uitofp)(v, target)
        if src.is_bool:
            return b.zext(v, target)
        if src.is_int:
            width, to = src.bits, dst.bits
            if to < width:
                return b.trunc(v, target)
            if to == width:
                return v
            return b.sext(v, target) if src.kind == "int" else b.zext(v, target)
        x = rounded_operand(e.value) if dst == dtypes.int32 else None
        if x is not None and never_nan(x):   # x rounded half to even: one conversion (lrint, default mode)
            x = self.expr(x)
            name = f"llvm.lrint.v{x.type.count}i32.v{x.type.count}f32" if is_vec(x) else "llvm.lrint.i32.f32"
            return b.call(declare(b.module, name, ll.FunctionType(target, [x.type])), [x])
        # float -> int: truncate toward zero; out of range (or nan/inf) is a fault
        lo, hi = float(dst.min_value) - 1.0, float(dst.max_value) + 1.0
        bounds = float_bounds(e.value)
        if bounds is not None and lo < bounds[0] and bounds[1] < hi:   # in range but for nan: that is checked
            if not never_nan(e.value):
                ok = b.fcmp_ordered("ord", v, v)
                self.fail(self._all_lanes(ok) if is_vec(ok) else ok, f"cast of nan to {dst} in '{e}'")
            return (b.fptosi if dst.kind == "int" else b.fptoui)(v, target)
        wide = resize_float(b, v, self._like(v, DOUBLE))
        ok = b.and_(b.fcmp_ordered(">", wide, self._like(wide, DOUBLE, lo)),
                    b.fcmp_ordered("<", wide, self._like(wide, DOUBLE, hi)))
        self.fail(self._all_lanes(ok) if is_vec(ok) else ok, f"cast out of range of {dst} in '{e}'")
        return (b.fptosi if dst.kind == "int" else b.fptoui)(wide, target)

    def _double_to_bf16(self, v: ll.Value) -> ll.Value:
        b = self.builder
        bits = b.bitcast(v, self._like(v, I64))
        keep = b.and_(b.lshr(bits, self._like(bits, I64, 45)), self._like(bits, I64, 1))
        rounded = b.add(b.add(bits, self._like(bits, I64, (1 << 44) - 1)), keep)
        rounded = b.and_(rounded, self._like(bits, I64, ~((1 << 45) - 1) & (2**64 - 1)))
        return b.fptrunc(b.bitcast(rounded, v.type), self._like(v, FLOAT))


# -------------------------------------------------------------------------------------------- helpers


def _flat_expr(buffer: n.Buffer, indices: tuple[n.Expr, ...]) -> n.Expr:
    """The row-major flat index of ``buffer[indices]`` as an IR expression (in the indices' dtype when
    they share one and the buffer's size fits it, else int64)."""
    dts = {i.dtype for i in indices}
    dt = dts.pop() if len(dts) == 1 else dtypes.int64
    if buffer.size > dt.max_value:
        dt = dtypes.int64
    flat: n.Expr | None = None
    for index, size in zip(indices, buffer.shape, strict=True):
        i = n.cast(index, dt)
        flat = i if flat is None else flat * size + i
    return flat
