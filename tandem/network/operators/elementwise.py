"""The element-wise operators, with ONNX's (numpy's) multidirectional broadcasting, on floating-point
(computed in float64) and integer tensors (int64, wrapped to the declared type by the caller): arithmetic,
math functions, activations, comparisons and logic, Where, the variadic Min, Max, Sum and Mean, Cast and
CastLike, and Dropout (inference).

Before opset 7 a binary operator broadcasts only with ``broadcast=1`` (B's axes lined up with A's from
``axis``), and before opset 8 the variadic ones take operands of one shape. ``consumed_inputs`` (opset 1)
marks inputs a runtime may overwrite in place: it changes no value. A floating-point result follows IEEE 754
(a division by zero is an infinity, a logarithm of a negative number NaN); an integer division or modulo by
zero, which ONNX leaves undefined, is refused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from compiler.ops import reference
from tandem.network.operators.registry import Node, OperatorError, operator

IN_PLACE = ("consumed_inputs",)
LEGACY_BROADCAST = ("axis", "broadcast")


def ieee(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``function`` with IEEE 754's special values (infinities, NaN) as results, without numpy's
    warnings."""
    @functools.wraps(function)
    def quiet(*args: object) -> np.ndarray:
        with np.errstate(all="ignore"):
            return function(*args)
    return quiet


@operator("Relu")
def relu(node: Node) -> np.ndarray:
    return reference.clip(node.arg(0), 0, None)


@operator("Clip", attrs=("min", "max"))
def clip(node: Node) -> np.ndarray:
    """Bounds from the inputs (opset 11 on) or the attributes (before); an omitted bound is none."""
    lo = node.arg(1).item() if node.given(1) else node.attr("min")
    hi = node.arg(2).item() if node.given(2) else node.attr("max")
    return reference.clip(node.arg(0), lo, hi)


@operator("Add")
def add(node: Node) -> np.ndarray:
    return reference.add(node.arg(0), node.arg(1))


@operator("Mul")
def mul(node: Node) -> np.ndarray:
    return reference.mul(node.arg(0), node.arg(1))


# ------------------------------------------------------------------------------------------ binary arithmetic

def operands(node: Node) -> tuple[np.ndarray, np.ndarray]:
    """A and B, exact, shaped to broadcast as the node's opset defines: numpy's broadcasting from opset 7;
    before, B must have A's shape unless ``broadcast=1``, which lines B's axes up with A's from ``axis``
    (default: A's last axes; a B of one element is a scalar)."""
    a, b = node.arg(0), node.arg(1)
    if node.opset >= 7:
        return a, b
    if not node.attr("broadcast", 0):
        if a.shape != b.shape:
            raise OperatorError(f"A of shape {list(a.shape)} and B of shape {list(b.shape)} with broadcast=0 "
                                f"(before opset 7 B broadcasts only with broadcast=1)")
        return a, b
    if b.size == 1:
        return a, b.reshape(())
    axis = node.attr("axis", a.ndim - b.ndim)
    axis = axis + a.ndim if axis < 0 else axis
    if not 0 <= axis <= a.ndim - b.ndim or a.shape[axis:axis + b.ndim] != b.shape:
        raise OperatorError(f"B of shape {list(b.shape)} does not match A's shape {list(a.shape)} from axis "
                            f"{node.attr('axis', a.ndim - b.ndim)}")
    return a, b.reshape((1,) * axis + b.shape + (1,) * (a.ndim - axis - b.ndim))


def refuse_legacy_broadcast(node: Node) -> str | None:
    """axis and broadcast belong to opsets before 7 (from 7 broadcasting is numpy's)."""
    given = [name for name in LEGACY_BROADCAST if name in node.attrs]
    if given and node.opset >= 7:
        return f"attribute {given[0]} is not {node.op}'s from opset 7 (broadcasting is numpy's there)"
    return None


def _nonzero_divisor(b: np.ndarray, op: str) -> None:
    if b.dtype.kind in "iub" and not np.all(b):
        raise OperatorError(f"an integer {op} by zero (ONNX leaves it undefined)")


