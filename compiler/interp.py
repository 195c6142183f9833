"""The reference interpreter of the loop IR: slow, simple, obviously right.

Every pass is checked against it: run a program before and after the pass on the same inputs and
compare. ``run(func, args)`` executes a ``PrimFunc`` on numpy arrays in place; ``evaluate(expr)``
computes one expression.

Semantics:

- **Arguments.** Positional in ``func.params`` order, or a mapping from parameter name to array.
  Each must be a numpy array whose shape equals the parameter's shape (for a one-dimensional,
  flattened parameter: any shape with that many elements, read in C order) and whose dtype equals
  ``param.dtype.numpy`` (bfloat16 is stored as float32); otherwise ``InterpError`` names the
  parameter, what was expected and what was given. A parameter the function stores to must be
  writeable. Results are written into the given arrays (a non-C-contiguous array is worked on as a
  contiguous copy that is written back when ``run`` returns or raises). Parameters count as fully
  initialized. A bfloat16 parameter's float32 values are rounded to bfloat16 when loaded.
- **Values** are Python ``int``, ``float`` and ``bool``. Integer Add/Sub/Mul/FloorDiv are exact on
  Python ints, then wrapped to the dtype's width (``dtypes.wrap_int``), so overflow is numpy/C
  two's complement. FloorDiv/FloorMod are Python's ``//`` and ``%`` (floor semantics, the
  remainder has the sign of the divisor); a zero divisor raises ``InterpError``. Float arithmetic
  is done on Python floats (IEEE double) and rounded to the dtype after every operation
  (``dtypes.round_to``); Div is float-only and follows IEEE (x/0 is inf or nan). Min/Max return the
  smaller/larger operand, the second of two equal ones (so max(-0.0, 0.0) is 0.0), and a nan operand
  if there is one, exactly as ``np.minimum``/``np.maximum`` and the ISA specs' ``min``/``max``.
- **Constants.** A FloatImm's value is rounded to its dtype; a bool IntImm is a Python bool.
- **Cast.** int->int wraps; bool->int gives 0/1; int->float rounds the exact integer to nearest
  even (one rounding, even for values beyond 2**24); float->float rounds; float->int truncates
  toward zero and raises ``InterpError`` when the result does not fit the target or the value is
  nan/inf; anything->bool is ``!= 0``.
- **Logic.** Comparisons, And, Or and Not give Python bools. And, Or and Select evaluate all their
  operands (an out-of-bounds load in an unused operand is still an error); the intrinsic
  ``if_then_else(c, t, f)`` evaluates only the chosen branch.
- **Memory.** Every Load/Store index is checked ``0 <= idx < shape[d]``; a violation raises
  ``InterpError`` with the buffer, the index tuple, the shape and the values of the enclosing loop
  variables, e.g. ``out-of-bounds load A[14, 3] (shape [14, 14]) at tid=3, i=2, j=3``. A Store
  evaluates its indices, then its value. ``Allocate`` gives its body fresh storage (a new one on
  every entry) in which every element starts uninitialized; loading an element never stored to
  raises ``read of uninitialized element AL[3] (shape [16]) at ...``.
- **Statements.** For loops of every kind (serial, parallel, unrolled, vectorized, thread-bound)
  run serially, the variable increasing over ``[min, min + extent)``; min and extent are evaluated
  once at loop entry. IfThenElse, Seq, Let (binds its variable for the body), Attr (runs the body;
  key and value are metadata), Evaluate (evaluates its expression for its effect), DepToken (a no-op:
  sequential execution needs no tokens).
- **Tensor instructions.** ``TensorInsn`` runs one instruction of a built-in ISA spec with the spec's own
  semantics (``isa.execute``). Its fields are evaluated (ints); fields it leaves out (address fields, say:
  the regions say where the operands are) take the spec's defaults. A type variable (``T``) is not a field
  of the IR: it is the dtype of the buffers of the regions whose operands have that type, which must
  agree. Operand ``x`` covers the elements ``offset + sum(i_d * stride_d)`` of its region's buffer (flat,
  row-major), for every index of the operand's shape; strides are the region's own when it gives a view
  (``Region.shape``/``strides``: the operand's elements in row-major order laid over that shape), else the
  spec's (row-major when it gives none), in elements of the operand's dtype, which must be the buffer's,
  except that a ``u8`` operand (memcpy) views any other buffer as its bytes, from byte ``offset *
  itemsize`` on. The operands the semantics reads are gathered (an element outside the buffer, or an
  uninitialized one, is an ``InterpError``), the instruction runs, and the operands it writes are written
  back in full (an operand that is only written starts as zeros, as ``isa.execute`` has it, so elements
  its semantics leaves alone become 0). A byte write that leaves part of an uninitialized element
  unwritten is an error. Numerics are the spec's: integers wrap, float results round to the dtype once per
  operation, as in the scalar IR (an f16 or f32 add, subtract, multiply or divide computed in float32 or
  double and rounded once gives the same bits). Errors name the instruction as printed:
  ``diannao.vadd(n=64, dst=C[0], a=A[0], b=B[0]): dtype mismatch: the operands of type T are dst=C (f32),
  a=A (i8), b=B (f32)``.
- **Static faults** are reported before anything runs, so the arrays are untouched: a Var bound by
  no enclosing For/Let (nor by ``evaluate``'s env), a buffer that is neither a parameter nor
  allocated, a ``Reduce`` ("Reduce must be lowered before interpretation"), an unknown intrinsic
  or one called with the wrong number of arguments, and for a ``TensorInsn`` an unknown ISA,
  instruction, field or operand, a type field set in the IR, a missing region, or a dtype mismatch.

Implementation: a closure compiler. ``_Compiler`` turns each node, once, into a Python closure
(``Expr`` -> ``env -> value``, ``Stmt`` -> ``env -> None``); ``env`` is a list with one slot per
binding site (For/Let variable or Allocate storage), resolved at compile time. Parameter storage is
a flat view of the caller's array; allocated storage is a flat Python list where ``None`` marks an
uninitialized element.

Non-Goals: speed beyond "usable in tests" (about a million simple statements per second), and
modelling concurrency: parallel and thread-bound loops are not checked for races.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

import isa
from compiler.errors import InterpError
from compiler.ir import dtypes
from compiler.ir import nodes as n
from compiler.ir.dae_tokens import DepToken
from compiler.ir.dtypes import DType
from compiler.ir.functor import post_order_visit
from compiler.ir.intrinsics import INTRINSICS, MATH, Call
from isa.lang.scalar import evaluate as evaluate_scalar

Value = int | float | bool
Env = list
ExprFn = Callable[[Env], Value]
StmtFn = Callable[[Env], None]

__all__ = ["evaluate", "run"]


# --------------------------------------------------------------------------------------------------
# Public API


def run(func: n.PrimFunc, args: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> None:
    """Execute ``func`` on numpy arrays in place (outputs are written into the given arrays)."""
    if not isinstance(func, n.PrimFunc):
        raise InterpError(f"run: expected a PrimFunc, but got {type(func).__name__}")
    with contiguous_args(func, args, stored_buffers(func.body)) as arrays:
        compiler = _Compiler({p: a.reshape(-1) for p, a in zip(func.params, arrays, strict=True)})
        body = compiler.stmt(func.body)
        env: Env = [None] * compiler.nslots
        body(env)


def evaluate(
    expr: n.Expr,
    env: Mapping[n.Var, Value] | None = None,
    buffers: Mapping[n.Buffer, np.ndarray] | None = None,
) -> Value:
    """Compute ``expr`` with the variables in ``env`` and the buffers in ``buffers`` (read-only)."""
    if not isinstance(expr, n.Expr):
        raise InterpError(f"evaluate: expected an Expr, but got {type(expr).__name__}")
    storage: dict[n.Buffer, np.ndarray] = {}
    for buffer, array in (buffers or {}).items():
        check_array(f"buffer '{buffer.name}'", buffer, array, writeable=False)
        storage[buffer] = np.ascontiguousarray(array).reshape(-1)
    compiler = _Compiler(storage)
    slots = [(compiler.bind_var(var), _coerce(var, value)) for var, value in (env or {}).items()]
    fn = compiler.expr(expr)
    values: Env = [None] * compiler.nslots
    for slot, value in slots:
        values[slot] = value
    return fn(values)


# --------------------------------------------------------------------------------------------------
# Arguments


def match_args(func: n.PrimFunc, args, error: type[Exception] = InterpError) -> list:
    """The arrays of ``args`` (positional, or a mapping by parameter name) in ``func.params`` order."""
    params = func.params
    names = ", ".join(p.name for p in params)
    if isinstance(args, Mapping):
        if len({p.name for p in params}) != len(params):
            raise error(
                f"{func.name}: parameter names ({names}) repeat; pass arguments by position"
            )
        unknown = sorted(set(args) - {p.name for p in params}, key=str)
        if unknown:
            raise error(
                f"{func.name}: expected arguments named ({names}), but got unknown {unknown}"
            )
        missing = [p.name for p in params if p.name not in args]
        if missing:
            raise error(f"{func.name}: missing arguments {missing} (parameters: {names})")
        return [args[p.name] for p in params]
    if isinstance(args, np.ndarray) or not isinstance(args, Sequence):
        raise error(
            f"{func.name}: expected a sequence or mapping of arrays, but got {type(args).__name__}"
        )
    if len(args) != len(params):
        raise error(
            f"{func.name}: expected {len(params)} arguments ({names}), but got {len(args)}"
        )
    return list(args)


@contextmanager
def contiguous_args(func: n.PrimFunc, args, stored: set[n.Buffer],
                    error: type[Exception] = InterpError) -> Iterator[list[np.ndarray]]:
    """The checked arguments of ``func`` as C-contiguous arrays in parameter order; a non-contiguous one is
    worked on as a copy that is written back on exit (also when the body raises) if ``func`` stores to it."""
    arrays = match_args(func, args, error)
    contiguous, write_back = [], []
    for i, (param, array) in enumerate(zip(func.params, arrays, strict=True)):
        check_array(f"argument {i}, '{param.name}' to {func.name}", param, array, writeable=param in stored,
                    error=error)
        if array.flags.c_contiguous:
            contiguous.append(array)
        else:
            contiguous.append(np.ascontiguousarray(array))
            if param in stored:
                write_back.append((array, contiguous[-1]))
    try:
        yield contiguous
    finally:
        for array, copy in write_back:
            array[...] = copy


def check_array(what: str, buffer: n.Buffer, array, *, writeable: bool,
                error: type[Exception] = InterpError) -> None:
    """Check one argument: a numpy array of ``buffer``'s shape (or its size, for a 1-D buffer) and dtype."""
    if not isinstance(array, np.ndarray):
        raise error(f"{what}: expected a numpy array, but got {type(array).__name__}")
    flat_ok = len(buffer.shape) == 1 and array.size == buffer.shape[0]
    if array.shape != buffer.shape and not flat_ok:
        raise error(
            f"{what}: expected shape {list(buffer.shape)}, but got {list(array.shape)}"
        )
    expected = buffer.dtype.numpy
    if array.dtype != expected:
        storage = f" (storage of {buffer.dtype})" if buffer.dtype.kind == "bfloat" else ""
        raise error(f"{what}: expected dtype {expected}{storage}, but got {array.dtype}")
    if writeable and not array.flags.writeable:
        raise error(f"{what}: expected a writeable array (the function stores to it)")


