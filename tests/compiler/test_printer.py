"""Tests of the IR printer (``compiler.ir.printer``): every node kind, precedence, names, stability."""

from __future__ import annotations

import pytest

from compiler.ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    Allocate,
    And,
    Attr,
    Buffer,
    Call,
    Cast,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Let,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimFunc,
    Reduce,
    ReduceCombiner,
    Select,
    Store,
    Sub,
    Var,
    const,
    dtypes,
    format_node,
    if_then_else,
    seq,
)

a, b, c = Var("a"), Var("b"), Var("c")
p, q, r = (Var(x, dtypes.bool_) for x in "pqr")
A = Buffer("A", (4, 4), dtypes.float32)
X = Buffer("X", (16,), dtypes.int32)


def loop(var: Var, extent: int, body, kind=ForKind.SERIAL, thread: str = "") -> For:
    return For(var, const(0), const(extent), body, kind, thread)


# --------------------------------------------------------------------------------------------------
# expressions


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (Add(a, b), "a + b"),
        (Sub(a, b), "a - b"),
        (Mul(a, b), "a*b"),
        (FloorDiv(a, b), "a//b"),
        (FloorMod(a, b), "a%b"),
        (Div(Var("x", dtypes.float32), FloatImm(2.0)), "x/f32(2.0)"),
        (Min(a, b), "min(a, b)"),
        (Max(a, b), "max(a, b)"),
        (EQ(a, b), "a == b"),
        (NE(a, b), "a != b"),
        (LT(a, b), "a < b"),
        (LE(a, b), "a <= b"),
        (GT(a, b), "a > b"),
        (GE(a, b), "a >= b"),
        (And(p, q), "p and q"),
        (Or(p, q), "p or q"),
        (Not(p), "not p"),
        (Select(p, a, b), "select(p, a, b)"),
        (Cast(a, dtypes.int8), "i8(a)"),
        (Cast(a, dtypes.bfloat16), "bf16(a)"),
        (A[a, b], "A[a, b]"),
        (Call("if_then_else", (p, a, b), dtypes.int32), "if_then_else(p, a, b)"),
        (
            Reduce(ReduceCombiner.SUM, X[a], (a,), ((0, 16),)),
            "sum(X[a], axis=[a in range(16)])",
        ),
        (
            Reduce(ReduceCombiner.MAX, X[a + b], (a, b), ((2, 4), (0, 3))),
            "max(X[a + b], axis=[a in range(2, 6), b in range(3)])",
        ),
        (Reduce(ReduceCombiner.MIN, X[a], (a,), ((0, 16),)), "min(X[a], axis=[a in range(16)])"),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, str) else "",
)
def test_every_expression_kind_prints(expr, text: str) -> None:
    assert format_node(expr) == text
    assert str(expr) == text


