"""The DianNao machine's scalar interpreter equals the ISA spec: every scalar instruction it runs by hand
(integer and float arithmetic, immediates, id reads, branches, typed loads and stores) gives, on edge and
random register values, what ``isa.execute`` gives for the same instruction on the same register files.

Each test runs a tiny kernel on one core (registers preloaded through ``args``, floats loaded from GMEM
with ``fld``), stores what it computed to GMEM and reads it back. Edge values run as one kernel looping over
a table of operands in GMEM, with a second instruction on each result that would see bits a store hides
(an integer beyond 32 bits, a float beyond f32). Hypothesis adds random values in random registers (aliases
included) and random straight-line code, checking both whole register files. Floats compare bit for bit,
except that any NaN equals any NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from isa.asm import format_insn
from sim.diannao.machine import Card

SPEC = isa.load_isa("diannao")
P = SPEC.params
NUM_REGS = P["NUM_REGS"]
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
EXAMPLES = settings(max_examples=15, deadline=None)

INTEGER_OPS = ("add", "sub", "mul", "and", "or", "xor", "slt")
SHIFTS = ("sll", "sra", "srl")
FLOAT_OPS = ("fadd", "fsub", "fmul", "fmax", "fmin")
BRANCHES = ("beq", "bne", "blt", "bge")

I32_EDGES = [I32_MIN, I32_MIN + 1, -65536, -33, -32, -1, 0, 1, 2, 31, 32, 33, 65535, 0x12345678, I32_MAX - 1,
             I32_MAX]
SHIFT_AMOUNTS = [I32_MIN, -1000, -33, -32, -1, *range(34), 1000, I32_MAX]
FCVT_EDGES = [*I32_EDGES, 2**24, 2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**31 - 64, 2**31 - 65, 2**31 - 129]
# f32 bit patterns: signed zeros, +-1, 1 + ulp, subnormals (smallest, largest), the smallest normal, the
# largest finite, 2**127, infinities, quiet NaNs of both signs, a signaling NaN, tiny and inexact values
F32_EDGE_BITS = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x3FC00000, 0x3F800001, 0x00000001,
                 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F000000, 0x7F800000,
                 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x0C000000, 0x3DCCCCCD]
F32_EDGES = np.array(F32_EDGE_BITS, np.uint32).view(np.float32)
# values around f16's limits: its largest finite (65504), the first value rounding to inf (65520, a tie
# rounding to even), values just below it, overflow, its smallest subnormal (2**-24), ties at half of it
F16_EDGES = np.array([65504.0, np.nextafter(np.float32(65520.0), np.float32(0)), 65520.0, 65536.0, 1e9,
                      -65520.0, -1e9, 2.0**-24, 2.0**-25, -(2.0**-25), 3 * 2.0**-26, 1.5 * 2.0**-24, 2.0**-26,
                      2.0**-14, 2.0**-14 - 2.0**-25, 1 / 3, 2049.0, 2051.0], np.float32)
with np.errstate(over="ignore"):
    F16_SPECIALS = np.concatenate([F16_EDGES, -F16_EDGES, F32_EDGES]).astype(np.float16)
SPACES = list(SPEC.spaces)
SIZES = {"i8": 1, "i16": 2, "i32": 4, "f16": 2, "f32": 4}
NUMPY = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "f16": np.float16, "f32": np.float32}

i32s = st.one_of(st.sampled_from(I32_EDGES), st.integers(I32_MIN, I32_MAX))
f32s = st.one_of(st.sampled_from(list(F32_EDGES)), st.floats(width=32))
registers = st.integers(0, 29)  # r30, r31: the kernels' own base registers


@pytest.fixture(scope="module")
def card() -> Card:
    """One card for the whole module: every test writes only where it allocated, and reads what it wrote."""
    return Card("default", spec=isa.load_isa("diannao"))


def kernel(*lines: str) -> isa.Program:
    """The program of assembly ``lines`` (labels as "name: insn"), ending with halt."""
    return isa.assemble("\n".join([".isa diannao", ".text", *lines, "halt"]) + "\n")


def the(program: isa.Program, name: str) -> isa.Insn:
    """The one instruction called ``name`` in ``program``."""
    (insn,) = [i for i in program.insns if i.name == name]
    return insn


def int_regs(**values: int) -> np.ndarray:
    """A register file R (np.int32) holding ``values`` (r1=..., ...) and 0 elsewhere."""
    R = np.zeros(NUM_REGS, np.int32)
    for name, v in values.items():
        R[int(name[1:])] = v
    return R


def float_regs(**values: float) -> np.ndarray:
    F = np.zeros(NUM_REGS, np.float32)
    for name, v in values.items():
        F[int(name[1:])] = v
    return F


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Element-wise: equal bits, or both NaN."""
    equal = got.view(np.uint8).reshape(got.size, -1) == want.view(np.uint8).reshape(want.size, -1)
    out = equal.all(axis=1)
    return out | (np.isnan(got) & np.isnan(want)) if np.issubdtype(got.dtype, np.floating) else out


