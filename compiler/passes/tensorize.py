"""tensorize: tensor instruction selection by tree-pattern matching with parameter extraction.

Seed 001 Sec. IV-D: each tensor instruction is a tree pattern plus rules that extract its parameters; a
statement marked for tensorization is (1) matched against the pattern, (2) the loop extents, strides and
offsets met while matching give the instruction's fields, and (3) the statement is rewritten into the
instruction when both succeed, or left as it is (scalar code) otherwise.

Here the patterns are not written per instruction: they are derived from the isa/ spec. An instruction's
semantics ``dst[r, c] = src[r, c]`` or ``dst[i] = max(a[i], b[i])`` is the tree; its operands' shapes and
strides (``shape = ["count", "len"], strides = ["dst_stride", 1]``) are the parameter-extraction rules;
its constraints decide whether the match may be used. Adding an element-wise instruction to a spec file is
enough for this pass to start selecting it.

What a marked statement must look like to match (the form loop partitioning leaves behind):
- a perfect nest of serial loops with constant bounds around one ``Store`` (no guard inside: a guard is
  the reason the paper partitions loops first);
- the stored value has the tree of the instruction's semantics (``+ - *``, ``max``/``min``, casts,
  constants; ``+ * max min`` commute); every operand access is affine in the nest's loop variables;
- after merging loops that walk memory contiguously for every operand, at most as many loops remain as
  the instruction has dimensions; each extent and stride then fixes a field (or must equal what the spec
  computes from fields already fixed); a field the semantics read as a value (an immediate: ``a[i] >> s``,
  a clamp's bounds) is the code's constant there, within the field's bits, and a shift by a field matches
  a floor division by its power of two (``vreq``'s ``a[i] >> s`` is the code's ``a[i] // 256``);
- the operands' buffers are in the spaces the spec names (a space field is set from the buffer's scope);
- the constraints that do not depend on addresses hold (``n % VECTOR_ELEMS == 0``, ``len >= 1`` ...);
  alignment rules ``addr % K == 0`` hold for every value of the offset, assuming buffers start aligned
  (the DianNao backend aligns every allocation). Capacity and overlap rules are the backend's.

Reductions (conv, qconv, matmul: ``out[y, x, co] = T(sum(ky, kx, ci, ...))``) match a nest of spatial loops
around ``acc = 0`` and the reduction loops around ``acc = acc + body``, accumulating in the instruction's
type. Each loop stands for one index variable; the fields come from extents and strides, and every
operand's accesses are proven equal to the instruction's (``compiler/passes/index_fit.py``).

A guard whose condition no loop of the marked statement changes is control around the instruction: it
stays, outside the mark.

An operand indexed by some of the destination's index variables, in their order (``b[c]`` of
``dst[r, c] = a[r, c] + b[c]``), is broadcast along the others: its index steps 0 in their loops.

Non-Goals: element-wise operands indexed otherwise (a transpose) are not matched.

Real CPUs (an ISA whose operands are registers, such as x86) take UNIT's path instead: the schedule has
already tiled and marked the loops the Inspector mapped, and ``compiler.passes.tensorize_registers``
replaces each marked nest by the instruction with its operands' views.

``tensorize(func)`` rewrites every statement under ``Attr("pragma_intrin" | "tensorize", name)`` that
matches: the instruction the mark names first (case-insensitive), else any instruction of the ISA that
has no register operand. ``unmatched(func)`` lists, for each marked statement left scalar, why.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import isa
from compiler.arith import linear_form, simplify
from compiler.arith.linear import LinearForm
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, IRVisitor, free_vars
from compiler.passes import index_fit
from compiler.passes.match import NoTreeMatch, TreeMatch, same_index
from compiler.passes.tensorize_registers import flat_index, is_register_isa, tensorize_registers, why_not
from isa.lang import tree as t
from isa.lang.scalar import evaluate as evaluate_scalar

MARKS = ("pragma_intrin", "tensorize")
#: A mark's value that starts so is scalar code by the schedule's choice (the instruction cover's step that no
#: instruction computes); the rest of the value says why, and ``unmatched`` reports it.
SCALAR_MARK = "scalar: "


def space_of(scope: str) -> str:
    """The memory space of a buffer scope: "global" memory is GMEM, any other scope its upper-case name."""
    return "GMEM" if scope == "global" else scope.upper()




@dataclass(frozen=True)
class Loop:
    """A loop of the matched nest, in the units of its operands: ``coefs[operand]`` per iteration."""

    var: ir.Var | None
    extent: int
    coefs: dict[str, int]


@dataclass(frozen=True)
class NoMatch:
    """Why a statement is not an instruction; ``constraint`` is set when only a constraint failed, with the
    fields the match found and the loop whose extent set each field (what preprocessing may change)."""

    instruction: str
    reason: str
    constraint: isa.Constraint | None = None
    fields: dict[str, int] = field(default_factory=dict)
    field_loops: dict[str, Loop] = field(default_factory=dict)
    loops: tuple[Loop, ...] = ()
    regions: dict[str, tuple[ir.Buffer, ir.Expr]] = field(default_factory=dict)
    stage: int = 0  # how far matching got: 0 the nest, 1 the tree, 2 dtypes, 3 loops, 4 fields, 5 constraints

    def __str__(self) -> str:
        return f"{self.instruction}: {self.reason}"


@dataclass(frozen=True)
class Match:
    """A statement matched as ``instruction`` with ``fields`` and operand ``regions`` (buffer, offset)."""

    instruction: str
    fields: dict[str, int]
    regions: dict[str, tuple[ir.Buffer, ir.Expr]]
    isa: isa.ISA

    def to_insn(self) -> ir.TensorInsn:
        fields = tuple(ir.InsnField(k, ir.const(v)) for k, v in self.fields.items())
        regions = tuple(ir.Region(op, buf, off) for op, (buf, off) in self.regions.items())
        return ir.TensorInsn(self.isa, self.instruction, fields, regions)


class _Fail(Exception):
    pass


# --------------------------------------------------------------------------------------------------
# The pass


def tensorize(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Replace each marked statement that matches an instruction of ``spec`` by a ``TensorInsn``.

    Contract: the function computes the same after the pass (the reference interpreter runs a
    ``TensorInsn`` through the spec's semantics, so tests interpret before and after); marks stay in
    place around what they marked, so a backend can tell marked scalar code (a fallback) from the rest.
    Statements that do not match are left unchanged; ``unmatched`` says why.
    """
    if is_register_isa(spec):  # a real CPU: UNIT's rewriter (compiler/passes/tensorize_registers.py)
        return tensorize_registers(func, spec)
    return ir.PrimFunc(func.name, func.params, _Tensorizer(spec).mutate(func.body), func.attrs)


