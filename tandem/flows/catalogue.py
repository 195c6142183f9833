"""The operators ``tandem compile`` knows: tensor expression, default schedule, numpy reference, inputs.

``build_op(op, shape, dtype, params)`` returns a ``Workload``. Shapes and defaults per operator:

==========================  ===============  ===========  ==================================================
op                          shape (default)  dtype        params (besides split/nparts/bind)
==========================  ===============  ===========  ==================================================
add, sub, mul, maximum      HxW... (14x14)   float32      (none)
relu                        HxW... (14x14)   float32      (none)
dense (X[M,K] * W[N,K]^T)   MxNxK (16x24x32) int8->int32  (none)
gemm (A[M,K] * B[K,N])      MxNxK (16x24x32) int8->int32  (none)
conv2d                      NxCxHxW          int8->int32  k (out channels, 8), r (kernel, 3), stride (1),
                            (1x4x8x8)                     padding (1), layout (nchw | nhwc; HWIO kernel)
==========================  ===============  ===========  ==================================================

Integer operators of dense, gemm and conv2d accumulate in int32; float ones compute in their dtype. Each
operator's reference is compiler/ops/reference.py's (exact: int64 or float64, in the output's layout);
``Workload.reduction`` says how many products each output sums, the bound a float sum is checked within
(tandem/flows/compile.py). Schedule params act on the output stage's loops, in this order:
``split=AXIS:FACTOR`` or ``nparts=AXIS:N`` splits a loop, then ``bind=AXIS:TAG`` binds one to a
hardware axis (``core``). AXIS is a loop's position among the stage's current loops (0 is the
outermost; after a split, 0 is the outer part) or its name.

Bad input raises ``WorkloadError`` (a ``ValueError``) naming the option and the value; the command line
prints it as its one error line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from compiler import ops, te
from compiler.errors import IRTypeError
from compiler.ir import dtypes
from compiler.ops import reference as numpy_reference
from compiler.schedule import Schedule, create_schedule
from tandem.flows.params import WorkloadError, int_param

OPS = frozenset({"add", "sub", "mul", "maximum", "relu", "dense", "gemm", "conv2d"})
ELEMENTWISE = ("add", "sub", "mul", "maximum")
SCHEDULE_KEYS = ("split", "nparts", "bind")
OP_KEYS: dict[str, tuple[str, ...]] = {"conv2d": ("k", "r", "stride", "padding", "layout")}
DEFAULT_SHAPE: dict[str, tuple[int, ...]] = {
    **dict.fromkeys((*ELEMENTWISE, "relu"), (14, 14)),
    "dense": (16, 24, 32),
    "gemm": (16, 24, 32),
    "conv2d": (1, 4, 8, 8),
}
SHAPE_LETTERS = {"dense": "MxNxK", "gemm": "MxNxK", "conv2d": "NxCxHxW"}
CONV2D_DEFAULTS = {"k": "8", "r": "3", "stride": "1", "padding": "1", "layout": "nchw"}


@dataclass(frozen=True)
class Workload:
    """One operator ready to compile: its tensors (inputs, then the output) and default schedule.

    ``reference(inputs)`` is the exact result (compiler/ops/reference.py: int64 or float64) in the output's
    layout; ``random_inputs(rng)`` draws inputs of the right shapes and dtypes (bfloat16 as
    bfloat16-representable float32); ``reduction`` is the number of products summed into each output (0 for
    an element-wise operator).
    """

    name: str
    tensors: tuple[te.Tensor, ...]
    schedule: Schedule
    reference: Callable[[Sequence[np.ndarray]], np.ndarray]
    random_inputs: Callable[[np.random.Generator], list[np.ndarray]]
    reduction: int = 0

    @property
    def output(self) -> te.Tensor:
        return self.tensors[-1]


def _dtype(text: str | None, default: str) -> dtypes.DType:
    try:
        dt = dtypes.dtype(text or default)
    except IRTypeError:  # say it on the option, and list only the dtypes an operator can take
        names = ", ".join(d.name for d in dtypes.ALL if not d.is_bool)
        raise WorkloadError("--dtype", f"expected one of {names}, but got {text!r}") from None
    if dt.is_bool:
        raise WorkloadError("--dtype", "expected a numeric dtype, but got bool")
    return dt


# --------------------------------------------------------------------------------------------------
# Random inputs


def _random(rng: np.random.Generator, shape: tuple[int, ...], dt: dtypes.DType) -> np.ndarray:
    if dt.is_int:
        lo, hi = max(int(dt.min_value), -128), min(int(dt.max_value), 127)
        return rng.integers(lo, hi, shape, endpoint=True, dtype=dt.numpy)
    values = rng.standard_normal(shape).astype(dt.numpy)
    return dtypes.round_bfloat16(values) if dt.kind == "bfloat" else values


def _acc(dt: dtypes.DType) -> dtypes.DType:
    """The accumulator (and output) dtype of dense, gemm and conv2d on ``dt`` inputs."""
    return dtypes.int32 if dt.is_int else dt


# --------------------------------------------------------------------------------------------------
# Builders


def _check_ndim(op: str, shape: tuple[int, ...], ndim: int | None) -> None:
    if ndim is not None and len(shape) != ndim:
        raise WorkloadError(
            "--shape",
            f"{op} expects {ndim} dims ({SHAPE_LETTERS[op]}), but got {len(shape)} "
            f"({'x'.join(map(str, shape))})",
        )


def _elementwise(op: str, shape: tuple[int, ...], dt: dtypes.DType):
    a = te.placeholder(shape, dt, name="A")
    if op == "relu":
        out = ops.relu(a, out_name="C")
        tensors = (a, out)

        def reference(x):
            return numpy_reference.clip(x[0], 0, None)

    else:
        b = te.placeholder(shape, dt, name="B")
        out = getattr(ops, op)(a, b, out_name="C")
        tensors = (a, b, out)

        def reference(x):
            return getattr(numpy_reference, op)(x[0], x[1])

    def inputs(rng):
        return [_random(rng, shape, dt) for _ in tensors[:-1]]

    return tensors, reference, inputs


def _matmul(op: str, shape: tuple[int, ...], dt: dtypes.DType):
    m, n, k = shape
    acc = _acc(dt)
    if op == "dense":
        x = te.placeholder((m, k), dt, name="X")
        w = te.placeholder((n, k), dt, name="W")
        out = ops.dense(x, w, out_dtype=acc.name)
    else:
        x = te.placeholder((m, k), dt, name="A")
        w = te.placeholder((k, n), dt, name="B")
        out = ops.gemm(x, w, out_dtype=acc.name)

    def reference(arrays):
        return getattr(numpy_reference, op)(arrays[0], arrays[1])

    def inputs(rng):
        return [_random(rng, x.shape, dt), _random(rng, w.shape, dt)]

    return (x, w, out), reference, inputs


def _conv2d(shape: tuple[int, ...], dt: dtypes.DType, params: Mapping[str, str]):
    n, c, h, w = shape
    p = {**CONV2D_DEFAULTS, **{k: v for k, v in params.items() if k in CONV2D_DEFAULTS}}
    k = int_param("k", p["k"], 1)
    r = int_param("r", p["r"], 1)
    stride = int_param("stride", p["stride"], 1)
    padding = int_param("padding", p["padding"], 0)
    layout = p["layout"].lower()
    if layout not in ("nchw", "nhwc"):
        raise WorkloadError("-p layout", f"expected nchw or nhwc, but got {p['layout']!r}")
    for size, what in ((h, "H"), (w, "W")):
        if size + 2 * padding < r:
            raise WorkloadError(
                "-p r",
                f"a {r}x{r} kernel does not fit input {what}={size} with padding {padding}",
            )
    acc = _acc(dt)
    if layout == "nchw":
        data = te.placeholder((n, c, h, w), dt, name="data")
        kernel = te.placeholder((k, c, r, r), dt, name="kernel")
        out = ops.conv2d_nchw(data, kernel, stride, padding, out_dtype=acc.name)

        def reference(arrays):
            return numpy_reference.conv2d(arrays[0], arrays[1], stride, padding)

    else:
        data = te.placeholder((n, h, w, c), dt, name="data")
        kernel = te.placeholder((r, r, c, k), dt, name="kernel")  # HWIO
        out = ops.conv2d_nhwc(data, kernel, stride, padding, out_dtype=acc.name)

        def reference(arrays):   # NHWC data and an HWIO kernel around the NCHW reference
            nchw = numpy_reference.conv2d(arrays[0].transpose(0, 3, 1, 2), arrays[1].transpose(3, 2, 0, 1),
                                          stride, padding)
            return nchw.transpose(0, 2, 3, 1)

    def inputs(rng):
        return [_random(rng, data.shape, dt), _random(rng, kernel.shape, dt)]

    return (data, kernel, out), reference, inputs


# --------------------------------------------------------------------------------------------------
# Schedule params


def _axis_value(key: str, value: str) -> tuple[str, str]:
    axis, sep, rest = value.partition(":")
    if not sep or not axis.strip() or not rest.strip():
        what = "TAG" if key == "bind" else ("N" if key == "nparts" else "FACTOR")
        raise WorkloadError(f"-p {key}", f"expected AXIS:{what}, like {key}=0:4, but got {value!r}")
    return axis.strip(), rest.strip()


def _loop(key: str, stage, axis: str):
    loops = stage.leaf_iter_vars
    listing = ", ".join(f"{k}:{iv.name}" for k, iv in enumerate(loops))
    if re.fullmatch(r"-?[0-9]+", axis):
        k = int(axis)
        if 0 <= k < len(loops):
            return loops[k]
    else:
        for iv in loops:
            if iv.name == axis:
                return iv
    raise WorkloadError(f"-p {key}", f"no loop {axis!r} in stage '{stage.name}'; its loops are {listing}")


def _apply_schedule(sch: Schedule, out: te.Tensor, params: Mapping[str, str]) -> None:
    stage = sch[out]
    if "split" in params and "nparts" in params:
        raise WorkloadError("-p split", "give one of split= and nparts=, not both")
    for key in ("split", "nparts"):
        if key in params:
            axis, amount = _axis_value(key, params[key])
            number = int_param(key, amount, 1)
            loop = _loop(key, stage, axis)
            stage.split(loop, **{"factor" if key == "split" else "nparts": number})
    if "bind" in params:
        axis, tag = _axis_value("bind", params["bind"])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tag):
            raise WorkloadError("-p bind", f"expected a hardware axis name like core, but got {tag!r}")
        stage.bind(_loop("bind", stage, axis), te.thread_axis(tag))


# --------------------------------------------------------------------------------------------------
# Entry point


def build_op(
    op: str, shape: tuple[int, ...] | None, dtype: str | None, params: Mapping[str, str]
) -> Workload:
    """The workload of operator ``op`` (see the module docstring for shapes, dtypes and params)."""
    if op not in OPS:
        raise WorkloadError("OP", f"expected one of {', '.join(sorted(OPS))}, but got {op!r}")
    valid = SCHEDULE_KEYS + OP_KEYS.get(op, ())
    for key in params:
        if key not in valid:
            raise WorkloadError(f"-p {key}", f"unknown param for {op}; valid keys are {', '.join(valid)}")
    shape = tuple(shape) if shape is not None else DEFAULT_SHAPE[op]
    if op in ("dense", "gemm"):
        _check_ndim(op, shape, 3)
        dt = _dtype(dtype, "int8")
        tensors, reference, inputs = _matmul(op, shape, dt)
    elif op == "conv2d":
        _check_ndim(op, shape, 4)
        dt = _dtype(dtype, "int8")
        tensors, reference, inputs = _conv2d(shape, dt, params)
    else:
        dt = _dtype(dtype, "float32")
        tensors, reference, inputs = _elementwise(op, shape, dt)
    sch = create_schedule(tensors[-1])
    _apply_schedule(sch, tensors[-1], params)
    reduce_axes = tensors[-1].op.reduce_axis
    reduction = math.prod(iv.extent for iv in reduce_axes) if reduce_axes else 0
    return Workload(op, tensors, sch, reference, inputs, reduction)
