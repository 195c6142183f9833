"""Shifts of the loop IR: ``x >> y`` and ``x << y`` on integers, with numpy's semantics.

``Expr.__rshift__``/``__lshift__`` (``a[i] >> 3``, ``a[i] << b[i]``) build them with ``shift``:

- By a constant amount ``k`` (``0 <= k < bits``, else IRTypeError naming the amount and the dtype) a shift
  is the IR's arithmetic, exactly, so that every pass and backend, and the instruction selector
  (``compiler.passes.match``: a spec's ``x >> n`` matches a floor division by ``2**n``), already knows it:
  ``x >> k`` is ``FloorDiv(x, 2**k)`` (a floor division by a power of two is the arithmetic shift of a
  signed integer and the logical shift of an unsigned one) and ``x << k`` is ``Mul(x, 2**k)`` (wrapping).
  Where ``2**k`` does not fit the dtype (``k = bits - 1`` of a signed one), ``x << k`` is ``Mul(x, -2**k)``
  (the same modulo ``2**bits``) and ``x >> k`` the node ``Shr(x, k)``. A shift by 0 is ``x`` itself.
- By any other amount, it is the node ``Shr`` or ``Shl``: both operands of one integer dtype (cast the amount
  to the value's), the result of that dtype.

Semantics (numpy's ``np.right_shift``/``np.left_shift``, which the interpreter, the LLVM backend and
DianNao's scalar code follow bit for bit; ``shifted`` computes them): an amount in ``[0, bits)`` shifts,
arithmetically right for a signed value, logically for an unsigned one, and a left shift wraps; any other
amount, ``bits`` or more or negative (numpy reads the amount as unsigned), shifts every bit out: ``<<`` gives
0, ``>>`` gives 0, or -1 for a negative value. The spec language's shifts (isa/executor.py) agree on every
amount of 0 or more; they clamp a negative one to 0.

Non-goals: shifts of floats or bools; a shift whose amount has another dtype than its value (numpy promotes
them; the IR asks for a cast, as for every binary operator).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.errors import IRTypeError
from compiler.ir import dtypes
from compiler.ir.dtypes import DType
from compiler.ir.nodes import BinaryOp, Expr, FloorDiv, IntImm, Mul, _pair


def _check_int(node: str, *operands: Expr) -> None:
    for x in operands:
        if not x.dtype.is_int:
            raise IRTypeError(f"{node}: expected integer operands, but got '{x}' of dtype {x.dtype}")


@dataclass(frozen=True, slots=True)
class Shr(BinaryOp):
    """a >> b: arithmetic for a signed a, logical for an unsigned one; an amount outside [0, bits) shifts
    every bit out (0, or -1 for a negative a)."""

    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        BinaryOp.__post_init__(self)
        _check_int("Shr", self.a)


@dataclass(frozen=True, slots=True)
class Shl(BinaryOp):
    """a << b, wrapping; an amount outside [0, bits) gives 0."""

    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        BinaryOp.__post_init__(self)
        _check_int("Shl", self.a)


#: The node of each shift operator, and the operator of each node.
SHIFTS = {">>": Shr, "<<": Shl}
OPERATOR = {Shr: ">>", Shl: "<<"}


def shift(op: str, a, b) -> Expr:
    """``a >> b`` (op ``">>"``) or ``a << b`` (``"<<"``) of two integer expressions or Python ints (at least
    one an expression), built as the module docstring says."""
    for x in (a, b):
        if isinstance(x, Expr) and not x.dtype.is_int:
            raise IRTypeError(f"{op}: expected integer operands, but got '{x}' of dtype {x.dtype}")
        if isinstance(x, float):
            raise IRTypeError(f"{op}: expected integer operands, but got the float {x!r}")
    a, b = _pair(a, b)
    _check_int(op, a, b)
    if not isinstance(b, IntImm):
        return SHIFTS[op](a, b)
    dt, k = a.dtype, b.value
    if not 0 <= k < dt.bits:
        raise IRTypeError(f"{op}: expected a shift amount in [0, {dt.bits}) for {dt}, but got {k} in "
                          f"'{a} {op} {k}'")
    if k == 0:
        return a
    if (1 << k) <= dt.max_value:
        power = IntImm(1 << k, dt)
        return FloorDiv(a, power) if op == ">>" else Mul(a, power)
    # k = bits - 1 of a signed type: 2**k does not fit, -2**k is the same multiplier modulo 2**bits
    return Shr(a, b) if op == ">>" else Mul(a, IntImm(int(dt.min_value), dt))


def shifted(node: type, a: int, b: int, dt: DType) -> int:
    """The value of ``node(a, b)`` (``Shr`` or ``Shl``) on two values of ``dt``: numpy's shift."""
    if not 0 <= b < dt.bits:
        return -1 if node is Shr and a < 0 else 0
    return a >> b if node is Shr else dtypes.wrap_int(a << b, dt)
