"""tensorize_tiles: select tile instructions (VITA's GEMM and ALU micro-ops) for marked nests.

TVM Sec. 3.4: a hardware intrinsic is declared by its behaviour; ``tensorize`` replaces the unit of
computation that matches it. VITA's GEMM and ALU instructions describe one micro-op on one tile each
(``acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])``, ``dst[b, o] = min(dst[b, o], select(use_imm != 0,
i32(imm), src[b, o]))``); the instruction runs its micro-ops over loops. So this pass cuts a marked nest
(``Attr("tensorize", ...)`` or ``Attr("pragma_alu", ...)``) in two: the innermost loops become one tile
instruction, a ``TensorInsn`` with its operands' tile offsets, and the outer loops stay around it (the
VITA backend turns them into micro-op loops).

How a nest matches instruction ``I`` (all from the spec):

- the store's value has ``I``'s tree: operators, casts and dtypes; ``+=`` is ``acc = acc + ...``; a
  ``select`` on fields matches the branch whose condition the bound fields make true; a field such as
  ``imm`` matches a constant (which sets it); a sum over reduce indices matches one term of it, under
  ``+=``; ``x >> n`` matches ``floordiv(x, 2**n)`` (the IR writes
  an arithmetic right shift as a floor division by a power of two);
- the innermost loops walk ``I``'s index variables: for every operand, the flat index steps by the
  row-major stride of the operand's shape in each index variable (index variables of extent 1 have no
  loop);
- the fields the tree did not set keep the spec's defaults (``use_imm`` is set when ``imm`` is).

Contract: flat IR in, flat IR out, computing the same; a marked nest that matches no instruction raises
``LoweringError`` with the reason of each attempt (VITA has no scalar fallback).
"""

from __future__ import annotations

import itertools

import isa
from compiler.arith import linear_form, simplify
from compiler.errors import LoweringError
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, substitute
from compiler.passes.match import NoTreeMatch, TreeMatch
from compiler.passes.tensorize import space_of
from isa.lang import tree as t
from isa.lang.scalar import ScalarEnv
from isa.lang.scalar import evaluate as evaluate_scalar

MARKS = ("tensorize", "pragma_alu")
GROUPS = ("gemm", "alu")


