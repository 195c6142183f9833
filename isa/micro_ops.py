"""The micro-op loop of an instruction that runs over a Program's micro-op records (VITA's GEMM and ALU), as
isa/specs/vita.toml states it: which fields run the loop, and where each tensor operand of each micro-op is.

An instruction whose format has the loop fields (``LOOP``: uop_bgn, uop_end, iter_out, iter_in) runs the
records uop_bgn..uop_end-1 of the spec's data kind ``uop`` in a two-level loop, i < iter_out outside,
j < iter_in inside, and an operand of role R is the tile

    R_idx + i * R_factor_out + j * R_factor_in

of its memory space, R_idx a field of the micro-op record and the two factors fields of the instruction's
format. An operand's role is its name (dst, src, wgt), or GEMM's name for it (acc for dst, inp for src).

``addresses`` reads that off the spec for one instruction, for the operands it has and nothing else, so its
format may put any field of its own where another instruction has a factor (an ALU_CLIP whose low bound takes
src_factor_in's bits). The compiler (compiler/backend/vita.py, which writes the fields) and the simulator
(sim/vita, which reads them) both take an operand's address from here. A field the address needs that the
format (or the micro-op record) does not have is a ``MicroOpError`` naming the instruction, the operand and
the field: the spec's address has no factor of 0 for it.

Non-goals: addresses of another form (the spec language has no way to write one over micro-op fields and
loop counters yet).
"""

from __future__ import annotations

from dataclasses import dataclass

from isa.errors import ISAError
from isa.spec import ISA, Instruction

#: the fields that run the loop: the record range uop_bgn..uop_end-1, then the outer and inner trip counts
LOOP = ("uop_bgn", "uop_end", "iter_out", "iter_in")
#: the data kind of the micro-op records
RECORD = "uop"
#: an operand's role (which micro-op field and factors address it) by its name
ROLES = {"dst": "dst", "acc": "dst", "src": "src", "inp": "src", "wgt": "wgt"}


class MicroOpError(ISAError):
    """An instruction's micro-op loop cannot be read off its spec: names the instruction, the operand (where
    one is at fault) and the field the spec's addressing needs but the format lacks (or None)."""

    def __init__(self, message: str, *, instruction: str, operand: str | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.instruction, self.operand, self.field = instruction, operand, field


@dataclass(frozen=True, slots=True)
class Address:
    """Where operand ``operand`` of each micro-op lies: tile ``record[index] + i * factors[0] + j *
    factors[1]`` of ``space``."""

    operand: str
    role: str
    space: str | None
    index: str                  # the micro-op record's field
    factors: tuple[str, str]    # the instruction's fields: the outer loop's step, the inner loop's

    def __str__(self) -> str:
        return f"{self.index} + i * {self.factors[0]} + j * {self.factors[1]}"


def runs_micro_ops(instr: Instruction) -> bool:
    """Whether ``instr`` has the fields of the micro-op loop (``LOOP``)."""
    names = {f.name for f in instr.fields}
    return all(name in names for name in LOOP)


def addresses(spec: ISA, instr: Instruction) -> tuple[Address, ...]:
    """The address of each tensor operand of ``instr``'s micro-ops, in operand order (module docstring).

    Raises ``MicroOpError`` where the spec has no micro-op records, the format lacks a loop field, an
    operand has no role, or a field its address needs is missing.
    """
    fields = {f.name for f in instr.fields}
    fmt = instr.format.name if instr.format is not None else None
    where = f"instruction '{instr.name}'" + (f" (format '{fmt}')" if fmt else " (no format)")
    for name in LOOP:
        if name not in fields:
            raise MicroOpError(f"{where} runs a micro-op loop, whose field '{name}' its format does not have "
                               f"(the loop's fields are {', '.join(LOOP)})", instruction=instr.name,
                               field=name)
    kind = spec.data.get(RECORD)
    if kind is None:
        raise MicroOpError(f"{where} runs a micro-op loop, but the spec has no [data.{RECORD}] records",
                           instruction=instr.name)
    record = {f.name for f in kind.format.fields}
    out = []
    for op in instr.operands:
        if op.kind != "tensor":
            continue
        role = ROLES.get(op.name)
        if role is None:
            raise MicroOpError(f"{where}: operand '{op.name}' has no micro-op address: a micro-op addresses "
                               f"the operands {', '.join(ROLES)} (roles dst, src, wgt)",
                               instruction=instr.name, operand=op.name)
        address = Address(op.name, role, op.space, f"{role}_idx", (f"{role}_factor_out", f"{role}_factor_in"))
        if address.index not in record:
            raise MicroOpError(f"{where}: operand '{op.name}' is at {address}, but the micro-op record "
                               f"(format '{kind.format.name}') has no field '{address.index}'",
                               instruction=instr.name, operand=op.name, field=address.index)
        for factor in address.factors:
            if factor not in fields:
                raise MicroOpError(f"{where}: operand '{op.name}' is at {address}, but the format has no "
                                   f"field '{factor}'", instruction=instr.name, operand=op.name, field=factor)
        out.append(address)
    return tuple(out)
