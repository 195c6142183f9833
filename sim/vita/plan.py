"""What the VITA machine knows about each instruction of its spec before running any: all of it from the spec.

    plans = plan_spec(spec)        # {instruction name: InsnPlan}, once per spec
    plans["GEMM"].action           # "gemm": the fast path whose contract GEMM has

For every instruction the spec defines:
- ``unit``: the module that runs it, the spec's ``timing.unit`` (load, compute or store); fetch dispatches
  by it, as VTA's fetch does by opcode;
- ``action``: what it does to the machine's state. ``load``/``store``/``gemm``/``reset``/``alu`` are the
  fast paths of sim/vita/functional.py, chosen by the instruction's contract (semantics and operands), not by
  its name; ``generic`` runs a micro-op instruction on ACC, INP and WGT tiles through the spec's semantics
  (a new or changed ALU operation; ``arg`` "gemm" for a gemm-group one that sums, GEMM core work);
  ``finish`` ends the program (group ``finish``); ``None`` with ``reason``
  set when the machine cannot run it (reported, before cycle 0, when a program uses it);
- ``addresses``: for a micro-op instruction, the tile each of its operands reads or writes, from the
  micro-op record and the loop factors the spec says address it (isa/micro_ops.py), never from field names
  the instruction does not have: a format without a field its operands' addresses need is refused, with the
  field in ``missing``.

Each instance's timing and rules are the spec's too: the machine evaluates them with ``isa.timing_of`` and
``isa.check_constraints`` once per distinct instruction before the program starts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import isa
from isa import micro_ops
from isa.lang.tree import to_text
from sim.vita.functional import fast_path

UNITS = ("load", "compute", "store")
TRANSFERS = ("load", "store")
# the actions that run a two-level loop of micro-ops (the work ``uop_budget`` bounds)
MICRO_OP_ACTIONS = ("gemm", "reset", "alu", "generic")
# the tiles a micro-op operand may be, by memory space: (shape, dtype) as the buffers hold them
TILES = {"ACC": (("BATCH", "BLOCK_OUT"), "i32"), "INP": (("BATCH", "BLOCK_IN"), "i8"),
         "WGT": (("BLOCK_OUT", "BLOCK_IN"), "i8")}
# the fields the ALU fast path reads besides the loop's (its contract's semantics name them)
ALU_FIELDS = ("use_imm", "imm")


@dataclass(frozen=True)
class InsnPlan:
    """The machine's view of one instruction of the spec (see the module docstring).

    ``addresses``: where each tensor operand of a micro-op instruction lies (isa/micro_ops.py); ``missing``:
    the field whose absence keeps the machine from running it, where that is the reason.
    """

    name: str
    unit: str | None
    action: str | None
    arg: str | None
    reason: str = ""
    addresses: tuple[micro_ops.Address, ...] = ()
    missing: str | None = None

    @property
    def transfer(self) -> bool:
        return self.action in TRANSFERS


@functools.lru_cache(maxsize=32)
def plan_spec(spec: isa.ISA) -> Mapping[str, InsnPlan]:
    """The plan of every instruction of ``spec`` (computed once per spec)."""
    return MappingProxyType({name: _plan(spec, instr) for name, instr in spec.instructions.items()})


def _plan(spec: isa.ISA, instr: isa.Instruction) -> InsnPlan:
    action, arg, reason, missing = _action(instr, {f.name for f in instr.fields})
    unit = instr.timing.unit
    if unit not in UNITS:
        action, reason, missing = None, (f"its timing unit is {unit!r}; the VITA machine has the units "
                                         f"{', '.join(UNITS)}"), None
    elif instr.timing.asynchronous:   # a unit already runs apart from the others, ordered by its tokens
        action, reason, missing = None, ("its timing is 'async', which the VITA machine does not model: each "
                                         "of its units already runs its own queue, ordered by dependence "
                                         "tokens"), None
    elif instr.timing.engine is not None:
        action, reason, missing = None, ("its timing names an 'engine', which the VITA machine does not "
                                         "model: each of its units is one queue"), None
    clustered = [op.name for op in instr.operands if op.cluster is not None]
    if clustered and unit in UNITS:
        action, reason, missing = None, (f"operand '{clustered[0]}' names a cluster ('cluster'), and the "
                                         "VITA machine has no clusters"), None
    if action not in MICRO_OP_ACTIONS:
        return InsnPlan(instr.name, unit, action, arg, reason, (), missing)
    try:
        addresses = micro_ops.addresses(spec, instr)
    except micro_ops.MicroOpError as e:
        return InsnPlan(instr.name, unit, None, None, f"its micro-ops cannot be addressed: {e}", (), e.field)
    return InsnPlan(instr.name, unit, action, arg, reason, addresses)


def _action(instr: isa.Instruction, fields: set[str]) -> tuple[str | None, str | None, str, str | None]:
    """(action, argument, why not, the missing field that is why) of ``instr``: a fast path by contract, the
    generic executor, or none. The ALU fast path reads ``ALU_FIELDS`` as fields: where the semantics name a
    parameter instead, the generic executor runs it."""
    if instr.group == "finish":
        if instr.statements:
            return None, None, "a finish instruction has no semantics, but this one has some", None
        return "finish", None, "", None
    fast = fast_path(instr)
    if fast is not None and (fast[0] != "alu" or all(name in fields for name in ALU_FIELDS)):
        return fast[0], fast[1], "", None
    if not micro_ops.runs_micro_ops(instr):
        missing = [name for name in micro_ops.LOOP if name not in fields]
        why = ("its semantics match no fast path of the VITA machine, and it cannot run on the generic "
               f"executor: its format has no micro-op loop fields {', '.join(missing)}")
        return None, None, why, missing[0]
    problems = []
    for op in instr.operands:
        if op.kind != "tensor":
            problems.append(f"operand '{op.name}' is a {op.kind}, not a tile")
            continue
        tile = TILES.get(op.space)
        if tile is None:
            problems.append(f"operand '{op.name}' is in {op.space}, not in a tile buffer "
                            f"({', '.join(TILES)})")
        elif tuple(to_text(e) for e in op.shape) != tile[0] or op.dtype != tile[1]:
            problems.append(f"operand '{op.name}' is not an {op.space} tile {tile[1]}[{', '.join(tile[0])}]")
    if problems:
        return None, None, ("its semantics match no fast path of the VITA machine, and it cannot run on the "
                            "generic executor: " + "; ".join(problems)), None
    # a gemm-group instruction that sums over a reduce index is the GEMM core's work (GEMM_FIRST, a GEMM
    # with its epilogue): the machine counts its cycles as GEMM busy, as it does GEMM's
    sums = instr.group == "gemm" and any(iv.kind == "reduce" for iv in instr.typed_semantics().indices)
    return "generic", "gemm" if sums else None, "", None
