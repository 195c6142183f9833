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

Timing does not depend on data, so a run has three phases: decode (each distinct instruction of the program
once: checked, timed, its token FIFOs found and its work prepared by ``VitaState.prepare``), timing (the
units on the engine; each records where it runs an instruction), then the work of every instruction in the
order the units ran them (a racy program reads and writes as the timing interleaved it; the first
instruction that cannot run raises, before any deadlock the timing found). Counters, bytes and busy cycles
are summed per distinct instruction; the trace is kept raw and sorted when first read.

A deadlock is found the moment no event is left while a unit still waits on a token FIFO, whether or not
another unit reached FINISH (a load that pops a token nobody pushes is never a silent success):
``DeadlockError`` says which unit waits on which queue at which instruction. The program must end with
FINISH, and nothing may follow it (``VitaExecError`` otherwise, before cycle 0). The same program and DRAM
image always give the same result.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
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

    An item is (the cycle it enters, what it carries). The queue keeps the cycle of every pop, so a put at
    cycle ``t`` sees exactly the occupancy at ``t`` even when the consumer already ran ahead: the ``k``-th put
    (0-based) needs the ``(k - capacity)``-th pop to have happened, and enters at the later of ``t`` and that
    pop's cycle.
    """

    __slots__ = ("name", "engine", "capacity", "items", "pushes", "pop_cycles", "getter", "putter", "waits")

    def __init__(self, name: str, engine: Engine, capacity: int) -> None:
        self.name = name
        self.waits = (f"wait for a token on {name}", f"wait for room on {name}")   # a stall's trace text
        self.engine = engine
        self.capacity = capacity
        self.items: deque[tuple[int, object]] = deque()
        self.pushes = 0
        self.pop_cycles: list[int] = []
        self.getter: Signal | None = None
        self.putter: tuple[Signal, int, object, int] | None = None  # (signal, cycle, what, the pop it needs)

    def put(self, cycle: int, what: object = None, wait: bool = True) -> int | Signal | None:
        """Enter ``what`` at ``cycle`` and return the cycle it entered (later if the queue was full then).

        If the pop it needs has not happened yet: with ``wait``, return the signal fired with that cycle once
        it has; without, enter nothing and return None."""
        need = self.pushes - self.capacity
        if need >= len(self.pop_cycles):
            if not wait:
                return None
            self.pushes += 1
            signal = Signal()
            self.putter = (signal, cycle, what, need)
            return signal
        self.pushes += 1
        if need >= 0 and self.pop_cycles[need] > cycle:
            cycle = self.pop_cycles[need]
        self.items.append((cycle, what))
        if self.getter is not None:
            signal, self.getter = self.getter, None
            self.engine.fire(signal)
        return cycle

    def get(self, cycle: int) -> tuple[int, object] | Signal:
        """The oldest item, taken at ``cycle`` (the consumer's clock), or the signal fired once there is one
        (then call ``get`` again)."""
        if not self.items:
            self.getter = Signal()
            return self.getter
        item = self.items.popleft()
        self.pop_cycles.append(item[0] if item[0] > cycle else cycle)
        if self.putter is not None and self.putter[3] < len(self.pop_cycles):
            signal, waiting, what, need = self.putter
            self.putter = None
            self.pushes -= 1
            entered = self.put(waiting, what)
            self.engine.fire(signal, entered)
        return item


@dataclass(frozen=True, slots=True, eq=False)   # each is distinct: hashed by identity
class _Decoded:
    """What the machine does for one distinct instruction of a program, decoded before cycle 0: the unit it
    runs on, the token FIFOs it pops and pushes, its timing (``busy``: the spec's latency + cycles, what a
    compute instruction keeps its unit busy; ``cycles``: the spec's cycles, what a transfer that ``moves``
    bytes holds the DRAM port), and ``run``, its work on the machine's state (``VitaState.prepare``)."""

    insn: isa.Insn
    plan: InsnPlan
    fields: dict[str, int]
    pops: tuple[_Fifo, ...]
    pushes: tuple[_Fifo, ...]
    busy: int
    cycles: int
    moves: bool
    transfer: bool
    finish: bool
    run: Callable[[], None]


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
    record: _TraceRecord | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def trace(self) -> list[tuple[str, str, int, int, str]]:
        """(unit, what, first cycle, end cycle, "instruction" | "stall") of every instruction and stall, in
        time order; made from the run's record when first read (most runs never read it)."""
        return self.record.trace() if self.record is not None else []

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


@dataclass(frozen=True)
class _TraceRecord:
    """What a run keeps for its trace: the units' stalls as they happened, the cycles each instruction began
    and ended on its unit, the cycle fetch dispatched each instruction and fetch's clock at the end."""

    stalls: list[tuple[str, str, int, int, str]]
    began: list[int]
    ended: list[int]
    fetched: list[int]
    fetch_end: int
    program: isa.Program
    fetch_cycles: int

    def trace(self) -> list[tuple[str, str, int, int, str]]:
        insns, step = self.program.insns, self.fetch_cycles
        labels = [f"{pc}: {insn.name}" for pc, insn in enumerate(insns)]
        plans = plan_spec(self.program.isa)
        units = [plans[insn.name].unit for insn in insns]
        # a unit's stall ahead of its instructions: the one stall that can share an instruction's first and
        # end cycle (a DRAM port wait before a transfer of no cycles) happened first
        trace = [*self.stalls, *zip(units, labels, self.began, self.ended, ["instruction"] * len(insns),
                                    strict=True)]
        for pc, (now, entered) in enumerate(zip(self.fetched, [*self.fetched[1:], self.fetch_end],
                                                strict=True)):
            trace.append(("fetch", labels[pc], now, now + step, "instruction"))
            if entered > now + step:   # a full command queue
                trace.append(("fetch", f"wait for room in the {units[pc]} command queue", now + step, entered,
                              "stall"))
        return sorted(trace, key=itemgetter(2, 0, 3))   # stable: a unit's entries of one cycle in order


class _Machine:
    def __init__(self, program: isa.Program, dram: np.ndarray, config: VitaConfig, dram_base: int) -> None:
        self.program = program
        self.config = config
        self.spec = program.isa
        self.state = VitaState(self.spec, dram, dram_base)
        self.engine = Engine()
        self.cmd = {u: _Fifo(u, self.engine, config.cmd_queue_depth) for u in TOKEN_QUEUES}
        self.tokens = {q: _Fifo(q, self.engine, config.dep_queue_depth) for q in QUEUES}
        self.decoded = self.decode()
        self.fetch_pc = 0               # the next instruction fetch dispatches
        self.fetch_cycle = 0            # fetch's own clock
        self.fetched: list[int] = []    # the cycle fetch dispatched each instruction
        self.fetch_blocked: str | None = None  # the unit whose full command queue fetch waits on
        self.fetch_ended: set[str] = set()     # units told the program has ended
        self.starved = 0                       # units waiting for a command
        self.ports = Ports(["dram"])    # the one DRAM port, shared by the load, compute and store units
        self.stats = {u: UnitStats() for u in ("fetch", *TOKEN_QUEUES)}
        self.waiting: dict[str, tuple[str, str, int]] = {}  # unit -> (pop|push, queue, pc)
        self.finish_cycle: int | None = None
        self.order: list[int] = []      # the instructions in the order the units ran them
        self.stalls: list[tuple[str, str, int, int, str]] = []   # (unit, what, since, until, "stall")
        self.began = [0] * len(self.decoded)   # the cycle each instruction began on its unit
        self.ended = [0] * len(self.decoded)   # and the cycle it ended

    def decode(self) -> list[_Decoded]:
        """Each instruction's ``_Decoded``, once per distinct instruction, in program order: before cycle 0,
        every instruction can run on this machine and satisfies its spec's rules (``isa.check_constraints``),
        its timing (the spec's latency and cycles, ``isa.timing_of``) is evaluated, FINISH ends the program
        and its micro-ops fit the budget."""
        plans = plan_spec(self.spec)
        known: dict[tuple, _Decoded] = {}   # by name and fields: hashed and compared as plain tuples
        decoded = []
        for pc, insn in enumerate(self.program.insns):
            found = known.get((insn.name, insn.fields))
            if found is None:
                found = known[insn.name, insn.fields] = self.decode_one(pc, insn, plans[insn.name])
            decoded.append(found)
        self.distinct = dict.fromkeys(known.values(), 0)   # how often each distinct instruction runs
        for d in decoded:
            self.distinct[d] += 1
        finishes = [pc for pc, d in enumerate(decoded) if d.finish]
        if finishes and finishes[0] != len(decoded) - 1:   # nothing may run after the program ends
            pc = finishes[0]
            raise VitaExecError(f"{self.where(pc)} is not the last instruction ({len(decoded)} "
                                f"instructions): FINISH must end the program, but instruction {pc + 1} "
                                f"({self.program.insns[pc + 1].name}) follows it")
        self.check_budget(decoded)
        return decoded

    def decode_one(self, pc: int, insn: isa.Insn, plan: InsnPlan) -> _Decoded:
        """Instruction ``pc``, the first of its kind in the program, checked and decoded."""
        if plan.action is None:
            raise VitaUnsupportedError(f"{self.where(pc)}: the VITA machine cannot run '{insn.name}': "
                                       f"{plan.reason}", pc=pc, insn=isa.format_insn(self.spec, insn),
                                       field=plan.missing)
        violations = isa.check_constraints(self.spec, insn, which="static")
        if violations:
            v = violations[0]
            raise VitaConstraintError(f"{self.where(pc)} on the {plan.unit} unit: {v.detail}", pc=pc,
                                      unit=plan.unit, insn=isa.format_insn(self.spec, insn), rule=v.rule)
        try:
            _, latency, cycles = isa.timing_of(self.spec, insn)
        except isa.ExecError as e:
            raise VitaExecError(f"{self.where(pc)}: its timing cannot be evaluated: {e}") from None
        latency, cycles = latency or 0, cycles if cycles is not None else 1
        f = insn.values
        pop_prev, pop_next, push_prev, push_next = TOKEN_QUEUES[plan.unit]
        pops = tuple(self.tokens[q] for flag, q in (("pop_prev_dep", pop_prev), ("pop_next_dep", pop_next))
                     if f.get(flag) and q)
        pushes = tuple(self.tokens[q] for flag, q in (("push_prev_dep", push_prev),
                                                      ("push_next_dep", push_next)) if f.get(flag) and q)
        finish = plan.action == "finish"
        run = self.state.prepare(insn, plan.action, plan.arg, f)
        moves = plan.transfer and self.transfer_bytes(plan, f) > 0   # an empty transfer holds no DRAM port
        return _Decoded(insn, plan, f, pops, pushes, latency + cycles, cycles, moves, plan.transfer, finish,
                        run)

    def transfer_bytes(self, plan: InsnPlan, f: dict[str, int]) -> int:
        """The bytes a load or store moves."""
        memory = "OUT" if plan.action == "store" else plan.arg
        return f["y_size"] * f["x_size"] * self.state.kinds[memory].nbytes

    def check_budget(self, decoded: list[_Decoded]) -> None:
        """The program's micro-ops (every GEMM/ALU loop, ``uop_count``) fit the config's ``uop_budget``."""
        uops = {d: uop_count(d.fields) if d.plan.action in MICRO_OP_ACTIONS else 0 for d in self.distinct}
        total = sum(uops[d] * n for d, n in self.distinct.items())
        if total > self.config.uop_budget:
            pc = max(range(len(decoded)), key=lambda pc: uops[decoded[pc]])
            most = uops[decoded[pc]]
            raise VitaBudgetError(f"the program runs {total:,} micro-ops, more than the machine config's "
                                  f"uop_budget of {self.config.uop_budget:,} ({self.where(pc)} alone runs "
                                  f"{most:,}); split the work into smaller instructions, or raise "
                                  f"uop_budget in the config ({self.config.source})")

    def where(self, pc: int) -> str:
        """Instruction ``pc`` as errors name it: its index and its assembly text."""
        return f"instruction {pc} ({isa.format_insn(self.spec, self.program.insns[pc])})"

    # ------------------------------------------------------------------ processes
    def fetch(self) -> None:
        """Dispatch instructions in order, fetch_cycles_per_insn apart, on fetch's own clock, until a command
        queue is full at the cycle of the next dispatch.

        Fetch never waits on an event: the queues know the cycle of every pop, so an instruction that
        found its queue full enters it at the cycle the pop it needed happened, whenever fetch runs. So it
        runs only when that can be seen: when a unit finds its command queue empty, on a pop from the queue
        it waits on while a unit waits for a command (it fires that unit's signal exactly where it did when
        it ran on every pop), and once at the end (what it waits on, if anything, is part of a deadlock)."""
        decoded, fetched, cmd = self.decoded, self.fetched, self.cmd
        step, stats = self.config.fetch_cycles_per_insn, self.stats["fetch"]
        pc, now = self.fetch_pc, self.fetch_cycle
        while pc < len(decoded):
            unit = decoded[pc].plan.unit
            entered = cmd[unit].put(now + step, pc, wait=False)
            if entered is None:
                self.fetch_pc, self.fetch_cycle, self.fetch_blocked = pc, now, unit
                return
            fetched.append(now)
            if entered > now + step:   # it waited for room in the unit's command queue
                stats.stalled_on_dependency += entered - now - step
            pc, now = pc + 1, entered
        self.fetch_pc, self.fetch_cycle, self.fetch_blocked = pc, now, None
        for unit in TOKEN_QUEUES:  # then the end of the program, into each queue once it has room
            if unit in self.fetch_ended:
                continue
            if cmd[unit].put(now, None, wait=False) is None:
                self.fetch_blocked = unit
                return
            self.fetch_ended.add(unit)

    def unit(self, name: str):
        """Run one unit's commands. Its own work (GEMM, ALU) only advances ``local``; the unit brings the
        engine's clock up to ``local`` (yields the difference) just before it touches anything shared: a
        token pop or push, a DRAM transfer, the end of the program."""
        stats, cmd, engine, trace = self.stats[name], self.cmd[name], self.engine, self.stalls
        began, ended = self.began, self.ended
        decoded, order, ports = self.decoded, self.order, self.ports
        latency = self.config.dram_latency_cycles
        local = engine.now
        while True:
            if not cmd.items and self.fetch_blocked is not None:
                self.fetch()   # out of commands: fetch dispatches what it could have by now
            item = cmd.get(local)
            if type(item) is Signal:
                self.starved += 1
                yield item
                self.starved -= 1
                item = cmd.get(local)
            if self.starved and self.fetch_blocked == name:   # room for fetch, and a unit waits for it
                self.fetch()
            ready, pc = item
            if ready > local:
                local = ready
            if pc is None:
                return
            d = decoded[pc]
            for fifo in d.pops:
                if local > engine.now:
                    yield local - engine.now
                token = fifo.get(local)
                if type(token) is Signal:
                    self.waiting[name] = ("pop", fifo.name, pc)
                    yield token
                    token = fifo.get(local)
                    del self.waiting[name]
                if token[0] > local:
                    stats.stalled_on_dependency += token[0] - local
                    trace.append((name, fifo.waits[0], local, token[0], "stall"))
                    local = token[0]
            begin = local
            if d.transfer:   # at the engine's cycle, to take the DRAM port in the order units ask for it
                if local > engine.now:
                    yield local - engine.now
                local = engine.now
            order.append(pc)   # its work: done in this order once the timing is known (``execute``)
            if not d.transfer:
                local += d.busy
            elif d.moves:   # the DRAM port, first come first served; the data arrives latency cycles after
                start = ports.take("dram", d.cycles, local)
                if start > local:
                    trace.append((name, "wait for the DRAM port", local, start, "stall"))
                stats.stalled_on_memory += start - local + latency
                local = start + d.cycles + latency
            began[pc], ended[pc] = begin, local
            for fifo in d.pushes:
                if local > engine.now:
                    yield local - engine.now
                entered = fifo.put(local)
                if type(entered) is Signal:
                    self.waiting[name] = ("push", fifo.name, pc)
                    entered = yield entered
                    del self.waiting[name]
                if entered > local:
                    stats.stalled_on_dependency += entered - local
                    trace.append((name, fifo.waits[1], local, entered, "stall"))
                    local = entered
            if d.finish:
                if local > engine.now:
                    yield local - engine.now
                self.finish_cycle = local
                return

    # ------------------------------------------------------------------ running
    def run(self) -> VitaResult:
        self.fetch()
        for name in TOKEN_QUEUES:
            self.engine.start(self.unit(name))
        self.engine.run()
        self.fetch()
        self.execute()
        if self.waiting or self.fetch_blocked is not None:   # a unit left waiting, with or without FINISH
            waits = self.deadlock_waits()
            what = "deadlock" if self.finish_cycle is None else \
                f"FINISH ran at cycle {self.finish_cycle} with units left waiting; deadlock"
            raise DeadlockError(deadlock_message(self.engine.now, waits, what), cycle=self.engine.now,
                                waiting=waits)
        if self.finish_cycle is None:
            raise VitaExecError("the program ended without FINISH; the last instruction must be FINISH")
        step, stats = self.config.fetch_cycles_per_insn, self.stats["fetch"]
        stats.busy, stats.instructions = step * len(self.fetched), len(self.fetched)
        record = _TraceRecord(self.stalls, self.began, self.ended, self.fetched, self.fetch_cycle,
                              self.program, step)
        return VitaResult(self.finish_cycle, self.stats, *self.totals(), self.state.dram, record)

    def execute(self) -> None:
        """Each instruction's work on the machine's state, in the order the units ran them (the timing does
        not depend on data, so it runs first); the first that cannot run raises its ``VitaExecError``, before
        any deadlock or missing FINISH the timing found."""
        decoded = self.decoded
        pc = 0
        try:
            for pc in self.order:
                decoded[pc].run()
        except VitaExecError as e:
            d = decoded[pc]
            raise VitaExecError(f"instruction {pc} ({d.insn.name}) on the {d.plan.unit} unit: {e}") from None

    def totals(self) -> tuple[int, dict[str, int], dict[str, int]]:
        """(GEMM busy cycles, bytes moved per memory, fsim's counters) of the whole run, and each unit's busy
        cycles and instructions, from the distinct instructions and how often each ran."""
        gemm_busy = 0
        moved = {m: 0 for m in ("INP", "WGT", "ACC", "UOP", "OUT")}
        counters = dict.fromkeys(FSIM_COUNTERS, 0)
        for d, runs in self.distinct.items():
            stats, action = self.stats[d.plan.unit], d.plan.action
            stats.instructions += runs
            if d.transfer:
                memory = "OUT" if action == "store" else d.plan.arg
                nbytes = self.transfer_bytes(d.plan, d.fields) * runs
                moved[memory] += nbytes
                if d.fields["x_size"]:  # fsim skips (and does not count) an empty transfer
                    counter = "out_store_nbytes" if memory == "OUT" else f"{memory.lower()}_load_nbytes"
                    counters[counter] += nbytes
                stats.busy += d.cycles * runs if d.moves else 0
                continue
            stats.busy += d.busy * runs
            if action == "finish":
                continue
            gemm = action == "gemm" or (action == "generic" and d.plan.arg == "gemm")
            if action != "reset":
                counters["gemm_counter" if gemm else "alu_counter"] += uop_count(d.fields) * runs
            if gemm:
                gemm_busy += d.cycles * runs
        return gemm_busy, moved, counters

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
