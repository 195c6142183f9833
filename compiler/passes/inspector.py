"""UNIT's Inspector (Weng et al., CGO 2021, Sec. III.B / IV.A): can a tensorized instruction compute part of
an operation, and with which loops?

The instruction comes from isa/ (its semantics is a tiny tensor program, e.g. x86's
``d[i] = c[i] + sum(j, i32(a[4 * i + j]) * i32(b[4 * i + j]))``); the operation is a reduction
``out[...] = sum(axes, body)``, either a tensor expression (``inspect_op``) or a marked loop nest of the
loop IR (``inspect_nest``, what the tensorize pass sees after the rewriter tiled it). Two checks:

1. **Compute isomorphism** (Algorithm 1): the instruction's reduction body and the operation's are the same
   tree: same opcodes, same dtype at every node, casts matched as one-operand nodes. Each leaf of the
   instruction (a register) binds to one access of the operation; a register bound to two different accesses
   fails. The accumulator ``c`` and the result ``d`` bind to the operation's output. Extension: ``+ * max
   min`` also match with their operands swapped.
2. **Array-access isomorphism**: a mapping ``f`` from the operation's loops to the instruction's, spatial to
   spatial and reduce to reduce, is feasible when for every operand pair (operation access ``u``,
   instruction access ``v``) ``S'(u) ⊆ S(v)``. Beyond the paper, which leaves these to the operand rule, a
   feasible mapping here also needs each mapped loop's extent to be a multiple of the instruction's (tiles
   without tails; the operators pad channels to make them so), each access affine in the mapped loops (so
   an operand is a strided view), and each instruction operand's index a row-major walk of its loops.
   Mappings are tried from the innermost loop outward and the first feasible one is returned, as UNIT's
   implementation does.

Beyond the paper, an instruction whose sum is widened, clamped (saturating) or narrowed around the
accumulation, ``d = i32(min(max(i64(c) + sum(...), LO), HI))`` (vpdpbusds), is matched as the wrapping sum it
equals where nothing wraps or saturates, and only there: the range proof of compiler/passes/ranges.py over
the whole reduction (``Accumulation``: the reduce axes from 0 for a tensor expression; what the caller says
for a loop nest). Where it fails, the check is "range" and the reason names the bound.

The result is a ``Mapping`` (which operation loop feeds each instruction loop, and each operand's access) or a
``NotApplicable`` that says why, naming the check that failed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import isa
from compiler import te
from compiler.arith import Interval, linear_form
from compiler.ir import nodes as ir
from compiler.ir.functor import free_vars
from compiler.passes import ranges
from compiler.passes.match import NoTreeMatch, TreeMatch
from isa.lang import tree as t


@dataclass(frozen=True)
class Axis:
    """A loop of the operation: its variable, extent and kind ("spatial" or "reduce")."""

    var: ir.Var
    extent: int
    kind: str


@dataclass(frozen=True)
class Access:
    """An operand's access in the operation: ``buffer[indices]``."""

    buffer: ir.Buffer
    indices: tuple[ir.Expr, ...]

    def __str__(self) -> str:
        return f"{self.buffer.name}[{', '.join(str(i) for i in self.indices)}]"


@dataclass(frozen=True)
class Mapping:
    """A feasible mapping: ``loops[index]`` is the operation loop that instruction index runs over."""

    isa: str
    instruction: str
    loops: dict[str, Axis]
    extents: dict[str, int]
    operands: dict[str, Access]
    lanes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # operand -> its indices, outer first

    def __str__(self) -> str:
        loops = ", ".join(
            f"{i} -> {a.var.name} ({self.extents[i]} of {a.extent})" for i, a in self.loops.items()
        )
        ops = ", ".join(f"{name} = {acc}" for name, acc in self.operands.items())
        return f"{self.isa}.{self.instruction}: {loops}; {ops}"