def unmatched(func: ir.PrimFunc, spec: isa.ISA) -> list[NoMatch]:
    """For every marked statement that is not a TensorInsn, the reason it does not match."""
    register = is_register_isa(spec)
    found: list[NoMatch] = []

    class _Collect(IRVisitor):
        def visit_Attr(self, s: ir.Attr) -> None:
            if s.key in MARKS:
                for stmt in _statements(s.body):
                    if isinstance(stmt, ir.IfThenElse):
                        for case in (stmt.then_case, stmt.else_case):
                            if case is not None:
                                self.visit(ir.Attr(s.key, s.value, case))
                        continue
                    if str(s.value).startswith(SCALAR_MARK):
                        found.append(NoMatch("scalar", str(s.value)[len(SCALAR_MARK):]))
                    elif register and not isinstance(stmt, ir.TensorInsn):
                        reason = why_not(stmt, spec, str(s.value), func.body)
                        if reason is not None:
                            found.append(NoMatch(str(s.value), reason))
                    elif not isinstance(stmt, ir.TensorInsn):
                        result = select(stmt, spec, str(s.value), explain=True)
                        if isinstance(result, NoMatch):
                            found.append(result)
            self.visit(s.body)

    _Collect().visit(func.body)
    return found


def select(stmt: ir.Stmt, spec: isa.ISA, hint: str, explain: bool = False) -> Match | NoMatch:
    """The instruction ``hint`` names (case-insensitive) if it matches ``stmt``; else the first tensor
    instruction of ``spec`` (every operand a memory region) that does; else why not: the named
    instruction's reason, or with ``explain`` (for people: ``unmatched``) the reason of the attempt that
    got furthest, whichever instruction it was. An asynchronous instruction (timing ``async``) is never
    selected: its use needs a wait that a match cannot place (``pipeline_tiles`` issues them); nor is one
    with an operand in another cluster's copy of a space (``cluster``): a region of the IR is the running
    core's (the backend sends a card fill between clusters itself)."""
    tensor_ops = [i for i in spec.instructions.values()
                  if i.operands and all(op.space and op.cluster is None for op in i.operands)
                  and not i.timing.asynchronous]
    named = [i for i in tensor_ops if i.name.lower() == hint.lower()]
    failures: list[NoMatch] = []
    for instr in [*named, *(i for i in tensor_ops if i not in named)]:
        result = match(stmt, spec, instr)
        if isinstance(result, Match):
            return result
        failures.append(result)
    if named and not explain:
        return failures[0]   # the named instruction's own reason (preprocessing acts on its constraint)
    if not failures:
        return NoMatch(hint, f"{spec.name} has no tensor instructions")
    best = max(failures, key=lambda f: f.stage)   # the attempt that got furthest (the named one on a tie)
    if named:
        return best
    if best.stage == 0:  # the statement's shape, whatever the instruction
        return NoMatch(hint, best.reason)
    return dataclasses.replace(best, reason=f"{best.reason} (the closest match to mark {hint!r})")


