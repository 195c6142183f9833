"""One inference of a network whose kernels are compiled and checked (tandem/network/run.py), timed end to
end as a user times onnxruntime's ``session.run``: the float input quantized, every step's host work (the
data moved to the kernel's type and layout, padded where the zero point is not 0, the outputs read back and
joined), every kernel call, the steps that run on the host, and the output dequantized. The weights' packed
layouts are kept between inferences (as the kernels themselves are compiled once beforehand); nothing else
is.

    kernels = ...   # per step: its kernels, each a ``tandem.flows.run.Prepared`` (None: on the host)
    result = time_inference(q, target, steps(q), kernels, inputs)
    result.seconds, result.output
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler.target import Target
from tandem.flows.run import Prepared
from tandem.network.place import place
from tandem.network.quantized import QuantizedGraph
from tandem.network.steps import Step

#: at least this many timed inferences, and at least ``min_time`` seconds of them (after one warm-up)
MIN_RUNS = 5


@dataclass(frozen=True)
class Inference:
    """The median seconds of one inference over ``runs`` timed ones, and the last one's integer output."""

    seconds: float
    runs: int
    output: np.ndarray = field(repr=False)


def infer(q: QuantizedGraph, target: Target, plan: Sequence[Step],
          kernels: Sequence[Sequence[Prepared] | None], inputs: Mapping[str, np.ndarray]
          ) -> tuple[np.ndarray, np.ndarray]:
    """One inference: the network's integer output on the float ``inputs`` and that output dequantized.
    ``kernels[i]`` are step ``plan[i]``'s compiled kernels, in the order its placement runs them (None: the
    step runs on the host, as the integer graph's layers)."""
    values = {name: q.quantize_input(name, inputs[name]) for name in q.graph.inputs}
    for step, prepared in zip(plan, kernels, strict=True):
        if prepared is None:
            for layer in step.layers:
                q.write_outputs(layer, values)
            continue
        placement = place(step, q, values, target)
        outs: list[np.ndarray] = []
        for part, kernel in zip(placement.parts, prepared, strict=True):
            arrays = part.inputs(outs) if callable(part.inputs) else part.inputs
            outs.append(part.unpack(kernel.output(arrays)))
        values[step.output] = placement.join(outs)
    output = values[q.graph.output]
    return output, q.dequantize(q.graph.output, output)


def time_inference(q: QuantizedGraph, target: Target, plan: Sequence[Step],
                   kernels: Sequence[Sequence[Prepared] | None], inputs: Mapping[str, np.ndarray],
                   min_time: float = 0.2) -> Inference:
    """``infer`` timed: one warm-up inference, then at least ``MIN_RUNS`` and ``min_time`` seconds of them;
    the median."""
    output, _ = infer(q, target, plan, kernels, inputs)
    times: list[float] = []
    while len(times) < MIN_RUNS or sum(times) < min_time:
        start = time.perf_counter()
        output, _ = infer(q, target, plan, kernels, inputs)
        times.append(time.perf_counter() - start)
    return Inference(float(np.median(times)), len(times), output)