@dataclass(frozen=True)
class NotApplicable:
    """Why the instruction cannot compute the operation: ``check`` is "compute", "range" (a saturating or
    narrowing instruction whose range proof failed) or "access"."""

    instruction: str
    check: str
    reason: str

    def __str__(self) -> str:
        return f"{self.instruction} is not applicable ({self.check}): {self.reason}"


class _Fail(Exception):
    pass


def inspect_op(op: te.ComputeOp, spec: isa.ISA, instruction: str) -> Mapping | NotApplicable:
    """Inspect a tensor expression ``out[axes] = sum(reduce axes, body)`` against an instruction."""
    axes = [Axis(iv.var, iv.extent, "spatial") for iv in op.axis] + [
        Axis(iv.var, iv.extent, "reduce") for iv in op.reduce_axis
    ]
    out = Access(op.output.buffer, tuple(iv.var for iv in op.axis))
    whole = ranges.Accumulation(math.prod(iv.extent for iv in op.reduce_axis), Interval.point(0),
                                f"the reduction over {', '.join(iv.var.name for iv in op.reduce_axis)}")
    return inspect(axes, out, op.body, spec, instruction, whole)


def inspect_nest(
    loops: Sequence[ir.For], update: ir.Store, spec: isa.ISA, instruction: str,
    accumulation: ranges.Accumulation | str | None = None,
) -> Mapping | NotApplicable:
    """Inspect a loop nest ``for ...: out[idx] = out[idx] + body`` (the loops the instruction replaces);
    ``accumulation``: the whole reduction into ``out`` (or why it is not known), which a saturating or
    narrowing instruction's range proof needs."""
    out = Access(update.buffer, update.indices)
    value = update.value
    if (
        not isinstance(value, ir.Add)
        or not isinstance(value.a, ir.Load)
        or value.a.buffer is not update.buffer
        or tuple(map(str, value.a.indices)) != tuple(map(str, update.indices))
    ):
        return NotApplicable(
            instruction, "compute", f"'{str(update).strip()}' does not accumulate into {update.buffer.name}"
        )
    index_vars = {v for i in update.indices for v in free_vars(i)}
    axes = []
    for loop in loops:
        if (
            not isinstance(loop.min, ir.IntImm)
            or loop.min.value != 0
            or not isinstance(loop.extent, ir.IntImm)
        ):
            return NotApplicable(
                instruction, "access", f"loop {loop.var.name} is not canonical (0 to a constant)"
            )
        axes.append(Axis(loop.var, loop.extent.value, "spatial" if loop.var in index_vars else "reduce"))
    body = ir.Reduce(
        ir.ReduceCombiner.SUM,
        value.b,
        tuple(a.var for a in axes if a.kind == "reduce"),
        tuple((0, a.extent) for a in axes if a.kind == "reduce"),
    )
    return inspect(axes, out, body, spec, instruction, accumulation)


def inspect(
    axes: Sequence[Axis], out: Access, value: ir.Expr, spec: isa.ISA, instruction: str,
    accumulation: ranges.Accumulation | str | None = None,
) -> Mapping | NotApplicable:
    """The first feasible mapping of ``out = value`` (a sum over the reduce axes) onto the instruction."""
    binding = compute_binding(out, value, spec, instruction, accumulation)
    if isinstance(binding, NotApplicable):
        return binding
    return _find_mapping(spec, spec.instruction(instruction), axes, binding)


