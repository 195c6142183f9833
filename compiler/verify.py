"""Well-formedness checks of a ``PrimFunc`` between passes (STYLE rule 10).

``verify(func, stage)`` collects every violation and raises one ``VerifyError`` listing them all.
Stages:

- ``"loop-ir"``: after lowering. Every variable is bound by an enclosing For/Let (no shadowing); every
  accessed buffer is a parameter or allocated by an enclosing ``Allocate``; no ``Reduce`` is left;
  loop bounds are integer expressions; bound loops name their hardware axis; constant indices are in
  range; every tensor instruction operand's region lies on such a buffer (a constant offset in range).
- ``"flat"``: as ``loop-ir``, and every buffer is one-dimensional.
"""

from __future__ import annotations

from compiler.errors import VerifyError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRVisitor

STAGES = ("loop-ir", "flat")


class _Verifier(IRVisitor):
    def __init__(self, func: ir.PrimFunc, stage: str) -> None:
        self.stage = stage
        self.errors: list[str] = []
        self.vars: set[ir.Var] = set()
        self.buffers: set[ir.Buffer] = set(func.params)
        for b in func.params:
            self._check_buffer(b, "parameter")

    def _check_buffer(self, b: ir.Buffer, what: str) -> None:
        if self.stage == "flat" and len(b.shape) != 1:
            self.errors.append(f"{what} {b.name}{list(b.shape)} is not flattened to one dimension")

    def _bind(self, var: ir.Var, where: str) -> None:
        if var in self.vars:
            self.errors.append(f"{where}: variable '{var.name}' is bound again inside its own scope")
        self.vars.add(var)

    def visit_For(self, s: ir.For) -> None:
        for part, e in (("min", s.min), ("extent", s.extent)):
            if not e.dtype.is_int:
                self.errors.append(f"loop {s.var.name}: {part} '{e}' is not an integer")
            self.visit(e)
        if isinstance(s.extent, ir.IntImm) and s.extent.value < 0:
            self.errors.append(f"loop {s.var.name}: negative extent {s.extent.value}")
        self._bind(s.var, f"loop {s.var.name}")
        self.visit(s.body)
        self.vars.discard(s.var)

    def visit_Let(self, s: ir.Let) -> None:
        self.visit(s.value)
        self._bind(s.var, f"let {s.var.name}")
        self.visit(s.body)
        self.vars.discard(s.var)

    def visit_Allocate(self, s: ir.Allocate) -> None:
        if s.buffer in self.buffers:
            self.errors.append(f"buffer {s.buffer.name} is allocated twice (or shadows a parameter)")
        self._check_buffer(s.buffer, "allocation")
        self.buffers.add(s.buffer)
        self.visit(s.body)
        self.buffers.discard(s.buffer)

    def visit_Var(self, v: ir.Var) -> None:
        if v not in self.vars:
            self.errors.append(f"variable '{v.name}' is used outside any loop or let that binds it")

    def visit_Reduce(self, e: ir.Reduce) -> None:
        self.errors.append(f"reduction '{e}' survived lowering")

    def _access(self, kind: str, b: ir.Buffer, indices: tuple[ir.Expr, ...]) -> None:
        if b not in self.buffers:
            self.errors.append(f"{kind} of buffer {b.name}, which is neither a parameter nor allocated here")
        for d, (i, extent) in enumerate(zip(indices, b.shape, strict=True)):
            if isinstance(i, ir.IntImm) and not 0 <= i.value < extent:
                self.errors.append(
                    f"{kind} {b.name}: constant index {i.value} of dimension {d} is outside [0, {extent})"
                )

    def visit_Load(self, e: ir.Load) -> None:
        self._access("load", e.buffer, e.indices)
        self.generic_visit(e)

    def visit_Store(self, s: ir.Store) -> None:
        self._access("store", s.buffer, s.indices)
        self.generic_visit(s)

    def visit_Region(self, r: ir.Region) -> None:
        b = r.buffer
        if b not in self.buffers:
            self.errors.append(
                f"operand '{r.operand}' on buffer {b.name}, which is neither a parameter nor allocated here"
            )
        if isinstance(r.offset, ir.IntImm) and not 0 <= r.offset.value < b.size:
            self.errors.append(
                f"operand '{r.operand}' on {b.name}: constant offset {r.offset.value} is outside "
                f"[0, {b.size})"
            )
        self.visit(r.offset)


def verify(func: ir.PrimFunc, stage: str = "loop-ir", after: str = "") -> None:
    """Raise ``VerifyError`` listing every violation of ``stage``'s invariants in ``func``."""
    if stage not in STAGES:
        raise VerifyError(f"verify: unknown stage {stage!r}; expected one of {STAGES}")
    if not isinstance(func, ir.PrimFunc):
        raise VerifyError(f"verify: expected a PrimFunc, but got {type(func).__name__}")
    v = _Verifier(func, stage)
    v.visit(func.body)
    if v.errors:
        where = f" after pass '{after}'" if after else ""
        listing = "\n".join(f"  - {e}" for e in v.errors)
        raise VerifyError(f"{func.name}{where} breaks the {stage} invariants:\n{listing}")