@operator("Sub", attrs=(*LEGACY_BROADCAST, *IN_PLACE), refuse=refuse_legacy_broadcast)
def sub(node: Node) -> np.ndarray:
    return reference.sub(*operands(node))


@operator("Div", attrs=(*LEGACY_BROADCAST, *IN_PLACE), refuse=refuse_legacy_broadcast)
@ieee
def div(node: Node) -> np.ndarray:
    """A / B; integers divide truncating toward zero, as C does (-7 / 2 = -3)."""
    a, b = operands(node)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a / b
    _nonzero_divisor(b, "division")
    quotient = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -quotient, quotient)


@operator("Pow", attrs=LEGACY_BROADCAST, refuse=refuse_legacy_broadcast)
@ieee
def power(node: Node) -> np.ndarray:
    """X to the power Y, in X's type (Y's may differ): an integer X to an integer Y exactly (wrapping as
    the declared type does), any other pair in float64 (an integer X's result then truncated toward zero by
    the conversion to its type). A negative integer power of an integer is refused."""
    x, y = operands(node)
    if x.dtype.kind == "i" and y.dtype.kind == "i":
        if np.any(y < 0):
            raise OperatorError("an integer raised to a negative integer power (not an integer)")
        return np.power(x, y)
    return np.power(x.astype(np.float64), y.astype(np.float64))


@operator("Mod", attrs=("fmod",),
          refuse=lambda node: f"fmod={node.attr('fmod')} (ONNX defines 0 and 1)"
          if node.attr("fmod", 0) not in (0, 1) else None)
@ieee
def mod(node: Node) -> np.ndarray:
    """The remainder of A / B: with ``fmod=0`` the divisor's sign (Python's %), with ``fmod=1`` the
    dividend's (C's fmod)."""
    a, b = node.arg(0), node.arg(1)
    _nonzero_divisor(b, "modulo")
    return np.fmod(a, b) if node.attr("fmod", 0) else np.mod(a, b)


# ------------------------------------------------------------------------------------------ unary math

@operator("Neg", attrs=IN_PLACE)
def neg(node: Node) -> np.ndarray:
    return -node.arg(0)


@operator("Abs", attrs=IN_PLACE)
def absolute(node: Node) -> np.ndarray:
    return np.abs(node.arg(0))


@operator("Sign")
def sign(node: Node) -> np.ndarray:
    """-1, 0 or 1 by the sign of x (NaN for NaN)."""
    return np.sign(node.arg(0))


@operator("Sqrt", attrs=IN_PLACE)
@ieee
def sqrt(node: Node) -> np.ndarray:
    """The square root (NaN below 0)."""
    return np.sqrt(node.arg(0))


@operator("Reciprocal", attrs=IN_PLACE)
@ieee
def reciprocal(node: Node) -> np.ndarray:
    return 1.0 / node.arg(0)


@operator("Exp", attrs=IN_PLACE)
@ieee
def exp(node: Node) -> np.ndarray:
    return np.exp(node.arg(0))


@operator("Log", attrs=IN_PLACE)
@ieee
def log(node: Node) -> np.ndarray:
    """The natural logarithm (-inf at 0, NaN below)."""
    return np.log(node.arg(0))


@operator("Floor", attrs=IN_PLACE)
def floor(node: Node) -> np.ndarray:
    return np.floor(node.arg(0))


@operator("Ceil", attrs=IN_PLACE)
def ceil(node: Node) -> np.ndarray:
    return np.ceil(node.arg(0))


@operator("Round")
def round_half_even(node: Node) -> np.ndarray:
    """To the nearest integer, halves to the even one (2.5 -> 2, -1.5 -> -2)."""
    return np.round(node.arg(0))


@operator("Erf")
def erf(node: Node) -> np.ndarray:
    return reference.erf(node.arg(0))


@operator("Tanh", attrs=IN_PLACE)
def tanh(node: Node) -> np.ndarray:
    return np.tanh(node.arg(0))