def compute_binding(out: Access, value: ir.Expr, spec: isa.ISA, instruction: str,
                    accumulation: ranges.Accumulation | str | None = None
                    ) -> dict[str, Access] | NotApplicable:
    """Compute isomorphism (Algorithm 1) of ``out = value`` with the instruction: each instruction operand's
    access in the operation (the accumulator and result bound to ``out``), or why there is none. A
    saturating or narrowing instruction (``ranges.envelope``) is compared as the sum it equals in ``out``'s
    dtype, then held to the range proof over ``accumulation``."""
    instr = spec.instruction(instruction)
    try:
        acc, result, red, env = _accumulation(instr, out.buffer.dtype.short)
        if not isinstance(value, ir.Reduce):
            raise _Fail(
                f"the operation is not a reduction ({value}); the instruction sums over {', '.join(red.axes)}"
            )
        if value.combiner is not ir.ReduceCombiner.SUM:
            raise _Fail(f"the operation reduces with {value.combiner.value}, the instruction with {red.op}")
        if value.dtype.short != red.dtype:
            raise _Fail(f"the operation accumulates in {value.dtype.short}, the instruction in {red.dtype}")
        tree = TreeMatch(check_dtypes=True, index=lambda load: tuple(load.indices))
        try:
            tree.match(red.body, value.source)   # Algorithm 1, by the one matcher (compiler/passes/match.py)
        except NoTreeMatch as e:
            raise _Fail(str(e)) from None
        binding = {name: Access(buf, index) for name, (buf, index) in tree.operands.items()}
        for name in dict.fromkeys((acc, result)):
            want = instr.operand(name).dtype
            if out.buffer.dtype.short != want:
                raise _Fail(f"operand {name} is {want}, but {out.buffer.name} holds {out.buffer.dtype.short}")
            binding[name] = out
    except _Fail as e:
        return NotApplicable(instruction, "compute", str(e))
    if env is not None:
        reason = ranges.prove(env, instr.name, accumulation, out.buffer.dtype.short)
        if reason is not None:
            return NotApplicable(instruction, "range", reason)
    return binding


def _accumulation(instr: isa.Instruction, dtype: str) -> tuple[str, str, t.Reduce, ranges.Envelope | None]:
    """(accumulator operand, result operand, the reduction, None) of ``d = c + sum(...)``, ``c += sum(...)``
    or ``c += body`` over reduce indices the instruction declares (VITA's GEMM); for ``d = layers(casts(c)
    + sum(...))`` (``ranges.envelope``: widened, clamped, narrowed), the reduction computed in ``dtype``
    (the operation's) and the envelope, which ``ranges.prove`` must then hold to."""
    sem = instr.typed_semantics()
    if len(sem.statements) == 1:
        (stmt,) = sem.statements
        v = stmt.value
        if stmt.op == "+=" and isinstance(v, t.Reduce):
            return stmt.target.tensor, stmt.target.tensor, v, None
        reduce = tuple(iv.name for iv in sem.indices if iv.kind == "reduce")
        if stmt.op == "+=" and reduce:
            return stmt.target.tensor, stmt.target.tensor, t.Reduce("sum", reduce, v, v.dtype), None
        env = ranges.envelope(v) if stmt.op == "=" else None
        if env is not None and env.plain:
            return env.acc, stmt.target.tensor, env.reduce, None
        if env is not None:
            return env.acc, stmt.target.tensor, ranges.narrowed(env, dtype), env
    raise _Fail(f"the instruction is not a sum accumulated into a register: {sem}")


def _find_mapping(
    spec: isa.ISA, instr: isa.Instruction, axes: Sequence[Axis], binding: dict[str, Access]
) -> Mapping | NotApplicable:
    sem = instr.typed_semantics()
    indices = [(iv.name, iv.kind, int(str(iv.extent))) for iv in sem.indices]
    candidates = []
    for name, kind, extent in indices:
        fits = [a for a in reversed(axes) if a.kind == kind and a.extent % extent == 0]
        if not fits:
            have = ", ".join(f"{a.var.name}({a.extent})" for a in axes if a.kind == kind) or "none"
            return NotApplicable(
                instr.name,
                "access",
                f"no {kind} loop whose extent is a multiple of "
                f"{extent} for index {name} ({kind} loops: {have})",
            )
        candidates.append(fits)
    accesses = instruction_accesses(sem)
    reasons = []
    for choice in itertools.product(*candidates):  # innermost operation loops first
        if len({a.var for a in choice}) < len(choice):
            continue
        f = {a.var: name for a, (name, _, _) in zip(choice, indices, strict=True)}
        try:
            lanes = _check_accesses(f, binding, accesses, {n: e for n, _, e in indices})
        except _Fail as e:
            reasons.append(str(e))
            continue
        return Mapping(
            spec.name,
            instr.name,
            {name: a for a, (name, _, _) in zip(choice, indices, strict=True)},
            {name: e for name, _, e in indices},
            dict(binding),
            lanes,
        )
    return NotApplicable(instr.name, "access", reasons[0] if reasons else "no injective mapping of the loops")


