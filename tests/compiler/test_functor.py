"""Tests of IR traversal (``compiler.ir.functor``): visitor, mutator, substitute, free_vars, buffers_of."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import isa
from compiler.ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Allocate,
    And,
    Attr,
    Buffer,
    Call,
    Cast,
    DepToken,
    Div,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    InsnField,
    IntImm,
    IRMutator,
    IRVisitor,
    Let,
    Max,
    Min,
    Node,
    Not,
    Or,
    PrimFunc,
    Reduce,
    ReduceCombiner,
    Region,
    Select,
    Seq,
    Store,
    TensorInsn,
    Var,
    buffers_of,
    const,
    dae_tokens,
    dtypes,
    free_vars,
    intrinsics,
    nodes,
    post_order_visit,
    seq,
    substitute,
)

i, j, k, n = Var("i"), Var("j"), Var("k"), Var("n")
f = Var("f", dtypes.float32)
p = Var("p", dtypes.bool_)
A = Buffer("A", (8,), dtypes.int32)
F = Buffer("F", (8,), dtypes.float32)
T = Buffer("T", (2,), dtypes.int32, scope="local")


def every_node_kind() -> PrimFunc:
    """A (not necessarily meaningful) function that contains one node of every kind."""
    x = Var("x", dtypes.float32)
    ints = Min(Max(i + 1 - j, i * 2), (i // 2) % 3)
    bools = And(Or(EQ(i, j), NE(i, j)), Not(And(LT(i, j), Or(LE(i, j), And(GT(i, j), GE(i, j))))))
    floats = Div(Cast(A[i], dtypes.float32), FloatImm(2.0))
    body = Allocate(
        T,
        Attr(
            "pragma",
            "x",
            For(
                i,
                const(0),
                const(4),
                seq(
                    Let(j, ints, IfThenElse(bools, Store(T, (const(0),), Select(p, i, j)), Evaluate(i))),
                    Let(x, floats, Store(F, (i,), x)),
                    Evaluate(Call("if_then_else", (p, i, j), dtypes.int32)),
                    Evaluate(Reduce(ReduceCombiner.SUM, A[k], (k,), ((0, 8),))),
                    TensorInsn(isa.load_isa("diannao"), "relu", (InsnField("n", i),), (Region("dst", T, i),)),
                    DepToken("push", "load", "compute", "ready", (i,)),
                ),
            ),
        ),
    )
    return PrimFunc("every", (A, F), body)


def node_classes() -> set[type]:
    """Every concrete node class of the modules that define them: ir.nodes, intrinsics and dae_tokens."""
    return {
        cls
        for module in (nodes, intrinsics, dae_tokens)
        for cls in vars(module).values()
        if inspect.isclass(cls) and issubclass(cls, Node) and dataclasses.is_dataclass(cls)
    }


# --------------------------------------------------------------------------------------------------
# visitor


def test_the_fixture_holds_every_node_kind() -> None:
    seen: set[type] = set()
    post_order_visit(every_node_kind(), lambda x: seen.add(type(x)))
    assert seen == node_classes()


def test_visitor_visits_every_node_and_every_buffer_reference() -> None:
    func = every_node_kind()
    names: list[str] = []
    buffers: list[str] = []

    class Record(IRVisitor):
        def visit(self, node) -> None:
            names.append(type(node).__name__)
            super().visit(node)

        def visit_buffer(self, buffer: Buffer) -> None:
            buffers.append(buffer.name)

    Record().visit(func)
    assert set(names) == {cls.__name__ for cls in node_classes()}
    seen: list[str] = []
    post_order_visit(func, lambda x: seen.append(type(x).__name__))
    assert sorted(names) == sorted(seen)  # both walks see the same nodes, as many times
    # params, Allocate, the Store to T, the Load of A in a Let value, the Store to F, the Load in Reduce,
    # the TensorInsn's region on T
    assert buffers == ["A", "F", "T", "T", "A", "F", "A", "T"]


def test_visit_methods_replace_the_generic_walk() -> None:
    found: list[Var] = []

    class NoLoopBodies(IRVisitor):
        def visit_For(self, s: For) -> None:
            self.visit(s.extent)  # skips the body

        def visit_Var(self, v: Var) -> None:
            found.append(v)

    NoLoopBodies().visit(seq(For(i, const(0), n, Store(A, (i,), j)), Store(A, (k,), k)))
    assert found == [n, k, k]


def test_post_order_visit_goes_children_first() -> None:
    order: list[str] = []
    post_order_visit(Store(A, (i,), i + 1), lambda x: order.append(str(x)))
    assert order == ["i", "i", "1", "i + 1", "A[i] = i + 1"]


def test_visitor_and_mutator_reject_non_nodes() -> None:
    with pytest.raises(NotImplementedError, match="IRVisitor: no case for int"):
        IRVisitor().visit(3)
    with pytest.raises(NotImplementedError, match="IRMutator: no case for str"):
        IRMutator().mutate("x")


# --------------------------------------------------------------------------------------------------
# mutator


def test_mutator_returns_the_same_object_when_nothing_changes() -> None:
    func = every_node_kind()
    assert IRMutator().mutate(func) is func

    class Same(IRMutator):
        def mutate_IntImm(self, e: IntImm) -> IntImm:
            return IntImm(e.value, e.type)  # equal, but a new object: counts as a change

    assert Same().mutate(func) is not func
    assert Same().mutate(func) == func


def test_mutator_shares_unchanged_subtrees() -> None:
    left = For(i, const(0), const(8), Store(A, (i,), i * 2))
    right = For(j, const(0), const(8), Store(F, (j,), FloatImm(1.0)))
    tree = seq(left, right)

    class Bump(IRMutator):
        def mutate_FloatImm(self, e: FloatImm) -> FloatImm:
            return FloatImm(e.value + 1, e.type)

    out = Bump().mutate(tree)
    assert out is not tree
    assert out.stmts[0] is left  # untouched sibling: the very same object
    assert out.stmts[1].min is right.min and out.stmts[1].var is j
    assert out.stmts[1].body.value == FloatImm(2.0)


def test_mutator_rebuilds_seq_flattened() -> None:
    class Split(IRMutator):
        def mutate_Evaluate(self, s: Evaluate) -> Seq:
            return Seq((s, s))

    e = Evaluate(i)
    assert Split().mutate(seq(e, Store(A, (i,), i))) == Seq((e, e, Store(A, (i,), i)))


def test_mutate_buffer_remaps_every_reference() -> None:
    B = Buffer("B", (8,), dtypes.int32)
    func = PrimFunc("g", (A,), Allocate(T, Store(A, (i,), A[i] + T[const(0)])))

    class Rename(IRMutator):
        def mutate_buffer(self, b: Buffer) -> Buffer:
            return B if b is A else b

    out = Rename().mutate(func)
    assert out.params == (B,)
    assert buffers_of(out) == [B, T]


def test_a_renaming_mutator_renames_binding_sites_too() -> None:
    fresh = Var("i2")

    class Rename(IRMutator):
        def mutate_Var(self, v: Var) -> Var:
            return fresh if v is i else v

    out = Rename().mutate(For(i, const(0), const(4), Store(A, (i,), i)))
    assert out.var is fresh and out.body.value is fresh


def test_a_binding_site_is_never_replaced_by_a_non_variable() -> None:
    class ToConst(IRMutator):
        def mutate_Var(self, v: Var):
            return const(0)

    out = ToConst().mutate(Let(i, j, Store(A, (i,), i)))
    assert out.var is i and out.value == const(0) and out.body == Store(A, (const(0),), const(0))


# --------------------------------------------------------------------------------------------------
# substitute and free_vars


def test_substitute_replaces_free_occurrences() -> None:
    s = Store(A, (i,), i + j)
    assert substitute(s, {i: k * 2, j: const(1)}) == Store(A, (k * 2,), k * 2 + 1)
    assert substitute(s, {}) is s
    assert substitute(s, {n: const(3)}) is s  # nothing mapped occurs: the same object


def test_substitute_does_not_touch_binding_sites() -> None:
    loop = For(i, const(0), n, Store(A, (i,), i + j))
    out = substitute(loop, {i: const(5), j: k, n: const(8)})
    assert out.var is i  # the loop still binds i
    assert out.extent == const(8)  # free n replaced
    assert out.body == Store(A, (i,), i + k)  # bound i untouched, free j replaced
    let = Let(i, i + 1, Store(A, (i,), i))  # the value is evaluated outside the binding
    assert substitute(let, {i: k}) == Let(i, k + 1, Store(A, (i,), i))
    red = Reduce(ReduceCombiner.SUM, A[i + j], (i,), ((0, 4),))
    assert substitute(red, {i: const(1), j: const(2)}) == Reduce(
        ReduceCombiner.SUM, A[i + 2], (i,), ((0, 4),)
    )


def test_substitute_renames_consistently_with_a_variable() -> None:
    s = seq(Store(A, (i,), i), For(j, const(0), const(2), Store(A, (j,), i)))
    assert substitute(s, {i: k}) == seq(Store(A, (k,), k), For(j, const(0), const(2), Store(A, (j,), k)))


def test_free_vars_are_used_but_not_bound_inside() -> None:
    s = For(i, const(0), n, Let(k, i + j, Store(A, (k,), Reduce(ReduceCombiner.SUM, A[i], (i,), ((0, 8),)))))
    assert free_vars(s) == {n, j}
    assert free_vars(Store(A, (i,), j)) == {i, j}
    assert free_vars(every_node_kind()) == {p, j}  # j is used in the Let value and after its scope
    assert free_vars(const(1)) == set()


def test_buffers_of_lists_each_buffer_once_in_order_of_first_appearance() -> None:
    s = seq(Store(F, (i,), Cast(A[i], dtypes.float32)), Allocate(T, Store(A, (i,), T[i // 4])))
    assert buffers_of(s) == [F, A, T]


def test_free_vars_respects_scopes():
    """A variable used before the loop that rebinds it is free; inside that loop it is not."""
    from compiler.ir import Buffer, For, Store, Var, const, dtypes, free_vars, seq

    i, n = Var("i"), Var("n")
    x = Buffer("X", (8,), dtypes.int32)
    before = Store(x, (i,), i)
    loop = For(i, const(0), n, Store(x, (i,), i))
    assert free_vars(seq(before, loop)) == {i, n}
    assert free_vars(loop) == {n}
