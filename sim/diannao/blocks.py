"""Runs of core-local scalar code compiled to Python functions: the DianNao interpreter's path for loops.

    block = compile_block(ops, costs, start)     # None: the interpreter runs the instruction at ``start``
    next_pc = block.run(R, F, mems, ids, left, out_of_bounds, runaway)

A block is the longest run of instructions from ``start`` that touch nothing shared and never leave the
interpreter's inner loop (register ops, ``addi``, ``li``, ``rdid``, float ops, conversions, scalar accesses to
the core's own memories), ended by the branch or jump that follows it, if one does. Its instructions become
the statements of one generated function, each the same arithmetic the interpreter does (sim/diannao/
machine.py, ``core``; sim/diannao/scalar.py: 32-bit wrapping, f32 rounding, the same struct formats), so a
loop body runs without the interpreter's dispatch and bookkeeping per instruction: the interpreter adds the
block's cycles, counts its instructions against the budget and counts one run of it, once. Errors are the
interpreter's: an access out of bounds calls ``out_of_bounds(pc)``, a taken branch with the budget spent
``runaway(target)`` (both raise), at the same instruction and with the same registers as the interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.diannao.scalar import (
    ACCESSES,
    ADD,
    ADDI,
    AND,
    BEQ,
    BGE,
    BLT,
    BNE,
    BRANCHES,
    FADD,
    FCVT,
    FLOAD,
    FLOAT_OPS,
    FMAX,
    FMIN,
    FMUL,
    FSTORE,
    FSUB,
    INTEGER_OPS,
    JMP,
    LI,
    LOAD,
    MUL,
    OR,
    RDID,
    SLL,
    SLT,
    SRA,
    SRL,
    STORE,
    SUB,
    XOR,
    access,
    f32,
    fmax,
    fmin,
)

#: fewer instructions than this stay with the interpreter (a call costs about as much as dispatching them)
MIN_BLOCK = 3

_INLINE = (ADDI, LI, RDID, *INTEGER_OPS, *FLOAT_OPS, FCVT)
_WRAP = "(({}) + 0x80000000 & 0xFFFFFFFF) - 0x80000000"   # to int32, as the interpreter wraps
_BINARY = {ADD: "R[{a}] + R[{b}]", SUB: "R[{a}] - R[{b}]", MUL: "R[{a}] * R[{b}]"}
_PLAIN = {AND: "R[{a}] & R[{b}]", OR: "R[{a}] | R[{b}]", XOR: "R[{a}] ^ R[{b}]",
          SRA: "R[{a}] >> min(max(R[{b}], 0), 32)", SLT: "(1 if R[{a}] < R[{b}] else 0)"}
_WRAPPED = {**_BINARY, SLL: "R[{a}] << min(max(R[{b}], 0), 32)",
            SRL: "(R[{a}] & 0xFFFFFFFF) >> min(R[{b}] & 0xFFFFFFFF, 32)"}
_FLOAT = {FADD: "f32(F[{a}] + F[{b}])", FSUB: "f32(F[{a}] - F[{b}])", FMUL: "f32(F[{a}] * F[{b}])",
          FMAX: "fmax(F[{a}], F[{b}])", FMIN: "fmin(F[{a}], F[{b}])"}
_COMPARE = {BLT: "<", BNE: "!=", BGE: ">=", BEQ: "=="}


@dataclass(frozen=True)
class Block:
    """A compiled run of scalar code: its first pc, its instructions (the final branch included), their
    cycles, the function that runs it and returns the next pc, and whether it loads or stores (then the
    interpreter runs it instead while the core's asynchronous copies are outstanding, checking each
    access)."""

    start: int
    length: int
    cost: int
    run: Callable[..., int]
    memory: bool = False


def inline(op) -> bool:
    """Whether the interpreter may run ``op`` inside a block: core-local scalar work."""
    return op.kind in _INLINE or (op.kind in ACCESSES and not op.shared)


def compile_block(ops: list, costs: list[int], start: int) -> Block | None:
    """The block that starts at ``start`` (module docstring), or None where it would be shorter than
    ``MIN_BLOCK``."""
    end = start
    while end < len(ops) and inline(ops[end]):
        end += 1
    if end < len(ops) and ops[end].kind in BRANCHES:
        end += 1
    if end - start < MIN_BLOCK:
        return None
    names: dict[str, object] = {"f32": f32, "fmax": fmax, "fmin": fmin, "access": access}
    spaces = sorted({ops[pc].space for pc in range(start, end) if ops[pc].kind in ACCESSES})
    lines = ["def run(R, F, mems, ids, left, out_of_bounds, runaway):"]
    lines += [f"    m{s} = mems[{s}]\n    n{s} = m{s}.size" for s in spaces]
    for pc in range(start, end):
        lines += ["    " + line for line in _statements(ops[pc], pc, names)]
    if ops[end - 1].kind not in BRANCHES:
        lines.append(f"    return {end}")
    exec("\n".join(lines), names)   # noqa: S102 - our own statements, from decoded integer fields
    return Block(start, end - start, sum(costs[start:end]), names["run"], bool(spaces))


def _statements(op, pc: int, names: dict[str, object]) -> list[str]:
    """The Python statements of one instruction (its element formats bound in ``names``)."""
    k = op.kind
    if k == ADDI:
        return [f"R[{op.rd}] = " + _WRAP.format(f"R[{op.rs1}] + {op.imm}")]
    if k == LI:
        return [f"R[{op.rd}] = {op.imm}"]
    if k == RDID:
        return [f"R[{op.rd}] = ids[{op.which}]"]
    if k in _WRAPPED:
        return [f"R[{op.rd}] = " + _WRAP.format(_WRAPPED[k].format(a=op.rs1, b=op.rs2))]
    if k in _PLAIN:
        return [f"R[{op.rd}] = " + _PLAIN[k].format(a=op.rs1, b=op.rs2)]
    if k in _FLOAT:
        return [f"F[{op.rd}] = " + _FLOAT[k].format(a=op.rs1, b=op.rs2)]
    if k == FCVT:
        return [f"F[{op.rd}] = f32(float(R[{op.rs1}]))"]
    if k in ACCESSES:
        names[f"e{pc}"], names[f"op{pc}"] = op.element, op
        m = f"m{op.space}"
        check = [f"a = R[{op.base}] + {op.offset}",
                 f"if a < 0 or a + {op.element.size} > n{op.space}:", f"    out_of_bounds({pc})"]
        if k == LOAD:
            return [*check, f"R[{op.reg}] = e{pc}.unpack_from({m}, a)[0]"]
        if k == FLOAD:
            return [*check, f"F[{op.reg}] = e{pc}.unpack_from({m}, a)[0]"]
        if k == STORE:
            return [*check, f"e{pc}.pack_into({m}, a, R[{op.reg}] & {op.mask})"]
        assert k == FSTORE
        return [*check, f"access({FSTORE}, op{pc}, {m}, a, R, F)"]
    taken = ["if left < 0:", f"    runaway({op.target})", f"return {op.target}"]
    if k == JMP:
        return taken
    return [f"if R[{op.rs1}] {_COMPARE[k]} R[{op.rs2}]:", *("    " + t for t in taken), f"return {pc + 1}"]
