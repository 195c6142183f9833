"""Exact evaluation of scalar expressions (constraints, shapes, addresses, bit widths, timing) on Python
ints."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from isa.dtypes import canonical, dtype
from isa.errors import ExecError
from isa.lang.tree import Access, Binary, Call, Cast, Expr, Name, Num, Unary, to_text, walk


@dataclass(frozen=True)
class ScalarEnv:
    """Values a scalar expression may use: integer names, type variables, tensors (for ``regs[rs1]``)."""

    values: Mapping[str, int]
    types: Mapping[str, str] = field(default_factory=dict)
    tensors: Mapping[str, object] = field(default_factory=dict)
    capacity: Callable[[int], int] | None = None


MAX_SHIFT = 64   # scalar spec values are 64-bit: a larger left shift is a mistake, not a number to build


def _int(x, e: Expr) -> int:
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    raise ExecError(f"'{to_text(e)}': expected an integer, but got {x!r}")


def evaluate(e: Expr, env: ScalarEnv) -> int | bool | float:
    """Value of ``e`` under ``env`` (exact integers; ``//`` and ``%`` floor; comparisons give bool)."""
    if isinstance(e, Num):
        return e.value
    if isinstance(e, Name):
        try:
            return env.values[e.id]
        except KeyError:
            raise ExecError(f"'{e.id}' has no value here") from None
    if isinstance(e, Unary):
        return _unary(e, evaluate(e.operand, env))
    if isinstance(e, Binary):
        if e.op == "and":
            return bool(evaluate(e.lhs, env)) and bool(evaluate(e.rhs, env))
        if e.op == "or":
            return bool(evaluate(e.lhs, env)) or bool(evaluate(e.rhs, env))
        return _binary(e, evaluate(e.lhs, env), evaluate(e.rhs, env))
    if isinstance(e, Cast):
        return _cast(e, evaluate(e.value, env))
    if isinstance(e, Call):
        return _call(e, env)
    if isinstance(e, Access):
        return _element(e, env.tensors, tuple(_int(evaluate(i, env), i) for i in e.indices))
    raise ExecError(f"cannot evaluate {type(e).__name__} as a scalar")


def _unary(e: Unary, x):
    if e.op == "not":
        return not x
    if e.op == "-":
        return -x
    return ~_int(x, e)


def _cast(e: Cast, x):
    dt = dtype(e.dtype)
    if dt.is_int:
        x = int(x)
        mod = 1 << dt.bits
        x %= mod
        return x - mod if dt.kind == "int" and x > dt.max() else x
    return float(x)


def _element(e: Access, tensors: Mapping[str, object], idx: tuple[int, ...]):
    """Element ``idx`` of tensor ``e.tensor``: a numpy array, or a register file kept as a Python list of
    its values (one index; a simulator's scalar registers, read without building an array per read)."""
    arr = tensors.get(e.tensor)
    if arr is None:
        raise ExecError(f"'{to_text(e)}': tensor '{e.tensor}' has no value here")
    try:
        if isinstance(arr, list) and len(idx) == 1:
            return arr[idx[0]]
        return arr.item(idx) if isinstance(arr, np.ndarray) else arr[idx].item()   # item: one call, not two
    except IndexError:
        raise ExecError(f"'{to_text(e)}': index {idx} is out of range for shape {np.shape(arr)}") from None


def _binary(e: Binary, a, b):
    """``a op b`` for every operator but the short-circuit ``and``/``or``."""
    op = e.op
    if op in ("//", "%") and b == 0:
        raise ExecError(f"'{to_text(e)}': division by zero")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise ExecError(f"'{to_text(e)}': division by zero")
        return a / b
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    if op == "<<":
        amount = _int(b, e)
        if amount > MAX_SHIFT:   # a parameter such as LOG_BLOCK = 10**11 must not build a 12 GB integer
            raise ExecError(f"'{to_text(e)}': a shift by {amount} bits leaves the 64-bit range of spec "
                            f"values")
        return _int(a, e) << max(0, amount)
    if op == ">>":
        return _int(a, e) >> max(0, _int(b, e))
    if op == "&":
        return _int(a, e) & _int(b, e)
    if op == "|":
        return _int(a, e) | _int(b, e)
    if op == "^":
        return _int(a, e) ^ _int(b, e)
    return _COMPARE[op](a, b)


#: the operators whose value on two evaluated operands is Python's own (no check, no conversion)
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}
_PLAIN = {"+": operator.add, "-": operator.sub, "*": operator.mul, **_COMPARE}


