"""The inplace pass (compiler/passes/inplace.py): which element-wise stages fold into the buffer they read.
Each case is interpreted before and after the pass on random inputs."""

from __future__ import annotations

from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.passes.inplace import inplace
from compiler.testing import assert_same_results

F32 = dtypes.float32
i, t = ir.Var("i"), ir.Var("t")


def _copy(dst: ir.Buffer, src: ir.Buffer, n: int) -> ir.Stmt:
    return ir.For(i, ir.const(0), ir.const(n), ir.Store(dst, (i,), src[i]))


def _allocated(func: ir.PrimFunc) -> list[str]:
    found: list[str] = []

    def walk(s: ir.Stmt) -> None:
        if isinstance(s, ir.Allocate):
            found.append(s.buffer.name)
            walk(s.body)
        elif isinstance(s, ir.For | ir.Attr):
            walk(s.body)
        elif isinstance(s, ir.Seq):
            for x in s.stmts:
                walk(x)

    walk(func.body)
    return found


def test_a_guarded_stage_folds_into_the_tile_it_reads() -> None:
    """``r[i] = max(a[i], 0)`` under a guard (a tile's rows past the layer's skipped) still reads ``a``
    only at its own index: ``r`` becomes ``a``, the guard kept."""
    x, y = ir.Buffer("x", (8,), F32), ir.Buffer("y", (8,), F32)
    a, r = ir.Buffer("a", (8,), F32, scope="nmem"), ir.Buffer("r", (8,), F32, scope="nmem")
    relu = ir.For(i, ir.const(0), ir.const(8),
                  ir.IfThenElse(ir.LT(i, ir.const(6)), ir.Store(r, (i,), ir.max_(a[i], ir.const(0.0, F32)))))
    body = ir.Allocate(a, ir.Allocate(r, ir.seq(_copy(a, x, 8), relu, _copy(y, r, 6))))
    func = ir.PrimFunc("guarded", (x, y), body)
    after = inplace(func)
    assert _allocated(after) == ["a"]
    assert_same_results(func, after, "inplace", jit=False)


def test_a_buffer_that_lives_across_a_loop_is_not_folded_into_a_stage_inside_it() -> None:
    """``s[i] = x[t, i] - m[i]`` inside a loop over ``t`` reads ``m``, allocated outside the loop, at its
    own index, and nothing after it in the iteration reads ``m``; but the next iteration does: ``s`` keeps
    its own buffer (a softmax's shift by the rows' max)."""
    x, y = ir.Buffer("x", (3, 4), F32), ir.Buffer("y", (3, 4), F32)
    m, s = ir.Buffer("m", (4,), F32, scope="nmem"), ir.Buffer("s", (4,), F32, scope="nmem")
    fill = ir.For(i, ir.const(0), ir.const(4), ir.Store(m, (i,), x[0, i]))
    shift = ir.For(i, ir.const(0), ir.const(4), ir.Store(s, (i,), x[t, i] - m[i]))
    out = ir.For(i, ir.const(0), ir.const(4), ir.Store(y, (t, i), s[i]))
    rows = ir.For(t, ir.const(0), ir.const(3), ir.Allocate(s, ir.seq(shift, out)))
    body = ir.Allocate(m, ir.seq(fill, rows))
    func = ir.PrimFunc("across", (x, y), body)
    after = inplace(func)
    assert _allocated(after) == ["m", "s"]
    assert_same_results(func, after, "inplace", jit=False)
