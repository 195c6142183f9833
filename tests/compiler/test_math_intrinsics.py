"""Float math intrinsics (exp, log, sqrt, tanh) in tensor expressions: typed, evaluated by the reference
interpreter exactly and rounded once, compiled by LLVM to its intrinsics, and selected by the one matcher
where a spec's semantics use the same function (DianNao's in-place ``tanh``)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import interp, te
from compiler.errors import IRTypeError
from compiler.ir.intrinsics import MATH
from compiler.lower import lower
from compiler.schedule import create_schedule
from tandem.flows.run import run
from tandem.flows.targets import load_target

OP_FILE = '''
from compiler import te


def mathy(N: int):
    x = te.placeholder((N,), "float32", name="x")
    return [x], te.compute((N,), lambda i: te.tanh(x[i]) + te.sqrt(te.exp(x[i])) - te.log(te.exp(x[i]) + 1.0),
                           name="out")


def squash(N: int):
    x = te.placeholder((N,), "float32", name="x")
    return [x], te.compute((N,), lambda i: te.tanh(x[i]), name="out")
'''


def _numpy(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return (np.tanh(x) + np.sqrt(np.exp(x)) - np.log(np.exp(x) + 1.0)).astype(np.float32)


@pytest.mark.parametrize("name", MATH)
def test_math_calls_take_floats_only_and_keep_the_type(name):
    x = te.placeholder((4,), "float16", name="x")
    assert getattr(te, name)(x[0]).dtype.name == "float16"
    with pytest.raises(IRTypeError, match=f"{name}: expected a float argument"):
        getattr(te, name)(te.placeholder((4,), "int32", name="i")[0])


def test_the_interpreter_computes_exactly_and_rounds_once():
    x = te.placeholder((64,), "float32", name="x")
    out = te.compute((64,), lambda i: te.tanh(x[i]) + te.sqrt(te.exp(x[i])) - te.log(te.exp(x[i]) + 1.0),
                     name="out")
    func = lower(create_schedule(out), [x, out], "mathy")
    data = np.linspace(-3, 3, 64).astype(np.float32)
    got = np.zeros(64, np.float32)
    interp.run(func, [data, got])
    np.testing.assert_allclose(got, _numpy(data), rtol=1e-6, atol=1e-6)


def test_llvm_computes_them_on_this_cpu(tmp_path):
    path = tmp_path / "ops.py"
    path.write_text(OP_FILE)
    report = run(f"{path}:mathy", load_target("cpu"), {"N": 1000, "min_time": 0.01})
    assert report.validated, report.detail   # against the reference interpreter (no reference given)


def test_the_card_selects_its_tanh_instruction_for_a_users_tanh(tmp_path):
    """``out = tanh(x)`` is split into a copy and DianNao's in-place ``dst[i] = tanh(dst[i])``."""
    path = tmp_path / "ops.py"
    path.write_text(OP_FILE)
    report = run(f"{path}:squash", load_target("diannao"), {"N": 4096})
    assert report.validated and report.scalar_fallback == 0 and report.instructions["tanh"] >= 1
