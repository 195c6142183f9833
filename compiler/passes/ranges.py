"""Range proofs for instruction selection: where an instruction that saturates, widens or narrows computes
the same values as a wrapping integer reduction of the loop IR.

The loop IR's reduction ``out = out + i32(a) * i32(b)`` wraps at its dtype (int32). An instruction may sum in
a wider type and clamp the sum, AVX-512 VNNI's vpdpbusds for one:

    d[i] = i32(min(max(i64(c[i]) + sum(j, i64(a[4 * i + j]) * i64(b[4 * i + j])), -2147483648), 2147483647))

Such an instruction is the wrapping reduction wherever nothing wraps and nothing is clamped. ``envelope``
splits its semantics into the core, ``c + sum(...)``, and the layers around it (casts; ``min``/``max`` with a
constant, the saturation); ``prove`` decides with the interval arithmetic of compiler/arith/interval.py,
from the operands' dtypes alone (so for every input of the declared types), that

1. every node of the summed body fits the statement's dtype, so that the body computed in that dtype (the
   loop IR's ``i32(a) * i32(b)``, which ``narrowed`` writes for the matcher) has the instruction's values;
2. every partial sum of the whole reduction, the accumulator's initial values plus up to ``terms`` terms in
   any order, lies within the statement's dtype, the sum's own dtype, the accumulator's casts and every
   layer's bounds, so that neither side wraps, each clamp is the identity and each cast is exact.

What the whole reduction is (``Accumulation``: how many terms reach one accumulator, from which initial
values) is the caller's: the Inspector reads it from a tensor expression (its reduce axes, from 0), the
tensorize pass from the loops and stores around an accumulator of the loop IR (``accumulation_in``). A
failed proof names the bound: ``vpdpbusds_512 saturates at 2,147,483,647 (its max), but the sum of 70,000
terms in [-32,640, 32,385] (the reduction over ko, kk) reaches 2,266,950,000``.

Non-Goals: floats (rounding is no range question), clamps with bounds that are not constants, and tight
bounds: a partial sum's interval lets every term take its extremes independently, which is what inputs of
the declared types allow; ``accumulation_in`` counts the terms of every statement that updates an
accumulator as if each updated every element (an upper bound).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from compiler.arith import Interval
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.functor import fields_of, loads_in
from isa import dtypes as isa_dtypes
from isa.lang import tree as t


def dtype_range(dtype: str | dtypes.DType) -> Interval | None:
    """The values of integer ``dtype`` (a loop-IR dtype, or a spec's dtype name: ``i32``, ``u16``); None
    for the others."""
    if dtype == "int":   # index and field arithmetic: mathematical integers
        return Interval.everything()
    if isinstance(dtype, dtypes.DType):
        dtype = dtype.short
    try:
        dt = isa_dtypes.dtype(dtype)
    except (KeyError, ValueError, TypeError):
        return None
    if not dt.is_int:
        return None
    signed = dt.kind == "int"
    return Interval(-(1 << (dt.bits - 1)) if signed else 0, (1 << (dt.bits - (1 if signed else 0))) - 1)


@dataclass(frozen=True)
class Layer:
    """One layer around an instruction's accumulation, outermost first: ``cast`` to ``dtype``, or ``min``
    / ``max`` with the constant ``bound``."""

    op: str
    dtype: str | None = None
    bound: int | None = None

    def __str__(self) -> str:
        return f"{self.dtype}(...)" if self.op == "cast" else f"{self.op}(..., {self.bound})"


@dataclass(frozen=True)
class Envelope:
    """An instruction's ``layers(casts(c) + sum(...))``: the accumulator operand ``acc`` and its dtype, the
    casts around it (outermost first), the reduction as written, and the layers around their sum."""

    acc: str
    acc_dtype: str
    acc_casts: tuple[str, ...]
    reduce: t.Reduce
    layers: tuple[Layer, ...]

    @property
    def plain(self) -> bool:
        """No layer, no cast: the accumulation the matcher takes as it is."""
        return not self.layers and not self.acc_casts


@dataclass(frozen=True)
class Accumulation:
    """The whole reduction into one accumulator: at most ``terms`` terms, each in ``term`` (None: the
    instruction's body range), added to an initial value in ``init``; ``what`` names it in messages."""

    terms: int
    init: Interval
    what: str
    term: Interval | None = None


def envelope(value: t.Expr) -> Envelope | None:
    """``value`` (an instruction statement's typed value) split as ``layers(casts(c) + sum(...))``, or None
    when it is not a sum added to an accumulator."""
    layers: list[Layer] = []
    e = value
    while True:
        if isinstance(e, t.Cast):
            layers.append(Layer("cast", dtype=e.dtype))
            e = e.value
        elif isinstance(e, t.Call) and e.func in ("min", "max") and len(e.args) == 2 and \
                sum(isinstance(a, t.Num) and isinstance(a.value, int) for a in e.args) == 1:
            bound, inner = (e.args[0], e.args[1]) if isinstance(e.args[0], t.Num) else (e.args[1], e.args[0])
            layers.append(Layer(e.func, bound=int(bound.value)))
            e = inner
        else:
            break
    if not isinstance(e, t.Binary) or e.op != "+":
        return None
    for side, red in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        casts = []
        while isinstance(side, t.Cast):
            casts.append(side.dtype)
            side = side.value
        if isinstance(side, t.Access) and isinstance(red, t.Reduce) and red.op == "sum":
            return Envelope(side.tensor, str(side.dtype), tuple(casts), red, tuple(layers))
    return None


def envelope_of(instr) -> Envelope | None:
    """The envelope of an ``isa.Instruction`` of one statement ``d = ...`` that widens, clamps or narrows a
    sum added to an accumulator (the instructions ``prove`` must hold to); None for any other, a plain sum
    included."""
    try:
        sem = instr.typed_semantics()
    except KeyError:   # type variables: no one semantics
        return None
    if len(sem.statements) != 1 or sem.statements[0].op != "=":
        return None
    env = envelope(sem.statements[0].value)
    return None if env is None or env.plain else env


def narrowed(env: Envelope, dtype: str) -> t.Reduce:
    """The envelope's reduction computed in ``dtype`` (the statement's): each node and cast of the sum's own
    dtype retyped. It has the instruction's values only where ``prove`` holds."""
    wide = env.reduce.dtype

    def retype(e: t.Expr) -> t.Expr:
        kids = {}
        if isinstance(e, t.Cast | t.Unary):
            kids = {"value" if isinstance(e, t.Cast) else "operand": retype(t.children(e)[0])}
        elif isinstance(e, t.Binary):
            kids = {"lhs": retype(e.lhs), "rhs": retype(e.rhs),
                    "arg_dtype": dtype if e.arg_dtype == wide else e.arg_dtype}
        elif isinstance(e, t.Call):
            kids = {"args": tuple(retype(a) for a in e.args)}
        elif isinstance(e, t.Reduce):
            kids = {"body": retype(e.body)}
        elif isinstance(e, t.Access):
            return e
        return dataclasses.replace(e, **kids, **({"dtype": dtype} if e.dtype == wide else {}))

    return retype(env.reduce)


def prove(env: Envelope, name: str, acc: Accumulation | str | None, dtype: str) -> str | None:
    """None when instruction ``name``, with semantics ``env``, computes what a statement summing the same
    terms into ``dtype`` (wrapping) computes, for every input of the declared types and ``acc``'s reduction;
    else why not, naming the bound that failed."""
    if acc is None or isinstance(acc, str):
        return (f"{name} clamps or converts its sum ({', '.join(map(str, env.layers)) or 'casts'}), and the "
                f"range of what it accumulates is not known" + (f": {acc}" if acc else ""))
    limit = dtype_range(dtype)
    casts = (env.reduce.dtype, *env.acc_casts, *(x.dtype for x in env.layers if x.op == "cast"))
    if limit is None or any(dtype_range(c) is None for c in casts):
        return f"{name}'s range proof takes integers, not {', '.join(dict.fromkeys((dtype, *casts)))}"
    term = node_range(env.reduce.body)
    if isinstance(term, str):
        return f"{name}: {term}"
    wrap = _wraps(env.reduce.body, limit)
    if wrap is not None:
        return f"{name} computes {wrap} in {env.reduce.dtype}, which reaches past {dtype}'s {limit}"
    if acc.term is not None:
        term = term.union(acc.term)
    sums = acc.init + Interval(acc.terms * min(term.lo, 0), acc.terms * max(term.hi, 0))
    if not sums.is_bounded:
        return f"{name}: the accumulator's initial values ({acc.what}) are unbounded"
    how = (f"the sum of {acc.terms:,} terms in [{term.lo:,}, {term.hi:,}] ({acc.what})"
           + ("" if acc.init == Interval.point(0) else f" from {_span(acc.init)}"))
    clamps = []   # (bound, the partial sum past it), innermost first
    for layer in reversed(env.layers):
        if layer.op == "min" and sums.hi > layer.bound:
            clamps.append((layer.bound, sums.hi))
        elif layer.op == "max" and sums.lo < layer.bound:
            clamps.append((layer.bound, sums.lo))
    if clamps:
        return (f"{name} saturates at {' and '.join(f'{b:,}' for b, _ in clamps)}, but {how} reaches "
                f"{' and '.join(f'{r:,}' for _, r in clamps)}")
    wide = next((c for c in casts if not sums.within(dtype_range(c))), None)
    if wide is not None:
        return f"{name} converts its sum to {wide}, but {how} reaches {_span(sums)}"
    if not sums.within(limit):
        return f"{how} reaches {_span(sums)}, past {dtype}, where the statement wraps and {name} does not"
    return None


def node_range(e: t.Expr) -> Interval | str:
    """The values instruction expression ``e`` takes for every value of its operands' dtypes (a node whose
    result leaves its dtype wraps: that dtype's whole range), or why it cannot be bounded."""
    if isinstance(e, t.Num) and isinstance(e.value, int):
        return Interval.point(int(e.value))
    own = dtype_range(e.dtype or "")
    if own is None:
        return f"{t.to_text(e)} is not an integer"
    if isinstance(e, t.Access):
        return own
    kids = [node_range(k) for k in t.children(e)]
    bad = next((k for k in kids if isinstance(k, str)), None)
    if bad is not None:
        return bad
    if isinstance(e, t.Cast):
        value = kids[0]
    elif isinstance(e, t.Binary) and e.op in ("+", "-", "*"):
        a, b = kids
        value = a + b if e.op == "+" else a - b if e.op == "-" else a * b
    elif isinstance(e, t.Call) and e.func in ("min", "max") and len(kids) == 2:
        value = kids[0].min(kids[1]) if e.func == "min" else kids[0].max(kids[1])
    else:
        return f"no range rule for {t.to_text(e)}"
    return value if value.within(own) else own


def _wraps(body: t.Expr, limit: Interval) -> str | None:
    """The first node of ``body`` whose values leave ``limit`` (the statement's dtype), or None."""
    for node in t.walk(body):
        if isinstance(node, t.Access | t.Num) or node.dtype == "int":
            continue
        r = node_range(node)
        if isinstance(r, str) or not r.within(limit):
            return f"{t.to_text(node)} ({r})"
    return None


def _num(v: int | None) -> str:
    return "unbounded" if v is None else f"{v:,}"


def _span(iv: Interval) -> str:
    return f"[{_num(iv.lo)}, {_num(iv.hi)}]"


# ---------------------------------------------------------------------------------------- the loop IR


def value_range(e: ir.Expr) -> Interval | None:
    """The values integer loop-IR expression ``e`` takes for every value of the buffers it loads and the
    variables it reads (their dtypes' ranges); a result that leaves ``e``'s dtype wraps: the whole range.
    None where ``e`` is not an integer."""
    own = dtype_range(e.dtype)
    if own is None:
        return None
    if isinstance(e, ir.IntImm):
        return Interval.point(e.value)
    parts = {ir.Add: Interval.__add__, ir.Sub: Interval.__sub__, ir.Mul: Interval.__mul__,
             ir.Min: Interval.min, ir.Max: Interval.max}
    if isinstance(e, ir.Cast):
        inner = value_range(e.value)
        value = inner if inner is not None else own
    elif type(e) in parts:
        a, b = value_range(e.a), value_range(e.b)
        value = own if a is None or b is None else parts[type(e)](a, b)
    else:   # a load, a variable, anything else: whatever its dtype holds
        value = own
    return value if value.within(own) else own


def accumulation_in(body: ir.Stmt, update: ir.Store) -> Accumulation | str:
    """What reaches one element of ``update``'s buffer (an accumulator: ``buf[idx] = buf[idx] + term``) in
    ``body``: within the buffer's innermost ``Allocate`` around ``update`` (a parameter: all of ``body``,
    from whatever the caller passed), every store that adds to it contributes the product of the extents
    of the loops around it there whose variable is not one of its plain indices (a loop that indexes the
    element does not add to it again); every other store is an initial value. The union over every place
    ``update`` occurs. Or why it cannot be said."""
    found: list[Accumulation | str] = []
    _find(body, body, update, (), found)
    if not found:
        return f"{update.buffer.name}'s update is not in the function"
    bad = next((f for f in found if isinstance(f, str)), None)
    if bad is not None:
        return bad
    init, term = found[0].init, found[0].term
    for f in found[1:]:
        init, term = init.union(f.init), term.union(f.term)
    return Accumulation(max(f.terms for f in found), init, found[0].what, term)


def _find(root: ir.Stmt, s: ir.Stmt, update: ir.Store, allocs: tuple[ir.Allocate, ...], found: list) -> None:
    """Each place ``update`` occurs below ``s``, with its scope (``allocs``: the Allocates around ``s``)."""
    if s is update:
        scope = next((a for a in reversed(allocs) if a.buffer is update.buffer), None)
        found.append(_scope(scope.body if scope is not None else root, update, scope is None))
        return
    inner = (*allocs, s) if isinstance(s, ir.Allocate) else allocs
    for child in _statements(s):
        _find(root, child, update, inner, found)


def _statements(s: ir.Stmt) -> tuple[ir.Stmt, ...]:
    """The statements directly inside ``s`` (a loop's body, an ``if``'s cases, a sequence's items...)."""
    kids: list[ir.Stmt] = []
    for name in fields_of(s):
        value = getattr(s, name)
        kids += [v for v in (value if isinstance(value, tuple) else (value,)) if isinstance(v, ir.Stmt)]
    return tuple(kids)


def _scope(scope: ir.Stmt, update: ir.Store, parameter: bool) -> Accumulation | str:
    buf = update.buffer
    terms, inits, ranges = 0, [dtype_range(buf.dtype)] if parameter else [], []

    def walk(s: ir.Stmt, loops: tuple[ir.For, ...]) -> str | None:
        if isinstance(s, ir.TensorInsn) and any(r.buffer is buf for r in s.regions):
            return f"{buf.name} is also written by {s.isa.name}.{s.name}"
        if isinstance(s, ir.Store) and s.buffer is buf:
            return store(s, loops)
        inner = (*loops, s) if isinstance(s, ir.For) else loops
        return next((r for c in _statements(s) if (r := walk(c, inner)) is not None), None)

    def store(s: ir.Store, loops: tuple[ir.For, ...]) -> str | None:
        nonlocal terms
        if not any(x.buffer is buf for x in loads_in(s.value)):
            inits.append(value_range(s.value))
            return None
        read = s.value.a if isinstance(s.value, ir.Add) else None
        if not (isinstance(read, ir.Load) and read.buffer is buf and
                tuple(map(str, read.indices)) == tuple(map(str, s.indices))):
            return f"{buf.name} is updated by '{str(s).strip()}', which does not add a term to what it reads"
        plain = {i for i in s.indices if isinstance(i, ir.Var)}
        counted = [lp for lp in loops if lp.var not in plain]
        if any(not isinstance(lp.extent, ir.IntImm) for lp in counted):
            return f"a loop around the update of {buf.name} has no constant extent"
        terms += math.prod(lp.extent.value for lp in counted)
        ranges.append(value_range(s.value.b))
        return None

    why = walk(scope, ())
    if why is not None:
        return why
    if any(r is None for r in (*inits, *ranges)) or not ranges:
        return f"{buf.name} does not hold integers summed by its updates"
    init = inits[0] if inits else dtype_range(buf.dtype)   # no initial store: whatever the memory holds
    for r in inits[1:]:
        init = init.union(r)
    term = ranges[0]
    for r in ranges[1:]:
        term = term.union(r)
    return Accumulation(terms, init, f"the accumulation into {buf.name}", term)
