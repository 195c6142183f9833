"""``compile_scalar`` is ``evaluate`` made fast for repeated evaluation on changing register values: the same
value, or the same error, for every expression of every built-in spec and for hand-picked edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from isa.errors import ExecError
from isa.lang.parser import parse_expr
from isa.lang.scalar import ScalarEnv, compile_scalar, evaluate


def outcome(fn):
    try:
        return ("value", fn())
    except ExecError as e:
        return ("error", str(e))


def both(expr, env: ScalarEnv, tensors: dict) -> tuple:
    full = ScalarEnv(env.values, env.types, tensors, env.capacity)
    compiled = compile_scalar(expr, env)
    return outcome(lambda: evaluate(expr, full)), outcome(lambda: compiled(tensors))


def spec_expressions():
    """(spec, instruction, expression) for every constraint, timing, shape and address expression."""
    for name in isa.builtin_specs():
        spec = isa.load_isa(name)
        for instr in spec.instructions.values():
            exprs = [c.rule for c in instr.constraints]
            exprs += [x for x in (instr.timing.latency, instr.timing.cycles) if x is not None]
            for op in instr.operands:
                exprs += list(op.shape) + ([op.addr] if op.addr is not None else [])
            for e in exprs:
                yield spec, instr, e


CASES = list(spec_expressions())


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_spec_expression_compiles_to_the_same_value_or_error(data):
    spec, instr, expr = data.draw(st.sampled_from(CASES))
    values = {f.name: data.draw(st.integers(f.lo, f.hi)) for f in instr.fields}
    types = {tv: data.draw(st.sampled_from(list(allowed))) for tv, allowed in instr.types.items()}
    env = spec.scalar_env(values, types)
    regs = np.array(data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=32, max_size=32)), np.int32)
    tensors = {op.name: regs for op in instr.operands if op.kind == "register"}
    plain, compiled = both(expr, env, tensors)
    assert plain == compiled


ENV = ScalarEnv({"a": 6, "z": 0, "n": 3}, {}, {}, lambda code: 1000 + code)


@pytest.mark.parametrize("text", [
    "R[1] + a * 2 <= capacity(n)",
    "R[0] // z",                               # division by zero when it runs
    "select(R[2] > 0, a // z, R[2])",          # the failing branch only when taken
    "z != 0 and R[1] // z > 0",                # short-circuit: never divides
    "R[a] + 1",                                # an index out of range
    "i8(R[3]) + ceil_div(R[1], n)",
    "max(R[1], R[2], a) - min(R[3], 0)",
    "(R[1] << n) >> 1 | R[2] & 255 ^ ~R[3]",
    "not (R[1] == R[2]) or -R[1] < 0",
    "Q[0] + 1",                                # a tensor that has no value here
])
@pytest.mark.parametrize("regs", [[0, 1, -2, 3], [5, -7, 0, -128], [2**31 - 1, -(2**31), 1, 255]])
def test_edge_cases_give_the_same_value_or_error(text, regs):
    expr = parse_expr(text)
    tensors = {"R": np.array(regs, np.int32)}
    plain, compiled = both(expr, ENV, tensors)
    assert plain == compiled


def test_subtrees_without_tensors_are_evaluated_once_when_compiling():
    calls = []

    def capacity(code):
        calls.append(code)
        return 4096

    env = ScalarEnv({"n": 2}, {}, {}, capacity)
    fn = compile_scalar(parse_expr("R[0] + 64 <= capacity(n)"), env)
    assert calls == [2]
    for k in range(5):
        assert fn({"R": np.array([k * 1000], np.int32)}) is (k * 1000 + 64 <= 4096)
    assert calls == [2]


def test_a_register_file_given_as_a_list_reads_as_the_array_would():
    """A simulator hands its scalar registers over as they are, a Python list: the same values, the same
    out-of-range error."""
    env = ScalarEnv({"n": 2}, {}, {}, None)
    for text in ("R[1] + 64 <= 4096", "R[n] * 2 - R[0]", "R[n + 9]"):
        fn = compile_scalar(parse_expr(text), env)
        for regs in ([5, 100, -7], [0, 4100, 3]):
            results = []
            for tensors in ({"R": regs}, {"R": np.array(regs, np.int32)}):
                try:
                    results.append(fn(tensors))
                except ExecError as exc:
                    results.append(str(exc))
            assert results[0] == results[1], (text, regs)