def _statements(s: ir.Stmt) -> tuple[ir.Stmt, ...]:
    return s.stmts if isinstance(s, ir.Seq) else (s,)


class _Tensorizer(IRMutator):
    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        if s.key not in MARKS:
            return self.generic_mutate(s)
        out = []
        for stmt in _statements(s.body):
            if isinstance(stmt, ir.IfThenElse):  # a guard outside the nest is control around the marks
                then_case = self.mutate_Attr(ir.Attr(s.key, s.value, stmt.then_case))
                else_case = stmt.else_case and self.mutate_Attr(ir.Attr(s.key, s.value, stmt.else_case))
                out.append(ir.IfThenElse(stmt.cond, then_case, else_case))
                continue
            chosen = isinstance(stmt, ir.TensorInsn) or str(s.value).startswith(SCALAR_MARK)
            result = select(stmt, self.spec, str(s.value)) if not chosen else None
            out.append(ir.Attr(s.key, s.value, result.to_insn() if isinstance(result, Match) else stmt))
        return ir.seq(*out)


# --------------------------------------------------------------------------------------------------
# Matching one statement against one instruction


def match(stmt: ir.Stmt, spec: isa.ISA, instr: isa.Instruction) -> Match | NoMatch:
    """Match ``stmt`` against ``instr`` for every binding of its type variables; the first that fits."""
    failures: list[NoMatch] = []
    for types in instr.bindings():
        try:
            return _Matcher(stmt, spec, instr, types).run()
        except _Fail as e:
            failures.append(e.args[0])
    best = max(f.stage for f in failures)
    furthest = [f for f in failures if f.stage == best]
    reasons = list(dict.fromkeys(f.reason for f in furthest))
    if len(reasons) == 1:
        return furthest[0]
    return NoMatch(instr.name, "; ".join(reasons), stage=best)


def _value_fields(instr: isa.Instruction) -> frozenset[str]:
    """The fields ``instr``'s semantics read as values (not in an operand's index)."""
    names = {f.name for f in instr.fields if f.kind != "type"}
    found = set()
    for assign in instr.statements:
        stack = [assign.value]
        while stack:
            node = stack.pop()
            if isinstance(node, t.Access):
                continue   # its indices are the index fit's
            if isinstance(node, t.Name) and node.id in names:
                found.add(node.id)
            stack.extend(t.children(node))
    return frozenset(found)


class _TooWide(index_fit.FitError):
    """An assignment of loops whose fields solve the equations, but one value does not fit its bits."""


