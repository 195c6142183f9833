"""Expression tree of the ISA language: frozen nodes the compiler can pattern-match and the executor can run.

The parser builds untyped nodes (``dtype`` None, casts and reductions still spelled as ``Call``);
``lang.typecheck`` returns the typed form, where every node carries its dtype name ("i8" ... "f32", "bool", or
"int" for index and field arithmetic), casts are ``Cast`` and reductions are ``Reduce``. ``pos`` is the
0-based offset of the node in its source text, for error messages; it takes no part in equality.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Expr:
    """Base class of expression nodes."""

    __slots__ = ()

    def __str__(self) -> str:
        return to_text(self)


@dataclass(frozen=True, slots=True)
class Num(Expr):
    """An integer or float literal."""

    value: int | float
    dtype: str | None = None
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Name(Expr):
    """A name: an index variable, a field, a parameter or an enum value (``kind`` says which once typed)."""

    id: str
    kind: str | None = None
    dtype: str | None = None
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Access(Expr):
    """An element of a tensor operand: ``tensor[indices...]``."""

    tensor: str
    indices: tuple[Expr, ...]
    dtype: str | None = None
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    """``-x``, ``~x`` or ``not x``."""

    op: str
    operand: Expr
    dtype: str | None = None
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    """``lhs op rhs``; once typed, ``arg_dtype`` is the dtype both operands are converted to."""

    op: str
    lhs: Expr
    rhs: Expr
    dtype: str | None = None
    arg_dtype: str | None = None
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A call of a builtin: ``min``, ``max``, ``abs``, ``select``, ``exp``... (and, before typing, casts and
    reductions)."""

    func: str
    args: tuple[Expr, ...]
    dtype: str | None = None
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """Conversion of ``value`` to ``dtype`` (wrapping for integers, rounding for floats)."""

    value: Expr
    dtype: str
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Reduce(Expr):
    """``op`` ("sum", "max", "min") of ``body`` over the reduce indices ``axes``."""

    op: str
    axes: tuple[str, ...]
    body: Expr
    dtype: str | None = None
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Assign:
    """``target = value`` or ``target += value`` (``op`` is "=" or "+=")."""

    target: Access
    op: str
    value: Expr
    pos: int = field(default=0, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{to_text(self.target)} {self.op} {to_text(self.value)}"


# ---------------------------------------------------------------------------------------------- printing

_PREC = {"or": 1, "and": 2, "not": 3, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "|": 5, "^": 6, "&": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10}
_UNARY_PREC = 11
_ATOM = 12


def _prec(e: Expr) -> int:
    if isinstance(e, Binary):
        return _PREC[e.op]
    if isinstance(e, Unary):
        return _PREC["not"] if e.op == "not" else _UNARY_PREC
    if isinstance(e, Num) and e.value < 0:
        return _UNARY_PREC
    return _ATOM


def _wrap(e: Expr, min_prec: int) -> str:
    text = to_text(e)
    return f"({text})" if _prec(e) < min_prec else text


def to_text(e: Expr) -> str:
    """Canonical source text of an expression; parsing it gives back an equal tree."""
    if isinstance(e, Num):
        return repr(e.value) if isinstance(e.value, float) else str(e.value)
    if isinstance(e, Name):
        return e.id
    if isinstance(e, Access):
        return f"{e.tensor}[{', '.join(to_text(i) for i in e.indices)}]"
    if isinstance(e, Unary):
        if e.op == "not":
            return f"not {_wrap(e.operand, _PREC['not'])}"
        return f"{e.op}{_wrap(e.operand, _UNARY_PREC)}"
    if isinstance(e, Binary):
        p = _PREC[e.op]
        # comparisons do not chain: parenthesize a comparison operand of a comparison
        left_min = p + 1 if p == _PREC["=="] else p
        return f"{_wrap(e.lhs, left_min)} {e.op} {_wrap(e.rhs, p + 1)}"
    if isinstance(e, Call):
        return f"{e.func}({', '.join(to_text(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({to_text(e.value)})"
    if isinstance(e, Reduce):
        return f"{e.op}({', '.join(e.axes)}, {to_text(e.body)})"
    raise TypeError(f"to_text: no case for {type(e).__name__}")


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``e``."""
    if isinstance(e, Access):
        return e.indices
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Reduce):
        return (e.body,)
    return ()


def walk(e: Expr):
    """Every node of ``e``, parents before children."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def names_in(e: Expr) -> set[str]:
    """Identifiers used as plain names (not tensors, not callees) anywhere in ``e``."""
    return {n.id for n in walk(e) if isinstance(n, Name)}
