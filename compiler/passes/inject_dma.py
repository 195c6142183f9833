"""inject_dma: turn marked copy nests between DRAM and an on-chip scope into 2-D strided DMA instructions.

TVM Sec. 3.5 / VTA's InjectDMAIntrin. A statement under ``Attr("pragma_dma_copy")`` is a perfect nest of
serial loops around one store that copies a global buffer into a buffer of an on-chip scope (a load,
``X.inp[...] = data[...]``, possibly zero-padded: ``if_then_else(bounds, data[...], 0)``) or an on-chip
buffer out to a global one (a store, ``out[...] = i8(acc[...])``). The instruction comes from the ISA
spec: the one of group "load" or "store" whose SRAM operand lives in the on-chip buffer's space (scope
"inp" is space INP) and whose operand dtypes and semantics (``dram = T(sram)`` or ``sram = select(...,
dram, 0)``) fit. Its operands' shapes and strides (``sram[Y, X, TILE]`` contiguous, ``dram[y_size,
x_size, TILE]`` with row pitch ``x_stride * TILE``) say how the nest must walk memory:

- the innermost loops cover one tile, contiguously in both buffers;
- the remaining loops are counted in tiles; loops that walk both buffers contiguously merge;
- the innermost of them is the row (``x_size`` tiles, contiguous in DRAM), the next the rows (``y_size``,
  ``x_stride`` tiles apart in DRAM, back to back on chip); any further loop stays a loop around the
  instruction;
- a padding guard bounds the row and column loops by expressions of the outer loops: ``y_pad_0``,
  ``y_size``, ``y_pad_1`` (and ``x_...``) become those expressions, evaluated wherever the instruction
  runs (as VTA's runtime computes them on the host).

Contract: flat IR in, flat IR out, computing the same (the interpreter runs a ``TensorInsn`` by its spec
semantics, so the pass is checked by interpreting before and after). A marked nest that is no DMA raises
``LoweringError`` naming the statement and the rule it breaks: VITA has no scalar fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

import isa
from compiler.arith import LinearForm, linear_form, simplify
from compiler.errors import LoweringError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, free_vars, substitute
from compiler.ir.intrinsics import Call
from compiler.passes.tensorize import space_of
from isa.lang import tree as t
from isa.lang.scalar import ScalarEnv
from isa.lang.scalar import evaluate as evaluate_scalar

MARK = "pragma_dma_copy"


def inject_dma(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Replace each ``pragma_dma_copy`` nest by a DMA ``TensorInsn`` of ``spec`` (see the module
    docstring)."""
    return ir.PrimFunc(func.name, func.params, _Inject(spec).mutate(func.body), func.attrs)


@dataclass(frozen=True)
class _Axis:
    """Loops of the nest walked as one, in tile units: variables (innermost first; a merged loop's index
    is ``sum(var_i * prod(extent_j, j < i))``), total extent, and steps on chip and in DRAM."""

    vars: tuple[ir.Var, ...]
    extent: int
    sram: int
    dram: int

    def absorbs(self, outer: _Axis, guarded: set[ir.Var]) -> bool:
        """Whether ``outer`` continues this axis in both buffers (and no padding bound involves either)."""
        return not (guarded & {*self.vars, *outer.vars}) and outer.sram == self.sram * self.extent \
            and outer.dram == self.dram * self.extent

    def merged(self, outer: _Axis) -> _Axis:
        return _Axis((*self.vars, *outer.vars), self.extent * outer.extent, self.sram, self.dram)


class _Inject(IRMutator):
    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        if s.key != MARK:
            return self.generic_mutate(s)
        return _Copy(s.body, self.spec).lower()


def _fail(stmt: ir.Stmt, rule: str) -> LoweringError:
    text = str(stmt).strip().splitlines()
    return LoweringError(f"inject_dma: cannot make a DMA of `{text[-1].strip()}`: {rule}")