@pytest.mark.parametrize(
    ("value", "dt", "text"),
    [
        (3, dtypes.int32, "3"),  # the index type prints bare
        (-3, dtypes.int32, "-3"),
        (-3, dtypes.int8, "i8(-3)"),
        (200, dtypes.uint8, "u8(200)"),
        (7, dtypes.int16, "i16(7)"),
        (7, dtypes.int64, "i64(7)"),
        (True, dtypes.bool_, "True"),
        (False, dtypes.bool_, "False"),
        (1.5, dtypes.float32, "f32(1.5)"),
        (0.1, dtypes.float16, "f16(0.1)"),
        (2.0, dtypes.bfloat16, "bf16(2.0)"),
        (float("-inf"), dtypes.float32, "f32(-inf)"),
    ],
)
def test_constants_of_each_dtype(value, dt, text: str) -> None:
    assert format_node(const(value, dt)) == text


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        # parentheses exactly where the tree differs from left-to-right precedence parsing
        (Mul(Add(a, b), c), "(a + b)*c"),
        (Add(Mul(a, b), c), "a*b + c"),
        (Sub(a, Add(b, c)), "a - (b + c)"),
        (Sub(Sub(a, b), c), "a - b - c"),
        (Sub(a, Sub(b, c)), "a - (b - c)"),
        (Mul(a, Mul(b, c)), "a*(b*c)"),
        (Mul(Mul(a, b), c), "a*b*c"),
        (FloorDiv(a, Mul(b, c)), "a//(b*c)"),
        (Mul(FloorDiv(a, b), c), "a//b*c"),
        (FloorMod(Add(a, b), c), "(a + b)%c"),
        (Add(a, IntImm(-3)), "a + (-3)"),
        (Mul(a, IntImm(-3)), "a*(-3)"),
        (Mul(IntImm(-3), a), "(-3)*a"),
        (Add(IntImm(-3), a), "-3 + a"),
        (LT(Add(a, b), c), "a + b < c"),
        (EQ(LT(a, b), p), "(a < b) == p"),  # not Python's chained comparison a < b == p
        (EQ(p, LT(a, b)), "p == (a < b)"),
        (And(Or(p, q), r), "(p or q) and r"),
        (Or(p, And(q, r)), "p or q and r"),
        (Or(p, Or(q, r)), "p or (q or r)"),
        (Not(And(p, q)), "not (p and q)"),
        (And(Not(p), q), "not p and q"),
        (Not(LT(a, b)), "not a < b"),
        (EQ(Not(p), q), "(not p) == q"),
        (And(LT(a, b), GE(a, c)), "a < b and a >= c"),
        (Mul(Min(a, b), Cast(Add(a, b), dtypes.int32)), "min(a, b)*i32(a + b)"),
        (X[a * 4 + b], "X[a*4 + b]"),
    ],
)
def test_precedence_parenthesizes_only_where_needed(expr, text: str) -> None:
    assert format_node(expr) == text


def test_printed_arithmetic_means_what_python_would_compute() -> None:
    """The printed text of integer arithmetic, evaluated as Python, gives the tree's value."""
    from compiler.interp import evaluate

    env = {a: 7, b: -3, c: 5}
    exprs = [
        Mul(Add(a, b), c),
        Sub(a, Add(b, c)),
        Sub(Sub(a, b), c),
        Mul(a, Mul(b, c)),
        FloorDiv(Sub(a, Mul(b, c)), Add(c, IntImm(1))),
        FloorMod(Sub(IntImm(-3), a), c),
        Sub(a, Mul(IntImm(-3), Sub(b, IntImm(-2)))),
    ]
    for e in exprs:
        text = format_node(e)
        assert eval(text, {}, {"a": 7, "b": -3, "c": 5}) == evaluate(e, env), text


# --------------------------------------------------------------------------------------------------
# statements and functions


