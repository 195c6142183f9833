"""Fitting an instruction's index functions to a loop nest (tensorize's reduction matching).

An instruction such as conv reads ``inp[y*s + ky, x*s + kx, ci]`` and ``wgt[co // 16, ky, kx, ci, co % 16]``
from dense row-major operands. A loop nest matches it when, once each loop stands for one index variable,
(1) the fields can be chosen so that every loop's extent is its variable's range, and (2) every operand's
flat element index in the nest equals the instruction's, up to a base offset that no loop changes.

(1) is a small system of equations in the fields (``(h - kh) // s + 1 == 55``, ``w * cin == 58 * 256``); it is
solved one unknown at a time, smallest solution first, each unknown searched over its field's bit width.

(2) is decided exactly, not sampled: both sides must be *separable* (a sum of per-variable functions plus a
part free of loop variables); two separable functions are equal on a box iff, for each variable, their
per-variable parts agree on that variable's range. Affine parts compare by coefficient; the others (``co //
16``, ``co % 16``) are compared at every value of their variable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from compiler.arith import linear_form, simplify
from compiler.ir import nodes as ir
from compiler.ir.functor import free_vars, substitute
from isa.errors import ExecError
from isa.lang import tree as t
from isa.lang.scalar import ScalarEnv
from isa.lang.scalar import evaluate as evaluate_scalar

MAX_SEARCH = 1 << 16  # the largest field range searched for a solution


class FitError(Exception):
    """Why a nest does not fit; the message names the equation or operand."""


@dataclass(frozen=True)
class Equation:
    """``expr`` (over fields and parameters) must equal ``value``; ``what`` names it in errors."""

    expr: t.Expr
    value: int
    what: str


def solve(equations: Sequence[Equation], fields: dict[str, int], unknown: Mapping[str, int],
          env: Callable[[dict[str, int]], ScalarEnv]) -> dict[str, int]:
    """Fields satisfying every equation, extending ``fields``; ``unknown`` maps each free field to its bit
    width. Equations are taken in order of fewest unknowns: one with none is checked, one with a single
    unknown fixes it to each value that fits, smallest first, and the rest is solved under that value (a
    degenerate equation such as ``(w - kw) // s + 1 = 1`` with ``w = kw`` fits every stride, and only a later
    one tells them apart). Raises FitError, naming the first equation that failed, when no values fit or
    unknowns remain that no equation fixes alone."""
    failures: list[str] = []
    found = _search(list(equations), dict(fields), unknown, env, failures)
    if found is None:
        raise FitError(failures[0])
    return found


def _search(pending: list[Equation], fields: dict[str, int], unknown: Mapping[str, int],
            env: Callable[[dict[str, int]], ScalarEnv], failures: list[str]) -> dict[str, int] | None:
    if not pending:
        return fields

    def free(eq: Equation) -> list[str]:
        return sorted(n for n in t.names_in(eq.expr) if n in unknown and n not in fields)

    eq = min(pending, key=lambda e: len(free(e)))
    names = free(eq)
    rest = [e for e in pending if e is not eq]
    if not names:
        got = _value(eq.expr, env(fields))
        if got == eq.value:
            return _search(rest, fields, unknown, env, failures)
        failures.append(f"{eq.what}: the spec gives {t.to_text(eq.expr)} = {got}, the loops {eq.value}")
        return None
    if len(names) > 1:
        left = sorted({n for e in pending for n in free(e)})
        failures.append(f"the loops do not determine field(s) {', '.join(left)}")
        return None
    (name,) = names
    tried = False
    for v in _solutions(eq, name, fields, unknown[name], env):
        tried = True
        found = _search(rest, {**fields, name: v}, unknown, env, failures)
        if found is not None:
            return found
    if not tried:
        failures.append(f"{eq.what}: no value of field {name} gives {t.to_text(eq.expr)} = {eq.value}")
    return None


def _solutions(eq: Equation, name: str, fields: dict[str, int], bits: int,
               env: Callable[[dict[str, int]], ScalarEnv]) -> Iterator[int]:
    """The values of field ``name`` (of ``bits`` bits) for which ``eq`` holds, smallest first."""
    if isinstance(eq.expr, t.Name):
        candidates: Sequence[int] = (eq.value,)
    else:
        candidates = range(0, min(1 << bits, MAX_SEARCH))
    for v in candidates:
        try:
            if _value(eq.expr, env({**fields, name: v})) == eq.value:
                yield v
        except ExecError:
            continue


def _value(e: t.Expr, env: ScalarEnv) -> int:
    try:
        return int(evaluate_scalar(e, env))
    except ZeroDivisionError:
        raise ExecError(f"'{t.to_text(e)}' divides by zero") from None


def index_ranges(shapes: Mapping[str, Sequence[t.Expr]], accesses: Sequence[t.Access],
                 names: Sequence[str]) -> dict[str, t.Expr]:
    """The range of each index variable: the extent of the first operand dimension it indexes alone."""
    out: dict[str, t.Expr] = {}
    for access in accesses:
        for d, index in enumerate(access.indices):
            if isinstance(index, t.Name) and index.id in names:
                out.setdefault(index.id, shapes[access.tensor][d])
    missing = [n for n in names if n not in out]
    if missing:
        raise FitError(f"no operand dimension is indexed by {', '.join(missing)} alone")
    return out


def spec_flat(access: t.Access, shape: Sequence[t.Expr],
              env: ScalarEnv) -> Callable[[Mapping[str, int]], int]:
    """The row-major flat element index of ``access`` as a function of the index variables' values."""
    sizes = [_value(d, env) for d in shape]
    strides = [math.prod(sizes[d + 1 :]) for d in range(len(sizes))]

    def flat(point: Mapping[str, int]) -> int:
        e = ScalarEnv({**env.values, **point}, env.types, env.tensors, env.capacity)
        return sum(_value(i, e) * st for i, st in zip(access.indices, strides, strict=True))

    return flat


