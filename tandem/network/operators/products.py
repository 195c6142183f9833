"""The tensor products beyond MatMul and Gemm: Einsum (numpy's einsum on the exact operands, its equation
checked against ONNX's grammar and the operands' ranks), MatMulInteger (exact int32 sums of zero-pointed
8-bit operands) and QLinearMatMul (those sums requantized to 8 bits as onnxruntime does)."""

from __future__ import annotations

import re

import numpy as np

from compiler.ops import reference
from tandem.network.operators.registry import Node, OperatorError, operator

#: one term of an Einsum equation: letters, at most one ellipsis among them
TERM = re.compile(r"[A-Za-z]*(\.\.\.)?[A-Za-z]*")


def zero_pointed(node: Node, value: int, zero: int) -> np.ndarray:
    """Operand ``value`` less its per-tensor zero point (operand ``zero``: one value; 0 if omitted)."""
    if not node.given(zero):
        return node.arg(value)
    point = node.arg(zero)
    if point.size != 1:
        raise OperatorError(f"zero point {zero} of shape {list(point.shape)}: {node.op} takes one value for "
                            f"input {value}")
    return node.arg(value) - point.reshape(())


def requantized(node: Node, acc: np.ndarray, a_scale: np.ndarray, b_scale: np.ndarray, y_scale: int,
                y_zero: int) -> np.ndarray:
    """Integer sums ``acc`` of two quantized operands (scales ``a_scale`` and ``b_scale``, broadcast over
    ``acc``) as the 8-bit output type with the scale at input ``y_scale`` and the zero point at ``y_zero``:
    ``acc * (a_scale * b_scale / y_scale)`` (the multiplier in float32, as onnxruntime computes it),
    rounded half to even, plus the zero point, saturated to the output type."""
    f32 = np.float32
    multiplier = np.asarray(a_scale, f32) * np.asarray(b_scale, f32) / np.asarray(node.raw(y_scale), f32)
    zero = node.arg(y_zero).reshape(()) if node.given(y_zero) else 0
    bounds = np.iinfo(node.dtypes[0])
    return reference.requantize_scaled(acc, multiplier, zero, int(bounds.min), int(bounds.max))


def _per_line(node: Node, position: int, operand: np.ndarray, lines: int) -> np.ndarray:
    """A matrix product operand's zero point or scale (input ``position``; 0 if omitted) shaped to
    broadcast over ``operand``: one value; a vector of one per row (``lines`` -2: the left operand
    [..., M, K]) or per column (``lines`` -1: the right one [..., K, N]); or the operand's shape with K
    made 1."""
    if not node.given(position):
        return np.zeros((), np.int64)
    v = np.asarray(node.raw(position))
    if v.size == 1:
        return v.reshape(())
    if operand.ndim > 1 and v.ndim == 1 and v.size == operand.shape[lines]:
        return v.reshape(-1, 1) if lines == -2 else v
    expected = list(operand.shape)
    if operand.ndim > 1:
        expected[-1 if lines == -2 else -2] = 1
    if operand.ndim > 1 and list(v.shape) == expected:
        return v
    raise OperatorError(f"input {position} of shape {list(v.shape)}: {node.op} takes one value, one per "
                        f"{'row' if lines == -2 else 'column'} or the shape {expected}")


@operator("MatMulInteger")
def matmul_integer(node: Node) -> np.ndarray:
    """``(A - a_zero_point) @ (B - b_zero_point)`` with MatMul's broadcasting, exact (int32): A's zero
    point per tensor or per row, B's per tensor or per column (``_per_line``)."""
    a, b = node.arg(0), node.arg(1)
    return np.matmul(a - _per_line(node, 2, a, -2), b - _per_line(node, 3, b, -1))


@operator("QLinearMatMul")
def qlinear_matmul(node: Node) -> np.ndarray:
    """MatMulInteger's sums of ``a`` (input 0; scale 1, zero point 2: per tensor or per row) by ``b`` (3;
    scale 4, zero point 5: per tensor or per column), requantized to ``y``'s scale (6) and zero point (7)
    (``requantized``)."""
    a, b = node.arg(0), node.arg(3)
    acc = np.matmul(a - _per_line(node, 2, a, -2), b - _per_line(node, 5, b, -1))
    return requantized(node, acc, _per_line(node, 1, a, -2), _per_line(node, 4, b, -1), 6, 7)


def einsum_terms(equation: str, ranks: list[int | None]) -> str:
    """``equation`` without spaces, checked as ONNX defines an Einsum's: comma-separated terms of letters
    (at most one ellipsis each), one per operand, each with as many axes as its operand's rank (None:
    not known) counting the ellipsis' axes, optionally ``->`` and an output term of letters that occur on
    the left, each once; an OperatorError naming what is wrong otherwise."""
    eq = equation.replace(" ", "")
    left, arrow, right = eq.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks):
        raise OperatorError(f"equation {equation!r} has {len(terms)} input terms for {len(ranks)} inputs")
    for term in (*terms, *([right] if arrow else [])):
        if not TERM.fullmatch(term):
            raise OperatorError(f"equation {equation!r}: term {term!r} is not letters with at most one "
                                f"ellipsis")
    for k, (term, rank) in enumerate(zip(terms, ranks, strict=True)):
        letters = len(term.replace("...", ""))
        if rank is not None and (letters > rank if "..." in term else letters != rank):
            raise OperatorError(f"equation {equation!r}: term {term!r} does not fit input {k} of rank {rank}")
    if arrow:
        outs = right.replace("...", "")
        missing = sorted(set(outs) - set(left))
        if missing or len(set(outs)) != len(outs):
            raise OperatorError(f"equation {equation!r}: its output term {right!r} repeats a letter or names "
                                f"one no input has ({', '.join(missing) or 'repeated'})")
        if "..." in right and "..." not in left:
            raise OperatorError(f"equation {equation!r}: its output has an ellipsis no input has")
    return eq


def _refuse_einsum(node: Node) -> str | None:
    equation = node.attr("equation")
    if equation is None:
        return "the attribute equation is required"
    ranks = [None if k >= len(node.in_shapes) or node.in_shapes[k] is None else len(node.in_shapes[k])
             for k in range(len(node.args))]
    try:
        einsum_terms(equation, ranks)
    except OperatorError as exc:
        return str(exc)
    return None


@operator("Einsum", attrs=("equation",), refuse=_refuse_einsum)
def einsum(node: Node) -> np.ndarray:
    """``output[out-term] = sum(input1[term1] * input2[term2] * ...)`` over the letters not in the output
    (implicit output: the letters that occur once, in ASCII order, after the ellipsis' axes), exact: numpy's
    einsum, whose grammar is ONNX's."""
    args = [node.arg(k) for k in range(len(node.args))]
    equation = einsum_terms(node.attr("equation"), [a.ndim for a in args])
    try:
        return np.asarray(np.einsum(equation, *args))
    except ValueError as exc:   # sizes of one letter that differ, ellipses that do not broadcast
        raise OperatorError(f"equation {node.attr('equation')!r}: {exc}") from None
