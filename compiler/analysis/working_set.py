"""PolyDL's data-reuse analysis (Tavarageri et al., Sec. 4.1, Algorithm 1): the working set of every
dependence of a loop nest, with islpy.

    nest = polyhedral(stmt)                   # NotAnalysable if a bound or an access is not affine
    for ws in working_sets(nest):             # one per dependence (RAR, RAW, WAR, WAW)
        print(ws.kind, ws.buffer, ws.ws_min, ws.ws_max)

A loop nest of the loop IR (``For`` loops with constant bounds, ``Seq``, guards on affine conditions,
``Store`` statements whose indices and loaded indices are affine in the loops) becomes statement instances
``S<n>[loops]`` in the order the nest runs them: each instance's time is its loops interleaved with the
statement's position in each ``Seq`` (the 2d+1 schedule), less what orders nothing (loops of one iteration,
positions that are the same in every statement). A tensorized instruction (a ``tensorize`` mark) is one step
in time: the loops inside it are its lanes, which touch their elements at once, as PolyDL's microkernel is one
call. Buffers in registers (scope ``local``) are not in the memory hierarchy and are left out, with the
statements that touch nothing else. Every dependence is a reuse: two instances, one before the other, touching
the same element (``d = access ∘ access⁻¹ ∩ before``, all later instances, not only the next one, as PolyDL's
relations are). For a dependence the representative source is its first instance; its first and last
targets bound two working sets: ``ws_min`` (to exploit at least one reuse) and ``ws_max`` (every reuse up
to the last target), each the number of distinct elements read or written from the source to the target,
both included. A dependence that crosses iterations of a parallel loop has one working set: everything the
parallel loop and the loops inside it touch, the loops outside it at the source's values. Counts are
elements; ``bytes`` gives them in bytes, each buffer's elements at its type's width (or all at one width).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import islpy as isl

from compiler.arith import linear_form
from compiler.ir import nodes as ir
from compiler.ir.functor import loads_in
from compiler.ir.intrinsics import Call

_IDENT = re.compile(r"\W")   # what ISL's names cannot hold
_COMPARE = {ir.LT: "<", ir.LE: "<=", ir.GT: ">", ir.GE: ">=", ir.EQ: "="}
_INSTRUCTION = "instruction"   # marks the time of a tensorized instruction's loops
_NEGATE = {ir.LT: ">=", ir.LE: ">", ir.GT: "<=", ir.GE: "<"}
KINDS = {(False, False): "RAR", (True, False): "RAW", (False, True): "WAR", (True, True): "WAW"}


class NotAnalysable(ValueError):
    """A loop nest outside the polyhedral model (a non-constant bound, a non-affine index): the message
    names the loop or the access."""


@dataclass(frozen=True)
class Access:
    statement: str
    buffer: ir.Buffer
    indices: tuple[str, ...]        # affine expressions of the statement's loop variables, ISL syntax
    write: bool


@dataclass
class Nest:
    """A loop nest in the polyhedral model: each statement's domain and time, and every access."""

    domains: dict[str, str] = field(default_factory=dict)       # S0 -> "{ S0[i,j] : ... }"
    times: dict[str, tuple[str, ...]] = field(default_factory=dict)   # S0 -> ("i", "0", "j")
    loops: dict[str, tuple[ir.Var, ...]] = field(default_factory=dict)
    accesses: list[Access] = field(default_factory=list)
    names: dict[ir.Var, str] = field(default_factory=dict)      # each loop's ISL name
    arrays: dict[ir.Buffer, str] = field(default_factory=dict)  # each buffer's ISL name
    line_bytes: int | None = None                               # count cache lines of this size, not elements
    _prepared: tuple | None = field(default=None, repr=False, compare=False)
    _schedules: dict = field(default_factory=dict, repr=False, compare=False)
    _start: isl.Set | None = field(default=None, repr=False, compare=False)
    #: each access's map from its statement's domain to what it touches: the same in a reordered nest
    _touches: dict = field(default_factory=dict, repr=False, compare=False)

    def per_line(self, buffer: ir.Buffer) -> int | None:
        """Elements of ``buffer`` per cache line, where the nest counts lines (None: it counts elements)."""
        size = max(1, buffer.dtype.bits // 8)
        if not self.line_bytes or self.line_bytes % size:
            return None
        return self.line_bytes // size

    def unit_bytes(self, buffer: ir.Buffer) -> int:
        """Bytes of what the nest counts of ``buffer``: a line, or an element."""
        return self.line_bytes if self.per_line(buffer) else max(1, buffer.dtype.bits // 8)

    def schedule(self, statement: str) -> isl.Map:
        """When each instance of ``statement`` runs: its loops to its time vector."""
        if statement not in self._schedules:
            names = ",".join(self.names[v] for v in self.loops[statement])
            self._schedules[statement] = isl.Map(
                f"{{ {statement}[{names}] -> [{','.join(self.times[statement])}] }}")
        return self._schedules[statement]

    def access_map(self, a: Access) -> isl.Map:
        """``a`` as a map from time to the element it touches (or, with ``line_bytes``, its cache line)."""
        array = self.arrays.setdefault(a.buffer, f"{_IDENT.sub('_', a.buffer.name)}_{len(self.arrays)}")
        key = (a, array)
        if key not in self._touches:
            names = ",".join(self.names[v] for v in self.loops[a.statement])
            per_line = self.per_line(a.buffer)
            if per_line:
                strides = [math.prod(a.buffer.shape[k + 1:]) for k in range(len(a.buffer.shape))]
                flat = " + ".join(f"{stride}*({index})"
                                  for stride, index in zip(strides, a.indices, strict=True))
                target = f"{array}[floor(({flat})/{per_line})]"
            else:
                target = f"{array}[{','.join(a.indices)}]"
            m = isl.Map(f"{{ {a.statement}[{names}] -> {target} }}")
            self._touches[key] = m.intersect_domain(isl.Set(self.domains[a.statement]))
        return self.schedule(a.statement).reverse().apply_range(self._touches[key])

    def prepared(self) -> tuple[isl.Set, list[isl.Map]]:
        """The time points and each access's map (kept: a nest analysed with several choices of parallel
        loops builds them once)."""
        if self._prepared is None:
            self._prepared = self.iterations(), [self.access_map(a) for a in self.accesses]
        return self._prepared

    def start(self) -> isl.Set:
        """The nest's first time point."""
        if self._start is None:
            self._start = self.prepared()[0].lexmin()
        return self._start

    def reordered(self, order: Sequence[ir.Var]) -> Nest:
        """This nest with the loops of ``order`` (loops that enclose every statement, outermost in every
        statement's time) run in that order, outermost first: the statements, domains and accesses are the
        same, only the times change. ValueError where a loop of ``order`` does not enclose a statement or
        has a loop of its own nest outside it."""
        names = [self.names[v] for v in order]
        if sorted(names) != sorted(self.names[v] for v in set(order)):
            raise ValueError(f"{[v.name for v in order]} is not a permutation of distinct loops")
        times = {}
        for s, time in self.times.items():
            if not set(order) <= set(self.loops[s]):
                raise ValueError(f"statement {s} is not inside every loop of {[v.name for v in order]}")
            loop_names = {self.names[v] for v in self.loops[s]}
            steps = [k for k, t in enumerate(time) if t in loop_names]   # the time steps that are loops
            here = [k for k in steps if time[k] in names]
            if here != steps[: len(here)]:
                raise ValueError(f"statement {s}: a loop outside {[v.name for v in order]} runs around them")
            new = list(time)
            for k, name in zip(here, [n for n in names if n in {time[j] for j in here}], strict=True):
                new[k] = name
            times[s] = tuple(new)
        return Nest(dict(self.domains), times, dict(self.loops), list(self.accesses), dict(self.names),
                    {}, self.line_bytes, _touches=self._touches)

    def iterations(self) -> isl.Set:
        """Every instance of every statement, as time points."""
        found = None
        for s, dom in self.domains.items():
            points = isl.Set(dom).apply(self.schedule(s))
            found = points if found is None else found.union(points)
        return found


@dataclass(frozen=True)
class WorkingSet:
    kind: str                       # RAR, RAW, WAR, WAW
    buffer: str
    source: str                     # the access the reuse starts at, and the one it ends at
    target: str
    ws_min: int
    ws_max: int
    parallel: bool = False
    #: (buffer, bytes of WS_min, bytes of WS_max): each buffer's part, at its type's width (or in lines)
    by_buffer: tuple[tuple[str, int, int], ...] = ()

    def bytes(self, element_bytes: int | None = None) -> tuple[int, int]:
        """(WS_min, WS_max) in bytes: every element ``element_bytes`` wide, or (None) each buffer's part at
        its own width."""
        if element_bytes is None:
            return sum(low for _, low, _ in self.by_buffer), sum(high for _, _, high in self.by_buffer)
        return self.ws_min * element_bytes, self.ws_max * element_bytes


def polyhedral(stmt: ir.Stmt, registers: tuple[str, ...] = ("local",), line_bytes: int | None = None) -> Nest:
    """The polyhedral form of ``stmt`` (see the module docstring); NotAnalysable names what is not. A guard
    (``if`` on an affine condition: comparisons joined by ``and``) narrows the domain
    of the statements it holds; an ``else`` is taken where the condition is one comparison. Buffers of the
    ``registers`` scopes (a schedule's ``local`` accumulator tile, which LLVM keeps in registers) are not
    in the memory hierarchy: their accesses are left out. With ``line_bytes``, working sets count the cache
    lines of that size the accesses touch (each buffer's element ``[i, j, ...]`` in the line of its
    row-major offset), not elements: PolyDL counts elements, but a cache holds lines, so a variant that
    touches a line's elements in far-apart iterations holds the whole line meanwhile."""
    nest = Nest(line_bytes=line_bytes)
    _Build(nest, registers).walk(stmt, [], [], [])
    if not nest.domains:
        raise NotAnalysable("the loop nest holds no statement")
    touching = {a.statement for a in nest.accesses}
    for s in [s for s in nest.domains if s not in touching]:   # no memory access: no reuse to time
        del nest.domains[s], nest.times[s], nest.loops[s]
    if not nest.domains:
        raise NotAnalysable("the loop nest touches no memory outside registers")
    width = max(len(t) for t in nest.times.values())   # every time vector padded to the same length
    padded = {s: t + ("0",) * (width - len(t)) for s, t in nest.times.items()}
    # a dimension that is the same constant in every statement orders nothing: left out, as fewer
    # dimensions make ISL's lexicographic operations cheaper
    keep = [k for k in range(width) if len({t[k] for t in padded.values()}) > 1
            or not _is_int(next(iter(padded.values()))[k])] or [0]
    nest.times = {s: tuple(t[k] for k in keep) for s, t in padded.items()}
    return nest


class _Build:
    def __init__(self, nest: Nest, registers: tuple[str, ...]) -> None:
        self.nest = nest
        self.registers = registers

    def walk(self, s: ir.Stmt, loops: list[tuple[ir.For, int, int]], time: list[str], guards: list[str]
             ) -> None:
        if isinstance(s, ir.Seq) and time and time[-1] == _INSTRUCTION:   # inside one instruction
            for x in s.stmts:
                self.walk(x, loops, time, guards)
            return
        if isinstance(s, ir.Seq):
            for k, x in enumerate(s.stmts):
                self.walk(x, loops, time[:-1] + [str(int(time[-1]) + k)] if time else [str(k)], guards)
            return
        if isinstance(s, ir.Attr) and s.key == "tensorize":   # one instruction: one step in time
            self.walk(s.body, loops, [*time, _INSTRUCTION], guards)
            return
        if isinstance(s, ir.Attr | ir.Allocate):
            self.walk(s.body, loops, time, guards)
            return
        if isinstance(s, ir.IfThenElse):
            known = {loop.var for loop, _, _ in loops}
            self.walk(s.then_case, loops, time, [*guards, *self.condition(s.cond, known)])
            if s.else_case is not None:
                self.walk(s.else_case, loops, time, [*guards, self.negation(s.cond, known)])
            return
        if isinstance(s, ir.For):
            lo, ext = _const(s.min), _const(s.extent)
            if lo is None or ext is None:
                raise NotAnalysable(f"loop {s.var.name} runs from {s.min} for {s.extent}: not constant "
                                    "bounds")
            name = self.nest.names.setdefault(s.var, _IDENT.sub("_", s.var.name) + f"_{len(loops)}")
            if _INSTRUCTION in time:   # a loop inside an instruction adds no time step
                self.walk(s.body, [*loops, (s, lo, ext)], time, guards)
                return
            # a loop of one iteration is a constant in time
            step = name if ext > 1 else str(lo)
            self.walk(s.body, [*loops, (s, lo, ext)], (time or ["0"]) + [step, "0"], guards)
            return
        if isinstance(s, ir.Store):
            self.statement(s, loops, time or ["0"], guards)
            return
        if isinstance(s, ir.Evaluate) and isinstance(s.value, Call) and s.value.name == "prefetch":
            return   # a hint, no access: the working sets count what the statements read and write
        raise NotAnalysable(f"{type(s).__name__} is outside the polyhedral model: {str(s).strip()}")

    def condition(self, cond: ir.Expr, known: set[ir.Var]) -> list[str]:
        """An affine guard as ISL constraints (one per comparison of a conjunction)."""
        if isinstance(cond, ir.And):
            return self.condition(cond.a, known) + self.condition(cond.b, known)
        if type(cond) in _COMPARE:
            a, b = (self.affine(x, known, cond) for x in (cond.a, cond.b))
            return [f"{a} {_COMPARE[type(cond)]} {b}"]
        raise NotAnalysable(f"the guard {cond} is not an affine condition of its loops")

    def negation(self, cond: ir.Expr, known: set[ir.Var]) -> str:
        """The ``else`` of a one-comparison guard."""
        if type(cond) in _NEGATE:
            a, b = (self.affine(x, known, cond) for x in (cond.a, cond.b))
            return f"{a} {_NEGATE[type(cond)]} {b}"
        raise NotAnalysable(f"the else of the guard {cond} is not one affine condition")

    def affine(self, e: ir.Expr, known: set[ir.Var], where: object) -> str:
        """``e`` as an ISL quasi-affine expression of the loops ``known``: a linear form whose atoms are
        loop variables, or the floor quotient or remainder of such an expression by a positive constant
        (what fusing loops writes: ``fused // 8``, ``fused % 8``)."""
        lf = linear_form(e)
        if lf is None:
            raise NotAnalysable(f"{where} is not affine in its loops ({e})")
        terms = [f"{c}*{self.atom(a, known, where, e)}" for a, c in lf.terms.items()]
        return " + ".join([*terms, str(lf.const)])

    def atom(self, a: ir.Expr, known: set[ir.Var], where: object, whole: ir.Expr) -> str:
        if isinstance(a, ir.Var) and a in known:
            return self.nest.names[a]
        if isinstance(a, ir.FloorDiv | ir.FloorMod) and isinstance(a.b, ir.IntImm) and a.b.value > 0:
            inner = self.affine(a.a, known, where)
            return f"floor(({inner})/{a.b.value})" if isinstance(a, ir.FloorDiv) else \
                f"(({inner}) mod {a.b.value})"
        raise NotAnalysable(f"{where} is not affine in its loops ({whole})")

    def statement(self, s: ir.Store, loops: list[tuple[ir.For, int, int]], time: list[str],
                  guards: list[str]) -> None:
        nest = self.nest
        name = f"S{len(nest.domains)}"
        variables = tuple(loop.var for loop, _, _ in loops)
        names = ",".join(nest.names[v] for v in variables)
        bounds = " and ".join([f"{lo} <= {nest.names[loop.var]} < {lo + ext}" for loop, lo, ext in loops]
                              + guards) or "true"
        nest.domains[name] = f"{{ {name}[{names}] : {bounds} }}"
        nest.times[name] = tuple(t for t in time if t != _INSTRUCTION)
        nest.loops[name] = variables
        known = set(variables)
        for access in [*loads_in(s.value), s]:
            if access.buffer.scope in self.registers:
                continue
            where = f"the access {access.buffer.name}[{', '.join(map(str, access.indices))}]"
            indices = tuple(self.affine(index, known, where) for index in access.indices)
            nest.accesses.append(Access(name, access.buffer, indices, write=access is s))


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _const(e: ir.Expr) -> int | None:
    return int(e.value) if isinstance(e, ir.IntImm) else None


def _between(points: isl.Set, before: isl.Set, last: isl.Set) -> isl.Set:
    """The points of ``points`` lexicographically up to ``last`` (included) that are not ``before`` (the
    points before the first one)."""
    return points.lex_le_set(last).domain().subtract(before)


def _footprint(nest: Nest, maps: list[isl.Map], when: isl.Set) -> tuple[int, dict[str, int]]:
    """Distinct elements (or lines) the accesses touch at the time points ``when``, and the bytes of each
    buffer's (by the buffer's own name)."""
    by_buffer: dict[str, isl.Set] = {}
    for m in maps:
        touched = m.intersect_domain(when).range()
        name = touched.get_tuple_name()
        by_buffer[name] = by_buffer[name].union(touched) if name in by_buffer else touched
    width = {name: nest.unit_bytes(buffer) for buffer, name in nest.arrays.items()}
    counts = {name: int(s.count_val().to_python()) for name, s in by_buffer.items()}
    named = {isl_name: buffer.name for buffer, isl_name in nest.arrays.items()}
    return sum(counts.values()), {named[name]: n * width[name] for name, n in counts.items()}


def working_sets(nest: Nest, parallel: tuple[ir.Var, ...] = (), threads: int | None = None
                 ) -> list[WorkingSet]:
    """The working set of every dependence of ``nest`` (Algorithm 1); loops in ``parallel`` run in
    parallel, so a dependence across their iterations needs everything they touch at once (PolyDL's rule:
    the parallel iterations may run in any order). With ``threads``, the parallel loop's iterations are cut
    into that many contiguous chunks run at once (static scheduling, as Tandem's CPU backend runs them): a
    dependence across its iterations is then, on each thread, a reuse in order within its chunk, and the
    threads' working sets share the caches: ``threads`` times the sequential WS_min and WS_max."""
    return working_sets_each(nest, [parallel], threads)[parallel]


def working_sets_each(nest: Nest, choices: Sequence[tuple[ir.Var, ...]], threads: int | None = None
                      ) -> dict[tuple[ir.Var, ...], list[WorkingSet]]:
    """``working_sets`` of ``nest`` for each choice of parallel loops, sharing what the choices share: each
    dependence, its source and targets are found once, its sequential working set is computed once for
    every choice that runs the dependence in order (or, with ``threads``, across a parallel loop), and its
    parallel one once per parallel loop crossed."""
    points, maps = nest.prepared()
    out: dict[tuple[ir.Var, ...], list[WorkingSet]] = {c: [] for c in choices}
    for (a, ma), (b, mb) in ((x, y) for x in zip(nest.accesses, maps, strict=True)
                             for y in zip(nest.accesses, maps, strict=True)):
        if a.buffer is not b.buffer:
            continue
        found = _dependence(ma, mb)
        if found is None:
            continue
        source, targets = found
        kind = KINDS[(a.write, b.write)]
        done: dict[int | None, WorkingSet] = {}
        moved: dict[int, bool] = {}
        for choice in out:
            par = _parallel_dim(nest, choice, source, targets, moved)
            if par not in done:
                if par is None or threads is not None:
                    if None not in done:
                        done[None] = _sequential_set(nest, maps, points, source, targets, kind, a, b)
                    done[par] = done[None] if par is None else _scaled(done[None], threads)
                else:
                    done[par] = _parallel_set(nest, maps, points, source, par, kind, a, b)
            out[choice].append(done[par])
    return out


def _dependence(ma: isl.Map, mb: isl.Map) -> tuple[isl.Set, isl.Set] | None:
    """The dependence from the access of map ``ma`` to that of ``mb`` (times to what they touch): its
    first source instance and that instance's targets (``mb``'s later times touching what it touches), or
    None where no later instance touches what an earlier one does. Usually the first instance of ``ma`` is
    the source (what it touches is touched again): found from that one point, without the relation of
    every pair of instances, which is built only where it is not."""
    first = ma.domain().lexmin()
    targets = first.apply(ma).apply(mb.reverse()).lex_gt_set(first).domain()
    if not targets.is_empty():
        return first, targets
    # the pairs of times touching one element, the first before the second (the order compared on the
    # two accesses' own times only: cheaper than one order over every time point)
    d = ma.apply_range(mb.reverse()).intersect(ma.domain().lex_lt_set(mb.domain()))
    if d.is_empty():
        return None
    source = d.domain().lexmin()
    return source, source.apply(d)


def _scaled(ws: WorkingSet, threads: int) -> WorkingSet:
    """A sequential working set held by ``threads`` threads at once (each reusing in its own chunk)."""
    return WorkingSet(ws.kind, ws.buffer, ws.source, ws.target, ws.ws_min * threads, ws.ws_max * threads,
                      parallel=False, by_buffer=tuple((k, lo * threads, hi * threads)
                                                      for k, lo, hi in ws.by_buffer))


def _parallel_set(nest: Nest, maps: list[isl.Map], points: isl.Set, source: isl.Set, par: int, kind: str,
                  a: Access, b: Access) -> WorkingSet:
    """A dependence across the parallel loop of time dimension ``par``: what every iteration of that loop
    touches at once (the outer loops at the source's values)."""
    fixed = points
    for dim in range(par):
        fixed = fixed.fix_val(isl.dim_type.set, dim, source.dim_max_val(dim))
    size, parts = _footprint(nest, maps, fixed)
    return WorkingSet(kind, a.buffer.name, _show(a), _show(b), size, size, parallel=True,
                      by_buffer=tuple((k, v, v) for k, v in sorted(parts.items())))


def _sequential_set(nest: Nest, maps: list[isl.Map], points: isl.Set, source: isl.Set, targets: isl.Set,
                    kind: str, a: Access, b: Access) -> WorkingSet:
    """Algorithm 1's WS_min and WS_max: what is touched from the source to the first and the last target."""
    # nothing runs before the nest's first point (the usual source): no lexicographic set to build
    before = isl.Set.empty(points.get_space()) if source.is_equal(nest.start()) else \
        points.lex_lt_set(source).domain()
    ws_min, low = _footprint(nest, maps, _between(points, before, targets.lexmin()))
    ws_max, high = _footprint(nest, maps, _between(points, before, targets.lexmax()))
    return WorkingSet(kind, a.buffer.name, _show(a), _show(b), ws_min, ws_max,
                      by_buffer=tuple((k, low.get(k, 0), high[k]) for k in sorted(high)))


def _parallel_dim(nest: Nest, parallel: tuple[ir.Var, ...], source: isl.Set, targets: isl.Set,
                  moved: dict[int, bool]) -> int | None:
    """The time dimension of the outermost parallel loop whose value differs between the source and a
    target, or None; ``moved`` keeps, by dimension, whether it differs (one dependence's choices share it)."""
    if not parallel:
        return None
    names = {nest.names[v] for v in parallel if v in nest.names}
    for dims in nest.times.values():
        for k, dim in enumerate(dims):
            if dim in names:
                if k not in moved:
                    moved[k] = targets.dim_max_val(k).to_python() != source.dim_min_val(k).to_python()
                if moved[k]:
                    return k
    return None


def _show(a: Access) -> str:
    return f"{a.statement}:{'write' if a.write else 'read'} {a.buffer.name}[{', '.join(a.indices)}]"
