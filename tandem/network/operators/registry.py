"""The table of ONNX operators Tandem's float reference computes, and what an operator's function sees.

An entry (``Operator``) names the attributes the operator implements (a node with any other attribute is
refused by name at import: an attribute is never ignored), how many outputs it computes (a node that asks
for more is refused, naming the output), a check of attribute values it does not take (``refuse``: the
reason, or None) and its function. A function receives a ``Node`` (the node's attributes, opset, its
operands as exact arrays: float64 for floating point, int64 for integers) and returns its outputs, exact;
the caller rounds them to the types ONNX shape inference declares.

    @operator("Relu")
    def relu(node: Node) -> np.ndarray:
        return np.maximum(node.arg(0), 0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Outputs = np.ndarray | tuple[np.ndarray, ...]


class OperatorError(Exception):
    """A node an operator cannot compute (an attribute value, an operand's rank or type): the caller
    names the node and the file."""


@dataclass(frozen=True)
class Node:
    """One node as an operator's function sees it: ``op``, ``attrs`` (decoded: bytes as str), ``opset``
    (the default domain's version the model was written for), ``args`` (its operands in order, None where
    omitted or not known yet), ``shapes`` and ``dtypes`` (its outputs' as ONNX inference declares them)
    ``in_shapes`` (its operands' shapes, None where omitted) and ``wanted`` (whether each output is
    asked for: an omitted optional output need not be computed)."""

    op: str
    attrs: dict[str, Any]
    opset: int
    args: tuple[np.ndarray | None, ...]
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[np.dtype, ...] = ()
    in_shapes: tuple[tuple[int, ...] | None, ...] = field(default=())
    wanted: tuple[bool, ...] = field(default=(True,))

    def wants(self, position: int) -> bool:
        """Whether output ``position`` is asked for."""
        return position < len(self.wanted) and self.wanted[position]

    def given(self, position: int) -> bool:
        """Whether operand ``position`` is present (ONNX's empty name omits an optional input)."""
        return position < len(self.args) and self.args[position] is not None

    def raw(self, position: int) -> np.ndarray:
        """Operand ``position`` as the model holds it."""
        if not self.given(position):
            raise OperatorError(f"{self.op}: input {position} is required")
        return self.args[position]

    def arg(self, position: int) -> np.ndarray:
        """Operand ``position``, exact: float64 for a floating-point tensor (ml_dtypes' bfloat16 and 8-bit
        floats too), int64 for an integer one (bool as is)."""
        x = np.asarray(self.raw(position))
        if x.dtype.kind == "f" or x.dtype.name.startswith(("bfloat16", "float8", "float4")):
            return x.astype(np.float64)
        if x.dtype.kind in "iu":
            return x.astype(np.int64)
        return x

    def ints(self, position: int) -> tuple[int, ...]:
        """Operand ``position`` (a constant list of integers: axes, a shape) as a tuple."""
        return tuple(int(v) for v in np.asarray(self.raw(position)).reshape(-1))

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def rank(self, position: int = 0) -> int:
        """The rank of operand ``position`` (from its shape, whether or not its values are known)."""
        if position < len(self.in_shapes) and self.in_shapes[position] is not None:
            return len(self.in_shapes[position])
        return np.ndim(self.raw(position))


@dataclass(frozen=True)
class Operator:
    """One operator: its ``name``, ``compute`` (Node -> outputs), the ``attrs`` it implements, the
    ``outputs`` it computes (their names, for the refusal of one it does not), and ``refuse`` (Node ->
    the reason it cannot compute these attribute values, or None)."""

    name: str
    compute: Callable[[Node], Outputs]
    attrs: frozenset[str]
    outputs: tuple[str, ...]
    refuse: Callable[[Node], str | None] | None = None
    #: a function of its operands' shapes alone (Shape, Size): folded to a constant at import
    static: bool = False

    def refusal(self, node: Node, requested: Sequence[str]) -> str | None:
        """Why ``node`` (asking for the outputs ``requested``, "" where omitted) cannot be computed: an
        attribute not implemented, an output not computed, an attribute value refused; None if it can."""
        unknown = sorted(set(node.attrs) - self.attrs)
        if unknown:
            takes = ", ".join(sorted(self.attrs)) or "none"
            return (f"attribute {unknown[0]!r} is not implemented by Tandem's {self.name} (it takes: "
                    f"{takes})")
        for position, name in enumerate(requested):
            if name and position >= len(self.outputs):
                return f"output {position} ({name}) is not computed: Tandem's {self.name} computes " \
                       f"{', '.join(self.outputs)}"
        return self.refuse(node) if self.refuse is not None else None


OPERATORS: dict[str, Operator] = {}


def operator(name: str, attrs: Sequence[str] = (), outputs: Sequence[str] = ("Y",),
             refuse: Callable[[Node], str | None] | None = None, static: bool = False
             ) -> Callable[[Callable[[Node], Outputs]], Callable[[Node], Outputs]]:
    """Register the decorated function as operator ``name`` (see ``Operator``)."""
    def register(compute: Callable[[Node], Outputs]) -> Callable[[Node], Outputs]:
        if name in OPERATORS:
            raise ValueError(f"operator {name} is registered twice")
        OPERATORS[name] = Operator(name, compute, frozenset(attrs), tuple(outputs), refuse, static)
        return compute
    return register


def compute(node: Node) -> tuple[np.ndarray, ...]:
    """``node``'s outputs, exact, as a tuple (an operator returning one array gives a tuple of one)."""
    out = OPERATORS[node.op].compute(node)
    return out if isinstance(out, tuple) else (out,)


def axis_of(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` (negative counts from the end) as an index into ``rank`` axes; out of range is an
    OperatorError."""
    if not -rank <= axis < max(rank, 1):
        raise OperatorError(f"{what} {axis} is out of range for a tensor of rank {rank}")
    return axis % max(rank, 1)
