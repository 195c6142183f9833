"""The layers the run flows take, one type per kind: a conv2d is a ``compiler.ops.nn.ConvShape``, a GEMM a
``compiler.ops.nn.GemmShape``. Each target packs them in its own layouts with functions of its own
(tandem/flows/cpu_layers.py, tandem/flows/vita_layers.py); what every target reads of a layer the same way is
here: its operator's name, its report parameters, its plain arrays' shapes and numpy's exact result.

Plain layouts: a conv2d's data is NCHW and its weights OIHW; a GEMM's data is ``[M, K]`` and its weights
``[N, K]`` (``out = data @ weight.T``).
"""

from __future__ import annotations

import numpy as np

from compiler.ops import reference
from compiler.ops.nn import ConvShape, GemmShape

#: a layer of the run flows
Layer = ConvShape | GemmShape


def op_of(layer: Layer) -> str:
    """The operator ``run`` runs ``layer`` as: ``conv2d`` or ``gemm``."""
    return "gemm" if isinstance(layer, GemmShape) else "conv2d"


def params(layer: Layer) -> dict[str, int]:
    """``layer`` as the report's parameters (and ``run``'s): ``M N K``, or ``H W IC OC K S P`` with ``N``
    first where there is more than one image."""
    if isinstance(layer, GemmShape):
        return {"M": layer.m, "N": layer.n, "K": layer.k}
    images = {"N": layer.n} if layer.n != 1 else {}
    return {**images, "H": layer.h, "W": layer.w, "IC": layer.ic, "OC": layer.oc, "K": layer.k, "S": layer.s,
            "P": layer.p}


def plain_shapes(layer: Layer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of ``layer``'s data and weights in the plain layouts (NCHW and OIHW, or [M, K] and
    [N, K])."""
    if isinstance(layer, GemmShape):
        return (layer.m, layer.k), (layer.n, layer.k)
    return (layer.n, layer.ic, layer.h, layer.w), (layer.oc, layer.ic, layer.k, layer.k)


def channels(layer: Layer) -> int:
    """``layer``'s output channels, which a bias has one value each of: a conv2d's OC, a GEMM's N."""
    return layer.n if isinstance(layer, GemmShape) else layer.oc


def exact(layer: Layer, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """numpy's result of ``layer`` on plain ``data`` and ``weight`` (``compiler.ops.reference``; integers
    summed in int64, floats in float64)."""
    if isinstance(layer, GemmShape):
        return reference.dense(data, weight)
    return reference.conv2d(data, weight, layer.s, layer.p)
