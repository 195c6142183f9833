"""Which vectorized loops the CPU code generator (``llvm_emit``) emits as vector IR: a constant extent of at
least 2 and a straight-line body (Stores, Lets, guards that do not depend on the lane) whose lanes are
independent (no lane reads what another lane writes)."""

from __future__ import annotations

from compiler.ir import nodes as n
from compiler.ir.functor import IRVisitor, free_vars
from compiler.ir.intrinsics import Call


def _const_int(e: n.Expr) -> int | None:
    return int(e.value) if isinstance(e, n.IntImm) else None


def vectorizable(loop: n.For) -> bool:
    """Whether a vectorized loop can be vector IR: straight-line code, lanes independent."""
    if _const_int(loop.extent) is None or _const_int(loop.extent) < 2:
        return False
    checker = _Straight(loop.var)
    checker.visit(loop.body)
    if not checker.ok:
        return False
    for buffer, stored in checker.stores.items():  # a lane must not read what another lane writes
        loaded = checker.loads.get(buffer, set())
        if any(idx not in stored for idx in loaded) or len(stored) > 1:
            return False
    return True


class _Straight(IRVisitor):
    """Straight-line code whose guards do not depend on the lane; collects each buffer's accesses."""

    def __init__(self, var: n.Var) -> None:
        self.varying, self.ok = {var}, True
        self.loads: dict[n.Buffer, set[tuple]] = {}
        self.stores: dict[n.Buffer, set[tuple]] = {}

    def _lane_dependent(self, e: n.Expr) -> bool:
        return any(v in self.varying for v in free_vars(e))

    def visit_For(self, s: n.For) -> None:
        self.ok = False

    def visit_TensorInsn(self, s: n.TensorInsn) -> None:
        self.ok = False

    def visit_Allocate(self, s: n.Allocate) -> None:
        self.ok = False

    def visit_IfThenElse(self, s: n.IfThenElse) -> None:
        if self._lane_dependent(s.cond):
            self.ok = False
        self.generic_visit(s)

    def visit_Call(self, e: Call) -> None:
        if e.name == "if_then_else" and self._lane_dependent(e.args[0]):
            self.ok = False
        self.generic_visit(e)

    def visit_Let(self, s: n.Let) -> None:
        if self._lane_dependent(s.value):
            self.varying.add(s.var)
        self.generic_visit(s)

    def visit_Load(self, e: n.Load) -> None:
        self.loads.setdefault(e.buffer, set()).add(tuple(map(_key, e.indices)))
        self.generic_visit(e)

    def visit_Store(self, s: n.Store) -> None:
        self.stores.setdefault(s.buffer, set()).add(tuple(map(_key, s.indices)))
        self.generic_visit(s)


def _key(e: n.Expr) -> str:
    return str(e)
