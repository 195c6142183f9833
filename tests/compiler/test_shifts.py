"""Shifts in tensor expressions (issue 46, item 3): ``a[i] >> k`` and ``a[i] << b[i]`` on integers.

A constant amount builds the IR's FloorDiv/Mul by a power of two, a tensor's amount the Shr/Shl nodes
(compiler/ir/shifts.py); the interpreter and the LLVM backend compute numpy's ``np.right_shift`` and
``np.left_shift`` bit for bit, negative values and out-of-range amounts included; the simplifier folds them,
the printer shows them, the one matcher selects an instruction for them.
"""

from __future__ import annotations

import numpy as np
import pytest

import isa
from compiler import interp, te
from compiler.arith import simplify
from compiler.backend.llvm import build as llvm_build
from compiler.errors import IRTypeError
from compiler.ir import (
    Buffer,
    FloorDiv,
    For,
    ForKind,
    IntImm,
    Mul,
    PrimFunc,
    Shl,
    Shr,
    Store,
    Var,
    const,
    dtypes,
    seq,
)
from compiler.ops import reference
from compiler.passes.match import NoTreeMatch, TreeMatch
from compiler.pipeline import build
from compiler.schedule import create_schedule

N = 96
TYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64]


def values(dt: dtypes.DType, seed: int) -> np.ndarray:
    """N values of ``dt``: its extremes, 0, +-1, and random ones over its whole range."""
    info = np.iinfo(dt.numpy)
    out = np.random.default_rng(seed).integers(info.min, info.max, N, endpoint=True, dtype=dt.numpy)
    out[:6] = [info.min, info.max, 0, 1, info.max if dt.kind == "uint" else -1, info.min + 1]
    return out


def amounts(dt: dtypes.DType, seed: int) -> np.ndarray:
    """N amounts of ``dt``: each of [0, bits], a few past it, negative ones (for signed types), random."""
    out = values(dt, seed)
    low = np.arange(-4 if dt.kind == "int" else 0, dt.bits + 4)
    out[: len(low)] = low
    return out


# ---- building ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64], ids=str)
def test_a_constant_amount_is_a_floor_division_or_a_product_by_a_power_of_two(dt) -> None:
    a = te.placeholder((8,), dt, name="a")
    i = Var("i")
    assert a[i] >> 3 == FloorDiv(a[i], IntImm(8, dt))
    assert a[i] << 3 == Mul(a[i], IntImm(8, dt))
    assert a[i] >> 0 == a[i] and a[i] << 0 == a[i]
    top = dt.bits - 1
    if dt.kind == "uint":
        assert a[i] >> top == FloorDiv(a[i], IntImm(1 << top, dt))
    else:   # 2**top does not fit: -2**top multiplies the same modulo 2**bits; the right shift stays a node
        assert a[i] << top == Mul(a[i], IntImm(-(1 << top), dt))
        assert a[i] >> top == Shr(a[i], IntImm(top, dt))


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64], ids=str)
def test_a_tensors_amount_is_a_shift_node(dt) -> None:
    a, b = te.placeholder((8,), dt, name="a"), te.placeholder((8,), dt, name="b")
    i = Var("i")
    assert a[i] >> b[i] == Shr(a[i], b[i]) and a[i] << b[i] == Shl(a[i], b[i])
    assert (3 >> b[i]) == Shr(IntImm(3, dt), b[i]) and (1 << b[i]) == Shl(IntImm(1, dt), b[i])
    out = te.compute((8,), lambda j: (a[j] >> b[j]) + (a[j] << 2), name="out")
    assert out.dtype == dt and out.op.input_tensors == (a, b)


def test_iteration_variables_shift_too() -> None:
    k = te.reduce_axis(16, name="k")
    assert k >> 2 == FloorDiv(k.var, const(4)) and k << 1 == Mul(k.var, const(2))
    assert (1 << k) == Shl(const(1), k.var)


def test_the_printer_shows_shifts_as_python_does() -> None:
    a, b = Buffer("a", (8,), dtypes.int32), Buffer("b", (8,), dtypes.int32)
    c = Buffer("c", (8,), dtypes.int8)
    i = Var("i")
    assert str(a[i] >> b[i]) == "a[i] >> b[i]"
    assert str((a[i] + b[i]) << (b[i] - 1)) == "(a[i] + b[i]) << (b[i] - 1)"
    assert str(a[i] * 2 >> b[i] >> 1) == "(a[i]*2 >> b[i])//2"
    assert str(c[i] >> 7) == "c[i] >> i8(7)"


