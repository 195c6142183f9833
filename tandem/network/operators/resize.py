"""Resize (and the deprecated Upsample): each resized axis interpolated on its own (the N-linear and
N-cubic interpolations are separable), with every mode, coordinate transformation, rounding and option
ONNX defines from opset 11 on. Before opset 11 (Resize-10, Upsample) there were no transformation
attributes: what ONNX Runtime computes, and the opset-11 spelling of it, is ``asymmetric`` coordinates and
``floor`` rounding.

Where the spec's ``length_resized`` is fractional (``scales`` given: ``scale * length_original``), the
transformations use that fractional length, as ONNX's reference implementation and its test data do.
pytorch_half_pixel maps a resized length of 1 to coordinate 0, as the spec (and ONNX Runtime) says; ONNX's
reference implementation takes -0.5, which differs in cubic mode only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tandem.network.operators.movement import distinct_axes
from tandem.network.operators.registry import Node, OperatorError, operator

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")
TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize")


@dataclass(frozen=True)
class Axis:
    """How one axis is resized: from ``size`` to ``out`` elements, by ``scale`` (``length`` = scale * size,
    the resized length, fractional when a scale gives it), over the region ``roi`` (start, end) of the
    input, normalized (tf_crop_and_resize only)."""

    axis: int
    size: int
    out: int
    scale: float
    length: float
    roi: tuple[float, float] = (0.0, 1.0)


@dataclass(frozen=True)
class Options:
    """The attributes that shape the interpolation."""

    mode: str = "nearest"
    transform: str = "half_pixel"
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0


def _transforms(opset: int) -> tuple[str, ...]:
    """The coordinate transformations of ``opset``: tf_half_pixel_for_nn at 11 only, half_pixel_symmetric
    from 19."""
    return TRANSFORMS + (("tf_half_pixel_for_nn",) if opset == 11 else ()) + \
        (("half_pixel_symmetric",) if opset >= 19 else ())


def _refuse_resize(node: Node) -> str | None:
    """The values of the choice attributes that ``node``'s opset defines (Upsample and Resize-10: nearest
    and linear)."""
    modes = MODES[:2] if node.op == "Upsample" or node.opset < 11 else MODES
    choices = (("mode", "nearest", modes), ("nearest_mode", "round_prefer_floor", NEAREST_MODES),
               ("coordinate_transformation_mode", "half_pixel", _transforms(node.opset)),
               ("keep_aspect_ratio_policy", "stretch", POLICIES))
    for name, default, allowed in choices:
        if node.attr(name, default) not in allowed:
            return f"{name} {node.attr(name)!r} is not one of {', '.join(allowed)} (opset {node.opset})"
    return None


@operator("Resize", attrs=("mode", "nearest_mode", "coordinate_transformation_mode", "cubic_coeff_a",
                           "exclude_outside", "extrapolation_value", "antialias", "axes",
                           "keep_aspect_ratio_policy"), refuse=_refuse_resize)
def resize(node: Node) -> np.ndarray:
    """Opset 11 on: ``X`` resized to ``sizes`` or by ``scales`` (exactly one given; ``roi`` for
    tf_crop_and_resize) along ``axes`` (opset 18 on; default all). Opset 10: by ``scales``, as Upsample."""
    x = _floats(node, node.raw(0))
    if node.opset < 11:
        return _legacy(node, x, node.arg(1))
    options = Options(node.attr("mode", "nearest"), node.attr("coordinate_transformation_mode", "half_pixel"),
                      node.attr("nearest_mode", "round_prefer_floor"), node.attr("cubic_coeff_a", -0.75),
                      bool(node.attr("exclude_outside", 0)), bool(node.attr("antialias", 0)),
                      node.attr("extrapolation_value", 0.0))
    for plan in _plan(node, x.shape, options.transform):
        x = _resize_axis(x, plan, options)
    return x


@operator("Upsample", attrs=("mode", "scales"), refuse=_refuse_resize)
def upsample(node: Node) -> np.ndarray:
    """``X`` resized by ``scales`` (the attribute at opset 7, the second input from opset 9), nearest or
    linear."""
    x = _floats(node, node.raw(0))
    scales = np.asarray(node.attr("scales", ()), np.float64) if node.opset < 9 else node.arg(1)
    return _legacy(node, x, scales)


def _floats(node: Node, x: np.ndarray) -> np.ndarray:
    """The data, exact: float64 (integers too, for nearest, which only copies values)."""
    if np.asarray(x).dtype.kind in "iub" and node.attr("mode", "nearest") != "nearest":
        raise OperatorError(f"{node.attr('mode')} interpolation of {np.asarray(x).dtype} data: ONNX does not "
                            f"say how the interpolated values round to integers")
    return np.asarray(x).astype(np.float64)


def _legacy(node: Node, x: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Resize-10 and Upsample: output sizes floor(size * scale); asymmetric coordinates, nearest rounding
    down (an axis scaled below 1 in nearest mode is refused: there ONNX Runtime rounds up)."""
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    mode = node.attr("mode", "nearest")
    if len(scales) != x.ndim or min(scales, default=1.0) <= 0:
        raise OperatorError(f"scales {scales} must hold one value > 0 per axis of {list(x.shape)}")
    if mode == "nearest" and min(scales, default=1.0) < 1:
        raise OperatorError(f"scales {scales}: {node.op} (opset {node.opset}) does not say how nearest "
                            f"downsampling rounds (ONNX Runtime rounds up, the opset-11 reading down)")
    options = Options(mode, "asymmetric", "floor")
    for axis, (n, s) in enumerate(zip(x.shape, scales, strict=True)):
        if s != 1:
            x = _resize_axis(x, Axis(axis, n, math.floor(n * s), s, n * s), options)
    return x