@operator("Sigmoid", attrs=IN_PLACE)
@ieee
def sigmoid(node: Node) -> np.ndarray:
    """1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + np.exp(-node.arg(0)))


# ------------------------------------------------------------------------------------------ activations

@operator("HardSigmoid", attrs=("alpha", "beta", *IN_PLACE))
def hard_sigmoid(node: Node) -> np.ndarray:
    """max(0, min(1, alpha x + beta)), alpha 0.2 and beta 0.5 by default."""
    return np.clip(node.attr("alpha", 0.2) * node.arg(0) + node.attr("beta", 0.5), 0.0, 1.0)


@operator("HardSwish")
def hard_swish(node: Node) -> np.ndarray:
    """x max(0, min(1, x / 6 + 1 / 2))."""
    x = node.arg(0)
    return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)


@operator("LeakyRelu", attrs=("alpha", *IN_PLACE))
def leaky_relu(node: Node) -> np.ndarray:
    """x, or alpha x (alpha 0.01 by default) below 0."""
    x = node.arg(0)
    return np.where(x < 0, node.attr("alpha", 0.01) * x, x)


@operator("PRelu", attrs=IN_PLACE)
def prelu(node: Node) -> np.ndarray:
    """x, or slope x below 0. From opset 7 the slope broadcasts to x (numpy's rules, toward x only);
    before, it is one value for all or one per channel (axis 1)."""
    x, slope = node.arg(0), node.arg(1)
    if node.opset < 7 and slope.size != 1:
        if x.ndim < 2 or slope.size != x.shape[1]:
            raise OperatorError(f"slope of shape {list(slope.shape)} for an input of shape {list(x.shape)}: "
                                f"before opset 7 one value, or one per channel (axis 1)")
        slope = slope.reshape((1, -1) + (1,) * (x.ndim - 2))
    out = np.where(x < 0, slope * x, x)
    if out.shape != x.shape:
        raise OperatorError(f"slope of shape {list(slope.shape)} does not broadcast to the input's "
                            f"{list(x.shape)}")
    return out


@operator("ThresholdedRelu", attrs=("alpha",))
def thresholded_relu(node: Node) -> np.ndarray:
    """x above alpha (1 by default), 0 elsewhere."""
    x = node.arg(0)
    return np.where(x > node.attr("alpha", 1.0), x, 0.0)


@operator("Elu", attrs=("alpha", *IN_PLACE))
@ieee
def elu(node: Node) -> np.ndarray:
    """x, or alpha (exp(x) - 1) below 0 (alpha 1 by default)."""
    x = node.arg(0)
    return np.where(x < 0, node.attr("alpha", 1.0) * np.expm1(x), x)


SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


@operator("Selu", attrs=("alpha", "gamma", *IN_PLACE))
@ieee
def selu(node: Node) -> np.ndarray:
    """gamma x above 0, gamma alpha (exp(x) - 1) elsewhere (ONNX's default alpha and gamma, those of
    self-normalizing networks, as float32 holds them)."""
    x = node.arg(0)
    gamma = node.attr("gamma", SELU_GAMMA)
    return np.where(x > 0, gamma * x, gamma * node.attr("alpha", SELU_ALPHA) * np.expm1(x))


@operator("Celu", attrs=("alpha",))
@ieee
def celu(node: Node) -> np.ndarray:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)), alpha 1 by default."""
    x, alpha = node.arg(0), node.attr("alpha", 1.0)
    return np.maximum(x, 0.0) + np.minimum(alpha * np.expm1(x / alpha), 0.0)


@operator("Softplus")
def softplus(node: Node) -> np.ndarray:
    """log(1 + exp(x)), without overflow."""
    return np.logaddexp(0.0, node.arg(0))


@operator("Softsign")
def softsign(node: Node) -> np.ndarray:
    """x / (1 + |x|)."""
    x = node.arg(0)
    return x / (1.0 + np.abs(x))


@operator("Mish")
def mish(node: Node) -> np.ndarray:
    """x tanh(softplus(x))."""
    x = node.arg(0)
    return x * np.tanh(np.logaddexp(0.0, x))


# ------------------------------------------------------------------------------------------ comparison, logic

def _compare(name: str, ufunc: np.ufunc, legacy: bool) -> None:
    """Register the comparison or logical operator ``name``: ``ufunc`` of A and B, a bool tensor (with
    ``legacy``, it has opset 1's axis and broadcast)."""
    def compute(node: Node) -> np.ndarray:
        return ufunc(*operands(node))
    compute.__doc__ = f"A {ufunc.__name__} B, element by element: a bool tensor."
    operator(name, attrs=LEGACY_BROADCAST if legacy else (),
             refuse=refuse_legacy_broadcast if legacy else None)(compute)


for _name, _ufunc, _legacy in (("Equal", np.equal, True), ("Less", np.less, True),
                               ("Greater", np.greater, True), ("LessOrEqual", np.less_equal, False),
                               ("GreaterOrEqual", np.greater_equal, False), ("And", np.logical_and, True),
                               ("Or", np.logical_or, True), ("Xor", np.logical_xor, True)):
    _compare(_name, _ufunc, _legacy)


@operator("Not")
def logical_not(node: Node) -> np.ndarray:
    return np.logical_not(node.arg(0))


@operator("Where")
def where(node: Node) -> np.ndarray:
    """X where the condition holds, Y elsewhere (the three broadcast together)."""
    return np.where(node.arg(0).astype(bool), node.arg(1), node.arg(2))


# ------------------------------------------------------------------------------------------ variadic

def variadic(node: Node) -> list[np.ndarray]:
    """The operands of a variadic operator, exact; before opset 8 they must share one shape (from 8 they
    broadcast)."""
    xs = [node.arg(k) for k in range(len(node.args)) if node.given(k)]
    if not xs:
        raise OperatorError(f"{node.op} takes one input or more")
    if node.opset < 8 and len({x.shape for x in xs}) > 1:
        raise OperatorError(f"inputs of shapes {', '.join(str(list(x.shape)) for x in xs)}: before opset 8 "
                            f"{node.op}'s inputs have one shape")
    return xs


@operator("Max", attrs=IN_PLACE)
def maximum(node: Node) -> np.ndarray:
    """The largest of the inputs, element by element (NaN if any is)."""
    return functools.reduce(reference.maximum, variadic(node))


@operator("Min", attrs=IN_PLACE)
def minimum(node: Node) -> np.ndarray:
    """The smallest of the inputs, element by element (NaN if any is)."""
    return functools.reduce(np.minimum, variadic(node))


@operator("Sum", attrs=IN_PLACE)
def total(node: Node) -> np.ndarray:
    return functools.reduce(np.add, variadic(node))


@operator("Mean", attrs=IN_PLACE)
def mean(node: Node) -> np.ndarray:
    xs = variadic(node)
    return functools.reduce(np.add, xs) / len(xs)


# ------------------------------------------------------------------------------------------ Cast, Dropout

#: the largest finite value of each float8 type (ONNX's FLT_MAX in its saturation tables)
FLOAT8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0, "float8_e5m2": 57344.0,
              "float8_e5m2fnuz": 57344.0}
