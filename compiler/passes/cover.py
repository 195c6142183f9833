"""cover: instruction selection by covering an expression tree with the spec's instructions, by cost.

The element-wise parts of a kernel (an operator's body, a conv's epilogue) are trees of operations over
input tiles and constants. A target computes such a tree as a sequence of instructions, each writing a
tile that later ones read. Which sequence is the spec's business: an instruction's semantics is a tree
pattern (``dst[i] = a[i] * b[i] + c[i]``, ``dst[b, o] = min(max(dst[b, o] >> imm, lo), hi)``), and a
cover assigns to some nodes of the expression an instruction whose pattern matches there, its operands
bound to inputs or to subtrees that other instructions of the cover compute first (LLVM's SelectionDAG and
Cranelift's ISLE cover DAGs the same way; Isaria and Diospyros derive the patterns from semantics too).

``cover(expr, select)`` returns the cover with the fewest cycles (dynamic programming over the tree, as in
BURS), the cycles of each candidate given by the target (``Select.cycles``: the spec's own timing of the
instruction at the operands' sizes, found by matching a probe of the step with the pass that will select it
later, so a cover never names an instruction that pass would refuse). Exact algebraic equivalences widen the
search (``forms``): commutativity (the matcher's), associativity of ``+ *`` on integers and of ``max min``,
distributivity on integers, ``x - y`` = ``x + y*(-1)`` on integers, ``x*2`` = ``x + x``, ``max(min(x, hi),
lo)`` = ``min(max(x, lo), hi)`` for ``lo <= hi``, and ``x >> k`` = ``floordiv(x, 2**k)`` (the matcher's
shift rule). A node no instruction computes is a ``scalar`` step where the target has scalar code (its
reason names the operation), else ``NoCover`` says which operation no instruction of the spec provides.

The one matcher (``compiler/passes/match.py``) compares patterns with the IR, with its ``subtrees`` rule:
an operand may bind any non-constant expression.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import isa
from compiler.arith import simplify
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, loads_in
from compiler.ir.shifts import Shl, Shr
from compiler.passes.match import NoTreeMatch, TreeMatch
from isa.lang import tree as t

#: How many equivalent forms of one node the search considers at most (the rewrites close quickly on the
#: small trees of element-wise operators; the bound keeps a pathological chain from exploding).
MAX_FORMS = 24


class NoCover(Exception):
    """No instruction of the spec computes an operation of the tree (and the target has no scalar code)."""


@dataclass(frozen=True)
class Step:
    """One instruction of a cover: ``instruction`` computes ``node`` (an equivalent form of ``value``, the
    expression the step stands for), reading ``operands`` (operand name -> the expression bound to it: an
    input, or the ``value`` of an earlier step); ``scalar`` steps are the target's scalar code, ``reason``
    says which operation no instruction provides."""

    instruction: str
    node: ir.Expr
    operands: Mapping[str, ir.Expr]
    cycles: int
    reason: str = ""
    value: ir.Expr | None = None

    @property
    def computes(self) -> str:
        """The key of the expression this step's tile holds (what later steps' operands name)."""
        return key(self.value if self.value is not None else self.node)

    @property
    def scalar(self) -> bool:
        return self.instruction == SCALAR


SCALAR = "scalar"


@dataclass(frozen=True)
class Cover:
    """Steps in the order they run (operands first), and their cycles."""

    steps: tuple[Step, ...]
    cycles: int

    @property
    def instructions(self) -> tuple[str, ...]:
        return tuple(s.instruction for s in self.steps)

    def describe(self) -> str:
        steps = " ; ".join(f"{s.instruction}({_show(s.node)})" for s in self.steps)
        return f"{steps}  [{self.cycles} cycles]"


@dataclass
class Select:
    """What a target contributes: the instructions that may compute a step, whether an expression is an
    input (a leaf no step computes; with ``constants``, a constant is one too), and the cycles of one step
    (a string, the reason, when the instruction cannot compute it there: a constraint, a dtype, an immediate
    that does not fit). ``scalar_cycles`` (None: the target has no scalar code) prices a node no instruction
    computes."""

    instructions: tuple[isa.Instruction, ...]
    params: Mapping[str, int]
    is_input: Callable[[ir.Expr], bool]
    cycles: Callable[[isa.Instruction, ir.Expr, Mapping[str, ir.Expr], Mapping[str, int]], int | str]
    scalar_cycles: Callable[[ir.Expr], int] | None = None
    constants: bool = False   # an operand may be a constant (the target fills a tile with it)
    memo: dict = field(default_factory=dict)
    #: each node's covers by root instruction (``_options``), kept so that ``alternatives`` and ``why_not``
    #: after a ``cover`` search nothing again
    options: dict = field(default_factory=dict)
    #: how to build this Select again, ``(function, arguments)`` of a module-level function, so that a
    #: compiled kernel holding it can be stored (tandem/flows/kernel_cache.py: ``cycles`` is a closure);
    #: the memo and options travel with it. None: it cannot be pickled.
    recipe: tuple[Callable[..., Select], tuple] | None = field(default=None, repr=False, compare=False)

    def __reduce__(self) -> tuple:
        if self.recipe is None:
            raise TypeError("a cover's Select built without a recipe cannot be pickled (its cycles are a "
                            "closure)")
        return _rebuilt, (self.recipe, self.memo, self.options)


def _rebuilt(recipe: tuple[Callable[..., Select], tuple], memo: dict, options: dict) -> Select:
    """A pickled Select: built again by its recipe, with its search's memo and options."""
    function, arguments = recipe
    select = function(*arguments)
    select.memo.update(memo)
    select.options.update(options)
    return select


