"""sim/diannao/blocks.py: runs of core-local scalar code compiled to Python functions change nothing: random
loops of register ops and NMEM/WMEM loads and stores run with blocks and with the interpreter alone give the
same memories, cycles, per-instruction counts and results; an access out of bounds and a runaway loop raise
the same error at the same instruction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from sim.diannao import machine
from sim.diannao.config import load_config
from sim.diannao.errors import DiannaoError
from sim.diannao.machine import Card

SPEC = isa.load_isa("diannao")
OPS = ("add", "sub", "mul", "and", "or", "xor", "slt", "sll", "sra", "srl")
FLOATS = ("fadd", "fsub", "fmul", "fmax", "fmin")
ACCESSES = ("ld", "st", "lde.i32", "lde.i8", "lde.i16", "ste.i32", "ste.i8", "ste.i16", "fld.f32", "fld.f16",
            "fst.f32", "fst.f16")
registers = st.integers(1, 12)   # r13.. run the loop; r0 is 0
EDGES = [-(2**31), -(2**31) + 1, -65536, -33, -1, 0, 1, 31, 32, 33, 65535, 2**31 - 2, 2**31 - 1]
immediates = st.one_of(st.sampled_from(EDGES), st.integers(-(2**31), 2**31 - 1))
ARGS = [0, 7, -3, 1 << 20, 5, 2**31 - 1, -(2**31), 33, -1, 0x12345678, 31, 2**31 - 2, -65536]


@st.composite
def bodies(draw) -> list[str]:
    """A loop body: register ops, immediates and accesses to the core's own memories at small addresses."""
    lines = []
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["op", "op", "float", "addi", "li", "fcvt", "access"]))
        rd, rs1, rs2 = draw(registers), draw(registers), draw(registers)
        if kind == "op":
            lines.append(f"{draw(st.sampled_from(OPS))} r{rd}, r{rs1}, r{rs2}")
        elif kind == "float":
            lines.append(f"{draw(st.sampled_from(FLOATS))} rd=r{rd}, rs1=r{rs1}, rs2=r{rs2}")
        elif kind == "addi":
            lines.append(f"addi r{rd}, r{rs1}, {draw(immediates)}")
        elif kind == "li":
            lines.append(f"li r{rd}, {draw(immediates)}")
        elif kind == "fcvt":
            lines.append(f"fcvt rd=r{rd}, rs1=r{rs1}")
        else:
            name = draw(st.sampled_from(ACCESSES))
            space = draw(st.sampled_from(["NMEM", "WMEM"]))
            field = "rs2" if name.startswith(("st", "fst")) else "rd"
            lines.append(f"{name} {field}=r{rd}, rs1=r0, space={space}, imm={draw(st.integers(0, 64))}")
    return lines


def run(program: isa.Program, blocks: bool, budget: int | None = None, monkeypatch=None):
    """(result or the error's class and text, NMEM and WMEM of core 0) of ``program`` on one core."""
    config = load_config("default")
    if budget is not None:
        config = dataclasses.replace(config, instruction_budget=budget)
    card = Card(config, spec=SPEC)
    card.memory.nmem[0][:] = np.arange(card.memory.nmem[0].size, dtype=np.uint64).astype(np.uint8)
    with pytest.MonkeyPatch.context() as patch:
        if not blocks:
            patch.setattr(machine, "compile_block", lambda *a: None)
        try:
            result = card.launch(program, cores=1, args=ARGS)
            outcome = (result.cycles, result.executed, result.instructions, result.scalar_instructions)
        except DiannaoError as e:
            outcome = (type(e).__name__, str(e))
    return outcome, card.memory.nmem[0].copy(), card.memory.wmem[0].copy()


def loop(body: list[str], times: int) -> isa.Program:
    """``body`` run ``times`` times, then every register it may write stored to NMEM from byte 1024: R's
    low 32 bits and its sign (a value the interpreter wraps that a block did not would show in one of them),
    and F."""
    shown = []
    for k in range(1, 13):
        shown += [f"st rs1=r0, rs2=r{k}, space=NMEM, imm={1024 + 12 * k}", f"slt r20, r{k}, r0",
                  f"st rs1=r0, rs2=r20, space=NMEM, imm={1028 + 12 * k}",
                  f"fst.f32 rs1=r0, rs2=r{k}, space=NMEM, imm={1032 + 12 * k}"]
    return isa.assemble("\n".join([".isa diannao", ".text", "li r13, 0", f"li r14, {times}", "top:", *body,
                                   "addi r13, r13, 1", "blt r13, r14, top", *shown, "halt"]) + "\n")


def same(a, b) -> None:
    assert a[0] == b[0]
    assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])


@settings(max_examples=100, deadline=None)
@given(body=bodies(), times=st.integers(1, 5))
def test_random_loops_run_the_same_with_blocks_and_with_the_interpreter(body, times) -> None:
    program = loop(body, times)
    same(run(program, blocks=True), run(program, blocks=False))


def test_the_loop_runs_as_blocks() -> None:
    program = loop(["add r1, r2, r3", "lde.i32 rd=r4, rs1=r0, space=NMEM, imm=8", "mul r5, r4, r1"], 3)
    compiled = []
    real = machine.compile_block
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(machine, "compile_block", lambda *a: compiled.append(real(*a)) or compiled[-1])
        Card("default", spec=SPEC).launch(program, cores=1)
    assert any(b is not None and b.length == 5 for b in compiled)   # the body, the addi and the branch


def test_an_access_out_of_bounds_fails_at_the_same_instruction() -> None:
    size = SPEC.spaces["NMEM"].bytes
    program = loop(["li r1, 4", f"li r2, {size // 8}", "mul r3, r1, r2", "add r3, r3, r3",
                    "lde.i32 rd=r4, rs1=r3, space=NMEM, imm=0"], 2)
    with_blocks, alone = run(program, blocks=True), run(program, blocks=False)
    assert with_blocks[0][0] == "OutOfBoundsError" and "pc 6" in with_blocks[0][1]
    same(with_blocks, alone)


def test_a_runaway_loop_fails_at_the_same_instruction() -> None:
    program = loop(["addi r1, r1, 1", "xor r2, r1, r3", "add r4, r2, r2"], 1000)
    with_blocks, alone = run(program, blocks=True, budget=500), run(program, blocks=False, budget=500)
    assert with_blocks[0][0] == "RunawayLoopError"
    same(with_blocks, alone)


@pytest.mark.parametrize("name", OPS + FLOATS)
def test_every_op_on_every_pair_of_edge_registers_runs_the_same(name) -> None:
    """Each op on every pair of r1..r12 (the arguments: int32's edges, shift amounts past 31 and below 0),
    its results feeding the next, as blocks and as the interpreter."""
    form = "{} rd=r{}, rs1=r{}, rs2=r{}" if name in FLOATS else "{} r{}, r{}, r{}"
    body = [f"fcvt rd=r{k}, rs1=r{k}" for k in range(1, 13)] if name in FLOATS else []
    body += [form.format(name, 1 + (a + b) % 12, a, b) for a in range(1, 13) for b in range(1, 13)]
    program = loop(body, 1)
    same(run(program, blocks=True), run(program, blocks=False))
