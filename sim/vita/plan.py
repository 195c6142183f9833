"""What the VITA machine knows about each instruction of its spec before running any: all of it from the spec.

    plans = plan_spec(spec)        # {instruction name: InsnPlan}, once per spec
    plans["GEMM"].action           # "gemm": the fast path whose contract GEMM has

For every instruction the spec defines:
- ``unit``: the module that runs it, the spec's ``timing.unit`` (load, compute or store); fetch dispatches
  by it, as VTA's fetch does by opcode;
- ``action``: what it does to the machine's state. ``load``/``store``/``gemm``/``reset``/``alu`` are the
  fast paths of sim/vita/functional.py, chosen by the instruction's contract (semantics and operands), not by
  its name; ``generic`` runs a micro-op instruction on ACC tiles through the spec's semantics (a new or
  changed ALU operation); ``finish`` ends the program (group ``finish``); ``None`` with ``reason`` set when
  the machine cannot run it (reported when a program uses it).

Each instance's timing and rules are the spec's too: the machine evaluates them with ``isa.timing_of`` and
``isa.check_constraints`` once per distinct instruction before the program starts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import isa
from isa.lang.tree import to_text
from sim.vita.functional import fast_path

UNITS = ("load", "compute", "store")
# the fields of VTA's micro-op loop, which a generic micro-op instruction's format must have
UOP_LOOP = ("uop_bgn", "uop_end", "iter_out", "iter_in")
TRANSFERS = ("load", "store")
# the actions that run a two-level loop of micro-ops (the work ``uop_budget`` bounds)
MICRO_OP_ACTIONS = ("gemm", "reset", "alu", "generic")


@dataclass(frozen=True)
class InsnPlan:
    """The machine's view of one instruction of the spec (see the module docstring)."""

    name: str
    unit: str | None
    action: str | None
    arg: str | None
    reason: str = ""

    @property
    def transfer(self) -> bool:
        return self.action in TRANSFERS


@functools.lru_cache(maxsize=32)
def plan_spec(spec: isa.ISA) -> Mapping[str, InsnPlan]:
    """The plan of every instruction of ``spec`` (computed once per spec)."""
    return MappingProxyType({name: _plan(spec, instr) for name, instr in spec.instructions.items()})


def _plan(spec: isa.ISA, instr: isa.Instruction) -> InsnPlan:
    action, arg, reason = _action(spec, instr, {f.name for f in instr.fields})
    unit = instr.timing.unit
    if unit not in UNITS:
        action, reason = None, (f"its timing unit is {unit!r}; the VITA machine has the units "
                                f"{', '.join(UNITS)}")
    return InsnPlan(instr.name, unit, action, arg, reason)


def _action(spec: isa.ISA, instr: isa.Instruction, fields: set[str]) -> tuple[str | None, str | None, str]:
    """(action, argument, why not) of ``instr``: a fast path by contract, the generic executor, or none."""
    if instr.group == "finish":
        if instr.statements:
            return None, None, "a finish instruction has no semantics, but this one has some"
        return "finish", None, ""
    fast = fast_path(instr)
    if fast is not None:
        return fast[0], fast[1], ""
    tensors = [op for op in instr.operands if op.kind == "tensor"]
    shape = ["BATCH", "BLOCK_OUT"]
    problems = []
    if missing := [f for f in UOP_LOOP if f not in fields]:
        problems.append(f"its format has no micro-op loop fields {', '.join(missing)}")
    if "dst" not in {op.name for op in tensors}:
        problems.append("it has no 'dst' operand")
    for op in tensors:
        if op.name not in ("dst", "src"):
            problems.append(f"operand '{op.name}' is neither 'dst' nor 'src' (micro-ops address dst_idx and "
                            "src_idx)")
        elif op.space != "ACC" or [to_text(e) for e in op.shape] != shape:
            problems.append(f"operand '{op.name}' is not an ACC tile [BATCH, BLOCK_OUT]")
        elif f"{op.name}_factor_out" not in fields:
            problems.append(f"its format has no {op.name}_factor_out / {op.name}_factor_in fields")
    if problems:
        return None, None, ("its semantics match no fast path of the VITA machine, and it cannot run on the "
                            "generic executor: " + "; ".join(problems))
    return "generic", None, ""