def test_every_statement_kind_prints(golden) -> None:
    i, j, t, k = Var("i"), Var("j"), Var("t"), Var("k")
    AL = Buffer("AL", (16,), dtypes.float32, scope="nmem")
    T = Buffer("T", (4,), dtypes.int32)
    body = seq(
        Attr(
            "pragma_intrin",
            "TADD",
            loop(
                t,
                4,
                Allocate(
                    AL,
                    seq(
                        loop(i, 4, Store(AL, (i,), A[t, i]), kind=ForKind.UNROLLED),
                        IfThenElse(
                            t * 4 < 14,
                            Store(A, (t, const(0)), AL[const(0)]),
                            Store(A, (t, const(1)), FloatImm(0.0)),
                        ),
                    ),
                ),
                kind=ForKind.THREAD_BINDING,
                thread="core",
            ),
        ),
        Allocate(
            T,
            seq(
                loop(k, 4, Store(T, (k,), k), kind=ForKind.VECTORIZED),
                loop(j, 4, Store(T, (j,), T[j] * 2), kind=ForKind.PARALLEL),
                Let(
                    a,
                    T[const(1)] + 1,
                    For(b, a, const(3), IfThenElse(b >= 2, Evaluate(Call("noop", (b,), dtypes.int32)))),
                ),
                Attr("count", 3, Evaluate(const(0))),
            ),
        ),
        For(c, const(2), const(4), Store(X, (c,), c)),
    )
    func = PrimFunc("every_stmt", (A, X), body, attrs=(("target", "reference"),))
    text = format_node(func)
    golden.check(text)
    lines = text.splitlines()
    assert lines[0] == "@attr('target', 'reference')"
    assert lines[1] == "def every_stmt(A: f32[4, 4], X: i32[16]):"
    for fragment in [
        "  with attr('pragma_intrin', 'TADD'):",
        "    for t in bind(core, 4):",
        '      with alloc(AL, f32[16], "nmem"):',
        "        for i in unroll(4):",
        "        if t*4 < 14:",
        "        else:",
        "  with alloc(T, i32[4]):",
        "    for k in vectorize(4):",
        "    for j in parallel(4):",
        "    with let(a, T[1] + 1):",
        "      for b in range(a, a + 3):",
        "          noop(b)",
        "    with attr('count', 3):",
        "  for c in range(2, 6):",
    ]:
        assert fragment in lines, fragment


def test_attr_with_an_expression_value_and_symbolic_loop_bounds() -> None:
    x = Var("x")
    s = Attr("extent", a * 2, For(x, a, b + 1, Store(X, (x,), x)))
    assert format_node(s) == "with attr('extent', a*2):\n  for x in range(a, a + (b + 1)):\n    X[x] = x"


def test_two_distinct_variables_named_i_print_as_i_and_i_1() -> None:
    i1, i2 = Var("i"), Var("i")
    s = seq(loop(i1, 4, Store(X, (i1,), i1)), loop(i2, 4, Store(X, (i2 + 4,), i2)))
    assert format_node(s) == ("for i in range(4):\n  X[i] = i\nfor i_1 in range(4):\n  X[i_1 + 4] = i_1")
    assert format_node(Add(i2, i1)) == "i + i_1"  # numbered by first appearance in this printout


def test_disambiguation_never_collides_with_a_real_name() -> None:
    i, i_1, i_again = Var("i"), Var("i_1"), Var("i")
    assert format_node(Add(Add(i, i_1), i_again)) == "i + i_1 + i_2"
    nameless = Var("")
    assert format_node(Add(nameless, Var(""))) == "v + v_1"


def test_buffers_and_variables_share_one_namespace() -> None:
    buf = Buffer("a", (4,), dtypes.int32)
    assert format_node(buf[a]) == "a[a_1]"


def test_printing_is_stable() -> None:
    """Twice the same text; and two copies built from fresh variables print identically."""

    def build() -> PrimFunc:
        i, j = Var("i"), Var("i")
        buf = Buffer("B", (4, 4), dtypes.int8)
        body = loop(i, 4, loop(j, 4, Store(buf, (i, j), Cast(i + j, dtypes.int8))))
        return PrimFunc("f", (buf,), body)

    f = build()
    assert format_node(f) == format_node(f) == str(f)
    assert format_node(f) == format_node(build())
    assert "B[i, i_1] = i8(i + i_1)" in format_node(f)


def test_printer_rejects_non_nodes() -> None:
    with pytest.raises(NotImplementedError, match="printer: no case for int"):
        format_node(3)


def test_if_then_else_intrinsic_prints_as_a_call() -> None:
    assert format_node(if_then_else(a < 4, X[a], 0)) == "if_then_else(a < 4, X[a], 0)"


def test_an_empty_body_prints_as_pass() -> None:
    s = IfThenElse(a < 4, seq(), Store(X, (a,), a))
    assert format_node(s) == "if a < 4:\n  pass\nelse:\n  X[a] = a"
    assert format_node(PrimFunc("f", (X,), seq())) == "def f(X: i32[16]):\n  pass"
