"""Rows a tile's fill copies again: a sliding window's halo, taken from the tile before it on chip.

A conv's SMEM tiles overlap by the kernel's halo: tile i + 1 copies from GMEM the last rows tile i copied
too. ``double_buffer`` fills tile i + 1 while tile i sits complete in the other buffer; ``reuse_rows`` turns
the rows both fills copy into a copy between the two buffers, so that only the new rows cross the GMEM
port (the card's one port for every core: the halo of two rows doubled the input traffic of two-row tiles).

    fill = reuse_rows(fill, before, held)   # the statements of ``fill``, the shared rows copied from ``held``

A fill is statements of zero fills and one trailing 2-D copy; a 2-D copy is an instruction of one read and
one written operand, each of shape ``[rows, row length]`` with strides ``[row stride field, 1]`` in the spec
(``memcpy``: ``shape = ["count", "len"], strides = ["dst_stride", 1]``): the fields come from the spec, not
from names. Rows are shared when both fills' copies read the same buffer with the same row length and
strides, the later one starting a whole number of rows later but before the earlier one's last row.

    fills = skip_zero_fills(fills)          # a fill's zero fill left out where the buffer is still zero

Both serve ``double_buffer``'s two-level pipeline (they are not passes of their own): every fill it issues
runs where the tile it reads from is complete and the buffer it writes is free.
"""

from __future__ import annotations

import dataclasses

import isa
from compiler import arith
from compiler.interp.tensor_insn import operand_span, read_operands, written_operands
from compiler.ir import nodes as ir
from compiler.ir.functor import marked_insn, with_marks
from compiler.passes.tensorize import space_of
from isa.lang.scalar import evaluate as evaluate_scalar
from isa.lang.tree import Name, Num


@dataclasses.dataclass(frozen=True)
class _Copy:
    """A 2-D copy's view: its statement, the field of its row count and the fields of its operands' row
    strides and spaces, their values, and its operands' regions."""

    stmt: ir.Stmt
    insn: ir.TensorInsn
    rows: str
    strides: dict[str, str]   # operand -> its row-stride field
    spaces: dict[str, str]    # operand -> its space field ("" when the space is fixed)
    values: dict[str, int]
    dst: ir.Region
    src: ir.Region

    def row(self, operand: str) -> int:
        """The row stride of ``operand`` in elements of its buffer."""
        region = self.dst if operand == "dst" else self.src
        return self.values[self.strides[region.operand]] // (region.buffer.dtype.bits // 8)


def reuse_rows(fill: list[ir.Stmt], before: list[ir.Stmt], held: ir.Buffer) -> list[ir.Stmt]:
    """``fill`` with the rows its copy shares with ``before``'s copy (whose rows ``held`` holds, at the
    places ``before`` wrote them) copied from ``held``, the rest still from the copy's source; ``fill`` as it
    is when they share none (module docstring)."""
    if not fill or not before:
        return fill
    copy, prev = _copy(fill[-1]), _copy(before[-1])
    if copy is None or prev is None or copy.insn.name != prev.insn.name or copy.src.buffer != prev.src.buffer:
        return fill
    if any(copy.values[f] != prev.values[f] for f in (*copy.strides.values(), *_lengths(copy))):
        return fill
    step = arith.simplify(copy.src.offset - prev.src.offset)
    if not isinstance(step, ir.IntImm) or step.value <= 0 or step.value % copy.row("src") or \
            not isinstance(copy.dst.offset, ir.IntImm) or not isinstance(prev.dst.offset, ir.IntImm):
        return fill
    skip = step.value // copy.row("src")   # rows of ``before`` before the first one ``fill`` copies
    shared = min(copy.values[copy.rows], prev.values[prev.rows] - skip)
    if shared <= 0:
        return fill
    first = prev.dst.offset.value + skip * prev.row("dst")
    on_chip = _with(copy, shared, dst=copy.dst.offset.value, src=first, src_buffer=held)
    if _breaks_a_rule(_copy(on_chip)):
        return fill   # the spec has no such copy (between these spaces, say)
    rest = copy.values[copy.rows] - shared
    from_source = [_with(copy, rest, dst=copy.dst.offset.value + shared * copy.row("dst"),
                         src=copy.src.offset + ir.const(shared * copy.row("src")))] if rest else []
    return [*fill[:-1], on_chip, *from_source]


def skip_zero_fills(fills: list[list[ir.Stmt]]) -> list[list[ir.Stmt]]:
    """The fills of tiles that alternate between two buffers, a fill's leading zero fill left out where
    it would zero nothing nonzero: the fill two before (the same buffer) zeroed the same bytes and its
    copies wrote only bytes this fill's copies write again (a tile inside the walk; the padding columns
    stay zero from the buffer's first fill). The last tiles, whose padding rows held data, keep theirs."""
    out = list(fills)
    for i in range(2, len(fills)):
        zero, earlier = _zero(fills[i]), _zero(fills[i - 2])
        rows, before = _rows(fills[i][1:]), _rows(fills[i - 2][1:])
        if zero is None or earlier is None or rows is None or before is None or \
                _zeroed(zero) is None or _zeroed(zero) != _zeroed(earlier):
            continue
        if all(any(c <= a and b <= d for c, d in rows) for a, b in before):
            out[i] = fills[i][1:]
    return out


