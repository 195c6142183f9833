"""Calibration of an int8 quantization (tandem/network/quantize.py's power-of-two exponents, qdq_write.py's
affine ranges) from the values each tensor takes on calibration inputs (the user's, ``--calibrate
FILE.npz``, or seeded random ones).

Two rules (``METHODS``). ``max``: the largest exponent that keeps every calibrated value inside int8
(``floor(log2(127 / max|t|))``), so nothing clips and the step is as coarse as the largest outlier makes it.
``mse``: among that exponent and the next ``EXTRA`` larger ones (finer steps that clip the
largest values), the one with the least squared error over the calibration values, rounding and clipping
together; a tie keeps the smaller exponent (no clipping). Weights are calibrated the same way on their own
values. An infinity cannot be calibrated (a GraphError), but for the -inf of a softmax's masked positions
(``softmax_inputs``: a causal mask), which is left out of the range.

    exponents = activation_exponents(graph, samples, "mse")      # tensor name -> exponent
    e = tensor_exponent([w], "mse")

The affine scheme (tandem/network/qdq_write.py: uint8 with a zero point) calibrates each tensor's range
``[lo, hi]`` by the same two rules (``affine_ranges``): its min/max (widened to hold 0), or the fraction of
it (``SHRINKS``) with the least squared error over the calibration values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tandem.network.graph import Graph, GraphError, tensors

METHODS = ("mse", "max")
#: how many finer exponents than max's the MSE rule weighs
EXTRA = 3
MAX_EXPONENT = 30   # a tensor that is all zeros gets this exponent (any exponent represents it)


def exponent_of(max_abs: float) -> int:
    """The largest e with ``max_abs * 2**e <= 127``."""
    if max_abs <= 0 or not math.isfinite(max_abs):
        return MAX_EXPONENT
    return min(MAX_EXPONENT, math.floor(math.log2(127.0 / max_abs)))


def squared_error(x: np.ndarray, e: int) -> float:
    """The squared error of ``x`` quantized to int8 at exponent ``e`` (rounded, clipped) and read back."""
    x = np.asarray(x, np.float64)
    q = np.clip(np.rint(x * 2.0**e), -128, 127)
    return float(np.sum((q * 2.0**-e - x) ** 2))


def tensor_exponent(values: Sequence[np.ndarray], method: str) -> int:
    """The exponent of a tensor that takes ``values`` (the module's rules)."""
    largest = max((float(np.max(np.abs(v))) for v in values if np.size(v)), default=0.0)
    e = exponent_of(largest)
    if method == "max" or e == MAX_EXPONENT:
        return e
    errors = [sum(squared_error(v, c) for v in values) for c in range(e, e + EXTRA + 1)]
    return e + int(np.argmin(errors))   # the first of equal errors: the smallest exponent


def activation_exponents(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]], method: str
                         ) -> dict[str, int]:
    """Every tensor's exponent (graph inputs and layer outputs) over the float32 reference's values on
    ``samples`` (input dicts)."""
    return calibrate(graph, samples, method)[0]


def calibrate(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]], method: str
              ) -> tuple[dict[str, int], frozenset[str]]:
    """Every tensor's exponent over the float32 reference's values on ``samples`` (input dicts), and the
    softmax masks among them (``softmax_inputs``: their -inf left out of their range). Any other infinity
    is a GraphError naming the tensor."""
    if method not in METHODS:
        raise GraphError(f"calibration {method!r}: Tandem calibrates by {' or '.join(METHODS)}")
    largest: dict[str, float] = {}
    errors: dict[str, np.ndarray] = {}
    masks: set[str] = set()
    softmax_only = softmax_inputs(graph)
    runs = [tensors(graph, inputs) for inputs in samples] if method == "mse" else None
    for values in runs or (tensors(graph, inputs) for inputs in samples):
        for name, value in values.items():
            if np.issubdtype(value.dtype, np.floating) and value.size:
                if name in softmax_only and np.any(value == -np.inf):
                    masks.add(name)
                value = _unmasked(value) if name in masks else value
                top = float(np.max(np.abs(value))) if value.size else 0.0
                if not math.isfinite(top):
                    raise GraphError(f"{graph.name}: tensor {name} takes the value {top} on a calibration "
                                     f"input: int8 cannot represent it")
                largest[name] = max(largest.get(name, 0.0), top)
    if method == "max":
        return {name: exponent_of(m) for name, m in largest.items()}, frozenset(masks)
    for values in runs:
        for name, value in values.items():
            value = _unmasked(value) if name in masks else value
            if name in largest and exponent_of(largest[name]) != MAX_EXPONENT:
                e = exponent_of(largest[name])
                errors[name] = errors.get(name, 0) + np.array(
                    [squared_error(value, c) for c in range(e, e + EXTRA + 1)])
    return {name: exponent_of(m) + (int(np.argmin(errors[name])) if name in errors else 0)
            for name, m in largest.items()}, frozenset(masks)