def stored_buffers(body: n.Stmt) -> set[n.Buffer]:
    """The buffers ``body`` stores to or passes to a tensor instruction as an operand it writes."""
    stored: set[n.Buffer] = set()

    def visit(node: n.Node) -> None:
        if isinstance(node, n.Store):
            stored.add(node.buffer)
        elif isinstance(node, n.TensorInsn):
            written = written_operands(node)
            stored.update(r.buffer for r in node.regions if r.operand in written)

    post_order_visit(body, visit)
    return stored


def _coerce(var: n.Var, value) -> Value:
    """Convert an ``evaluate`` env value to the interpreter's representation of ``var.dtype``."""
    if isinstance(value, np.generic):
        value = value.item()
    dt = var.dtype
    if dt.is_bool:
        return bool(value)
    if dt.is_float:
        return _rounder(dt)(float(value))
    try:
        value = operator.index(value)
    except TypeError:
        raise InterpError(
            f"variable '{var.name}': expected an {dt} value, but got {value!r}"
        ) from None
    if not dt.min_value <= value <= dt.max_value:
        raise InterpError(f"variable '{var.name}': {value} does not fit in {dt}")
    return value


# --------------------------------------------------------------------------------------------------
# Scalar semantics


_F32 = struct.Struct("=f")
_F16 = struct.Struct("=e")
_U32 = struct.Struct("=I")