def spec_run(insns: list[isa.Insn], R: np.ndarray, F: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The register files after ``insns`` (register-only instructions), each run by ``isa.execute``."""
    files = {"R": R.copy(), "F": F.copy()}
    for insn in insns:
        reads = {op.name for op in SPEC.instruction(insn.name).operands}
        files.update(isa.execute(SPEC, insn, {k: v for k, v in files.items() if k in reads}))
    return files["R"], files["F"]


def register(name: str) -> tuple[str, int]:
    """("R", 3) for "r3", ("F", 3) for "f3": this file's names for the two register files."""
    return {"r": "R", "f": "F"}[name[0]], int(name[1:])


def check_rows(card: Card, inputs: dict[str, list], compute: list[str], outputs: list[str]) -> list[isa.Insn]:
    """Run ``compute`` on one core once per row of ``inputs`` and check the ``outputs`` registers against
    ``spec_run`` of the same instructions; return those instructions as assembled.

    ``inputs`` maps registers ("r1" of R, "f1" of F) to columns of values, placed in GMEM and loaded (ld,
    fld.f32) before ``compute``; ``outputs`` are stored (st, fst.f32) after it. r5 and r6 run the loop."""
    n = len(next(iter(inputs.values())))
    columns = {reg: np.array(col, np.int32 if reg[0] == "r" else np.float32) for reg, col in inputs.items()}
    src = {reg: card.to_gmem(col).addr for reg, col in columns.items()}
    dst = {reg: card.to_gmem(np.zeros(n, np.uint32)).addr for reg in outputs}
    loads = [f"{'ld' if reg[0] == 'r' else 'fld.f32'} rd=r{register(reg)[1]}, rs1=r5, space=GMEM, "
             f"imm={src[reg]}" for reg in inputs]
    stores = [f"{'st' if reg[0] == 'r' else 'fst.f32'} rs1=r5, rs2=r{register(reg)[1]}, space=GMEM, "
              f"imm={dst[reg]}" for reg in outputs]
    program = kernel("li r5, 0", f"li r6, {4 * n}", "row:", *loads, *compute, *stores, "addi r5, r5, 4",
                     "blt r5, r6, row")
    card.launch(program, cores=1)
    insns = list(program.insns[2 + len(loads):2 + len(loads) + len(compute)])
    got = {reg: card.memory.gmem[dst[reg]:dst[reg] + 4 * n].view(np.int32 if reg[0] == "r" else np.float32)
           for reg in outputs}
    for row in range(n):
        files = {"R": np.zeros(NUM_REGS, np.int32), "F": np.zeros(NUM_REGS, np.float32)}
        for reg, col in columns.items():
            files[register(reg)[0]][register(reg)[1]] = col[row]
        R, F = spec_run(insns, files["R"], files["F"])
        for reg in outputs:
            want = {"R": R, "F": F}[register(reg)[0]][register(reg)[1]:register(reg)[1] + 1]
            if not same_bits(got[reg][row:row + 1], want).all():
                shown = ", ".join(f"{r} = {col[row]!r}" for r, col in columns.items())
                text = "; ".join(format_insn(SPEC, i) for i in insns)
                raise AssertionError(f"{text} with {shown}: {reg} is {got[reg][row]!r} on the machine but "
                                     f"{want[0]!r} in the spec")
    return insns


def pairs(xs, ys) -> tuple[list, list]:
    """Every (x, y) of ``xs`` x ``ys``, as two columns."""
    return [x for x in xs for _ in ys], [y for _ in xs for y in ys]


# ----------------------------------------------------------------------------------------- integer ALU
# "fcvt f4, r3" sees every bit of r3: a result the interpreter forgot to wrap to 32 bits would show there
# even where a store (which keeps the low 32 bits) hides it.
@pytest.mark.parametrize("name", INTEGER_OPS + SHIFTS)
def test_integer_ops_equal_the_spec_on_every_pair_of_edge_values(card, name):
    a, b = pairs(I32_EDGES, SHIFT_AMOUNTS if name in SHIFTS else I32_EDGES)
    check_rows(card, {"r1": a, "r2": b}, [f"{name} r3, r1, r2", "fcvt rd=r4, rs1=r3"], ["r3", "f4"])


@pytest.mark.parametrize("imm", I32_EDGES)
def test_addi_wraps_as_the_spec_says_for_every_edge_immediate(card, imm):
    check_rows(card, {"r1": I32_EDGES}, [f"addi r3, r1, {imm}", "fcvt rd=r4, rs1=r3"], ["r3", "f4"])


def store_all_registers(base: int) -> list[str]:
    """Store r0..r29 to GMEM at ``base``, 4 bytes each (r30 becomes the base)."""
    return [f"li r30, {base}", *[f"st rs1=r30, rs2=r{k}, space=GMEM, imm={4 * k}" for k in range(30)]]


@pytest.mark.parametrize("name", INTEGER_OPS + SHIFTS)
@EXAMPLES
@given(rd=registers, rs1=registers, rs2=registers, data=st.data())
def test_integer_ops_in_any_registers_change_only_rd_as_the_spec_says(card, name, rd, rs1, rs2, data):
    values = data.draw(st.lists(i32s, min_size=30, max_size=30))
    if name in SHIFTS:
        values[rs2] = data.draw(st.one_of(st.sampled_from(SHIFT_AMOUNTS), st.integers(I32_MIN, I32_MAX)))
    out = card.to_gmem(np.zeros(30, np.int32))
    program = kernel(f"{name} r{rd}, r{rs1}, r{rs2}", *store_all_registers(out.addr))
    card.launch(program, cores=1, args=values)
    want = isa.execute(SPEC, program.insns[0], {"R": np.array(values + [0, 0], np.int32)})["R"][:30]
    assert card.from_gmem(out).tolist() == want.tolist(), format_insn(SPEC, program.insns[0])


@EXAMPLES
@given(rd=registers, rs1=registers, imm=i32s, data=st.data())
def test_addi_and_li_in_any_registers_change_only_rd_as_the_spec_says(card, rd, rs1, imm, data):
    values = data.draw(st.lists(i32s, min_size=30, max_size=30))
    for line in (f"addi r{rd}, r{rs1}, {imm}", f"li r{rd}, {imm}"):
        out = card.to_gmem(np.zeros(30, np.int32))
        program = kernel(line, *store_all_registers(out.addr))
        card.launch(program, cores=1, args=values)
        want = isa.execute(SPEC, program.insns[0], {"R": np.array(values + [0, 0], np.int32)})["R"][:30]
        assert card.from_gmem(out).tolist() == want.tolist(), line


# ----------------------------------------------------------------------------------------- float ALU
# A second operation on the result ("fsub f4, f3, f1", "fmul f4, f3, f3") sees any precision the
# interpreter kept beyond f32, which storing the result (rounding it to f32) would hide.
@pytest.mark.parametrize("name", FLOAT_OPS)
def test_float_ops_equal_the_spec_on_every_pair_of_edge_values(card, name):
    a, b = pairs(list(F32_EDGES), list(F32_EDGES))
    check_rows(card, {"f1": a, "f2": b}, [f"{name} rd=r3, rs1=r1, rs2=r2", "fsub rd=r4, rs1=r3, rs2=r1"],
               ["f3", "f4"])


def test_fcvt_rounds_every_edge_integer_as_the_spec_says(card):
    check_rows(card, {"r1": FCVT_EDGES}, ["fcvt rd=r3, rs1=r1", "fmul rd=r4, rs1=r3, rs2=r3"], ["f3", "f4"])


@pytest.mark.parametrize("name", FLOAT_OPS)
@EXAMPLES
@given(rd=registers, rs1=registers, rs2=registers, x=f32s, y=f32s)
def test_float_ops_in_any_registers_equal_the_spec(card, name, rd, rs1, rs2, x, y):
    src = card.to_gmem(np.array([x, y], np.float32))
    out = card.to_gmem(np.zeros(1, np.float32))
    program = kernel(f"li r30, {src.addr}", f"fld.f32 rd=r{rs1}, rs1=r30, space=GMEM, imm=0",
                     f"fld.f32 rd=r{rs2}, rs1=r30, space=GMEM, imm=4",
                     f"{name} rd=r{rd}, rs1=r{rs1}, rs2=r{rs2}",
                     f"fst.f32 rs1=r30, rs2=r{rd}, space=GMEM, imm={out.addr - src.addr}")
    card.launch(program, cores=1)
    F = np.zeros(NUM_REGS, np.float32)
    F[rs1], F[rs2] = x, y  # the second load wins where rs1 == rs2, as in the kernel
    want = isa.execute(SPEC, program.insns[3], {"F": F})["F"][rd:rd + 1]
    assert same_bits(card.from_gmem(out), want).all(), (format_insn(SPEC, program.insns[3]), x, y)


# ----------------------------------------------------------------------------------------- straight-line code
REGISTER_OPS = (*INTEGER_OPS, *SHIFTS, *FLOAT_OPS, "addi", "li", "fcvt")


@st.composite
def straight_line(draw) -> list[str]:
    """1 to 8 register instructions in random registers (r0..r29 of either file)."""
    lines = []
    for name in draw(st.lists(st.sampled_from(REGISTER_OPS), min_size=1, max_size=8)):
        rd, rs1, rs2 = draw(registers), draw(registers), draw(registers)
        if name == "addi":
            lines.append(f"addi r{rd}, r{rs1}, {draw(i32s)}")
        elif name == "li":
            lines.append(f"li r{rd}, {draw(i32s)}")
        elif name == "fcvt":
            lines.append(f"fcvt rd=r{rd}, rs1=r{rs1}")
        elif name in FLOAT_OPS:
            lines.append(f"{name} rd=r{rd}, rs1=r{rs1}, rs2=r{rs2}")
        else:
            lines.append(f"{name} r{rd}, r{rs1}, r{rs2}")
    return lines


@settings(max_examples=40, deadline=None)
@given(code=straight_line(), data=st.data())
def test_straight_line_register_code_leaves_both_register_files_as_the_spec_does(card, code, data):
    ints = data.draw(st.lists(i32s, min_size=30, max_size=30))
    floats = np.array(data.draw(st.lists(f32s, min_size=30, max_size=30)), np.float32)
    src = card.to_gmem(floats)
    out = card.to_gmem(np.zeros(60, np.uint32))
    program = kernel(f"li r30, {src.addr}",
                     *[f"fld.f32 rd=r{k}, rs1=r30, space=GMEM, imm={4 * k}" for k in range(30)],
                     *code, f"li r30, {out.addr}",
                     *[f"st rs1=r30, rs2=r{k}, space=GMEM, imm={4 * k}" for k in range(30)],
                     *[f"fst.f32 rs1=r30, rs2=r{k}, space=GMEM, imm={120 + 4 * k}" for k in range(30)])
    card.launch(program, cores=1, args=ints)
    R, F = spec_run(list(program.insns[31:31 + len(code)]), np.array(ints + [0, 0], np.int32),
                    np.concatenate([floats, np.zeros(2, np.float32)]))
    got = card.from_gmem(out)
    assert got[:30].view(np.int32).tolist() == R[:30].tolist(), code
    assert same_bits(got[30:].view(np.float32), F[:30]).all(), code


# ----------------------------------------------------------------------------------------- f16 stores
def test_fst_f16_rounds_and_overflows_every_edge_value_as_the_spec_says(card):
    values = np.concatenate([F16_EDGES, -F16_EDGES, F32_EDGES])
    src = card.to_gmem(values)
    out = card.to_gmem(np.zeros(values.size, np.float16))
    program = kernel("li r5, 0", "li r7, 0", f"li r6, {2 * values.size}", "row:",
                     f"fld.f32 rd=r1, rs1=r7, space=GMEM, imm={src.addr}",
                     f"fst.f16 rs1=r5, rs2=r1, space=GMEM, imm={out.addr}", "addi r7, r7, 4",
                     "addi r5, r5, 2", "blt r5, r6, row")
    card.launch(program, cores=1)
    fst = the(program, "fst")
    want = np.array([isa.execute(SPEC, fst, {"F": float_regs(r1=x), "R": int_regs(r5=2 * k),
                                             "m": np.zeros(1, np.float16)})["m"][0]
                     for k, x in enumerate(values)], np.float16)
    ok = same_bits(card.from_gmem(out), want)
    assert ok.all(), [(values[k], card.from_gmem(out)[k], want[k]) for k in np.flatnonzero(~ok)]


# ----------------------------------------------------------------------------------------- branches
@pytest.mark.parametrize("name", BRANCHES)
def test_branches_go_where_the_spec_sends_pc_taken_and_not_taken(card, name):
    edges = [I32_MIN, -1, 0, 1, I32_MAX]
    outcomes = set()
    for at in range(3):  # the branch at pc 0, 1, 2; each landing place records its own pc in r3
        for a, b in zip(*pairs(edges, edges), strict=True):
            out = card.to_gmem(np.full(1, -1, np.int32))
            program = kernel(*["li r9, 0"] * at, f"{name} r1, r2, target", f"li r3, {at + 1}", "jmp done",
                             f"target: li r3, {at + 3}", "done: st rs1=r0, rs2=r3, space=GMEM, imm=0")
            card.launch(program, cores=1, args=[out.addr, a, b])
            R = int_regs(r0=out.addr, r1=a, r2=b)
            pc = isa.execute(SPEC, program.insns[at], {"R": R, "pc": np.array([at], np.int32)})["pc"][0]
            assert card.from_gmem(out)[0] == pc, f"{format_insn(SPEC, program.insns[at])}, r1 = {a}, r2 = {b}"
            outcomes.add(pc == at + 3)
    assert outcomes == {True, False}, f"{name}: the edge values must make it both taken and not taken"


def test_jmp_goes_where_the_spec_sends_pc(card):
    out = card.to_gmem(np.full(1, -1, np.int32))
    program = kernel("li r9, 0", "jmp target", "li r3, 2", "target: li r3, 3",
                     "st rs1=r0, rs2=r3, space=GMEM, imm=0")
    card.launch(program, cores=1, args=[out.addr])
    pc = isa.execute(SPEC, program.insns[1], {"pc": np.array([1], np.int32)})["pc"][0]
    assert card.from_gmem(out)[0] == pc == 3


# ----------------------------------------------------------------------------------------- rdid
@pytest.mark.parametrize("cores", [1, 4, 8, 16])
def test_rdid_reads_each_cores_ids_as_the_spec_orders_them(card, cores):
    cpc = P["CORES_PER_CLUSTER"]
    names = list(SPEC.enums["id"].values)
    assert names == ["CORE_ID", "CLUSTER_ID", "CORE_DIM", "CLUSTER_DIM"]
    out = card.to_gmem(np.full((P["NUM_CORES"], 4), -7, np.int32))
    program = kernel(*[f"rdid r{3 + k}, {n}" for k, n in enumerate(names)],
                     f"li r7, {cpc}", "mul r8, r4, r7", "add r8, r8, r3", "li r9, 16", "mul r8, r8, r9",
                     "add r8, r8, r0",  # r8 = out + 16 * (CLUSTER_ID * CORES_PER_CLUSTER + CORE_ID)
                     *[f"st rs1=r8, rs2=r{3 + k}, space=GMEM, imm={4 * k}" for k in range(4)])
    card.launch(program, cores=cores, args=[out.addr])
    want = np.full((P["NUM_CORES"], 4), -7, np.int32)
    for core in range(cores):
        # BANG C: coreId within the cluster, clusterId, coreDim (cores per launched cluster), clusterDim
        ids = np.array([core % cpc, core // cpc, min(cores, cpc), -(-cores // cpc)], np.int32)
        for k in range(4):
            want[core, k] = isa.execute(SPEC, program.insns[k], {"R": int_regs(), "ids": ids})["R"][3 + k]
    assert card.from_gmem(out).tolist() == want.tolist()


# ----------------------------------------------------------------------------------------- loads and stores
LOADS = [("ld", None), *[(n, t) for n in ("lde", "fld") for t in SPEC.instruction(n).types["T"]]]
STORES = [("st", None), *[(n, t) for n in ("ste", "fst") for t in SPEC.instruction(n).types["T"]]]


def place(data: st.DataObject, mem: np.ndarray, space: str, size: int) -> tuple[int, int, int]:
    """(an address for ``size`` bytes in ``mem``, memory ``space`` of core 0, R[rs1], imm): the address at
    either end or anywhere between, unaligned; base and immediate any 32-bit split of it."""
    lowest = mem.size // 2 if space == "GMEM" else 0  # above every buffer the host allocates in GMEM
    highest = mem.size - size
    addr = data.draw(st.one_of(st.just(lowest), st.just(highest), st.integers(lowest, highest)))
    base = data.draw(st.one_of(st.just(0), st.just(addr), st.integers(addr - I32_MAX, I32_MAX)))
    return addr, base, addr - base


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize(("name", "dtype"), LOADS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_loads_of_every_type_from_every_space_equal_the_spec(card, name, dtype, space, data):
    t = dtype or "i32"
    mem = card.memory.space(SPEC.spaces[space].id, 0)
    addr, base, imm = place(data, mem, space, SIZES[t])
    raw = data.draw(st.binary(min_size=SIZES[t], max_size=SIZES[t]))
    mem[addr:addr + SIZES[t]] = np.frombuffer(raw, np.uint8)
    if name == "fld" and data.draw(st.booleans()):  # special values more often than random bytes give them
        special = F32_EDGES if t == "f32" else F16_SPECIALS
        value = data.draw(st.sampled_from(list(special)))
        mem[addr:addr + SIZES[t]] = np.frombuffer(value.tobytes(), np.uint8)
    m = mem[addr:addr + SIZES[t]].copy().view(NUMPY[t])
    out = card.to_gmem(np.zeros(1, np.int32))
    program = kernel(f"{name}{'.' + dtype if dtype else ''} rd=r3, rs1=r1, space={space}, imm={imm}",
                     f"{'fst.f32' if name == 'fld' else 'st'} rs1=r0, rs2=r3, space=GMEM, imm=0")
    card.launch(program, cores=1, args=[out.addr, base])
    file = "F" if name == "fld" else "R"
    tensors = {"R": int_regs(r0=out.addr, r1=base), "m": m, **({"F": float_regs()} if file == "F" else {})}
    want = isa.execute(SPEC, program.insns[0], tensors)[file][3:4]
    got = card.from_gmem(out).view(want.dtype)
    assert same_bits(got, want).all(), (format_insn(SPEC, program.insns[0]), m, got, want)


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize(("name", "dtype"), STORES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_stores_of_every_type_to_every_space_equal_the_spec_and_nothing_else(card, name, dtype, space, data):
    t = dtype or "i32"
    size, dt = SIZES[t], NUMPY[t]
    mem = card.memory.space(SPEC.spaces[space].id, 0)
    addr, base, imm = place(data, mem, space, size)
    window = slice(max(addr - 4, 0), min(addr + size + 4, mem.size))  # the value and the bytes around it
    before = mem[window].copy()
    if name == "fst":
        x = data.draw(st.one_of(st.sampled_from([*F16_EDGES, *-F16_EDGES, *F32_EDGES]), f32s))
        src = card.to_gmem(np.array([x], np.float32))
        program = kernel(f"li r30, {src.addr}", "fld.f32 rd=r4, rs1=r30, space=GMEM, imm=0",
                         f"fst.{dtype} rs1=r1, rs2=r4, space={space}, imm={imm}")
        card.launch(program, cores=1, args=[0, base])
        tensors = {"F": float_regs(r4=x), "R": int_regs(r1=base, r30=src.addr)}
    else:
        x = data.draw(i32s)
        program = kernel(f"{name}{'.' + dtype if dtype else ''} rs1=r1, rs2=r2, space={space}, imm={imm}")
        card.launch(program, cores=1, args=[0, base, x])
        tensors = {"R": int_regs(r1=base, r2=x)}
    insn = the(program, name)
    want = isa.execute(SPEC, insn, {**tensors, "m": np.zeros(1, dt)})["m"]
    got = mem[addr:addr + size].copy().view(dt)
    assert same_bits(got, want).all(), (format_insn(SPEC, insn), x, got, want)  # any NaN will do
    expected = before.copy()
    expected[addr - window.start:addr - window.start + size] = mem[addr:addr + size]
    assert mem[window].tolist() == expected.tolist(), f"{format_insn(SPEC, insn)} changed a byte next to it"
