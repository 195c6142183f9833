"""The neural-network operators: convolution, pooling (max, average, Lp), normalization, dense layers, the
softmax family (Softmax, LogSoftmax, Hardmax) and GELU, with every attribute ONNX gives them (auto_pad,
asymmetric pads, ceil_mode, dilations, 1-D to 3-D windows; the softmax family's flatten-to-2-D semantics
before opset 13; LayerNormalization over any trailing axes with its mean and inverse standard deviation
outputs; BatchNormalization's training mode). The arithmetic is compiler/ops/reference.py's; the other
convolutions are in conv.py, the other normalizations in normalization.py."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from compiler.ops import reference
from tandem.network.operators.registry import Node, OperatorError, axis_of, operator

WINDOW = ("auto_pad", "dilations", "kernel_shape", "pads", "strides")
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def window_geometry(node: Node, size: tuple[int, ...], kernel: tuple[int, ...], ceil: bool = False
                    ) -> tuple[list[tuple[int, int]], list[int]]:
    """The (before, after) padding and output size of each spatial axis of a windowed operator (Conv,
    MaxPool, AveragePool) over input ``size`` with ``kernel``, as ONNX defines them: explicit ``pads``
    [x1_begin, x2_begin, ..., x1_end, ...], or ``auto_pad`` SAME_UPPER / SAME_LOWER (the output is
    ceil(size / stride), the odd padding after / before) or VALID (none); ``ceil`` rounds the output size up,
    dropping a last window that would start in the end padding."""
    rank = len(size)
    strides = spatial_ints(node, "strides", rank, 1)
    dilations = spatial_ints(node, "dilations", rank, 1)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = [-(-n // s) for n, s in zip(size, strides, strict=True)]
        totals = [max(0, (o - 1) * s + span - n)
                  for o, s, span, n in zip(outs, strides, spans, size, strict=True)]
        pads = [(t - t // 2, t // 2) if auto == "SAME_LOWER" else (t // 2, t - t // 2) for t in totals]
        return pads, outs
    flat = [0] * (2 * rank) if auto == "VALID" else list(node.attr("pads", [0] * (2 * rank)))
    if len(flat) != 2 * rank:
        raise OperatorError(f"pads {flat} must hold {2 * rank} values (a begin and an end per spatial axis)")
    pads = list(zip(flat[:rank], flat[rank:], strict=True))
    outs = []
    for n, (b, e), span, s in zip(size, pads, spans, strides, strict=True):
        room = n + b + e - span
        if room < 0:
            raise OperatorError(f"the window ({span} wide) is larger than the padded input ({n + b + e})")
        o = (-(-room // s) if ceil else room // s) + 1
        outs.append(o - 1 if ceil and (o - 1) * s >= n + b else o)
    return pads, outs


def padded_window(op: str, attrs: dict, size: tuple[int, ...], kernel: tuple[int, ...]
                  ) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """``(stride, pads)`` of a 2-D windowed operator with one stride and no dilation, over input ``size``
    with ``kernel``: the (before, after) padding of each axis, ``auto_pad`` resolved, the end padding grown
    to hold a rounded-up (``ceil_mode``) last window, so that the operator without padding on the padded
    input computes the same (what the targets' schedules take, the padding done by whoever lays the input
    out); None for any other window."""
    node = Node(op, attrs, 0, ())
    if len(size) != 2 or len(kernel) != 2:
        return None
    strides = set(spatial_ints(node, "strides", 2, 1))
    if len(strides) != 1 or set(spatial_ints(node, "dilations", 2, 1)) != {1}:
        return None
    stride = strides.pop()
    try:
        pads, outs = window_geometry(node, size, kernel, ceil=bool(attrs.get("ceil_mode", 0)))
    except OperatorError:
        return None
    grown = tuple((b, max(e, (o - 1) * stride + k - n - b))
                  for (b, e), o, k, n in zip(pads, outs, kernel, size, strict=True))
    return stride, grown


def square_window(op: str, attrs: dict, size: tuple[int, ...], kernel: tuple[int, ...]
                  ) -> tuple[int, int] | None:
    """``(stride, pad)`` of a 2-D windowed operator whose ``padded_window`` pads every side the same;
    None for any other window."""
    window = padded_window(op, attrs, size, kernel)
    if window is None or len({p for pair in window[1] for p in pair}) != 1:
        return None
    return window[0], window[1][0][0]


def spatial_ints(node: Node, name: str, rank: int, default: int) -> list[int]:
    """Attribute ``name`` (one integer per spatial axis: strides, dilations), ``default`` on every axis
    where it is absent."""
    values = list(node.attr(name, [default] * rank))
    if len(values) != rank:
        raise OperatorError(f"{name} {values} must hold one value per spatial axis ({rank})")
    return values


def refuse_window(node: Node) -> str | None:
    """Why a windowed operator's ``auto_pad`` cannot be taken (a value ONNX does not define, or given
    with ``pads``), or None."""
    auto = node.attr("auto_pad", "NOTSET")
    if auto not in AUTO_PADS:
        return f"auto_pad {auto!r} is not one of {', '.join(AUTO_PADS)}"
    if auto != "NOTSET" and "pads" in node.attrs:
        return f"auto_pad {auto} and pads are both given (ONNX allows one)"
    return None


def channel_vector(v: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast over [N, C, *S] of ``rank`` axes."""
    return v.reshape((1, -1) + (1,) * (rank - 2))


