"""The convolutions beyond Conv: ConvTranspose (1-D to 3-D, groups, dilations, bias, and every way ONNX
gives its output's size: pads, output_padding, output_shape, auto_pad, in each opset's order), and the
integer ones, ConvInteger (exact int32 sums) and QLinearConv (requantized to 8 bits). The arithmetic is
compiler/ops/reference.py's."""

from __future__ import annotations

import numpy as np

from compiler.ops import reference
from tandem.network.operators.nn import (
    WINDOW,
    channel_vector,
    checked_kernel,
    convolution,
    refuse_window,
    spatial_ints,
)
from tandem.network.operators.products import requantized, zero_pointed
from tandem.network.operators.registry import Node, OperatorError, operator

SAME = ("SAME_UPPER", "SAME_LOWER")


def transpose_crops(node: Node, size: tuple[int, ...], kernel: tuple[int, ...]) -> list[tuple[int, int]]:
    """The (begin, end) crop of each spatial axis of ConvTranspose's full result
    ``stride * (size - 1) + (kernel - 1) * dilation + 1`` (a negative end: zeros added), as ONNX defines
    it: the output is that full result plus ``output_padding`` at the end, less ``pads`` [x1_begin, ...,
    x1_end, ...] (none with auto_pad VALID), or less the pads ``generated_pads`` gives for an
    ``output_shape`` (``pads`` are then ignored) or for auto_pad SAME_UPPER / SAME_LOWER."""
    rank = len(size)
    strides = spatial_ints(node, "strides", rank, 1)
    extra = spatial_ints(node, "output_padding", rank, 0)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, spatial_ints(node, "dilations", rank, 1), strict=True)]
    full = [s * (n - 1) + e + span for s, n, e, span in zip(strides, size, extra, spans, strict=True)]
    auto = node.attr("auto_pad", "NOTSET")
    if "output_shape" in node.attrs or auto in SAME:
        targets = node.attr("output_shape", [n * s for n, s in zip(size, strides, strict=True)])
        if len(targets) != rank:
            raise OperatorError(f"output_shape {list(targets)} must hold one size per spatial axis ({rank})")
        pads = [generated_pads(node, f - t, s) for f, t, s in zip(full, targets, strides, strict=True)]
    else:
        flat = [0] * (2 * rank) if auto == "VALID" else list(node.attr("pads", [0] * (2 * rank)))
        if len(flat) != 2 * rank:
            raise OperatorError(f"pads {flat} must hold {2 * rank} values (a begin and an end per spatial "
                                f"axis)")
        pads = list(zip(flat[:rank], flat[rank:], strict=True))
    for f, (b, e) in zip(full, pads, strict=True):
        if f - b - e <= 0:
            raise OperatorError(f"pads ({b}, {e}) leave nothing of an output {f} wide")
    return [(b, e - x) for (b, e), x in zip(pads, extra, strict=True)]


def generated_pads(node: Node, total: int, stride: int) -> tuple[int, int]:
    """The (begin, end) pads ONNX generates on an axis whose full result (``output_padding`` included) is
    ``total`` longer than the output asked for (``output_shape``, or ``size * stride`` with auto_pad SAME):
    ``total // 2`` at the begin and the rest at the end for SAME_UPPER, the other way around otherwise (the
    spec's formula from opset 11; before it, the formula splits an odd total the other way around from its
    own auto_pad text and from onnxruntime: that ambiguity is refused). An output up to ``stride - 1``
    longer than the full result (a negative total, which the formula does not define) ends with zeros,
    as ONNX's node case and onnxruntime have it; a longer one is refused, as onnxruntime refuses it."""
    if total <= -stride:
        raise OperatorError(f"output_shape asks for {-total} more than the full result on an axis of stride "
                            f"{stride}: ONNX generates no pads for it (onnxruntime refuses it too)")
    if total < 0:
        return 0, total
    if total % 2 and node.opset < 11:
        raise OperatorError(f"opset {node.opset}: ONNX's formula before opset 11 splits the odd total "
                            f"padding {total} the other way around from its auto_pad text and from "
                            f"onnxruntime")
    half = total // 2
    return (half, total - half) if node.attr("auto_pad", "NOTSET") == "SAME_UPPER" else (total - half, half)


@operator("ConvTranspose", attrs=(*WINDOW, "group", "output_padding", "output_shape"), refuse=refuse_window)
def conv_transpose(node: Node) -> np.ndarray:
    """The transposed convolution of ``X`` [N, C, *S] by ``W`` [C, M/group, *K] (each group's input
    channels scattered to its own output channels), cropped by ``transpose_crops``, plus the bias ``B``
    [M] if given."""
    x, w = node.arg(0), node.arg(1)
    kernel = checked_kernel(node, x, w, "[C, M/group, *K]")
    group = node.attr("group", 1)
    if x.shape[1] != w.shape[0] or x.shape[1] % group:
        raise OperatorError(f"{x.shape[1]} input channels, weight {list(w.shape)} and group {group} do not "
                            f"agree")
    crops = transpose_crops(node, x.shape[2:], kernel)
    out = reference.conv_transpose_nd(x, w, spatial_ints(node, "strides", x.ndim - 2, 1), crops,
                                      spatial_ints(node, "dilations", x.ndim - 2, 1), group)
    return out + channel_vector(node.arg(2), out.ndim) if node.given(2) else out


def _weight_zero_point(node: Node, position: int, w: np.ndarray) -> np.ndarray:
    """A convolution weight's zero point at input ``position``: one for all (a scalar or a 1-element
    tensor), or one per output channel ([M], shaped to broadcast over [M, C/group, *K]); 0 if omitted."""
    if not node.given(position):
        return np.zeros((), np.int64)
    zero = node.arg(position)
    if zero.size == 1:
        return zero.reshape(())
    if zero.shape != (w.shape[0],):
        raise OperatorError(f"weight zero point of shape {list(zero.shape)}: one value, or one per output "
                            f"channel ({w.shape[0]})")
    return zero.reshape((-1,) + (1,) * (w.ndim - 1))


@operator("ConvInteger", attrs=(*WINDOW, "group"), refuse=refuse_window)
def conv_integer(node: Node) -> np.ndarray:
    """Conv of ``x - x_zero_point`` (one zero point) by ``w - w_zero_point`` (one, or one per output
    channel): the exact int32 sums."""
    w = node.arg(1)
    return convolution(node, zero_pointed(node, 0, 2), w - _weight_zero_point(node, 3, w))


@operator("QLinearConv", attrs=(*WINDOW, "group"), refuse=refuse_window)
def qlinear_conv(node: Node) -> np.ndarray:
    """ConvInteger's sums of ``x`` (scale 1, zero point 2) by ``w`` (3; scale 4 and zero point 5: one, or
    one per output channel), plus the int32 bias ``B`` (8), requantized to ``y``'s scale (6) and zero
    point (7) as onnxruntime does (``requantized``)."""
    w = node.arg(3)
    acc = convolution(node, zero_pointed(node, 0, 2), w - _weight_zero_point(node, 5, w))
    if node.given(8):
        acc = acc + channel_vector(node.arg(8), acc.ndim)
    w_scale = node.raw(4)
    per_channel = channel_vector(np.asarray(w_scale), acc.ndim) if np.size(w_scale) > 1 else w_scale
    return requantized(node, acc, node.raw(1), per_channel, 6, 7)