@dataclass(frozen=True)
class Selected:
    """The record of one statement's selection (``choose``): ``where`` (the schedule's name for the
    statement), ``expr`` as the search saw it, the ``chosen`` cover, and the target's ``select`` whose memo
    holds the search (so ``alternatives`` and ``why_not`` on it cost little: what ``--explain`` shows)."""

    where: str
    expr: ir.Expr
    chosen: Cover
    select: Select = field(repr=False, compare=False)


def cover(expr: ir.Expr, select: Select) -> Cover:
    """The cover of ``expr`` with the fewest cycles (module docstring); NoCover names the operation that no
    instruction computes when the target has no scalar code."""
    best = _best(_prepared(expr), select)
    if isinstance(best, str):
        raise NoCover(best)
    return best


def choose(expr: ir.Expr, select: Select, where: str) -> Selected:
    """``cover(expr, select)`` with the record of the search (``Selected``: what ``--explain`` reads)."""
    prepared = _prepared(expr)
    best = _best(prepared, select)
    if isinstance(best, str):
        raise NoCover(best)
    return Selected(where, prepared, best, select)


def alternatives(expr: ir.Expr, select: Select, count: int = 3) -> list[Cover]:
    """The best cover for each instruction that can compute ``expr``'s root (cheapest first, at most
    ``count``): what ``--explain`` shows next to the chosen one."""
    return rooted(_prepared(expr), select)[:count]


def rooted(e: ir.Expr, select: Select) -> list[Cover]:
    """The best cover of ``e`` (as the search saw it: ``Selected.expr`` or one of its subtrees) with each
    instruction at its root, cheapest first."""
    options, _ = _options(e, select)
    by_root: dict[str, Cover] = {}
    for c in sorted(options, key=lambda c: (c.cycles, len(c.steps))):
        by_root.setdefault(c.steps[-1].instruction, c)
    return list(by_root.values())


def best_of(e: ir.Expr, select: Select) -> Cover | str:
    """The cheapest cover of ``e`` (as the search saw it), or why there is none."""
    return _best(e, select)


def subtrees(e: ir.Expr, select: Select) -> list[ir.Expr]:
    """``e`` and the subtrees under it that a step computes (not inputs, not constants), root first."""
    if select.is_input(e) or isinstance(e, ir.IntImm | ir.FloatImm):
        return []
    return [e, *(x for c in _children(e) for x in subtrees(c, select))]


# --------------------------------------------------------------------------------------------------
# The search


def _prepared(expr: ir.Expr) -> ir.Expr:
    """``expr`` as the passes after the schedule see it (simplified, no casts to a value's own type), unless
    simplifying leaves no input to compute from (``min(max(x, 0), 0)``: the operations stay)."""
    plain = strip_noop_casts(expr)
    simplified = simplify(plain)
    return simplified if loads_in(simplified) else plain