@operator("Conv", attrs=(*WINDOW, "group"), refuse=refuse_window)
def conv(node: Node) -> np.ndarray:
    """The convolution of ``X`` by ``W`` (``convolution``), plus the bias ``B`` [M] if given."""
    out = convolution(node, node.arg(0), node.arg(1))
    return out + channel_vector(node.arg(2), out.ndim) if node.given(2) else out


def checked_kernel(node: Node, x: np.ndarray, w: np.ndarray, layout: str) -> tuple[int, ...]:
    """The kernel's spatial shape of a convolution-like ``node`` over ``x`` [N, C, *S] by ``w`` (of
    ``layout``), checked: the same rank, with a spatial axis or more, and ``kernel_shape`` (where given)
    the weight's."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise OperatorError(f"input of rank {x.ndim} and weight of rank {w.ndim}: a {node.op} takes "
                            f"[N, C, *S] and {layout} of the same rank, with a spatial axis or more")
    kernel = tuple(node.attr("kernel_shape", w.shape[2:]))
    if kernel != w.shape[2:]:
        raise OperatorError(f"kernel_shape {list(kernel)} differs from the weight's {list(w.shape[2:])}")
    return kernel


def convolution(node: Node, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution of ``x`` [N, C, *S] by ``w`` [M, C/group, *K] with ``node``'s window attributes
    and ``group`` (Conv, ConvInteger and QLinearConv's, without a bias), exact."""
    kernel = checked_kernel(node, x, w, "[M, C/group, *K]")
    group = node.attr("group", 1)
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise OperatorError(f"{x.shape[1]} input channels, weight {list(w.shape)} and group {group} do not "
                            f"agree")
    pads, _ = window_geometry(node, x.shape[2:], kernel)
    return reference.conv_nd(x, w, spatial_ints(node, "strides", x.ndim - 2, 1), pads,
                             spatial_ints(node, "dilations", x.ndim - 2, 1), group)


def _pool(node: Node, kind: str, x: np.ndarray) -> np.ndarray:
    """``x`` pooled (reference.pool_nd's ``kind``) with ``node``'s window attributes and ceil_mode."""
    kernel = tuple(node.attr("kernel_shape", ()))
    if x.ndim < 3 or len(kernel) != x.ndim - 2:
        raise OperatorError(f"kernel_shape {list(kernel)} for an input of rank {x.ndim}: one size per "
                            f"spatial axis of [N, C, *S]")
    pads, outs = window_geometry(node, x.shape[2:], kernel, ceil=bool(node.attr("ceil_mode", 0)))
    return reference.pool_nd(x, kernel, spatial_ints(node, "strides", len(kernel), 1), pads,
                             spatial_ints(node, "dilations", len(kernel), 1), outs, kind,
                             count_pads=bool(node.attr("count_include_pad", 0)))


def _refuse_pool(node: Node) -> str | None:
    if "kernel_shape" not in node.attrs:
        return "kernel_shape is required"
    return refuse_window(node)


