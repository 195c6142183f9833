"""The multiply-accumulate operator kinds of TensorIR's suite (seed 004, Sec. 5.1) as int8 tensor expressions,
for the mapping onto a target's tensor intrinsic (``compiler.passes.reindex``).

    c = contraction("conv1d", {"IC": 16, "OC": 32, "W": 56})   # kind and parameters (defaults below)
    c.out.op                                                    # out = sum(i32(data) * i32(weight))

Kinds: ``conv1d``, ``conv2d``, ``conv3d``, ``dilated_conv`` and ``group_conv`` (one convolution of 1 to 3
spatial dimensions with stride, padding, dilation and groups), ``depthwise`` (as many groups as channels:
TensorIR finds no GEMM mapping for it; here each channel is a GEMM of one output channel),
``conv_transpose`` (T2D, computed as the conv of the spread input with the flipped kernel) and
``batch_matmul``. A convolution's expression reads the
data already zero-padded and in groups, ``data[n, g, c, *spatial]``, and writes ``out[n, g, o, *spatial]``, so
every access is affine and the group is an iterator of its own (TensorIR writes grouped convolution the same
way); ``layout_data``, ``layout_weight`` and ``layout_out`` are the layout transforms between those and the
plain NC(D)(H)W data and OI(D)(H)W weights (a transposed conv's: IOHW).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from compiler import te
from compiler.errors import ScheduleError
from compiler.ops import reference

#: the parameters of each kind and their defaults (None: required); convolutions' spatial sizes, then the rest
KINDS: dict[str, dict[str, int | None]] = {
    "conv1d": {"W": None, "IC": None, "OC": None, "K": 3, "S": 1, "P": 1, "DIL": 1, "G": 1, "N": 1},
    "conv2d": {"H": None, "W": None, "IC": None, "OC": None, "K": 3, "S": 1, "P": 1, "DIL": 1, "G": 1,
               "N": 1},
    "conv3d": {"D": None, "H": None, "W": None, "IC": None, "OC": None, "K": 3, "S": 1, "P": 1, "DIL": 1,
               "G": 1, "N": 1},
    "dilated_conv": {"H": None, "W": None, "IC": None, "OC": None, "K": 3, "S": 1, "P": 2, "DIL": 2, "G": 1,
                     "N": 1},
    "group_conv": {"H": None, "W": None, "IC": None, "OC": None, "G": None, "K": 3, "S": 1, "P": 1, "DIL": 1,
                   "N": 1},
    "depthwise": {"H": None, "W": None, "C": None, "K": 3, "S": 1, "P": 1, "DIL": 1, "N": 1},
    "conv_transpose": {"H": None, "W": None, "IC": None, "OC": None, "K": 3, "S": 2, "P": 1, "N": 1},
    "batch_matmul": {"B": None, "M": None, "N": None, "K": None},
}
SPATIAL = ("D", "H", "W")


@dataclass(frozen=True)
class Contraction:
    """One operator: its kind, parameters, and tensor expression ``out = sum(i32(data) * i32(weight))``;
    ``plain`` are the shapes of the user's data, weights and output."""

    kind: str
    params: dict[str, int]
    data: te.Tensor
    weight: te.Tensor
    out: te.Tensor
    plain: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

    @property
    def groups(self) -> int:
        """A convolution's channel groups: G, or for a depthwise one its channel count C."""
        return self.params["C"] if self.kind == "depthwise" else self.params.get("G", 1)

    @property
    def macs(self) -> int:
        op = self.out.op
        return math.prod(self.out.shape) * math.prod(iv.extent for iv in op.reduce_axis)

    def reference(self, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """The exact result on the plain arrays (compiler/ops/reference), in the plain output layout."""
        if self.kind == "batch_matmul":
            return reference.batch_matmul(data, weight)
        p = self.params
        if self.kind == "conv_transpose":
            return reference.conv_transpose_nd(data, weight, p["S"], p["P"])
        return reference.conv_nd(data, weight, p["S"], p["P"], p["DIL"], self.groups)

    def layout_data(self, data: np.ndarray) -> np.ndarray:
        """The plain data in the expression's layout: zero-padded, channels split by group."""
        if self.kind == "batch_matmul":
            return data
        if self.kind == "conv_transpose":   # the conv over the input with S - 1 zeros between pixels
            s, edge = self.params["S"], self.params["K"] - 1 - self.params["P"]
            n, c, h, w = data.shape
            spread = np.zeros((n, c, (h - 1) * s + 1, (w - 1) * s + 1), data.dtype)
            spread[:, :, ::s, ::s] = data
            return np.pad(spread, ((0, 0), (0, 0), (edge, edge), (edge, edge)))[:, None]
        p, g = self.params["P"], self.groups
        padded = np.pad(data, ((0, 0), (0, 0), *[(p, p)] * (data.ndim - 2)))
        return padded.reshape(padded.shape[0], g, -1, *padded.shape[2:])

    def layout_weight(self, weight: np.ndarray) -> np.ndarray:
        """The plain weights in the expression's layout: split by group (a transposed conv's flipped and
        transposed: [C, O, KH, KW] to [O, C, KH, KW] read backwards)."""
        if self.kind == "batch_matmul":
            return weight
        if self.kind == "conv_transpose":
            return weight.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1][None]
        return weight.reshape(self.groups, -1, *weight.shape[1:])

    def layout_out(self, out: np.ndarray) -> np.ndarray:
        """The expression's output in the plain layout (groups joined back into channels)."""
        return out.reshape(self.plain[2])


