"""Structural equality of IR trees up to a consistent renaming of variables and buffers."""

from __future__ import annotations

import enum

import isa
from compiler.ir import nodes as n
from compiler.ir.functor import fields_of


class _Equal:
    def __init__(self) -> None:
        self.lr: dict[int, object] = {}
        self.rl: dict[int, object] = {}
        self.path: list[str] = []

    def bind(self, a, b) -> bool:
        """Map a <-> b bijectively on first sight; later sightings must agree."""
        ma, mb = self.lr.get(id(a)), self.rl.get(id(b))
        if ma is None and mb is None:
            self.lr[id(a)], self.rl[id(b)] = b, a
            return True
        return ma is b and mb is a

    def eq(self, a, b) -> bool:
        if isinstance(a, n.Var) or isinstance(b, n.Var):
            return isinstance(a, n.Var) and isinstance(b, n.Var) and a.dtype == b.dtype and self.bind(a, b)
        if isinstance(a, n.Buffer) or isinstance(b, n.Buffer):
            return (
                isinstance(a, n.Buffer)
                and isinstance(b, n.Buffer)
                and (a.shape, a.dtype, a.scope) == (b.shape, b.dtype, b.scope)
                and self.bind(a, b)
            )
        if isinstance(a, n.Node):
            if type(a) is not type(b):
                return False
            for name in fields_of(a):
                self.path.append(f"{type(a).__name__}.{name}")
                if not self.eq(getattr(a, name), getattr(b, name)):
                    return False
                self.path.pop()
            return True
        if isinstance(a, tuple):
            if not isinstance(b, tuple) or len(a) != len(b):
                return False
            return all(self.eq(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, float | int | str | enum.Enum | n.dtypes.DType | isa.ISA) or a is None:
            return type(a) is type(b) and a == b
        raise NotImplementedError(f"structural_equal: no case for {type(a).__name__}")


def structural_equal(a: n.Node, b: n.Node) -> bool:
    """True if ``a`` and ``b`` are the same tree up to a bijective renaming of variables and buffers."""
    return _Equal().eq(a, b)


def assert_structural_equal(actual: n.Node, expected: n.Node) -> None:
    """Raise AssertionError showing both printouts and the first differing field when not equal."""
    checker = _Equal()
    if not checker.eq(actual, expected):
        where = " > ".join(checker.path) or "<root>"
        raise AssertionError(f"IR differs at {where}\n--- actual ---\n{actual}\n--- expected ---\n{expected}")
