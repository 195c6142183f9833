"""Scalar instructions that exist only in a spec file run on sim/diannao with no Python edit (issue 44): the
scalar unit runs any scalar instruction the spec describes, through the spec's semantics where no fast path
has its contract, and times it by the spec's timing.

- ``smin`` (R[rd] = min(R[rs1], R[rs2])), written as the built-in spec writes ``add``, gives numpy's minimum
  on edge values and takes the cycles its timing says;
- a branch (``bgt``) and an indexed load (``ldx``, GMEM through the shared port) from a spec file give the
  results and cycles of the built-in instructions they equal;
- every built-in scalar instruction gives the same memory and cycles through the generic executor
  (``fast=False``) as through its fast path;
- an instruction whose semantics name register state the machine lacks is refused by name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import isa
from sim.diannao.errors import LaunchError
from sim.diannao.machine import Card, DiannaoResult
from sim.diannao.scalar import scalar_kind

HEADER = """\
[isa]
name = "diannao"
extends = "diannao"
summary = "DianNao with scalar instructions of a test"
"""

SMIN = """
[instructions.smin]
summary = "R[rd] = min(R[rs1], R[rs2]) (signed)"
format = "rrr"
fixed = {{ opcode = 82 }}
operands = [ {{ name = "R", kind = "register", dtype = "i32", shape = ["NUM_REGS"] }} ]
semantics = "R[rd] = min(R[rs1], R[rs2])"
timing = {{ unit = "scalar", latency = "{latency}", cycles = 1 }}
group = "scalar"
"""

BGT = """
[instructions.bgt]
summary = "branch to target if R[rs1] > R[rs2] (signed)"
format = "branch"
fixed = { opcode = 101 }
operands = [
  { name = "R", kind = "register", dtype = "i32", shape = ["NUM_REGS"] },
  { name = "pc", kind = "register", dtype = "i32", shape = [1] },
]
semantics = "pc[0] = select(R[rs1] > R[rs2], target, pc[0] + 1)"
timing = { unit = "ctrl", latency = "BRANCH_LATENCY", cycles = 1 }
group = "branch"
"""

LDX = """
[formats.loadx]
summary = "indexed scalar load: R[rd] = the word at R[rs1] + 4 * R[rs2] in space"
fields = [
  { name = "opcode", bits = 8 },
  { name = "rd", bits = 5, kind = "reg", max = "NUM_REGS - 1" },
  { name = "rs1", bits = 5, kind = "reg", max = "NUM_REGS - 1" },
  { name = "rs2", bits = 5, kind = "reg", max = "NUM_REGS - 1" },
  { name = "space", bits = 2, kind = "enum", enum = "space" },
]

[instructions.ldx]
summary = "R[rd] = the 32-bit word at R[rs1] + 4 * R[rs2] in space"
format = "loadx"
fixed = { opcode = 95 }
operands = [
  { name = "R", kind = "register", dtype = "i32", shape = ["NUM_REGS"] },
  { name = "m", kind = "tensor", space = "space", dtype = "i32", shape = [1], addr = "R[rs1] + 4 * R[rs2]" },
]
semantics = "R[rd] = m[0]"
group = "scalar_mem"

[instructions.ldx.timing]          # ld's: the latency of the level accessed
unit = "scalar"
latency = "select(space == GMEM, GMEM_LATENCY, select(space == SMEM, SMEM_LATENCY, LOCAL_LATENCY))"
cycles = 1
"""

I32_EDGES = [-(2**31), -(2**31) + 1, -1, 0, 1, 2**31 - 2, 2**31 - 1]


def spec_file(tmp_path: Path, *instructions: str, name: str = "extended") -> isa.ISA:
    """The built-in DianNao spec extended by ``instructions`` (TOML text), loaded from a file."""
    path = tmp_path / f"{name}.toml"
    path.write_text(HEADER + "".join(instructions))
    return isa.load_spec_file(path)


def kernel(spec: isa.ISA, *lines: str) -> isa.Program:
    """The program of assembly ``lines`` for ``spec``, ending with halt."""
    return isa.assemble("\n".join([".isa diannao", ".text", *lines, "halt"]) + "\n", spec)


def launch(spec: isa.ISA, program: isa.Program, cores: int = 1, args=(), fast: bool = True,
           gmem: np.ndarray | None = None) -> tuple[DiannaoResult, Card]:
    card = Card("default", spec=spec)
    if gmem is not None:
        args = [card.to_gmem(gmem).addr, *args]
    return card.launch(program, cores=cores, args=args, fast=fast), card


def words(card: Card, n: int, core: int = 0) -> list[int]:
    """The first ``n`` words of ``core``'s NMEM."""
    return card.memory.nmem[core][:4 * n].view(np.int32).tolist()


