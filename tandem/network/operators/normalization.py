"""The normalizations beyond BatchNormalization and LayerNormalization: InstanceNormalization,
GroupNormalization (opset 18's scale and bias per group, opset 21's per channel), LpNormalization,
MeanVarianceNormalization and LRN, each as ONNX defines it, computed in float64 (every statistic exact to
float64's rounding: at least as precise as any ``stash_type``)."""

from __future__ import annotations

import math

import numpy as np

from tandem.network.operators.nn import channel_vector
from tandem.network.operators.registry import Node, OperatorError, axis_of, operator

#: the stash types (TensorProto element types) whose precision float64 statistics give or exceed
STASH_TYPES = {1: "float32", 11: "float64"}


def _standardized(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(variance + eps)`` over ``axes`` (the biased variance)."""
    centered = x - x.mean(axis=axes, keepdims=True)
    return centered / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + eps)


def _feature_map(node: Node) -> np.ndarray:
    """Input 0, which must be [N, C, D1, ...]."""
    x = node.arg(0)
    if x.ndim < 3:
        raise OperatorError(f"input of rank {x.ndim}: {node.op} takes [N, C, D1, ...] (rank 3 or more)")
    return x


@operator("InstanceNormalization", attrs=("epsilon",))
def instance_norm(node: Node) -> np.ndarray:
    """Each instance's each channel normalized over its spatial axes (``epsilon`` default 1e-5), times
    ``scale`` [C] plus ``B`` [C]."""
    x = _feature_map(node)
    y = _standardized(x, tuple(range(2, x.ndim)), node.attr("epsilon", 1e-5))
    return y * channel_vector(node.arg(1), x.ndim) + channel_vector(node.arg(2), x.ndim)


def _refuse_group_norm(node: Node) -> str | None:
    if "num_groups" not in node.attrs:
        return "num_groups is required"
    stash = node.attr("stash_type", 1)
    if stash not in STASH_TYPES:
        return (f"stash_type {stash} (Tandem computes the statistics in float64: stash_type "
                f"{' or '.join(map(str, STASH_TYPES))})")
    return None


@operator("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"), refuse=_refuse_group_norm)
def group_norm(node: Node) -> np.ndarray:
    """The channels of each instance split into ``num_groups`` groups, each normalized over its channels
    and spatial axes (``epsilon`` default 1e-5), times ``scale`` plus ``bias``: one per group (opset 18), or
    one per channel (opset 21 on)."""
    x = _feature_map(node)
    n, c, *size = x.shape
    groups = node.attr("num_groups")
    if groups <= 0 or c % groups:
        raise OperatorError(f"num_groups {groups} does not divide the {c} channels")
    grouped = x.reshape(n, groups, c // groups, *size)
    y = _standardized(grouped, tuple(range(2, grouped.ndim)), node.attr("epsilon", 1e-5)).reshape(x.shape)
    scale, bias = node.arg(1), node.arg(2)
    per = groups if node.opset < 21 else c
    if scale.shape != (per,) or bias.shape != (per,):
        raise OperatorError(f"scale {list(scale.shape)} and bias {list(bias.shape)}: opset {node.opset} "
                            f"takes one per {'group' if node.opset < 21 else 'channel'} ({per})")
    if per != c:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    return y * channel_vector(scale, x.ndim) + channel_vector(bias, x.ndim)


@operator("LpNormalization", attrs=("axis", "p"),
          refuse=lambda node: f"p={node.attr('p')} (ONNX defines 1 and 2)" if node.attr("p", 2) not in (1, 2)
          else None)
def lp_norm(node: Node) -> np.ndarray:
    """``x`` over its L``p`` norm along ``axis`` (default -1; ``p`` 1 or 2, default 2); 0 where the norm
    is 0."""
    x = node.arg(0)
    axis = axis_of(node.attr("axis", -1), x.ndim)
    p = node.attr("p", 2)
    norm = (np.abs(x) ** p).sum(axis=axis, keepdims=True) ** (1.0 / p)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm != 0)


@operator("MeanVarianceNormalization", attrs=("axes",))
def mean_variance_norm(node: Node) -> np.ndarray:
    """``(x - mean) / (sqrt(variance) + 1e-9)`` over ``axes`` (default [0, 2, 3]; the biased variance; the
    epsilon of ONNX's function body)."""
    x = node.arg(0)
    axes = tuple(sorted({axis_of(a, x.ndim) for a in node.attr("axes", [0, 2, 3])}))
    centered = x - x.mean(axis=axes, keepdims=True)
    return centered / (np.sqrt((centered * centered).mean(axis=axes, keepdims=True)) + 1e-9)


@operator("LRN", attrs=("alpha", "beta", "bias", "size"),
          refuse=lambda node: None if "size" in node.attrs else "size is required")
def lrn(node: Node) -> np.ndarray:
    """``x / (bias + alpha / size * square_sum) ** beta``, ``square_sum`` the sum of the squares over the
    channels from ``c - floor((size - 1) / 2)`` to ``c + ceil((size - 1) / 2)`` (those that exist), and
    ``alpha``, ``beta``, ``bias`` default 1e-4, 0.75, 1."""
    x = node.arg(0)
    if x.ndim < 2:
        raise OperatorError(f"input of rank {x.ndim}: LRN takes [N, C, ...]")
    size = node.attr("size")
    before, after = math.floor((size - 1) / 2), math.ceil((size - 1) / 2)
    squares = np.pad(x * x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    square_sum = np.lib.stride_tricks.sliding_window_view(squares, size, axis=1).sum(axis=-1)
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    return x / (bias + alpha / size * square_sum) ** beta
