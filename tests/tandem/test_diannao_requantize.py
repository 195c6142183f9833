"""An int8 network's requantization on the DianNao card runs on the vector unit (``vadd`` of the bias, then
``vreq``), bit-exact with numpy, instead of as scalar code."""

from __future__ import annotations

from compiler.ops import network
from tandem.flows.run import run
from tandem.flows.targets import load_target


def test_requantize_is_vadd_then_vreq_and_exact():
    report = run(network.user_op("requantize"), load_target("diannao"),
                 {"C": 16, "H": 16, "W": 16, "S": 7, "LO": 0, "HI": 127})
    assert report.validated and report.max_abs_err == 0 and report.scalar_fallback == 0
    assert report.instructions["vreq"] > 0 and report.instructions["vadd"] > 0


def test_without_a_shift_it_stays_scalar_and_says_why():
    report = run(network.user_op("requantize"), load_target("diannao"),
                 {"C": 16, "H": 16, "W": 16, "S": 0, "LO": -128, "HI": 127})
    assert report.validated and report.scalar_fallback > 0
    assert any("max with the constant -128" in u for u in report.unmatched)