def contraction(kind: str, params: Mapping[str, int], dtypes: tuple[str, str] = ("int8", "int8")
                ) -> Contraction:
    """The operator ``kind`` with ``params`` (every key of ``KINDS[kind]``) on data and weights of ``dtypes``,
    summed in int32; ScheduleError naming the parameter when the shapes make it empty or impossible."""
    if kind not in KINDS:
        raise ScheduleError(f"no operator kind {kind!r}; expected one of {', '.join(KINDS)}")
    p = {key: params.get(key, default) for key, default in KINDS[kind].items()}
    if kind == "batch_matmul":
        return _batch_matmul(p, dtypes)
    if kind == "conv_transpose":
        return _conv_transpose(p, dtypes)
    if kind == "depthwise":   # one group per channel: each group a GEMM of one output channel
        c = p["C"]
        return dataclasses.replace(_conv(kind, {**p, "IC": c, "OC": c, "G": c}, dtypes), params=p)
    return _conv(kind, p, dtypes)


def _conv(kind: str, p: dict, dtypes: tuple[str, str]) -> Contraction:
    spatial = [p[k] for k in SPATIAL if k in p]
    n, ic, oc, k, s, pad, dil, g = (p[key] for key in ("N", "IC", "OC", "K", "S", "P", "DIL", "G"))
    if ic % g or oc % g:
        raise ScheduleError(f"{kind}: G = {g} groups must divide IC = {ic} and OC = {oc}")
    reach = dil * (k - 1) + 1
    out = [(size + 2 * pad - reach) // s + 1 for size in spatial]
    if min(out) < 1:
        raise ScheduleError(f"{kind}: a kernel of K = {k} with DIL = {dil} reaches {reach} elements, more "
                            f"than the input's {min(spatial)} with P = {pad} on each side")
    cg, og = ic // g, oc // g
    data = te.placeholder((n, g, cg, *(size + 2 * pad for size in spatial)), dtypes[0], name="data")
    weight = te.placeholder((g, og, cg, *[k] * len(spatial)), dtypes[1], name="weight")
    rc = te.reduce_axis(cg, "rc")
    window = [te.reduce_axis(k, f"r{name.lower()}") for name in SPATIAL[-len(spatial):]]

    def body(i, grp, o, *xs):
        at = [x * s + r * dil for x, r in zip(xs, window, strict=True)]
        product = te.cast(data[(i, grp, rc, *at)], "int32") * te.cast(weight[(grp, o, rc, *window)], "int32")
        return te.sum(product, axis=[rc, *window])

    names = ["n", "g", "o", *(name.lower() for name in SPATIAL[-len(spatial):])]
    result = te.compute((n, g, og, *out), body, name="out", axis_names=names)
    return Contraction(kind, p, data, weight, result,
                       ((n, ic, *spatial), (oc, cg, *[k] * len(spatial)), (n, oc, *out)))


def _conv_transpose(p: dict, dtypes: tuple[str, str]) -> Contraction:
    """T2D as the conv (stride 1) of the input spread S apart and padded by K - 1 - P with the flipped,
    transposed kernel: the layout transforms do the spreading and flipping."""
    n, h, w, ic, oc, k, s, pad = (p[key] for key in ("N", "H", "W", "IC", "OC", "K", "S", "P"))
    if pad > k - 1:
        raise ScheduleError(f"conv_transpose: P = {pad} crops more than the K - 1 = {k - 1} rows a kernel of "
                            f"K = {k} adds")
    edge = k - 1 - pad
    spread = {"H": (h - 1) * s + 1 + 2 * edge, "W": (w - 1) * s + 1 + 2 * edge}
    equivalent = _conv("conv_transpose", {**spread, "N": n, "IC": ic, "OC": oc, "K": k, "S": 1, "P": 0,
                                          "DIL": 1, "G": 1}, dtypes)
    oh, ow = equivalent.plain[2][2:]
    return Contraction("conv_transpose", p, equivalent.data, equivalent.weight, equivalent.out,
                       ((n, ic, h, w), (ic, oc, k, k), (n, oc, oh, ow)))


def _batch_matmul(p: dict, dtypes: tuple[str, str]) -> Contraction:
    b, m, n, k = p["B"], p["M"], p["N"], p["K"]
    data = te.placeholder((b, m, k), dtypes[0], name="data")
    weight = te.placeholder((b, n, k), dtypes[1], name="weight")
    r = te.reduce_axis(k, "r")
    result = te.compute((b, m, n), lambda q, i, j: te.sum(
        te.cast(data[q, i, r], "int32") * te.cast(weight[q, j, r], "int32"), axis=r), name="out")
    return Contraction("batch_matmul", p, data, weight, result, ((b, m, k), (b, n, k), (b, m, n)))