def _best(e: ir.Expr, select: Select) -> Cover | str:
    k = key(e)
    if k in select.memo:
        return select.memo[k]
    select.memo[k] = f"no cover of '{_show(e)}' (it needs itself)"   # until found: a rewrite cycle ends here
    if select.is_input(e) or (select.constants and isinstance(e, ir.IntImm | ir.FloatImm)):
        result: Cover | str = Cover((), 0)
    else:
        options, failed = _options(e, select)
        if options:
            result = min(options, key=lambda c: (c.cycles, len(c.steps)))
        elif failed and select.scalar_cycles is None:
            result = failed[0]   # an instruction computes this node, but not here or not its operand
        else:
            result = _scalar(e, select, failed[0] if failed else "")
    select.memo[k] = result
    return result


def _options(e: ir.Expr, select: Select) -> tuple[list[Cover], list[str]]:
    """Every cover of ``e`` whose last step is an instruction matching one of ``e``'s forms, and why the
    operands of those that matched could not be covered (memoized in ``select.options``)."""
    k = key(e)
    if k not in select.options:
        select.options[k] = _search_options(e, select)
    return select.options[k]


def _search_options(e: ir.Expr, select: Select) -> tuple[list[Cover], list[str]]:
    options, failed, refused = [], [], []
    for form in forms(e):
        for instr in select.instructions:
            found = bind(instr, form, select.params, select.constants)
            if found is None:
                continue
            operands, values = found
            if any(key(x) in (key(form), key(e)) for x in operands.values()):
                continue   # a copy (dst = src) computes nothing
            subs = [_best(x, select) for x in _distinct(operands.values())]
            if any(isinstance(s, str) for s in subs):
                failed.extend(s for s in subs if isinstance(s, str))
                continue
            cycles = select.cycles(instr, form, operands, values)
            if isinstance(cycles, str):
                refused.append(f"{instr.name} matches but {cycles}")
                continue
            options.append(_join(subs, Step(instr.name, form, operands, cycles, value=e)))
    return options, failed + refused


def _scalar(e: ir.Expr, select: Select, why: str = "") -> Cover | str:
    """``e`` as the target's scalar code, its operands covered first; or why nothing computes it (``why``:
    why an instruction that matched was not taken)."""
    what = _operation(e) + (f" here ({why})" if why else "")
    if select.scalar_cycles is None:
        return f"no instruction computes {what} (in '{_show(e)}')"
    children = [c for c in _children(e) if not isinstance(c, ir.IntImm | ir.FloatImm)]
    subs = [_best(c, select) for c in _distinct(children)]
    if any(isinstance(s, str) for s in subs):
        return next(s for s in subs if isinstance(s, str))
    step = Step(SCALAR, e, {f"x{i}": c for i, c in enumerate(children)}, select.scalar_cycles(e),
                reason=f"no instruction computes {what}")
    return _join(subs, step)


def _join(subs: list[Cover], step: Step) -> Cover:
    steps: dict[str, Step] = {}
    for sub in subs:
        for s in sub.steps:
            steps.setdefault(s.computes, s)
    steps[step.computes] = step
    return Cover(tuple(steps.values()), sum(s.cycles for s in steps.values()))


def bind(instr: isa.Instruction, e: ir.Expr, params: Mapping[str, int], constants: bool = False
         ) -> tuple[dict[str, ir.Expr], dict[str, int]] | None:
    """The operands (operand -> expression) and fields of ``instr``'s one assignment matched at ``e``'s
    root with the ``subtrees`` rule (and ``constants``: an operand may be a constant), or None; ``params``
    (the spec's) are what a field condition may read besides the fields."""
    found = _bind(instr, e, params, constants)
    return None if isinstance(found, str) else found


def _bind(instr: isa.Instruction, e: ir.Expr, params: Mapping[str, int], constants: bool = False
          ) -> tuple[dict[str, ir.Expr], dict[str, int]] | str:
    """``bind``, or why not: the matcher's reason for the first binding of types tried."""
    if len(instr.statements) != 1 or instr.statements[0].op != "=":
        return "its semantics are not one assignment"
    defaults = {f.name: f.default for f in instr.fields if f.default is not None}
    reasons = []
    for types in instr.bindings():
        (assign,) = instr.typed_semantics(types).statements
        if any(isinstance(x, t.Reduce) for x in t.walk(assign.value)):
            return "its semantics reduce (a sum), not an element-wise step"
        tree = TreeMatch(types=types, fields=frozenset(f.name for f in instr.fields),
                         field_defaults={**defaults, **params}, shifts=True, subtrees=True,
                         constants=constants)
        try:
            tree.match(assign.value, e)
        except NoTreeMatch as err:
            reasons.append(str(err))
            continue
        return dict(tree.exprs), dict(tree.values)
    return reasons[0] if reasons else "it has no binding of types"


