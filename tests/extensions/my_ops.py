"""User operators, written with Tandem's tensor expressions in a file of one's own, as ``tandem run`` takes
them: ``tandem run tests/extensions/my_ops.py:add_relu --target diannao -p n=4096``."""

from compiler import te
from compiler.ir import nodes as ir


def add_relu(n: int = 4096, rows: int = 1):
    """max(a + b, 0) over ``rows`` x ``n`` float32 elements."""
    a = te.placeholder((rows, n), "float32", name="a")
    b = te.placeholder((rows, n), "float32", name="b")
    zero = ir.const(0.0, "float32")
    return [a, b], te.compute((rows, n), lambda r, i: ir.Max(a[r, i] + b[r, i], zero), name="add_relu")


def add_relu_reference(a, b):
    import numpy as np

    return np.maximum(a + b, np.float32(0))


def scaled_sum(n: int = 1024):
    """2 * a + b over int32 (no reference here: Tandem's interpreter is the oracle)."""
    a = te.placeholder((n,), "int32", name="a")
    b = te.placeholder((n,), "int32", name="b")
    return [a, b], te.compute((n,), lambda i: a[i] * 2 + b[i], name="scaled_sum")


def requantize(C: int = 4, H: int = 8, W: int = 8, LO: int = -20, HI: int = 50):
    """(a + b) >> 2 clipped to [LO, HI] as int8: a residual add's requantization, over int32 inputs (for
    VITA's ALU: each operation one ALU stage; the int8 output is what its store writes)."""
    a = te.placeholder((C, H, W), "int32", name="a")
    b = te.placeholder((C, H, W), "int32", name="b")
    lo, hi = ir.const(LO, "int32"), ir.const(HI, "int32")
    clipped = lambda *i: ir.Min(ir.Max((a[i] + b[i]) // 4, lo), hi)   # noqa: E731
    return [a, b], te.compute((C, H, W), lambda *i: ir.cast(clipped(*i), "int8"), name="requantize")


def difference(n: int = 64):
    """a - b as int8: VITA's ALU has no subtraction of two tiles; the cover computes a + b * -1."""
    a = te.placeholder((n,), "int32", name="a")
    b = te.placeholder((n,), "int32", name="b")
    return [a, b], te.compute((n,), lambda i: ir.cast(a[i] - b[i], "int8"), name="difference")


def quotient(n: int = 64):
    """a // b as int8: no ALU instruction of VITA divides."""
    a = te.placeholder((n,), "int32", name="a")
    b = te.placeholder((n,), "int32", name="b")
    return [a, b], te.compute((n,), lambda i: ir.cast(a[i] // b[i], "int8"), name="quotient")
