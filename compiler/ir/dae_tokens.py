"""Dependency tokens between the units of a decoupled access/execute machine (TVM Sec. 3.5, VTA's stages).

``inject_sync`` places them; backends of such machines turn them into their queue instructions, and
sequential execution (the interpreter, the CPU backend) ignores them.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.errors import IRTypeError
from compiler.ir.nodes import Expr, Stmt

#: The units of a decoupled access/execute machine, in pipeline order (TVM Sec. 3.5, VTA's stages).
DAE_UNITS = ("load", "compute", "store")


@dataclass(frozen=True, slots=True)
class DepToken(Stmt):
    """A dependency token between two units of a decoupled access/execute machine (TVM Sec. 3.5).

    ``action`` "push": unit ``src`` sends a token to unit ``dst`` once everything it issued before this point
    is done; "pop": unit ``dst`` waits here for a token from ``src``. ``src`` and ``dst`` are adjacent
    units of DAE_UNITS. ``token`` names the dependency and ``label`` (integer expressions, evaluated where
    the statement runs) tells one pair of a push and its pop apart from the others: a push and the pop meant
    to receive its token carry the same token and label, which is what ``check_token_order`` checks.
    Sequential execution ignores tokens.
    """

    action: str
    src: str
    dst: str
    token: str
    label: tuple[Expr, ...] = ()

    def __post_init__(self) -> None:
        if self.action not in ("push", "pop"):
            raise IRTypeError(f"DepToken: action must be 'push' or 'pop', but got {self.action!r}")
        if self.src not in DAE_UNITS or self.dst not in DAE_UNITS or \
                abs(DAE_UNITS.index(self.src) - DAE_UNITS.index(self.dst)) != 1:
            raise IRTypeError(f"DepToken {self.token}: {self.src} -> {self.dst} are not adjacent units of "
                              f"{', '.join(DAE_UNITS)}")
        if not all(isinstance(x, Expr) and x.dtype.is_int for x in self.label):
            raise IRTypeError(f"DepToken {self.token}: the label must be integer expressions")

    @property
    def unit(self) -> str:
        """The unit that executes this token: the sender of a push, the receiver of a pop."""
        return self.src if self.action == "push" else self.dst