def why_not(instr: isa.Instruction, e: ir.Expr, select: Select) -> str:
    """Why no cover of ``e`` (a statement's prepared expression) ends with ``instr`` at its root: the
    matcher's reason at the root, what the target refused where it matched (a constraint, an immediate),
    or the operand nothing covers."""
    reasons = []
    for form in forms(e):
        found = _bind(instr, form, select.params, select.constants)
        if isinstance(found, str):
            reasons.append(found)
            continue
        operands, values = found
        if any(key(x) in (key(form), key(e)) for x in operands.values()):
            return f"it would copy '{_show(e)}' (dst = src), computing nothing"
        failed = [s for s in (_best(x, select) for x in _distinct(operands.values())) if isinstance(s, str)]
        if failed:
            return f"it matches, but an operand cannot be computed: {failed[0]}"
        cycles = select.cycles(instr, form, operands, values)
        if isinstance(cycles, str):
            return f"it matches, but the target refuses it: {cycles}"
    if not reasons:
        return f"nothing of it matches '{_show(e)}'"
    return "; ".join(dict.fromkeys(reasons[0].split("; ")))   # each alternative of the semantics once


def element_wise(instr: isa.Instruction) -> bool:
    """Whether ``instr`` could be a step of a cover: one assignment that reduces nothing and computes from
    its operands (not a fill of constants, not a plain copy)."""
    if len(instr.statements) != 1 or instr.statements[0].op != "=":
        return False
    types = next(iter(instr.bindings()), None)
    if types is None:
        return False
    (assign,) = instr.typed_semantics(types).statements
    nodes = list(t.walk(assign.value))
    return (not any(isinstance(x, t.Reduce) for x in nodes) and not isinstance(assign.value, t.Access)
            and any(isinstance(x, t.Access) for x in nodes))


def in_place(instr: isa.Instruction) -> bool:
    """Whether ``instr`` reads the operand it writes (``dst = max(dst, 0)``, VITA's ``dst = dst + src``)."""
    (assign,) = instr.statements[:1] or (None,)
    return assign is not None and any(isinstance(x, t.Access) and x.tensor == assign.target.tensor
                                      for x in t.walk(assign.value))


# --------------------------------------------------------------------------------------------------
# Equivalent forms


def forms(e: ir.Expr) -> list[ir.Expr]:
    """``e`` and the forms the exact rewrites give at its root (module docstring), ``e`` first."""
    seen = {key(e): e}
    queue = [e]
    while queue and len(seen) < MAX_FORMS:
        for other in _rewrites(queue.pop(0)):
            k = key(other)
            if k not in seen and len(seen) < MAX_FORMS:
                seen[k] = other
                queue.append(other)
    return list(seen.values())


ASSOCIATIVE = (ir.Max, ir.Min)          # on every type
INTEGER_ASSOCIATIVE = (ir.Add, ir.Mul)  # exact on integers only (floats round per operation)


def _rewrites(e: ir.Expr) -> Iterable[ir.Expr]:
    op = type(e)
    exact_int = e.dtype.is_int
    if isinstance(e, ASSOCIATIVE) or (exact_int and isinstance(e, INTEGER_ASSOCIATIVE)):
        if type(e.a) is op:                      # (a . b) . c -> a . (b . c), and (a . c) . b
            yield op(e.a.a, op(e.a.b, e.b))
            yield op(op(e.a.a, e.b), e.a.b)
        if type(e.b) is op:                      # a . (b . c) -> (a . b) . c
            yield op(op(e.a, e.b.a), e.b.b)
    if isinstance(e, ir.Max) and isinstance(e.a, ir.Min):   # max(min(x, hi), lo) = min(max(x, lo), hi)
        lo, hi = _number(e.b), _number(e.a.b)
        if lo is not None and hi is not None and lo <= hi:
            yield ir.Min(ir.Max(e.a.a, e.b), e.a.b)
    if isinstance(e, ir.Min) and isinstance(e.a, ir.Max):
        lo, hi = _number(e.a.b), _number(e.b)
        if lo is not None and hi is not None and lo <= hi:
            yield ir.Max(ir.Min(e.a.a, e.b), e.a.b)
    if exact_int and isinstance(e, ir.Add) and isinstance(e.a, ir.Mul) and isinstance(e.b, ir.Mul):
        for x, y in ((e.a.a, e.a.b), (e.a.b, e.a.a)):      # x*y + x*z = x*(y + z)
            for u, v in ((e.b.a, e.b.b), (e.b.b, e.b.a)):
                if key(x) == key(u):
                    yield ir.Mul(x, ir.Add(y, v))
    if exact_int and isinstance(e, ir.Mul) and isinstance(e.b, ir.Add):   # x*(y + z) = x*y + x*z
        yield ir.Add(ir.Mul(e.a, e.b.a), ir.Mul(e.a, e.b.b))
    if isinstance(e, ir.Mul) and _number(e.b) == 2:   # x*2 = x + x (exact on every type)
        yield ir.Add(e.a, e.a)
    if isinstance(e, ir.Mul) and _number(e.a) == 2:
        yield ir.Add(e.b, e.b)
    if exact_int and isinstance(e, ir.Sub) and not isinstance(e.b, ir.IntImm):   # x - y = x + y*(-1)
        yield ir.Add(e.a, ir.Mul(e.b, ir.const(-1, e.b.dtype)))


