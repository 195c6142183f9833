"""Property tests of compiler.arith against brute force over small variable ranges.

Random integer expression trees over three variables with small ranges are evaluated for every
assignment (a tiny evaluator below, Python ints with floor semantics) and checked against
``simplify`` (value preservation, idempotence), ``prove`` (soundness), ``bound`` (soundness) and
``relax`` (soundness, and exactness on affine expressions). A failure prints the expression, the
ranges and the assignment, so it reproduces as a unit test.
"""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.arith import Interval, bound, linear_form, prove, relax, simplify
from compiler.ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Call,
    Cast,
    Expr,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Not,
    Or,
    Select,
    Sub,
    Var,
    const,
    dtypes,
)

X, Y, Z = Var("x"), Var("y"), Var("z")
VARS = (X, Y, Z)
EXAMPLES = settings(max_examples=150, deadline=None)

# --------------------------------------------------------------------------------------------------
# A tiny evaluator for integer/bool IR expressions (mathematical integers, floor division).

_BINARY = {
    Add: lambda a, b: a + b,
    Sub: lambda a, b: a - b,
    Mul: lambda a, b: a * b,
    FloorDiv: lambda a, b: a // b,
    FloorMod: lambda a, b: a % b,
    Min: min,
    Max: max,
    EQ: lambda a, b: int(a == b),
    NE: lambda a, b: int(a != b),
    LT: lambda a, b: int(a < b),
    LE: lambda a, b: int(a <= b),
    GT: lambda a, b: int(a > b),
    GE: lambda a, b: int(a >= b),
    And: lambda a, b: int(bool(a) and bool(b)),
    Or: lambda a, b: int(bool(a) or bool(b)),
}


def evaluate(e: Expr, env: dict) -> int:
    t = type(e)
    if t is IntImm:
        return e.value
    if t is Var:
        return env[e]
    if t in _BINARY:
        return _BINARY[t](evaluate(e.a, env), evaluate(e.b, env))
    if t is Not:
        return int(not evaluate(e.a, env))
    if t is Select:
        return evaluate(e.true_value if evaluate(e.cond, env) else e.false_value, env)
    if t is Call and e.name == "if_then_else":
        cond, a, b = e.args
        return evaluate(a if evaluate(cond, env) else b, env)
    if t is Cast:
        return dtypes.wrap_int(evaluate(e.value, env), e.type)
    raise NotImplementedError(f"evaluate: no case for {t.__name__}")


def assignments(ranges: dict):
    vs = list(ranges)
    for values in itertools.product(*(range(ranges[v].lo, ranges[v].hi + 1) for v in vs)):
        yield dict(zip(vs, values, strict=True))


# --------------------------------------------------------------------------------------------------
# Strategies

ranges_st = st.fixed_dictionaries(
    {v: st.builds(Interval.from_extent, st.integers(-4, 4), st.integers(1, 5)) for v in VARS}
)
divisor_st = st.sampled_from([-3, -2, -1, 1, 2, 3, 4, 6, 8]).map(const)
_CMPS = (EQ, NE, LT, LE, GT, GE)


@st.composite
def affine_st(draw):
    """An affine expression in x, y, z written in a random nested shape."""
    e = const(draw(st.integers(-5, 5)))
    for v in draw(st.permutations(VARS)):
        coef = draw(st.integers(-3, 3))
        term = Mul(v, const(coef)) if draw(st.booleans()) else Mul(const(coef), v)
        e = Add(e, term) if draw(st.booleans()) else Sub(e, Mul(term, const(-1)))
    if draw(st.booleans()):
        e = Sub(Mul(Add(e, X), const(2)), Add(X, X))  # 2*(e + x) - 2x == 2e
    return e


leaf_st = st.one_of(st.sampled_from(VARS), st.integers(-6, 6).map(const), affine_st())


def _extend(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: Add(*p)),
        pair.map(lambda p: Sub(*p)),
        pair.map(lambda p: Mul(*p)),
        st.tuples(children, divisor_st).map(lambda p: FloorDiv(*p)),
        st.tuples(children, divisor_st).map(lambda p: FloorMod(*p)),
        pair.map(lambda p: Min(*p)),
        pair.map(lambda p: Max(*p)),
        st.tuples(st.sampled_from(_CMPS), children, children, children, children).map(
            lambda p: Select(p[0](p[1], p[2]), p[3], p[4])
        ),
    )


int_expr_st = st.recursive(leaf_st, _extend, max_leaves=10)


def _bool_extend(children):
    return st.one_of(
        st.tuples(children, children).map(lambda p: And(*p)),
        st.tuples(children, children).map(lambda p: Or(*p)),
        children.map(Not),
    )


compare_st = st.tuples(st.sampled_from(_CMPS), int_expr_st, int_expr_st).map(lambda p: p[0](*p[1:]))
cond_st = st.recursive(compare_st, _bool_extend, max_leaves=3)


# --------------------------------------------------------------------------------------------------
# Properties


