"""Scalar code for the DianNao backend: expressions in registers, conditions as branches, element addresses,
loads and stores (the scalar fallback of code that did not become tensor instructions).

Values:

- Integers (int8, int16, int32, and int32/int64 indices) live in R registers as i32. add/sub/mul are exact
  modulo 2**32, so an int8 or int16 result is only known modulo its width: such a value is *inexact* until
  something needs its true value (a comparison, min/max, a shift, a cast to a wider type or to float), which
  wraps it first with ``sll``/``sra``; a store (``ste``) keeps the low bits, so it never needs to. int64
  values must fit in 32 bits (they are indices).
- Floats (float16, float32) live in F registers as f32. f32 add/sub/mul round to f32 as the IR does. An f16
  result is computed in f32 and is *inexact* until rounded to f16, which happens once, by ``fst.f16`` when it
  is stored or by a round trip through a scratch word in NMEM (``fst.f16`` + ``fld.f16``) when another
  operation reads it; one f32 operation on f16 inputs rounded once to f16 gives numpy's f16 result bit for
  bit. Float constants are loaded with ``li`` + ``fcvt`` when they are small integers, through the scratch
  word otherwise.
- Index arithmetic (int32/int64 Add/Sub/Mul) is emitted from its simplified affine form (under the ranges of
  the enclosing constant loops): one multiply per term, constants folded into ``addi`` or the immediate of a
  load or store.

Shifts by a non-constant amount (Shr, Shl) are ``sra``/``sll`` (int64 ones refused), a negative amount made 32
first (numpy shifts every bit out there, the ISA clamps it to 0).

Limits (LoweringError naming the expression): no divide (FloorDiv/FloorMod only by a positive power of two,
with ``sra``/``and``; float Div never), no float->int cast, no float comparison, no bfloat16, unsigned or bool
buffers. Float Max/Min are ``fmax``/``fmin`` (RISC-V): they differ from the IR's numpy semantics only on NaN
operands and on ties between -0.0 and +0.0.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from compiler.arith import Interval, bound, simplify
from compiler.arith.linear import LinearForm, is_index, linearize
from compiler.backend.diannao_emit import Code, Label, Late, RegisterFile
from compiler.errors import LoweringError
from compiler.ir import nodes as ir
from compiler.ir.dtypes import DType
from compiler.ir.intrinsics import Call
from compiler.ir.shifts import Shl, Shr

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_BRANCH = {ir.LT: ("blt", False), ir.GE: ("bge", False), ir.GT: ("blt", True), ir.LE: ("bge", True),
           ir.EQ: ("beq", False), ir.NE: ("bne", False)}
_NEGATED = {ir.LT: ir.GE, ir.GE: ir.LT, ir.GT: ir.LE, ir.LE: ir.GT, ir.EQ: ir.NE, ir.NE: ir.EQ}


def element_type(dt: DType, what: str) -> str:
    """The ISA's name of an element type the scalar unit loads and stores (i8 i16 i32 f16 f32)."""
    if (dt.kind == "int" and dt.bits in (8, 16, 32)) or (dt.kind == "float" and dt.bits in (16, 32)):
        return dt.short
    raise LoweringError(f"{what}: the DianNao scalar unit loads and stores i8, i16, i32, f16 and f32 "
                        f"elements, not {dt}")


def float_bits(e: ir.FloatImm) -> tuple[int, int]:
    """(dtype bits, f32 bit pattern) of a float constant rounded to its dtype: equal keys, equal values."""
    with np.errstate(over="ignore"):  # past the f16 range: inf, as the interpreter rounds it
        value = float(np.float16(e.value)) if e.type.bits == 16 else e.value
    try:
        (bits,) = _U32.unpack(_F32.pack(value))
    except OverflowError:
        (bits,) = _U32.unpack(_F32.pack(math.copysign(math.inf, value)))
    return e.type.bits, bits

MAGIC_RANGE = 1 << 16   # the largest dividend range a division by a non-power-of-two constant is checked over


@dataclass(frozen=True, slots=True)
class Val:
    """A value in register ``reg`` of file F (``is_float``) or R; ``temp``: the reader frees it; ``exact``:
    already wrapped (ints) or rounded (f16) to its dtype."""

    reg: int
    is_float: bool = False
    temp: bool = False
    exact: bool = True


@dataclass(frozen=True, slots=True)
class Binding:
    """What a variable stands for: register ``reg`` (of F when ``is_float``), or the constant ``const``."""

    reg: int | None
    const: int = 0
    is_float: bool = False
    exact: bool = True


