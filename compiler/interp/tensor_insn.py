"""What a tensor instruction of the IR runs: its instruction of the spec, the operands it reads and writes,
and the dtypes its type variables take from the buffers of its regions."""

from __future__ import annotations

import isa
from compiler.errors import InterpError
from compiler.ir import nodes as n


def instruction(s: n.TensorInsn, text: str) -> tuple[isa.ISA, isa.Instruction]:
    """The spec and the instruction ``s`` runs."""
    spec = s.isa
    try:
        return spec, spec.instruction(s.name)
    except KeyError as e:
        raise InterpError(f"{text}: {e.args[0]}") from None


def written_operands(s: n.TensorInsn) -> tuple[str, ...]:
    """The operands ``s`` writes; none when its instruction is unknown (compiling it reports that)."""
    return _operands(s, "writes")


def read_operands(s: n.TensorInsn) -> tuple[str, ...]:
    """The operands ``s`` reads (a ``+=`` target included); none when its instruction is unknown."""
    return _operands(s, "reads")


def _operands(s: n.TensorInsn, role: str) -> tuple[str, ...]:
    try:
        _, instr = instruction(s, "")
    except InterpError:
        return ()
    return tuple(dict.fromkeys(op for sem in instr.typed.values() for op in getattr(sem, role)))


def bind_types(s: n.TensorInsn, instr: isa.Instruction, text: str) -> dict[str, str]:
    """Each type variable bound to the dtype of the buffers of the regions whose operands have that type."""
    names = {op.name: op for op in instr.operands}
    for r in s.regions:
        if r.operand not in names:
            known = ", ".join(names) or "none"
            raise InterpError(f"{text}: unknown operand '{r.operand}'; operands are {known}")
    types = {}
    for tv, allowed in instr.types.items():
        typed = [r for r in s.regions if names[r.operand].dtype == tv]
        found = {r.buffer.dtype.short for r in typed}
        if not found:
            raise InterpError(f"{text}: no region of an operand of type {tv} gives its dtype")
        if len(found) > 1:
            which = ", ".join(f"{r.operand}={r.buffer.name} ({r.buffer.dtype.short})" for r in typed)
            raise InterpError(f"{text}: dtype mismatch: the operands of type {tv} are {which}")
        (dt,) = found
        if dt not in allowed:
            raise InterpError(f"{text}: expected {tv} in {list(allowed)}, but the buffers hold {dt}")
        types[tv] = dt
    return types
