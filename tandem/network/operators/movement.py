"""The data-movement operators: they move or view values without computing new ones."""

from __future__ import annotations

import math

import numpy as np

from compiler.ops import reference
from tandem.network.operators.registry import Node, OperatorError, axis_of, operator


@operator("Flatten", attrs=("axis",))
def flatten(node: Node) -> np.ndarray:
    x = node.arg(0)
    axis = node.attr("axis", 1)
    if not -x.ndim <= axis <= x.ndim:
        raise OperatorError(f"axis {axis} is out of range for a tensor of rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@operator("Reshape", attrs=("allowzero",))
def reshape(node: Node) -> np.ndarray:
    """A target shape's 0 copies the input's size there (with ``allowzero=1``: a size of zero); one -1 is
    inferred."""
    x, target = node.arg(0), list(node.ints(1))
    if not node.attr("allowzero", 0):
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)]
    try:
        return x.reshape(target)
    except ValueError:
        raise OperatorError(f"cannot reshape {list(x.shape)} to {list(node.ints(1))}") from None


@operator("Transpose", attrs=("perm",))
def transpose(node: Node) -> np.ndarray:
    x = node.arg(0)
    perm = node.attr("perm", list(range(x.ndim))[::-1])
    if sorted(perm) != list(range(x.ndim)):
        raise OperatorError(f"perm {list(perm)} is not a permutation of {x.ndim} axes")
    return np.transpose(x, perm)


@operator("Concat", attrs=("axis",))
def concat(node: Node) -> np.ndarray:
    parts = [node.arg(k) for k in range(len(node.args)) if node.given(k)]
    return reference.concat(parts, axis=axis_of(node.attr("axis", 0), parts[0].ndim))
