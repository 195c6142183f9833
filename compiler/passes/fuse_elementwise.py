"""fuse_elementwise: PolyDL's operator fusion (Tavarageri et al., Sec. 5, Algorithm 3).

An element-wise operator after a heavy one (a ReLU, a ReLU6, a bias add after a convolution or a GEMM)
rewrites, in place, every element the heavy operator wrote. Run separately, it reads the heavy operator's
whole output back through the memory hierarchy; fused, it runs on each element in the last iteration of
the heavy operator's reduction, while the element is still at hand:

    for i, j:                                   for i, j:
      C[i, j] = 0                                 C[i, j] = 0
      for k in range(K):                          for k in range(K):
        C[i, j] = C[i, j] + A[i, k] * B[k, j] ->    C[i, j] = C[i, j] + A[i, k] * B[k, j]
    for i', j':                                     if k >= K - 1:
      C[i', j'] = max(C[i', j'], 0)                   C[i, j] = max(C[i, j], 0)

Algorithm 3's conditions, checked with islpy on the two nests (``compiler.analysis.working_set``): the heavy
operator's write set equals the element-wise operator's (``W_hy = W_ew``); the element-wise operator writes
each element once (``|I_ew| = |W_ew|``); and no statement between the two touches the buffer. Its statement
is then placed after the heavy operator's last store to the buffer, which writes each element last: guarded
by the loops around that store that its indices do not use (the reduction's) being at their last
iteration, or unguarded where there are none (a schedule that accumulates in registers and copies each
element out once); its loop variables are replaced by the store's indices (its indices must be its own
loop variables, one each). ``loop_partition`` then peels the last iteration off
(the paper's index-set splitting: run it after this pass).

Contract: the function computes the same result (the reduction's last iteration finishes each element
before the element-wise statement reads it, and nothing else reads the buffer in between). Pairs that do
not meet the conditions are left as they are; ``fusions`` says which pairs were fused and why the others
were not.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import islpy as isl

from compiler.analysis.working_set import Nest, NotAnalysable, polyhedral
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, buffers_of, free_vars, loads_in, substitute
from compiler.passes.tensorize import MARKS


@dataclass(frozen=True)
class Verdict:
    """Whether the element-wise nest at ``index`` of a statement list was fused into the one before it."""

    index: int
    fused: bool
    why: str


def fuse_elementwise(func: ir.PrimFunc) -> ir.PrimFunc:
    """Fuse every element-wise nest into the heavy nest before it where Algorithm 3 allows (see the
    module docstring); the function's other statements are unchanged."""
    body, _ = _fuse(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


def fusions(func: ir.PrimFunc) -> list[Verdict]:
    """What ``fuse_elementwise`` does to each pair of neighbouring nests of ``func``'s statement lists."""
    _, verdicts = _fuse(func.body)
    return verdicts


def _fuse(body: ir.Stmt) -> tuple[ir.Stmt, list[Verdict]]:
    verdicts: list[Verdict] = []

    class _Lists(IRMutator):
        def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
            stmts = [self.mutate(x) for x in s.stmts]
            out: list[ir.Stmt] = []
            for k, stmt in enumerate(stmts):
                heavy = _last_heavy(out)
                if heavy is None:
                    out.append(stmt)
                    continue
                at, producer = heavy
                fused, why = _try(producer, out[at + 1:], stmt)
                verdicts.append(Verdict(k, fused is not None, why))
                if fused is None:
                    out.append(stmt)
                else:
                    out[at] = fused
            if len(out) == len(s.stmts) and all(a is b for a, b in zip(out, s.stmts, strict=True)):
                return s
            return ir.seq(*out)

    return _Lists().mutate(body), verdicts


def _last_heavy(stmts: list[ir.Stmt]) -> tuple[int, ir.Stmt] | None:
    """The last statement of ``stmts`` that holds a reduction (a store that reads its own buffer inside a
    loop its indices do not use), with its position."""
    for at in range(len(stmts) - 1, -1, -1):
        if any(unused and any(ld.buffer is st.buffer for ld in loads_in(st.value))
               for st, unused in _stores(stmts[at])):
            return at, stmts[at]
    return None


def _stores(s: ir.Stmt) -> list[tuple[ir.Store, list[ir.For]]]:
    """Every store of ``s`` in program order, with the loops around it that its indices do not use."""
    found: list[tuple[ir.Store, list[ir.For]]] = []

    def walk(x: ir.Stmt, loops: list[ir.For]) -> None:
        if isinstance(x, ir.For):
            walk(x.body, [*loops, x])
        elif isinstance(x, ir.Seq):
            for y in x.stmts:
                walk(y, loops)
        elif isinstance(x, ir.Attr | ir.Allocate | ir.Let):
            walk(x.body, loops)
        elif isinstance(x, ir.IfThenElse):
            walk(x.then_case, loops)
            if x.else_case is not None:
                walk(x.else_case, loops)
        elif isinstance(x, ir.Store):
            used = set().union(*(free_vars(i) for i in x.indices))
            found.append((x, [lp for lp in loops if lp.var not in used]))

    walk(s, [])
    return found


def _elementwise(s: ir.Stmt) -> tuple[ir.Store, list[ir.For]] | None:
    """``s`` as a perfect nest of loops around one store whose indices are its loop variables, one each."""
    loops = []
    while isinstance(s, ir.For):
        loops.append(s)
        s = s.body
    if not loops or not isinstance(s, ir.Store):
        return None
    if [i for i in s.indices if not isinstance(i, ir.Var)] or \
            sorted(id(i) for i in s.indices) != sorted(id(lp.var) for lp in loops):
        return None
    return s, loops


def _try(producer: ir.Stmt, between: list[ir.Stmt], consumer: ir.Stmt) -> tuple[ir.Stmt | None, str]:
    ew = _elementwise(consumer)
    if ew is None:
        return None, "not a reduction followed by an element-wise nest"
    ew_store, _ = ew
    buffer = ew_store.buffer
    writes = [(st, unused) for st, unused in _stores(producer) if st.buffer is buffer]
    if not writes:
        return None, f"the element-wise nest writes {buffer.name}, which the reduction does not"
    for s in between:
        if buffer in buffers_of(s):
            return None, f"a statement between them touches {buffer.name}"
    try:
        ew_nest = polyhedral(consumer, registers=())
        w_hy, w_ew = _write_set(polyhedral(producer, registers=()), buffer), _write_set(ew_nest, buffer)
        i_ew = ew_nest.iterations()
    except NotAnalysable as exc:
        return None, f"not analysable: {exc}"
    if not w_hy.is_equal(w_ew):
        return None, f"the write sets differ (W_hy = {w_hy}, W_ew = {w_ew})"
    if i_ew.count_val() != w_ew.count_val():
        return None, "the element-wise nest writes some element more than once (|I_ew| != |W_ew|)"
    # the producer's last store to the buffer writes each element last: in the last iteration of the loops
    # around it that its indices do not use (the reduction's), or once (a copy out of an accumulator)
    store, unused = writes[-1]
    if _in_instruction(producer, store):
        return None, f"the reduction's last store to {buffer.name} is an instruction's (tensorized: its " \
                     f"sums kept in {buffer.name} itself, not copied out of an accumulator)"
    unused = [lp for lp in unused if not _once(lp)]   # a loop of one iteration is at its last
    statement = substitute(ew_store, dict(zip(ew_store.indices, store.indices, strict=True)))
    if unused:
        cond = ir.GE(unused[0].var, _last(unused[0]))
        for lp in unused[1:]:
            cond = ir.And(cond, ir.GE(lp.var, _last(lp)))
        statement = ir.IfThenElse(cond, statement)
    return _after(producer, store, statement), "fused"


def _in_instruction(s: ir.Stmt, store: ir.Store) -> bool:
    """Whether ``store`` lies in a region of ``s`` that an instruction replaces (``compiler.passes.
    tensorize``'s marks): nothing can be placed after it there."""

    def walk(x: ir.Stmt, marked: bool) -> bool:
        if x is store:
            return marked
        if isinstance(x, ir.Attr):
            return walk(x.body, marked or x.key in MARKS)
        if isinstance(x, ir.Seq):
            return any(walk(y, marked) for y in x.stmts)
        if isinstance(x, ir.IfThenElse):
            return walk(x.then_case, marked) or (x.else_case is not None and walk(x.else_case, marked))
        if isinstance(x, ir.For | ir.Allocate | ir.Let):
            return walk(x.body, marked)
        return False

    return walk(s, False)


def _once(loop: ir.For) -> bool:
    return isinstance(loop.extent, ir.IntImm) and loop.extent.value == 1


def _last(loop: ir.For) -> ir.Expr:
    """The last value of ``loop``'s variable."""
    if isinstance(loop.min, ir.IntImm) and isinstance(loop.extent, ir.IntImm):
        return ir.const(loop.min.value + loop.extent.value - 1, loop.var.dtype)
    return loop.min + loop.extent - 1


def _after(s: ir.Stmt, store: ir.Store, extra: ir.Stmt) -> ir.Stmt:
    """``s`` with ``extra`` right after ``store``."""

    class _Insert(IRMutator):
        def mutate_Store(self, x: ir.Store) -> ir.Stmt:
            return ir.seq(x, extra) if x is store else x

    return _Insert().mutate(s)


def _write_set(nest: Nest, buffer: ir.Buffer) -> isl.Set:
    """The elements of ``buffer`` that the statements of ``nest`` write."""
    found = None
    for a in nest.accesses:
        if a.write and a.buffer is buffer:
            elements = nest.access_map(a).range()
            found = elements if found is None else found.union(elements)
    return found.coalesce()
