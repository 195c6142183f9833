"""The fused multiply-add intrinsic (``te.fma``): ``a * b + c`` rounded once, by the reference interpreter
and by LLVM's ``llvm.fma`` (an FMA instruction where the CPU has one), also in a vectorized loop; what
onnxruntime's QLinearAdd computes (compiler/ops/network.py ``qlinear_add``)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import interp, te
from compiler.errors import IRTypeError
from compiler.lower import lower
from compiler.ops.reference import fma_f32
from compiler.schedule import create_schedule
from tandem.flows.run import run
from tandem.flows.targets import load_target

f32 = np.float32
#: a = b = 1 + 2^-12, c = -(1 + 2^-11): a * b = 1 + 2^-11 + 2^-24 exactly, which float32 rounds to
#: 1 + 2^-11 (so a rounded product plus c is 0), while the fused result keeps 2^-24
A, C = f32(1 + 2**-12), f32(-(1 + 2**-11))

OP_FILE = '''
import numpy as np
from compiler import te
from compiler.ops.reference import fma_f32


def fused(N: int):
    a, b, c = (te.placeholder((N,), "float32", name=n) for n in "abc")
    return [a, b, c], te.compute((N,), lambda i: te.fma(a[i], b[i], c[i]), name="out")


def fused_reference(a, b, c):
    return fma_f32(a, b, c)
'''


def _inputs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n).astype(f32) for _ in range(3))
    a[:2], b[:2], c[:2] = A, A, C   # where one rounding and two differ
    return [a, b, c]


def test_fma_takes_floats_of_one_type():
    x, n = te.placeholder((4,), "float32", name="x"), te.placeholder((4,), "int32", name="n")
    assert te.fma(x[0], x[1], x[2]).dtype.name == "float32"
    with pytest.raises(IRTypeError, match="fma: expected float arguments"):
        te.fma(x[0], n[0], x[1])


def test_the_interpreter_rounds_once():
    a, b, c = (te.placeholder((64,), "float32", name=n) for n in "abc")
    out = te.compute((64,), lambda i: te.fma(a[i], b[i], c[i]), name="out")
    func = lower(create_schedule(out), [a, b, c, out], "fused")
    arrays, got = _inputs(64), np.zeros(64, f32)
    interp.run(func, [*arrays, got])
    np.testing.assert_array_equal(got, fma_f32(*arrays))
    assert got[0] == f32(2**-24) and A * A + C == 0   # numpy's product is rounded first: 0


def test_llvm_fuses_on_this_cpu_in_a_vectorized_loop(tmp_path):
    """The CPU runs an element-wise operator as one flat loop, 16 lanes at a time: ``llvm.fma`` on vectors,
    equal bit for bit to numpy's exact single rounding (``fma_f32``), the differing case included."""
    path = tmp_path / "ops.py"
    path.write_text(OP_FILE)
    report = run(f"{path}:fused", load_target("cpu"), {"N": 4096, "min_time": 0.01}, inputs=_inputs(4096))
    assert report.validated, report.detail
    assert report.output[0] == f32(2**-24)
    assert "llvm.fma.v16f32" in report.program
