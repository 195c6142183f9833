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
  remainder has the sign of the divisor); a zero divisor raises ``InterpError``. Shr/Shl are numpy's
  shifts (``compiler.ir.shifts``: an amount outside [0, bits) shifts every bit out). Float arithmetic
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

Implementation: a closure compiler (``compiler.interp.closures``). ``ClosureCompiler`` turns each node,
once, into a Python closure (``Expr`` -> ``env -> value``, ``Stmt`` -> ``env -> None``); ``env`` is a list
with one slot per binding site (For/Let variable or Allocate storage), resolved at compile time. Parameter
storage is a flat view of the caller's array; allocated storage is a flat Python list where ``None`` marks
an uninitialized element. The arguments are matched and checked in ``compiler.interp.args``, the scalar
numerics are ``compiler.interp.numerics``, and what a tensor instruction runs is
``compiler.interp.tensor_insn``.

Non-Goals: speed beyond "usable in tests" (about a million simple statements per second), and
modelling concurrency: parallel and thread-bound loops are not checked for races.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import numpy as np

from compiler.errors import InterpError
from compiler.interp.args import check_array, contiguous_args, stored_buffers
from compiler.interp.closures import ClosureCompiler, Env, Value
from compiler.interp.numerics import rounder
from compiler.ir import nodes as n

__all__ = ["evaluate", "run"]


def run(func: n.PrimFunc, args: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> None:
    """Execute ``func`` on numpy arrays in place (outputs are written into the given arrays)."""
    if not isinstance(func, n.PrimFunc):
        raise InterpError(f"run: expected a PrimFunc, but got {type(func).__name__}")
    with contiguous_args(func, args, stored_buffers(func.body)) as arrays:
        compiler = ClosureCompiler({p: a.reshape(-1) for p, a in zip(func.params, arrays, strict=True)})
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
    compiler = ClosureCompiler(storage)
    slots = [(compiler.bind_var(var), _coerce(var, value)) for var, value in (env or {}).items()]
    fn = compiler.expr(expr)
    values: Env = [None] * compiler.nslots
    for slot, value in slots:
        values[slot] = value
    return fn(values)



def _coerce(var: n.Var, value) -> Value:
    """Convert an ``evaluate`` env value to the interpreter's representation of ``var.dtype``."""
    if isinstance(value, np.generic):
        value = value.item()
    dt = var.dtype
    if dt.is_bool:
        return bool(value)
    if dt.is_float:
        return rounder(dt)(float(value))
    try:
        value = operator.index(value)
    except TypeError:
        raise InterpError(
            f"variable '{var.name}': expected an {dt} value, but got {value!r}"
        ) from None
    if not dt.min_value <= value <= dt.max_value:
        raise InterpError(f"variable '{var.name}': {value} does not fit in {dt}")
    return value