class _Copy:
    def __init__(self, stmt: ir.Stmt, spec: isa.ISA) -> None:
        self.stmt, self.spec = stmt, spec

    def lower(self) -> ir.Stmt:
        loops, store = self._nest()
        value, guard = store.value, None
        if isinstance(value, Call) and value.name == "if_then_else" or isinstance(value, ir.Select):
            cond, then, other = value.args if isinstance(value, Call) else \
                (value.cond, value.true_value, value.false_value)
            if not isinstance(other, ir.IntImm) or other.value != 0:
                raise _fail(self.stmt, f"the padding value is {other}, not 0")
            value, guard = then, cond
        cast = None
        if isinstance(value, ir.Cast):
            cast, value = value.type, value.value
        if not isinstance(value, ir.Load):
            raise _fail(self.stmt, "the stored value is not a load (or a cast load, or a padded load)")
        to_chip = store.buffer.scope != "global"
        sram, dram = (store.buffer, value.buffer) if to_chip else (value.buffer, store.buffer)
        if (sram.scope == "global") or dram.scope != "global":
            raise _fail(self.stmt, "a DMA copies between a global buffer and an on-chip one")
        if to_chip and cast is not None:
            raise _fail(self.stmt, "a load does not convert types")
        if guard is not None and not to_chip:
            raise _fail(self.stmt, "a store cannot pad")
        instr = self._instruction(sram, dram, to_chip)
        tile = self._tile(instr)
        sram_index, dram_index = (store.indices[0], value.indices[0]) if to_chip else \
            (value.indices[0], store.indices[0])
        axes = self._axes(loops, sram_index, dram_index, tile, guard)
        return self._emit(instr, sram, dram, sram_index, dram_index, axes, guard)

    # ---- the nest

    def _nest(self) -> tuple[list[ir.For], ir.Store]:
        loops, s = [], self.stmt
        while isinstance(s, ir.For):
            if s.kind is ir.ForKind.THREAD_BINDING or not isinstance(s.extent, ir.IntImm) \
                    or not isinstance(s.min, ir.IntImm) or s.min.value != 0:
                raise _fail(self.stmt, f"loop {s.var.name} is not serial from 0 with a constant extent")
            loops.append(s)
            s = s.body
        if not isinstance(s, ir.Store):
            raise _fail(self.stmt, f"the nest holds a {type(s).__name__}, not one store")
        return loops, s

    def _instruction(self, sram: ir.Buffer, dram: ir.Buffer, to_chip: bool) -> isa.Instruction:
        space = space_of(sram.scope)
        wanted = "load" if to_chip else "store"
        for instr in self.spec.instructions.values():
            ops = {op.name: op for op in instr.operands}
            if instr.group != wanted or set(ops) != {"sram", "dram"}:
                continue
            if ops["sram"].space != space or ops["dram"].space != "DRAM":
                continue
            if ops["sram"].dtype != sram.dtype.short or ops["dram"].dtype != dram.dtype.short:
                continue
            return instr
        raise _fail(self.stmt, f"{self.spec.name} has no {wanted} between DRAM ({dram.dtype.short}) and "
                               f"space {space} ({sram.dtype.short})")

    def _param(self, e: t.Expr) -> int:
        return int(evaluate_scalar(e, ScalarEnv(self.spec.params)))

    def _tile(self, instr: isa.Instruction) -> int:
        shape = next(op for op in instr.operands if op.name == "sram").shape
        return self._param(shape[-1])

    def _axes(self, loops: list[ir.For], sram_index: ir.Expr, dram_index: ir.Expr, tile: int,
              guard: ir.Expr | None) -> tuple[set[ir.Var], _Axis | None, _Axis | None, list[ir.For]]:
        """The variables of the tile's own loops, the row axis x and rows axis y (None when absent), and
        the loops that stay around the instruction (outermost first)."""
        sl, dl = linear_form(sram_index), linear_form(dram_index)
        for v in (lp.var for lp in loops):
            for form, what in ((sl, "on-chip"), (dl, "DRAM")):
                if any(v in free_vars(a) and a is not v for a in form.terms):
                    raise _fail(self.stmt, f"the {what} index is not affine in {v.name}")
        rest = list(loops)
        tile_vars, covered = set(), 1
        while covered < tile:
            if not rest:
                raise _fail(self.stmt, f"the nest copies {covered} elements, less than a tile of {tile}")
            lp = rest.pop()
            if sl.coef(lp.var) != covered or dl.coef(lp.var) != covered:
                raise _fail(self.stmt, f"loop {lp.var.name} does not walk a {tile}-element tile contiguously")
            covered *= lp.extent.value
            tile_vars.add(lp.var)
        if covered != tile:
            raise _fail(self.stmt, f"the innermost loops cover {covered} elements, not a tile of {tile}")
        guarded = free_vars(guard) if guard is not None else set()
        pending = []
        for lp in reversed(rest):
            a, b = sl.coef(lp.var), dl.coef(lp.var)
            if a % tile or b % tile:
                raise _fail(self.stmt, f"loop {lp.var.name} steps by part of a tile")
            pending.append(_Axis((lp.var,), lp.extent.value, a // tile, b // tile))
        x = y = None
        if pending and pending[0].sram == 1 and pending[0].dram == 1:
            x = pending.pop(0)
            while pending and x.absorbs(pending[0], guarded):
                x = x.merged(pending.pop(0))
        if pending:
            y = pending.pop(0)
            while pending and y.absorbs(pending[0], guarded):
                y = y.merged(pending.pop(0))
        if y is not None and y.sram != (x.extent if x is not None else 1):
            raise _fail(self.stmt, f"rows are {y.sram} tiles apart on chip, not back to back")
        keep = {a.vars[0] for a in pending}
        return tile_vars, x, y, [lp for lp in loops if lp.var in keep]

    # ---- the instruction

    def _emit(self, instr: isa.Instruction, sram: ir.Buffer, dram: ir.Buffer, sram_index: ir.Expr,
              dram_index: ir.Expr, axes, guard: ir.Expr | None) -> ir.Stmt:
        tile_vars, x, y, outer = axes
        row_axes = {a.vars[0] for a in (x, y) if a is not None and len(a.vars) == 1}
        bounds = _bounds(guard, row_axes, self.stmt) if guard is not None else {}
        fields: dict[str, ir.Expr] = {}
        origin = {v: ir.const(0) for v in tile_vars}       # where the DRAM block starts
        for name, axis in (("x", x), ("y", y)):
            ext = axis.extent if axis is not None else 1
            lo, hi = bounds.get(axis.vars[0], (None, None)) if axis is not None else (None, None)
            pad0 = _clamp(lo, ext) if lo is not None else ir.const(0)
            end = _clamp(hi, ext) if hi is not None else ir.const(ext)
            if lo is not None:
                end = simplify(ir.max_(end, pad0))
            fields[f"{name}_pad_0"] = pad0
            fields[f"{name}_size"] = simplify(end - pad0)
            fields[f"{name}_pad_1"] = simplify(ir.const(ext) - end)
            if axis is not None:
                origin.update({v: ir.const(0) for v in axis.vars})
                origin[axis.vars[0]] = pad0
        fields["x_stride"] = ir.const(y.dram) if y is not None else fields["x_size"]
        chip_origin = {v: ir.const(0) for v in origin}
        regions = (ir.Region("sram", sram, simplify(substitute(sram_index, chip_origin))),
                   ir.Region("dram", dram, simplify(substitute(dram_index, origin))))
        known = {f.name for f in instr.fields}
        out: ir.Stmt = ir.TensorInsn(self.spec, instr.name,
                                     tuple(ir.InsnField(k, v) for k, v in fields.items() if k in known),
                                     regions)
        for lp in reversed(outer):
            out = ir.For(lp.var, lp.min, lp.extent, out, lp.kind, lp.thread)
        return out


def _clamp(e: ir.Expr, ext: int) -> ir.Expr:
    return simplify(ir.min_(ir.max_(e, ir.const(0)), ir.const(ext)))


_FLIP = {ir.GE: ir.LE, ir.GT: ir.LT, ir.LE: ir.GE, ir.LT: ir.GT}


Bounds = tuple[ir.Expr | None, ir.Expr | None]


def _bounds(guard: ir.Expr, axes: set[ir.Var], stmt: ir.Stmt) -> dict[ir.Var, Bounds]:
    """For each axis variable ``v`` the guard bounds it by: (first index inside, first index past the end),
    None where the guard sets no bound. Every conjunct must bound exactly one axis variable."""
    out: dict[ir.Var, list] = {}
    for c in _conjuncts(guard):
        if type(c) not in _FLIP:
            raise _fail(stmt, f"the padding condition `{c}` is not a comparison")
        form = linear_form(c.a - c.b)    # c.a OP c.b  <=>  form OP 0
        hits = [v for v in axes if form.coef(v)]
        if len(hits) != 1 or abs(form.coef(hits[0])) != 1 or \
                any(free_vars(a) & axes for a in form.terms if a is not hits[0]):
            raise _fail(stmt, f"the padding condition `{c}` does not bound one row or column loop")
        v = hits[0]
        sign = form.coef(v)
        rest = (form - LinearForm.atom(v).scale(sign)).to_expr()     # form = sign * v + rest
        op = type(c) if sign > 0 else _FLIP[type(c)]                    # v OP b
        b = simplify(ir.const(0) - rest) if sign > 0 else simplify(rest)
        lo_hi = out.setdefault(v, [None, None])
        if op in (ir.GE, ir.GT):
            value = simplify(b + 1) if op is ir.GT else b
            lo_hi[0] = value if lo_hi[0] is None else simplify(ir.max_(lo_hi[0], value))
        else:
            value = simplify(b + 1) if op is ir.LE else b
            lo_hi[1] = value if lo_hi[1] is None else simplify(ir.min_(lo_hi[1], value))
    return {v: (lo, hi) for v, (lo, hi) in out.items()}


def _conjuncts(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