# --------------------------------------------------------------------------------------------------
# Helpers


def strip_noop_casts(e: ir.Expr) -> ir.Expr:
    """``e`` without casts of a value to its own type (``i32(x)`` of an int32 ``x``)."""
    if isinstance(e, ir.Cast):
        inner = strip_noop_casts(e.value)
        return ir.cast(inner, e.type)
    if isinstance(e, ir.BinaryOp):
        a, b = strip_noop_casts(e.a), strip_noop_casts(e.b)
        return e if a is e.a and b is e.b else type(e)(a, b)
    return e


def substitute_nodes(e: ir.Expr, values: Mapping[str, ir.Expr]) -> ir.Expr:
    """``e`` with each subtree whose ``key`` is a key of ``values`` replaced, wherever it occurs (top-down:
    a replaced subtree is not visited): how a step's operands become reads of the tiles they are in."""

    class _Replace(IRMutator):
        def mutate(self, node):
            if isinstance(node, ir.Expr) and key(node) in values:
                return values[key(node)]
            return super().mutate(node)

    return _Replace().mutate(e)


def key(e: ir.Expr) -> str:
    """The identity of an expression in a cover (its text and type): equal subtrees are computed once."""
    return f"{e}:{e.dtype}"


def _distinct(exprs: Iterable[ir.Expr]) -> list[ir.Expr]:
    return list({key(x): x for x in exprs}.values())


def _number(e: ir.Expr) -> float | None:
    return e.value if isinstance(e, ir.IntImm | ir.FloatImm) else None


def _children(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.BinaryOp):
        return [e.a, e.b]
    if isinstance(e, ir.Cast):
        return [e.value]
    return [x for x in getattr(e, "args", ()) if isinstance(x, ir.Expr)]


OPERATIONS = {Shr: "a right shift by a tensor (>>)", Shl: "a left shift by a tensor (<<)",
              ir.Add: "an addition (+)", ir.Sub: "a subtraction (-)", ir.Mul: "a multiplication (*)",
              ir.Div: "a division (/)", ir.FloorDiv: "a floor division (//)", ir.FloorMod: "a remainder (%)",
              ir.Max: "max", ir.Min: "min", ir.Select: "a select"}


def _operation(e: ir.Expr) -> str:
    """What ``e``'s root computes, in words (an error names it)."""
    if isinstance(e, ir.Cast):
        return f"a cast to {e.type.name}"
    if isinstance(e, ir.FloorDiv) and isinstance(e.b, ir.IntImm) and e.b.value > 0 \
            and not e.b.value & (e.b.value - 1):
        return f"a right shift by {e.b.value.bit_length() - 1}"
    if type(e) in OPERATIONS:
        constants = [str(x) for x in _children(e) if isinstance(x, ir.IntImm | ir.FloatImm)]
        return OPERATIONS[type(e)] + (f" with the constant {constants[0]}" if constants else "")
    name = getattr(e, "name", None) if not isinstance(e, ir.Load) else None
    return f"'{name}'" if name else type(e).__name__


def _show(e: ir.Expr) -> str:
    text = str(e)
    return text if len(text) <= 60 else text[:57] + "..."