def spec_cycles(spec: isa.ISA, program: isa.Program) -> int:
    """The cycles of a straight-line, core-local program on one core: each instruction's latency + cycles - 1
    of its spec's timing, one after another."""
    total = 0
    for insn in program.insns:
        _, latency, cycles = isa.timing_of(spec, insn)
        total += latency + cycles - 1
    return total


# ---------------------------------------------------------------------------------------------------- smin
SMIN_PROGRAM = ["smin r2, r0, r1", "smin r3, r1, r0", "smin r4, r0, r0",
                "st rs1=r5, rs2=r2, space=NMEM, imm=0", "st rs1=r5, rs2=r3, space=NMEM, imm=4",
                "st rs1=r5, rs2=r4, space=NMEM, imm=8"]


@pytest.mark.parametrize("a", I32_EDGES)
def test_smin_from_a_spec_file_gives_the_minimum_of_two_registers(tmp_path, a):
    spec = spec_file(tmp_path, SMIN.format(latency="SCALAR_LATENCY"))
    assert scalar_kind(spec.instruction("smin")) is None  # no fast path: the spec's semantics run it
    program = kernel(spec, *SMIN_PROGRAM)
    for b in I32_EDGES:
        _, card = launch(spec, program, args=[a, b])
        assert words(card, 3) == [min(a, b), min(a, b), a], (a, b)


def test_smin_takes_the_cycles_of_its_spec_timing(tmp_path):
    program_lines = ["li r0, 5", "li r1, -3", *SMIN_PROGRAM]
    results = {}
    for latency in (2, 9):
        spec = spec_file(tmp_path, SMIN.format(latency=latency), name=f"smin{latency}")
        program = kernel(spec, *program_lines)
        result, card = launch(spec, program)
        assert words(card, 3) == [-3, -3, 5]
        assert result.cycles == spec_cycles(spec, program)
        assert result.instructions["smin"] == 3 and result.scalar_instructions == len(program.insns)
        results[latency] = result
    assert results[9].cycles - results[2].cycles == 3 * (9 - 2)
    scalar = [r.cores[0].unit_cycles["scalar"] for r in results.values()]
    assert scalar[0] == scalar[1]  # unit cycles count the timing's cycles (1 each), not its latency


# ------------------------------------------------------------------------------------- branches and memory
def test_a_branch_from_a_spec_file_loops_like_the_built_in_branch_it_equals(tmp_path):
    spec = spec_file(tmp_path, BGT)
    loop = ["li r1, 10", "li r2, 0", "top:", "addi r1, r1, -1", "addi r3, r3, 2"]
    done = ["st rs1=r2, rs2=r3, space=NMEM, imm=0", "st rs1=r2, rs2=r1, space=NMEM, imm=4"]
    new, new_card = launch(spec, kernel(spec, *loop, "bgt r1, r2, top", *done))
    old, old_card = launch(spec, kernel(spec, *loop, "blt r2, r1, top", *done))
    assert words(new_card, 2) == words(old_card, 2) == [20, 0]
    assert new.instructions["bgt"] == old.instructions["blt"] == 10
    assert new.cycles == old.cycles
    assert new.cores[0].unit_cycles == old.cores[0].unit_cycles


def test_a_load_from_a_spec_file_reads_gmem_through_the_shared_port_like_ld(tmp_path):
    spec = spec_file(tmp_path, LDX)
    table = np.arange(100, 164, dtype=np.int32)
    store = ["li r9, 0", "st rs1=r9, rs2=r2, space=NMEM, imm=0"]  # each core's own NMEM
    for cores in (1, 16):  # 16: every core waits for the one GMEM port in turn
        new, new_card = launch(spec, kernel(spec, "li r1, 3", "ldx rd=r2, rs1=r0, rs2=r1, space=GMEM",
                                            *store), cores=cores, gmem=table)
        old, old_card = launch(spec, kernel(spec, "li r1, 3", "ld rd=r2, rs1=r0, space=GMEM, imm=12", *store),
                               cores=cores, gmem=table)
        for core in range(cores):
            assert words(new_card, 1, core) == words(old_card, 1, core) == [103]
        assert new.bytes_moved == old.bytes_moved == {"GMEM->REG": 4 * cores, "REG->NMEM": 4 * cores}
        assert new.cycles == old.cycles
        assert [c.stalled for c in new.cores] == [c.stalled for c in old.cores]


def test_a_load_from_a_spec_file_outside_its_memory_is_an_out_of_bounds_error(tmp_path):
    from sim.diannao.errors import OutOfBoundsError

    spec = spec_file(tmp_path, LDX)
    program = kernel(spec, "li r0, 0", "li r1, -1", "ldx rd=r2, rs1=r0, rs2=r1, space=NMEM")
    with pytest.raises(OutOfBoundsError, match="pc 2 .*ldx.*operand 'm'"):
        launch(spec, program)