@operator("MaxPool", attrs=(*WINDOW, "ceil_mode", "storage_order"), outputs=("Y", "Indices"),
          refuse=_refuse_pool)
def max_pool(node: Node) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The windows' maxima and, if asked for, where they are: each maximum's index into the input
    flattened, row-major (``storage_order`` 0) or with the spatial axes in column-major order (1)."""
    if not node.wants(1):
        return _pool(node, "max", node.arg(0))
    index = _pool(node, "argmax", node.arg(0))
    if node.attr("storage_order", 0):
        n, c, *size = node.in_shapes[0]
        lead, *spatial = np.unravel_index(index, (n * c, *size))
        index = np.ravel_multi_index((lead, *spatial[::-1]), (n * c, *size[::-1]))
    return _pool(node, "max", node.arg(0)), index


@operator("AveragePool", attrs=(*WINDOW, "ceil_mode", "count_include_pad"), refuse=_refuse_pool)
def average_pool(node: Node) -> np.ndarray:
    return _pool(node, "avg", node.arg(0))


@operator("GlobalAveragePool")
def global_average_pool(node: Node) -> np.ndarray:
    x = node.arg(0)
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


@operator("GlobalMaxPool")
def global_max_pool(node: Node) -> np.ndarray:
    x = node.arg(0)
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


@operator("LpPool", attrs=(*WINDOW, "ceil_mode", "p"), refuse=_refuse_pool)
def lp_pool(node: Node) -> np.ndarray:
    """Each window's L``p`` norm ``sum(|x| ** p) ** (1 / p)`` (``p`` default 2; padding counts as 0), with
    the window attributes of the other pools."""
    p = node.attr("p", 2)
    return _pool(node, "sum", np.abs(node.arg(0)) ** p) ** (1.0 / p)


@operator("GlobalLpPool", attrs=("p",))
def global_lp_pool(node: Node) -> np.ndarray:
    """The L``p`` norm (``p`` default 2) of each channel over its spatial axes."""
    p = node.attr("p", 2)
    x = node.arg(0)
    return (np.abs(x) ** p).sum(axis=tuple(range(2, x.ndim)), keepdims=True) ** (1.0 / p)


def _refuse_batch_norm(node: Node) -> str | None:
    if node.attr("spatial", 1) != 1:
        return "spatial=0 (per-activation statistics, before opset 9)"
    return None


@operator("BatchNormalization", attrs=("epsilon", "momentum", "training_mode", "spatial"),
          outputs=("Y", "running_mean", "running_var"), refuse=_refuse_batch_norm)
def batch_norm(node: Node) -> np.ndarray | tuple[np.ndarray, ...]:
    """Inference: the given mean and variance. ``training_mode=1``: the batch's own (the biased
    variance), and the running statistics updated with ``momentum``."""
    x, gamma, beta, mean, var = (node.arg(k) for k in range(5))
    eps = node.attr("epsilon", 1e-5)
    if not node.attr("training_mode", 0):
        return _batch_norm(x, gamma, beta, mean, var, eps)
    axes = (0, *range(2, x.ndim))
    batch_mean, batch_var = x.mean(axis=axes), x.var(axis=axes)
    momentum = node.attr("momentum", 0.9)
    y = _batch_norm(x, gamma, beta, batch_mean, batch_var, eps)
    return y, mean * momentum + batch_mean * (1 - momentum), var * momentum + batch_var * (1 - momentum)


def _batch_norm(x, gamma, beta, mean, var, eps) -> np.ndarray:
    g = gamma / np.sqrt(var + eps)
    return (x - channel_vector(mean, x.ndim)) * channel_vector(g, x.ndim) + channel_vector(beta, x.ndim)


@operator("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"),
          refuse=lambda node: "broadcast=0 (before opset 7: C of the output's shape only)"
          if node.attr("broadcast", 1) == 0 else None)
def gemm(node: Node) -> np.ndarray:
    a, b = node.arg(0), node.arg(1)
    a = a.T if node.attr("transA", 0) else a
    b = b.T if node.attr("transB", 0) else b
    out = node.attr("alpha", 1.0) * reference.dense(a, b.T)
    return out + node.attr("beta", 1.0) * node.arg(2) if node.given(2) else out


@operator("MatMul")
def matmul(node: Node) -> np.ndarray:
    """``A @ B`` with numpy's (and ONNX's) broadcasting; a bias folded in at import (``weights[2]``, over
    the last axis) is added."""
    out = np.matmul(node.arg(0), node.arg(1))
    return out + node.arg(2) if node.given(2) else out


def _along_axis(node: Node, function: Callable[[np.ndarray, int], np.ndarray]) -> np.ndarray:
    """``function(x, axis)`` of the softmax family as each opset defines it: opset 13 on, along ``axis``
    (default -1); before, over the rows of the input flattened to 2-D at ``axis`` (default 1)."""
    x = node.arg(0)
    if node.opset >= 13:
        return function(x, axis_of(node.attr("axis", -1), x.ndim))
    axis = axis_of(node.attr("axis", 1), x.ndim)
    rows = x.reshape(math.prod(x.shape[:axis]), -1)
    return function(rows, 1).reshape(x.shape)


@operator("Softmax", attrs=("axis",))
def softmax(node: Node) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` (``_along_axis``)."""
    return _along_axis(node, lambda x, axis: reference.softmax(x, axis=axis))