def tensorize_tiles(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Replace the tile of each marked nest by a tile instruction of ``spec`` (module docstring)."""
    return ir.PrimFunc(func.name, func.params, _Select(spec).mutate(func.body), func.attrs)


def tile_instruction_for(stmt: ir.Stmt, spec: isa.ISA) -> str | None:
    """The name of the first tile instruction of ``spec`` that the nest ``stmt`` (loops around one store)
    maps to by the rules above, or None: how a schedule asks which operations the spec can fuse."""
    for instr in _Select(spec).candidates:
        try:
            _Match(stmt, spec, instr).run()
            return instr.name
        except _NoMatch:
            continue
    return None


def tile_insn(stmt: ir.Stmt, spec: isa.ISA, instr: isa.Instruction) -> ir.Stmt | str:
    """``stmt`` (loops around one store) as instruction ``instr`` by the rules above (its tile loops
    replaced by the ``TensorInsn``), or the reason it does not map: how the cover prices a candidate."""
    try:
        return _Match(stmt, spec, instr).run()
    except _NoMatch as err:
        return f"{instr.name}: {err}"


class _NoMatch(Exception):
    pass


class _Select(IRMutator):
    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec
        self.candidates = [i for i in spec.instructions.values() if i.group in GROUPS]

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        if s.key not in MARKS:
            return self.generic_mutate(s)
        stmts = s.body.stmts if isinstance(s.body, ir.Seq) else (s.body,)
        return ir.Attr(s.key, s.value, ir.seq(*(self._one(x, str(s.value)) for x in stmts)))

    def _one(self, stmt: ir.Stmt, hint: str) -> ir.Stmt:
        """The instruction the mark names first (the cover's choice), then the others in spec order."""
        reasons = []
        named = [i for i in self.candidates if i.name == hint]
        for instr in [*named, *(i for i in self.candidates if i not in named)]:
            try:
                return _Match(stmt, self.spec, instr).run()
            except _NoMatch as e:
                reasons.append(f"{instr.name}: {e}")
        last = str(stmt).strip().splitlines()[-1].strip()
        raise LoweringError(f"tensorize_tiles: `{last}` matches no {self.spec.name} tile instruction:\n  " +
                            "\n  ".join(reasons))


class _Match:
    def __init__(self, stmt: ir.Stmt, spec: isa.ISA, instr: isa.Instruction) -> None:
        self.stmt, self.spec, self.instr = stmt, spec, instr
        defaults = {f.name: f.default for f in instr.fields if f.default is not None}
        self.tree = TreeMatch(fields=frozenset(f.name for f in instr.fields),
                              field_defaults={**defaults, **spec.params}, shifts=True,
                              admit=self._admit)

    @property
    def operands(self) -> dict[str, tuple[ir.Buffer, ir.Expr]]:
        """operand -> (buffer, flat index), as the tree bound them."""
        return self.tree.operands

    @property
    def fields(self) -> dict[str, int]:
        """The fields the tree set (``imm``, ``use_imm``)."""
        return self.tree.values

    def _admit(self, name: str, buffer: ir.Buffer) -> str | None:
        space = self.instr.operand(name).space
        if space_of(buffer.scope) != space:
            return f"operand {name} lives in {space}, not in {buffer.name}'s scope {buffer.scope!r}"
        return None

    def run(self) -> ir.Stmt:
        sem = self.instr.typed_semantics()
        if len(sem.statements) != 1:
            raise _NoMatch("only single-statement semantics are matched")
        (assign,) = sem.statements
        loops, store = self._nest()
        try:
            self.tree.bind(assign.target.tensor, store.buffer, store.indices[0])
            if assign.op == "+=":
                acc = ir.Load(store.buffer, store.indices)
                if not isinstance(store.value, ir.Add) or store.value.a != acc:
                    raise _NoMatch(f"the update is not {store.buffer.name} = {store.buffer.name} + ...")
                self.tree.sums = True   # the nest's loops walk the reduce indices, one product per store
                self.tree.match(assign.value, store.value.b)
            elif assign.op == "=":
                self.tree.match(assign.value, store.value)
            else:
                raise _NoMatch(f"the semantics assign with {assign.op}")
        except NoTreeMatch as e:
            raise _NoMatch(str(e)) from None
        self._check_dtypes()
        outer, inner = self._tile_loops(loops, sem)
        return self._build(outer, inner)

    # ---- nest and tree

    def _nest(self) -> tuple[list[ir.For], ir.Store]:
        loops, s = [], self.stmt
        while isinstance(s, ir.For):
            if not isinstance(s.extent, ir.IntImm) or not isinstance(s.min, ir.IntImm) or s.min.value != 0:
                raise _NoMatch(f"loop {s.var.name} does not run from 0 a constant number of times")
            loops.append(s)
            s = s.body
        if not isinstance(s, ir.Store):
            raise _NoMatch(f"the nest holds a {type(s).__name__}, not a store")
        return loops, s

    def _check_dtypes(self) -> None:
        for name, (buf, _) in self.operands.items():
            want = self.instr.operand(name).dtype
            if buf.dtype.short != want:
                raise _NoMatch(f"operand {name} is {want}, but {buf.name} holds {buf.dtype.short}")

    # ---- the tile's loops

    def _tile_loops(self, loops: list[ir.For], sem) -> tuple[list[ir.For], list[ir.For]]:
        """Split the nest into the loops that stay and those the tile covers (its index variables)."""
        params = ScalarEnv(self.spec.params)
        extents = {iv.name: int(evaluate_scalar(iv.extent, params)) for iv in sem.indices}
        names = [n for n, ext in extents.items() if ext > 1]
        strides = {}   # (operand, index variable) -> row-major stride in that operand
        for op in self.instr.operands:
            dims = [int(evaluate_scalar(d, params)) for d in op.shape]
            access = self._access_of(sem, op.name)
            if access is None:
                continue
            for k, idx in enumerate(access.indices):
                if isinstance(idx, t.Name):
                    stride = 1
                    for d in dims[k + 1:]:
                        stride *= d
                    strides[(op.name, idx.id)] = stride
        if len(loops) < len(names):
            raise _NoMatch(f"{len(loops)} loops for {len(names)} index variables")
        inner = loops[len(loops) - len(names):]
        forms = {name: linear_form(index) for name, (_, index) in self.operands.items()}
        for perm in itertools.permutations(names):
            if all(lp.extent.value == extents[v] for lp, v in zip(inner, perm, strict=True)) and all(
                    forms[op].coef(lp.var) == strides.get((op, v), 0)
                    for lp, v in zip(inner, perm, strict=True) for op in self.operands):
                return loops[:len(loops) - len(names)], inner
        raise _NoMatch(f"the innermost loops {', '.join(lp.var.name for lp in inner)} do not walk the "
                       f"tile of {', '.join(names)}")

    @staticmethod
    def _access_of(sem, operand: str) -> t.Access | None:
        (assign,) = sem.statements
        if assign.target.tensor == operand:
            return assign.target
        accesses = (a for a in t.walk(assign.value) if isinstance(a, t.Access) and a.tensor == operand)
        return next(accesses, None)

    def _build(self, outer: list[ir.For], inner: list[ir.For]) -> ir.Stmt:
        zero = {lp.var: ir.const(0) for lp in inner}
        regions = [ir.Region(name, buf, simplify(substitute(index, zero)))
                   for name, (buf, index) in self.operands.items()]
        for op in self.instr.operands:   # an operand only a field-decided branch reads: give it dst's tile
            if op.name not in self.operands:
                buf, index = next((b, i) for n, (b, i) in self.operands.items()
                                  if self.instr.operand(n).space == op.space)
                regions.append(ir.Region(op.name, buf, simplify(substitute(index, zero))))
        fields = tuple(ir.InsnField(k, ir.const(v)) for k, v in sorted(self.fields.items()))
        out: ir.Stmt = ir.TensorInsn(self.spec, self.instr.name, fields, tuple(regions))
        for lp in reversed(outer):
            out = ir.For(lp.var, lp.min, lp.extent, out, lp.kind, lp.thread)
        return out
