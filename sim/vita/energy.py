"""VITA's area and energy (sim/core/energy.py prices what this module counts).

The machine: the GEMM core (BATCH x BLOCK_IN x BLOCK_OUT multipliers and adders, of the widths the GEMM
group's semantics compute in), the tensor ALU (BATCH x BLOCK_OUT lanes of the ALU group's operations), the
five on-chip buffers (INP, WGT, ACC, UOP, OUT: SRAM of the spec's sizes) and DRAM. Fetch, the queues and
control logic are not counted (a stated gap: VTA's are small next to the buffers and the GEMM core).

A run's actions (``activity``): every instruction's semantics, its arithmetic and operand accesses
(``instruction_activity``), once per micro-op for GEMM and ALU instructions, with the micro-op's read from
the UOP buffer; each instruction's bytes fetched from DRAM.
"""

from __future__ import annotations

from collections import Counter

import isa
from sim.core import energy
from sim.core.energy import Architecture, CostReport, Datapath, Memory
from sim.vita.functional import tile_kinds, uop_count
from sim.vita.plan import MICRO_OP_ACTIONS, plan_spec

DRAM = "DRAM"


def architecture(spec: isa.ISA) -> Architecture:
    """What a VITA machine of ``spec`` is made of."""
    p = spec.params
    memories = tuple(Memory(name, "sram", kind.depth * kind.nbytes)
                     for name, kind in tile_kinds(spec).items())
    datapaths = []
    for group, lanes in (("gemm", p["BATCH"] * p["BLOCK_IN"] * p["BLOCK_OUT"]),
                         ("alu", p["BATCH"] * p["BLOCK_OUT"])):
        members = [i for i in spec.instructions.values() if i.group == group]
        datapaths += [Datapath(group, op, dt, lanes)
                      for op, dt in sorted(energy.datapath_dtypes(spec, members).items())]
    return Architecture((*memories, Memory(DRAM, "dram", 0)), tuple(datapaths))


def activity(program: isa.Program) -> energy.Activity:
    """The actions of one run of ``program``: each instruction's semantics once (``instruction_activity``:
    a load's DRAM read and buffer write, a store's OUT read and DRAM write), a micro-op instruction's once
    per micro-op with its micro-op's read from UOP, and every instruction's fetch from DRAM. The program is
    straight-line: each instruction runs once."""
    spec = program.isa
    plans = plan_spec(spec)
    uop_bytes = tile_kinds(spec)["UOP"].nbytes
    out = energy.Activity()
    for insn, times in Counter(program.insns).items():   # programs repeat instructions: each once, times n
        if plans[insn.name].action in MICRO_OP_ACTIONS:
            uops = uop_count(dict(insn.fields)) * times
            out.add(energy.instruction_activity(spec, insn), uops)
            out.reads["UOP"] += uops * uop_bytes
        else:
            out.add(energy.instruction_activity(spec, insn), times)
    out.reads[DRAM] += len(program.insns) * (spec.insn_bits or 0) // 8
    return out


def costs(program: isa.Program, table: energy.EnergyTable) -> CostReport:
    """Energy of one run of ``program`` and area of the machine it ran on, priced by ``table``."""
    return energy.cost_report(activity(program), architecture(program.isa), table)
