"""Neural-network operators: padding, dense/GEMM and 2-D convolution (NCHW and NHWC); the layer shapes
``ConvShape`` and ``GemmShape``.

Integer variants multiply in ``out_dtype`` (``int8 x int8 -> int32``: both operands are cast to int32
before the multiply, as VTA and VNNI compute); float variants compute in ``out_dtype``.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import te
from compiler.errors import IRTypeError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.intrinsics import if_then_else


def _pair(value, what: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, tuple | list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise IRTypeError(f"{what}: expected an int or a pair of ints, but got {value!r}")
    return int(value[0]), int(value[1])


def _check_ndim(t: te.Tensor, ndim: int, op: str, layout: str) -> None:
    if t.ndim != ndim:
        raise IRTypeError(f"{op}: expected {t.name} in layout {layout}, but it has shape {list(t.shape)}")


def _mul_in(a: ir.Expr, b: ir.Expr, out: dtypes.DType) -> ir.Expr:
    return ir.cast(a, out) * ir.cast(b, out)


def pad(
    data: te.Tensor,
    before: tuple[int, ...],
    after: tuple[int, ...] | None = None,
    value: int | float = 0,
    name: str = "pad",
) -> te.Tensor:
    """Zero-pad (or ``value``-pad) ``data`` by ``before``/``after`` elements per dimension."""
    after = before if after is None else after
    if len(before) != data.ndim or len(after) != data.ndim:
        raise IRTypeError(f"pad: expected {data.ndim} pad widths, but got {before} and {after}")
    if any(p < 0 for p in (*before, *after)):
        raise IRTypeError(f"pad: expected non-negative widths, but got {before} and {after}")
    shape = tuple(d + b + a for d, b, a in zip(data.shape, before, after, strict=True))

    def f(*idx):
        conds = []
        src = []
        for i, b, d in zip(idx, before, data.shape, strict=True):
            if b:
                conds.append(i >= b)
            if b or shape[len(src)] != d:
                conds.append(i < b + d)
            src.append(i - b if b else i)
        if not conds:
            return data[tuple(src)]
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        return if_then_else(cond, data[tuple(src)], value)

    return te.compute(shape, f, name=name)


def dense(x: te.Tensor, w: te.Tensor, out_dtype: str | None = None, name: str = "dense") -> te.Tensor:
    """out[m, n] = sum_k x[m, k] * w[n, k]  (x: (M, K), w: (N, K), the layout of TVM's dense)."""
    _check_ndim(x, 2, "dense", "(M, K)")
    _check_ndim(w, 2, "dense", "(N, K)")
    if x.shape[1] != w.shape[1]:
        raise IRTypeError(
            f"dense: reduction sizes differ: {x.name}{list(x.shape)} vs {w.name}{list(w.shape)}"
        )
    out = dtypes.dtype(out_dtype or x.dtype)
    k = te.reduce_axis(x.shape[1], name="k")
    return te.compute(
        (x.shape[0], w.shape[0]),
        lambda m, n: te.sum(_mul_in(x[m, k], w[n, k], out), axis=k),
        name=name,
    )


def gemm(a: te.Tensor, b: te.Tensor, out_dtype: str | None = None, name: str = "gemm") -> te.Tensor:
    """out[m, n] = sum_k a[m, k] * b[k, n]  (a: (M, K), b: (K, N))."""
    _check_ndim(a, 2, "gemm", "(M, K)")
    _check_ndim(b, 2, "gemm", "(K, N)")
    if a.shape[1] != b.shape[0]:
        raise IRTypeError(f"gemm: reduction sizes differ: {a.name}{list(a.shape)} vs {b.name}{list(b.shape)}")
    out = dtypes.dtype(out_dtype or a.dtype)
    k = te.reduce_axis(a.shape[1], name="k")
    return te.compute(
        (a.shape[0], b.shape[1]),
        lambda m, n: te.sum(_mul_in(a[m, k], b[k, n], out), axis=k),
        name=name,
    )


def conv2d_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output extent of a convolution along one spatial dimension."""
    out = (size + 2 * padding - kernel) // stride + 1
    if out <= 0:
        raise IRTypeError(
            f"conv2d: kernel {kernel} with padding {padding} does not fit an input of size {size}"
        )
    return out


def conv2d_nchw(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    out_dtype: str | None = None,
    name: str = "conv2d",
) -> te.Tensor:
    """2-D convolution, data (N, C, H, W), kernel (K, C, R, S) -> (N, K, OH, OW)."""
    _check_ndim(data, 4, "conv2d_nchw", "NCHW")
    _check_ndim(kernel, 4, "conv2d_nchw", "OIHW (K, C, R, S)")
    sh, sw = _pair(stride, "conv2d_nchw stride")
    ph, pw = _pair(padding, "conv2d_nchw padding")
    if sh <= 0 or sw <= 0 or ph < 0 or pw < 0:
        raise IRTypeError(f"conv2d_nchw: bad stride {stride!r} or padding {padding!r}")
    n, c, h, w = data.shape
    k, kc, r, s = kernel.shape
    if kc != c:
        raise IRTypeError(f"conv2d_nchw: data has {c} channels but the kernel expects {kc}")
    oh, ow = conv2d_output_size(h, r, sh, ph), conv2d_output_size(w, s, sw, pw)
    out = dtypes.dtype(out_dtype or data.dtype)
    src = pad(data, (0, 0, ph, pw), name=f"{name}.pad") if ph or pw else data
    rc = te.reduce_axis(c, name="rc")
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")
    return te.compute(
        (n, k, oh, ow),
        lambda nn, ff, yy, xx: te.sum(
            _mul_in(src[nn, rc, yy * sh + ry, xx * sw + rx], kernel[ff, rc, ry, rx], out),
            axis=[rc, ry, rx],
        ),
        name=name,
    )


def conv2d_nhwc(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    out_dtype: str | None = None,
    kernel_layout: str = "HWIO",
    name: str = "conv2d",
) -> te.Tensor:
    """2-D convolution, data (N, H, W, C), kernel HWIO (R, S, C, K) or OHWI (K, R, S, C) -> NHWK."""
    _check_ndim(data, 4, "conv2d_nhwc", "NHWC")
    if kernel_layout not in ("HWIO", "OHWI"):
        raise IRTypeError(f"conv2d_nhwc: kernel_layout must be HWIO or OHWI, got {kernel_layout!r}")
    _check_ndim(kernel, 4, "conv2d_nhwc", kernel_layout)
    sh, sw = _pair(stride, "conv2d_nhwc stride")
    ph, pw = _pair(padding, "conv2d_nhwc padding")
    if sh <= 0 or sw <= 0 or ph < 0 or pw < 0:
        raise IRTypeError(f"conv2d_nhwc: bad stride {stride!r} or padding {padding!r}")
    n, h, w, c = data.shape
    if kernel_layout == "HWIO":
        r, s, kc, k = kernel.shape
    else:
        k, r, s, kc = kernel.shape
    if kc != c:
        raise IRTypeError(f"conv2d_nhwc: data has {c} channels but the kernel expects {kc}")
    oh, ow = conv2d_output_size(h, r, sh, ph), conv2d_output_size(w, s, sw, pw)
    out = dtypes.dtype(out_dtype or data.dtype)
    src = pad(data, (0, ph, pw, 0), name=f"{name}.pad") if ph or pw else data
    ry = te.reduce_axis(r, name="ry")
    rx = te.reduce_axis(s, name="rx")
    rc = te.reduce_axis(c, name="rc")

    def weight(ff):
        return kernel[ry, rx, rc, ff] if kernel_layout == "HWIO" else kernel[ff, ry, rx, rc]

    return te.compute(
        (n, oh, ow, k),
        lambda nn, yy, xx, ff: te.sum(
            _mul_in(src[nn, yy * sh + ry, xx * sw + rx, rc], weight(ff), out),
            axis=[ry, rx, rc],
        ),
        name=name,
    )


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a whole number of ``multiple`` (a channel count to whole blocks or lanes)."""
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class ConvShape:
    """A conv2d layer: ``n`` images of h x w x ic, oc output channels, a k x k kernel, stride s, padding p.

    The one conv shape of Tandem: every target's schedules, the run flows and the experiments take it
    (``k`` is always the kernel size, ``oc`` the output channels)."""

    h: int
    w: int
    ic: int
    oc: int
    k: int = 3
    s: int = 1
    p: int = 1
    n: int = 1

    @property
    def oh(self) -> int:
        return conv2d_output_size(self.h, self.k, self.s, self.p)

    @property
    def ow(self) -> int:
        return conv2d_output_size(self.w, self.k, self.s, self.p)

    @property
    def macs(self) -> int:
        return self.n * self.oh * self.ow * self.oc * self.ic * self.k * self.k

    def in_rows(self, rows: int) -> int:
        """The input rows (of the padded input) that ``rows`` consecutive output rows read."""
        return (rows - 1) * self.s + self.k

    def invalid(self) -> str | None:
        """Why this is no conv layer (a size below 1, a negative padding, a kernel larger than the padded
        input), or None."""
        if min(self.h, self.w, self.ic, self.oc, self.k, self.s, self.n) < 1 or self.p < 0:
            return (f"expected positive sizes and pad >= 0, but got h={self.h}, w={self.w}, cin={self.ic}, "
                    f"cout={self.oc}, k={self.k}, stride={self.s}, pad={self.p}")
        hp, wp = self.h + 2 * self.p, self.w + 2 * self.p
        if self.k > min(hp, wp):
            return f"a {self.k}x{self.k} kernel does not fit the padded {hp}x{wp} input"
        return None


@dataclass(frozen=True)
class GemmShape:
    """A GEMM layer: ``out[m, n] = sum_k data[m, k] * weight[n, k]`` (data ``[M, K]``, weights ``[N, K]``, the
    layout of ``dense``).

    The one GEMM shape of Tandem, beside ``ConvShape``: the run flows and the experiments take it; each
    target packs it in its own layouts."""

    m: int
    n: int
    k: int

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k
