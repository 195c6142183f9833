"""How many times a function issues each tensor instruction, counted on the loop IR.

    issued_instructions(func)   # {"vpdpbusd_512": 8192}: each instruction times the loop extents around it

A ``TensorInsn`` inside loops of constant extents issues once per iteration of all of them; a loop whose
extent is not a constant counts once, and both branches of an ``IfThenElse`` count in full, so the count is
an upper bound where a tile's tail is guarded. The walk is an ``IRVisitor``: every node kind is visited
(an unknown one raises), none is skipped.
"""

from __future__ import annotations

from compiler.ir import nodes as ir
from compiler.ir.functor import IRVisitor


class _Issued(IRVisitor):
    """Adds each tensor instruction's issues, ``times`` being the product of the constant extents of the loops
    around the node visited."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.times = 1

    def visit_For(self, s: ir.For) -> None:
        outer = self.times
        self.times = outer * (s.extent.value if isinstance(s.extent, ir.IntImm) else 1)
        self.generic_visit(s)
        self.times = outer

    def visit_TensorInsn(self, s: ir.TensorInsn) -> None:
        self.counts[s.name] = self.counts.get(s.name, 0) + self.times


def issued_instructions(func: ir.PrimFunc) -> dict[str, int]:
    """How many times each tensor instruction of ``func`` is issued: the product of the constant extents of
    the loops around it, by instruction name in the order they first appear."""
    visitor = _Issued()
    visitor.visit(func.body)
    return visitor.counts
