"""The closure compiler of the interpreter: each IR node, compiled once, becomes a Python closure over an env.

``Expr`` -> ``env -> value``, ``Stmt`` -> ``env -> None``; ``env`` is a list with one slot per binding site
(For/Let variable or Allocate storage), resolved at compile time. ``_RegionIO`` reads and writes the operands
of a tensor instruction in parameter arrays and allocations.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

import isa
from compiler.errors import InterpError
from compiler.interp.numerics import (
    COMPARE,
    fma_rounded,
    fmax,
    fmin,
    ieee_div,
    imax,
    imin,
    int_to_float,
    round_bf16,
    rounder,
)
from compiler.interp.tensor_insn import bind_types, instruction
from compiler.ir import dtypes
from compiler.ir import nodes as n
from compiler.ir.dae_tokens import DepToken
from compiler.ir.intrinsics import INTRINSICS, MATH, Call
from compiler.ir.shifts import Shl, Shr, shifted
from isa.lang.scalar import evaluate as evaluate_scalar

Value = int | float | bool
Env = list
ExprFn = Callable[[Env], Value]
StmtFn = Callable[[Env], None]


class ClosureCompiler:
    """Compiles IR nodes to closures over an env list; holds the compile-time scope."""

    def __init__(self, params: dict[n.Buffer, np.ndarray]) -> None:
        self.nslots = 0
        self.vars: dict[n.Var, int] = {}  # variable in scope -> its env slot
        self.params = params  # parameter -> flat view of its array
        self.allocs: dict[n.Buffer, int] = {}  # allocated buffer in scope -> env slot of its list
        self.loops: tuple[tuple[str, int], ...] = ()  # enclosing For loops: (name, slot)

    # scope -----------------------------------------------------------------------------------
    def _new_slot(self) -> int:
        self.nslots += 1
        return self.nslots - 1

    def bind_var(self, var: n.Var) -> int:
        slot = self.vars[var] = self._new_slot()
        return slot

    @contextmanager
    def _scope(self, table: dict, key) -> Iterator[int]:
        """Give ``key`` a new slot in ``table`` for the block (inner bindings shadow outer)."""
        outer = table.get(key)
        slot = table[key] = self._new_slot()
        try:
            yield slot
        finally:
            if outer is None:
                del table[key]
            else:
                table[key] = outer

    def _where(self) -> Callable[[Env], str]:
        """env -> `` at i=2, j=3`` naming the enclosing loop variables' current values."""
        loops = self.loops
        if not loops:
            return lambda env: ""
        return lambda env: " at " + ", ".join(f"{name}={env[slot]}" for name, slot in loops)

    # expressions -----------------------------------------------------------------------------
    def expr(self, e: n.Expr) -> ExprFn:
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise NotImplementedError(f"interp: no case for {type(e).__name__}")
        return method(e)

    def expr_Var(self, e: n.Var) -> ExprFn:
        slot = self.vars.get(e)
        if slot is None:
            raise InterpError(f"variable '{e.name}' is not bound by an enclosing For or Let")
        return operator.itemgetter(slot)

    def expr_IntImm(self, e: n.IntImm) -> ExprFn:
        value = bool(e.value) if e.type.is_bool else e.value
        return lambda env: value

    def expr_FloatImm(self, e: n.FloatImm) -> ExprFn:
        value = rounder(e.type)(float(e.value))
        return lambda env: value

    def _arith(self, e: n.BinaryOp, op: Callable[[Value, Value], Value]) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        dt = e.dtype
        if dt.is_float:
            rnd = rounder(dt)
            return lambda env: rnd(op(fa(env), fb(env)))
        lo, hi, wrap = dt.min_value, dt.max_value, dtypes.wrap_int

        def int_op(env: Env) -> int:
            v = op(fa(env), fb(env))
            return v if lo <= v <= hi else wrap(v, dt)  # wrap_int is the identity in range

        return int_op

    def expr_Add(self, e: n.Add) -> ExprFn:
        return self._arith(e, operator.add)

    def expr_Sub(self, e: n.Sub) -> ExprFn:
        return self._arith(e, operator.sub)

    def expr_Mul(self, e: n.Mul) -> ExprFn:
        return self._arith(e, operator.mul)

    def expr_Div(self, e: n.Div) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        rnd = rounder(e.dtype)

        def div(env: Env) -> float:
            a, b = fa(env), fb(env)
            return rnd(a / b if b != 0 else ieee_div(a, b))

        return div

    def _floor_op(self, e: n.FloorDiv | n.FloorMod, op: Callable[[Value, Value], Value]) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        dt, text, where = e.dtype, str(e), self._where()
        fit = rounder(dt) if dt.is_float else (lambda v: dtypes.wrap_int(v, dt))

        def floor_op(env: Env) -> Value:
            a, b = fa(env), fb(env)
            if b == 0:
                raise InterpError(f"division by zero in '{text}'{where(env)}")
            return fit(op(a, b))

        return floor_op

    def expr_FloorDiv(self, e: n.FloorDiv) -> ExprFn:
        return self._floor_op(e, operator.floordiv)

    def expr_FloorMod(self, e: n.FloorMod) -> ExprFn:
        return self._floor_op(e, operator.mod)

    def _shift(self, e: Shr | Shl) -> ExprFn:
        fa, fb, node, dt = self.expr(e.a), self.expr(e.b), type(e), e.dtype
        return lambda env: shifted(node, fa(env), fb(env), dt)

    expr_Shr = expr_Shl = _shift

    def expr_Min(self, e: n.Min) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        op = fmin if e.dtype.is_float else imin
        return lambda env: op(fa(env), fb(env))

    def expr_Max(self, e: n.Max) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        op = fmax if e.dtype.is_float else imax
        return lambda env: op(fa(env), fb(env))

    def _compare(self, e: n.CmpOp) -> ExprFn:
        fa, fb, op = self.expr(e.a), self.expr(e.b), COMPARE[type(e)]
        return lambda env: op(fa(env), fb(env))

    expr_EQ = expr_NE = expr_LT = expr_LE = expr_GT = expr_GE = _compare

    def expr_And(self, e: n.And) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        return lambda env: fa(env) & fb(env)  # both evaluated, like Select

    def expr_Or(self, e: n.Or) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        return lambda env: fa(env) | fb(env)

    def expr_Not(self, e: n.Not) -> ExprFn:
        fa = self.expr(e.a)
        return lambda env: not fa(env)

    def expr_Select(self, e: n.Select) -> ExprFn:
        fc, ft, ff = self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)

        def select(env: Env) -> Value:
            c, t, f = fc(env), ft(env), ff(env)
            return t if c else f

        return select

    def expr_Call(self, e: Call) -> ExprFn:
        if e.name not in INTRINSICS:
            raise InterpError(f"unknown intrinsic '{e.name}' in '{e}'")
        if len(e.args) != INTRINSICS[e.name]:
            raise InterpError(
                f"intrinsic '{e.name}': expected {INTRINSICS[e.name]} arguments, "
                f"but got {len(e.args)} in '{e}'"
            )
        if e.name in MATH:   # exact in float64, rounded once to the result's type
            fx, rnd, fn = self.expr(e.args[0]), rounder(e.dtype), getattr(np, e.name)

            def math_fn(env: Env) -> float:
                with np.errstate(all="ignore"):
                    return rnd(float(fn(np.float64(fx(env)))))

            return math_fn
        if e.name == "fma":
            fa, fb, fcc, dt = (*(self.expr(a) for a in e.args), e.dtype)
            return lambda env: fma_rounded(fa(env), fb(env), fcc(env), dt)
        if e.name == "prefetch":   # no effect: the load is evaluated for its bounds check only
            fl = self.expr(e.args[0])

            def prefetch_fn(env: Env) -> int:
                fl(env)
                return 0

            return prefetch_fn
        fc, ft, ff = (self.expr(a) for a in e.args)  # if_then_else
        return lambda env: ft(env) if fc(env) else ff(env)

    def expr_Cast(self, e: n.Cast) -> ExprFn:
        fv, src, dst = self.expr(e.value), e.value.dtype, e.type
        if src == dst:
            return fv
        if dst.is_bool:
            return lambda env: fv(env) != 0
        if dst.is_float:
            if src.is_float:
                rnd = rounder(dst)
                return lambda env: rnd(fv(env))
            return lambda env: int_to_float(int(fv(env)), dst)
        lo, hi = dst.min_value, dst.max_value
        if src.is_bool:
            return lambda env: int(fv(env))
        if src.is_int:
            wrap = dtypes.wrap_int

            def int_to_int(env: Env) -> int:
                v = fv(env)
                return v if lo <= v <= hi else wrap(v, dst)

            return int_to_int
        text, where = str(e), self._where()

        def float_to_int(env: Env) -> int:
            v = fv(env)
            t = math.trunc(v) if math.isfinite(v) else None
            if t is None or not lo <= t <= hi:
                raise InterpError(
                    f"cast of {v!r} to {dst} is out of range [{lo}, {hi}] in '{text}'{where(env)}"
                )
            return t

        return float_to_int

    def expr_Load(self, e: n.Load) -> ExprFn:
        buffer = e.buffer
        key = self._key("load", buffer, e.indices)
        flat = self.params.get(buffer) if buffer not in self.allocs else None
        if flat is not None:
            get = flat.item
            if buffer.dtype == dtypes.bfloat16:
                return lambda env: round_bf16(get(key(env)))
            return lambda env: get(key(env))
        slot = self._alloc_slot(buffer)
        shape, where = buffer.shape, self._where()

        def load(env: Env) -> Value:
            k = key(env)
            v = env[slot][k]
            if v is None:
                index = ", ".join(str(int(i)) for i in np.unravel_index(k, shape))
                raise InterpError(
                    f"read of uninitialized element {buffer.name}[{index}] "
                    f"(shape {list(shape)}){where(env)}"
                )
            return v

        return load

    def expr_Reduce(self, e: n.Reduce) -> ExprFn:
        raise InterpError(f"Reduce must be lowered before interpretation: '{e}'")

    def _alloc_slot(self, buffer: n.Buffer) -> int:
        slot = self.allocs.get(buffer)
        if slot is None:
            raise InterpError(f"buffer '{buffer.name}' is neither a parameter nor allocated")
        return slot

    def _key(self, kind: str, buffer: n.Buffer, indices: tuple[n.Expr, ...]) -> ExprFn:
        """env -> row-major flat offset of ``buffer[indices]``, after checking every index."""
        fs = [self.expr(i) for i in indices]
        shape, where = buffer.shape, self._where()

        def out_of_bounds(env: Env, index: Sequence[int]) -> InterpError:
            text = ", ".join(str(i) for i in index)
            return InterpError(
                f"out-of-bounds {kind} {buffer.name}[{text}] (shape {list(shape)}){where(env)}"
            )

        if len(fs) == 1:
            (f0,), (n0,) = fs, shape

            def key1(env: Env) -> int:
                i = f0(env)
                if 0 <= i < n0:
                    return i
                raise out_of_bounds(env, (i,))

            return key1
        if len(fs) == 2:
            (f0, f1), (n0, n1) = fs, shape

            def key2(env: Env) -> int:
                i, j = f0(env), f1(env)
                if 0 <= i < n0 and 0 <= j < n1:
                    return i * n1 + j
                raise out_of_bounds(env, (i, j))

            return key2

        def key(env: Env) -> int:
            index = [f(env) for f in fs]
            flat = 0
            for i, size in zip(index, shape, strict=True):
                if not 0 <= i < size:
                    raise out_of_bounds(env, index)
                flat = flat * size + i
            return flat

        return key

    # statements ------------------------------------------------------------------------------
    def stmt(self, s: n.Stmt) -> StmtFn:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise NotImplementedError(f"interp: no case for {type(s).__name__}")
        return method(s)

    def stmt_Store(self, s: n.Store) -> StmtFn:
        buffer = s.buffer
        key = self._key("store", buffer, s.indices)
        fv = self.expr(s.value)
        flat = self.params.get(buffer) if buffer not in self.allocs else None
        if flat is not None:
            put = flat.__setitem__

            def store_param(env: Env) -> None:
                k = key(env)
                put(k, fv(env))

            return store_param
        slot = self._alloc_slot(buffer)

        def store(env: Env) -> None:
            k = key(env)
            env[slot][k] = fv(env)

        return store

    def stmt_For(self, s: n.For) -> StmtFn:
        fmin, fext = self.expr(s.min), self.expr(s.extent)
        with self._scope(self.vars, s.var) as slot:
            outer, self.loops = self.loops, (*self.loops, (s.var.name, slot))
            try:
                body = self.stmt(s.body)
            finally:
                self.loops = outer

        def loop(env: Env) -> None:
            lo = fmin(env)
            for v in range(lo, lo + fext(env)):
                env[slot] = v
                body(env)

        return loop

    def stmt_IfThenElse(self, s: n.IfThenElse) -> StmtFn:
        fc, then = self.expr(s.cond), self.stmt(s.then_case)
        other = self.stmt(s.else_case) if s.else_case is not None else None

        def branch(env: Env) -> None:
            if fc(env):
                then(env)
            elif other is not None:
                other(env)

        return branch

    def stmt_Seq(self, s: n.Seq) -> StmtFn:
        stmts = tuple(self.stmt(x) for x in s.stmts)

        def sequence(env: Env) -> None:
            for x in stmts:
                x(env)

        return sequence

    def stmt_Allocate(self, s: n.Allocate) -> StmtFn:
        size = s.buffer.size
        with self._scope(self.allocs, s.buffer) as slot:
            body = self.stmt(s.body)

        def allocate(env: Env) -> None:
            env[slot] = [None] * size  # None: not yet written
            body(env)
            env[slot] = None

        return allocate

    def stmt_Attr(self, s: n.Attr) -> StmtFn:
        return self.stmt(s.body)

    def stmt_Evaluate(self, s: n.Evaluate) -> StmtFn:
        fv = self.expr(s.value)

        def evaluate_(env: Env) -> None:
            fv(env)

        return evaluate_

    def stmt_DepToken(self, s: DepToken) -> StmtFn:
        for x in s.label:  # compiled for its static checks (bound variables); tokens order nothing here
            self.expr(x)
        return lambda env: None

    def stmt_TensorInsn(self, s: n.TensorInsn) -> StmtFn:
        text, where = str(s), self._where()
        spec, instr = instruction(s, text)
        types = bind_types(s, instr, text)
        sem = instr.typed_semantics(types)
        settable = {f.name: f for f in instr.fields}
        for f in s.fields:
            if f.name not in settable:
                known = ", ".join(settable) or "none"
                raise InterpError(f"{text}: unknown field '{f.name}'; fields are {known}")
            if settable[f.name].kind == "type":
                raise InterpError(f"{text}: type field '{f.name}' is set, but it follows the region dtypes")
        regions = {r.operand: r for r in s.regions}
        missing = [op for op in dict.fromkeys(sem.reads + sem.writes) if op not in regions]
        if missing:
            raise InterpError(f"{text}: no region for operand(s) {', '.join(missing)}")
        fields = [(f.name, self.expr(f.value)) for f in s.fields]
        io = {
            r.operand: self._region_io(r, instr.operand(r.operand), types, text, where)
            for r in s.regions
            if r.operand in sem.reads or r.operand in sem.writes
        }
        reads = sem.reads

        def tensor_insn(env: Env) -> None:
            try:
                insn = spec.insn(s.name, **{name: f(env) for name, f in fields}, **types)
            except isa.EncodingError as e:
                raise InterpError(f"{text}: {e}{where(env)}") from None
            scalars = spec.scalar_env(insn.values, types)
            at = {name: x.positions(env, scalars) for name, x in io.items()}
            tensors = {name: io[name].gather(env, at[name]) for name in reads}
            try:
                out = isa.execute(spec, insn, tensors)
            except isa.ExecError as e:
                raise InterpError(f"{text}: {e}{where(env)}") from None
            for name, values in out.items():
                io[name].scatter(env, at[name], values)

        return tensor_insn

    def _region_io(self, r: n.Region, op: isa.Operand, types: dict, text: str, where) -> _RegionIO:
        dt = op.dtype if op.dtype not in types else types[op.dtype]
        have = r.buffer.dtype
        bytewise = dt == "u8" and have != dtypes.uint8
        if bytewise and (have.is_bool or have.kind == "bfloat"):
            raise InterpError(f"{text}: operand '{op.name}' views buffer {r.buffer.name} as bytes, "
                              f"which a {have} buffer cannot be")
        if not bytewise and dt != have.short:
            raise InterpError(
                f"{text}: operand '{op.name}' is {dt}, but buffer {r.buffer.name} holds {have.short}"
            )
        flat = self.params.get(r.buffer) if r.buffer not in self.allocs else None
        slot = None if flat is not None else self._alloc_slot(r.buffer)
        offset = self.expr(r.offset)
        strides = tuple(self.expr(e) for e in r.strides)
        return _RegionIO(r, op, bytewise, flat, slot, offset, strides, f"{text}: operand '{op.name}'", where)

    def stmt_Let(self, s: n.Let) -> StmtFn:
        fv = self.expr(s.value)
        with self._scope(self.vars, s.var) as slot:
            body = self.stmt(s.body)

        def let(env: Env) -> None:
            env[slot] = fv(env)
            body(env)

        return let



