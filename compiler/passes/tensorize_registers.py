"""The tensorize pass of UNIT's schedules for real CPUs and GPUs: UNIT's rewriter, last step (Sec. III.C and
IV.B.3). The ``cpu`` and ``arm`` pipelines run it through ``tensorize`` (an ISA whose operands are all
registers), the ``cuda`` pipeline directly (its warpgroup instructions read a and b from shared memory).

By the time this runs, the UNIT schedule (``compiler.ops.cpu``, ``compiler.ops.cuda``) has tiled the loops
the Inspector mapped by the instruction's extents, moved them innermost and marked them ``tensorize =
<instruction>``. Each marked statement is then:
- the reduction's update nest ``for ki: for ci: out[..] = out[..] + i32(data[..]) * i32(kernel[..])``: the
  Inspector runs again on exactly these loops (``inspector.inspect_nest``); a mapping whose extents equal
  the loops' replaces the nest by one ``TensorInsn`` (an instruction that saturates or narrows its sum,
  vpdpbusds, only where the range proof holds over the whole accumulation, ``ranges.accumulation_in``: the
  loops and stores around the accumulator in the function) whose regions say where each register's
  elements are: the access's flat offset with the mapped loops at 0, and a view
  (``Region.shape``/``strides``) whose strides are the mapped loops' coefficients in that offset (UNIT's
  operand-preparation input: each replaced loop variable and its coefficient). A stride of 0 is a
  broadcast; the LLVM backend turns views into vector loads, broadcasts and shuffles
  (``compiler.backend.llvm_operands``);
- the reduction's init nest ``for ki: out[..] = 0`` (lowering marks it too): its loop is vectorized, which
  zeroes the accumulator lanes at once;
- a guard inside the nest that none of its loops changes (the tail of a tile that does not divide the
  layer) is control around the instruction and stays, around it;
- anything else stays scalar code; ``why_not`` says why.
"""

from __future__ import annotations

import isa
from compiler.arith import linear_form, simplify
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, free_vars, loads_in, substitute
from compiler.passes import inspector, ranges

MARKS = ("pragma_intrin", "tensorize")


def is_register_isa(spec: isa.ISA) -> bool:
    """True for a real machine's ISA: every operand of every instruction is a register."""
    ops = [op for i in spec.instructions.values() for op in i.operands]
    return bool(ops) and all(op.kind == "register" for op in ops)


def tensorize_registers(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Replace every marked nest that an instruction of ``spec`` computes by that instruction."""
    return ir.PrimFunc(func.name, func.params, _Rewrite(spec, func.body).mutate(func.body), func.attrs)


def why_not(stmt: ir.Stmt, spec: isa.ISA, name: str, body: ir.Stmt | None = None) -> str | None:
    """Why marked ``stmt`` (in the function body ``body``, which a saturating instruction's range proof
    reads) does not become instruction ``name``; None when it does (or is an init nest)."""
    result = _rewrite(stmt, spec, name, body)
    return result if isinstance(result, str) else None


class _Rewrite(IRMutator):
    def __init__(self, spec: isa.ISA, body: ir.Stmt) -> None:
        self.spec = spec
        self.body = body

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        if s.key not in MARKS:
            return self.generic_mutate(s)
        result = _rewrite(s.body, self.spec, str(s.value), self.body)
        return ir.Attr(s.key, s.value, s.body if isinstance(result, str) else result)


def _nest(stmt: ir.Stmt) -> tuple[list[ir.For], list[ir.Expr], ir.Stmt]:
    """The loops of a perfect nest, the guards met inside it (``if`` without ``else``) and its body."""
    loops, guards = [], []
    while isinstance(stmt, ir.For) or (isinstance(stmt, ir.IfThenElse) and stmt.else_case is None):
        if isinstance(stmt, ir.For):
            loops.append(stmt)
            stmt = stmt.body
        else:
            guards.append(stmt.cond)
            stmt = stmt.then_case
    return loops, guards, stmt


def _guarded(guards: list[ir.Expr], stmt: ir.Stmt) -> ir.Stmt:
    for cond in reversed(guards):
        stmt = ir.IfThenElse(cond, stmt)
    return stmt


def _rewrite(stmt: ir.Stmt, spec: isa.ISA, name: str, body: ir.Stmt | None) -> ir.Stmt | str:
    """The instruction (or the vectorized init) that replaces ``stmt`` (in the function body ``body``), or
    the reason it stays."""
    if name not in spec.instructions:
        return f"{spec.name} has no instruction {name!r}"
    loops, guards, store = _nest(stmt)
    if not loops or not isinstance(store, ir.Store):
        return "the marked statement is not a loop nest around one store"
    nest_vars = {loop.var for loop in loops}
    varying = [g for g in guards if free_vars(g) & nest_vars]
    if varying:  # a guard that no loop of the nest changes is control around the instruction
        return f"the guard '{varying[0]}' depends on the instruction's loops (a tail the schedule left)"
    if not any(isinstance(x, ir.Load) and x.buffer is store.buffer for x in loads_in(store.value)):
        init = _vectorized_init(loops, store)
        return init if isinstance(init, str) else _guarded(guards, init)
    saturates = ranges.envelope_of(spec.instruction(name)) is not None
    whole = ranges.accumulation_in(body, store) if saturates and body is not None else None
    mapping = inspector.inspect_nest(loops, store, spec, name, whole)
    if isinstance(mapping, inspector.NotApplicable):
        return str(mapping)
    for index, axis in mapping.loops.items():
        if axis.extent != mapping.extents[index]:
            return (
                f"loop {axis.var.name} runs {axis.extent} times; the schedule must tile it by "
                f"{mapping.extents[index]} first"
            )
    if len(mapping.loops) != len(loops):
        unmapped = [
            loop.var.name for loop in loops if loop.var not in {a.var for a in mapping.loops.values()}
        ]
        return f"loops {', '.join(unmapped)} inside the mark are not the instruction's"
    regions = tuple(_region(mapping, operand) for operand in sorted(mapping.operands))
    return _guarded(guards, ir.TensorInsn(spec, name, (), regions))


def _vectorized_init(loops: list[ir.For], store: ir.Store) -> ir.Stmt | str:
    if len(loops) != 1 or free_vars(store.value):
        return "the marked statement neither accumulates nor initializes an accumulator"
    (loop,) = loops
    return ir.For(loop.var, loop.min, loop.extent, store, ir.ForKind.VECTORIZED)


def _region(mapping: inspector.Mapping, operand: str) -> ir.Region:
    access = mapping.operands[operand]
    flat = flat_index(access.buffer, access.indices)
    lf = linear_form(flat)
    shape, variables = inspector.operand_view(mapping, operand)
    strides = [lf.terms.get(v, 0) for v in variables]
    offset = simplify(substitute(flat, {v: ir.const(0, v.dtype) for v in variables}))
    row_major = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        row_major[d] = row_major[d + 1] * shape[d + 1]
    if strides == row_major:
        return ir.Region(operand, access.buffer, offset)
    return ir.Region(operand, access.buffer, offset, shape, tuple(ir.const(s, flat.dtype) for s in strides))


def flat_index(buf: ir.Buffer, indices: tuple[ir.Expr, ...]) -> ir.Expr:
    """The row-major element offset of ``buf[indices]``, simplified."""
    flat: ir.Expr = indices[0]
    for size, i in zip(buf.shape[1:], indices[1:], strict=True):
        flat = flat * size + i
    return simplify(flat)
