"""The indexing operators: Gather, GatherElements and GatherND read the positions an index tensor lists;
ScatterElements, ScatterND (and Scatter, ScatterElements' deprecated name) write there, replacing or
reducing (add, mul, max, min); Compress keeps the slices a condition selects. Negative indices count from
the end; an index out of range is an OperatorError, as is a duplicate index where ONNX leaves the result
to the order of the writes (``reduction`` none)."""

from __future__ import annotations

import math

import numpy as np

from tandem.network.operators.registry import Node, OperatorError, axis_of, operator


def _indices(node: Node, position: int, size: int | tuple[int, ...]) -> np.ndarray:
    """Operand ``position`` as int64 indices into an axis of ``size`` (or, for a trailing axis of k
    indices, into the k axes of ``size``): negative ones count from the end; one outside [-size, size) is
    an OperatorError."""
    index = node.arg(position)
    if index.dtype.kind not in "iu":
        raise OperatorError(f"indices of type {index.dtype}: ONNX's are int32 or int64")
    bound = np.asarray(size, np.int64)
    if index.size and ((index < -bound).any() or (index >= bound).any()):
        raise OperatorError(f"an index of {index.reshape(-1).tolist()[:8]} is out of range for size "
                            f"{np.asarray(size).tolist()}")
    return np.where(index < 0, index + bound, index)


@operator("Gather", attrs=("axis",))
def gather(node: Node) -> np.ndarray:
    """The slices of ``data`` along ``axis`` (default 0) at the indices, the indices' shape taking that
    axis's place."""
    x = node.arg(0)
    axis = axis_of(node.attr("axis", 0), x.ndim)
    return np.take(x, _indices(node, 1, x.shape[axis]), axis=axis)


@operator("GatherElements", attrs=("axis",))
def gather_elements(node: Node) -> np.ndarray:
    """``out[i][j][k] = data[index[i][j][k]][j][k]`` (axis 0; likewise along any ``axis``): the indices'
    shape, of ``data``'s rank, no larger than ``data`` along the other axes."""
    x = node.arg(0)
    axis = axis_of(node.attr("axis", 0), x.ndim)
    index = _indices(node, 1, x.shape[axis])
    _within(index.shape, x.shape, axis, "indices")
    window = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))
    return np.take_along_axis(x[window], index, axis=axis)


def _within(inner: tuple[int, ...], outer: tuple[int, ...], axis: int, what: str) -> None:
    """``inner`` has ``outer``'s rank and is no larger along any axis but ``axis``."""
    if len(inner) != len(outer) or any(i > o for d, (i, o) in enumerate(zip(inner, outer, strict=True))
                                       if d != axis):
        raise OperatorError(f"{what} of shape {list(inner)} do not fit data of shape {list(outer)} (the same "
                            f"rank, no larger except along axis {axis})")


@operator("GatherND", attrs=("batch_dims",))
def gather_nd(node: Node) -> np.ndarray:
    """Each k-tuple of the indices' last axis picks ``data[b..., i1, ..., ik]`` (a slice of the remaining
    axes) within its batch: the first ``batch_dims`` axes (default 0, opset 12 on) of both operands match.
    The output's shape is the indices' without their last axis, then ``data``'s after the k indexed."""
    x, b = node.arg(0), node.attr("batch_dims", 0)
    shape = np.shape(node.raw(1))
    k = shape[-1] if shape else 0
    if not (0 <= b < min(len(shape), x.ndim) and x.shape[:b] == shape[:b] and 1 <= k <= x.ndim - b):
        raise OperatorError(f"data {list(x.shape)}, indices {list(shape)} and batch_dims {b}: the batch axes "
                            f"must match and the last axis of the indices hold 1 to {x.ndim - b} indices")
    index = _indices(node, 1, x.shape[b:b + k])
    batches = math.prod(x.shape[:b])
    tuples = index.reshape(batches, -1, k)
    rows = np.arange(batches).reshape(-1, 1)
    picked = x.reshape(batches, *x.shape[b:])[(rows, *(tuples[..., j] for j in range(k)))]
    return picked.reshape(shape[:-1] + x.shape[b + k:])


REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _refuse_reduction(node: Node) -> str | None:
    """ONNX's reductions: none, add and mul from opset 16, max and min from 18."""
    allowed = ("none", "add", "mul", "max", "min") if node.opset >= 18 else ("none", "add", "mul")
    reduction = node.attr("reduction", "none")
    return None if reduction in allowed else f"reduction {reduction!r} is not one of {', '.join(allowed)} " \
                                             f"(opset {node.opset})"


def _scatter(data: np.ndarray, where: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str
             ) -> np.ndarray:
    """A copy of ``data`` with ``updates`` written at ``where`` (index arrays into its leading axes), each
    replacing (none) or reduced into what is there; duplicate positions with none are an OperatorError
    (ONNX leaves the result to the order of the writes)."""
    out = data.copy()
    if reduction != "none":
        REDUCTIONS[reduction].at(out, where, updates)
        return out
    flat = np.ravel_multi_index(where, data.shape[:len(where)]).reshape(-1) if where[0].size else where[0]
    if len(np.unique(flat)) != flat.size:
        raise OperatorError("duplicate indices with reduction none: ONNX leaves the result to the order of "
                            "the writes")
    out[where] = updates
    return out


def _scatter_elements(node: Node) -> np.ndarray:
    """``out[index[i][j]][j] = updates[i][j]`` (axis 0; likewise along any ``axis``), or reduced into it;
    ``indices`` and ``updates`` of one shape, of ``data``'s rank, no larger except along ``axis``."""
    x, updates = node.arg(0), node.arg(2)
    axis = axis_of(node.attr("axis", 0), x.ndim)
    index = _indices(node, 1, x.shape[axis])
    if index.shape != updates.shape:
        raise OperatorError(f"indices of shape {list(index.shape)} and updates of shape "
                            f"{list(updates.shape)} differ")
    _within(index.shape, x.shape, axis, "indices")
    where = list(np.indices(index.shape, sparse=True))
    where[axis] = index
    where = [np.broadcast_to(w, index.shape) for w in where]
    return _scatter(x, tuple(where), updates, node.attr("reduction", "none"))


operator("ScatterElements", attrs=("axis", "reduction"), refuse=_refuse_reduction)(_scatter_elements)
operator("Scatter", attrs=("axis",))(_scatter_elements)


@operator("ScatterND", attrs=("reduction",), refuse=_refuse_reduction)
def scatter_nd(node: Node) -> np.ndarray:
    """Each k-tuple of the indices' last axis names ``data[i1, ..., ik]`` (a slice of the remaining axes),
    which the matching slice of ``updates`` (the indices' shape without the last axis, then ``data``'s
    after the k) replaces or is reduced into."""
    x, updates = node.arg(0), node.arg(2)
    shape = np.shape(node.raw(1))
    k = shape[-1] if shape else 0
    if not 1 <= k <= x.ndim or updates.shape != shape[:-1] + x.shape[k:]:
        raise OperatorError(f"data {list(x.shape)}, indices {list(shape)} and updates {list(updates.shape)}: "
                            f"updates must be shaped indices.shape[:-1] + data.shape[k:]")
    tuples = _indices(node, 1, x.shape[:k]).reshape(-1, k)
    where = tuple(tuples[:, j] for j in range(k))
    return _scatter(x, where, updates.reshape(-1, *x.shape[k:]), node.attr("reduction", "none"))


@operator("Compress", attrs=("axis",))
def compress(node: Node) -> np.ndarray:
    """The slices along ``axis`` (without it: the elements of the flattened input) whose entry of the
    boolean ``condition`` is true; a condition shorter than the axis drops the rest."""
    x, condition = node.arg(0), node.arg(1).astype(bool).reshape(-1)
    axis = node.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis_of(axis, x.ndim)
    if condition.size > x.shape[axis]:
        raise OperatorError(f"a condition of {condition.size} entries for an axis of size {x.shape[axis]}")
    return np.compress(condition, x, axis=axis)
