"""Timing simulation of VITA's decoupled access/execute pipeline (discrete events), with functional
execution.

    result = simulate(program, dram, config="vta-default")

Fetch reads the instruction stream in order and dispatches each instruction to the command queue of the unit
its spec's timing names, as VTA's fetch module does by opcode: INP/WGT loads to the load queue; UOP/ACC
loads, GEMM, ALU and FINISH to the compute queue; stores to the store queue (fetch waits when a queue is
full). Everything about an instruction comes from the program's spec (sim/vita/plan.py): its unit, its
cycles, what it does (a fast path chosen by its semantics, or the spec's generic executor), and the rules
every instance is checked against before the program starts (``VitaConstraintError`` names the instruction's
index, its unit and the rule). The load, compute and store units each
take their next command, pop the dependency tokens it asks for, execute it, then push the tokens it asks for.
Tokens travel in four finite FIFOs: load->compute (l2g), compute->load (g2l), compute->store (g2s) and
store->compute (s2g); "prev" is the unit before in load -> compute -> store, "next" the unit after.

Time: a unit spends its own cycles (the spec's latency + cycles: for GEMM the pipeline fill plus one cycle
per micro-op, for the ALU two per micro-op) on its own clock; a DRAM transfer holds the one shared DRAM
port for the spec's cycles of the instruction (its bytes at DRAM_BYTES_PER_CYCLE), then its data arrives
dram_latency_cycles (the config's) later. So the cost of simulating grows with instructions, not with
cycles. The units are generator processes of sim/core/events.py's engine, which orders their resumptions
exactly as simpy did (the DRAM port is first come, first served: at one cycle, the order of the units'
requests is the engine's), without simpy's per-event objects and callbacks (a fifth of the time per
instruction).

A deadlock is found the moment no event is left while a unit still waits on a token FIFO, whether or not
another unit reached FINISH (a load that pops a token nobody pushes is never a silent success):
``DeadlockError`` says which unit waits on which queue at which instruction. The program must end with
FINISH, and nothing may follow it (``VitaExecError`` otherwise, before cycle 0). The same program and DRAM
image always give the same result.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

import isa
from sim.core.errors import DeadlockError, deadlock_message
from sim.core.events import Engine, Signal
from sim.core.ports import Ports
from sim.vita.config import DEFAULT_DRAM_BASE, VitaConfig, check_dram_base, load_config
from sim.vita.functional import (
    VitaBudgetError,
    VitaConstraintError,
    VitaExecError,
    VitaState,
    VitaUnsupportedError,
    execute_generic,
    uop_count,
)
from sim.vita.plan import MICRO_OP_ACTIONS, InsnPlan, plan_spec

QUEUES = {"l2g": "load->compute", "g2l": "compute->load", "g2s": "compute->store", "s2g": "store->compute"}
# (pop_prev, pop_next, push_prev, push_next) queues of each unit; None where the flag has no queue
TOKEN_QUEUES = {
    "load": (None, "g2l", None, "l2g"),
    "compute": ("l2g", "s2g", "g2l", "g2s"),
    "store": ("g2s", None, "s2g", None),
}


FSIM_COUNTERS = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes",
                 "out_store_nbytes", "gemm_counter", "alu_counter")


class _Fifo:
    """A finite FIFO between one producer and one consumer, each on its own clock; no event unless a side must
    wait in wall-clock order.

    Items are tuples whose first element is the cycle they enter. The queue keeps the cycle of every pop, so a
    put at cycle ``t`` sees exactly the occupancy at ``t`` even when the consumer already ran ahead: the
    ``k``-th put (0-based) needs the ``(k - capacity)``-th pop to have happened, and enters at the later of
    ``t`` and that pop's cycle.
    """

    def __init__(self, engine: Engine, capacity: int, on_pop=None) -> None:
        self.engine = engine
        self.capacity = capacity
        self.on_pop = on_pop  # called after every pop (fetch refills the command queues this way)
        self.items: deque[tuple] = deque()
        self.pushes = 0
        self.pop_cycles: list[int] = []
        self.getter: Signal | None = None
        self.putter: tuple[Signal, tuple, int] | None = None  # (signal, item, pop it needs)

    def put(self, item: tuple, wait: bool = True) -> int | Signal | None:
        """Enter ``item`` and return the cycle it entered (later than ``item[0]`` if the queue was full then).

        If the pop it needs has not happened yet: with ``wait``, return the signal fired with that cycle once
        it has; without, enter nothing and return None."""
        need = self.pushes - self.capacity
        if need >= len(self.pop_cycles):
            if not wait:
                return None
            self.pushes += 1
            signal = self.engine.signal()
            self.putter = (signal, item, need)
            return signal
        self.pushes += 1
        entered = max(item[0], self.pop_cycles[need]) if need >= 0 else item[0]
        self._enter((entered, *item[1:]))
        return entered

    def _enter(self, item: tuple) -> None:
        self.items.append(item)
        if self.getter is not None:
            signal, self.getter = self.getter, None
            self.engine.fire(signal)

    def get(self, cycle: int) -> tuple | Signal:
        """The oldest item, taken at ``cycle`` (the consumer's clock), or the signal fired once there is one
        (then call ``get`` again)."""
        if not self.items:
            self.getter = self.engine.signal()
            return self.getter
        item = self.items.popleft()
        self.pop_cycles.append(max(cycle, item[0]))
        if self.putter is not None and self.putter[2] < len(self.pop_cycles):
            signal, waiting, need = self.putter
            self.putter = None
            entered = max(waiting[0], self.pop_cycles[need])
            self._enter((entered, *waiting[1:]))
            self.engine.fire(signal, entered)
        if self.on_pop is not None:
            self.on_pop()
        return item


@dataclass
class UnitStats:
    """Cycles one unit spent executing, waiting on dependency tokens, and waiting on DRAM."""

    busy: int = 0
    stalled_on_dependency: int = 0
    stalled_on_memory: int = 0
    instructions: int = 0


@dataclass
class VitaResult:
    """What a simulation measured; equal programs and DRAM images give equal results."""

    cycles: int
    units: dict[str, UnitStats]
    gemm_busy_cycles: int
    bytes_moved: dict[str, int]
    counters: dict[str, int]  # VTA fsim's profiler counters (papers/anchors.md §1.5)
    dram: np.ndarray = field(repr=False)
    # (unit, what, first cycle, end cycle, "instruction" | "stall"), in time order
    trace: list[tuple[str, str, int, int, str]] = field(default_factory=list, repr=False)

    @property
    def gemm_utilization(self) -> float:
        """GEMM busy cycles / total cycles."""
        return self.gemm_busy_cycles / self.cycles if self.cycles else 0.0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VitaResult):
            return NotImplemented
        mine = (self.cycles, self.units, self.gemm_busy_cycles, self.bytes_moved, self.counters, self.trace)
        theirs = (other.cycles, other.units, other.gemm_busy_cycles, other.bytes_moved, other.counters,
                  other.trace)
        return mine == theirs and np.array_equal(self.dram, other.dram)


class _Machine:
    def __init__(self, program: isa.Program, dram: np.ndarray, config: VitaConfig, dram_base: int) -> None:
        self.program = program
        self.config = config
        self.spec = program.isa
        self.state = VitaState(self.spec, dram, dram_base)
        self.engine = Engine()
        self.cmd = {u: _Fifo(self.engine, config.cmd_queue_depth, self.fetch) for u in TOKEN_QUEUES}
        self.fetch_pc = 0               # the next instruction fetch dispatches
        self.fetch_cycle = 0            # fetch's own clock
        self.fetch_blocked: str | None = None  # the unit whose full command queue fetch waits on
        self.fetch_ended: set[str] = set()     # units told the program has ended
        self.tokens = {q: _Fifo(self.engine, config.dep_queue_depth) for q in QUEUES}
        self.ports = Ports(["dram"])  # the one DRAM port, shared by the load, compute and store units
        self.fields = [dict(insn.fields) for insn in program.insns]
        plans = plan_spec(self.spec)
        self.plans: list[InsnPlan] = [plans[insn.name] for insn in program.insns]
        self.check_program()
        # the token FIFOs each instruction pops and pushes, from its flags and the unit it runs on
        self.pops: list[tuple[str, ...]] = []
        self.pushes: list[tuple[str, ...]] = []
        plans: dict[tuple, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for plan_of, f in zip(self.plans, self.fields, strict=True):
            key = (plan_of.unit, f.get("pop_prev_dep"), f.get("pop_next_dep"), f.get("push_prev_dep"),
                   f.get("push_next_dep"))
            plan = plans.get(key)
            if plan is None:
                pop_prev, pop_next, push_prev, push_next = TOKEN_QUEUES[key[0]]
                plan = plans[key] = (
                    tuple(q for flag, q in ((key[1], pop_prev), (key[2], pop_next)) if flag and q),
                    tuple(q for flag, q in ((key[3], push_prev), (key[4], push_next)) if flag and q))
            self.pops.append(plan[0])
            self.pushes.append(plan[1])
        self.stats = {u: UnitStats() for u in ("fetch", *TOKEN_QUEUES)}
        self.waiting: dict[str, tuple[str, str, int]] = {}  # unit -> (pop|push, queue, pc)
        self.done: set[str] = set()
        self.finish_cycle: int | None = None
        self.error: Exception | None = None
        self.gemm_busy = 0
        self.bytes = {m: 0 for m in ("INP", "WGT", "ACC", "UOP", "OUT")}
        self.counters = dict.fromkeys(FSIM_COUNTERS, 0)
        self.trace: list[tuple[str, str, int, int, str]] = []

    def check_program(self) -> None:
        """Every instruction can run on this machine and satisfies its spec's rules
        (``isa.check_constraints``), before cycle 0; its timing (the spec's latency and cycles,
        ``isa.timing_of``) is evaluated then too."""
        timing: dict[isa.Insn, tuple[int, int]] = {}   # programs repeat instructions: each distinct one once
        self.timing: list[tuple[int, int]] = []        # (latency, cycles) of each instruction, from the spec
        for pc, (insn, plan) in enumerate(zip(self.program.insns, self.plans, strict=True)):
            known = timing.get(insn)
            if known is None:
                if plan.action is None:
                    raise VitaUnsupportedError(f"{self.where(pc)}: the VITA machine cannot run "
                                               f"'{insn.name}': {plan.reason}", pc=pc,
                                               insn=isa.format_insn(self.spec, insn), field=plan.missing)
                violations = isa.check_constraints(self.spec, insn, which="static")
                if violations:
                    v = violations[0]
                    raise VitaConstraintError(f"{self.where(pc)} on the {plan.unit} unit: {v.detail}",
                                              pc=pc, unit=plan.unit, insn=isa.format_insn(self.spec, insn),
                                              rule=v.rule)
                try:
                    _, latency, cycles = isa.timing_of(self.spec, insn)
                except isa.ExecError as e:
                    raise VitaExecError(f"{self.where(pc)}: its timing cannot be evaluated: {e}") from None
                known = timing[insn] = (latency or 0, cycles if cycles is not None else 1)
            self.timing.append(known)
        finishes = [pc for pc, plan in enumerate(self.plans) if plan.action == "finish"]
        if finishes and finishes[0] != len(self.plans) - 1:   # nothing may run after the program ends
            pc = finishes[0]
            raise VitaExecError(f"{self.where(pc)} is not the last instruction ({len(self.plans)} "
                                f"instructions): FINISH must end the program, but instruction {pc + 1} "
                                f"({self.program.insns[pc + 1].name}) follows it")
        self.check_budget()

    def check_budget(self) -> None:
        """The program's micro-ops (every GEMM/ALU loop, ``uop_count``) fit the config's ``uop_budget``."""
        uops = [uop_count(f) if plan.action in MICRO_OP_ACTIONS else 0
                for f, plan in zip(self.fields, self.plans, strict=True)]
        total = sum(uops)
        if total > self.config.uop_budget:
            pc = max(range(len(uops)), key=uops.__getitem__)
            raise VitaBudgetError(f"the program runs {total:,} micro-ops, more than the machine config's "
                                  f"uop_budget of {self.config.uop_budget:,} ({self.where(pc)} alone runs "
                                  f"{uops[pc]:,}); split the work into smaller instructions, or raise "
                                  f"uop_budget in the config ({self.config.source})")

    def where(self, pc: int) -> str:
        """Instruction ``pc`` as errors name it: its index and its assembly text."""
        return f"instruction {pc} ({isa.format_insn(self.spec, self.program.insns[pc])})"

    # ------------------------------------------------------------------ processes
    def fetch(self) -> None:
        """Dispatch instructions in order, fetch_cycles_per_insn apart, on fetch's own clock, until a command
        queue is full at the cycle of the next dispatch; every pop from a command queue calls this again.

        Fetch never waits on an event: the queues know the cycle of every pop, so an instruction that
        found its queue full enters it at the cycle the pop it needed happened."""
        insns = self.program.insns
        step = self.config.fetch_cycles_per_insn
        stats = self.stats["fetch"]
        while self.fetch_pc < len(insns):
            pc, now = self.fetch_pc, self.fetch_cycle
            insn = insns[pc]
            unit = self.plans[pc].unit
            entered = self.cmd[unit].put((now + step, pc, insn), wait=False)
            if entered is None:
                self.fetch_blocked = unit
                return
            self.trace.append(("fetch", f"{pc}: {insn.name}", now, now + step, "instruction"))
            stats.busy += step
            stats.instructions += 1
            if entered > now + step:
                self.trace.append(("fetch", f"wait for room in the {unit} command queue", now + step, entered,
                                   "stall"))
                stats.stalled_on_dependency += entered - now - step
            self.fetch_pc, self.fetch_cycle = pc + 1, entered
        self.fetch_blocked = None
        for unit in TOKEN_QUEUES:  # then the end of the program, into each queue once it has room
            if unit in self.fetch_ended:
                continue
            if self.cmd[unit].put((self.fetch_cycle, None, None), wait=False) is None:
                self.fetch_blocked = unit
                return
            self.fetch_ended.add(unit)
        self.done.add("fetch")

    def unit(self, name: str):
        """Run one unit's commands. Its own work (GEMM, ALU) only advances ``local``; the unit brings the
        engine's clock up to ``local`` (yields the difference) just before it touches anything shared: a
        token pop or push, a DRAM transfer, the end of the program."""
        stats = self.stats[name]
        cmd = self.cmd[name]
        engine = self.engine
        local = engine.now
        while True:
            item = cmd.get(local)
            if type(item) is Signal:
                yield item
                item = cmd.get(local)
            ready, pc, insn = item
            if ready > local:
                local = ready
            if insn is None:
                self.done.add(name)
                return
            f, plan = self.fields[pc], self.plans[pc]
            for queue in self.pops[pc]:
                if local > engine.now:
                    yield local - engine.now
                token = self.tokens[queue].get(local)
                if type(token) is Signal:
                    self.waiting[name] = ("pop", queue, pc)
                    yield token
                    token = self.tokens[queue].get(local)
                    del self.waiting[name]
                if token[0] > local:
                    self.stall(name, stats, f"wait for a token on {queue}", local, token[0])
                    local = token[0]
            begin = local
            try:
                if plan.transfer:
                    if local > engine.now:
                        yield local - engine.now
                    local = self.transfer(name, insn, plan, f, self.timing[pc][1], stats)
                else:
                    local += self.compute(insn, plan, f, self.timing[pc], stats)
            except VitaExecError as e:
                self.error = VitaExecError(f"instruction {pc} ({insn.name}) on the {name} unit: {e}")
                return
            self.trace.append((name, f"{pc}: {insn.name}", begin, local, "instruction"))
            stats.instructions += 1
            for queue in self.pushes[pc]:
                if local > engine.now:
                    yield local - engine.now
                entered = self.tokens[queue].put((local,))
                if type(entered) is Signal:
                    self.waiting[name] = ("push", queue, pc)
                    entered = yield entered
                    del self.waiting[name]
                if entered > local:
                    self.stall(name, stats, f"wait for room on {queue}", local, entered)
                    local = entered
            if plan.action == "finish":
                if local > engine.now:
                    yield local - engine.now
                self.finish_cycle = local
                self.done.add(name)
                return

    def compute(self, insn: isa.Insn, plan: InsnPlan, f: dict[str, int], timing: tuple[int, int],
                stats: UnitStats) -> int:
        """Execute a compute-unit instruction (GEMM, ALU, FINISH or any other the spec gives that unit);
        return the cycles it keeps its unit busy: the spec's latency + cycles (``timing``)."""
        latency, work = timing
        cycles = latency + work
        action = plan.action
        if action != "finish":
            uops = uop_count(f)
            if action == "gemm":
                self.state.gemm(insn, f)
                self.counters["gemm_counter"] += uops
                self.gemm_busy += work
            elif action == "reset":
                self.state.gemm_reset(insn, f)
            elif action == "alu":
                self.state.alu(insn, plan.arg, f)
                self.counters["alu_counter"] += uops
            else:  # "generic": the spec's semantics, micro-op by micro-op
                execute_generic(self.state, insn, f)
                if plan.arg == "gemm":   # the GEMM core's work (sim/vita/plan.py)
                    self.counters["gemm_counter"] += uops
                    self.gemm_busy += work
                else:
                    self.counters["alu_counter"] += uops
        stats.busy += cycles
        return cycles

    def transfer(self, unit: str, insn: isa.Insn, plan: InsnPlan, f: dict[str, int], transfer: int,
                 stats: UnitStats) -> int:
        """Execute a load or store now; return the cycle its data has arrived.

        The one DRAM port serves requests first come, first served (requests arrive in time order, since a
        unit synchronizes before it asks): a transfer holds it for the spec's cycles of the instruction, and
        the data arrives dram_latency_cycles after the transfer (``transfer``: the spec's cycles). An empty
        transfer (VTA's runtime emits them to carry dependency flags) moves nothing: it neither waits for
        the port nor for the latency.
        """
        if plan.action == "store":
            self.state.store(insn, f)
            memory, counter = "OUT", "out_store_nbytes"
        else:
            memory = plan.arg
            self.state.load(insn, memory, f)
            counter = f"{memory.lower()}_load_nbytes"
        nbytes = f["y_size"] * f["x_size"] * self.state.kinds[memory].nbytes
        if f["x_size"]:  # fsim skips (and does not count) an empty transfer
            self.counters[counter] += nbytes
        self.bytes[memory] += nbytes
        now = self.engine.now
        if not nbytes:   # an empty transfer (a no-op carrying token flags) issues no DRAM request
            return now
        start = self.ports.take("dram", transfer, now)
        if start > now:
            self.trace.append((unit, "wait for the DRAM port", now, start, "stall"))
        stats.stalled_on_memory += start - now + self.config.dram_latency_cycles
        stats.busy += transfer
        return start + transfer + self.config.dram_latency_cycles

    def stall(self, unit: str, stats: UnitStats, what: str, since: int, until: int) -> None:
        """Count and trace a wait of ``unit`` on a token FIFO from cycle ``since`` to cycle ``until``."""
        stats.stalled_on_dependency += until - since
        self.trace.append((unit, what, since, until, "stall"))

    # ------------------------------------------------------------------ running
    def run(self) -> VitaResult:
        self.fetch()
        for name in TOKEN_QUEUES:
            self.engine.start(self.unit(name))
        self.engine.run()
        if self.error is not None:
            raise self.error
        if self.waiting or self.fetch_blocked is not None:   # a unit left waiting, with or without FINISH
            waits = self.deadlock_waits()
            what = "deadlock" if self.finish_cycle is None else \
                f"FINISH ran at cycle {self.finish_cycle} with units left waiting; deadlock"
            raise DeadlockError(deadlock_message(self.engine.now, waits, what), cycle=self.engine.now,
                                waiting=waits)
        if self.finish_cycle is None:
            raise VitaExecError("the program ended without FINISH; the last instruction must be FINISH")
        return VitaResult(self.finish_cycle, self.stats, self.gemm_busy, self.bytes, self.counters,
                          self.state.dram, sorted(self.trace, key=itemgetter(2, 0, 3)))

    def deadlock_waits(self) -> dict[str, str]:
        """What each unit left waiting waits for: every unit with work left waits on a token FIFO that
        nobody will fill (or drain)."""
        waits = {}
        for unit, (kind, queue, pc) in sorted(self.waiting.items()):
            insn = self.program.insns[pc].name
            if kind == "pop":
                waits[unit] = (f"waits at instruction {pc} ({insn}) to pop a token from {queue} "
                               f"({QUEUES[queue]}), which is empty and no unit will push to it")
            else:
                waits[unit] = (f"waits at instruction {pc} ({insn}) to push a token to {queue} "
                               f"({QUEUES[queue]}), which is full and no unit will pop from it")
        if self.fetch_blocked is not None:
            waits["fetch"] = f"waits for room in the {self.fetch_blocked} command queue"
        return waits


def simulate(program: isa.Program | bytes, dram: np.ndarray, config: VitaConfig | str = "vta-default",
             spec: isa.ISA | None = None, dram_base: int = DEFAULT_DRAM_BASE) -> VitaResult:
    """Run ``program`` on a copy of the DRAM image ``dram`` (1-D uint8) and return what it measured.

    ``program`` is a Program (which carries the spec it was built for) or its binary form from
    ``isa.encode_program``, which ``spec`` decodes. The spec must agree with the config's ``isa_params``.
    Programs are relocatable: their DRAM addresses count from the start of the image, which lies at the
    physical address ``dram_base`` (``check_dram_base``); where it lies changes no result.
    """
    cfg = load_config(config) if isinstance(config, str) else config
    if isinstance(program, bytes | bytearray):
        if spec is None:
            raise VitaExecError("a binary program needs the spec that decodes it (spec=...)")
        program = isa.decode_program(bytes(program), spec=spec)
    elif spec is not None and program.isa != spec:
        raise VitaExecError(f"the program was built for the spec {program.isa.source}, not the one given "
                            f"({spec.source})")
    problem = cfg.check_spec(program.isa) or check_dram_base(dram_base, np.size(dram), program.isa)
    if problem is not None:
        raise VitaExecError(problem)
    return _Machine(program, np.array(dram, dtype=np.uint8, copy=True), cfg, dram_base).run()