def _call(e: Call, env: ScalarEnv):
    f = e.func
    if f == "select":
        c, a, b = e.args
        return evaluate(a, env) if evaluate(c, env) else evaluate(b, env)
    if f == "bytes":
        arg = e.args[0]
        name = env.types.get(arg.id, arg.id) if isinstance(arg, Name) else None
        if name is None or canonical(name) is None:
            raise ExecError(f"'{to_text(e)}': bytes() needs a dtype or a bound type variable")
        return dtype(name).bytes
    return _call_values(e, [evaluate(a, env) for a in e.args], env.capacity)


def _call_values(e: Call, xs: list, capacity: Callable[[int], int] | None):
    """A call of anything but the lazy ``select`` and the type query ``bytes``, on evaluated arguments."""
    f = e.func
    if f == "min":
        return min(xs)
    if f == "max":
        return max(xs)
    if f == "abs":
        return abs(xs[0])
    if f == "ceil_div":
        a, b = (_int(x, e) for x in xs)
        if b == 0:
            raise ExecError(f"'{to_text(e)}': division by zero")
        return -(-a // b)
    if f == "log2":
        x = _int(xs[0], e)
        if x <= 0 or x & (x - 1):
            raise ExecError(f"'{to_text(e)}': log2 needs a power of two, but got {x}")
        return x.bit_length() - 1
    if f == "capacity":
        if capacity is None:
            raise ExecError(f"'{to_text(e)}': no memory spaces are known here")
        return capacity(_int(xs[0], e))
    raise ExecError(f"'{to_text(e)}': {f}() cannot be evaluated on scalars")


# ------------------------------------------------------------------------------------------------ compiling
def compile_scalar(e: Expr, env: ScalarEnv) -> Callable[[Mapping[str, object]], int | bool | float]:
    """``e`` as a function of the tensors alone, for evaluating it many times on changing register values:
    ``compile_scalar(e, env)(tensors)`` equals ``evaluate(e, ScalarEnv(env.values, env.types, tensors,
    env.capacity))``, errors included.

    Every subtree that reads no tensor is evaluated once, now (where that fails, it fails again when the
    function runs and reaches it, as ``evaluate`` would); the rest becomes nested closures over the same
    value-level helpers ``evaluate`` uses."""
    if not any(isinstance(n, Access) for n in walk(e)):
        try:
            value = evaluate(e, env)
        except ExecError:
            return lambda tensors: evaluate(e, ScalarEnv(env.values, env.types, tensors, env.capacity))

        def constant(tensors):
            return value
        constant.value = value   # what a caller may fold
        return constant
    if isinstance(e, Access):
        if not any(isinstance(n, Access) for i in e.indices for n in walk(i)):
            try:   # indices of fields and constants (a register R[3]): evaluated once, now
                fixed = tuple(_int(evaluate(i, env), e) for i in e.indices)
            except ExecError:
                pass   # it fails again when the function runs, as evaluate would
            else:
                return lambda tensors: _element(e, tensors, fixed)
        indices = [compile_scalar(i, env) for i in e.indices]
        return lambda tensors: _element(e, tensors, tuple(_int(i(tensors), e) for i in indices))
    if isinstance(e, Unary):
        x = compile_scalar(e.operand, env)
        return lambda tensors: _unary(e, x(tensors))
    if isinstance(e, Cast):
        x = compile_scalar(e.value, env)
        return lambda tensors: _cast(e, x(tensors))
    if isinstance(e, Binary):
        a, b = compile_scalar(e.lhs, env), compile_scalar(e.rhs, env)
        if e.op == "and":
            return lambda tensors: bool(a(tensors)) and bool(b(tensors))
        if e.op == "or":
            return lambda tensors: bool(a(tensors)) or bool(b(tensors))
        plain = _PLAIN.get(e.op)   # as _binary computes it, without its dispatch
        if plain is not None:
            if hasattr(b, "value"):   # a register against a field, a parameter or a number
                right = b.value
                return lambda tensors: plain(a(tensors), right)
            return lambda tensors: plain(a(tensors), b(tensors))
        return lambda tensors: _binary(e, a(tensors), b(tensors))
    if isinstance(e, Call) and e.func == "select":
        c, a, b = (compile_scalar(x, env) for x in e.args)
        return lambda tensors: a(tensors) if c(tensors) else b(tensors)
    if isinstance(e, Call) and e.func != "bytes":
        args = [compile_scalar(x, env) for x in e.args]
        return lambda tensors: _call_values(e, [x(tensors) for x in args], env.capacity)
    return lambda tensors: evaluate(e, ScalarEnv(env.values, env.types, tensors, env.capacity))

