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


def shift_clip(n: int = 256, SHIFT: int = 3):
    """int8(clip(a >> SHIFT, -128, 127)) over int32: VTA's requantization with a shift written as one (VITA:
    ALU_SHR with the amount as its immediate, then the clip)."""
    a = te.placeholder((n,), "int32", name="a")
    return [a], te.compute((n,), lambda i: ir.cast(ir.min_(ir.max_(a[i] >> SHIFT, -128), 127), "int8"),
                           name="shift_clip")


def shift_clip_reference(a, SHIFT=3):
    import numpy as np

    return np.clip(np.right_shift(a, SHIFT), -128, 127)


def shifts(n: int = 256, BITS: int = 32):
    """``(a >> b) + (a << b)`` over int{BITS}, the amounts a tensor's (``BITS`` and more, and negative ones,
    shift every bit out, as in numpy): Shr and Shl nodes, not a floor division or a product."""
    a = te.placeholder((n,), f"int{BITS}", name="a")
    b = te.placeholder((n,), f"int{BITS}", name="b")
    return [a, b], te.compute((n,), lambda i: (a[i] >> b[i]) + (a[i] << b[i]), name="shifts")


def shifts_reference(a, b):
    import numpy as np

    return (np.right_shift(a, b) + np.left_shift(a, b)).astype(a.dtype)


def shift_by(n: int = 256):
    """int8(clip(a >> max(b, 0), -128, 127)) over int32, the amounts a tensor's (made non-negative: the spec
    language's shifts agree with numpy's on those): a Shr node, which no built-in VITA instruction computes
    (ALU_SHR shifts left by a negative amount and keeps an amount's low 5 bits) and
    tests/extensions/vita_alu_shrv.toml's ALU_SHRV does."""
    a = te.placeholder((n,), "int32", name="a")
    b = te.placeholder((n,), "int32", name="b")
    shifted = lambda i: a[i] >> ir.max_(b[i], 0)   # noqa: E731
    return [a, b], te.compute((n,), lambda i: ir.cast(ir.min_(ir.max_(shifted(i), -128), 127), "int8"),
                              name="shift_by")


def shift_by_reference(a, b):
    import numpy as np

    return np.clip(np.right_shift(a, np.maximum(b, 0)), -128, 127)
