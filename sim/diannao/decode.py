"""Decoding for the DianNao machine: each instruction of a program, once, into a record the interpreter runs
and a plan of what it costs, all of it from the spec.

    plans = Decoder(program, config, memory.names).plans(program)
    plans[pc].op          # e.g. RegisterOp(kind=ADD, rd=3, rs1=1, rs2=2)
    plans[pc].cycles      # latency + cycles - 1 of the spec's timing, with the shared ports' time

How an instruction decodes depends on what its spec says, never on its mnemonic:

- group ``dma``, ``vector``, ``unary`` or ``tensor``: a ``TensorOp``, run by its numpy fast path when its
  contract has one (sim/diannao/functional.py), else by the generic executor. An instruction of the ``dma``
  unit moves the bytes of the operand it writes from the space of the operand it reads;
- group ``sync``: a ``Barrier`` over the cores of its ``scope`` field; group ``wait``: ``Wait`` (until the
  core's asynchronous instructions are done); group ``control``: ``Halt``;
- any other group is scalar code: a record of the fast path whose contract the instruction has
  (sim/diannao/scalar.py: ``RegisterOp``, ``AddImmediate``, ``Branch``, ``ScalarAccess``, ...), else a
  ``GenericScalar`` that the spec's semantics run. Its memory operands (shape and address from the spec) move
  their bytes to or from the registers.

A copy (the ``dma`` unit) or a scalar access that reads or writes GMEM or SMEM holds the card's GMEM port or
its cluster's SMEM port for its bytes at the port's rate (the config's), and waits for it: its ``ports``.

A tensor instruction whose timing is ``async`` costs its core one cycle to issue; its unit's time (what it
would cost synchronously) is its plan's ``background``. Every tensor instruction carries the byte extent of
each memory operand (``footprint``), which the machine checks against the core's outstanding asynchronous
work.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

import isa
from isa.asm import format_insn
from isa.dtypes import DTYPES
from isa.instance import reads_operands
from isa.lang.scalar import compile_scalar, evaluate
from isa.lang.tree import Name
from sim.diannao.config import DiannaoConfig
from sim.diannao.errors import LaunchError
from sim.diannao.functional import fast_path
from sim.diannao.scalar import (
    ACCESSES,
    ADDI,
    BARRIER,
    BRANCHES,
    FCVT,
    FLOAD,
    FLOAT_OPS,
    HALT,
    INTEGER_OPS,
    LI,
    LOAD,
    LOAD_FORMATS,
    RDID,
    REGISTER_FILES,
    SCALAR,
    STORE_FORMATS,
    STORE_MASKS,
    TENSOR,
    WAIT,
    scalar_kind,
)

TENSOR_GROUPS = ("dma", "vector", "unary", "tensor")
SHARED = ("GMEM", "SMEM")  # the spaces behind a shared port


# ------------------------------------------------------------------------------------------------- records
# One record per kind of decoded instruction; ``kind`` (sim/diannao/scalar.py) is what the interpreter tests.
class RegisterOp(NamedTuple):
    """An integer (ADD..SLT) or float (FADD..FMIN) op: register rd of its file = rs1 op rs2."""

    kind: int
    rd: int
    rs1: int
    rs2: int


class Convert(NamedTuple):
    """FCVT: F[rd] = R[rs1] rounded to f32."""

    kind: int
    rd: int
    rs1: int


class AddImmediate(NamedTuple):
    """ADDI: R[rd] = R[rs1] + imm, wrapping to 32 bits."""

    kind: int
    rd: int
    rs1: int
    imm: int


class LoadImmediate(NamedTuple):
    """LI: R[rd] = imm."""

    kind: int
    rd: int
    imm: int


class ReadId(NamedTuple):
    """RDID: R[rd] = the id register ``which`` (core id, cluster id, cores per cluster, clusters)."""

    kind: int
    rd: int
    which: int


class Branch(NamedTuple):
    """BEQ, BNE, BLT, BGE: to ``target`` if R[rs1] compares so with R[rs2], else on; JMP: to ``target``."""

    kind: int
    rs1: int
    rs2: int
    target: int


class ScalarAccess(NamedTuple):
    """LOAD, STORE (register file R) or FLOAD, FSTORE (F): one ``element`` between register ``reg`` and the
    memory ``space`` at byte address R[base] + offset."""

    kind: int
    reg: int
    base: int
    offset: int
    space: int                 # the space code
    element: struct.Struct     # the element's format in memory
    mask: int                  # the low bits of R an integer store keeps
    shared: bool               # GMEM or SMEM: the access runs in global time order


class GenericScalar(NamedTuple):
    """SCALAR: a scalar instruction no fast path implements, run by the spec's semantics."""

    kind: int
    insn: isa.Insn
    files: tuple[str, ...]     # the register files its semantics name (of REGISTER_FILES)
    memory: bool               # it has memory operands
    shared: bool               # one of them is in GMEM or SMEM: it runs in global time order


