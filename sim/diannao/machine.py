"""Timing simulation of an SPMD kernel on a DianNao-style card (simpy), with functional execution.

    card = Card("default")
    x = card.to_gmem(np.arange(4096, dtype=np.float32))
    result = card.launch(program, cores=16)          # DiannaoResult
    y = card.from_gmem(x)

Every launched core runs the same program from pc 0 with its own registers and ids (``rdid``), in order, one
instruction at a time. An instruction occupies its core for ``latency + cycles - 1`` cycles of its spec's
timing (the pipeline fills in ``latency`` cycles, then takes one more per extra cycle of work): scalar ops
take their latency, a vector op ``VFU_LATENCY + ceil(bytes / VFU_BYTES_PER_CYCLE) - 1``, a copy its memory
level's latency plus its rows at the DMA rate.

What runs: each instruction is decoded once, by what its spec says (sim/diannao/decode.py): a tensor
instruction runs on its numpy fast path or the spec's generic executor (sim/diannao/functional.py), a scalar
one on the scalar unit's fast path for its contract or, for any other scalar instruction the spec describes,
the generic executor too (sim/diannao/scalar.py).

Scalar loops: a run of core-local scalar code (register ops, accesses to the core's own memories, and the
branch that ends it) runs as one generated Python function (sim/diannao/blocks.py), the same arithmetic the
interpreter does, its cycles, budget and counts added once per run: the same cycles, counts and errors.

Time: each core keeps a local clock and runs its core-local work (scalar code, vector and tensor ops, copies
inside the core) without touching simpy. It synchronizes with simulated time only before it touches
something shared: a copy or scalar access to GMEM or SMEM, a barrier, halt. So shared accesses happen in
global time order (cores in id order on ties), which makes the functional result and the timing
deterministic, and the cost of simulating grows with instructions, not cycles.

Shared bandwidth: GMEM has one port for the whole card and each cluster's SMEM one port (an operand whose spec
names a ``cluster``, ``memcpyc``'s, lies in that cluster's SMEM and holds its port), serving requests
in the order they come (sim/core/ports.py: a request that fits in a gap before a transfer promised for later
is served in it). A transfer holds every port it uses for ``ceil(bytes / port bytes per cycle)`` cycles; it
starts when all are free (one that holds one port may take its cycles in the gaps between promised
transfers), and waiting for them counts as stalled. Its data arrive after the
latency of the slowest level and its own transfer time (the per-core DMA rate of the spec, or the port's,
whichever is slower).

Asynchronous instructions (timing ``async``, e.g. ``memcpyr_async``): the core spends one cycle issuing and
goes on; the instruction's unit (its engine: the timing's ``engine``, the DMA unit's IO engine for GMEM copies
and its move engine for on-chip ones) runs its work one after another, each from when the
unit is free, taking what the synchronous instruction would (its ports are promised when it is issued, in
global time order, from the cycle the unit starts it on). A synchronous instruction of the same unit (and
engine) starts after that engine's queued work. ``wait`` (group ``wait``) advances the core to the end of all
its asynchronous work (stalled). The data move when the instruction is issued; that equals moving them at
the end because, until its ``wait``, the core must not read or write an outstanding instruction's written
operands nor write what it reads, and must not halt or run a scalar access the simulator cannot check; work
outstanding at a barrier binds every core so until it ends (``HazardError``, naming both pcs; sim/diannao/
hazards.py): each such program is an error, whatever the timing.

Errors (sim/diannao/errors.py) name the core, pc, instruction and rule: a broken spec constraint on a tensor
instruction (checked on its first execution), a scalar access out of bounds, running past the end, more
instructions than the budget, a hazard on asynchronous work, and barriers that can never complete (found the
moment no event is left while some core still waits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

import isa
from isa.asm import format_insn
from sim.core.config import spec_difference
from sim.core.errors import deadlock_message
from sim.core.ports import Ports
from sim.diannao.blocks import compile_block
from sim.diannao.config import DiannaoConfig, load_config
from sim.diannao.decode import Barrier, Decoder, GenericScalar, ScalarAccess, TensorOp
from sim.diannao.errors import (
    CONSTRAINT_ERRORS,
    BarrierDeadlockError,
    ConstraintError,
    ControlError,
    DiannaoError,
    HazardError,
    LaunchError,
    OutOfBoundsError,
    RunawayLoopError,
    barrier_waits,
)
from sim.diannao.functional import CardMemory, execute_generic
from sim.diannao.hazards import RULE, Pending, conflict, describe, spans
from sim.diannao.scalar import (
    ADDI,
    BARRIER,
    BGE,
    BLT,
    BNE,
    FADD,
    FCVT,
    FLOAD,
    FSTORE,
    JMP,
    RDID,
    SCALAR,
    STORE,
    TENSOR,
    WAIT,
    access,
    alu,
    execute_scalar,
    f32,
    fpu,
)


# ----------------------------------------------------------------------------------------------- results
@dataclass
class CoreStats:
    """What one core did: cycles executing (busy), waiting for a shared port, a barrier or its asynchronous
    work (stalled), and after its halt until the whole kernel ends (idle); instructions executed, by kind;
    unit busy cycles, of which ``background`` ran asynchronously (not in the core's busy cycles)."""

    core: int
    cluster: int
    busy: int = 0
    stalled: int = 0
    idle: int = 0
    halted_at: int = 0
    instructions: int = 0
    tensor_instructions: int = 0
    scalar_instructions: int = 0
    unit_cycles: dict[str, int] = field(default_factory=dict)  # "vfu", "tfu", "dma", "scalar", "ctrl"
    background: dict[str, int] = field(default_factory=dict)   # of those, run asynchronously, by unit


@dataclass
class DiannaoResult:
    """What a launch measured; the same program, data and launch always give an equal result."""

    cycles: int
    cores: list[CoreStats]
    instructions: dict[str, int]          # executed instructions by name, over all cores
    tensor_instructions: int              # memcpy, vzero, vector, unary, conv and matmul instructions
    scalar_instructions: int              # scalar ALU, scalar memory, branches, barriers, halt
    bytes_moved: dict[str, int]           # "GMEM->NMEM": bytes; scalar accesses are "GMEM->REG", "REG->NMEM"
    # per pc, how many times it executed, summed over the launched cores (keyword-only: constructors that
    # leave it out keep working)
    executed: tuple[int, ...] = field(default=(), repr=False, kw_only=True)
    clock_mhz: float
    # (track, what, first cycle, end cycle, "instruction" | "stall" | "scalar"), in time order
    trace: list[tuple[str, str, int, int, str]] = field(default_factory=list, repr=False)

    def utilization(self, unit: str) -> float:
        """Mean over the launched cores of the fraction of all cycles ``unit`` ("vfu", "tfu", "dma") was
        busy."""
        if not self.cycles or not self.cores:
            return 0.0
        return sum(c.unit_cycles.get(unit, 0) for c in self.cores) / (self.cycles * len(self.cores))

    @property
    def microseconds(self) -> float:
        return self.cycles / self.clock_mhz


# ----------------------------------------------------------------------------------------------- machine
_UNSEEN = object()   # a pc whose block has not been looked for yet


class _Barrier:
    def __init__(self, env: simpy.Environment, members: tuple[int, ...]) -> None:
        self.members = members
        self.arrived: dict[int, int] = {}  # core -> pc
        self.event = env.event()


class _Machine:
    def __init__(self, program: isa.Program, memory: CardMemory, config: DiannaoConfig,
                 cores: Sequence[int], args: Sequence[int], trace: bool, fast: bool) -> None:
        self.program = program
        self.spec = program.isa
        self.config = config
        self.memory = memory
        self.launched = tuple(cores)
        self.args = tuple(args)
        self.tracing = trace
        p = self.spec.params
        self.cpc = p["CORES_PER_CLUSTER"]
        self.num_regs = p["NUM_REGS"]
        self.spaces = memory.names
        self.plans = Decoder(program, config, self.spaces, fast).plans(program)
        self.ops = [plan.op for plan in self.plans]
        self.costs = [plan.cycles for plan in self.plans]
        self.checked = [False] * len(self.plans)
        self.env = simpy.Environment()
        self.hits = {c: [0] * len(self.plans) for c in self.launched}
        # the compiled block that starts at each pc (None: the interpreter runs it), and each core's runs of
        # each block, added to its hits at the end
        self.blocks: list = [_UNSEEN] * len(self.plans)
        self.runs = {c: [0] * len(self.plans) for c in self.launched}
        self.stalled = dict.fromkeys(self.launched, 0)
        self.halted: dict[int, tuple[int, int]] = {}  # core -> (cycle, pc)
        self.ports = Ports(["gmem", *(f"smem{k}" for k in range(p["CLUSTERS"]))])
        clusters = sorted({c // self.cpc for c in self.launched})
        self.core_dim = len([c for c in self.launched if c // self.cpc == clusters[0]])
        self.cluster_dim = len(clusters)
        self.barriers: dict[tuple, _Barrier] = {}
        self.waiting: dict[int, tuple[tuple, int]] = {}  # core -> (barrier key, pc)
        self.trace: list[tuple[str, str, int, int, str]] = []
        self.last_event = dict.fromkeys(self.launched, 0)
        # per core: the cycle each unit with asynchronous work is free again, and the work not waited for
        self.units: dict[int, dict[str, int]] = {c: {} for c in self.launched}
        self.pending: dict[int, list[Pending]] = {c: [] for c in self.launched}
        # the work cores left outstanding at a barrier, until it ends (sim/diannao/hazards.py)
        self.released: list[Pending] = []
        self.homes = {c: {code: memory.home(code, c) for code in self.spaces} for c in self.launched}

    # ------------------------------------------------------------------ helpers
    def where(self, core: int, pc: int) -> str:
        insn = self.program.insns[pc] if pc < len(self.program.insns) else None
        text = f" ({format_insn(self.spec, insn)})" if insn is not None else ""
        return f"core {core} (cluster {core // self.cpc}, core {core % self.cpc}), pc {pc}{text}"

    def error(self, cls: type[DiannaoError], core: int, pc: int, message: str, rule: str | None = None):
        insn = self.program.insns[pc] if pc < len(self.program.insns) else None
        return cls(f"{self.where(core, pc)}: {message}", core=core, pc=pc,
                   insn=format_insn(self.spec, insn) if insn is not None else None, rule=rule)

    def runaway(self, core: int, pc: int) -> RunawayLoopError:
        """The error of a core that executed more instructions than the config's budget."""
        return self.error(RunawayLoopError, core, pc, "executed more than the instruction budget of "
                          f"{self.config.instruction_budget} instructions (a runaway loop?); raise "
                          "instruction_budget in the config if the kernel is meant to run longer")

    def out_of_bounds(self, core: int, pc: int, op: ScalarAccess, R: list[int], size: int):
        """The error of a scalar access outside its memory of ``size`` bytes."""
        addr, nbytes = R[op.base] + op.offset, op.element.size
        where = f"R[{op.base}] = {R[op.base]} + {op.offset}"
        return self.error(OutOfBoundsError, core, pc, f"address {addr} ({where}) is outside "
                          f"{self.spaces[op.space]}: {nbytes} bytes at {addr} must lie in [0, {size})",
                          "0 <= address <= capacity - size")

    def check(self, core: int, pc: int) -> None:
        """The spec's constraints of the tensor instruction at ``pc`` (once per pc: they depend only on its
        fields)."""
        violations = isa.check_constraints(self.spec, self.program.insns[pc], which="static")
        if violations:
            self.raise_violation(core, pc, violations)
        self.checked[pc] = True

    def raise_violation(self, core: int, pc: int, violations: list[isa.Violation]) -> None:
        """Raise the error of the first broken rule (the class of its constraint kind)."""
        v = violations[0]
        more = f" (and {len(violations) - 1} more rule(s) broken)" if len(violations) > 1 else ""
        raise self.error(CONSTRAINT_ERRORS.get(v.kind, ConstraintError), core, pc, f"{v.detail}{more}",
                         v.rule)

    def reserve(self, core: int, ports: tuple[tuple[str, int], ...], now: int,
                fields: dict[str, int] | None = None) -> int:
        """Take every port of ``ports`` (the card's GMEM port, this core's cluster's SMEM port, the SMEM port
        of the cluster an operand names: "smem:<operand>", its cluster in ``fields``) at the first cycle from
        ``now`` on when all are free (sim/core/ports.py); return it."""
        held = [(name if name == "gmem" else f"smem{core // self.cpc}" if name == "smem" else
                 f"smem{fields[name[5:] + '.cluster']}", cycles) for name, cycles in ports]
        return self.ports.reserve(held, now, self.env.now, split=True)

    def scalar_run(self, core: int, until: int) -> None:
        if until > self.last_event[core]:
            self.trace.append((f"core {core}", "scalar code", self.last_event[core], until, "scalar"))

    # ------------------------------------------------------------------ one core
    def registers(self, core: int) -> tuple[list[int], list[float], tuple[int, ...]]:
        """Core ``core``'s registers at launch: R holding the kernel arguments, F zeros, and its ids (core id
        in its cluster, cluster id, cores per cluster, clusters of the launch)."""
        R = [0] * self.num_regs
        R[:len(self.args)] = self.args
        F = [0.0] * self.num_regs
        return R, F, (core % self.cpc, core // self.cpc, self.core_dim, self.cluster_dim)

    def core(self, core: int):
        """Run the kernel on ``core``: an interpreter that runs core-local scalar code inline and calls the
        steps below for the rest. ``t`` is the core's clock, at the end of the instruction run."""
        ops, costs, hits, blocks, runs = self.ops, self.costs, self.hits[core], self.blocks, self.runs[core]
        n, pending = len(ops), self.pending[core]
        R, F, ids = self.registers(core)
        mems = {code: self.memory.space(code, core) for code in self.spaces}
        left = self.config.instruction_budget
        failures = self.failures(core, R, mems)
        t = pc = 0
        while True:
            if pc >= n:
                raise self.error(ControlError, core, pc, f"ran past the last instruction ({n - 1}) without "
                                 "halt; every path of a kernel must end with halt")
            block = blocks[pc]
            if block is _UNSEEN:
                block = blocks[pc] = compile_block(ops, costs, pc)
            if block is not None and not (pending and block.memory):   # core-local scalar code, compiled
                runs[pc] += 1
                left -= block.length
                t += block.cost
                pc = block.run(R, F, mems, ids, left, *failures)
                continue
            op = ops[pc]
            k = op.kind
            hits[pc] += 1
            left -= 1
            t += costs[pc]
            if k == ADDI:
                R[op.rd] = ((R[op.rs1] + op.imm + 0x80000000) & 0xFFFFFFFF) - 0x80000000
                pc += 1
            elif k <= JMP:
                if k == BLT:
                    taken = R[op.rs1] < R[op.rs2]
                elif k == BNE:
                    taken = R[op.rs1] != R[op.rs2]
                elif k == BGE:
                    taken = R[op.rs1] >= R[op.rs2]
                else:
                    taken = k == JMP or R[op.rs1] == R[op.rs2]
                if taken:
                    pc = op.target
                    if left < 0:
                        raise self.runaway(core, pc)
                else:
                    pc += 1
            elif k <= FSTORE:
                mem = mems[op.space]
                addr = R[op.base] + op.offset
                if addr < 0 or addr + op.element.size > mem.size:
                    raise self.out_of_bounds(core, pc, op, R, mem.size)
                if pending:
                    self.access_hazards(core, pc, op, addr, pending)
                if op.shared:
                    t = yield from self.take_ports(core, pc, t, (op, addr))
                if k == FLOAD:   # the commonest access and float op inline; the others in scalar.py
                    F[op.reg] = op.element.unpack_from(mem, addr)[0]
                else:
                    access(k, op, mem, addr, R, F)
                pc += 1
            elif k <= FCVT:
                F[op.rd] = f32(F[op.rs1] + F[op.rs2]) if k == FADD else fpu(k, op, F, R)
                pc += 1
            elif k <= RDID:
                R[op.rd] = alu(k, op, R, ids)
                pc += 1
            elif k == TENSOR:
                t = yield from self.tensor(core, pc, op, t, R)
                pc += 1
            elif k == SCALAR:
                if op.shared:
                    t = yield from self.take_ports(core, pc, t)
                step = self.generic(core, pc, op, R, F, ids)
                if step != pc + 1 and left < 0:
                    raise self.runaway(core, step)
                pc = step
            else:  # BARRIER, WAIT, HALT
                t = yield from self.control(core, pc, k, op, t)
                if t is None:   # halted
                    return
                pc += 1

    def control(self, core: int, pc: int, kind: int, op, t: int):
        """A barrier, wait or halt at ``pc`` (cost included in ``t``); return the cycle the core goes on
        (None after a halt). A halt with asynchronous work outstanding is a hazard; a barrier releases it to
        every core's checks (``release``)."""
        if kind == WAIT:
            return self.wait(core, pc, t)
        if kind == BARRIER:
            return (yield from self.barrier(core, pc, op, t))
        if self.pending[core]:
            raise self.outstanding(core, pc, "halts")
        yield from self.halt(core, pc, t)
        return None

    def access_hazards(self, core: int, pc: int, op: ScalarAccess, addr: int, pending: list[Pending]) -> None:
        """Check the scalar load or store at ``pc`` of ``addr`` against the asynchronous work ``pending``."""
        span = ((self.homes[core][op.space], addr, addr + op.element.size),)
        written = op.kind in (STORE, FSTORE)
        self.check_hazards(core, pc, pending, () if written else span, span if written else ())

    def release(self, core: int, now: int) -> None:
        """The work ``core`` has outstanding at a barrier at ``now`` becomes every core's concern until it
        ends (sim/diannao/hazards.py)."""
        self.released = [p for p in self.released if p.core != core and p.end > now] + \
            [p for p in self.pending[core] if p.end > now]

    def others(self, core: int, start: int) -> list[Pending]:
        """The work other cores left outstanding at a barrier that has not ended by ``start``."""
        self.released = [p for p in self.released if p.end > self.env.now]
        return [p for p in self.released if p.core != core and p.end > start]

    def failures(self, core: int, R: list[int], mems: dict) -> tuple:
        """What a compiled block calls to fail on ``core``: out of bounds at a pc, and out of budget at a
        branch's target (both raise the interpreter's error)."""
        def out_of_bounds(at: int):
            raise self.out_of_bounds(core, at, self.ops[at], R, mems[self.ops[at].space].size)

        def runaway(at: int):
            raise self.runaway(core, at)
        return out_of_bounds, runaway

    def take_ports(self, core: int, pc: int, t: int, access: tuple[ScalarAccess, int] | None = None):
        """Start the shared access at ``pc`` in global time order: wait until the core's clock (``t`` less the
        instruction's cost), then for every port it holds; return the cycle it ends (its wait counts as
        stalled). A scalar ``access`` (its op and address) is checked against work released at barriers."""
        cost = self.costs[pc]
        t -= cost
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)
        start = self.reserve(core, self.plans[pc].ports, t)
        if access is not None and self.released:
            self.access_hazards(core, pc, *access, self.others(core, start))
        if self.tracing and start > t:
            self.scalar_run(core, t)
            self.trace.append((f"core {core}", "wait for the memory port", t, start, "stall"))
            self.last_event[core] = start
        self.stalled[core] += start - t
        return start + cost

    def generic(self, core: int, pc: int, op: GenericScalar, R: list[int], F: list[float],
                ids: tuple[int, ...]) -> int:
        """Run the scalar instruction at ``pc`` through the spec's semantics; return the next pc."""
        if op.memory and (self.pending[core] or (self.released and self.others(core, self.env.now))):
            raise self.outstanding(core, pc, "runs a scalar instruction with memory operands the simulator "
                                   "does not check against them")
        try:
            return execute_scalar(self.spec, op.insn, op.files, self.memory if op.memory else None, core, pc,
                                  R, F, ids)
        except (IndexError, ValueError, isa.ExecError) as e:
            raise self.error(OutOfBoundsError if isinstance(e, IndexError) else DiannaoError, core, pc,
                             str(e)) from None

    def tensor(self, core: int, pc: int, op: TensorOp, t: int, R: list[int]):
        """Run the tensor instruction at ``pc``, whose cost ``t`` includes: check its rules (once) and its
        operands against the core's outstanding asynchronous work, wait for its unit's queued work and the
        shared ports it holds, run it; return the cycle it ends. An asynchronous one is issued instead."""
        t -= self.costs[pc]
        if not self.checked[pc]:
            self.check(core, pc)
        fields = self.resolve(core, pc, op, R) if op.dynamic else op.fields
        pending = self.pending[core]
        if pending:
            self.check_hazards(core, pc, pending, *spans(op, fields, self.homes[core]))
        plan = self.plans[pc]
        if plan.background:
            return (yield from self.issue(core, pc, op, fields, R, t))
        ready = t
        units = self.units[core]
        if units and units.get(plan.queue, 0) > t:   # behind its engine's asynchronous work
            ready = units[plan.queue]
        start = (yield from self.when_ports(core, plan, t, ready, fields)) if op.shared else ready
        if self.released and op.shared:
            self.check_hazards(core, pc, self.others(core, start), *spans(op, fields, self.homes[core]))
        self.run_tensor(core, pc, op, fields, R)
        self.stalled[core] += start - t
        end = start + self.costs[pc]
        if self.tracing:
            self.trace_tensor(core, pc, t, start, end)
        return end

    def when_ports(self, core: int, plan, t: int, ready: int, fields: dict[str, int] | None = None):
        """The cycle a transfer asked for at the core's cycle ``t`` starts: from ``ready`` on, when its shared
        ports are free (asked in global time order: the core waits for simulated time to reach ``t``)."""
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)
        return self.reserve(core, plan.ports, ready, fields)

    def issue(self, core: int, pc: int, op: TensorOp, fields: dict[str, int], R: list[int], t: int):
        """Issue the asynchronous instruction at ``pc`` at the core's cycle ``t``: its unit starts it when
        free (and its ports are), its data move now, and it is outstanding until a wait; return the cycle
        the core goes on."""
        plan, units = self.plans[pc], self.units[core]
        ready = max(t, units.get(plan.queue, 0))
        start = (yield from self.when_ports(core, plan, t, ready, fields)) if op.shared else ready
        reads, writes = spans(op, fields, self.homes[core])
        if self.released and op.shared:
            self.check_hazards(core, pc, self.others(core, start), reads, writes)
        self.run_tensor(core, pc, op, fields, R)
        units[plan.queue] = end = start + plan.background
        self.pending[core].append(Pending(pc, reads, writes, core, end))
        if self.tracing:
            self.scalar_run(core, t)
            what = f"{pc}: {format_insn(self.spec, self.program.insns[pc])}"
            self.trace.append((f"core {core} {plan.queue.upper()}", what, start, end, "instruction"))
            self.trace.append((f"core {core}", what, t, t + plan.cycles, "instruction"))
            self.last_event[core] = t + plan.cycles
        return t + plan.cycles

    def wait(self, core: int, pc: int, t: int) -> int:
        """The ``wait`` at ``pc`` (cost included in ``t``): the core's asynchronous work is done at the
        cycle its units are free; return the cycle the core goes on (the waiting counts as stalled)."""
        cost = self.costs[pc]
        t -= cost
        units = self.units[core]
        done = max(units.values(), default=t)
        units.clear()
        self.pending[core].clear()
        if done > t:
            self.stalled[core] += done - t
            if self.tracing:
                self.scalar_run(core, t)
                self.trace.append((f"core {core}", "wait for the core's asynchronous work", t, done, "stall"))
                self.last_event[core] = done
            t = done
        if self.tracing:
            what = f"{pc}: {format_insn(self.spec, self.program.insns[pc])}"
            self.trace.append((f"core {core}", what, t, t + cost, "instruction"))
            self.last_event[core] = t + cost
        return t + cost

    def check_hazards(self, core: int, pc: int, pending: list[Pending], reads, writes) -> None:
        """Raise the HazardError of the first of ``reads`` and ``writes`` (byte spans of the instruction at
        ``pc``) that the core's outstanding asynchronous work forbids (sim/diannao/hazards.py)."""
        found = conflict(pending, reads, writes)
        if found is not None:
            other = format_insn(self.spec, self.program.insns[found.pending.pc])
            raise self.error(HazardError, core, pc, *describe(found, core, self.spaces, other))

    def outstanding(self, core: int, pc: int, what: str) -> HazardError:
        """The error of a core that ``what`` (halts, runs an unchecked scalar access) with asynchronous
        work not waited for."""
        pcs = ", ".join(str(p.pc) for p in self.pending[core])
        return self.error(HazardError, core, pc, f"{what} with asynchronous work outstanding (issued at pc "
                          f"{pcs}): wait for it first", RULE)

    def resolve(self, core: int, pc: int, op: TensorOp, R: list[int]) -> dict[str, int]:
        """The fields of a tensor instruction whose operand addresses read registers, each such operand's
        name mapped to its address now; checks the rules that read registers."""
        tensors = {"R": R}   # the registers as they are: ints in int32's range (a list read by index)
        for rule in op.rules:
            try:
                ok = rule(tensors)
            except isa.ExecError:
                ok = False
            if not ok:  # the slow path, for the message
                broken = isa.check_constraints(self.spec, self.program.insns[pc], tensors, which="dynamic")
                self.raise_violation(core, pc, broken)
        fields = dict(op.fields)
        for name, address in op.addresses:
            fields[name] = int(address(tensors))
        for name, cluster in op.clusters:   # before its ports are taken: a cluster outside the card has none
            if not 0 <= (which := int(cluster(tensors))) < len(self.memory.smem):
                raise self.error(OutOfBoundsError, core, pc, f"operand '{name}' is in cluster {which}, "
                                 f"but the card has clusters 0 to {len(self.memory.smem) - 1}")
            fields[f"{name}.cluster"] = which
        return fields

    def run_tensor(self, core: int, pc: int, op: TensorOp, fields: dict[str, int], R: list[int]) -> None:
        """Run the tensor instruction at ``pc`` on ``fields``: its fast path, or the spec's semantics."""
        try:
            if op.fast is not None:
                op.fast(self.memory, core, fields, op.dtype)
            else:
                execute_generic(self.spec, self.program.insns[pc], self.memory, core,
                                {"R": np.array(R, np.int32)})
        except (IndexError, ValueError, isa.ExecError) as e:
            raise self.error(OutOfBoundsError if isinstance(e, IndexError) else DiannaoError, core, pc,
                             str(e)) from None

    def trace_tensor(self, core: int, pc: int, t: int, start: int, end: int) -> None:
        track = f"core {core}"
        self.scalar_run(core, t)
        if start > t:
            self.trace.append((track, "wait for the memory port", t, start, "stall"))
        what = f"{pc}: {format_insn(self.spec, self.program.insns[pc])}"
        if self.plans[pc].unit == "dma":   # its engine's track
            self.trace.append((f"core {core} {self.plans[pc].queue.upper()}", what, start, end,
                               "instruction"))
        self.trace.append((track, what, start, end, "instruction"))
        self.last_event[core] = end

    def barrier(self, core: int, pc: int, op: Barrier, t: int):
        """Wait at the barrier at ``pc`` from the core's clock (``t`` less its cost) until every core of its
        scope arrived; return the cycle it releases, its cost after the last arrival (waiting is stalled)."""
        t -= self.costs[pc]
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)
        if self.tracing:
            self.scalar_run(core, t)
        if self.pending[core]:
            self.release(core, t)
        last_arrival, release = yield from self.arrive(core, pc, op.scope, t)
        self.stalled[core] += last_arrival - t
        if self.tracing:
            track = f"core {core}"
            if last_arrival > t:
                self.trace.append((track, "wait for the other cores at the barrier", t, last_arrival,
                                   "stall"))
            what = f"{pc}: {format_insn(self.spec, self.program.insns[pc])}"
            self.trace.append((track, what, last_arrival, release, "instruction"))
            self.last_event[core] = release
        return release

    def arrive(self, core: int, pc: int, scope: int, now: int):
        """Arrive at the barrier of ``scope`` (0 = this cluster, 1 = every launched core) at ``now``; return
        (the last core's arrival, the cycle it releases: the cost of the last core's barrier later)."""
        cluster_scope = self.spec.enums["scope"].name_of(scope) == "CLUSTER"
        key = ("cluster", core // self.cpc) if cluster_scope else ("all",)
        b = self.barriers.get(key)
        if b is None:
            members = tuple(c for c in self.launched if not cluster_scope or c // self.cpc == key[1])
            b = self.barriers[key] = _Barrier(self.env, members)
        b.arrived[core] = pc
        if len(b.arrived) == len(b.members):
            del self.barriers[key]
            times = (now, now + self.costs[pc])
            b.event.succeed(times)
            return times
        self.waiting[core] = (key, pc)
        times = yield b.event
        del self.waiting[core]
        return times

    def halt(self, core: int, pc: int, t: int):
        """End the kernel on ``core`` at its clock ``t`` (in global time, where the kernel's cycles are)."""
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)
        if self.tracing:
            self.scalar_run(core, t)
        self.halted[core] = (t, pc)

    # ------------------------------------------------------------------ running
    def run(self) -> DiannaoResult:
        for c in self.launched:
            self.env.process(self.core(c))
        try:
            with np.errstate(all="ignore"):  # integer wrap-around and float overflow are the semantics
                self.env.run()
        except DiannaoError as e:
            # simpy re-raises a process's exception as a copy built from its args: take back the original
            original = e.__cause__ if isinstance(e.__cause__, DiannaoError) else e
            raise original.with_traceback(None) from None
        if len(self.halted) < len(self.launched):
            raise self.deadlock()
        return self.result()

    def deadlock(self) -> BarrierDeadlockError:
        parts = barrier_waits(self.waiting, {key: (b.members, b.arrived) for key, b in self.barriers.items()},
                              self.halted)
        first = min(self.waiting)
        error = BarrierDeadlockError(deadlock_message(self.env.now, parts, "barrier deadlock"),
                                     core=first, pc=self.waiting[first][1],
                                     insn=format_insn(self.spec, self.program.insns[self.waiting[first][1]]),
                                     rule="every core of a barrier's scope must arrive")
        error.cycle, error.waiting = self.env.now, parts
        return error

    def result(self) -> DiannaoResult:
        for c in self.launched:   # each run of a block executed each of its instructions once
            hits = self.hits[c]
            for start, count in enumerate(self.runs[c]):
                if count:
                    for pc in range(start, start + self.blocks[start].length):
                        hits[pc] += count
        total = max(cycle for cycle, _ in self.halted.values()) if self.halted else 0
        names = [insn.name for insn in self.program.insns]
        counts: dict[str, int] = {}
        moved: dict[str, int] = {}
        stats = []
        for c in self.launched:
            hits = self.hits[c]
            s = CoreStats(c, c // self.cpc)
            s.halted_at = self.halted[c][0]
            s.stalled = self.stalled[c]
            s.busy = s.halted_at - s.stalled
            s.idle = total - s.halted_at
            for pc, h in enumerate(hits):
                if not h:
                    continue
                plan = self.plans[pc]
                counts[names[pc]] = counts.get(names[pc], 0) + h
                s.instructions += h
                if plan.tensor:
                    s.tensor_instructions += h
                else:
                    s.scalar_instructions += h
                work = plan.background or (plan.cycles if plan.unit == "dma" else plan.work)
                s.unit_cycles[plan.unit] = s.unit_cycles.get(plan.unit, 0) + h * work
                if plan.background:
                    s.background[plan.unit] = s.background.get(plan.unit, 0) + h * plan.background
                for key, nbytes in plan.moves:
                    moved[key] = moved.get(key, 0) + h * nbytes
            stats.append(s)
        trace = sorted(self.trace, key=lambda e: (e[2], e[0], e[3])) if self.tracing else []
        return DiannaoResult(
            cycles=total, cores=stats, instructions=dict(sorted(counts.items())),
            tensor_instructions=sum(s.tensor_instructions for s in stats),
            scalar_instructions=sum(s.scalar_instructions for s in stats),
            bytes_moved=dict(sorted(moved.items())), clock_mhz=self.config.clock_mhz, trace=trace,
            executed=tuple(map(sum, zip(*(self.hits[c] for c in self.launched), strict=True))))


# ----------------------------------------------------------------------------------------------- host side
@dataclass(frozen=True, slots=True)
class Buffer:
    """A tensor the host placed in GMEM: its byte address, shape and dtype."""

    addr: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class Card:
    """One DianNao card: its memories persist across launches, as on real hardware.

    The host places tensors in GMEM (``to_gmem``, ``alloc``), launches a kernel on some cores (``launch``) and
    reads results back (``from_gmem``). Core counts: 1 to CORES_PER_CLUSTER cores of cluster 0, or whole
    clusters (a multiple of CORES_PER_CLUSTER), as BANG C's Block and Union task types.
    """

    def __init__(self, config: DiannaoConfig | str = "default", gmem: np.ndarray | None = None, *,
                 spec: isa.ISA) -> None:
        self.config = load_config(config) if isinstance(config, str) else config
        problem = self.config.check_spec(spec, "the spec")
        if problem is not None:
            raise LaunchError(problem)
        self.spec = spec
        self.align = self.spec.params["VECTOR_ALIGN"]
        if gmem is not None:
            size = self.spec.spaces["GMEM"].bytes
            image = np.asarray(gmem, dtype=np.uint8).reshape(-1)
            if image.size > size:
                raise LaunchError(f"the GMEM image has {image.size} bytes, more than GMEM's {size}")
            full = np.zeros(size, np.uint8)
            full[:image.size] = image
            gmem = full
        self.memory = CardMemory(self.spec, gmem)
        self.next_free = 0

    def alloc(self, nbytes: int, align: int | None = None) -> int:
        """Reserve ``nbytes`` of GMEM (aligned to VECTOR_ALIGN unless said otherwise); return the address."""
        align = align or self.align
        addr = -(-self.next_free // align) * align
        if addr + nbytes > self.memory.gmem.size:
            raise LaunchError(f"GMEM is full: {nbytes} bytes at {addr} do not fit in {self.memory.gmem.size}")
        self.next_free = addr + nbytes
        return addr

    def to_gmem(self, array: np.ndarray, addr: int | None = None) -> Buffer:
        """Copy ``array`` into GMEM (at ``addr``, or a fresh allocation) and return where it lies."""
        array = np.ascontiguousarray(array)
        if addr is None:
            addr = self.alloc(array.nbytes)
        elif addr < 0 or addr + array.nbytes > self.memory.gmem.size:
            raise LaunchError(f"{array.nbytes} bytes at GMEM address {addr} do not fit in GMEM")
        self.memory.gmem[addr:addr + array.nbytes] = array.reshape(-1).view(np.uint8)
        return Buffer(addr, array.shape, array.dtype)

    def from_gmem(self, buf: Buffer) -> np.ndarray:
        """A copy of the tensor ``buf`` as it is now in GMEM."""
        raw = self.memory.gmem[buf.addr:buf.addr + buf.nbytes]
        return raw.view(buf.dtype).reshape(buf.shape).copy()

    def cores_for(self, count: int | None) -> tuple[int, ...]:
        """Global indices of the cores a launch on ``count`` cores uses."""
        p = self.spec.params
        cpc, total = p["CORES_PER_CLUSTER"], p["CLUSTERS"] * p["CORES_PER_CLUSTER"]
        count = total if count is None else count
        if not (1 <= count <= cpc or (count % cpc == 0 and cpc <= count <= total)):
            raise LaunchError(f"cannot launch on {count} cores: use 1 to {cpc} cores of one cluster, or a "
                              f"multiple of {cpc} up to {total} (whole clusters)")
        return tuple(range(count))

    def launch(self, program: isa.Program | bytes, cores: int | None = None, args: Sequence[int] = (),
               trace: bool = False, fast: bool = True) -> DiannaoResult:
        """Run ``program`` (a Program, or its binary form) on ``cores`` cores (default: all) and return what
        the launch measured. ``args`` preload registers R0, R1, ... of every core (kernel arguments);
        ``trace`` records a Perfetto trace; ``fast=False`` runs every instruction (tensor and scalar) through
        the spec's generic executor instead of its fast path."""
        if isinstance(program, bytes | bytearray):
            program = isa.decode_program(bytes(program), spec=self.spec)
        problem = spec_difference(program.isa, self.spec)
        if problem is not None:
            raise LaunchError(problem)
        if len(args) > self.spec.params["NUM_REGS"]:
            raise LaunchError(f"{len(args)} kernel arguments do not fit in {self.spec.params['NUM_REGS']} "
                              "registers")
        for k, a in enumerate(args):
            if not -(2**31) <= int(a) < 2**31:
                raise LaunchError(f"kernel argument {k} = {a} does not fit in a 32-bit register")
        machine = _Machine(program, self.memory, self.config, self.cores_for(cores),
                           [int(a) for a in args], trace, fast)
        return machine.run()


def simulate(program: isa.Program | bytes, gmem: np.ndarray | bytes | None = None,
             config: DiannaoConfig | str = "default", cores: int | None = None, args: Sequence[int] = (),
             trace: bool = False, spec: isa.ISA | None = None) -> tuple[DiannaoResult, Card]:
    """Launch ``program`` on a fresh card whose GMEM starts with the image ``gmem`` (bytes from address 0);
    return the result and the card (read GMEM back from ``card.memory.gmem``). The card runs the spec the
    Program carries; a binary program needs ``spec`` to decode it."""
    image = np.frombuffer(bytes(gmem), np.uint8) if isinstance(gmem, bytes | bytearray) else gmem
    if spec is None:
        if isinstance(program, bytes | bytearray):
            raise LaunchError("a binary program needs the spec that decodes it (spec=...)")
        spec = program.isa
    card = Card(config, image, spec=spec)
    return card.launch(program, cores=cores, args=args, trace=trace), card
