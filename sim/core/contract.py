"""The contract of a functional fast path: the parts of an instruction a hand-written numpy path depends on.

A simulator may run an instruction on a hand-written fast path instead of the spec's generic executor only
when the instruction says exactly what the fast path was written (and tested) for: the same semantics, index
kinds and type variables, and the same operands in the same spaces, dtypes, shapes, strides and addresses.
``contract(instr)`` prints all of that as one text; each simulator's table maps such texts to fast paths
and ``fast_path_for`` looks an instruction up by its text, never by its mnemonic. A spec that redefines
``vadd`` as a saturating add therefore runs on the generic executor and gives the saturated result, and a
new instruction with a known contract runs fast under any name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import isa
from isa.lang.tree import to_text

T = TypeVar("T")


def _exprs(exprs) -> str:
    return "[" + ", ".join(to_text(e) for e in exprs) + "]" if exprs is not None else "-"


def contract(instr: isa.Instruction) -> str:
    """The text of everything a fast path of ``instr`` relies on (see the module docstring)."""
    lines = [str(s) for s in instr.statements]
    binding = instr.bindings()[0]
    sem = instr.typed_semantics(binding)
    lines.append("indices " + ", ".join(f"{iv.name} {iv.kind}" for iv in sem.indices))
    for tv, names in instr.types.items():
        lines.append(f"type {tv} in {', '.join(names)}")
    for op in instr.operands:
        if op.kind != "tensor":
            lines.append(f"{op.name}: {op.kind} {op.dtype}")
            continue
        addr = to_text(op.addr) if op.addr is not None else op.name
        lines.append(f"{op.name}: {op.space} {op.dtype} shape {_exprs(op.shape)} "
                     f"strides {_exprs(op.strides)} at {addr}")
    return "\n".join(lines)


def fast_path_for(instr: isa.Instruction, table: Mapping[str, T]) -> T | None:
    """The fast path of ``table`` whose contract ``instr`` has, or None (the generic executor runs it)."""
    return table.get(contract(instr))