def test_float_operands_are_refused_naming_the_operand_and_its_dtype() -> None:
    f, n = te.placeholder((8,), "float32", name="f"), te.placeholder((8,), "int32", name="n")
    i = Var("i")
    with pytest.raises(IRTypeError,
                       match=r">>: expected integer operands, but got 'f\[i\]' of dtype float32"):
        f[i] >> 2
    with pytest.raises(IRTypeError,
                       match=r"<<: expected integer operands, but got 'f\[i\]' of dtype float32"):
        3 << f[i]
    with pytest.raises(IRTypeError, match=r">>: expected integer operands, but got the float 1.5"):
        n[i] >> 1.5
    with pytest.raises(IRTypeError, match="expected integer operands, but got 'f.* of dtype float32"):
        Shr(f[i], f[i])
    with pytest.raises(IRTypeError, match="operand dtypes differ"):
        n[i] >> te.placeholder((8,), "int8", name="s")[i]


@pytest.mark.parametrize(("dt", "amount"), [("int8", 8), ("int8", -1), ("uint8", 8), ("int32", 32),
                                            ("int64", 64), ("int64", -3)])
def test_a_constant_amount_outside_the_types_width_is_refused(dt: str, amount: int) -> None:
    a = te.placeholder((8,), dt, name="a")
    bits = dtypes.dtype(dt).bits
    for shifted in (lambda x: x >> amount, lambda x: x << amount):
        with pytest.raises(IRTypeError, match=rf"expected a shift amount in \[0, {bits}\) for {dt}, but got "
                                              rf"{amount}"):
            shifted(a[Var("i")])


# ---- computing --------------------------------------------------------------------------------------------

def constant_shifts(dt: dtypes.DType) -> PrimFunc:
    """r[k, i] = a[i] >> k and l[k, i] = a[i] << k for every k in [0, bits): the built forms, each amount."""
    a = Buffer("a", (N,), dt)
    r, lft = Buffer("r", (dt.bits, N), dt), Buffer("l", (dt.bits, N), dt)
    i = Var("i")
    body = seq(*(Store(r, (const(k), i), a[i] >> k) for k in range(dt.bits)),
               *(Store(lft, (const(k), i), a[i] << k) for k in range(dt.bits)))
    return PrimFunc("constant_shifts", (a, r, lft), For(i, const(0), const(N), body))


def tensor_shifts(dt: dtypes.DType, kind: ForKind = ForKind.SERIAL) -> PrimFunc:
    """r[i] = a[i] >> b[i] and l[i] = a[i] << b[i]: the Shr/Shl nodes."""
    a, b, r, lft = (Buffer(name, (N,), dt) for name in ("a", "b", "r", "l"))
    i = Var("i")
    body = seq(Store(r, (i,), a[i] >> b[i]), Store(lft, (i,), a[i] << b[i]))
    return PrimFunc("tensor_shifts", (a, b, r, lft), For(i, const(0), const(N), body, kind))