def _zero(fill: list[ir.Stmt]) -> ir.TensorInsn | None:
    """The zero fill that opens ``fill`` (one written operand, ``dst[i] = 0``), if it does."""
    insn = marked_insn(fill[0]) if fill else None
    if insn is None or read_operands(insn) or len(written_operands(insn)) != 1:
        return None
    (op,) = written_operands(insn)
    semantics = insn.isa.instruction(insn.name).semantics.replace(" ", "")
    return insn if semantics.endswith("=0") and semantics.startswith(op + "[") else None


def _zeroed(zero: ir.TensorInsn) -> tuple[ir.Buffer, tuple[int, int]] | None:
    (op,) = written_operands(zero)
    span = operand_span(zero, op)
    return None if span is None else (next(r.buffer for r in zero.regions if r.operand == op), span)


def _rows(copies: list[ir.Stmt]) -> list[tuple[int, int]] | None:
    """The elements [first, end) of each row the 2-D ``copies`` write, or None if one is not such a copy."""
    out = []
    for stmt in copies:
        copy = _copy(stmt)
        span = None if copy is None else operand_span(copy.insn, copy.dst.operand)
        if span is None:
            return None
        first, row, count = span[0], copy.row("dst"), copy.values[copy.rows]
        length = span[1] - first - (count - 1) * row   # one row's elements
        out += [(first + r * row, first + r * row + length) for r in range(count)]
    return out


def _breaks_a_rule(copy: _Copy) -> bool:
    """Whether ``copy``'s fields break a rule of its instruction that they decide alone (a rule that needs
    an address, which the IR keeps in regions, is the backend's to check)."""
    spec, instr = copy.insn.isa, copy.insn.isa.instruction(copy.insn.name)
    env = spec.scalar_env({f.name: copy.values.get(f.name, f.default or 0) for f in instr.fields
                           if f.kind != "addr"})
    for c in instr.constraints:
        try:
            ok = evaluate_scalar(c.rule, env)
        except isa.ExecError:
            continue   # a name no field gives
        if not ok:
            return True
    return False


def _lengths(copy: _Copy) -> list[str]:
    """The fields of a copy other than its rows, strides, spaces (the row length and the like)."""
    named = {copy.rows, *copy.strides.values(), *copy.spaces.values()}
    return [f for f in copy.values if f not in named]


def _copy(stmt: ir.Stmt) -> _Copy | None:
    """``stmt`` (under its marks) as a 2-D copy with constant fields, or None."""
    insn = marked_insn(stmt)
    if insn is None:
        return None
    written, read = written_operands(insn), read_operands(insn)
    if len(written) != 1 or len(read) != 1:
        return None
    instr = insn.isa.instruction(insn.name)
    ops = {name: instr.operand(name) for name in (written[0], read[0])}
    rows = {_field(op.shape[0]) if len(op.shape) == 2 else None for op in ops.values()}
    strides = {name: _field(op.strides[0]) if len(op.strides) == 2 and _is_one(op.strides[1]) else None
               for name, op in ops.items()}
    values = {f.name: f.value.value for f in insn.fields if isinstance(f.value, ir.IntImm)}
    if len(rows) != 1 or None in rows or None in strides.values() or len(values) != len(insn.fields) or \
            not {*rows, *strides.values()} <= values.keys():
        return None
    regions = {r.operand: r for r in insn.regions}
    spaces = {name: op.space if op.space_is_field else "" for name, op in ops.items()}
    return _Copy(stmt, insn, rows.pop(), strides, spaces, values, regions[written[0]], regions[read[0]])


def _is_one(expr) -> bool:
    return isinstance(expr, Num) and expr.value == 1 or expr == 1


def _field(expr) -> str | None:
    """The field a shape or stride expression of the spec names, when it is one bare name."""
    if isinstance(expr, Name):
        return expr.id
    return expr if isinstance(expr, str) and expr.isidentifier() else None


def _with(copy: _Copy, rows: int, dst: int, src: ir.Expr | int,
          src_buffer: ir.Buffer | None = None) -> ir.Stmt:
    """``copy`` of ``rows`` rows from element ``dst`` of its destination and ``src`` of its source (or of
    ``src_buffer``, laid out as its destination: its row stride and space)."""
    values = dict(copy.values, **{copy.rows: rows})
    src_region = copy.src
    if src_buffer is not None:
        values[copy.strides[copy.src.operand]] = copy.values[copy.strides[copy.dst.operand]]
        if copy.spaces[copy.src.operand]:
            values[copy.spaces[copy.src.operand]] = copy.insn.isa.enum_values()[space_of(src_buffer.scope)]
        src_region = dataclasses.replace(src_region, buffer=src_buffer)
    fields = tuple(ir.InsnField(f.name, ir.const(values[f.name])) for f in copy.insn.fields)
    regions = tuple(dataclasses.replace(copy.dst, offset=ir.const(dst)) if r.operand == copy.dst.operand else
                    dataclasses.replace(src_region, offset=src if isinstance(src, ir.Expr) else ir.const(src))
                    if r.operand == copy.src.operand else r for r in copy.insn.regions)
    insn = dataclasses.replace(copy.insn, fields=fields, regions=regions)
    return with_marks(copy.stmt, insn)
