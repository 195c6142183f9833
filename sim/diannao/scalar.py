"""The DianNao scalar unit: hand-written Python for the scalar instructions kernels run most, each keyed by
the contract it implements (semantics and operands, ``sim/core/contract.py``), never by mnemonic, and the
spec's generic executor for every other scalar instruction.

    kind = scalar_kind(spec.instruction("add"))   # ADD: the contract "R[rd] = R[rs1] + R[rs2]" on R: i32

A scalar instruction whose contract is in ``SCALAR_FAST_PATHS`` decodes to a record of sim/diannao/decode.py
whose ``kind`` is the path's code, and the interpreter of sim/diannao/machine.py runs it inline (integer
arithmetic wraps to 32 bits, float arithmetic rounds to f32, as the spec's types say). Any other scalar
instruction (a new one, or one whose spec changed what it computes) runs through the spec's generic executor
(``isa.execute``): tests/sim/diannao/test_interpreter.py proves every path here equal to it.
"""

from __future__ import annotations

import math
import struct

import numpy as np

import isa
from isa.lang.parser import parse_statements
from sim.core.contract import fast_path_for
from sim.diannao.functional import CardMemory, operand_views

# ------------------------------------------------------------------------------------------ decoded kinds
# The interpreter tests the kinds in this order (most frequent first): ADDI, then the branches (BLT..JMP),
# the scalar memory accesses (LOAD..FSTORE), the float ops (FADD..FCVT), the integer ops (ADD..RDID), then
# the kinds that leave the interpreter's inner loop.
(ADDI, BLT, BNE, BGE, BEQ, JMP, LOAD, STORE, FLOAD, FSTORE, FADD, FSUB, FMUL, FMAX, FMIN, FCVT, ADD, SUB, MUL,
 AND, OR, XOR, SLL, SRA, SRL, SLT, LI, RDID, TENSOR, SCALAR, BARRIER, WAIT, HALT) = range(33)

INTEGER_OPS = (ADD, SUB, MUL, AND, OR, XOR, SLL, SRA, SRL, SLT)
FLOAT_OPS = (FADD, FSUB, FMUL, FMAX, FMIN)
BRANCHES = (BLT, BNE, BGE, BEQ, JMP)
ACCESSES = (LOAD, STORE, FLOAD, FSTORE)

# struct formats of one element in memory, by the dtype of the memory operand
LOAD_FORMATS = {"i8": "<b", "i16": "<h", "i32": "<i", "f16": "<e", "f32": "<f"}
STORE_FORMATS = {"i8": "<B", "i16": "<H", "i32": "<I", "f16": "<e", "f32": "<f"}
STORE_MASKS = {"i8": 0xFF, "i16": 0xFFFF, "i32": 0xFFFFFFFF}


# --------------------------------------------------------------------------------- the fast paths' contracts
def _contract(semantics: str, *lines: str) -> str:
    """The contract text (``sim.core.contract.contract``) of a scalar instruction with ``semantics`` (no index
    variables) and the type and operand ``lines``."""
    return "\n".join([*(str(s) for s in parse_statements(semantics)), "indices ", *lines])


_R, _F, _PC = "R: register i32", "F: register f32", "pc: register i32"
_INTEGERS, _FLOATS = "type T in i8, i16, i32", "type T in f16, f32"


def _element(dtype: str) -> str:
    return f"m: space {dtype} shape [1] strides - at R[rs1] + imm"


def _riscv_minmax(op: str, sign: str) -> str:
    """RISC-V FMAX.S / FMIN.S as the spec writes it: a NaN operand gives the other one, and -0.0 < +0.0."""
    return (f"F[rd] = select(F[rs1] != F[rs1], F[rs2], select(F[rs2] != F[rs2], F[rs1], select(F[rs1] == "
            f"F[rs2], select(1.0 / F[rs1] {sign} 0.0, F[rs1], F[rs2]), {op}(F[rs1], F[rs2]))))")


def _branch(condition: str) -> str:
    return _contract(f"pc[0] = select({condition}, target, pc[0] + 1)", _R, _PC)


SCALAR_FAST_PATHS: dict[str, int] = {
    **{_contract(f"R[rd] = R[rs1] {op} R[rs2]", _R): kind
       for op, kind in (("+", ADD), ("-", SUB), ("*", MUL), ("&", AND), ("|", OR), ("^", XOR), ("<<", SLL),
                        (">>", SRA))},
    _contract("R[rd] = i32(u32(R[rs1]) >> u32(R[rs2]))", _R): SRL,
    _contract("R[rd] = select(R[rs1] < R[rs2], 1, 0)", _R): SLT,
    **{_contract(f"F[rd] = F[rs1] {op} F[rs2]", _F): kind for op, kind in (("+", FADD), ("-", FSUB),
                                                                          ("*", FMUL))},
    _contract(_riscv_minmax("max", ">"), _F): FMAX,
    _contract(_riscv_minmax("min", "<"), _F): FMIN,
    _contract("F[rd] = f32(R[rs1])", _F, _R): FCVT,
    _contract("R[rd] = R[rs1] + imm", _R): ADDI,
    _contract("R[rd] = imm", _R): LI,
    _contract("R[rd] = ids[which]", _R, "ids: register i32"): RDID,
    _contract("R[rd] = m[0]", _R, _element("i32")): LOAD,
    _contract("m[0] = R[rs2]", _R, _element("i32")): STORE,
    _contract("R[rd] = i32(m[0])", _INTEGERS, _R, _element("T")): LOAD,
    _contract("m[0] = T(R[rs2])", _INTEGERS, _R, _element("T")): STORE,
    _contract("F[rd] = f32(m[0])", _FLOATS, _F, _R, _element("T")): FLOAD,
    _contract("m[0] = T(F[rs2])", _FLOATS, _F, _R, _element("T")): FSTORE,
    _branch("R[rs1] == R[rs2]"): BEQ,
    _branch("R[rs1] != R[rs2]"): BNE,
    _branch("R[rs1] < R[rs2]"): BLT,
    _branch("R[rs1] >= R[rs2]"): BGE,
    _contract("pc[0] = target", _PC): JMP,
}