class TensorOp(NamedTuple):
    """TENSOR: a tensor instruction (copy, vector, unary, conv, matmul)."""

    kind: int
    fast: Callable | None      # the numpy fast path of its contract, or None: the generic executor runs it
    fields: dict[str, int]
    dtype: np.dtype | None     # the numpy dtype of T, if it has one
    shared: bool               # touches GMEM or SMEM: runs in global time order
    addresses: tuple[tuple[str, Callable], ...]  # operand -> its address, where that reads registers
    rules: tuple[Callable, ...]                   # the spec's rules that read registers
    dynamic: bool              # it has addresses or rules that read registers
    footprint: tuple[Footprint, ...] = ()         # each memory operand's bytes, from its resolved address
    clusters: tuple[tuple[str, Callable], ...] = ()  # operand -> the cluster whose SMEM it lies in (a
    #                                                  ``cluster`` in the spec): resolved as "<name>.cluster"


class Footprint(NamedTuple):
    """The bytes a tensor operand spans: from its address (``fields[key]`` once resolved) for ``extent``
    bytes (its first to its last element, strides included) in the space of code ``space``."""

    key: str
    space: int
    extent: int
    written: bool
    cluster: str | None   # in the SMEM of the cluster ``fields[cluster]`` (an operand's ``cluster``), or None


class Barrier(NamedTuple):
    """BARRIER: wait for every core of ``scope`` (enum scope: this cluster, or every launched core)."""

    kind: int
    scope: int


class Wait(NamedTuple):
    """WAIT: the core waits until its asynchronous instructions are done."""

    kind: int


class Halt(NamedTuple):
    """HALT: this core's kernel ends."""

    kind: int


class MemoryOperand(NamedTuple):
    """A memory operand of one instance: its name, the space it lies in, its size, whether it is written."""

    name: str
    space: str
    nbytes: int
    written: bool
    remote: bool = False   # in the SMEM of the cluster its ``cluster`` names, not the issuing core's


@dataclass(frozen=True, slots=True)
class Plan:
    """What the machine knows about one instruction before running it."""

    op: tuple                  # the decoded record the interpreter runs
    unit: str                  # timing unit of the spec ("scalar", "vfu", "tfu", "dma", "ctrl")
    cycles: int                # core cycles of one execution (without waiting)
    work: int                  # cycles of the spec's "cycles" (throughput part), for unit utilization
    moves: tuple[tuple[str, int], ...] = ()   # ("GMEM->NMEM", bytes) per execution
    ports: tuple[tuple[str, int], ...] = ()   # ("gmem" | "smem" | "smem:<operand>", cycles held) per run
    background: int = 0        # an asynchronous instruction: its unit's cycles (``cycles`` is the issue)
    engine: int = 0            # which of the unit's engines runs it (the timing's ``engine``)

    @property
    def queue(self) -> str:
        """The queue it waits in and occupies: its unit's, or its engine's past the first ("dma1")."""
        return f"{self.unit}{self.engine}" if self.engine else self.unit

    @property
    def tensor(self) -> bool:
        """Whether it is a tensor instruction (counted apart from scalar code)."""
        return self.op.kind == TENSOR