def softmax_inputs(graph: Graph) -> set[str]:
    """The tensors only Softmax layers read (not the graph's output). One that takes -inf on a calibration
    input is a softmax mask (a GPT-2 prefill's causal mask: the future positions' scores filled with -inf):
    its range is that of its finite values, and in the int8 graph its lowest value, -128, stands for -inf
    (tandem/network/quantize.py), which the softmax gives exactly nothing."""
    readers: dict[str, set[str]] = {}
    for layer in graph.layers:
        for name in layer.inputs:
            readers.setdefault(name, set()).add(layer.op)
    return {name for name, ops in readers.items() if ops == {"Softmax"} and name != graph.output}


def _unmasked(value: np.ndarray) -> np.ndarray:
    """The values of a softmax mask (``softmax_inputs``) but its masked positions (-inf)."""
    return value[value != -np.inf]


def read_samples(path: Path, graph: Graph) -> list[dict[str, np.ndarray]]:
    """Calibration inputs from an .npz file: one array per graph input (by name), of the input's shape (one
    sample) or with a leading axis of samples; every input given, the same number of samples each."""
    if not Path(path).is_file():
        raise GraphError(f"{path}: no such calibration file")
    try:
        arrays = dict(np.load(path, allow_pickle=False))
    except Exception as exc:   # numpy's errors for a file that is not an .npz of arrays
        raise GraphError(f"{path}: not an .npz file of arrays ({type(exc).__name__}: {exc})") from None
    unknown = sorted(set(arrays) - set(graph.inputs))
    missing = [n for n in graph.inputs if n not in arrays]
    if unknown or missing:
        raise GraphError(f"{path}: " + (f"holds {unknown[0]}, which is not a graph input" if unknown else
                                         f"has no array for the graph input {missing[0]}") +
                         f" (inputs: {', '.join(graph.inputs)})")
    counts = set()
    for name, shape in graph.inputs.items():
        a = arrays[name]
        if a.shape == shape:
            arrays[name] = a[None]
        elif a.shape[1:] != shape:
            raise GraphError(f"{path}: {name} has shape {list(a.shape)}; expected {list(shape)} or "
                             f"[samples, {', '.join(map(str, shape))}]")
        counts.add(arrays[name].shape[0])
    if len(counts) != 1 or 0 in counts:
        raise GraphError(f"{path}: the inputs hold different numbers of samples ({sorted(counts)})")
    return [{name: arrays[name][i] for name in graph.inputs} for i in range(counts.pop())]


#: the fractions of a tensor's min/max range the affine MSE rule weighs (1: nothing clips)
SHRINKS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4)


def affine_squared_error(x: np.ndarray, lo: float, hi: float) -> float:
    """The squared error of ``x`` quantized to uint8 over ``[lo, hi]`` (as onnxruntime's QuantizeLinear:
    scale ``(hi - lo) / 255``, zero point ``round(-lo / scale)``, rounded, clipped) and read back."""
    scale = (hi - lo) / 255.0
    if scale <= 0:
        return float(np.sum(np.asarray(x, np.float64) ** 2))
    zero = np.clip(np.rint(-lo / scale), 0, 255)
    x = np.asarray(x, np.float64)
    q = np.clip(np.rint(x / scale) + zero, 0, 255)
    return float(np.sum(((q - zero) * scale - x) ** 2))


def affine_ranges(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]], method: str
                  ) -> dict[str, tuple[float, float]]:
    """Every float tensor's range for an affine (uint8, zero point) quantization over ``samples``: its
    min/max widened to hold 0 (``max``, onnxruntime's MinMax), or (``mse``) the fraction ``SHRINKS`` of it
    with the least squared error over the calibration values, rounding and clipping together (a tie keeps
    the wider range). Infinities are left out (an attention mask's -inf saturates at the type's bound)."""
    if method not in METHODS:
        raise GraphError(f"calibration {method!r}: Tandem calibrates by {' or '.join(METHODS)}")
    runs = [tensors(graph, inputs) for inputs in samples]
    finite: dict[str, list[np.ndarray]] = {}
    for values in runs:
        for name, value in values.items():
            if np.issubdtype(value.dtype, np.floating) and value.size:
                finite.setdefault(name, []).append(value[np.isfinite(value)].astype(np.float64))
    out = {}
    for name, parts in finite.items():
        lo = min(0.0, *(float(p.min()) for p in parts if p.size))
        hi = max(0.0, *(float(p.max()) for p in parts if p.size))
        if method == "mse" and hi > lo:
            errors = [sum(affine_squared_error(p, lo * f, hi * f) for p in parts) for f in SHRINKS]
            f = SHRINKS[int(np.argmin(errors))]
            lo, hi = lo * f, hi * f
        out[name] = (lo, hi)
    return out
