"""The layers the CPU peers run: a 2-D convolution or a GEMM, u8 x s8 -> s32, their random inputs and the
exact references every peer is checked against (plus ``requantize``, what the requantizing peer outputs)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from compiler.ops import reference
from compiler.ops.nn import ConvShape


def _check_sizes(owner: str, spec: Any, minimum: dict[str, int]) -> None:
    for f in fields(spec):
        value = getattr(spec, f.name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum[f.name]:
            what = "a non-negative" if minimum[f.name] == 0 else "a positive"
            raise ValueError(f"argument '{f.name}' to {owner}: expected {what} integer, but got {value!r}")


@dataclass(frozen=True)
class ConvSpec:
    """One 2-D convolution layer: batch 1, NCHW data [1, c, h, w], OIHW kernel [k, c, r, r]."""

    c: int
    h: int
    w: int
    k: int
    r: int
    stride: int = 1
    pad: int = 0

    def __post_init__(self) -> None:
        _check_sizes("ConvSpec", self, dict(c=1, h=1, w=1, k=1, r=1, stride=1, pad=0))
        hp, wp = self.h + 2 * self.pad, self.w + 2 * self.pad
        if self.r > min(hp, wp):
            raise ValueError(f"argument 'r' to ConvSpec: expected a kernel that fits the padded input "
                             f"{hp}x{wp}, but got r={self.r}")

    @property
    def shape(self) -> ConvShape:
        """The layer as Tandem's one conv shape (UNIT's k output channels are its oc, r its kernel k)."""
        return ConvShape(self.h, self.w, self.c, self.k, self.r, self.stride, self.pad)

    @property
    def oh(self) -> int:
        return self.shape.oh

    @property
    def ow(self) -> int:
        return self.shape.ow

    @property
    def macs(self) -> int:
        return self.shape.macs

    @property
    def ops(self) -> int:
        return 2 * self.macs


@dataclass(frozen=True)
class GemmSpec:
    """C[m, n] = sum_k A[m, k] * B[n, k], with B in "dense" layout [n, k]."""

    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        _check_sizes("GemmSpec", self, dict(m=1, n=1, k=1))

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k

    @property
    def ops(self) -> int:
        return 2 * self.macs


def conv_inputs(spec: ConvSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Data uint8 [1, c, h, w] in [0, 255] and kernel int8 [k, c, r, r] in [-128, 127], from ``seed``."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (1, spec.c, spec.h, spec.w), dtype=np.uint8)
    kernel = rng.integers(-128, 128, (spec.k, spec.c, spec.r, spec.r), dtype=np.int8)
    return data, kernel


def gemm_inputs(spec: GemmSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A uint8 [m, k] in [0, 255] and B int8 [n, k] in [-128, 127], from ``seed``."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (spec.m, spec.k), dtype=np.uint8)
    b = rng.integers(-128, 128, (spec.n, spec.k), dtype=np.int8)
    return a, b


def im2col(data: np.ndarray, spec: ConvSpec, dtype: type[np.integer]) -> np.ndarray:
    """The [c*r*r, oh*ow] patch matrix of ``data`` (rows ordered c, ry, rx like the OIHW kernel)."""
    p = spec.pad
    padded = np.pad(data[0].astype(dtype), ((0, 0), (p, p), (p, p)))
    windows = sliding_window_view(padded, (spec.r, spec.r), axis=(1, 2))[:, ::spec.stride, ::spec.stride]
    return windows.transpose(0, 3, 4, 1, 2).reshape(spec.c * spec.r * spec.r, spec.oh * spec.ow)


def conv_reference(data: np.ndarray, kernel: np.ndarray, spec: ConvSpec) -> np.ndarray:
    """The exact int32 convolution [1, k, oh, ow] (``compiler.ops.reference.conv2d``)."""
    return reference.conv2d(data, kernel, spec.stride, spec.pad).astype(np.int32)


def gemm_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact int32 GEMM a @ b.T [m, n] (``compiler.ops.reference.dense``)."""
    return reference.dense(a, b).astype(np.int32)


def requantize(acc: np.ndarray, shift: int) -> np.ndarray:
    """What ``onnxruntime-qlinear`` outputs for the int32 accumulators: clip(rint(acc / 2**shift), 0, 255)."""
    return np.clip(np.rint(acc / 2.0**shift), 0, 255).astype(np.uint8)


def qlinear_shift(reduction: int) -> int:
    """A y_scale exponent that maps u8 x s8 sums over ``reduction`` terms onto roughly [0, 255]."""
    return max(0, round(math.log2(math.sqrt(reduction))) + 7)
