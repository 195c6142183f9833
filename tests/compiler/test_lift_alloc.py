"""The lift_alloc pass (compiler/passes/lift_alloc.py): an allocation in a statement list moves to the start
of the list, unless it would then share its scope's buffer with another. Each case is interpreted before
and after the pass on random inputs, and the lifted form is read from its printout."""

from __future__ import annotations

from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.passes.lift_alloc import lift_alloc
from compiler.testing import assert_same_results

I32 = dtypes.int32
i, t = ir.Var("i"), ir.Var("t")


def _copy(dst: ir.Buffer, src: ir.Buffer, n: int, src_at=lambda i: (i,), dst_at=lambda i: (i,)) -> ir.Stmt:
    return ir.For(i, ir.const(0), ir.const(n), ir.Store(dst, dst_at(i), src[src_at(i)]))


def _tile_body(x, y, acc, inp) -> tuple[ir.Buffer, ir.Stmt]:
    """A loop body like a VITA tile's: ``alloc(acc) { alloc(inp) { load; compute }; store }``."""
    load = _copy(inp, x, 4, src_at=lambda i: (t, i))
    compute = ir.For(i, ir.const(0), ir.const(4), ir.Store(acc, (i,), inp[i] + ir.const(1, I32)))
    store = _copy(y, acc, 4, dst_at=lambda i: (t, i))
    return ir.Allocate(acc, ir.seq(ir.Allocate(inp, ir.seq(load, compute)), store))


def test_an_inner_allocation_covers_its_whole_statement_list() -> None:
    """The load and the compute join the store's list: one list per loop body, as inject_sync needs."""
    x, y = ir.Buffer("x", (3, 4), I32), ir.Buffer("y", (3, 4), I32)
    acc, inp = ir.Buffer("acc", (4,), I32, scope="acc"), ir.Buffer("inp", (4,), I32, scope="inp")
    func = ir.PrimFunc("tiles", (x, y), ir.For(t, ir.const(0), ir.const(3), _tile_body(x, y, acc, inp)))
    after = lift_alloc(func)
    assert str(after).splitlines()[1:4] == [
        "  for t in range(3):",
        '    with alloc(acc, i32[4], "acc"):',
        '      with alloc(inp, i32[4], "inp"):',
    ]
    inner = after.body.body.body.body
    assert isinstance(inner, ir.Seq) and len(inner.stmts) == 3   # load, compute, store side by side
    assert_same_results(func, after, "lift_alloc", jit=False)


def test_two_allocations_of_one_scope_keep_taking_turns() -> None:
    """Two "acc" buffers used one after the other stay where they are: lifted, both would be live at
    once and need twice the accumulator space."""
    x, y = ir.Buffer("x", (4,), I32), ir.Buffer("y", (2, 4), I32)
    a, b = ir.Buffer("a", (4,), I32, scope="acc"), ir.Buffer("b", (4,), I32, scope="acc")
    first = ir.Allocate(a, ir.seq(_copy(a, x, 4), _copy(y, a, 4, dst_at=lambda i: (ir.const(0), i))))
    second = ir.Allocate(b, ir.seq(_copy(b, x, 4), _copy(y, b, 4, dst_at=lambda i: (ir.const(1), i))))
    func = ir.PrimFunc("turns", (x, y), ir.seq(first, second))
    after = lift_alloc(func)
    assert after is func
    assert_same_results(func, after, "lift_alloc", jit=False)