def _plan(node: Node, shape: tuple[int, ...], transform: str) -> list[Axis]:
    """Each resized axis's ``Axis``: from ``sizes`` (with ``keep_aspect_ratio_policy``: stretch to them,
    or one scale for all, the smallest (not_larger) or largest (not_smaller), sizes rounded half up) or
    from ``scales`` (the output floor(size * scale))."""
    axes = distinct_axes(tuple(node.attr("axes", range(len(shape)))), len(shape))
    scales = node.arg(2).reshape(-1) if node.given(2) and node.raw(2).size else None
    sizes = node.ints(3) if node.given(3) and node.raw(3).size else None
    if (scales is None) == (sizes is None):
        raise OperatorError("give exactly one of scales and sizes")
    values = scales if sizes is None else sizes
    if len(values) != len(axes):
        raise OperatorError(f"{len(values)} {'scales' if sizes is None else 'sizes'} for {len(axes)} axes")
    rois = _rois(node, len(axes)) if transform == "tf_crop_and_resize" else [(0.0, 1.0)] * len(axes)
    dims = [shape[a] for a in axes]
    if sizes is None:
        if transform == "tf_crop_and_resize" and any(r != (0.0, 1.0) for r in rois):
            raise OperatorError("scales with a region of interest: ONNX's spec sizes the output floor(size "
                                "* (end - start) * scale), its shape inference floor(size * scale)")
        return [Axis(a, n, math.floor(n * float(s)), float(s), n * float(s), r)
                for a, n, s, r in zip(axes, dims, scales, rois, strict=True)]
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        return [Axis(a, n, m, m / n, float(m), r) for a, n, m, r in zip(axes, dims, sizes, rois, strict=True)]
    pick = min if policy == "not_larger" else max
    s = pick(m / n for n, m in zip(dims, sizes, strict=True))
    return [Axis(a, n, math.floor(s * n + 0.5), s, s * n, r)
            for a, n, r in zip(axes, dims, rois, strict=True)]


def _rois(node: Node, count: int) -> list[tuple[float, float]]:
    """tf_crop_and_resize's region of interest [start1, ..., end1, ...] as one (start, end) per axis."""
    roi = node.arg(1).reshape(-1) if node.given(1) else np.zeros(0)
    if roi.size != 2 * count:
        raise OperatorError(f"tf_crop_and_resize needs a roi of {2 * count} values, not {roi.size}")
    return [(float(roi[i]), float(roi[i + count])) for i in range(count)]


def _source(plan: Axis, transform: str) -> np.ndarray:
    """The input coordinate of each output position ``y`` (ONNX's x_original, from x_resized)."""
    y = np.arange(plan.out, dtype=np.float64)
    n, s, length = plan.size, plan.scale, plan.length
    if transform == "align_corners":
        return y * (n - 1) / (length - 1) if length > 1 else np.zeros_like(y)
    if transform == "asymmetric":
        return y / s
    if transform == "tf_half_pixel_for_nn":
        return (y + 0.5) / s
    if transform == "pytorch_half_pixel":
        return (y + 0.5) / s - 0.5 if length > 1 else np.zeros_like(y)
    if transform == "half_pixel_symmetric":
        offset = n / 2 * (1 - plan.out / length)
        return offset + (y + 0.5) / s - 0.5
    if transform == "tf_crop_and_resize":
        start, end = plan.roi
        if length > 1:
            return y * (end - start) * (n - 1) / (length - 1) + start * (n - 1)
        return np.full_like(y, 0.5 * (start + end) * (n - 1))
    return (y + 0.5) / s - 0.5


