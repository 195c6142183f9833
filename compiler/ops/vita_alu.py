"""VITA's ALU stages, chosen by covering: which ALU instructions compute an element-wise tree of tiles.

A conv's or GEMM's epilogue (bias, shift, clip), an element-wise network operator (residual add, ReLU,
clip) and a user's operator are trees of operations over accumulator tiles and constants. Each becomes a
sequence of ALU stages, one ALU instruction each (``dst = op(dst, src or imm)``, or any tree the spec's
ALU semantics describe: a shift-and-clip, a multiply-add), chosen by ``compiler.passes.cover`` with the
fewest cycles by the spec's timing for a chunk of ``uops`` tiles. The probe of each candidate stage is
matched by ``tensorize_tiles`` (the pass that selects it later), so the cover only names instructions that
pass takes; the stage is marked with the instruction's name (``pragma_alu``).

VITA has no scalar code: an operation no ALU instruction computes raises ScheduleError naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import isa
from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ops.elementwise import cover_stages
from compiler.passes import cover as covering
from compiler.passes.tensorize_tiles import GROUPS, tile_insn
from isa.errors import ISAError


@dataclass(frozen=True)
class AluStages:
    """The stages of a cover (``tensors[k]`` computes ``cover.steps[k]`` with ``instructions[k]``), the
    tensor holding the tree's value, and the record of the selection (``--explain``)."""

    tensors: tuple[te.Tensor, ...]
    instructions: tuple[str, ...]
    selected: covering.Selected
    own_loads: tuple[ir.Buffer | None, ...] = ()   # per stage: the input it overwrites that others read

    @property
    def cover(self) -> covering.Cover:
        return self.selected.chosen

    @property
    def result(self) -> te.Tensor:
        return self.tensors[-1]


def alu_select(spec: isa.ISA, uops: int) -> covering.Select:
    """The cover's view of ``spec``'s ALU: its ``alu`` instructions, inputs = loaded tiles, and a stage's
    cycles = its instruction's latency plus cycles over ``uops`` micro-ops (one per tile of a chunk)."""
    instructions = tuple(i for i in spec.instructions.values()
                         if i.group == GROUPS[1] and not i.timing.asynchronous)
    batch, block = spec.params["BATCH"], spec.params["BLOCK_OUT"]

    def cycles(instr: isa.Instruction, node: ir.Expr, operands: Mapping[str, ir.Expr],
               values: Mapping[str, int]) -> int | str:
        insn = tile_insn(_probe(instr, node, operands, batch, block), spec, instr)
        if isinstance(insn, str):
            return insn
        while isinstance(insn, ir.For):   # a tile loop of extent 1 stays outside the instruction
            insn = insn.body
        fields = {f.name: f.value.value for f in insn.fields}
        try:
            _, latency, cyc = isa.timing_of(spec, spec.insn(instr.name, **fields, uop_bgn=0, uop_end=uops,
                                                            iter_out=1, iter_in=1))
        except ISAError as err:
            return str(err)
        return (latency or 0) + (cyc or 0)

    return covering.Select(instructions, spec.params, _is_load, cycles, recipe=(alu_select, (spec, uops)))


def _is_load(e: ir.Expr) -> bool:
    return isinstance(e, ir.Load)


def alu_cover(expr: ir.Expr, spec: isa.ISA, uops: int, where: str) -> covering.Cover:
    """The cheapest cover of ``expr`` (loads of tiles, constants) by ``spec``'s ALU instructions."""
    return alu_choose(expr, spec, uops, where).chosen


def alu_choose(expr: ir.Expr, spec: isa.ISA, uops: int, where: str) -> covering.Selected:
    """``alu_cover`` with the record of its search (``covering.choose``), the statement named ``where``."""
    try:
        return covering.choose(covering.strip_noop_casts(expr), alu_select(spec, uops), where)
    except covering.NoCover as err:
        raise ScheduleError(f"{where}: {err}: VITA's ALU has no instruction for it in spec "
                            f"{spec.name!r} (VITA has no scalar code)") from None


def alu_stages(expr: ir.Expr, axis: Sequence[ir.Var], shape: tuple[int, ...], spec: isa.ISA, uops: int,
               where: str) -> AluStages:
    """``expr`` (over loads indexed by ``axis``) as ALU stages of ``shape``, one per step of its cover."""
    selected = alu_choose(expr, spec, uops, where)
    own = _overwritten_inputs(selected.chosen, spec, where)
    return AluStages(cover_stages(selected.chosen, axis, shape), selected.chosen.instructions, selected, own)


def _overwritten_inputs(chosen: covering.Cover, spec: isa.ISA, where: str) -> tuple[ir.Buffer | None, ...]:
    """Per step, the input whose tile its instruction overwrites (VITA's ALU computes in place: ``dst =
    op(dst, ...)``) while a later step still reads it: that step needs a tile of its own (a second
    LOAD_ACC). A computed value in that position has no second copy (the ALU has no move): ScheduleError."""
    steps, own = chosen.steps, []
    for k, step in enumerate(steps):
        instr = spec.instructions[step.instruction]
        target = instr.statements[0].target.tensor
        value = step.operands.get(target) if covering.in_place(instr) else None
        read_later = {covering.key(x) for s in steps[k + 1:] for x in s.operands.values()}
        later = value is not None and covering.key(value) in read_later
        if later and not isinstance(value, ir.Load):
            raise ScheduleError(f"{where}: {step.instruction} overwrites the tile of '{value}', which a "
                                f"later instruction still reads; VITA's ALU computes in place and has no "
                                f"copy of a tile (compute the value once per use)")
        own.append(value.buffer if later else None)
    return tuple(own)


def clip_stages(value: te.Tensor, bounds: tuple[int, int], spec: isa.ISA, uops: int, where: str,
                shift: int = 0) -> AluStages:
    """``min(max(value >> shift, lo), hi)`` as ALU stages (the epilogue's end, a pool's clip)."""
    lo, hi = bounds
    axis = [ir.Var(f"i{d}") for d in range(len(value.shape))]
    x: ir.Expr = value[tuple(axis)]
    if shift:
        x = ir.FloorDiv(x, ir.const(1 << shift))
    return alu_stages(ir.Min(ir.Max(x, ir.const(lo)), ir.const(hi)), axis, value.shape, spec, uops, where)


def _probe(instr: isa.Instruction, node: ir.Expr, operands: Mapping[str, ir.Expr], batch: int,
           block: int) -> ir.Stmt:
    """One tile of the step: ``node`` with each operand read from a tile of its own (the instruction's
    destination's tile where the semantics read it), stored to the destination's tile."""
    b, o = ir.Var("b"), ir.Var("o")
    index = b * block + o
    target = instr.statements[0].target.tensor
    tiles = {name: ir.Buffer(name, (batch * block,), dtypes.int32, "acc") for name in (*operands, target)}
    value = covering.substitute_nodes(node, {covering.key(x): tiles[n][index] for n, x in operands.items()})
    return ir.For(b, ir.const(0), ir.const(batch),
                  ir.For(o, ir.const(0), ir.const(block), ir.Store(tiles[target], (index,), value)))
