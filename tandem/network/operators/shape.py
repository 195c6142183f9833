"""The operators computed from shapes and positions rather than from values: Shape and Size (functions of
their operand's shape alone, folded to constants at import), ConstantOfShape, Range, EyeLike, Trilu,
OneHot and NonZero. NonZero's output size depends on the values: a model must declare it (an unknown shape
is refused at import) and a result of another size is refused when it is computed."""

from __future__ import annotations

import math

import numpy as np

from tandem.network.operators.registry import Node, OperatorError, axis_of, operator


def _shape(node: Node, position: int = 0) -> tuple[int, ...]:
    """Operand ``position``'s shape, whether or not its values are known."""
    if position < len(node.in_shapes) and node.in_shapes[position] is not None:
        return tuple(node.in_shapes[position])
    return np.shape(node.raw(position))


def _clamped(axis: int, rank: int) -> int:
    """A Shape bound: negative counts from the end, then clamped to [0, rank]."""
    return min(max(axis + rank if axis < 0 else axis, 0), rank)


@operator("Shape", attrs=("start", "end"), static=True)
def shape(node: Node) -> np.ndarray:
    """The operand's shape (int64), from axis ``start`` (default 0) to ``end`` (exclusive, default the
    rank; opset 15 on), each clamped to [0, rank] after a negative one has the rank added."""
    dims = _shape(node)
    start, end = _clamped(node.attr("start", 0), len(dims)), _clamped(node.attr("end", len(dims)), len(dims))
    return np.array(dims[start:end], np.int64)


@operator("Size", static=True)
def size(node: Node) -> np.ndarray:
    """The operand's number of elements, an int64 scalar."""
    return np.array(math.prod(_shape(node)), np.int64)


@operator("ConstantOfShape", attrs=("value",))
def constant_of_shape(node: Node) -> np.ndarray:
    """A tensor of the shape the input lists (an empty list: a scalar) filled with ``value`` (a
    one-element tensor; default a float32 0)."""
    from onnx import numpy_helper

    dims = node.ints(0)
    if min(dims, default=0) < 0:
        raise OperatorError(f"shape {list(dims)} has a negative size")
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else numpy_helper.to_array(value).reshape(-1)
    if fill.size != 1:
        raise OperatorError(f"value holds {fill.size} elements, not one")
    return np.full(dims, fill[0])


#: the stash types (TensorProto's FLOAT, DOUBLE) whose arithmetic Range's exact result and single rounding
#: stands for
RANGE_STASH = (1, 11)


@operator("Range", attrs=("stash_type",))
def range_(node: Node) -> np.ndarray:
    """``start + i * delta`` for i below ``max(ceil((limit - start) / delta), 0)``, computed exactly and
    rounded once to the output type. Opset 27's ``stash_type`` (float16 and bfloat16 outputs computed in
    float, the default, or double) rounds the same."""
    start, limit, delta = (_number(node, k) for k in range(3))
    stash = node.attr("stash_type", 1)
    if stash not in RANGE_STASH and node.dtypes and node.dtypes[0].name in ("float16", "bfloat16"):
        raise OperatorError(f"stash_type {stash}: Tandem computes a {node.dtypes[0].name} Range exactly, "
                            f"as float (1) or double (11) does")
    if delta == 0:
        raise OperatorError("delta is 0")
    span = limit - start
    count = max(-(-span // delta) if span.dtype.kind == "i" else math.ceil(span / delta), 0)
    return start + np.arange(count, dtype=span.dtype) * delta


def _number(node: Node, position: int) -> np.ndarray:
    """A scalar operand, exact: an int64 or float64 (bfloat16 widened too) 0-d array."""
    x = np.asarray(node.raw(position))
    if x.size != 1:
        raise OperatorError(f"input {position} holds {x.size} values, not one")
    return x.reshape(()).astype(np.int64 if x.dtype.kind in "iu" else np.float64)


@operator("EyeLike", attrs=("dtype", "k"))
def eye_like(node: Node) -> np.ndarray:
    """Ones on diagonal ``k`` (default 0, the main one; above it for k > 0) of a matrix of the input's
    shape, zeros elsewhere, in type ``dtype`` (default the input's; ONNX inference declares it)."""
    dims = _shape(node)
    if len(dims) != 2:
        raise OperatorError(f"an input of shape {list(dims)}: EyeLike takes a matrix")
    return np.eye(*dims, k=node.attr("k", 0))


@operator("Trilu", attrs=("upper",))
def trilu(node: Node) -> np.ndarray:
    """The upper (``upper=1``, the default: on and above diagonal ``k``) or lower (on and below it)
    triangle of each matrix of the last two axes, zeros elsewhere; ``k`` (an optional scalar input,
    default 0) counts diagonals above the main one."""
    x = node.arg(0)
    if x.ndim < 2:
        raise OperatorError(f"an input of rank {x.ndim}: Trilu takes matrices (rank 2 or more)")
    k = int(_number(node, 1)) if node.given(1) else 0
    return np.triu(x, k) if node.attr("upper", 1) else np.tril(x, k)


@operator("OneHot", attrs=("axis",))
def one_hot(node: Node) -> np.ndarray:
    """A new axis of size ``depth`` inserted at ``axis`` (default -1, the last) of the indices' shape: at
    each index (negative ones from -depth count from the end) ``values[1]``, elsewhere ``values[0]``; an
    index outside [-depth, depth) is all ``values[0]``. Non-integer indices and depth are truncated to
    integers."""
    indices = node.arg(0)
    indices = indices if indices.dtype.kind == "i" else np.trunc(indices).astype(np.int64)
    depth = int(np.trunc(_number(node, 1)))
    values = node.arg(2).reshape(-1)
    if values.size != 2 or depth < 1:
        raise OperatorError(f"values of {values.size} elements and depth {depth}: [off, on] and a depth >= 1")
    axis = axis_of(node.attr("axis", -1), indices.ndim + 1)
    indices = np.where(indices < 0, indices + depth, indices)
    positions = np.arange(depth).reshape((-1,) + (1,) * (indices.ndim - axis))
    return np.where(np.expand_dims(indices, axis) == positions, values[1], values[0])


@operator("NonZero")
def non_zero(node: Node) -> np.ndarray:
    """The indices of the nonzero elements, row-major, as a [rank, count] int64 matrix (a scalar: [0,
    count])."""
    x = node.arg(0)
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), np.int64)
    return np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)
