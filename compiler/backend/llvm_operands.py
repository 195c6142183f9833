"""Tensor instructions of a real CPU as LLVM intrinsic calls, with their register operands prepared.

UNIT Sec. III.C: once a loop nest is an instruction, each register operand must be filled from memory and the
result written back. UNIT leaves that rule to the compiler developer per platform; here it is derived from
each region's view (``ir.Region.shape``/``strides``, element offsets from ``offset``), which is what UNIT's
rule reads (the index coefficients of the replaced loop variables):
- the positions of the operand's elements are computed (constant strides) and, when they fall in one
  contiguous run, that run is loaded as one vector and shuffled into place: a plain vector load for a
  contiguous operand, a broadcast for a stride of 0 (``x16(a[x, y, co:4])`` in UNIT's Fig. 5), any
  permutation within the run;
- other layouts (several runs, or strides known only at run time) are gathered element by element;
- a written operand is stored as one vector when its positions are exactly a contiguous run in order,
  else element by element in lane order (a later lane's write wins, as ``isa.execute`` has it).

The spec says everything else: the intrinsic's name (``intrinsic``), which operands it takes in which order
(``intrinsic_args``), the operand its result is added to where it takes no accumulator
(``intrinsic_accumulator``: AVX2's vpmaddwd, then a vector add) and the CPU features it needs (``features``;
isa/specs/x86.toml, isa/specs/arm.toml). An
instruction without ``intrinsic_args`` cannot run on the CPU, and saying so is a ``CodegenError``; there is no
table here to extend. The features are checked against this CPU's, or against those a cross-compilation
enables (``features=``, ``compiler.backend.llvm_cross``).
"""

from __future__ import annotations

import math
from functools import cache

import llvmlite.binding as llvm
from llvmlite import ir as ll

import isa
from compiler.arith import bound
from compiler.backend.llvm_emit import FunctionEmitter
from compiler.backend.llvm_types import I32, I64, declare, memory_type
from compiler.errors import CodegenError
from compiler.ir import nodes as n
from isa.instance import operand_shape


def runs_on_cpu(s: n.TensorInsn, features: frozenset[str] | None = None) -> bool:
    """Whether ``s`` is an instruction whose LLVM intrinsic this backend calls and a CPU with ``features``
    (LLVM's names; by default this CPU's) executes."""
    try:
        instr = s.isa.instruction(s.name)
    except KeyError:
        return False
    return instruction_runs_on_cpu(instr, features)


def instruction_runs_on_cpu(instr, features: frozenset[str] | None = None) -> bool:
    """Whether the spec instruction ``instr`` names an LLVM intrinsic (with its arguments) and a CPU with
    ``features`` (LLVM's names; by default this CPU's) has one of the feature sets its spec lists."""
    if not instr.intrinsic or not instr.intrinsic_args:
        return False
    return instr.runs_with(host_features() if features is None else features)