E8M0 = "float8_e8m0fnu"
ROUND_MODES = ("up", "down", "nearest")


def _refuse_cast(node: Node) -> str | None:
    """Cast's ``to`` must name a numeric type numpy holds (strings are refused); ``round_mode`` one ONNX
    defines."""
    if node.attr("round_mode", "up") not in ROUND_MODES:
        return f"round_mode {node.attr('round_mode')!r} is not one of {', '.join(ROUND_MODES)}"
    if node.op == "CastLike":
        return None
    from onnx import TensorProto, helper

    to = node.attr("to")
    if to is None:
        return "attribute 'to' is required"
    if to == TensorProto.STRING:
        return "to=STRING: casts to strings are not supported (Tandem's tensors hold numbers)"
    try:
        helper.tensor_dtype_to_np_dtype(to)
    except (KeyError, TypeError, ValueError):
        return f"to={helper.tensor_dtype_to_string(to) if to in TensorProto.DataType.values() else to}: " \
               f"an element type numpy cannot hold"
    return None


def _cast(node: Node) -> np.ndarray:
    """The input, exact, for the caller's conversion to the declared type, which is the cast ONNX defines
    (a float rounded to the nearest, ties to even, or truncated toward zero to an integer; an integer
    wrapped) except for the float8 types: with ``saturate`` (the default) the values out of a float8 type's
    range, infinities too, become its largest finite value; float8e8m0 rounds as ``round_mode`` says."""
    x, target = node.arg(0), node.dtypes[0]
    if x.dtype.kind not in "fib" or target.kind not in "fiubV":
        raise OperatorError(f"a cast from {x.dtype} to {target}: Tandem casts numbers, not strings")
    saturate = bool(node.attr("saturate", 1))
    if target.name == E8M0:
        return e8m0(x, saturate, node.attr("round_mode", "up"))
    if target.name in FLOAT8_MAX and saturate:
        return np.clip(x, -FLOAT8_MAX[target.name], FLOAT8_MAX[target.name])
    return x