# ------------------------------------------------------------------------------------------------ decoding
class Decoder:
    """Decodes the instructions of programs for one spec and card (see the module docstring). With ``fast``
    False, every instruction decodes to the generic executor's record, none to a fast path."""

    def __init__(self, program: isa.Program, config: DiannaoConfig, space_names: dict[int, str],
                 fast: bool = True) -> None:
        self.spec = program.isa
        self.config = config
        self.space_names = space_names
        self.fast = fast
        self.fast_paths: dict[str, Callable | None] = {}
        self.scalar_kinds: dict[str, int | None] = {}

    def plans(self, program: isa.Program) -> list[Plan]:
        """The plan of every instruction of ``program``, in order."""
        return [self.plan(pc, insn) for pc, insn in enumerate(program.insns)]

    def plan(self, pc: int, insn: isa.Insn) -> Plan:
        """The plan of ``insn`` at ``pc``: its record, unit, cycles, moves and ports."""
        spec = self.spec
        instr = spec.instruction(insn.name)
        unit, latency, cycles = isa.timing_of(spec, insn)
        latency, cycles = latency or 1, max(cycles or 1, 1)
        if instr.group in TENSOR_GROUPS:
            return self.tensor(pc, insn, instr, unit, latency, cycles)
        for key, given in (("async", instr.timing.asynchronous), ("engine", instr.timing.engine is not None)):
            if given:   # the units with queues (and engines) are those of tensor instructions
                self.refuse(pc, insn, f"its timing has '{key}', which this machine runs for tensor "
                            f"instructions ({', '.join(TENSOR_GROUPS)}), not for group {instr.group!r}")
        if instr.group in ("sync", "wait", "control"):
            if instr.statements:
                self.refuse(pc, insn, f"group {instr.group!r} has no semantics, but this one has some")
            if instr.group == "sync" and insn.get("scope") is None:
                self.refuse(pc, insn, "a barrier (group 'sync') needs a field 'scope' (enum scope)")
            record = {"sync": lambda: Barrier(BARRIER, insn["scope"]), "wait": lambda: Wait(WAIT),
                      "control": lambda: Halt(HALT)}[instr.group]()
            return Plan(record, unit, latency + cycles - 1, cycles)  # a barrier: from the last arrival
        return self.scalar(pc, insn, instr, unit, latency, cycles)

    def refuse(self, pc: int, insn: isa.Insn, why: str):
        """Raise the LaunchError of an instruction this machine cannot run, saying ``why``."""
        text = format_insn(self.spec, insn)
        raise LaunchError(f"pc {pc} ({text}): the DianNao simulator cannot run '{insn.name}': {why}",
                          pc=pc, insn=text)

    def ports(self, spaces, nbytes: int, remote: tuple[str, ...] = ()) -> tuple[tuple[str, int], ...]:
        """The ports a transfer of ``nbytes`` to or from ``spaces`` holds, each for its cycles; ``remote``:
        the operands in another cluster's SMEM, each holding that cluster's port ("smem:<operand>")."""
        out = []
        if "GMEM" in spaces:
            out.append(("gmem", -(-nbytes // self.config.gmem_bytes_per_cycle)))
        smem = -(-nbytes // self.config.smem_bytes_per_cycle)
        if "SMEM" in spaces:
            out.append(("smem", smem))
        out += [(f"smem:{name}", smem) for name in remote]
        return tuple(out)

    # ------------------------------------------------------------------ memory operands
    def memory_operands(self, insn: isa.Insn, instr: isa.Instruction) -> list[MemoryOperand]:
        """The memory operands of ``insn``, their shapes evaluated on its fields."""
        types = self.spec.types_of(insn)
        sem = instr.typed_semantics(types)
        env = self.spec.scalar_env(insn.values, types)
        out = []
        for op in instr.operands:
            if op.kind != "tensor":
                continue
            code = insn[op.space] if op.space_is_field else self.spec.spaces[op.space].id
            elements = 1
            for e in op.shape:
                elements *= int(evaluate(e, env))
            nbytes = elements * DTYPES[instr.operand_dtype(op, types)].bytes
            out.append(MemoryOperand(op.name, self.space_names[code], nbytes, op.name in sem.writes,
                                     op.cluster is not None))
        return out

    # ------------------------------------------------------------------ tensor instructions
    def tensor(self, pc: int, insn: isa.Insn, instr: isa.Instruction, unit: str, latency: int,
               cycles: int) -> Plan:
        """The plan of a tensor instruction: a DMA copy holds the ports of the spaces it copies between."""
        spec = self.spec
        f = insn.values
        types = spec.types_of(insn)
        dt = np.dtype(DTYPES[types["T"]].numpy) if "T" in types else None
        moves: tuple[tuple[str, int], ...] = ()
        ports: tuple[tuple[str, int], ...] = ()
        clustered = [op for op in instr.operands if op.cluster is not None]
        if clustered:
            self.check_clusters(pc, insn, instr, clustered)
        if unit == "dma":
            operands = self.memory_operands(insn, instr)
            for src in (op for op in operands if not op.written):
                for dst in (op for op in operands if op.written):
                    moves += ((f"{src.space}->{dst.space}", dst.nbytes),)
                    local = {op.space for op in (src, dst) if not op.remote}
                    ports += self.ports(local, dst.nbytes, tuple(op.name for op in (src, dst) if op.remote))
        duration = latency + max([cycles] + [c for _, c in ports]) - 1
        env = spec.scalar_env(f, types)
        addresses = tuple((op.name, compile_scalar(op.addr, env)) for op in instr.operands
                          if op.kind == "tensor" and not isinstance(op.addr, Name))
        clusters = tuple((op.name, compile_scalar(op.cluster, env)) for op in clustered)
        rules = tuple(compile_scalar(c.rule, env) for c in instr.constraints if reads_operands(c))
        # the fast paths address the issuing core's memories: an operand in another cluster's SMEM takes the
        # spec's semantics (functional.operand_views reads its cluster)
        fast = None if clustered else self.fast_path(instr)
        record = TensorOp(TENSOR, fast, f, dt, bool(ports) or bool(clustered), addresses, rules,
                          bool(addresses or rules or clusters), self.footprint(insn, instr), clusters)
        try:
            engine = isa.engine_of(spec, insn)
        except ValueError as e:
            self.refuse(pc, insn, str(e))
        if instr.timing.asynchronous:
            return Plan(record, unit, 1, cycles, moves, ports, background=duration, engine=engine)
        return Plan(record, unit, duration, cycles, moves, ports, engine=engine)

    def check_clusters(self, pc: int, insn: isa.Insn, instr: isa.Instruction, clustered) -> None:
        """Refuse an operand ``cluster`` this machine does not run: on a space of which clusters have no copy
        each (only SMEM has), or on an asynchronous instruction (its outstanding bytes would lie in another
        cluster, where the core's hazard checks do not look)."""
        for op in clustered:
            code = insn[op.space] if op.space_is_field else self.spec.spaces[op.space].id
            if self.space_names[code] != "SMEM":
                self.refuse(pc, insn, f"operand '{op.name}' names a cluster, but it lies in "
                            f"{self.space_names[code]}, of which clusters have no copy each (SMEM has)")
        if instr.timing.asynchronous:
            self.refuse(pc, insn, f"operand '{clustered[0].name}' names a cluster, and this machine runs a "
                        "copy to or from another cluster's SMEM synchronously (not 'async')")

    def footprint(self, insn: isa.Insn, instr: isa.Instruction) -> tuple[Footprint, ...]:
        """Each memory operand's span in bytes, first to last element (its strides, the spec's or row-major),
        keyed by the field its address lands in (``TensorOp.fields`` once resolved)."""
        types = self.spec.types_of(insn)
        env = self.spec.scalar_env(insn.values, types)
        written = instr.typed_semantics(types).writes
        out = []
        for op in instr.operands:
            if op.kind != "tensor":
                continue
            shape = [int(evaluate(e, env)) for e in op.shape]
            if op.strides:
                strides = [int(evaluate(e, env)) for e in op.strides]
            else:
                strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
            size = DTYPES[instr.operand_dtype(op, types)].bytes
            last = sum((n - 1) * st for n, st in zip(shape, strides, strict=True))
            extent = 0 if 0 in shape else last + 1
            code = insn[op.space] if op.space_is_field else self.spec.spaces[op.space].id
            key = op.addr.id if isinstance(op.addr, Name) else op.name
            out.append(Footprint(key, code, extent * size, op.name in written,
                                 None if op.cluster is None else f"{op.name}.cluster"))
        return tuple(out)

    def fast_path(self, instr: isa.Instruction) -> Callable | None:
        """The numpy fast path of tensor instruction ``instr`` (by its contract), or None."""
        if not self.fast:
            return None
        if instr.name not in self.fast_paths:
            self.fast_paths[instr.name] = fast_path(instr)
        return self.fast_paths[instr.name]

    # ------------------------------------------------------------------ scalar instructions
    def scalar(self, pc: int, insn: isa.Insn, instr: isa.Instruction, unit: str, latency: int,
               cycles: int) -> Plan:
        """The plan of a scalar instruction: its fast path's record, or the generic executor's; its memory
        operands move their bytes between the registers and their spaces."""
        operands = self.memory_operands(insn, instr)
        moves = tuple((f"REG->{op.space}" if op.written else f"{op.space}->REG", op.nbytes)
                      for op in operands)
        shared = [op for op in operands if op.space in SHARED]
        ports = self.ports({op.space for op in shared}, sum(op.nbytes for op in shared)) if shared else ()
        duration = latency + max([cycles] + [c for _, c in ports]) - 1
        kind = self.scalar_kind(instr) if self.fast else None
        if kind is None:
            record = self.generic(pc, insn, instr, bool(operands), bool(shared))
        else:
            record = self.fast_record(kind, insn, instr, bool(shared))
        return Plan(record, unit, duration, cycles, moves, ports)

    def scalar_kind(self, instr: isa.Instruction) -> int | None:
        """The scalar fast path kind of ``instr`` (by its contract), or None."""
        if instr.name not in self.scalar_kinds:
            self.scalar_kinds[instr.name] = scalar_kind(instr)
        return self.scalar_kinds[instr.name]

    def fast_record(self, kind: int, insn: isa.Insn, instr: isa.Instruction, shared: bool) -> tuple:
        """The record of a scalar instruction whose contract is fast path ``kind``; the contract names its
        fields."""
        f = insn.values
        if kind in INTEGER_OPS or kind in FLOAT_OPS:
            return RegisterOp(kind, f["rd"], f["rs1"], f["rs2"])
        if kind == FCVT:
            return Convert(kind, f["rd"], f["rs1"])
        if kind == ADDI:
            return AddImmediate(kind, f["rd"], f["rs1"], f["imm"])
        if kind == LI:
            return LoadImmediate(kind, f["rd"], f["imm"])
        if kind == RDID:
            return ReadId(kind, f["rd"], f["which"])
        if kind in BRANCHES:
            return Branch(kind, f.get("rs1", 0), f.get("rs2", 0), f["target"])
        assert kind in ACCESSES, kind
        dtype = instr.operand_dtype(instr.operand("m"), self.spec.types_of(insn))
        load = kind in (LOAD, FLOAD)
        element = struct.Struct(LOAD_FORMATS[dtype] if load else STORE_FORMATS[dtype])
        return ScalarAccess(kind, f["rd"] if load else f["rs2"], f["rs1"], f["imm"], f["space"], element,
                            STORE_MASKS.get(dtype, 0), shared)

    def generic(self, pc: int, insn: isa.Insn, instr: isa.Instruction, memory: bool,
                shared: bool) -> GenericScalar:
        """The record of a scalar instruction the spec's semantics run; refused if its semantics name
        register state this machine does not have, or write its id registers."""
        files = tuple(op.name for op in instr.operands if op.kind != "tensor")
        if unknown := [name for name in files if name not in REGISTER_FILES]:
            self.refuse(pc, insn, f"its register operand(s) {', '.join(map(repr, unknown))} name no register "
                        f"state of the machine (it has {', '.join(REGISTER_FILES)})")
        if "ids" in instr.typed_semantics(self.spec.types_of(insn)).writes:
            self.refuse(pc, insn, "it writes the id registers 'ids', which are read only")
        return GenericScalar(SCALAR, insn, files, memory, shared)
