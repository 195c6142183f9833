"""ONNX operators as Tandem's float reference computes them (the import of tandem/network/graph.py and the
evaluation of every layer): the table in registry.py, one module per family."""

from tandem.network.operators import (  # noqa: F401  (each registers its operators)
    conv,
    elementwise,
    indexing,
    movement,
    nn,
    normalization,
    products,
    reduce,
    resize,
    shape,
)
from tandem.network.operators.registry import OPERATORS, Node, Operator, OperatorError, compute

__all__ = ["OPERATORS", "Node", "Operator", "OperatorError", "compute"]