def scalar_kind(instr: isa.Instruction) -> int | None:
    """The kind of the fast path whose contract ``instr`` has, or None: the generic executor runs it."""
    return fast_path_for(instr, SCALAR_FAST_PATHS)


# ----------------------------------------------------------------------------------------------- arithmetic
_F32 = struct.Struct("<f")


def f32(x: float) -> float:
    """``x`` rounded to the nearest f32 (infinities where it overflows)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def fmax(a: float, b: float) -> float:
    """RISC-V FMAX.S, as the spec says: a NaN operand gives the other one, and -0.0 < +0.0."""
    if a != a:
        return b
    if b != b or a > b:
        return a
    if a == b:
        return a if math.copysign(1.0, a) > 0 else b
    return b


def fmin(a: float, b: float) -> float:
    """RISC-V FMIN.S, as the spec says: a NaN operand gives the other one, and -0.0 < +0.0."""
    if a != a:
        return b
    if b != b or a < b:
        return a
    if a == b:
        return a if math.copysign(1.0, a) < 0 else b
    return b


def alu(k: int, op, R: list[int], ids: tuple[int, ...]) -> int:
    """The value an integer op of kind ``k`` (ADD..RDID) writes to R[op.rd]: i32 arithmetic, wrapping."""
    if k == LI:
        return op.imm
    if k == RDID:
        return ids[op.which]
    a, b = R[op.rs1], R[op.rs2]
    if k == ADD:
        v = a + b
    elif k == SUB:
        v = a - b
    elif k == MUL:
        v = a * b
    elif k == AND:
        return a & b
    elif k == OR:
        return a | b
    elif k == XOR:
        return a ^ b
    elif k == SLL:
        v = a << min(max(b, 0), 32)
    elif k == SRA:
        return a >> min(max(b, 0), 32)
    elif k == SRL:
        v = (a & 0xFFFFFFFF) >> min(b & 0xFFFFFFFF, 32)
    else:  # SLT
        return 1 if a < b else 0
    return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def fpu(k: int, op, F: list[float], R: list[int]) -> float:
    """The value a float op of kind ``k`` (FADD..FCVT) writes to F[op.rd]: f32 arithmetic."""
    if k == FADD:
        return f32(F[op.rs1] + F[op.rs2])
    if k == FSUB:
        return f32(F[op.rs1] - F[op.rs2])
    if k == FMUL:
        return f32(F[op.rs1] * F[op.rs2])
    if k == FMAX:
        return fmax(F[op.rs1], F[op.rs2])
    if k == FMIN:
        return fmin(F[op.rs1], F[op.rs2])
    return f32(float(R[op.rs1]))  # FCVT


def access(k: int, op, mem, addr: int, R: list[int], F: list[float]) -> None:
    """Move one element of kind ``k`` (LOAD..FSTORE) between register op.reg and ``mem`` at ``addr``."""
    if k == LOAD:
        R[op.reg] = op.element.unpack_from(mem, addr)[0]
    elif k == STORE:
        op.element.pack_into(mem, addr, R[op.reg] & op.mask)
    elif k == FLOAD:
        F[op.reg] = op.element.unpack_from(mem, addr)[0]
    else:
        try:
            op.element.pack_into(mem, addr, F[op.reg])
        except OverflowError:  # f16 overflow rounds to infinity
            op.element.pack_into(mem, addr, math.copysign(math.inf, F[op.reg]))


# ------------------------------------------------------------------------------------------ the general path
# The machine's register state, by the name the spec's semantics give it: R (i32) and F (f32) are the register
# files, ids the core's id registers (read only), pc the index of the running instruction.
REGISTER_FILES = ("R", "F", "ids", "pc")


def execute_scalar(spec: isa.ISA, insn: isa.Insn, files: tuple[str, ...], memory: CardMemory | None,
                   core: int, pc: int, R: list[int], F: list[float], ids: tuple[int, ...]) -> int:
    """Run scalar instruction ``insn`` (at ``pc`` of core ``core``) through the spec's semantics
    (``isa.execute``) on the register files ``files`` it names and, unless ``memory`` is None, on its memory
    operands; write back what it writes and return the next pc (``pc + 1`` unless it writes pc).

    Raises ``IndexError`` for a memory operand outside its memory, ``isa.ExecError`` for semantics that cannot
    run on these values."""
    state = {"R": np.array(R, np.int32), "F": np.array(F, np.float32), "ids": np.array(ids, np.int32),
             "pc": np.array([pc], np.int32)}
    registers = {name: state[name] for name in files}
    views = operand_views(spec, insn, memory, core, registers) if memory is not None else {}
    written = isa.execute(spec, insn, {**registers, **views})
    for name, value in written.items():
        if name in views:
            views[name][...] = value
        elif name == "R":
            R[:] = value.tolist()
        elif name == "F":
            F[:] = value.tolist()
    return int(written["pc"][0]) if "pc" in written else pc + 1
