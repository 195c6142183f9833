"""The numpy reference of each operator: one function per operator, exact, in the operator's plain layout.

Every check of a compiled kernel (the run flows, the tests, the experiments, the baselines) compares with
these; a target's packed layout is converted around them by that target's ops module, never by a reference
of its own. Results are exact: int64 for integer inputs, float64 for float ones. Cast an integer result to
the kernel's output type to compare (integer sums wrap the same in any order); compare a float result within
the summation bound of the kernel's precision.

Non-goal: reproducing a kernel's float rounding order (a float sum is checked within its bound instead, as
``tandem run`` and ``tandem compile --run`` do).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LAYOUTS = ("NCHW", "HWC")


def _exact(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64 if np.asarray(x).dtype.kind in "iub" else np.float64)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of exact arrays. Integer products whose sums stay below 2**53 in magnitude go through float64
    (BLAS, and still exact); larger ones through int64."""
    if a.dtype.kind == "i" and _float_exact(a, b, a.shape[-1]):
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    return a @ b


def _float_exact(a: np.ndarray, b: np.ndarray, terms: int) -> bool:
    """Whether sums of ``terms`` products of ``a``'s and ``b``'s integers stay below 2**53 in magnitude,
    so that float64 computes them exactly."""
    return a.size > 0 and b.size > 0 and int(np.abs(a).max()) * int(np.abs(b).max()) * terms < 2**53