def fit_access(name: str, ir_index: ir.Expr, flat: Callable[[Mapping[str, int]], int],
               loops: Mapping[str, tuple[ir.Var, int]], names: Sequence[str]) -> ir.Expr:
    """The base offset (free of loop variables) at which ``ir_index`` walks exactly like ``flat``, the
    instruction's flat index of operand ``name``; ``loops`` maps each index variable to its loop
    (variable, extent); unmapped variables stay 0. Raises FitError naming the first difference."""
    zero = dict.fromkeys(names, 0)
    spec0 = flat(zero)
    loop_vars = {v for v, _ in loops.values()}
    lf = linear_form(ir_index)
    if lf is None:
        raise FitError(f"the index of operand {name}, {ir_index}, is not an integer expression")
    parts: dict[ir.Var, list[tuple[ir.Expr, int]]] = {}
    for atom, c in lf.terms.items():
        inside = free_vars(atom) & loop_vars
        if len(inside) > 1 or (inside and free_vars(atom) - inside):
            raise FitError(f"operand {name}: the term {atom} of its index mixes loop variables")
        if inside:
            parts.setdefault(inside.pop(), []).append((atom, c))
    for var_name, (var, extent) in loops.items():
        terms = parts.pop(var, [])
        for u in range(extent) if extent > 1 else ():
            got = sum(c * _eval_int(atom, {var: u}) - c * _eval_int(atom, {var: 0}) for atom, c in terms)
            want = flat({**zero, var_name: u}) - spec0
            if got != want:
                raise FitError(f"operand {name} at {var_name} = {u}: the loops reach element {got} past the "
                               f"start, the instruction {want}")
    if parts:
        raise FitError(f"operand {name}: loop {next(iter(parts)).name} stands for no index variable")
    at_zero = substitute(ir_index, {var: ir.const(0, var.dtype) for var in loop_vars})
    return simplify(at_zero - spec0)


_INT_OPS = {ir.Add: lambda a, b: a + b, ir.Sub: lambda a, b: a - b, ir.Mul: lambda a, b: a * b,
            ir.FloorDiv: lambda a, b: a // b, ir.FloorMod: lambda a, b: a % b, ir.Min: min, ir.Max: max}


def _eval_int(e: ir.Expr, env: Mapping[ir.Var, int]) -> int:
    """The value of an integer expression of loop variables (``+ - * // %`` and constants)."""
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Var):
        return env[e]
    if isinstance(e, ir.Cast):
        return _eval_int(e.value, env)
    fn = _INT_OPS.get(type(e))
    if fn is None:
        raise FitError(f"cannot evaluate {e} as an index")
    return fn(_eval_int(e.a, env), _eval_int(e.b, env))
