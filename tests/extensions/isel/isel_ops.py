"""User operators whose expressions the instruction shapes of this folder's spec files compute in one
instruction (and the built-in specs in several): what tests/extensions/test_isel_extensions.py runs."""

from compiler import te
from compiler.ir import nodes as ir


def _inputs(names: str, n: int, dtype: str):
    return [te.placeholder((n,), dtype, name=x) for x in names]


def fma(n: int = 2048, BITS: int = 32):
    """a * b + c (DianNao: vmul then vadd, or vfma)."""
    a, b, c = _inputs("abc", n, f"int{BITS}")
    return [a, b, c], te.compute((n,), lambda i: c[i] + b[i] * a[i], name="fma")


def max3(n: int = 2048):
    """The largest of three float32 vectors, grouped the other way round (max is associative)."""
    a, b, c = _inputs("abc", n, "float32")
    return [a, b, c], te.compute((n,), lambda i: ir.Max(a[i], ir.Max(b[i], c[i])), name="max3")


def absdiff(n: int = 2048):
    """|a - b| over int32 as max(a - b, b - a)."""
    a, b = _inputs("ab", n, "int32")
    return [a, b], te.compute((n,), lambda i: ir.Max(a[i] - b[i], b[i] - a[i]), name="absdiff")


def shift_clip(n: int = 1024, SHIFT: int = 4):
    """VTA's epilogue on a tile: i8(min(max(a >> SHIFT, -128), 127)) (VITA)."""
    (a,) = _inputs("a", n, "int32")
    return [a], te.compute((n,), lambda i: ir.cast(ir.min_(ir.max_(a[i] >> SHIFT, -128), 127), "int8"),
                           name="shift_clip")


def add_shift(n: int = 1024):
    """A rounding-free average of two int32 tiles, clipped to int8 (VITA)."""
    a, b = _inputs("ab", n, "int32")
    return [a, b], te.compute((n,), lambda i: ir.cast(ir.Min(ir.Max((a[i] + b[i]) >> 1, ir.const(-128)),
                                                              ir.const(127)), "int8"), name="add_shift")


def mul_add(n: int = 1024):
    """A scaled residual, 3 * a + b, clipped to int8 (VITA)."""
    a, b = _inputs("ab", n, "int32")
    return [a, b], te.compute((n,), lambda i: ir.cast(ir.Min(ir.Max(a[i] * 3 + b[i], ir.const(-128)),
                                                              ir.const(127)), "int8"), name="mul_add")


def scaled(n: int = 4096):
    """3 * a + b over float32: DianNao has no vector instruction with a constant operand; the constant is a
    vector filled once per core, and the expression vmul then vadd."""
    a, b = _inputs("ab", n, "float32")
    return [a, b], te.compute((n,), lambda i: a[i] * 3.0 + b[i], name="scaled")