def conv2d(data: np.ndarray, kernel: np.ndarray, stride: int = 1, pad: int = 0, layout: str = "NCHW"
           ) -> np.ndarray:
    """2-D convolution with zero padding ``pad`` on both spatial sides.

    ``layout`` "NCHW": ``data`` [N, C, H, W], ``kernel`` [O, C, KH, KW], result [N, O, OH, OW];
    "HWC": ``data`` [H, W, C], ``kernel`` [O, KH, KW, C], result [OH, OW, O].
    """
    if layout not in LAYOUTS:
        raise ValueError(f"conv2d reference: layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if layout == "HWC":
        out = conv2d(data.transpose(2, 0, 1)[None], kernel.transpose(0, 3, 1, 2), stride, pad)
        return out[0].transpose(1, 2, 0)
    n, c = data.shape[:2]
    o, _, kh, kw = kernel.shape
    x = np.pad(_exact(data), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    oh, ow = windows.shape[2], windows.shape[3]
    cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    out = _matmul(cols, _exact(kernel).reshape(o, c * kh * kw).T)
    return out.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)


def conv_nd(data: np.ndarray, kernel: np.ndarray, stride: int | Sequence[int] = 1,
            pad: int | Sequence[tuple[int, int]] = 0, dilation: int | Sequence[int] = 1,
            groups: int = 1) -> np.ndarray:
    """Convolution over any number of spatial dimensions, with zero padding, kernel taps ``dilation``
    apart and ``groups`` channel groups: ``data`` [N, C, *S], ``kernel`` [O, C/groups, *K], result
    [N, O, *OS]. ``stride`` and ``dilation`` are one per spatial axis or one for all; ``pad`` is the same
    on every side, or a (before, after) pair per axis. Summed one kernel tap at a time (each tap a product
    over the group's channels, a matrix product: through float64 BLAS, exact for integers whose sums stay
    below 2**53, as ``_matmul``)."""
    n, c, *size = data.shape
    o, cg, *taps = kernel.shape
    strides, dilations = _per_axis(stride, len(size)), _per_axis(dilation, len(size))
    pads = [(pad, pad)] * len(size) if isinstance(pad, int | np.integer) else [tuple(p) for p in pad]
    x = np.pad(_exact(data), ((0, 0), (0, 0), *pads))
    x = x.reshape(n, groups, cg, *x.shape[2:])
    w = _exact(kernel).reshape(groups, o // groups, cg, *taps)
    out_size = [(s + b + e - d * (k - 1) - 1) // st + 1
                for s, (b, e), d, k, st in zip(size, pads, dilations, taps, strides, strict=True)]
    out = np.zeros((n, groups, o // groups, math.prod(out_size)), x.dtype)
    through_float = x.dtype.kind == "f" or _float_exact(x, w, cg)
    by_blas = cg > 1   # a depthwise tap is an element-wise product: numpy's einsum does it faster
    for tap in np.ndindex(*taps):
        window = tuple(slice(t * d, t * d + st * (m - 1) + 1, st)
                       for t, m, d, st in zip(tap, out_size, dilations, strides, strict=True))
        xs = x[(slice(None),) * 3 + window].reshape(n, groups, cg, -1)
        ws = w[(..., *tap)]
        if not by_blas:
            out += np.einsum("ngcp,goc->ngop", xs, ws)
        elif through_float:
            product = ws.astype(np.float64) @ xs.astype(np.float64)   # [g, og, cg] @ [n, g, cg, P]
            out += product if x.dtype.kind == "f" else product.astype(np.int64)
        else:
            out += ws @ xs
    return out.reshape(n, o, *out_size)


def _per_axis(value: int | Sequence[int], rank: int) -> list[int]:
    """One value per spatial axis: ``value`` repeated, or the sequence as given."""
    return [int(value)] * rank if isinstance(value, int | np.integer) else [int(v) for v in value]


def conv_transpose_nd(data: np.ndarray, kernel: np.ndarray, stride: int | Sequence[int] = 1,
                      crop: int | Sequence[tuple[int, int]] = 0, dilation: int | Sequence[int] = 1,
                      groups: int = 1) -> np.ndarray:
    """Transposed convolution over any number of spatial dimensions (the adjoint of ``conv_nd`` with
    respect to its input): ``data`` [N, C, *S], ``kernel`` [C, O/groups, *K], result [N, O, *OS]. Each
    input position scatters its value times the kernel (taps ``dilation`` apart) to the outputs ``stride``
    apart, each group's input channels to its own output channels: a full result of
    ``(S - 1) * stride + (K - 1) * dilation + 1`` per axis, of which ``crop`` (one value for every side, or
    a (begin, end) pair per axis) is cut off; a negative crop extends that side with zeros instead.
    ``stride`` and ``dilation`` are one per spatial axis or one for all."""
    n, c, *size = data.shape
    _, og, *taps = kernel.shape
    strides, dilations = _per_axis(stride, len(size)), _per_axis(dilation, len(size))
    x = _exact(data).reshape(n, groups, c // groups, *size)
    w = _exact(kernel).reshape(groups, c // groups, og, *taps)
    full = [(s - 1) * st + (k - 1) * d + 1
            for s, st, k, d in zip(size, strides, taps, dilations, strict=True)]
    out = np.zeros((n, groups, og, *full), np.result_type(x, w))
    for tap in np.ndindex(*taps):
        window = tuple(slice(t * d, t * d + st * (s - 1) + 1, st)
                       for t, s, d, st in zip(tap, size, dilations, strides, strict=True))
        out[(slice(None),) * 3 + window] += np.einsum("ngc...,gco->ngo...", x, w[(..., *tap)])
    return _cropped(out.reshape(n, groups * og, *full), crop)


def _cropped(out: np.ndarray, crop: int | Sequence[tuple[int, int]]) -> np.ndarray:
    """``out`` [N, C, *S] with ``crop`` (one value for every side, or a (begin, end) pair per spatial axis)
    cut off its spatial sides, a negative value extending that side with zeros."""
    rank = out.ndim - 2
    pairs = [(crop, crop)] * rank if isinstance(crop, int | np.integer) else [tuple(p) for p in crop]
    out = np.pad(out, [(0, 0), (0, 0), *[(max(-b, 0), max(-e, 0)) for b, e in pairs]])
    return out[(slice(None),) * 2 + tuple(slice(max(b, 0), m - max(e, 0))
                                          for (b, e), m in zip(pairs, out.shape[2:], strict=True))]


def batch_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[q] @ b[q].T`` for each ``q`` of ``a`` [B, M, K] and ``b`` [B, N, K]: [B, M, N]."""
    return np.einsum("qmk,qnk->qmn", _exact(a), _exact(b))


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` (a residual connection)."""
    return _exact(a) + _exact(b)


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b``."""
    return _exact(a) - _exact(b)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a * b``, element by element."""
    return _exact(a) * _exact(b)


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The larger of ``a`` and ``b``, element by element."""
    return np.maximum(_exact(a), _exact(b))


def clip(x: np.ndarray, lo: int | float | None, hi: int | float | None) -> np.ndarray:
    """``x`` clipped to ``[lo, hi]`` (None: unbounded on that side; ReLU is ``clip(x, 0, None)``)."""
    return np.clip(_exact(x), lo, hi)


def right_shift(x: np.ndarray, amount: np.ndarray | int) -> np.ndarray:
    """``x >> amount`` (``np.right_shift``, as the IR's shifts: arithmetic on signed values, logical on
    unsigned; an amount outside [0, bits), negative ones too, shifts every bit out). Exact in int64, equal to
    the shift in ``x``'s own type for every amount."""
    return np.right_shift(_exact(x), _exact(np.asarray(amount)))


def left_shift(x: np.ndarray, amount: np.ndarray | int) -> np.ndarray:
    """``x << amount`` (``np.left_shift``) in int64: cast to ``x``'s type for the IR's wrapping shift (an
    amount outside [0, bits) gives 0 there)."""
    return np.left_shift(_exact(x), _exact(np.asarray(amount)))


def concat(arrays: list[np.ndarray], axis: int = 0) -> np.ndarray:
    """The arrays joined along ``axis``."""
    return np.concatenate([_exact(a) for a in arrays], axis=axis)


def pool2d(x: np.ndarray, k: int | tuple[int, int], stride: int, kind: str) -> np.ndarray:
    """Max ("max"), sum ("sum") or mean ("avg") of each k x k (or kh x kw) window of ``x`` [C, H, W],
    windows ``stride`` apart, no padding: [C, OH, OW]."""
    shape = (k, k) if isinstance(k, int) else tuple(k)
    windows = np.lib.stride_tricks.sliding_window_view(_exact(x), shape, axis=(1, 2))[:, ::stride, ::stride]
    return {"max": np.max, "sum": np.sum, "avg": np.mean}[kind](windows, axis=(3, 4))


def pool_nd(x: np.ndarray, window: Sequence[int], strides: Sequence[int], pads: Sequence[tuple[int, int]],
            dilations: Sequence[int], out_size: Sequence[int], kind: str, count_pads: bool = False
            ) -> np.ndarray:
    """Max ("max"), sum ("sum") or mean ("avg") of each window of ``x`` [N, C, *S], or where the maximum is
    ("argmax": its index into ``x`` flattened, the first of equal ones): ``window`` taps ``dilations``
    apart, windows ``strides`` apart, ``out_size`` of them per axis, over ``x`` padded by ``pads`` (a
    (before, after) pair per axis). A padded position never holds the maximum, adds 0 to a sum, and counts
    in a mean only with ``count_pads``; positions past the padding (where a rounded-up output size puts its
    last window) count in neither."""
    x = _exact(x)
    rank = x.ndim - 2
    spans = [(k - 1) * d + 1 for k, d in zip(window, dilations, strict=True)]
    ends = [max(e, (o - 1) * s + span - n - b)
            for o, s, span, n, (b, e) in zip(out_size, strides, spans, x.shape[2:], pads, strict=True)]
    widths = [(b, end) for (b, _), end in zip(pads, ends, strict=True)]
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded = np.pad(x, [(0, 0), (0, 0), *widths], constant_values=0 if kind in ("avg", "sum") else low)

    def windows(a: np.ndarray) -> np.ndarray:
        axes = tuple(range(a.ndim - rank, a.ndim))
        view = np.lib.stride_tricks.sliding_window_view(a, spans, axis=axes)
        lead = (slice(None),) * (a.ndim - rank)
        outs = tuple(slice(None, (o - 1) * s + 1, s) for o, s in zip(out_size, strides, strict=True))
        return view[lead + outs + tuple(slice(None, None, d) for d in dilations)]

    taps = tuple(range(-rank, 0))
    if kind == "max":
        return windows(padded).max(axis=taps)
    if kind == "sum":
        return windows(padded).sum(axis=taps)
    if kind == "argmax":
        values = windows(padded)
        flat = values.reshape(*values.shape[:x.ndim], -1)
        where = np.pad(np.arange(x.size).reshape(x.shape), [(0, 0), (0, 0), *widths], constant_values=-1)
        index = windows(where).reshape(flat.shape)
        return np.take_along_axis(index, flat.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    if count_pads:   # ones over the data and its padding, zeros past it
        inside = [n + b + e for n, (b, e) in zip(x.shape[2:], pads, strict=True)]
        counted = np.pad(np.ones(inside), [(0, end - e) for (_, e), end in zip(pads, ends, strict=True)])
    else:            # ones over the data alone
        counted = np.pad(np.ones(x.shape[2:]), widths)
    return windows(padded).sum(axis=taps) / windows(counted).sum(axis=taps)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` along ``axis`` (shifted by the maximum, which the result does not depend
    on)."""
    e = np.exp(_exact(x) - _exact(x).max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


#: the fixed point of ``softmax_table``: exp(0) is 2**SOFTMAX_BITS
SOFTMAX_BITS = 20


def softmax_table(exponent: int) -> np.ndarray:
    """``E[255 + d] = round(2**SOFTMAX_BITS * exp(d * 2**-exponent))`` for d in [-255, 0] (int32): the
    exponentials ``softmax_int8`` sums, one per difference of two int8 values at ``exponent``."""
    d = np.arange(-255, 1, dtype=np.float64)
    return np.rint(np.exp(d * 2.0 ** -exponent) * 2.0 ** SOFTMAX_BITS).astype(np.int32)


def softmax_int8(x: np.ndarray, table: np.ndarray, exponent: int, masked: int | None = None) -> np.ndarray:
    """Softmax along the last axis of int8 ``x`` in integers (I-BERT's scheme, with exact sums): each value's
    difference from its row's maximum looked up in ``table`` (``softmax_table`` of its exponent), the row's
    sum ``S`` of them (int64: exact in any order), then in float32, each step one IEEE operation (so that a
    kernel gives the same bits): ``inv = 2**exponent / float32(S)`` once per row, each probability
    ``float32(E) * inv``, rounded half to even and saturated to int8; the result is at ``exponent``. Values
    equal to ``masked`` (a mask's -inf) count nothing; a row of them only gives zeros. (``table`` of 257
    values: what a masked value looks up first, then the 256.)"""
    x = np.asarray(x)
    wide = x.astype(np.int16)
    if masked is not None:   # below every row's maximum by more than 255: looked up as the table's 0
        wide[x == masked] = -512
    at = wide - np.maximum(wide.max(axis=-1, keepdims=True), np.int16(-256))   # a masked row: all < 1
    at += 256   # 1..256 within 255 of the row's maximum, < 1 for a masked value
    np.maximum(at, 0, out=at)
    looked = table if len(table) == 257 else np.concatenate([[0], table])   # (given whole: a kernel's)
    e = np.take(looked.astype(np.int32), at)
    total = e.sum(axis=-1, keepdims=True, dtype=np.int64).astype(np.float32)
    inv = np.divide(np.float32(2.0 ** exponent), total, out=np.zeros_like(total), where=total > 0)
    p = np.multiply(e.astype(np.float32), inv)
    return np.clip(np.rint(p, out=p), -128, 127, out=p).astype(np.int8)


def layer_norm_int8(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: np.float32) -> np.ndarray:
    """Layer normalization of int8 ``x`` along its last axis (D values) from exact integer statistics, then
    in float32, each step one IEEE operation (so that a kernel gives the same bits): ``S1 = sum(x)`` and the
    exact ``D * sum(x^2) - S1^2`` (int64), ``mean = S1 / D``, ``var = that / D^2``, ``inv = 1 / sqrt(var +
    eps)``, each value ``((x - mean) * inv) * gamma + beta``, rounded half to even and saturated to int8.
    ``gamma``, ``beta`` (float32 [D]) and ``eps`` (float32) carry the exponents: the output's in gamma and
    beta, twice the input's in eps (``eps * 2**(2 e_x)``)."""
    x = np.asarray(x)
    d = x.shape[-1]
    wide = x.astype(np.int32)
    s1 = wide.sum(axis=-1, keepdims=True)
    spread = d * np.square(wide).sum(axis=-1, keepdims=True, dtype=np.int64) - s1.astype(np.int64) ** 2
    mean = s1.astype(np.float32) / np.float32(d)
    var = spread.astype(np.float32) / np.float32(d * d)
    inv = np.float32(1.0) / np.sqrt(var + np.float32(eps))
    y = (x.astype(np.float32) - mean) * inv * np.asarray(gamma, np.float32) + np.asarray(beta, np.float32)
    return np.clip(np.rint(y, out=y), -128, 127, out=y).astype(np.int8)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Each row of ``x`` [..., D] normalized to mean 0 and variance 1 (the biased variance, plus ``eps``),
    then scaled by ``gamma`` [D] and shifted by ``beta`` [D] (ONNX LayerNormalization, axis -1)."""
    x = _exact(x)
    centered = x - x.mean(axis=-1, keepdims=True)
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(variance + eps) * _exact(gamma) + _exact(beta)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU in its tanh form, ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))`` (ONNX Gelu with
    approximate="tanh", PyTorch's approximate='tanh')."""
    x = _exact(x)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, ``2/sqrt(pi)`` times the integral of ``exp(-t**2)`` from 0 to ``x``, element by
    element, in float64 (Python's ``math.erf``)."""
    return np.vectorize(math.erf, otypes=[np.float64])(_exact(x))


def dense(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` of ``a`` [M, K] and ``b`` [N, K]: [M, N]."""
    return _matmul(_exact(a), _exact(b).T)


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of ``a`` [M, K] and ``b`` [K, N]: [M, N]."""
    return _matmul(_exact(a), _exact(b))


def shift_clip(acc: np.ndarray, shift: int, relu: bool = False,
               bounds: tuple[int, int] | None = None) -> np.ndarray:
    """VTA's int8 epilogue: an arithmetic right shift by ``shift``, then a clip to ``bounds`` (default
    [0 if relu else -128, 127])."""
    lo, hi = bounds if bounds is not None else (0 if relu else -128, 127)
    return np.clip(np.asarray(acc, np.int64) >> shift, lo, hi).astype(np.int8)


def rounding_shift(x: np.ndarray, by: int) -> np.ndarray:
    """``x * 2**-by`` in int64, rounded to nearest (half up): ``(x + 2**(by-1)) >> by``; a left shift for a
    negative ``by``. How an int8 network moves a value from one power-of-two exponent to another."""
    x = np.asarray(x, np.int64)
    return (x + (1 << (by - 1))) >> by if by > 0 else x << -by


def quantized_add(a: np.ndarray, b: np.ndarray, shift_a: int, shift_b: int, lo: int = -128,
                  hi: int = 127) -> np.ndarray:
    """An int8 network's sum of two tensors at their own exponents: each moved to the output's
    (``rounding_shift``), added, clipped to [lo, hi] (int8's range, or [0, 127] with a ReLU fused)."""
    total = rounding_shift(a, shift_a) + rounding_shift(b, shift_b)
    return np.clip(total, lo, hi).astype(np.int8)


def rounded_mean(sums: np.ndarray, count: int) -> np.ndarray:
    """An int8 network's average: integer ``sums`` of ``count`` values each, over ``count``, rounded half
    up (``(sum + count // 2) // count``), as VITA computes it with no divide."""
    return (np.asarray(sums, np.int64) + count // 2) // count


# ---- ONNX's affine quantization as onnxruntime's x86-64 kernels compute it (tandem/network/qdq.py): float32
# arithmetic, one rounding per operation (or per fused multiply-add), round half to even


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` of float32 values rounded once to float32, as an FMA instruction computes it. The
    product is exact in float64; the sum's rounding error comes from TwoSum, and a float64 sum that lands
    exactly halfway between two float32 values is moved toward the error before the one rounding to
    float32 (the only case where rounding twice would differ from rounding once)."""
    p = np.asarray(a, np.float32).astype(np.float64) * np.asarray(b, np.float32).astype(np.float64)
    c64 = np.asarray(c, np.float32).astype(np.float64)
    s = p + c64
    v = s - p
    err = (p - (s - v)) + (c64 - v)   # p + c == s + err exactly
    r = s.astype(np.float32)
    below = np.where(r.astype(np.float64) > s, np.nextafter(r, np.float32(-np.inf)), r)
    above = np.nextafter(below, np.float32(np.inf))
    halfway = (s - below.astype(np.float64)) == (above.astype(np.float64) - s)
    nudged = np.where(halfway & (err != 0), np.nextafter(s, np.copysign(np.inf, err)), s)
    return nudged.astype(np.float32)


def quantize_linear(x: np.ndarray, scale: np.ndarray | float, zero_point: int, lo: int, hi: int,
                    dtype: type = np.int64) -> np.ndarray:
    """ONNX QuantizeLinear as onnxruntime's x86-64 kernel computes it (MLAS): ``x / scale`` in float32,
    clamped to [lo, hi] less the zero point (a nan to lo: x86's maxps returns its second operand), rounded
    half to even, plus the zero point; in ``dtype`` (int64, or the 8-bit type that holds [lo, hi])."""
    x, scale = np.asarray(x, np.float32), np.asarray(scale, np.float32)
    q = np.divide(x, scale, out=np.empty(np.broadcast_shapes(x.shape, scale.shape), np.float32))
    return saturated(q, zero_point, lo, hi, dtype)


def saturated(v: np.ndarray, zero_point: int, lo: int, hi: int, dtype: type = np.int64) -> np.ndarray:
    """float32 ``v`` (an array it may overwrite) to integers as onnxruntime's x86-64 kernels do (MLAS):
    clamped to [lo, hi] less the zero point (a nan to lo: x86's maxps returns its second operand), rounded
    half to even, plus the zero point; in ``dtype``."""
    np.clip(v, np.float32(lo - zero_point), np.float32(hi - zero_point), out=v)   # (numpy's fast clamp)
    nan = np.isnan(v)
    if nan.any():
        v[nan] = lo - zero_point
    np.rint(v, out=v)
    return np.add(v, np.float32(zero_point), out=v).astype(dtype)


def dequantize_linear(q: np.ndarray, scale: np.ndarray | float, zero_point: int) -> np.ndarray:
    """ONNX DequantizeLinear: ``(q - zero_point) * scale`` in float32."""
    return (np.asarray(q, np.int64) - zero_point).astype(np.float32) * np.float32(scale)


def requantize_scaled(acc: np.ndarray, scale: np.ndarray | float, zero_point: int, lo: int, hi: int
                      ) -> np.ndarray:
    """int32 sums to an 8-bit tensor by a float32 ``scale`` (per element, broadcast): the sum converted to
    float32, multiplied, then ``saturated`` (int64 out), as onnxruntime requantizes a QLinearConv's or a
    QGemm's sums (MLAS's requantize-output)."""
    with np.errstate(invalid="ignore"):   # 0 times an infinite scale: nan, which saturates to lo
        v = np.asarray(acc, np.int64).astype(np.float32) * np.asarray(scale, np.float32)
    return saturated(np.asarray(v, np.float32), zero_point, lo, hi)


def qlinear_add(a: np.ndarray, b: np.ndarray, ratio_a: float, ratio_b: float, fixed: float, lo: int,
                hi: int) -> np.ndarray:
    """onnxruntime's QLinearAdd on x86-64 (its AVX2 kernel): ``fma(a, ratio_a, fma(b, ratio_b, fixed))``
    in float32 with the constants of ``qlinear_add_constants``, rounded half to even, saturated to [lo,
    hi] (int64 out)."""
    f = np.float32
    inner = fma_f32(np.asarray(b, np.int64).astype(f), f(ratio_b), f(fixed))
    v = fma_f32(np.asarray(a, np.int64).astype(f), f(ratio_a), inner)
    return saturated(np.array(v, np.float32), 0, lo, hi)


def qlinear_add_constants(scale_a: float, zero_a: int, scale_b: float, zero_b: int, scale_c: float,
                          zero_c: int) -> tuple[np.float32, np.float32, np.float32]:
    """The float32 constants of ``qlinear_add``: the scale ratios ``sa / sc``, ``sb / sc`` and the fixed
    part ``zc - (ratio_a * za + ratio_b * zb)``, whose multiply-add the compiled kernel fuses (measured
    bit for bit against onnxruntime 1.32's x86-64 wheel, tests/tandem/test_qdq.py)."""
    f = np.float32
    ratio_a, ratio_b = f(f(scale_a) / f(scale_c)), f(f(scale_b) / f(scale_c))
    fixed = f(zero_c) - fma_f32(ratio_a, f(zero_a), f(ratio_b * f(zero_b)))
    return ratio_a, ratio_b, f(fixed)