class _RegionIO:
    """Finds, reads and writes the elements of one operand in a parameter array or an allocation.

    The operand's element at index ``(i0, ..., ik)`` is at ``offset + sum(i_d * stride_d)`` in units of
    the operand's dtype (strides from the spec, row-major when it gives none); a ``bytewise`` region (a
    u8 operand on a wider buffer) counts in bytes from ``offset * itemsize`` instead.
    """

    def __init__(
        self, r: n.Region, op: isa.Operand, bytewise: bool, flat, slot, offset: ExprFn,
        strides: tuple[ExprFn, ...], text: str, where
    ) -> None:
        self.buffer, self.op, self.slot, self.offset = r.buffer, op, slot, offset
        self.view, self.strides = r.shape, strides
        self.text, self.where, self.bytewise = text, where, bytewise
        self.numpy = r.buffer.dtype.numpy  # how an allocation's Python values become array elements
        self.item = self.numpy.itemsize if bytewise else 1
        self.flat = flat.view(np.uint8) if bytewise and flat is not None else flat

    def positions(self, env: Env, scalars) -> np.ndarray:
        """Flat positions (in units of the operand's dtype) of every element, shaped like the operand."""
        op_shape = shape = tuple(int(evaluate_scalar(e, scalars)) for e in self.op.shape)
        if self.strides:
            shape, strides = self.view, [f(env) for f in self.strides]
            if math.prod(shape) != math.prod(op_shape):
                raise InterpError(f"{self.text}: a view of shape {list(shape)} does not hold the operand's "
                                  f"{math.prod(op_shape)} elements (shape {list(op_shape)}){self.where(env)}")
        elif self.op.strides is None:
            strides = [int(np.prod(shape[d + 1 :])) for d in range(len(shape))]
        else:
            strides = [int(evaluate_scalar(e, scalars)) for e in self.op.strides]
        pos = np.full(shape, self.offset(env) * self.item, dtype=np.int64)
        for d, (size, stride) in enumerate(zip(shape, strides, strict=True)):
            pos += np.arange(size, dtype=np.int64).reshape((size,) + (1,) * (len(shape) - d - 1)) * stride
        pos = pos.reshape(op_shape)
        limit = self.buffer.size * self.item
        if pos.size and (pos.min() < 0 or pos.max() >= limit):
            unit = "bytes" if self.bytewise else "elements"
            raise InterpError(
                f"{self.text} covers {unit} [{pos.min()}, {pos.max()}] of {self.buffer.name}, outside its "
                f"{limit} {unit}{self.where(env)}"
            )
        return pos

    def element(self, k: int) -> str:
        """``AL[1, 2] (shape [4, 4])``: the buffer element at flat index ``k``."""
        index = ", ".join(str(int(i)) for i in np.unravel_index(k, self.buffer.shape))
        return f"{self.buffer.name}[{index}] (shape {list(self.buffer.shape)})"

    def gather(self, env: Env, pos: np.ndarray) -> np.ndarray:
        if self.flat is not None:
            values = self.flat[pos]
            return dtypes.round_bfloat16(values) if self.buffer.dtype == dtypes.bfloat16 else values
        elems = pos.reshape(-1) // self.item
        storage = env[self.slot]
        values = [storage[e] for e in elems.tolist()]
        if None in values:
            element = self.element(int(elems[values.index(None)]))
            raise InterpError(f"{self.text} reads uninitialized element {element}{self.where(env)}")
        array = np.array(values, dtype=self.numpy)
        if self.bytewise:
            array = array.view(np.uint8).reshape(-1, self.item)
            array = array[np.arange(pos.size), pos.reshape(-1) % self.item]
        return array.reshape(pos.shape)

    def scatter(self, env: Env, pos: np.ndarray, values: np.ndarray) -> None:
        if self.flat is not None:
            self.flat[pos] = values
            return
        storage = env[self.slot]
        if not self.bytewise:
            for k, v in zip(pos.reshape(-1).tolist(), values.reshape(-1).tolist(), strict=True):
                storage[k] = v
            return
        written = np.unique(pos)
        elems, inverse = np.unique(pos.reshape(-1) // self.item, return_inverse=True)
        old = [storage[e] for e in elems.tolist()]
        full = np.bincount(written // self.item)[elems] == self.item
        for e, v, covered in zip(elems.tolist(), old, full.tolist(), strict=True):
            if v is None and not covered:
                what = f"part of uninitialized element {self.element(e)}"
                raise InterpError(f"{self.text} writes {what}{self.where(env)}")
        block = np.array([0 if v is None else v for v in old], dtype=self.numpy)
        block = block.view(np.uint8).reshape(-1, self.item)
        block[inverse, pos.reshape(-1) % self.item] = values.reshape(-1)
        for e, v in zip(elems.tolist(), block.view(self.numpy).reshape(-1).tolist(), strict=True):
            storage[e] = v