# -------------------------------------------------------------------------- the generic executor, everywhere
EVERY_SCALAR = [
    "rdid r1, CORE_ID", "rdid r2, CLUSTER_ID", "rdid r3, CORE_DIM", "mul r5, r2, r3", "add r6, r5, r1",
    "li r7, 64", "mul r8, r6, r7", "li r9, -12345", "li r10, 7", "li r20, 0", "li r21, 4",
    "loop:",
    "add r11, r9, r10", "sub r12, r9, r10", "and r13, r9, r10", "or r14, r9, r10", "xor r15, r9, r10",
    "sll r16, r9, r10", "sra r17, r9, r10", "srl r18, r9, r10", "slt r19, r9, r10",
    "st rs1=r8, rs2=r11, space=GMEM, imm=0", "ste.i8 rs1=r8, rs2=r12, space=SMEM, imm=4",
    "ste.i16 rs1=r8, rs2=r13, space=NMEM, imm=8", "ld rd=r22, rs1=r8, space=GMEM, imm=0",
    "lde.i8 rd=r23, rs1=r8, space=SMEM, imm=4", "lde.i16 rd=r24, rs1=r8, space=NMEM, imm=8",
    "fcvt r1, r9", "fcvt r2, r10", "fadd r3, r1, r2", "fsub r4, r1, r2", "fmul r5, r1, r2",
    "fmax r6, r1, r2", "fmin r7, r1, r2",
    "fst.f32 rs1=r8, rs2=r3, space=GMEM, imm=12", "fst.f16 rs1=r8, rs2=r5, space=SMEM, imm=16",
    "fld.f32 rd=r9, rs1=r8, space=GMEM, imm=12", "fld.f16 rd=r10, rs1=r8, space=SMEM, imm=16",
    "st rs1=r8, rs2=r19, space=WMEM, imm=20", "addi r9, r9, 999", "addi r10, r10, 3",
    "barrier CLUSTER", "beq r20, r21, done", "bne r20, r0, skip", "barrier ALL", "skip:",
    "addi r20, r20, 1", "bge r20, r21, done", "blt r21, r20, done", "jmp loop",
    "done:",
    *(f"st rs1=r8, rs2=r{r}, space=GMEM, imm={24 + 4 * k}" for k, r in enumerate((14, 15, 16, 17, 18, 22, 23,
                                                                                  24))),
    "fst.f32 rs1=r8, rs2=r4, space=GMEM, imm=56", "fst.f32 rs1=r8, rs2=r6, space=GMEM, imm=60",
    "fst.f32 rs1=r8, rs2=r7, space=NMEM, imm=60",
]


def test_every_built_in_scalar_instruction_runs_alike_through_the_generic_executor():
    spec = isa.load_isa("diannao")
    program = kernel(spec, *EVERY_SCALAR)
    scalar = {i.name for i in spec.instructions.values() if scalar_kind(i) is not None}
    assert scalar <= {insn.name for insn in program.insns}  # every fast path runs here
    fast, fast_card = launch(spec, program, cores=8)
    slow, slow_card = launch(spec, program, cores=8, fast=False)
    assert fast == slow  # cycles, per-core counters, instruction counts, bytes moved
    assert fast_card.memory.gmem[:8 * 64].tobytes() == slow_card.memory.gmem[:8 * 64].tobytes()
    for kind in ("smem", "nmem", "wmem"):
        for a, b in zip(getattr(fast_card.memory, kind), getattr(slow_card.memory, kind), strict=True):
            assert a[:1024].tobytes() == b[:1024].tobytes(), kind


def test_an_instruction_naming_register_state_the_machine_lacks_cannot_run(tmp_path):
    spec = spec_file(tmp_path, """
[instructions.qmov]
summary = "Q[rd] = R[rs1]: a register file the DianNao machine does not have"
format = "rrr"
fixed = { opcode = 83 }
operands = [
  { name = "Q", kind = "register", dtype = "i32", shape = ["NUM_REGS"] },
  { name = "R", kind = "register", dtype = "i32", shape = ["NUM_REGS"] },
]
semantics = "Q[rd] = R[rs1]"
timing = { unit = "scalar", latency = "SCALAR_LATENCY", cycles = 1 }
group = "scalar"
""")
    with pytest.raises(LaunchError, match=r"pc 0 \(qmov .*cannot run 'qmov': .*'Q' name no register state"):
        launch(spec, kernel(spec, "qmov r1, r2, r3"))