@operator("LogSoftmax", attrs=("axis",))
def log_softmax(node: Node) -> np.ndarray:
    """``log(softmax(x))``, as ``x - max - log(sum(exp(x - max)))`` (``_along_axis``)."""
    def log_softmax_along(x: np.ndarray, axis: int) -> np.ndarray:
        shifted = x - x.max(axis=axis, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return _along_axis(node, log_softmax_along)


@operator("Hardmax", attrs=("axis",))
def hardmax(node: Node) -> np.ndarray:
    """1 where the first maximum is, 0 elsewhere (``_along_axis``)."""
    def hardmax_along(x: np.ndarray, axis: int) -> np.ndarray:
        out = np.zeros_like(x)
        if x.size:
            np.put_along_axis(out, np.expand_dims(x.argmax(axis=axis), axis), 1, axis=axis)
        return out
    return _along_axis(node, hardmax_along)


@operator("LayerNormalization", attrs=("axis", "epsilon", "stash_type"),
          outputs=("Y", "Mean", "InvStdDev"),
          refuse=lambda node: f"stash_type {node.attr('stash_type')} (Tandem computes stage one in float32: "
                              f"stash_type 1)" if node.attr("stash_type", 1) != 1 else None)
def layer_norm(node: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalized over the axes from ``axis`` (default -1) to the last: ``(x - mean) / sqrt(var + eps)``
    (the biased variance) times ``Scale`` plus ``B``; its mean and inverse standard deviation too (the
    normalized axes kept with size 1). Stage one (the statistics and the normalized values) is computed in
    the stash type, float32, as ONNX's function body defines it: each of its steps exact and rounded to
    float32, so that a variance beyond float32's range is inf (the normalized values 0) and one that
    underflows is 0, as in onnxruntime and ONNX's reference, not the float64 value."""
    x = node.arg(0)
    axis = axis_of(node.attr("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = _stash(x)
        mean = _stash(x.mean(axis=axes, keepdims=True))
        centered = _stash(x - mean)
        variance = _stash(_stash(centered * centered).mean(axis=axes, keepdims=True))
        inv_std = _stash(1.0 / _stash(np.sqrt(_stash(variance + node.attr("epsilon", 1e-5)))))
        y = _stash(centered * inv_std) * node.arg(1)
    return (y + node.arg(2) if node.given(2) else y), mean, inv_std


def _stash(value: np.ndarray) -> np.ndarray:
    """``value`` rounded to float32 (LayerNormalization's stash type, inf beyond its range), as float64."""
    return np.asarray(value).astype(np.float32).astype(np.float64)


@operator("Gelu", attrs=("approximate",),
          refuse=lambda node: f"approximate={node.attr('approximate')!r} (ONNX defines 'none' and 'tanh')"
          if node.attr("approximate", "none") not in ("none", "tanh") else None)
def gelu(node: Node) -> np.ndarray:
    x = node.arg(0)
    if node.attr("approximate", "none") == "tanh":
        return reference.gelu_tanh(x)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)
