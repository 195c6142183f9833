"""Fields a tensor instruction's semantics read as values (an immediate: ``a[i] >> s``, a clamp's bounds)
are bound from the code's constants by the one matcher, and a shift matches a floor division by its power of
two: DianNao's ``vreq`` covers an int8 network's requantization."""

from __future__ import annotations

import isa
from compiler import ir
from compiler.passes.tensorize import Match, match

SPEC = isa.load_isa("diannao")


def requantize_loop(divisor: int, lo: int, hi: int) -> ir.Stmt:
    a = ir.Buffer("a", (256,), ir.dtype("int32"), "nmem")
    out = ir.Buffer("out", (256,), ir.dtype("int8"), "nmem")
    i = ir.Var("i")
    value = ir.cast(ir.Min(ir.Max(ir.FloorDiv(ir.Load(a, (i,)), ir.const(divisor)), ir.const(lo)),
                           ir.const(hi)), "int8")
    return ir.For(i, ir.const(0), ir.const(256), ir.Store(out, (i,), value))


def test_the_shift_and_the_bounds_are_bound_from_the_code():
    found = match(requantize_loop(256, -128, 127), SPEC, SPEC.instruction("vreq"))
    assert isinstance(found, Match)
    assert found.fields == {"n": 256, "s": 8, "lo": -128, "hi": 127}


def test_a_divisor_that_is_no_power_of_two_does_not_match():
    assert not isinstance(match(requantize_loop(100, -128, 127), SPEC, SPEC.instruction("vreq")), Match)


def test_a_bound_past_its_field_does_not_match():
    found = match(requantize_loop(256, -128, 300), SPEC, SPEC.instruction("vreq"))
    assert not isinstance(found, Match) and "hi" in found.reason