def instruction_accesses(sem) -> dict[str, t.Access]:
    """Each operand's first access in the instruction's semantics ``sem`` (statement targets first)."""
    found: dict[str, t.Access] = {}
    for stmt in sem.statements:
        for node in (stmt.target, *t.walk(stmt.value)):
            if isinstance(node, t.Access):
                found.setdefault(node.tensor, node)
    return found


def _check_accesses(
    f: dict[ir.Var, str], binding: dict[str, Access], accesses: dict[str, t.Access], extents: dict[str, int]
) -> dict[str, tuple[str, ...]]:
    """S'(u) ⊆ S(v) for every operand, each access affine in the mapped loops; each operand's lane order."""
    lanes = {}
    for name, access in binding.items():
        v = accesses[name]
        s_v = {x.id for i in v.indices for x in t.walk(i) if isinstance(x, t.Name)}
        used = {x for i in access.indices for x in free_vars(i)} & set(f)
        s_prime = {f[x] for x in used}
        if not s_prime <= s_v:
            raise _Fail(
                f"S'({access}) = {sorted(s_prime)} is not a subset of S({t.to_text(v)}) = {sorted(s_v)}"
            )
        for index in access.indices:
            lf = linear_form(index)
            mapped = [x for x in free_vars(index) if x in f]
            if mapped and (
                lf is None
                or any(x not in lf.terms for x in mapped)
                or any(atom not in f and any(x in f for x in free_vars(atom)) for atom in lf.terms)
            ):
                raise _Fail(
                    f"the index {index} of {access.buffer.name} is not affine in "
                    f"{', '.join(x.name for x in mapped)}"
                )
        lanes[name] = _lane_order(v, extents)
    return lanes


def _lane_order(v: t.Access, extents: dict[str, int]) -> tuple[str, ...]:
    """The instruction indices of operand access ``v``, outermost first, when its elements are a row-major
    walk of them (``a[4 * i + j]`` with j < 4: (i, j); ``a[i, k]``: (i, k)); anything else is not an operand
    layout handled."""
    coefs: dict[str, int] = {}
    scale = 1
    for index in reversed(v.indices):  # a multi-dimensional register (a Tensor Core fragment): row-major
        terms = _terms(index)
        for name, c in terms:
            coefs[name] = coefs.get(name, 0) + c * scale
        scale *= sum(c * (extents[name] - 1) for name, c in terms) + 1
    order = tuple(sorted(coefs, key=lambda x: -coefs[x]))
    stride = 1
    for name in reversed(order):
        if coefs[name] != stride:
            raise _Fail(f"operand {t.to_text(v)} is not a row-major walk of {', '.join(order)}")
        stride *= extents[name]
    return order


def _terms(e: t.Expr) -> list[tuple[str, int]]:
    if isinstance(e, t.Name):
        return [(e.id, 1)]
    if isinstance(e, t.Binary) and e.op == "+":
        return _terms(e.lhs) + _terms(e.rhs)
    if isinstance(e, t.Binary) and e.op == "*":
        num, other = (e.lhs, e.rhs) if isinstance(e.lhs, t.Num) else (e.rhs, e.lhs)
        if isinstance(num, t.Num):
            return [(name, c * int(num.value)) for name, c in _terms(other)]
    raise _Fail(f"the instruction index {t.to_text(e)} is not a sum of index variables times constants")


def operand_view(mapping: Mapping, name: str) -> tuple[tuple[int, ...], tuple[ir.Var, ...]]:
    """The shape of operand ``name``'s view and the operation loop each dimension walks (outer first)."""
    order = mapping.lanes[name]
    return tuple(mapping.extents[i] for i in order), tuple(mapping.loops[i].var for i in order)
