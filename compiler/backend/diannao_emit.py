"""Instruction emission for the DianNao backend: an instruction list with labels and late-bound values, the
marks that say which instructions are scalar fallback code, and the two register files' free lists.

``Code`` collects instructions as (mnemonic, fields) pairs whose values may still be ``Label``s (branch
targets) or ``Late`` values (an address fixed only when every allocation is known, such as the float scratch
slot); ``Code.program`` resolves them and builds an ``isa.Program`` through ``ISA.insn``, so every field is
range-checked by the spec. An instruction is a *fallback* instruction when it is scalar (its spec group is
not a tensor group) and is emitted inside a marked region (``Code.marked``) but not while the address
registers of a copy are being set up (``Code.setup``).

Non-Goals: scheduling or peephole optimization of the emitted code.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import isa
from compiler.errors import InternalError, LoweringError

#: Spec groups of the instructions that are not scalar code (copies, vector, unary and tensor-unit ops).
TENSOR_GROUPS = frozenset({"dma", "vector", "unary", "tensor"})


class Label:
    """A branch target; ``pc`` is set when the label is placed."""

    __slots__ = ("pc",)

    def __init__(self) -> None:
        self.pc: int | None = None


@dataclass(frozen=True, slots=True)
class Late:
    """A field value known only when the program is finished (looked up by ``name`` in ``Code.program``)."""

    name: str
    offset: int = 0


class Code:
    """The instructions of one kernel being built, in order."""

    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec
        self.items: list[tuple[str, dict[str, object]]] = []
        self.fallback: list[bool] = []
        self.marked = 0  # depth of marked (pragma_*) regions around the emission point
        self.setup = 0  # depth of copy address setup (never fallback)

    def emit(self, name: str, **fields: object) -> int:
        """Append instruction ``name`` with ``fields`` (ints, enum names, Labels or Late values); its pc."""
        group = self.spec.instruction(name).group
        self.items.append((name, fields))
        self.fallback.append(self.marked > 0 and self.setup == 0 and group not in TENSOR_GROUPS)
        return len(self.items) - 1

    def place(self, label: Label) -> None:
        """The next instruction emitted is ``label``'s target."""
        if label.pc is not None:
            raise InternalError("a label is placed twice")
        label.pc = len(self.items)

    @contextmanager
    def marking(self, on: bool = True) -> Iterator[None]:
        """Emit inside a marked region (when ``on``)."""
        self.marked += on
        try:
            yield
        finally:
            self.marked -= on

    @contextmanager
    def setting_up(self) -> Iterator[None]:
        """Emit the address setup of a copy: scalar code that is not fallback even in a marked region."""
        self.setup += 1
        try:
            yield
        finally:
            self.setup -= 1

    @property
    def fallback_pcs(self) -> frozenset[int]:
        return frozenset(pc for pc, flag in enumerate(self.fallback) if flag)

    def program(self, late: Mapping[str, int]) -> isa.Program:
        """The finished program, with labels and ``late`` values resolved."""

        def resolve(v: object) -> object:
            if isinstance(v, Label):
                if v.pc is None:
                    raise InternalError("a branch targets a label that was never placed")
                return v.pc
            if isinstance(v, Late):
                return late[v.name] + v.offset
            return v

        insns = []
        for pc, (name, fields) in enumerate(self.items):
            values = {k: resolve(v) for k, v in fields.items()}
            try:
                insns.append(self.spec.insn(name, **values))
            except isa.EncodingError as e:
                raise LoweringError(f"instruction {pc} ({name}): {e}") from None
        return isa.Program(self.spec, insns)


class RegisterFile:
    """The free registers of one register file ("R" or "F"); ``take`` hands out the lowest free one."""

    def __init__(self, name: str, regs: Iterable[int]) -> None:
        self.name = name
        self.free = sorted(set(regs))
        self.size = len(self.free)

    def take(self, where: str) -> int:
        if not self.free:
            raise LoweringError(f"out of registers in {where}: all {self.size} {self.name} registers are "
                                "in use")
        return self.free.pop(0)

    def give(self, reg: int) -> None:
        if reg in self.free:
            raise InternalError(f"register {self.name}{reg} is freed twice")
        self.free.append(reg)
        self.free.sort()