@EXAMPLES
@given(int_expr_st, ranges_st)
def test_simplify_preserves_values(e, ranges):
    with_ranges, without = simplify(e, ranges), simplify(e)
    lf = linear_form(e)
    for env in assignments(ranges):
        want = evaluate(e, env)
        assert evaluate(with_ranges, env) == want, f"{e} -> {with_ranges} at {env} ({ranges})"
        assert evaluate(without, env) == want, f"{e} -> {without} at {env}"
        got = lf.const + sum(k * evaluate(a, env) for a, k in lf.terms.items())
        assert got == want, f"linear_form({e}) = {lf} at {env}"


@EXAMPLES
@given(st.one_of(int_expr_st, cond_st), ranges_st)
def test_simplify_is_idempotent(e, ranges):
    once = simplify(e, ranges)
    assert simplify(once, ranges) == once, f"{e} -> {once} -> {simplify(once, ranges)}"
    plain = simplify(e)
    assert simplify(plain) == plain, f"{e} -> {plain} -> {simplify(plain)}"


@EXAMPLES
@given(cond_st, ranges_st)
def test_prove_is_sound(cond, ranges):
    verdict = prove(cond, ranges)
    if verdict is None:
        return
    for env in assignments(ranges):
        assert bool(evaluate(cond, env)) is verdict, f"prove({cond}) = {verdict} fails at {env}"


@EXAMPLES
@given(int_expr_st, ranges_st)
def test_bound_is_sound(e, ranges):
    b = bound(e, ranges)
    for env in assignments(ranges):
        assert b.contains(evaluate(e, env)), f"bound({e}) = {b} misses the value at {env}"


@EXAMPLES
@given(int_expr_st, ranges_st, st.sets(st.sampled_from(VARS), min_size=1))
def test_relax_is_sound(e, ranges, relaxed_vars):
    relaxed = {v: r for v, r in ranges.items() if v in relaxed_vars}
    outer = {v: r for v, r in ranges.items() if v not in relaxed_vars}
    low, extent = relax(e, relaxed, outer)
    assert extent >= 1
    for env in assignments(ranges):
        v, lo = evaluate(e, env), evaluate(low, env)
        assert lo <= v <= lo + extent - 1, f"relax({e}) = ({low}, {extent}) misses {v} at {env}"


@EXAMPLES
@given(affine_st(), ranges_st, st.sets(st.sampled_from(VARS), min_size=1))
def test_relax_is_exact_on_affine(e, ranges, relaxed_vars):
    relaxed = {v: r for v, r in ranges.items() if v in relaxed_vars}
    outer = {v: r for v, r in ranges.items() if v not in relaxed_vars}
    low, extent = relax(e, relaxed, outer)
    lf = linear_form(e)
    assert extent == 1 + sum(
        abs(k) * (relaxed[a].hi - relaxed[a].lo) for a, k in lf.terms.items() if a in relaxed
    )
    for env in assignments(outer):
        values = [evaluate(e, env | inner) for inner in assignments(relaxed)]
        lo = evaluate(low, env)
        assert (min(values), max(values)) == (lo, lo + extent - 1), f"relax({e}) at {env}"


@st.composite
def fused_st(draw):
    """``(base, e)``: e rebuilds base from its mixed-radix digits, like an index of fused loops.

    With ``exact`` false the digit weights are perturbed, so e is no longer base.
    """
    base = draw(st.one_of(st.sampled_from(VARS), affine_st()))
    digits, cur, stride = [], base, 1
    for radix in draw(st.lists(st.integers(2, 4), min_size=1, max_size=3)):
        digits.append((FloorMod(cur, const(radix)), stride))
        cur, stride = FloorDiv(cur, const(radix)), stride * radix
    digits.append((cur, stride))
    exact = draw(st.booleans())
    e = const(0)
    for digit, weight in draw(st.permutations(digits)):
        e = Add(e, Mul(digit, const(weight + (0 if exact else draw(st.integers(-1, 1))))))
    return base, e, exact


@EXAMPLES
@given(fused_st(), ranges_st)
def test_simplify_recombines_digits(case, ranges):
    base, e, exact = case
    s = simplify(e)
    assert simplify(s) == s, f"{e} -> {s} -> {simplify(s)}"
    if exact:
        assert linear_form(s) == linear_form(base), f"{e} -> {s}, expected {simplify(base)}"
    for env in assignments(ranges):
        assert evaluate(s, env) == evaluate(e, env), f"{e} -> {s} at {env}"


interval_st = st.tuples(st.integers(-6, 6), st.integers(0, 6)).map(
    lambda p: Interval(p[0], p[0] + p[1])
)


@EXAMPLES
@given(interval_st, interval_st)
def test_interval_arithmetic_is_sound(a, b):
    ops = {
        "+": (a + b, lambda u, v: u + v),
        "-": (a - b, lambda u, v: u - v),
        "*": (a * b, lambda u, v: u * v),
        "min": (a.min(b), min),
        "max": (a.max(b), max),
        "//": (a.floordiv(b), lambda u, v: u // v if v else None),
        "%": (a.floormod(b), lambda u, v: u % v if v else None),
    }
    for name, (out, fn) in ops.items():
        for u in range(a.lo, a.hi + 1):
            for v in range(b.lo, b.hi + 1):
                value = fn(u, v)
                assert value is None or out.contains(value), (
                    f"{a} {name} {b} = {out} misses {value}"
                )
