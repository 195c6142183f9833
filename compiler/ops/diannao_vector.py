"""DianNao's vector stages, chosen by covering: which vector instructions compute an element-wise tree.

An element-wise operator (``a * b + c``, ``max(a + b, 0)``, a user's tree of operations) is covered by the
spec's vector instructions (``compiler.passes.cover``), each step one NMEM tile of the tile's length: the
cover with the fewest cycles by each instruction's timing for that length. A step's probe is matched by
``tensorize`` (the pass that selects it later), so the cover only names instructions that pass takes. An
operation no vector instruction computes is a scalar step (the card's scalar unit), marked so that
``tensorize.unmatched`` reports the cover's reason (the operation, by name).
"""

from __future__ import annotations

from collections.abc import Mapping

import isa
from compiler.ir import nodes as ir
from compiler.passes import cover as covering
from compiler.passes.tensorize import NoMatch
from compiler.passes.tensorize import match as match_instruction
from isa.errors import ISAError

#: What a scalar step costs per element and operation: a load or two, the operation, a store and the loop
#: (the card's scalar unit issues one instruction per cycle); only used to rank covers that need one.
SCALAR_INSTRUCTIONS_PER_ELEMENT = 6


def vector_select(spec: isa.ISA, tile: int, constants: bool = False) -> covering.Select:
    """The cover's view of ``spec``'s vector unit: its vector instructions (not copies: every operand a
    tensor of an on-chip space), inputs = tiles staged in NMEM, and a step's cycles = its instruction's
    latency plus cycles for ``tile`` elements. With ``constants`` an operand may be a constant (a vector of
    it, filled once per core: a cycle each, so that an instruction with the constant built in, relu's
    ``max(x, 0)``, wins a tie). Asynchronous instructions are left out (nothing here waits for them)."""
    instructions = tuple(i for i in spec.instructions.values()
                         if i.operands and all(op.space for op in i.operands) and covering.element_wise(i)
                         and not i.timing.asynchronous)

    def cycles(instr: isa.Instruction, node: ir.Expr, operands: Mapping[str, ir.Expr],
               values: Mapping[str, int]) -> int | str:
        found = match_instruction(_probe(instr, node, operands, tile), spec, instr)
        if isinstance(found, NoMatch):
            return found.reason
        try:
            _, latency, cyc = isa.timing_of(spec, spec.insn(instr.name, **found.fields))
        except ISAError as err:
            return str(err)
        filled = sum(isinstance(x, ir.IntImm | ir.FloatImm) for x in operands.values())
        return (latency or 0) + (cyc or 0) + filled

    def scalar(node: ir.Expr) -> int:
        return tile * SCALAR_INSTRUCTIONS_PER_ELEMENT

    return covering.Select(instructions, spec.params, _is_load, cycles, scalar, constants=constants,
                           recipe=(vector_select, (spec, tile, constants)))


def _is_load(e: ir.Expr) -> bool:
    return isinstance(e, ir.Load)


def vector_cover(expr: ir.Expr, spec: isa.ISA, tile: int, constants: bool = False) -> covering.Cover:
    """The cheapest cover of ``expr`` (loads of tiles, constants) by ``spec``'s vector instructions, with
    scalar steps where no instruction computes an operation (``constants``: see ``vector_select``)."""
    return covering.cover(expr, vector_select(spec, tile, constants))


def constants_of(cover: covering.Cover) -> list[ir.Expr]:
    """The constants the cover's instructions read as operands (each a vector to fill), in order."""
    found = [x for step in cover.steps for x in step.operands.values()
             if isinstance(x, ir.IntImm | ir.FloatImm)]
    return list({covering.key(x): x for x in found}.values())


def vector_choose(expr: ir.Expr, spec: isa.ISA, tile: int, where: str, constants: bool = False
                  ) -> covering.Selected:
    """``vector_cover`` with the record of its search (``covering.choose``), the statement named
    ``where``."""
    return covering.choose(expr, vector_select(spec, tile, constants), where)


def _probe(instr: isa.Instruction, node: ir.Expr, operands: Mapping[str, ir.Expr], tile: int) -> ir.Stmt:
    """One tile of the step: ``node`` with each operand read from an NMEM tile of its own (the
    destination's where the semantics read it), stored to the destination's tile."""
    i = ir.Var("i")
    target = instr.statements[0].target.tensor
    dtypes_of = {name: x.dtype for name, x in operands.items()}   # a constant operand: a tile of its type
    dtypes_of.setdefault(target, node.dtype)
    tiles = {name: ir.Buffer(name, (tile,), dt, "nmem") for name, dt in dtypes_of.items()}
    value = covering.substitute_nodes(node, {covering.key(x): tiles[n][i] for n, x in operands.items()})
    return ir.For(i, ir.const(0), ir.const(tile), ir.Store(tiles[target], (i,), value))
