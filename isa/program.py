"""``Program``: a sequence of instruction instances plus data records (VITA's micro-ops), for one ISA.

A Program is what the compiler emits and the simulators run. It has a text form (``isa.asm``) and a binary
form (``isa.binary``); both round-trip exactly. Branch targets (fields of kind "target") are instruction
indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from isa.errors import EncodingError
from isa.spec import ISA, Insn


@dataclass(frozen=True, eq=False)
class Program:
    """Instructions and data records for ``isa`` (a loaded ISA, with its parameter values)."""

    isa: ISA
    insns: tuple[Insn, ...] = ()
    data: tuple[tuple[str, tuple[Insn, ...]], ...] = field(default=())

    def __init__(
        self,
        isa: ISA,
        insns: Iterable[Insn] = (),
        data: Mapping[str, Iterable[Insn]] | Iterable[tuple[str, Iterable[Insn]]] = (),
    ) -> None:
        items = data.items() if isinstance(data, Mapping) else data
        object.__setattr__(self, "isa", isa)
        object.__setattr__(self, "insns", tuple(insns))
        object.__setattr__(self, "data", tuple((k, tuple(v)) for k, v in items))
        self.validate()

    def validate(self) -> None:
        """Every instance names an instruction (records a data kind) of the ISA, with exactly its fields."""
        for pc, insn in enumerate(self.insns):
            if insn.name not in self.isa.instructions:
                raise EncodingError(
                    f"instruction {pc}: ISA '{self.isa.name}' has no instruction '{insn.name}'"
                )
            _check_fields(
                insn, [f.name for f in self.isa.instructions[insn.name].fields], f"instruction {pc}"
            )
            for f in self.isa.instructions[insn.name].fields:
                if f.kind == "target" and not 0 <= insn[f.name] <= len(self.insns):
                    raise EncodingError(
                        f"instruction {pc} ({insn.name}): branch target {insn[f.name]} is "
                        f"outside the program (0..{len(self.insns)})"
                    )
        for kind, records in self.data:
            if kind not in self.isa.data:
                raise EncodingError(f"ISA '{self.isa.name}' has no data kind '{kind}'")
            names = [f.name for f in self.isa.data[kind].format.fields]
            for k, rec in enumerate(records):
                if rec.name != kind:
                    raise EncodingError(f"{kind} record {k} is a '{rec.name}'")
                _check_fields(rec, names, f"{kind} record {k}")

    def records(self, kind: str) -> tuple[Insn, ...]:
        for k, recs in self.data:
            if k == kind:
                return recs
        return ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return (
            self.isa.name == other.isa.name
            and dict(self.isa.params) == dict(other.isa.params)
            and self.insns == other.insns
            and self.data == other.data
        )

    def __hash__(self) -> int:
        return hash((self.isa.name, self.insns, self.data))

    def __len__(self) -> int:
        return len(self.insns)

    def __str__(self) -> str:
        from isa.asm import disassemble

        return disassemble(self)


def _check_fields(insn: Insn, names: list[str], where: str) -> None:
    got = [k for k, _ in insn.fields]
    if got != names:
        raise EncodingError(
            f"{where} ({insn.name}): fields must be {names} in that order, but got {got}; "
            "build instances with ISA.insn()"
        )