def numpy_shifts(x: np.ndarray, by: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.right_shift(x, by), np.left_shift(x, by)


@pytest.mark.parametrize("dt", TYPES, ids=str)
def test_the_interpreter_shifts_as_numpy_does(dt) -> None:
    x, by = values(dt, 1), amounts(dt, 2)
    r, lft = np.zeros(N, dt.numpy), np.zeros(N, dt.numpy)
    interp.run(tensor_shifts(dt), [x, by, r, lft])
    want_r, want_l = numpy_shifts(x, by)
    np.testing.assert_array_equal(r, want_r)
    np.testing.assert_array_equal(lft, want_l)
    r, lft = np.zeros((dt.bits, N), dt.numpy), np.zeros((dt.bits, N), dt.numpy)
    interp.run(constant_shifts(dt), [x, r, lft])
    ks = np.arange(dt.bits, dtype=dt.numpy)[:, None]
    np.testing.assert_array_equal(r, np.right_shift(x[None, :], ks))
    np.testing.assert_array_equal(lft, np.left_shift(x[None, :], ks))


@pytest.mark.parametrize("kind", [ForKind.SERIAL, ForKind.VECTORIZED], ids=lambda k: k.value)
@pytest.mark.parametrize("dt", TYPES, ids=str)
def test_llvm_compiled_shifts_are_numpys(dt, kind) -> None:
    x, by = values(dt, 3), amounts(dt, 4)
    r, lft = np.zeros(N, dt.numpy), np.zeros(N, dt.numpy)
    kernel = llvm_build(tensor_shifts(dt, kind), threads=1)
    kernel(x, by, r, lft)
    if kind is ForKind.VECTORIZED:   # one lane per iteration: vector shifts
        shr = "ashr" if dt.kind == "int" else "lshr"
        assert f"{shr} <{N} x i{dt.bits}>" in kernel.llvm_ir and f"shl <{N} x i{dt.bits}>" in kernel.llvm_ir
    want_r, want_l = numpy_shifts(x, by)
    np.testing.assert_array_equal(r, want_r)
    np.testing.assert_array_equal(lft, want_l)
    if kind is ForKind.SERIAL:
        r, lft = np.zeros((dt.bits, N), dt.numpy), np.zeros((dt.bits, N), dt.numpy)
        llvm_build(constant_shifts(dt), threads=1)(x, r, lft)
        ks = np.arange(dt.bits, dtype=dt.numpy)[:, None]
        np.testing.assert_array_equal(r, np.right_shift(x[None, :], ks))
        np.testing.assert_array_equal(lft, np.left_shift(x[None, :], ks))


@pytest.mark.parametrize("dt", ["int8", "uint8", "int32", "int64"])
def test_a_tensor_expression_with_shifts_lowers_and_matches_the_numpy_reference(dt: str) -> None:
    a, b = te.placeholder((N,), dt, name="a"), te.placeholder((N,), dt, name="b")
    out = te.compute((N,), lambda i: ((a[i] >> b[i]) << 1) + (a[i] >> 2), name="out")
    func = build(create_schedule(out), [a, b, out], name="shifts")
    x, by = values(dtypes.dtype(dt), 5), amounts(dtypes.dtype(dt), 6)
    want = (reference.left_shift(reference.right_shift(x, by), 1) + reference.right_shift(x, 2)).astype(dt)
    for run in (interp.run, lambda f, arrays: llvm_build(f, threads=1)(*arrays)):
        got = np.zeros(N, dt)
        run(func, [x, by, got])
        np.testing.assert_array_equal(got, want)


# ---- simplifying and matching -----------------------------------------------------------------------------

def test_the_simplifier_folds_constants_with_numpys_rule_and_rebuilds_constant_amounts() -> None:
    c = Buffer("c", (4,), dtypes.int8)
    i = Var("i")
    assert simplify(Shr(const(-100, "int8"), const(3, "int8"))) == const(-13, "int8")
    assert simplify(Shl(const(-100, "int8"), const(3, "int8"))) == const(-32, "int8")
    assert simplify(Shr(const(-100, "int8"), const(9, "int8"))) == const(-1, "int8")
    assert simplify(Shl(const(100, "int8"), const(-1, "int8"))) == const(0, "int8")
    assert simplify(Shr(c[i], const(1, "int8") + const(2, "int8"))) == FloorDiv(c[i], const(8, "int8"))
    assert simplify(Shr(c[i], const(7, "int8"))) == Shr(c[i], const(7, "int8"))


def alu(value: str):
    """The typed value tree of ``d[i] = <value>`` for int32 operands a, b, d and a field imm."""
    text = ('[isa]\nname = "shift_test"\nsummary = "shifts"\ninsn_bits = 64\n\n[formats.f]\n'
            'fields = [{ name = "opcode", bits = 4 }, { name = "imm", bits = 16, signed = true }]\n\n'
            '[spaces.MEM]\nbytes = 1024\n\n[instructions.P]\nsummary = "p"\nformat = "f"\n'
            'fixed = { opcode = 1 }\nindices = { i = "spatial" }\n'
            'operands = [' + ", ".join(f'{{ name = "{n}", space = "MEM", dtype = "i32", shape = [4] }}'
                                       for n in "abd") + ']\n'
            f'semantics = "d[i] = {value}"\n')
    (assign,) = isa.load_spec_text(text, "shift_test.toml").instruction("P").typed_semantics().statements
    return assign.value


def test_a_specs_shift_by_an_operand_matches_the_shift_nodes() -> None:
    x, y = Buffer("X", (4,), dtypes.int32), Buffer("Y", (4,), dtypes.int32)
    i = Var("i")
    m = TreeMatch(shifts=True)
    m.match(alu("a[i] >> b[i]"), x[i] >> y[i])
    assert {k: v[0] for k, v in m.operands.items()} == {"a": x, "b": y}
    TreeMatch(shifts=True).match(alu("a[i] << b[i]"), x[i] << y[i])
    m = TreeMatch(fields=frozenset({"imm"}), shifts=True)
    m.match(alu("a[i] >> imm % 32"), x[i] >> 31)   # Shr by a constant: 2**31 is no int32
    assert m.values == {"imm": 31}
    with pytest.raises(NoTreeMatch, match="expected a shift"):
        TreeMatch(shifts=True).match(alu("a[i] >> b[i]"), x[i] << y[i])
    with pytest.raises(NoTreeMatch, match="opcode mismatch"):
        TreeMatch(shifts=True).match(alu("a[i] << b[i]"), x[i] >> y[i])
