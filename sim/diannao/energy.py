"""DianNao's area and energy (sim/core/energy.py prices what this module counts).

The card: per core, the tensor unit (TFU_MACS_PER_CYCLE MACs of 16-bit operands a cycle) and the vector
unit (VFU_BYTES_PER_CYCLE bytes a cycle), each with as many lanes of its widest dtype as its rate in bytes
fits, a scalar ALU, NMEM, WMEM and
NUM_REGS 32-bit registers; per cluster, SMEM; off chip, GMEM (DRAM). Each unit's datapath has the widest
dtype its instructions' semantics compute in (``datapath_dtypes``). Instruction memory, the DMA engines and
the interconnect are not counted (a stated gap).

A run's actions: every executed instruction's semantics (``instruction_activity``) times the number of
times it ran on all cores (``DiannaoResult.executed``): arithmetic, and each operand's bytes at its memory
(a memcpy's source and destination are the spaces its fields name).
"""

from __future__ import annotations

from collections.abc import Sequence

import isa
from isa.dtypes import dtype
from sim.core import energy
from sim.core.energy import Architecture, CostReport, Datapath, Memory
from sim.diannao.config import card_cores

#: the space the card's DMA reaches off chip (the machine's GMEM port)
OFF_CHIP = "GMEM"


def architecture(spec: isa.ISA) -> Architecture:
    """What a DianNao card of ``spec`` is made of."""
    p = spec.params
    cores = card_cores(spec)
    per_instance = {"NMEM": cores, "WMEM": cores, "SMEM": p["CLUSTERS"]}
    memories = [Memory(name, "sram", space.bytes, per_instance[name])
                for name, space in spec.spaces.items() if name in per_instance]
    memories += [Memory(OFF_CHIP, "dram", 0), Memory("registers", "registers", p["NUM_REGS"] * 4, cores)]
    datapaths = []
    for unit in ("tfu", "vfu", "scalar"):
        members = [i for i in spec.instructions.values() if i.timing.unit == unit]
        for op, dt in sorted(energy.datapath_dtypes(spec, members).items()):
            # the units' rates in bytes a cycle (the spec's timing: TFU_MACS_PER_CYCLE MACs of 2-byte
            # operands, wider ones at a proportionally lower rate; the VFU's VFU_BYTES_PER_CYCLE)
            rate = {"tfu": 2 * p["TFU_MACS_PER_CYCLE"], "vfu": p["VFU_BYTES_PER_CYCLE"]}
            lanes = rate[unit] // dtype(dt).bytes if unit in rate else 1
            datapaths.append(Datapath(unit, op, dt, lanes * cores))
    return Architecture(tuple(memories), tuple(datapaths))


def activity(program: isa.Program, executed: Sequence[int]) -> energy.Activity:
    """The actions of a launch of ``program`` whose instruction at each pc ran ``executed[pc]`` times in
    all (``DiannaoResult.executed``)."""
    out = energy.Activity()
    for insn, times in zip(program.insns, executed, strict=True):
        if times:
            out.add(energy.instruction_activity(program.isa, insn), times)
    return out


def costs(program: isa.Program, executed: Sequence[int], table: energy.EnergyTable) -> CostReport:
    """Energy of a launch of ``program`` and area of the card it ran on, priced by ``table``."""
    return energy.cost_report(activity(program, executed), architecture(program.isa), table)
