"""Tests of the verifier (``compiler.verify``) and of its use between passes (``compiler.pipeline``)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from compiler import pipeline, te
from compiler.errors import VerifyError
from compiler.ir import (
    Allocate,
    Buffer,
    FloatImm,
    For,
    ForKind,
    IntImm,
    Let,
    PrimFunc,
    Reduce,
    ReduceCombiner,
    Stmt,
    Store,
    Var,
    const,
    dtypes,
    seq,
)
from compiler.lower import lower
from compiler.passes import flatten, simplify
from compiler.pipeline import Pass, compile_func
from compiler.schedule import create_schedule
from compiler.verify import verify

X = Buffer("X", (8,), dtypes.int32)


def loop(var: Var, extent: int, body: Stmt) -> For:
    return For(var, const(0), const(extent), body)


def func(body: Stmt, *params: Buffer) -> PrimFunc:
    return PrimFunc("f", params or (X,), body)


def errors_of(f: PrimFunc, stage: str = "loop-ir") -> list[str]:
    """The listed violations of a VerifyError (one per '  - ' line)."""
    with pytest.raises(VerifyError) as info:
        verify(f, stage)
    return re.findall(r"^  - (.*)$", str(info.value), flags=re.M)


def seed_001() -> PrimFunc:
    a, b = te.placeholder((14, 14), name="A"), te.placeholder((14, 14), name="B")
    c = te.compute((14, 14), lambda i, j: a[i, j] + b[i, j], name="C")
    s = create_schedule(c)
    xo, _ = s[c].split(c.op.axis[0], nparts=4)
    s[c].bind(xo, te.thread_axis("core", name="tid"))
    return lower(s, [a, b, c], name="add")


# --------------------------------------------------------------------------------------------------
# each violation


def test_unbound_variable() -> None:
    i = Var("i")
    assert errors_of(func(Store(X, (i,), i))) == [
        "variable 'i' is used outside any loop or let that binds it",
        "variable 'i' is used outside any loop or let that binds it",
    ]


def test_variable_used_after_its_loop() -> None:
    i = Var("i")
    assert errors_of(func(seq(loop(i, 8, Store(X, (i,), i)), Store(X, (const(0),), i)))) == [
        "variable 'i' is used outside any loop or let that binds it"
    ]


def test_buffer_neither_parameter_nor_allocated() -> None:
    t = Buffer("T", (8,), dtypes.int32)
    i = Var("i")
    body = seq(Allocate(t, loop(i, 8, Store(t, (i,), i))), loop(i, 8, Store(X, (i,), t[i])))
    assert errors_of(func(body)) == ["load of buffer T, which is neither a parameter nor allocated here"]
    assert errors_of(func(Store(t, (const(0),), const(1)))) == [
        "store of buffer T, which is neither a parameter nor allocated here"
    ]


def test_surviving_reduce() -> None:
    k = Var("k")
    red = Reduce(ReduceCombiner.SUM, X[k], (k,), ((0, 8),))
    assert errors_of(func(Store(X, (const(0),), red))) == [
        "reduction 'sum(X[k], axis=[k in range(8)])' survived lowering"
    ]


def test_double_allocation_and_allocating_a_parameter() -> None:
    t = Buffer("T", (8,), dtypes.int32)
    assert errors_of(func(Allocate(t, Allocate(t, Store(t, (const(0),), const(1)))))) == [
        "buffer T is allocated twice (or shadows a parameter)"
    ]
    assert errors_of(func(Allocate(X, Store(X, (const(0),), const(1))))) == [
        "buffer X is allocated twice (or shadows a parameter)"
    ]


def test_sibling_allocations_of_one_buffer_are_fine() -> None:
    t = Buffer("T", (8,), dtypes.int32)
    fill = Store(t, (const(0),), const(1))
    verify(func(seq(Allocate(t, fill), Allocate(t, fill))))


def test_shadowed_loop_variable() -> None:
    i = Var("i")
    assert errors_of(func(loop(i, 2, loop(i, 4, Store(X, (i,), i))))) == [
        "loop i: variable 'i' is bound again inside its own scope"
    ]
    assert errors_of(func(loop(i, 2, Let(i, const(1), Store(X, (i,), i))))) == [
        "let i: variable 'i' is bound again inside its own scope"
    ]


def test_sibling_loops_may_reuse_a_variable() -> None:
    i = Var("i")
    verify(func(seq(loop(i, 8, Store(X, (i,), i)), loop(i, 8, Store(X, (i,), i)))))


def test_constant_index_out_of_range() -> None:
    a = Buffer("A", (4, 4), dtypes.int32)
    body = seq(Store(a, (const(4), const(0)), a[const(0), IntImm(-1)]))
    assert errors_of(func(body, a)) == [
        "store A: constant index 4 of dimension 0 is outside [0, 4)",
        "load A: constant index -1 of dimension 1 is outside [0, 4)",
    ]


def test_non_integer_or_negative_loop_bounds() -> None:
    i = Var("i")
    body = seq(
        For(i, FloatImm(0.0), const(4), Store(X, (i,), i)),
        For(i, const(0), const(-1), Store(X, (i,), i)),
    )
    assert errors_of(func(body)) == ["loop i: min 'f32(0.0)' is not an integer", "loop i: negative extent -1"]


def test_non_flat_buffers_at_stage_flat() -> None:
    a = Buffer("A", (4, 4), dtypes.int32)
    t = Buffer("T", (2, 2), dtypes.int32, scope="local")
    body = Allocate(t, Store(t, (const(0), const(0)), a[const(0), const(0)]))
    verify(func(body, a), "loop-ir")  # fine before flattening
    assert errors_of(func(body, a), "flat") == [
        "parameter A[4, 4] is not flattened to one dimension",
        "allocation T[2, 2] is not flattened to one dimension",
    ]


def test_every_violation_is_listed_in_one_error() -> None:
    i, k = Var("i"), Var("k")
    t = Buffer("T", (8,), dtypes.int32)
    a = Buffer("A", (2, 2), dtypes.int32)
    body = seq(
        Store(X, (i,), const(0)),  # unbound
        Store(t, (const(0),), const(0)),  # not allocated
        Store(X, (const(9),), Reduce(ReduceCombiner.MAX, X[k], (k,), ((0, 8),))),  # index, reduce
        loop(k, 2, loop(k, 2, Store(a, (k, k), k))),  # shadowed
        Allocate(X, Store(X, (const(0),), const(0))),  # allocates a parameter
    )
    with pytest.raises(VerifyError) as info:
        verify(PrimFunc("bad", (X, a), body), "flat")
    message = str(info.value)
    assert message.startswith("bad breaks the flat invariants:\n")
    listed = re.findall(r"^  - (.*)$", message, flags=re.M)
    assert listed == [
        "parameter A[2, 2] is not flattened to one dimension",
        "variable 'i' is used outside any loop or let that binds it",
        "store of buffer T, which is neither a parameter nor allocated here",
        "store X: constant index 9 of dimension 0 is outside [0, 8)",
        "reduction 'max(X[k], axis=[k in range(8)])' survived lowering",
        "loop k: variable 'k' is bound again inside its own scope",
        "buffer X is allocated twice (or shadows a parameter)",
    ]


# --------------------------------------------------------------------------------------------------
# valid programs, arguments


def test_a_lowered_function_passes_and_so_does_its_flattened_form() -> None:
    f = seed_001()
    verify(f, "loop-ir")
    verify(flatten(simplify(f)), "flat")


def test_unknown_stage_and_non_function() -> None:
    with pytest.raises(
        VerifyError, match=r"verify: unknown stage 'isa'; expected one of \('loop-ir', 'flat'\)"
    ):
        verify(seed_001(), "isa")
    with pytest.raises(VerifyError, match="verify: expected a PrimFunc, but got Store"):
        verify(Store(X, (const(0),), const(0)))


# --------------------------------------------------------------------------------------------------
# the pipeline verifies after every pass


def _unbind_first_loop(f: PrimFunc) -> PrimFunc:
    """A broken pass: drops the outermost loop, leaving its variable unbound."""
    assert isinstance(f.body, For)
    return dataclasses.replace(f, body=f.body.body)


def test_compile_func_names_the_pass_after_which_verification_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = (
        Pass("simplify", simplify, "loop-ir"),
        Pass("unbind_loop", _unbind_first_loop, "loop-ir"),
        Pass("flatten", flatten, "flat"),
    )
    monkeypatch.setitem(pipeline.PIPELINES, "reference", broken)
    dumped: list[str] = []
    with pytest.raises(
        VerifyError, match=r"^add after pass 'unbind_loop' breaks the loop-ir invariants:\n"
    ) as info:
        compile_func(seed_001(), dump=lambda name, _f: dumped.append(name))
    assert "variable 'tid' is used outside any loop or let that binds it" in str(info.value)
    assert dumped == ["lower", "simplify"]  # the broken program is not dumped, flatten never runs


def test_compile_func_checks_its_input_as_the_output_of_lower() -> None:
    i = Var("i")
    with pytest.raises(VerifyError, match=r"^f after pass 'lower' breaks the loop-ir invariants"):
        compile_func(func(Store(X, (i,), i)))


def test_a_pass_that_does_not_flatten_fails_the_flat_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pipeline.PIPELINES, "reference", (Pass("flatten", simplify, "flat"),))
    with pytest.raises(
        VerifyError, match=r"after pass 'flatten' breaks the flat invariants:\n  - parameter A\[14, 14\]"
    ):
        compile_func(seed_001())


def test_verification_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        pipeline.PIPELINES, "reference", (Pass("unbind_loop", _unbind_first_loop, "loop-ir"),)
    )
    out = compile_func(seed_001(), verify_each=False)
    assert not isinstance(out.body, For) or out.body.kind is not ForKind.THREAD_BINDING
    monkeypatch.setenv("TANDEM_VERIFY", "0")
    compile_func(seed_001())
    monkeypatch.setenv("TANDEM_VERIFY", "1")
    with pytest.raises(VerifyError):
        compile_func(seed_001())