@ieee
def e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """ONNX's conversion to float8e8m0 (2**(e - 127) for e in 0..254, or NaN), from ``x`` as float32: its
    biased exponent e (the sign and mantissa dropped), plus one with ``round_mode`` 'up' where a mantissa bit
    is set, with 'nearest' where the mantissa's top bit is and another bit or e > 0 is, never with 'down';
    with ``saturate`` not past 2**127 (else past it: NaN); infinities and NaN become NaN."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    exponent, mantissa = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if round_mode == "up":
        up = mantissa > 0
    elif round_mode == "nearest":
        up = ((mantissa & 0x400000) > 0) & (((mantissa & 0x3FFFFF) > 0) | (exponent > 0))
    else:
        up = np.zeros(exponent.shape, bool)
    up &= exponent != 0xFF
    if saturate:
        up &= exponent != 0xFE
    exponent = exponent + up
    return np.where(exponent == 0xFF, np.nan, np.exp2(exponent - 127.0))


@operator("Cast", attrs=("to", "saturate", "round_mode"), refuse=_refuse_cast)
def cast(node: Node) -> np.ndarray:
    """The input in the type ``to`` names (see ``_cast``)."""
    return _cast(node)


@operator("CastLike", attrs=("saturate", "round_mode"), refuse=_refuse_cast)
def cast_like(node: Node) -> np.ndarray:
    """The input in the type of ``target_type`` (see ``_cast``)."""
    return _cast(node)


def _omitted(node: Node, position: int) -> bool:
    return position >= len(node.in_shapes) or node.in_shapes[position] is None


def _refuse_training(node: Node) -> str | None:
    """Why this Dropout would drop values at random (training, with a ratio above 0), or None: before opset
    7 with ``is_test=0`` (the default) and a ``ratio`` attribute (0.5 by default) above 0; from opset 12
    with a true ``training_mode`` input and a ``ratio`` input (0.5 if omitted) above 0. An input not known
    yet (at import) is checked when the node runs."""
    if node.opset < 7:
        ratio = node.attr("ratio", 0.5)
        return None if node.attr("is_test", 0) or ratio == 0 else \
            f"is_test=0 (training) with ratio {ratio}: training drops values at random"
    if node.opset < 12 or _omitted(node, 2) or not node.given(2) or not np.asarray(node.raw(2)).item():
        return None
    if _omitted(node, 1):
        ratio = 0.5
    elif node.given(1):
        ratio = float(node.arg(1))
    else:
        return None
    return None if ratio == 0 else \
        f"training_mode is true with ratio {ratio}: training drops values at random"


@operator("Dropout", attrs=("ratio", "seed", "is_test", *IN_PLACE), outputs=("output", "mask"),
          refuse=_refuse_training)
def dropout(node: Node) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Inference (and training with ratio 0) keeps every value: the output is the input, the mask (when
    asked for) all true. Training with a ratio above 0 drops values at random: refused."""
    reason = _refuse_training(node)
    if reason:
        raise OperatorError(reason)
    x = node.arg(0)
    return (x, np.ones(x.shape, bool)) if node.wants(1) else x