def _round_f32(x: float) -> float:
    """``round_to(x, float32)``; struct's C cast rounds to nearest even and reports overflow."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return _round_overflow(x, dtypes.float32)


def _round_f16(x: float) -> float:
    """``round_to(x, float16)``; struct packs halves rounding to nearest even."""
    try:
        return _F16.unpack(_F16.pack(x))[0]
    except OverflowError:
        return _round_overflow(x, dtypes.float16)


def _round_overflow(x: float, dt: DType) -> float:
    """``round_to`` for values past the dtype's range (+-inf), without numpy's overflow warning."""
    with np.errstate(over="ignore"):
        return dtypes.round_to(x, dt)


def _round_bf16(x: float) -> float:
    """``round_to(x, bfloat16)``: round to float32, then ``dtypes.round_bfloat16`` on its bits."""
    f = _round_f32(x)
    if f != f:
        return f
    (bits,) = _U32.unpack(_F32.pack(f))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return _F32.unpack(_U32.pack(bits))[0]


def _rounder(dt: DType) -> Callable[[float], float]:
    if dt == dtypes.float32:
        return _round_f32
    if dt == dtypes.float16:
        return _round_f16
    if dt == dtypes.bfloat16:
        return _round_bf16
    return lambda x: dtypes.round_to(x, dt)


#: Significand bits (with the implicit one) of each float dtype.
_PRECISION = {dtypes.float32: 24, dtypes.float16: 11, dtypes.bfloat16: 8}


def _int_to_float(value: int, dt: DType) -> float:
    """The float of ``dt`` nearest to the integer ``value`` (ties to even), in one rounding."""
    magnitude = abs(value)
    extra = magnitude.bit_length() - _PRECISION[dt]
    if extra > 0:
        q, r = magnitude >> extra, magnitude & ((1 << extra) - 1)
        half = 1 << (extra - 1)
        if r > half or (r == half and q & 1):
            q += 1
        magnitude = q << extra  # at most PRECISION + 1 significant bits: exact as a double
    result = float(-magnitude if value < 0 else magnitude)
    return _round_overflow(result, dt)  # exact, or +-inf past the dtype's range


def _ieee_div(a: float, b: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


def _fmin(a: float, b: float) -> float:
    """np.minimum: a NaN operand is the result (the first if both are); of two equal values, the second."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a < b else b


