"""PolyDL's data-reuse analysis (Tavarageri et al., Sec. 4.1, Algorithm 1): the working set of every
dependence of a loop nest, with islpy.

    nest = polyhedral(stmt)                   # NotAnalysable if a bound or an access is not affine
    for ws in working_sets(nest):             # one per dependence (RAR, RAW, WAR, WAW)
        print(ws.kind, ws.buffer, ws.ws_min, ws.ws_max)

A loop nest of the loop IR (``For`` loops with constant bounds, ``Seq``, ``Store`` statements whose indices
and loaded indices are affine in the loops) becomes statement instances ``S<n>[loops]`` in the order the
nest runs them: each instance's time is its loops interleaved with the statement's position in each
``Seq`` (the 2d+1 schedule). Every dependence is a reuse: two instances, one before the other, touching the
same element (``d = access ∘ access⁻¹ ∩ before``, all later instances, not only the next one, as PolyDL's
relations are). For a dependence the representative source is its first instance; its first and last
targets bound two working sets: ``ws_min`` (to exploit at least one reuse) and ``ws_max`` (every reuse up
to the last target), each the number of distinct elements read or written from the source to the target,
both included. A dependence that crosses iterations of a parallel loop has one working set: everything the
parallel loop and the loops inside it touch, the loops outside it at the source's values. Counts are
elements; ``bytes`` multiplies by the element size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from compiler.arith import linear_form
from compiler.ir import nodes as ir
from compiler.ir.functor import IRVisitor

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
    schedules: dict[str, str] = field(default_factory=dict)     # S0 -> "{ S0[i,j] -> [0,i,0,j,0] }"
    loops: dict[str, tuple[ir.Var, ...]] = field(default_factory=dict)
    accesses: list[Access] = field(default_factory=list)
    depth: int = 0

    def access_map(self, a: Access) -> isl.Map:
        """``a`` as a map from time to the element it touches."""
        names = ",".join(v.name for v in self.loops[a.statement])
        m = isl.Map(f"{{ {a.statement}[{names}] -> {a.buffer.name}[{','.join(a.indices)}] }}")
        m = m.intersect_domain(isl.Set(self.domains[a.statement]))
        return isl.Map(self.schedules[a.statement]).reverse().apply_range(m)

    def iterations(self) -> isl.Set:
        """Every instance of every statement, as time points."""
        found = None
        for s, dom in self.domains.items():
            points = isl.Set(dom).apply(isl.Map(self.schedules[s]))
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

    def bytes(self, element_bytes: int) -> tuple[int, int]:
        return self.ws_min * element_bytes, self.ws_max * element_bytes


def polyhedral(stmt: ir.Stmt) -> Nest:
    """The polyhedral form of ``stmt`` (see the module docstring); NotAnalysable names what is not."""
    nest = Nest()
    _Build(nest).walk(stmt, [], [])
    if not nest.domains:
        raise NotAnalysable("the loop nest holds no statement")
    width = 2 * nest.depth + 1
    for s, sched in nest.schedules.items():   # pad every time vector to the same length
        head, body = sched.split("-> [")
        dims = body.rstrip(" }]").split(",")
        nest.schedules[s] = f"{head}-> [{','.join(dims + ['0'] * (width - len(dims)))}] }}"
    return nest


class _Build:
    def __init__(self, nest: Nest) -> None:
        self.nest = nest

    def walk(self, s: ir.Stmt, loops: list[tuple[ir.For, int, int]], time: list[str]) -> None:
        if isinstance(s, ir.Seq):
            for k, x in enumerate(s.stmts):
                self.walk(x, loops, time[:-1] + [str(int(time[-1]) + k)] if time else [str(k)])
            return
        if isinstance(s, ir.Attr | ir.Allocate):
            self.walk(s.body, loops, time)
            return
        if isinstance(s, ir.For):
            lo, ext = _const(s.min), _const(s.extent)
            if lo is None or ext is None:
                raise NotAnalysable(f"loop {s.var.name} runs from {s.min} for {s.extent}: not constant "
                                    "bounds")
            self.walk(s.body, [*loops, (s, lo, ext)], (time or ["0"]) + [s.var.name, "0"])
            return
        if isinstance(s, ir.Store):
            self.statement(s, loops, time or ["0"])
            return
        raise NotAnalysable(f"{type(s).__name__} is outside the polyhedral model: {str(s).strip()}")

    def statement(self, s: ir.Store, loops: list[tuple[ir.For, int, int]], time: list[str]) -> None:
        nest = self.nest
        name = f"S{len(nest.domains)}"
        variables = tuple(loop.var for loop, _, _ in loops)
        names = ",".join(v.name for v in variables)
        bounds = " and ".join(f"{lo} <= {loop.var.name} < {lo + ext}" for loop, lo, ext in loops) or "true"
        nest.domains[name] = f"{{ {name}[{names}] : {bounds} }}"
        nest.schedules[name] = f"{{ {name}[{names}] -> [{','.join(time)}] }}"
        nest.loops[name] = variables
        nest.depth = max(nest.depth, len(loops))
        known = set(variables)
        for load in _loads(s.value):
            nest.accesses.append(Access(name, load.buffer, _affine(load, known), write=False))
        nest.accesses.append(Access(name, s.buffer, _affine(s, known), write=True))


def _const(e: ir.Expr) -> int | None:
    return int(e.value) if isinstance(e, ir.IntImm) else None


def _loads(e: ir.Expr) -> list[ir.Load]:
    found: list[ir.Load] = []

    class _Find(IRVisitor):
        def visit_Load(self, x: ir.Load) -> None:
            found.append(x)
            self.generic_visit(x)

    _Find().visit(e)
    return found


def _affine(access: ir.Load | ir.Store, loops: set[ir.Var]) -> tuple[str, ...]:
    out = []
    for index in access.indices:
        lf = linear_form(index)
        if lf is None or any(not isinstance(a, ir.Var) or a not in loops for a in lf.terms):
            raise NotAnalysable(f"the access {access.buffer.name}[{', '.join(map(str, access.indices))}] is "
                                f"not affine in its loops (index {index})")
        terms = [f"{c}*{a.name}" for a, c in lf.terms.items()] + [str(lf.const)]
        out.append(" + ".join(terms))
    return tuple(out)


def _between(points: isl.Set, first: isl.Set, last: isl.Set) -> isl.Set:
    """The points of ``points`` lexicographically from ``first`` to ``last``, both included."""
    upto = points.lex_le_set(last).domain()
    before = points.lex_lt_set(first).domain()
    return upto.subtract(before)


def _footprint(nest: Nest, maps: list[isl.Map], when: isl.Set) -> int:
    """Distinct elements the accesses touch at the time points ``when``."""
    by_buffer: dict[str, isl.Set] = {}
    for m in maps:
        touched = m.intersect_domain(when).range()
        name = touched.get_tuple_name()
        by_buffer[name] = by_buffer[name].union(touched) if name in by_buffer else touched
    return sum(int(s.count_val().to_python()) for s in by_buffer.values())


def working_sets(nest: Nest, parallel: tuple[ir.Var, ...] = ()) -> list[WorkingSet]:
    """The working set of every dependence of ``nest`` (Algorithm 1); loops in ``parallel`` run in
    parallel, so a dependence across their iterations needs everything they touch at once."""
    points = nest.iterations()
    maps = [nest.access_map(a) for a in nest.accesses]
    out = []
    for (a, ma), (b, mb) in ((x, y) for x in zip(nest.accesses, maps, strict=True)
                             for y in zip(nest.accesses, maps, strict=True)):
        if a.buffer is not b.buffer:
            continue
        same = ma.apply_range(mb.reverse())
        d = same.intersect(points.lex_lt_set(points))
        if d.is_empty():
            continue
        source = d.domain().lexmin()
        targets = source.apply(d)
        par = _parallel_dim(nest, parallel, source, targets)
        if par is not None:
            fixed = points
            for dim in range(par):
                fixed = fixed.fix_val(isl.dim_type.set, dim, source.dim_max_val(dim))
            size = _footprint(nest, maps, fixed)
            out.append(WorkingSet(KINDS[(a.write, b.write)], a.buffer.name, _show(a), _show(b), size, size,
                                  parallel=True))
            continue
        ws_min = _footprint(nest, maps, _between(points, source, targets.lexmin()))
        ws_max = _footprint(nest, maps, _between(points, source, targets.lexmax()))
        out.append(WorkingSet(KINDS[(a.write, b.write)], a.buffer.name, _show(a), _show(b), ws_min, ws_max))
    return out


def _parallel_dim(nest: Nest, parallel: tuple[ir.Var, ...], source: isl.Set, targets: isl.Set) -> int | None:
    """The time dimension of the outermost parallel loop whose value differs between the source and a
    target, or None."""
    if not parallel:
        return None
    names = {v.name for v in parallel}
    for schedule in nest.schedules.values():
        dims = schedule.split("-> [")[1].rstrip(" }]").split(",")
        for k, dim in enumerate(dims):
            if dim.strip() in names and \
                    targets.dim_max_val(k).to_python() != source.dim_min_val(k).to_python():
                return k
    return None


def _show(a: Access) -> str:
    return f"{a.statement}:{'write' if a.write else 'read'} {a.buffer.name}[{', '.join(a.indices)}]"
