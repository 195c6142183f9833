"""The steps an int8 network runs in, and the records of how a target runs one.

``steps`` groups a quantized graph's layers into what a target runs as one kernel: a Conv, Gemm or MatMul
with the ReLU or ReLU6 that alone reads it (the epilogue's clip), an Add with its ReLU (``FUSED_AFTER``),
where the graph's scheme keeps the activation's quantization (``QuantizedGraph.fuses_activations``: a ReLU
keeps its input's exponent in tandem/network/quantize.py's; in a quantized ONNX model's every layer
requantizes, so nothing fuses). A placer
(tandem/network/place.py) says how a target runs a step: a ``Placement`` of ``Placed`` kernels, or
``NotOnTarget`` when it runs on the host; tandem/network/run.py runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tandem.network.graph import Layer, reader_counts
from tandem.network.quantized import QuantizedGraph

#: layers fused into the conv, GEMM or add before them when they alone read its output
FUSED_AFTER = {"Conv": ("Relu", "Clip"), "Gemm": ("Relu", "Clip"), "MatMul": ("Relu", "Clip"),
               "Add": ("Relu",)}


@dataclass(frozen=True)
class Step:
    """Layers a target runs as one kernel: the first computes, the rest (a ReLU) are its epilogue."""

    layers: tuple[Layer, ...]

    @property
    def name(self) -> str:
        return self.layers[0].name

    @property
    def op(self) -> str:
        return "+".join(layer.op for layer in self.layers)

    @property
    def output(self) -> str:
        return self.layers[-1].output

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.layers[0].inputs

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layers[-1].shape


def steps(q: QuantizedGraph) -> list[Step]:
    """The graph's layers grouped into steps (the module's rule for fusing; none in a quantized ONNX
    model's graph, whose every layer requantizes to its own output's parameters)."""
    readers = reader_counts(q.graph.layers)
    out: list[Step] = []
    layers = list(q.graph.layers)
    i = 0
    while i < len(layers):
        group = [layers[i]]
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        head = group[0]
        if (q.fuses_activations and nxt is not None and nxt.op in FUSED_AFTER.get(head.op, ())
                and nxt.inputs == (head.output,)
                and readers.get(head.output, 0) == 1 and q.graph.output != head.output):
            group.append(nxt)
        out.append(Step(tuple(group)))
        i += len(group)
    return out


@dataclass(frozen=True)
class Placed:
    """How a target runs (part of) a step: ``run(op, target, params, inputs=inputs)``, then ``unpack`` turns
    the kernel's output into the tensor (or its part) in the graph's layout. ``inputs`` may be a function of
    the unpacked outputs of the step's parts before this one (an epilogue reads its sums)."""

    op: str
    params: dict[str, Any]
    inputs: list[np.ndarray] | Callable[[list[np.ndarray]], list[np.ndarray]]   # or: from the parts before
    unpack: Callable[[np.ndarray], np.ndarray]
    label: str = ""   # how the row names the kernel (default: op)
    sums: bool = True   # whether it computes the step's multiply-adds (an epilogue does not)


@dataclass(frozen=True)
class Placement:
    """A step on the target: its kernels, run in order (several when a step is split to fit, or computes its
    sums and then their epilogue), and how their outputs join into the step's output."""

    parts: tuple[Placed, ...]
    join: Callable[[list[np.ndarray]], np.ndarray] = field(default=lambda outs: outs[0])


class NotOnTarget(Exception):
    """Raised by a placement: the step runs on the host; ``str()`` says why."""