@dataclass(frozen=True, slots=True)
class Place:
    """Where a buffer lies: byte ``base`` past the address in register ``reg`` of memory space ``space``."""

    space: str
    reg: int
    base: int


class Scalar:
    """Emits scalar code into ``code``; ``vars``, ``places`` and ``ranges`` are kept by the caller."""

    def __init__(self, code: Code, zero: int, rfile: RegisterFile, ffile: RegisterFile,
                 scratch: Late) -> None:
        self.code = code
        self.zero = zero  # the register that always holds 0
        self.R, self.F = rfile, ffile
        self.scratch = scratch  # NMEM byte address of a 4-byte word for f16 rounding and float constants
        self.vars: dict[ir.Var, Binding] = {}
        self.places: dict[ir.Buffer, Place] = {}
        self.ranges: dict[ir.Var, Interval] = {}
        self.fconsts: dict[tuple[int, int], int] = {}  # float_bits key -> F register holding it
        self.where = "the kernel"  # the statement being compiled, for error messages

    # registers -----------------------------------------------------------------------------------
    def take(self, is_float: bool = False) -> int:
        return (self.F if is_float else self.R).take(self.where)

    def free(self, *vals: Val | None) -> None:
        for v in vals:
            if v is not None and v.temp:
                (self.F if v.is_float else self.R).give(v.reg)

    def _dest(self, is_float: bool, *operands: Val) -> int:
        """A register for the result of one instruction reading ``operands`` (which it frees)."""
        self.free(*operands)
        return self.take(is_float)

    def move(self, rd: int, v: Val) -> None:
        if v.reg == rd:
            return
        if v.is_float:
            self.code.emit("fmax", rd=rd, rs1=v.reg, rs2=v.reg)  # fmax(x, x) is x, signed zeros and NaN too
        else:
            self.code.emit("addi", rd=rd, rs1=v.reg, imm=0)

    def error(self, what: str, e: ir.Node) -> LoweringError:
        return LoweringError(f"{what}: '{e}' in {self.where}")

    # values --------------------------------------------------------------------------------------
    def value(self, e: ir.Expr) -> Val:
        """Compute ``e`` into a register."""
        dt = e.dtype
        if not (dt.is_bool or (dt.kind == "int" and dt.bits in (8, 16, 32, 64))
                or (dt.kind == "float" and dt.bits in (16, 32))):
            raise self.error("the DianNao scalar unit computes on int8/16/32/64, float16/32 and bool, "
                             f"not {dt}", e)
        if is_index(dt) and isinstance(e, ir.Add | ir.Sub | ir.Mul):
            return self.linear(linearize(simplify(e, self.ranges)))
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise self.error(f"the DianNao backend cannot compute a {type(e).__name__}", e)
        return method(e)

    def exact(self, v: Val, dt: DType) -> Val:
        """``v`` wrapped (narrow ints) or rounded (f16) to ``dt``."""
        if v.exact:
            return v
        rd = v.reg if v.temp else self.take(v.is_float)
        if v.is_float:  # f16: round through the scratch word
            self.code.emit("fst", T="f16", rs1=self.zero, rs2=v.reg, space="NMEM", imm=self.scratch)
            self.code.emit("fld", T="f16", rd=rd, rs1=self.zero, space="NMEM", imm=self.scratch)
            return Val(rd, True, True, True)
        shift = self.const(32 - dt.bits)
        self.code.emit("sll", rd=rd, rs1=v.reg, rs2=shift.reg)
        self.code.emit("sra", rd=rd, rs1=rd, rs2=shift.reg)
        self.free(shift)
        return Val(rd, False, True, True)

    def const(self, value: int) -> Val:
        """The i32 constant ``value`` in a register (the zero register for 0)."""
        if value == 0:
            return Val(self.zero)
        if not I32_MIN <= value <= I32_MAX:
            raise LoweringError(f"the constant {value} does not fit in a 32-bit register in {self.where}")
        rd = self.take()
        self.code.emit("li", rd=rd, imm=value)
        return Val(rd, temp=True)

    def linear(self, lf: LinearForm) -> Val:
        """sum(coef * atom) + const, positive terms first (a negative one is subtracted)."""
        terms = sorted(lf.terms.items(), key=lambda t: t[1] < 0)  # stable: positive terms keep their order
        acc: Val | None = None
        for atom, coef in terms:
            # a non-constant product is an atom of the form: multiply it here, never linearize it again
            v = self._product(atom) if isinstance(atom, ir.Mul) else self.exact(self.value(atom), atom.dtype)
            if acc is not None and coef < 0:
                v = self.scaled(v, -coef)
                rd = self._dest(False, acc, v)
                self.code.emit("sub", rd=rd, rs1=acc.reg, rs2=v.reg)
                acc = Val(rd, temp=True)
                continue
            v = self.scaled(v, coef)
            if acc is None:
                acc = v
            else:
                rd = self._dest(False, acc, v)
                self.code.emit("add", rd=rd, rs1=acc.reg, rs2=v.reg)
                acc = Val(rd, temp=True)
        if acc is None:
            return self.const(lf.const)
        return self.plus(acc, lf.const)

    def scaled(self, v: Val, factor: int) -> Val:
        """``v * factor`` (the same register when ``factor`` is 1)."""
        if factor == 1:
            return v
        k = self.const(factor)
        rd = self._dest(False, v, k)
        self.code.emit("mul", rd=rd, rs1=v.reg, rs2=k.reg)
        return Val(rd, temp=True)

    def plus(self, v: Val, imm: int) -> Val:
        """``v + imm`` (the same register when ``imm`` is 0)."""
        if imm == 0:
            return v
        if not I32_MIN <= imm <= I32_MAX:
            raise LoweringError(f"the constant {imm} does not fit in a 32-bit immediate in {self.where}")
        rd = self._dest(False, v)
        self.code.emit("addi", rd=rd, rs1=v.reg, imm=imm)
        return Val(rd, temp=True)

    def _product(self, e: ir.Mul) -> Val:
        a, b = self.value(e.a), self.value(e.b)
        rd = self._dest(False, a, b)
        self.code.emit("mul", rd=rd, rs1=a.reg, rs2=b.reg)
        return Val(rd, temp=True)

    def _IntImm(self, e: ir.IntImm) -> Val:
        return self.const(int(e.value))

    def _FloatImm(self, e: ir.FloatImm) -> Val:
        key = float_bits(e)
        if key in self.fconsts:
            return Val(self.fconsts[key], True)
        rd = self.take(True)
        self.load_float(rd, key)
        return Val(rd, True, True)

    def load_float(self, rd: int, key: tuple[int, int]) -> None:
        """F[rd] = the float constant ``key`` (see ``float_bits``)."""
        (value,) = _F32.unpack(_U32.pack(key[1]))
        if math.isfinite(value) and value == int(value) and abs(value) <= 2**24 and key[1] >> 31 == 0:
            k = self.const(int(value))
            self.code.emit("fcvt", rd=rd, rs1=k.reg)
        else:
            signed = key[1] - (1 << 32) if key[1] > I32_MAX else key[1]
            k = self.const(signed)
            self.code.emit("st", rs1=self.zero, rs2=k.reg, space="NMEM", imm=self.scratch)
            self.code.emit("fld", T="f32", rd=rd, rs1=self.zero, space="NMEM", imm=self.scratch)
        self.free(k)

    def _Var(self, e: ir.Var) -> Val:
        b = self.vars.get(e)
        if b is None:
            raise self.error("variable is not bound by an enclosing loop or let", e)
        if b.reg is None:
            return self.const(b.const)
        return Val(b.reg, b.is_float, False, b.exact)

    def _arith(self, e: ir.BinaryOp, iname: str, fname: str) -> Val:
        if e.dtype.is_float:
            a = self.exact(self.value(e.a), e.dtype)
            b = self.exact(self.value(e.b), e.dtype)
            rd = self._dest(True, a, b)
            self.code.emit(fname, rd=rd, rs1=a.reg, rs2=b.reg)
            return Val(rd, True, True, e.dtype.bits == 32)
        a = self.value(e.a)
        if iname in ("add", "sub") and isinstance(e.b, ir.IntImm):  # x + c, x - c: one addi
            v = self.plus(a, e.b.value if iname == "add" else -e.b.value)
            return Val(v.reg, False, v.temp, e.dtype.bits >= 32 and v.exact)
        b = self.value(e.b)
        rd = self._dest(False, a, b)
        self.code.emit(iname, rd=rd, rs1=a.reg, rs2=b.reg)
        return Val(rd, False, True, e.dtype.bits >= 32)

    def _Add(self, e: ir.Add) -> Val:
        return self._arith(e, "add", "fadd")

    def _Sub(self, e: ir.Sub) -> Val:
        return self._arith(e, "sub", "fsub")

    def _Mul(self, e: ir.Mul) -> Val:
        return self._arith(e, "mul", "fmul")

    def _Div(self, e: ir.Div) -> Val:
        raise self.error("no divide on the DianNao scalar unit", e)

    def _divisor(self, e: ir.FloorDiv | ir.FloorMod) -> tuple[int, int | None, tuple[int, int] | None]:
        """(d, log2 d, None) for a power-of-two divisor d; (d, None, (m, s)) for another positive constant
        that ``_magic`` covers; else the error."""
        d = simplify(e.b, self.ranges)
        if e.dtype.is_float or not isinstance(d, ir.IntImm) or d.value <= 0:
            raise self.error("no divide on the DianNao scalar unit (only by a positive constant)", e)
        if not d.value & (d.value - 1):
            return d.value, d.value.bit_length() - 1, None
        magic = self._magic(e, d.value)
        if magic is None:
            raise self.error(f"no divide on the DianNao scalar unit: a division by {d.value} (not a "
                             f"power of two) needs a dividend known to lie in [0, {MAGIC_RANGE}]", e)
        return d.value, None, magic

    def _magic(self, e: ir.FloorDiv | ir.FloorMod, d: int) -> tuple[int, int] | None:
        """(m, s) such that ``(x * m) >> s == x // d`` for every value x the dividend can take (checked one
        by one over its range, which must be non-negative and at most MAGIC_RANGE: a core index, a group
        number), with ``x * m`` inside 32 bits; None when there is none."""
        r = bound(e.a, self.ranges)
        if r.lo is None or r.hi is None or r.lo < 0 or r.hi > MAGIC_RANGE:
            return None
        for s in range(1, 31):
            m = -(-(1 << s) // d)
            if m * r.hi > I32_MAX:
                return None
            if all((x * m) >> s == x // d for x in range(r.lo, r.hi + 1)):
                return m, s
        return None

    def _FloorDiv(self, e: ir.FloorDiv, divisor: tuple | None = None) -> Val:
        _, k, magic = divisor or self._divisor(e)
        if magic is not None:   # multiply by the magic number, shift right
            m, s = magic
            q = self.scaled(self.exact(self.value(e.a), e.dtype), m)
            sh = self.const(s)
            rd = self._dest(False, q, sh)
            self.code.emit("sra", rd=rd, rs1=q.reg, rs2=sh.reg)
            return Val(rd, temp=True)
        a = self.exact(self.value(e.a), e.dtype)
        if k == 0:
            return a
        s = self.const(k)
        rd = self._dest(False, a, s)
        self.code.emit("sra", rd=rd, rs1=a.reg, rs2=s.reg)  # an arithmetic shift rounds toward -inf
        return Val(rd, temp=True)

    def _FloorMod(self, e: ir.FloorMod) -> Val:
        divisor = self._divisor(e)
        d, k, magic = divisor
        if magic is not None:   # x - d * (x // d), the quotient by the magic number
            qd = self.scaled(self._FloorDiv(ir.FloorDiv(e.a, e.b), divisor), d)
            a = self.exact(self.value(e.a), e.dtype)
            rd = self._dest(False, a, qd)
            self.code.emit("sub", rd=rd, rs1=a.reg, rs2=qd.reg)
            return Val(rd, temp=True)
        a = self.value(e.a)  # the low bits are right even before wrapping
        if k == 0:
            self.free(a)
            return Val(self.zero)
        m = self.const((1 << k) - 1)
        rd = self._dest(False, a, m)
        self.code.emit("and", rd=rd, rs1=a.reg, rs2=m.reg)  # two's complement: x & (2**k - 1) = x mod 2**k
        return Val(rd, temp=True)

    def _shift(self, e: Shr | Shl) -> Val:
        """``sra`` or ``sll`` on the value's register. The ISA clamps an amount to [0, 32], which gives
        numpy's result for every amount of 0 or more (the value is sign-extended first for ``sra``; ``sll``
        keeps the low bits right); a negative amount, which numpy reads as unsigned, becomes 32 first."""
        if e.dtype.bits > 32:
            raise self.error(f"the DianNao scalar unit shifts 32-bit registers, not {e.dtype}", e)
        right = isinstance(e, Shr)
        a = self.exact(self.value(e.a), e.dtype) if right else self.value(e.a)
        amount = self.exact(self.value(e.b), e.dtype)
        if not (isinstance(e.b, ir.IntImm) and e.b.value >= 0):
            rd = amount.reg if amount.temp else self.take()
            self.move(rd, amount)
            done = Label()
            self.code.emit("bge", rs1=rd, rs2=self.zero, target=done)
            self.code.emit("li", rd=rd, imm=32)
            self.code.place(done)
            amount = Val(rd, temp=True)
        rd = self._dest(False, a, amount)
        self.code.emit("sra" if right else "sll", rd=rd, rs1=a.reg, rs2=amount.reg)
        return Val(rd, False, True, right or e.dtype.bits == 32)

    _Shr = _Shl = _shift

    def _minmax(self, e: ir.Min | ir.Max, fname: str) -> Val:
        if e.dtype.is_float:  # rounding is monotonic: max of unrounded f16 values rounds to the same
            a, b = self.value(e.a), self.value(e.b)
            rd = self._dest(True, a, b)
            self.code.emit(fname, rd=rd, rs1=a.reg, rs2=b.reg)
            return Val(rd, True, True, a.exact and b.exact)
        a = self.exact(self.value(e.a), e.dtype)
        b = self.exact(self.value(e.b), e.dtype)
        keep, other = (b, a) if b.temp and not a.temp else (a, b)
        rd = keep.reg if keep.temp else self.take()
        self.move(rd, keep)
        done = Label()
        if isinstance(e, ir.Max):  # keep >= other: keep it (equal values are the same integer)
            self.code.emit("bge", rs1=keep.reg, rs2=other.reg, target=done)
        else:
            self.code.emit("bge", rs1=other.reg, rs2=keep.reg, target=done)
        self.move(rd, other)
        self.code.place(done)
        self.free(other)
        return Val(rd, temp=True)

    def _Min(self, e: ir.Min) -> Val:
        return self._minmax(e, "fmin")

    def _Max(self, e: ir.Max) -> Val:
        return self._minmax(e, "fmax")

    def _boolean(self, e: ir.Expr) -> Val:
        """A condition as 0 or 1 in an R register."""
        if isinstance(e, ir.LT | ir.GT) and not e.a.dtype.is_float:
            a = self.exact(self.value(e.a), e.a.dtype)
            b = self.exact(self.value(e.b), e.b.dtype)
            rd = self._dest(False, a, b)
            lo, hi = (a, b) if isinstance(e, ir.LT) else (b, a)
            self.code.emit("slt", rd=rd, rs1=lo.reg, rs2=hi.reg)
            return Val(rd, temp=True)
        rd = self.take()
        self.code.emit("li", rd=rd, imm=1)
        true = Label()
        self.branch(e, true, True)
        self.code.emit("li", rd=rd, imm=0)
        self.code.place(true)
        return Val(rd, temp=True)

    _EQ = _NE = _LT = _LE = _GT = _GE = _And = _Or = _Not = _boolean

    def _select(self, e: ir.Expr, cond: ir.Expr, t: ir.Expr, f: ir.Expr) -> Val:
        cond = simplify(cond, self.ranges)
        if isinstance(cond, ir.IntImm):
            return self.value(t if cond.value else f)
        is_float = e.dtype.is_float
        rd = self.take(is_float)
        other, done = Label(), Label()
        self.branch(cond, other, False)
        tv = self.value(t)
        self.move(rd, tv)
        self.free(tv)
        self.code.emit("jmp", target=done)
        self.code.place(other)
        fv = self.value(f)
        self.move(rd, fv)
        self.free(fv)
        self.code.place(done)
        return Val(rd, is_float, True, tv.exact and fv.exact)

    def _Select(self, e: ir.Select) -> Val:
        return self._select(e, e.cond, e.true_value, e.false_value)

    def _Call(self, e: Call) -> Val:
        if e.name != "if_then_else" or len(e.args) != 3:
            raise self.error(f"the DianNao backend has no intrinsic '{e.name}'", e)
        return self._select(e, *e.args)

    def _Cast(self, e: ir.Cast) -> Val:
        src, dst = e.value.dtype, e.type
        if src == dst:
            return self.value(e.value)
        if dst.is_bool:
            if src.is_float:
                raise self.error("no float comparison on the DianNao scalar unit", e)
            return self._boolean(ir.NE(e.value, ir.IntImm(0, src)))
        v = self.value(e.value)
        if dst.is_float:
            if src.is_float:  # f16 -> f32 is exact once rounded; f32 -> f16 rounds later
                v = self.exact(v, src)
                return Val(v.reg, True, v.temp, dst.bits == 32)
            v = self.exact(v, src)
            rd = self._dest(True, v)
            self.code.emit("fcvt", rd=rd, rs1=v.reg)  # int -> f32, one rounding (f16: one more, later)
            return Val(rd, True, True, dst.bits == 32)
        if src.is_float:
            raise self.error("no float->int conversion on the DianNao scalar unit", e)
        if dst.bits >= 32 or src.is_bool:  # widening needs the true value; bool is 0 or 1
            return self.exact(v, src)
        fits = v.exact and src.bits <= dst.bits
        return Val(v.reg, False, v.temp, fits)

    # memory --------------------------------------------------------------------------------------
    def address(self, buffer: ir.Buffer, index: ir.Expr) -> tuple[int, int, Val | None]:
        """(register, immediate, temporary to free) whose sum is the byte address of ``buffer[index]``."""
        place = self.places.get(buffer)
        if place is None:
            raise LoweringError(f"buffer {buffer.name} is neither a parameter nor allocated in {self.where}")
        size = max(buffer.dtype.bits // 8, 1)
        index = simplify(index, self.ranges)
        lf = linearize(index) if is_index(index.dtype) else LinearForm({index: 1}, 0, index.dtype)
        imm = place.base + lf.const * size
        if not lf.terms:
            return place.reg, imm, None
        acc = self.linear(LinearForm(dict(lf.terms), 0, lf.dtype).scale(size))
        if place.reg != self.zero:
            rd = self._dest(False, acc)
            self.code.emit("add", rd=rd, rs1=acc.reg, rs2=place.reg)
            acc = Val(rd, temp=True)
        return acc.reg, imm, acc

    def _Load(self, e: ir.Load) -> Val:
        (index,) = e.indices
        t = element_type(e.buffer.dtype, f"load of {e.buffer.name} in {self.where}")
        reg, imm, temp = self.address(e.buffer, index)
        is_float = e.dtype.is_float
        rd = self._dest(is_float, *(x for x in (temp,) if x is not None))
        op = "fld" if is_float else "lde"
        self.code.emit(op, T=t, rd=rd, rs1=reg, space=self.places[e.buffer].space, imm=imm)
        return Val(rd, is_float, True, True)

    def store(self, s: ir.Store) -> None:
        """buffer[index] = value (``ste`` keeps the value's low bits, ``fst`` rounds it to the element)."""
        (index,) = s.indices
        t = element_type(s.buffer.dtype, f"store to {s.buffer.name} in {self.where}")
        v = self.value(s.value)
        reg, imm, temp = self.address(s.buffer, index)
        op = "fst" if v.is_float else "ste"
        self.code.emit(op, T=t, rs1=reg, rs2=v.reg, space=self.places[s.buffer].space, imm=imm)
        self.free(v, temp)

    # conditions ----------------------------------------------------------------------------------
    def branch(self, cond: ir.Expr, label: Label, when: bool) -> None:
        """Jump to ``label`` if ``cond`` is ``when``; fall through otherwise."""
        if isinstance(cond, ir.IntImm):
            if bool(cond.value) == when:
                self.code.emit("jmp", target=label)
            return
        if isinstance(cond, ir.Not):
            self.branch(cond.a, label, not when)
            return
        if isinstance(cond, ir.And | ir.Or):
            # jump when both are (And, when) or either is (Or, when); the duals by De Morgan
            all_needed = isinstance(cond, ir.And) == when
            if all_needed:
                skip = Label()
                self.branch(cond.a, skip, not when)
                self.branch(cond.b, label, when)
                self.code.place(skip)
            else:
                self.branch(cond.a, label, when)
                self.branch(cond.b, label, when)
            return
        if isinstance(cond, ir.CmpOp):
            if cond.a.dtype.is_float:
                raise self.error("no float comparison on the DianNao scalar unit", cond)
            a = self.exact(self.value(cond.a), cond.a.dtype)
            b = self.exact(self.value(cond.b), cond.b.dtype)
            op = type(cond) if when else _NEGATED[type(cond)]
            name, swap = _BRANCH[op]
            lo, hi = (b, a) if swap else (a, b)
            self.code.emit(name, rs1=lo.reg, rs2=hi.reg, target=label)
            self.free(a, b)
            return
        v = self.value(cond)  # a bool variable, select, ...: 0 or 1
        self.code.emit("bne" if when else "beq", rs1=v.reg, rs2=self.zero, target=label)
        self.free(v)