class _Matcher:
    def __init__(self, stmt: ir.Stmt, spec: isa.ISA, instr: isa.Instruction, types: dict[str, str]) -> None:
        self.stmt, self.spec, self.instr, self.types = stmt, spec, instr, types
        # fields the semantics read as values (an immediate: ``a[i] >> s``) are bound from the code's
        # constants; a shift matches a floor division by its power of two
        self.tree = TreeMatch(types, fields=_value_fields(instr), shifts=True,
                              index=lambda load: flat_index(load.buffer, load.indices))
        self.stage = 0
        self.broadcast: dict[str, list[int]] = {}   # operand -> the destination dimensions it is indexed by

    @property
    def operands(self) -> dict[str, tuple[ir.Buffer, ir.Expr]]:
        """operand -> (buffer, flat index), as the tree bound them."""
        return self.tree.operands

    def fail(self, reason: str) -> _Fail:
        return _Fail(NoMatch(self.instr.name, reason, stage=self.stage))

    def run(self) -> Match:
        sem = self.instr.typed_semantics(self.types)
        if len(sem.statements) != 1 or sem.statements[0].op != "=":
            raise self.fail("only single-assignment semantics are matched")
        (assign,) = sem.statements
        if _reduction(assign.value) is not None:
            return self._run_reduction(assign)
        loops, store = self._nest()
        self.stage = 1
        dims = [i.id if isinstance(i, t.Name) else None for i in assign.target.indices]
        if None in dims:
            raise self.fail("the destination is indexed by expressions, not index variables")
        self._bind(assign.target, store.buffer, flat_index(store.buffer, store.indices))
        self._tree(assign.value, store.value)
        for access in (a for a in t.walk(assign.value) if isinstance(a, t.Access)):
            own = [dims.index(i.id) if isinstance(i, t.Name) and i.id in dims else None
                   for i in access.indices]
            if None in own or own != sorted(set(own)):
                raise self.fail(f"operand {access.tensor} is indexed unlike the destination")
            if len(own) < len(dims):   # a broadcast operand: some of the destination's dimensions, in order
                self.broadcast[access.tensor] = own
        self.stage = 2
        bytewise = self._check_dtypes()
        self.stage = 3
        nest = self._analyse(loops, bytewise)
        self.stage = 4
        return self._solve(nest, len(dims), bytewise)

    # ---- the statement's shape

    def _loops(self, s: ir.Stmt) -> tuple[list[ir.For], ir.Stmt]:
        loops = []
        while isinstance(s, ir.For):
            if s.kind is ir.ForKind.THREAD_BINDING:
                raise self.fail(f"loop {s.var.name} is bound to {s.thread}")
            if not isinstance(s.min, ir.IntImm) or not isinstance(s.extent, ir.IntImm):
                raise self.fail(f"loop {s.var.name} has non-constant bounds")
            if s.extent.value == 0:
                raise self.fail(f"loop {s.var.name} runs zero times")
            loops.append(s)
            s = s.body
        return loops, s

    def _nest(self) -> tuple[list[ir.For], ir.Store]:
        loops, s = self._loops(self.stmt)
        if isinstance(s, ir.IfThenElse):
            raise self.fail(f"the statement is guarded by `if {s.cond}`")
        if isinstance(s, ir.Seq):
            raise self.fail(f"the loop body holds {len(s.stmts)} statements")
        if not isinstance(s, ir.Store):
            raise self.fail(f"the loop body is a {type(s).__name__}, not a store")
        return loops, s

    # ---- reductions (conv, qconv, matmul): ``out[...] = T(sum(axes, body))``

    def _run_reduction(self, assign: t.Assign) -> Match:
        cast_to, red = _reduction(assign.value)
        spatial, init, reduce_loops, update = self._reduction_nest()
        self.stage = 1
        if red.op != "sum":
            raise self.fail(f"only sum reductions are matched, not {red.op}")
        acc = update.buffer
        sums_in = self.types.get(red.dtype, red.dtype)
        rounds_to = self.types.get(cast_to, cast_to) if cast_to else sums_in
        if acc.dtype.short != sums_in or rounds_to != sums_in:
            raise self.fail(f"{self.instr.name} sums in {sums_in} and rounds to {rounds_to} once; the nest "
                            f"accumulates in {acc.dtype.short}")
        if init.buffer is not acc or not same_index(flat_index(acc, init.indices),
                                                    flat_index(acc, update.indices)):
            raise self.fail(f"the init store {init.buffer.name}[...] is not the accumulator {acc.name}")
        if not isinstance(init.value, ir.IntImm | ir.FloatImm) or init.value.value != 0:
            raise self.fail(f"the accumulator starts at {init.value}, not 0")
        source = _accumulated(update)
        if source is None:
            raise self.fail(f"the update of {acc.name} is not {acc.name} + (...)")
        self._bind(assign.target, acc, flat_index(acc, update.indices))
        self._tree(red.body, source)
        self.stage = 2
        if self._check_dtypes() != 1:
            raise self.fail("a reduction's operands cannot be byte views")
        self.stage = 3
        fields, field_loops, offsets = self._fit(assign, red, spatial, reduce_loops)
        self.stage = 4
        self._spaces(fields)
        self.stage = 5
        loops = tuple(Loop(s.var, s.extent.value, {}) for s in (*spatial, *reduce_loops))
        self._constraints(fields, field_loops, loops, offsets)
        return self._match(fields, offsets)

    def _reduction_nest(self) -> tuple[list[ir.For], ir.Store, list[ir.For], ir.Store]:
        """spatial loops { acc[i] = 0; reduce loops { acc[i] = acc[i] + ... } }"""
        spatial, s = self._loops(self.stmt)
        if isinstance(s, ir.IfThenElse):
            raise self.fail(f"the statement is guarded by `if {s.cond}`")
        if not isinstance(s, ir.Seq) or len(s.stmts) != 2 or not isinstance(s.stmts[0], ir.Store):
            raise self.fail("a reduction needs an init store followed by the reduction loops")
        init, rest = s.stmts
        reduce_loops, update = self._loops(rest)
        if isinstance(update, ir.IfThenElse):
            raise self.fail(f"the update is guarded by `if {update.cond}`")
        if not isinstance(update, ir.Store):
            raise self.fail(f"the reduction loops hold a {type(update).__name__}, not an update store")
        return spatial, init, reduce_loops, update

    def _fit(self, assign: t.Assign, red: t.Reduce, spatial: list[ir.For], reduce_loops: list[ir.For]):
        """Fields, the loop that fixed each extent field, and operand offsets, for the first assignment of
        loops to index variables (in order; loops of extent 1 are gone after simplify) that fits."""
        dims = [i.id if isinstance(i, t.Name) else None for i in assign.target.indices]
        if None in dims:
            raise self.fail("the destination is indexed by expressions, not index variables")
        accesses = [assign.target, *(a for a in t.walk(red.body) if isinstance(a, t.Access))]
        shapes = {op.name: op.shape for op in self.instr.operands}
        try:
            ranges = index_fit.index_ranges(shapes, accesses, [*dims, *red.axes])
        except index_fit.FitError as e:
            raise self.fail(str(e)) from None
        sp = [x for x in spatial if x.extent.value != 1]
        rd = [x for x in reduce_loops if x.extent.value != 1]
        if len(sp) > len(dims) or len(rd) > len(red.axes):
            raise self.fail(f"{len(sp)} spatial and {len(rd)} reduction loops; {self.instr.name} has "
                            f"{len(dims)} and {len(red.axes)}")
        failures, too_wide = [], []
        for sdims in itertools.combinations(dims, len(sp)):
            for rdims in itertools.combinations(red.axes, len(rd)):
                mapping = {**dict(zip(sdims, sp, strict=True)), **dict(zip(rdims, rd, strict=True))}
                try:
                    return self._fit_mapping(mapping, ranges, accesses, shapes, [*dims, *red.axes])
                except _TooWide as e:   # the loops fit, the encoding does not: the closest miss
                    too_wide.append(str(e))
                except index_fit.FitError as e:
                    failures.append(str(e))
        raise self.fail((too_wide or failures)[0])

    def _fit_mapping(self, mapping: dict[str, ir.For], ranges, accesses, shapes, names):
        addresses = {op.addr.id for op in self.instr.operands if isinstance(op.addr, t.Name)}
        unknown = {f.name: f.bits for f in self.instr.fields
                   if f.kind not in ("type", "enum", "reg") and f.name not in addresses}
        equations, field_loops = [], {}
        for v in names:
            loop = mapping.get(v)
            extent = loop.extent.value if loop else 1
            equations.append(index_fit.Equation(ranges[v], extent, f"the range of {v}"))
            if loop is not None and isinstance(ranges[v], t.Name):
                field_loops[ranges[v].id] = Loop(loop.var, loop.extent.value, {})
        for access in accesses:  # strides: the coefficient of each loop in each affine operand index
            lf = linear_form(self.operands[access.tensor][1])
            for v, loop in mapping.items():
                coef = _coefficient(access, shapes[access.tensor], v)
                if coef is not None and lf is not None and loop.var in lf.terms:
                    equations.append(index_fit.Equation(coef, lf.coef(loop.var),
                                                        f"the stride of {v} in {access.tensor}"))
        fields = index_fit.solve(equations, {}, unknown, lambda f: self.spec.scalar_env(f, self.types))
        for f in self.instr.fields:   # an assignment whose fields the encoding cannot hold is not a fit
            value = fields.get(f.name)
            if isinstance(value, int) and not f.lo <= value <= f.hi:
                raise _TooWide(f"field {f.name} = {value} does not fit in its {f.bits} bits ({f.lo}..{f.hi}) "
                               f"with {', '.join(mapping)} mapped as they are")
        env = self.spec.scalar_env(fields, self.types)
        loops = {v: (x.var, x.extent.value) for v, x in mapping.items()}
        offsets = {}
        for access in accesses:
            if access.tensor in offsets:
                continue
            flat = index_fit.spec_flat(access, shapes[access.tensor], env)
            index = self.operands[access.tensor][1]
            offsets[access.tensor] = index_fit.fit_access(access.tensor, index, flat, loops, names)
        return fields, field_loops, offsets

    def _match(self, fields: dict[str, int], offsets: dict[str, ir.Expr]) -> Match:
        settable = {f.name for f in self.instr.fields if f.kind != "type"}
        addresses = {op.addr.id for op in self.instr.operands if isinstance(op.addr, t.Name)}
        for f in self.instr.fields:   # an immediate the code's constant gave must fit its field
            value = self.tree.values.get(f.name)
            if value is not None and not f.lo <= value <= f.hi:
                raise self.fail(f"field {f.name} = {value} does not fit in its {f.bits} bits "
                                f"({f.lo}..{f.hi})")
        fields = {**self.tree.values, **fields}
        missing = sorted(settable - addresses - set(fields))
        if missing:
            raise self.fail(f"no loop or operand fixes field(s) {', '.join(missing)}")
        regions = {n: (buf, offsets[n]) for n, (buf, _) in self.operands.items()}
        ordered = {f.name: fields[f.name] for f in self.instr.fields if f.name in set(fields) & settable}
        return Match(self.instr.name, ordered, regions, self.spec)

    # ---- the value tree: the one matcher (compiler/passes/match.py)

    def _bind(self, access: t.Access, buffer: ir.Buffer, index: ir.Expr) -> None:
        try:
            self.tree.bind(access.tensor, buffer, index)
        except NoTreeMatch as e:
            raise self.fail(str(e)) from None

    def _tree(self, pat: t.Expr, e: ir.Expr) -> None:
        try:
            self.tree.match(pat, e)
        except NoTreeMatch as e:
            raise self.fail(str(e)) from None

    def _check_dtypes(self) -> int:
        """The item size of the buffers u8 operands view as bytes (1 when none does)."""
        sizes = set()
        for name, (buf, _) in self.operands.items():
            want = self.instr.operand_dtype(self.instr.operand(name), self.types)
            if want == "u8" and buf.dtype.short != "u8":
                if buf.dtype.is_bool:
                    raise self.fail(f"operand {name}: a bool buffer {buf.name} has no byte view")
                sizes.add(buf.dtype.bits // 8)
            elif want != buf.dtype.short:
                raise self.fail(f"operand {name} is {want}, but {buf.name} holds {buf.dtype.short}")
        if len(sizes) > 1:
            raise self.fail("the byte-viewed operands have different element sizes")
        return sizes.pop() if sizes else 1

    # ---- the loop nest

    def _analyse(self, loops: list[ir.For], item: int) -> tuple[list[Loop], dict[str, ir.Expr]]:
        """Merged loops (outermost first) and each operand's offset (the part not in the loops)."""
        loop_vars = {s.var for s in loops}
        coefs: dict[str, dict[ir.Var, int]] = {}
        offsets: dict[str, ir.Expr] = {}
        for name, (buf, index) in self.operands.items():
            lf = linear_form(index)
            if lf is None:
                raise self.fail(f"the index of {buf.name} is not an integer expression")
            inner = {a: c for a, c in lf.terms.items() if a in loop_vars}
            rest = {a: c for a, c in lf.terms.items() if a not in loop_vars}
            if any(_mentions(a, loop_vars) for a in rest):
                raise self.fail(f"the index of {buf.name}, {index}, is not affine in the loop variables")
            const = lf.const + sum(c * s.min.value for s in loops for a, c in inner.items() if a is s.var)
            offsets[name] = simplify(_rebuild(rest, const, lf.dtype))
            coefs[name] = inner
        merged: list[Loop] = []
        for s in loops:
            if s.extent.value == 0:
                raise self.fail(f"loop {s.var.name} runs zero times")
            if s.extent.value == 1:
                continue
            here = Loop(s.var, s.extent.value, {n: coefs[n].get(s.var, 0) for n in self.operands})
            if all(c == 0 for c in here.coefs.values()):
                raise self.fail(f"no operand depends on loop {s.var.name}")
            outer = merged[-1] if merged else None
            if outer and all(outer.coefs[n] == here.coefs[n] * here.extent for n in self.operands):
                merged[-1] = Loop(outer.var, outer.extent * here.extent, here.coefs)
            else:
                merged.append(here)
        if item > 1:  # byte view: the innermost dimension counts bytes and must be contiguous
            if merged and any(c != 1 for c in merged[-1].coefs.values()):
                raise self.fail("a byte-wise operand is not contiguous in the innermost loop")
            if not merged:
                merged.append(Loop(None, 1, {n: 1 for n in self.operands}))
            *outer, last = merged
            merged = [Loop(x.var, x.extent, {n: c * item for n, c in x.coefs.items()}) for x in outer]
            merged.append(Loop(last.var, last.extent * item, dict(last.coefs)))
        return merged, offsets

    # ---- fields from extents and strides

    def _solve(self, nest, ndims: int, item: int) -> Match:
        loops, offsets = nest
        if len(loops) > ndims:
            raise self.fail(
                f"{len(loops)} loops remain after merging contiguous ones; {self.instr.name} has {ndims}"
            )
        loops = [Loop(None, 1, {n: 0 for n in self.operands})] * (ndims - len(loops)) + loops
        fields: dict[str, int] = {}
        field_loops: dict[str, Loop] = {}
        checks: list[tuple[t.Expr, int, str]] = []

        def equate(expr: t.Expr, value: int, what: str, loop: Loop | None) -> None:
            if isinstance(expr, t.Name) and expr.kind == "field":
                if fields.setdefault(expr.id, value) != value:
                    raise self.fail(f"{what}: field {expr.id} would be both {fields[expr.id]} and {value}")
                if loop is not None:
                    field_loops.setdefault(expr.id, loop)
            else:
                checks.append((expr, value, what))

        for name in self.operands:
            op = self.instr.operand(name)
            own = self.broadcast.get(name, range(ndims))
            for k, d in enumerate(own):
                equate(op.shape[k], loops[d].extent, f"dimension {k} of {name}", loops[d])
            for d, loop in enumerate(loops):
                if d not in own and loop.extent > 1 and loop.coefs[name] != 0:
                    raise self.fail(f"{name} steps {loop.coefs[name]} along dimension {d}, which it is "
                                    f"not indexed by")
            if op.strides is None:
                for d, loop in enumerate(loops):
                    want = math.prod(loops[e].extent for e in own if e > d)
                    if d in own and loop.extent > 1 and loop.coefs[name] != want:
                        raise self.fail(
                            f"{name} is not row-major: stride {loop.coefs[name]}, expected {want}"
                        )
        for name in self.operands:  # explicit strides, after every shape field is known
            op = self.instr.operand(name)
            own = self.broadcast.get(name, range(ndims))
            for k, d in enumerate(own if op.strides is not None else ()):
                stride = loops[d].coefs[name] if loops[d].extent > 1 else _contiguous(op, k, fields, self)
                equate(op.strides[k], stride, f"stride {k} of {name}", None)
        self._spaces(fields)
        env = self.spec.scalar_env(fields, self.types)
        for expr, value, what in checks:
            try:
                got = evaluate_scalar(expr, env)
            except isa.ExecError as e:
                raise self.fail(f"{what}: {e}") from None
            if got != value:
                raise self.fail(f"{what}: the spec gives {t.to_text(expr)} = {got}, the loops {value}")
        self.stage = 5
        self._constraints(fields, field_loops, loops, offsets)
        return self._match(fields, offsets)

    def _spaces(self, fields: dict[str, int]) -> None:
        codes = self.spec.enum_values()
        for name, (buf, _) in self.operands.items():
            op = self.instr.operand(name)
            space = space_of(buf.scope)
            if op.space is None:
                continue
            if op.space_is_field:
                if space not in self.spec.spaces:
                    raise self.fail(
                        f"{buf.name} is in scope {buf.scope!r}, which is no space of {self.spec.name}"
                    )
                fields[op.space] = codes[space]
            elif op.space != space:
                raise self.fail(f"operand {name} must be in {op.space}, but {buf.name} is in {space}")

    def _constraints(self, fields, field_loops, loops, offsets) -> None:
        addresses = {op.addr.id: op.name for op in self.instr.operands if isinstance(op.addr, t.Name)}
        env = self.spec.scalar_env(fields, self.types)
        for c in self.instr.constraints:
            names = t.names_in(c.rule)
            used = names & set(addresses)
            if used:
                if c.kind == "align":
                    self._alignment(c, addresses, offsets, env)
                continue
            if any(n not in env.values for n in names):
                continue  # a rule on registers or fields no loop fixes: the backend's
            try:
                ok = evaluate_scalar(c.rule, env)
            except isa.ExecError:
                continue
            if not ok:
                values = ", ".join(f"{n} = {env.values[n]}" for n in sorted(names) if n in fields)
                regions = {n: (buf, offsets[n]) for n, (buf, _) in self.operands.items()}
                raise _Fail(NoMatch(self.instr.name, f"{c.kind} constraint `{c.text}` fails ({values}): "
                                    f"{c.message}", c, dict(fields), dict(field_loops), tuple(loops), regions,
                                    self.stage))

    def _alignment(self, c: isa.Constraint, addresses, offsets, env) -> None:
        """``addr % K == 0`` for an operand whose offset is affine: every term and the constant align."""
        rule = c.rule
        if not (isinstance(rule, t.Binary) and rule.op == "==" and isinstance(rule.lhs, t.Binary)
                and rule.lhs.op == "%" and isinstance(rule.lhs.lhs, t.Name) and rule.lhs.lhs.id in addresses):
            return
        name = addresses[rule.lhs.lhs.id]
        k = evaluate_scalar(rule.lhs.rhs, env)
        buf, _ = self.operands[name]
        lf = linear_form(offsets[name])
        size = max(buf.dtype.bits // 8, 1)
        if lf is None or any((v * size) % k for v in (lf.const, *lf.terms.values())):
            raise _Fail(NoMatch(self.instr.name, f"align constraint `{c.text}` may fail: {name} starts at "
                                f"{buf.name}[{offsets[name]}]; {c.message}", c, stage=self.stage))


def _contiguous(op: isa.Operand, d: int, fields: dict[str, int], m: _Matcher) -> int:
    """A stride for a dimension of extent 1 (never stepped): the size of the rows inside it."""
    env = m.spec.scalar_env(fields, m.types)
    return math.prod(int(evaluate_scalar(x, env)) for x in op.shape[d + 1 :])


def _reduction(value: t.Expr) -> tuple[str | None, t.Reduce] | None:
    """``(cast, reduce)`` when an assignment's value is ``reduce`` or ``cast(reduce)``, else None."""
    cast = None
    if isinstance(value, t.Cast):
        cast, value = value.dtype, value.value
    return (cast, value) if isinstance(value, t.Reduce) else None


def _accumulated(update: ir.Store) -> ir.Expr | None:
    """``x`` when ``update`` is ``acc[i] = acc[i] + x`` (either order), else None."""
    v = update.value
    if not isinstance(v, ir.Add):
        return None
    flat = flat_index(update.buffer, update.indices)
    for mine, other in ((v.a, v.b), (v.b, v.a)):
        if (isinstance(mine, ir.Load) and mine.buffer is update.buffer
                and same_index(flat_index(mine.buffer, mine.indices), flat)):
            return other
    return None


def _coefficient(access: t.Access, shape, var: str) -> t.Expr | None:
    """The coefficient of ``var`` in ``access``'s row-major flat index, as an expression of fields; None
    when the index is not affine in ``var``."""
    total: t.Expr = t.Num(0)
    for d, index in enumerate(access.indices):
        c = _derivative(index, var)
        if c is None:
            return None
        if isinstance(c, t.Num) and c.value == 0:
            continue
        stride: t.Expr = t.Num(1)
        for size in shape[d + 1 :]:
            stride = t.Binary("*", stride, size)
        total = t.Binary("+", total, t.Binary("*", c, stride))
    return total


def _derivative(e: t.Expr, var: str) -> t.Expr | None:
    """d e / d var for an expression affine in ``var`` (``y*s + ky``), else None."""
    if var not in t.names_in(e):
        return t.Num(0)
    if isinstance(e, t.Name):
        return t.Num(1)
    if isinstance(e, t.Binary) and e.op in ("+", "-"):
        a, b = _derivative(e.lhs, var), _derivative(e.rhs, var)
        return None if a is None or b is None else t.Binary(e.op, a, b)
    if isinstance(e, t.Binary) and e.op == "*":
        if var not in t.names_in(e.lhs):
            d = _derivative(e.rhs, var)
            return None if d is None else t.Binary("*", e.lhs, d)
        if var not in t.names_in(e.rhs):
            d = _derivative(e.lhs, var)
            return None if d is None else t.Binary("*", d, e.rhs)
    return None


def _mentions(e: ir.Expr, names: set[ir.Var]) -> bool:
    return bool(free_vars(e) & names)


def _rebuild(terms: dict, const: int, dt) -> ir.Expr:
    return LinearForm(dict(terms), const, dt).to_expr()

