"""Intrinsic calls of the loop IR: the intrinsics it knows, the ``Call`` node, and the constructors of calls.

``if_then_else`` is the lazy select (only the chosen branch is evaluated); ``math_call`` builds the float
math intrinsics (``MATH``), the functions of the spec language; ``fma`` the fused multiply-add (one
rounding, as LLVM's ``llvm.fma`` and an FMA instruction compute it); ``prefetch`` asks the cache for the
line that holds an element (a hint: no value, no fault; evaluated as a statement).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.errors import IRTypeError
from compiler.ir.dtypes import DType, int32
from compiler.ir.nodes import Expr, Load, _check_bool, _check_same, as_expr, const_like

#: Intrinsics known to the IR: name -> number of arguments.
INTRINSICS = {
    "if_then_else": 3,  # lazy select: only the chosen branch is evaluated
    "exp": 1, "log": 1, "sqrt": 1, "tanh": 1,   # float math (MATH)
    "fma": 3,   # a * b + c rounded once
    "prefetch": 1,   # the line of a Load's element brought into the cache (its value: 0)
}
#: The float math intrinsics: the functions of the spec language (isa/lang), of one float argument, whose
#: result has the argument's type (computed exactly and rounded once, like the other float operations).
MATH = ("exp", "log", "sqrt", "tanh")


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """Call of an intrinsic ``name`` on ``args`` with result type ``type``."""

    name: str
    args: tuple[Expr, ...]
    type: DType

    @property
    def dtype(self) -> DType:
        return self.type


def if_then_else(cond: Expr, true_value, false_value) -> Call:
    """Lazy select: evaluates only the chosen value (safe around out-of-range loads, e.g. padding)."""
    t = as_expr(true_value) if isinstance(true_value, Expr) else None
    f = as_expr(false_value) if isinstance(false_value, Expr) else None
    ref = t if t is not None else f
    if ref is None:
        t, f = as_expr(true_value), as_expr(false_value)
    else:
        t = const_like(true_value, ref)
        f = const_like(false_value, ref)
    _check_bool("if_then_else", cond)
    _check_same("if_then_else", t, f)
    return Call("if_then_else", (cond, t, f), t.dtype)


def fma(a, b, c) -> Call:
    """``a * b + c`` of three floats of one type, computed exactly and rounded once to that type."""
    a, b, c = (as_expr(x) for x in (a, b, c))
    for x in (a, b, c):
        if not x.dtype.is_float:
            raise IRTypeError(f"fma: expected float arguments, but '{x}' is {x.dtype}")
    _check_same("fma", a, b)
    _check_same("fma", a, c)
    return Call("fma", (a, b, c), a.dtype)


def prefetch(load: Load) -> Call:
    """A hint that ``load``'s element will soon be read: its cache line is fetched (into the second-level
    cache on a CPU) without waiting. Its value, 0, means nothing; it is a statement's (``Evaluate``)."""
    if not isinstance(load, Load):
        raise IRTypeError(f"prefetch: expected a Load, but got '{load}'")
    return Call("prefetch", (load,), int32)


def math_call(name: str, x) -> Call:
    """The float math intrinsic ``name`` (one of ``MATH``) of ``x``."""
    if name not in MATH:
        raise IRTypeError(f"no math intrinsic {name!r}; expected one of {', '.join(MATH)}")
    x = as_expr(x)
    if not x.dtype.is_float:
        raise IRTypeError(f"{name}: expected a float argument, but '{x}' is {x.dtype}")
    return Call(name, (x,), x.dtype)