def _resize_axis(x: np.ndarray, plan: Axis, options: Options) -> np.ndarray:
    """``x`` resized along one axis: each output position a weighted sum of the input positions
    ``_taps`` gives (input positions beyond the ends read the edge); with tf_crop_and_resize, a source
    coordinate outside [0, size - 1] gives ``extrapolation_value``."""
    source = _source(plan, options.transform)
    if plan.out and not plan.size:
        raise OperatorError(f"axis {plan.axis} of size 0 cannot be resized to {plan.out}")
    index, weights = _taps(source, plan, options)
    taken = np.take(x, index, axis=plan.axis)   # the axis becomes (out, taps)
    trailing = (1,) * (x.ndim - plan.axis - 1)
    y = (taken * weights.reshape(weights.shape + trailing)).sum(axis=plan.axis + 1)
    if options.transform == "tf_crop_and_resize":
        outside = (source < 0) | (source > plan.size - 1)
        y = np.where(outside.reshape((-1,) + trailing), options.extrapolation, y)
    return y


def _taps(source: np.ndarray, plan: Axis, options: Options) -> tuple[np.ndarray, np.ndarray]:
    """The input positions (clamped to the axis) and weights [out, taps] of each output position.
    Nearest: the one position ``nearest_mode`` rounds to. Linear and cubic: the positions floor(x) + j
    within the kernel's reach (1 and 2), weighted by the kernel at their distance from x; with
    ``antialias`` (which ONNX defines for these two modes only), when downscaling, the kernel stretched by
    1 / scale and its weights normalized; with ``exclude_outside``, the positions outside the input
    weighted 0 and the rest normalized."""
    n = plan.size
    if options.mode == "nearest":
        index = _round(source, options.nearest).astype(np.int64)
        return np.clip(index, 0, max(n - 1, 0)).reshape(-1, 1), np.ones((source.size, 1))
    reach, kernel = (1, _triangle) if options.mode == "linear" else (2, _keys(options.cubic_a))
    stretch = min(plan.scale, 1.0) if options.antialias else 1.0
    first = math.floor(-reach / stretch) + 1
    index = np.floor(source).astype(np.int64).reshape(-1, 1) + np.arange(first, 2 - first)
    weights = kernel((index - source.reshape(-1, 1)) * stretch)
    if options.antialias:
        weights = _normalized(weights)
    if options.exclude_outside:
        weights = _normalized(np.where((index < 0) | (index >= n), 0.0, weights))
    return np.clip(index, 0, n - 1), weights


def _normalized(weights: np.ndarray) -> np.ndarray:
    """Each row of ``weights`` divided by its sum (a row of zeros, all outside the input, kept: its position
    is extrapolated)."""
    sums = weights.sum(axis=1, keepdims=True)
    return weights / np.where(sums == 0, 1.0, sums)


def _round(x: np.ndarray, mode: str) -> np.ndarray:
    """``x`` rounded to an integer as ``nearest_mode`` says: halves down (round_prefer_floor) or up
    (round_prefer_ceil), or always down (floor) or up (ceil)."""
    return {"round_prefer_floor": np.ceil(x - 0.5), "round_prefer_ceil": np.floor(x + 0.5),
            "floor": np.floor(x), "ceil": np.ceil(x)}[mode]


def _triangle(d: np.ndarray) -> np.ndarray:
    """The linear interpolation kernel: 1 - |d| within 1, else 0."""
    return np.clip(1 - np.abs(d), 0, None)


def _keys(a: float) -> Callable[[np.ndarray], np.ndarray]:
    """Keys' cubic convolution kernel with coefficient ``a`` (``cubic_coeff_a``): (a+2)|d|³ - (a+3)|d|² + 1
    within 1, a|d|³ - 5a|d|² + 8a|d| - 4a within 2, else 0."""
    def kernel(d: np.ndarray) -> np.ndarray:
        d = np.abs(d)
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        return np.where(d <= 1, near, np.where(d < 2, far, 0.0))
    return kernel
