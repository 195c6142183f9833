"""The element-wise operators, with ONNX's (numpy's) multidirectional broadcasting, on floating-point
(computed in float64) and integer tensors (int64, wrapped to the declared type by the caller)."""

from __future__ import annotations

import numpy as np

from compiler.ops import reference
from tandem.network.operators.registry import Node, operator


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