def _fmax(a: float, b: float) -> float:
    """np.maximum: a NaN operand is the result (the first if both are); of two equal values, the second."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a > b else b


def _imin(a: int, b: int) -> int:
    return b if b < a else a


def _imax(a: int, b: int) -> int:
    return b if b > a else a


_COMPARE = {
    n.EQ: operator.eq,
    n.NE: operator.ne,
    n.LT: operator.lt,
    n.LE: operator.le,
    n.GT: operator.gt,
    n.GE: operator.ge,
}


# --------------------------------------------------------------------------------------------------
# The closure compiler


class _Compiler:
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
        value = _rounder(e.type)(float(e.value))
        return lambda env: value

    def _arith(self, e: n.BinaryOp, op: Callable[[Value, Value], Value]) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        dt = e.dtype
        if dt.is_float:
            rnd = _rounder(dt)
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
        rnd = _rounder(e.dtype)

        def div(env: Env) -> float:
            a, b = fa(env), fb(env)
            return rnd(a / b if b != 0 else _ieee_div(a, b))

        return div

    def _floor_op(self, e: n.FloorDiv | n.FloorMod, op: Callable[[Value, Value], Value]) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        dt, text, where = e.dtype, str(e), self._where()
        fit = _rounder(dt) if dt.is_float else (lambda v: dtypes.wrap_int(v, dt))

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

    def expr_Min(self, e: n.Min) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        op = _fmin if e.dtype.is_float else _imin
        return lambda env: op(fa(env), fb(env))

    def expr_Max(self, e: n.Max) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        op = _fmax if e.dtype.is_float else _imax
        return lambda env: op(fa(env), fb(env))

    def _compare(self, e: n.CmpOp) -> ExprFn:
        fa, fb, op = self.expr(e.a), self.expr(e.b), _COMPARE[type(e)]
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
            fx, rnd, fn = self.expr(e.args[0]), _rounder(e.dtype), getattr(np, e.name)

            def math_fn(env: Env) -> float:
                with np.errstate(all="ignore"):
                    return rnd(float(fn(np.float64(fx(env)))))

            return math_fn
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
                rnd = _rounder(dst)
                return lambda env: rnd(fv(env))
            return lambda env: _int_to_float(int(fv(env)), dst)
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
                return lambda env: _round_bf16(get(key(env)))
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
        spec, instr = _instruction(s, text)
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


# --------------------------------------------------------------------------------------------------
# Tensor instructions


def _instruction(s: n.TensorInsn, text: str) -> tuple[isa.ISA, isa.Instruction]:
    """The spec and the instruction ``s`` runs."""
    spec = s.isa
    try:
        return spec, spec.instruction(s.name)
    except KeyError as e:
        raise InterpError(f"{text}: {e.args[0]}") from None


def written_operands(s: n.TensorInsn) -> tuple[str, ...]:
    """The operands ``s`` writes; none when its instruction is unknown (compiling it reports that)."""
    return _operands(s, "writes")


def read_operands(s: n.TensorInsn) -> tuple[str, ...]:
    """The operands ``s`` reads (a ``+=`` target included); none when its instruction is unknown."""
    return _operands(s, "reads")


def _operands(s: n.TensorInsn, role: str) -> tuple[str, ...]:
    try:
        _, instr = _instruction(s, "")
    except InterpError:
        return ()
    return tuple(dict.fromkeys(op for sem in instr.typed.values() for op in getattr(sem, role)))


def bind_types(s: n.TensorInsn, instr: isa.Instruction, text: str) -> dict[str, str]:
    """Each type variable bound to the dtype of the buffers of the regions whose operands have that type."""
    names = {op.name: op for op in instr.operands}
    for r in s.regions:
        if r.operand not in names:
            known = ", ".join(names) or "none"
            raise InterpError(f"{text}: unknown operand '{r.operand}'; operands are {known}")
    types = {}
    for tv, allowed in instr.types.items():
        typed = [r for r in s.regions if names[r.operand].dtype == tv]
        found = {r.buffer.dtype.short for r in typed}
        if not found:
            raise InterpError(f"{text}: no region of an operand of type {tv} gives its dtype")
        if len(found) > 1:
            which = ", ".join(f"{r.operand}={r.buffer.name} ({r.buffer.dtype.short})" for r in typed)
            raise InterpError(f"{text}: dtype mismatch: the operands of type {tv} are {which}")
        (dt,) = found
        if dt not in allowed:
            raise InterpError(f"{text}: expected {tv} in {list(allowed)}, but the buffers hold {dt}")
        types[tv] = dt
    return types


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
