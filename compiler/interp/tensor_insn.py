"""What a tensor instruction of the IR runs: its instruction of the spec, the operands it reads and writes,
and the dtypes its type variables take from the buffers of its regions."""

from __future__ import annotations

import math

import isa
from compiler.errors import InterpError
from compiler.ir import nodes as n
from isa.dtypes import DTYPES
from isa.lang.scalar import evaluate as evaluate_scalar


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


def operand_span(insn: n.TensorInsn, operand: str) -> tuple[int, int] | None:
    """The elements [first, end) of its buffer that ``operand`` of ``insn`` covers (the operand's shape and
    strides, the spec's or row-major), when its fields and offset are constants; else None."""
    region = next((r for r in insn.regions if r.operand == operand), None)
    fields = {f.name: f.value.value for f in insn.fields if isinstance(f.value, n.IntImm)}
    if region is None or not isinstance(region.offset, n.IntImm) or len(fields) != len(insn.fields):
        return None
    spec, instr = insn.isa, insn.isa.instruction(insn.name)
    op = instr.operand(operand)
    types = {tv: next(r.buffer.dtype.short for r in insn.regions if instr.operand(r.operand).dtype == tv)
             for tv in instr.types}
    defaults = {f.name: f.default or 0 for f in instr.fields}
    env = spec.scalar_env({**defaults, **fields}, types)
    shape = [int(evaluate_scalar(e, env)) for e in op.shape]
    strides = [int(evaluate_scalar(e, env)) for e in op.strides] if op.strides else \
        [math.prod(shape[k + 1:]) for k in range(len(shape))]
    if 0 in shape:
        return region.offset.value, region.offset.value
    size = DTYPES[instr.operand_dtype(op, types)].bytes
    elem = region.buffer.dtype.bits // 8
    extent = (sum((d - 1) * st for d, st in zip(shape, strides, strict=True)) + 1) * size
    return region.offset.value, region.offset.value + -(-extent // elem)


def spans_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether element spans [first, end) ``a`` and ``b`` (``operand_span``'s) share an element."""
    return a[0] < b[1] and b[0] < a[1]


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