@cache
def host_features() -> frozenset[str]:
    """This CPU's features as LLVM names them (``avx512vnni``, ``avxvnni``, ...)."""
    return frozenset(f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+"))


def emit_tensor_insn(em: FunctionEmitter, s: n.TensorInsn, features: frozenset[str] | None = None) -> None:
    """Emit ``s`` as its instruction's intrinsic: operands loaded, the call, the result stored; ``features``
    are the target's (LLVM's names), by default this CPU's."""
    text = str(s).strip()
    try:
        spec = s.isa
        instr = spec.instruction(s.name)
    except KeyError as e:
        raise CodegenError(f"llvm: {text}: {e}") from None
    args = instr.intrinsic_args
    if not instr.intrinsic or not args:
        raise CodegenError(f"llvm: {text}: {s.isa.name}.{s.name} names no LLVM intrinsic with its arguments "
                           f"(intrinsic {instr.intrinsic!r}, intrinsic_args {list(args)}); only real-machine "
                           "ISAs such as x86 run on the CPU")
    if not runs_on_cpu(s, features):
        needs = " or ".join("+".join(option) for option in instr.features)
        where = f"this CPU ({llvm.get_host_cpu_name()})" if features is None else \
            f"the target (features {', '.join(sorted(features)) or 'none'})"
        raise CodegenError(f"llvm: {text}: {where} lacks {needs}")
    sem = instr.typed_semantics()
    if len(sem.writes) != 1:
        raise CodegenError(f"llvm: {text}: an intrinsic returns one register, but the semantics writes "
                           f"{list(sem.writes)}")
    regions = {r.operand: r for r in s.regions}
    summed = (instr.intrinsic_accumulator,) if instr.intrinsic_accumulator else ()
    missing = [op for op in (*args, *summed, *sem.writes) if op not in regions]
    if missing:
        raise CodegenError(f"llvm: {text}: no region for operand(s) {', '.join(missing)}")
    insn = spec.insn(s.name)
    values = []
    for name in args:
        op = instr.operand(name)
        _check_dtype(text, op, regions[name])
        values.append(_read(em, regions[name], math.prod(operand_shape(spec, insn, name)), text))
    (out,) = sem.writes
    _check_dtype(text, instr.operand(out), regions[out])
    count = math.prod(operand_shape(spec, insn, out))
    ret = ll.VectorType(memory_type(regions[out].buffer.dtype), count)
    fn = declare(em.module, instr.intrinsic, ll.FunctionType(ret, [v.type for v in values]))
    result = em.builder.call(fn, values)
    for name in summed:   # the intrinsic takes no accumulator: its result is added to it
        _check_dtype(text, instr.operand(name), regions[name])
        acc = _read(em, regions[name], count, text)
        result = em.builder.add(acc, result) if isinstance(ret.element, ll.IntType) else \
            em.builder.fadd(acc, result)
    _write(em, regions[out], result, text)


def _check_dtype(text: str, op: isa.Operand, r: n.Region) -> None:
    if op.dtype != r.buffer.dtype.short:
        raise CodegenError(f"llvm: {text}: operand '{op.name}' is {op.dtype}, but buffer {r.buffer.name} "
                           f"holds {r.buffer.dtype.short}")


def _positions(r: n.Region, count: int, text: str) -> list[int] | None:
    """Element positions relative to the offset, in operand order; None when a stride is not constant."""
    shape, strides = (r.shape, r.strides) if r.strides else ((count,), (n.const(1),))
    if math.prod(shape) != count:
        raise CodegenError(f"llvm: {text}: operand '{r.operand}' has {count} elements, but its view "
                           f"{list(shape)} holds {math.prod(shape)}")
    if not all(isinstance(x, n.IntImm) for x in strides):
        return None
    pos = [0]
    for size, stride in zip(shape, strides, strict=True):
        pos = [p + k * stride.value for p in pos for k in range(size)]
    return pos


def _base(em: FunctionEmitter, r: n.Region, pos: list[int] | None, text: str) -> ll.Value:
    """The region's offset (i64), checked so that every position stays inside the buffer."""
    offset = em.as_i64(em.expr(r.offset), r.offset.dtype)
    lo, hi = (min(pos), max(pos)) if pos is not None else (None, None)
    within = bound(r.offset, em.ranges)
    if pos is not None and within.lo is not None and within.hi is not None and \
            within.lo + lo >= 0 and within.hi + hi < r.buffer.size:
        return offset
    if pos is not None:
        first = em.builder.add(offset, ll.Constant(I64, lo))
        last = em.builder.add(offset, ll.Constant(I64, hi))
        ok = em.builder.and_(em.builder.icmp_signed(">=", first, ll.Constant(I64, 0)),
                             em.builder.icmp_signed("<", last, ll.Constant(I64, r.buffer.size)))
        em.fail(ok, f"operand '{r.operand}' of '{text}' leaves buffer {r.buffer.name}")
    return offset


def _dynamic_positions(em: FunctionEmitter, r: n.Region, offset: ll.Value, text: str) -> list[ll.Value]:
    strides = [em.as_i64(em.expr(x), x.dtype) for x in r.strides]
    addrs = [offset]
    for size, stride in zip(r.shape, strides, strict=True):
        steps = [em.builder.mul(stride, ll.Constant(I64, k)) for k in range(size)]
        addrs = [em.builder.add(a, step) for a in addrs for step in steps]
    for a in addrs:
        em.check_index(a, r.buffer.size, text)
    return addrs


def _read(em: FunctionEmitter, r: n.Region, count: int, text: str) -> ll.Value:
    ety = memory_type(r.buffer.dtype)
    pos = _positions(r, count, text)
    offset = _base(em, r, pos, text)
    b = em.builder
    if pos is not None:
        lo, hi = min(pos), max(pos)
        if len(set(pos)) == hi - lo + 1:  # one contiguous run: load it, shuffle into place
            ptr = em.element_ptr(r.buffer, b.add(offset, ll.Constant(I64, lo)))
            width = (hi - lo + 1) * _bits(ety)
            if width in (16, 32, 64) and pos == list(range(lo, hi + 1)) * (count // (hi - lo + 1)) and \
                    count > hi - lo + 1:   # the run repeated (a broadcast group): one wide load, splat
                return _splat(b, b.load(ptr, typ=ll.IntType(width), align=1), count * _bits(ety) // width,
                              ll.VectorType(ety, count))
            run = ll.VectorType(ety, hi - lo + 1)
            vec = b.load(ptr, typ=run, align=1)
            if pos == list(range(lo, hi + 1)):
                return vec
            mask = ll.Constant(ll.VectorType(I32, count), [p - lo for p in pos])
            return b.shuffle_vector(vec, ll.Constant(run, None), mask)
        addrs = [b.add(offset, ll.Constant(I64, p)) for p in pos]
    else:
        addrs = _dynamic_positions(em, r, offset, text)
    vec = ll.Constant(ll.VectorType(ety, count), None)
    for k, a in enumerate(addrs):
        vec = b.insert_element(vec, b.load(em.element_ptr(r.buffer, a), typ=ety), ll.Constant(I32, k))
    return vec


def _bits(ty: ll.Type) -> int:
    return ty.width if isinstance(ty, ll.IntType) else {"half": 16, "float": 32, "double": 64}.get(str(ty), 0)


def _splat(b: ll.IRBuilder, scalar: ll.Value, lanes: int, ty: ll.VectorType) -> ll.Value:
    """``scalar`` repeated ``lanes`` times, as a vector of type ``ty`` (the same bits): UNIT's broadcast of an
    operand's group (``x16(a[x, y, co:4])``, Fig. 5), vpbroadcastd on x86, ld1r on AArch64."""
    wide = ll.VectorType(scalar.type, lanes)
    one = b.insert_element(ll.Constant(wide, None), scalar, ll.Constant(I32, 0))
    zeros = ll.Constant(ll.VectorType(I32, lanes), [0] * lanes)
    splat = b.shuffle_vector(one, ll.Constant(wide, None), zeros)
    return b.bitcast(splat, ty)


def _write(em: FunctionEmitter, r: n.Region, value: ll.Value, text: str) -> None:
    count = value.type.count
    pos = _positions(r, count, text)
    offset = _base(em, r, pos, text)
    b = em.builder
    if pos is not None and pos == list(range(pos[0], pos[0] + count)):
        b.store(value, em.element_ptr(r.buffer, b.add(offset, ll.Constant(I64, pos[0]))), align=1)
        return
    addrs = [b.add(offset, ll.Constant(I64, p)) for p in pos] if pos is not None else \
        _dynamic_positions(em, r, offset, text)
    for k, a in enumerate(addrs):
        b.store(b.extract_element(value, ll.Constant(I32, k)), em.element_ptr(r.buffer, a))
