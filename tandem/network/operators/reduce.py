"""The reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSum and ReduceLogSumExp over a set of axes; ArgMax and ArgMin along one.

A reduction's axes are its ``axes`` attribute before opset 18 (ReduceSum: 13) and its optional second input
from there; none given reduces every axis, or none with ``noop_with_empty_axes=1`` (a reduction over no axes
leaves each value alone: ReduceSumSquare then squares, ReduceLogSum takes the logarithm). ``keepdims`` (1 by
default) keeps the reduced axes with size 1. A reduction over no values (an axis of size 0) gives what ONNX
defines: 0 for the sums and norms, 1 for the product, the type's lowest value for the maximum (-inf, the
least integer, false) and its highest for the minimum, -inf for the logarithms, NaN for the mean
(undefined in ONNX).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tandem.network.operators.elementwise import ieee
from tandem.network.operators.registry import Node, OperatorError, axis_of, operator

#: the opset from which a reduction's axes are its second input (18 for those not listed)
AXES_INPUT_SINCE = {"ReduceSum": 13}

Reduction = Callable[[np.ndarray, tuple[int, ...], bool, np.dtype], np.ndarray]


def _since(node: Node) -> int:
    return AXES_INPUT_SINCE.get(node.op, 18)


def _refuse_axes(node: Node) -> str | None:
    """The axes as the node's opset gives them: an attribute before ``_since``, an input from it."""
    since = _since(node)
    if node.opset >= since and "axes" in node.attrs:
        return f"attribute axes: from opset {since} {node.op}'s axes are its second input"
    if node.opset < since and "noop_with_empty_axes" in node.attrs:
        return f"attribute noop_with_empty_axes is {node.op}'s from opset {since}"
    if node.opset < since and len(node.in_shapes) > 1 and node.in_shapes[1] is not None:
        return f"an axes input: before opset {since} {node.op}'s axes are its attribute"
    return None


def reduction_axes(node: Node) -> tuple[int, ...]:
    """The axes ``node`` reduces, each in range and named once: those given (by the attribute or the
    input, as its opset says), else every axis, or none with ``noop_with_empty_axes=1``."""
    rank = node.rank(0)
    if node.opset >= _since(node):
        axes = node.ints(1) if node.given(1) else ()
    else:
        axes = tuple(node.attr("axes", ()))
    if not axes:
        return () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    resolved = tuple(axis_of(axis, rank, "axes entry") for axis in axes)
    if len(set(resolved)) != len(resolved):
        raise OperatorError(f"axes {list(axes)} name an axis twice")
    return resolved


def reduction(name: str) -> Callable[[Reduction], Reduction]:
    """Register the decorated ``f(x, axes, keepdims, dtype)`` (``x`` exact, ``dtype`` the declared
    output's) as the reduction ``name``."""
    def register(f: Reduction) -> Reduction:
        @ieee
        def compute(node: Node) -> np.ndarray:
            return f(node.arg(0), reduction_axes(node), bool(node.attr("keepdims", 1)), node.dtypes[0])
        compute.__doc__ = f.__doc__
        operator(name, attrs=("axes", "keepdims", "noop_with_empty_axes"), refuse=_refuse_axes)(compute)
        return f
    return register


@reduction("ReduceSum")
def reduce_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The sum (0 over no values)."""
    return np.sum(x, axis=axes, keepdims=keepdims)


@reduction("ReduceMean")
def reduce_mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The mean (an integer's truncated toward zero by the conversion to its type)."""
    return np.mean(x, axis=axes, keepdims=keepdims)


@reduction("ReduceProd")
def reduce_prod(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The product (1 over no values)."""
    return np.prod(x, axis=axes, keepdims=keepdims)


@reduction("ReduceL1")
def reduce_l1(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The sum of the magnitudes."""
    return np.sum(np.abs(x), axis=axes, keepdims=keepdims)


@reduction("ReduceL2")
def reduce_l2(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The square root of the sum of the squares."""
    return np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdims))


@reduction("ReduceSumSquare")
def reduce_sum_square(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The sum of the squares."""
    return np.sum(x * x, axis=axes, keepdims=keepdims)


@reduction("ReduceLogSum")
def reduce_log_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The natural logarithm of the sum (-inf over no values)."""
    return np.log(np.sum(x, axis=axes, keepdims=keepdims))


@reduction("ReduceLogSumExp")
def reduce_log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """log(sum(exp(x))), computed shifted by the finite maximum (-inf over no values)."""
    x = x.astype(np.float64)
    top = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True)) + shift
    return out if keepdims else np.squeeze(out, axis=axes)


def _extreme(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype, largest: bool
             ) -> np.ndarray:
    """The maximum (``largest``) or minimum; over no values the lowest (highest) value of ``dtype``."""
    if x.size:
        return (np.max if largest else np.min)(x, axis=axes, keepdims=keepdims)
    if dtype.kind == "b":
        fill = not largest
    elif dtype.kind in "iu":
        fill = np.iinfo(dtype).min if largest else np.iinfo(dtype).max
    else:
        fill = -np.inf if largest else np.inf
    return np.full(np.sum(x, axis=axes, keepdims=keepdims).shape, fill, dtype)


@reduction("ReduceMax")
def reduce_max(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The maximum (NaN if any value is)."""
    return _extreme(x, axes, keepdims, dtype, largest=True)


@reduction("ReduceMin")
def reduce_min(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The minimum (NaN if any value is)."""
    return _extreme(x, axes, keepdims, dtype, largest=False)


def _index(node: Node, find: Callable[..., np.ndarray]) -> np.ndarray:
    """Where ``find`` (np.argmax, np.argmin) finds its value along ``axis`` (0 by default): the first
    such index, the last with ``select_last_index=1``; ``keepdims`` (1 by default) keeps the axis."""
    x = node.arg(0)
    if x.ndim == 0:
        raise OperatorError(f"{node.op} of a scalar (it searches along an axis)")
    axis = axis_of(node.attr("axis", 0), x.ndim)
    if x.shape[axis] == 0:
        raise OperatorError(f"{node.op} along axis {axis} of size 0 (no values to search)")
    if node.attr("select_last_index", 0):
        index = x.shape[axis] - 1 - find(np.flip(x, axis), axis=axis)
    else:
        index = find(x, axis=axis)
    return np.expand_dims(index, axis) if node.attr("keepdims", 1) else index


@operator("ArgMax", attrs=("axis", "keepdims", "select_last_index"))
def arg_max(node: Node) -> np.ndarray:
    """The index of the maximum along ``axis`` (see ``_index``)."""
    return _index(node, np.argmax)


@operator("ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def arg_min(node: Node) -> np.ndarray:
    """The index of the minimum along ``axis`` (see ``_index``)."""
    return _index(node, np.argmin)
