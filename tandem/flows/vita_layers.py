"""VITA's functions of a layer (tandem/flows/layers.py: a conv2d ``ConvShape`` or a GEMM ``GemmShape``), which
the VITA flow (tandem/flows/vita.py) and the experiments use, and ``Epilogue``, what the accumulators do
after the sums:

- ``schedule``: ``compiler.ops.vita.conv2d`` or ``dense`` of the layer, with a tiling and an epilogue;
- ``tiled``: the layer the schedule tiles on a spec's machine (channels in whole blocks; a GEMM as the 1 x 1
  conv of its rows in batch blocks, ``compiler.ops.vita.dense_shape``);
- ``pack`` / ``unpack``: plain data and weights to and from the packed layouts;
- ``reference``: numpy's result of the schedule, on the packed layouts;
- ``dram_bytes``: the layer's compulsory DRAM traffic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import isa
from compiler.ops import vita
from compiler.ops.nn import GemmShape
from tandem.flows.flow import RunError, take_int
from tandem.flows.layers import Layer


@dataclass(frozen=True)
class Epilogue:
    """What the accumulators do after a conv2d's or GEMM's sums (``compiler.ops.vita.conv2d``'s options): add
    a bias per output channel (``bias``: an int32 input; a network folds its rounding constant into it),
    shift right by ``shift``, clip to ``bounds`` (default [0 if ``relu`` else -128, 127])."""

    shift: int = 8
    relu: bool = False
    bias: bool = False
    bounds: tuple[int, int] | None = None

    @property
    def options(self) -> dict[str, Any]:
        return {"shift": self.shift, "relu": self.relu, "bias": self.bias, "bounds": self.bounds}

    @property
    def params(self) -> dict[str, Any]:
        """As the report's params show it: relu always; shift, bias and clip where not the default."""
        given = {"shift": self.shift if self.shift != 8 else None, "bias": self.bias or None,
                 "clip": list(self.bounds) if self.bounds is not None else None}
        return {"relu": self.relu, **{k: v for k, v in given.items() if v is not None}}

    @staticmethod
    def take(params: dict[str, Any], where: str) -> Epilogue:
        """Pop ``relu``, ``shift``, ``bias`` and ``clip`` from ``params`` (RunError naming a bad one)."""
        relu, bias = bool(params.pop("relu", False)), bool(params.pop("bias", False))
        shift = take_int(params, "shift", 8, 0, where)
        if shift >= 31:
            raise RunError(f"{where}: shift must be below 31 (the accumulators are int32), but got {shift}")
        clip = params.pop("clip", None)
        if clip is not None:
            if (not isinstance(clip, tuple | list) or len(clip) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in clip)
                    or not -128 <= clip[0] <= clip[1] <= 127):
                raise RunError(f"{where}: clip must be (lo, hi) with -128 <= lo <= hi <= 127, but got "
                               f"{clip!r}")
            clip = (int(clip[0]), int(clip[1]))
        return Epilogue(shift, relu, bias, clip)


#: shift by 8, clip to int8, no bias: a layer's epilogue unless told otherwise
DEFAULT_EPILOGUE = Epilogue()


def tiled(layer: Layer, spec: isa.ISA) -> vita.ConvShape:
    """The layer the schedule tiles on ``spec``'s machine: channels padded to whole blocks (a GEMM's rows
    come in batch blocks)."""
    if isinstance(layer, GemmShape):
        return vita.dense_shape(layer.m, layer.n, layer.k, spec)
    return vita.to_blocks(layer, spec)


def schedule(layer: Layer, tiling: vita.Tiling, spec: isa.ISA, epilogue: Epilogue = Epilogue()
             ) -> vita.VitaSchedule:
    """``layer``'s schedule on ``spec``'s machine, tiled by ``tiling``, ending with ``epilogue``."""
    if isinstance(layer, GemmShape):
        return vita.dense(layer.m, layer.n, layer.k, tiling=tiling, vthreads=tiling.vthreads, spec=spec,
                          **epilogue.options)
    return vita.conv2d(layer, tiling=tiling, vthreads=tiling.vthreads, spec=spec, **epilogue.options)


def pack(layer: Layer, arrays: Sequence[np.ndarray], spec: isa.ISA) -> list[np.ndarray]:
    """Plain data and weights (NCHW and OIHW, or (M, K) and (N, K)) in the packed layouts, padded."""
    packer = vita.pack_dense if isinstance(layer, GemmShape) else vita.pack_conv
    return list(packer(*arrays, spec))


def unpack(layer: Layer, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``pack`` undone: the plain arrays, the padding dropped."""
    if isinstance(layer, GemmShape):
        return list(vita.unpack_dense(*inputs, (layer.m, layer.n, layer.k)))
    return list(vita.unpack_conv(*inputs, layer))


def reference(layer: Layer, inputs: list[np.ndarray], epilogue: Epilogue = Epilogue()) -> np.ndarray:
    """What ``schedule`` computes on the packed ``inputs`` (data, weights and, with a bias, the bias)."""
    data, weight, *bias = inputs
    options = {**epilogue.options, "bias": bias[0] if bias else None}
    if isinstance(layer, GemmShape):
        return vita.dense_reference(data, weight, mnk=(layer.m, layer.n, layer.k), **options)
    return vita.conv2d_reference(data, weight, layer, **options)


def dram_bytes(layer: Layer, spec: isa.ISA | None = None) -> int:
    """Compulsory DRAM traffic in bytes: int8 input, weights and output, each once (in the layouts that
    ``spec``'s machine pads to whole blocks, when given)."""
    if isinstance(layer, GemmShape):
        m, n, k = layer.m, layer.n, layer.k
        if spec is not None:   # the channels (N, K) in whole blocks; the rows as they are
            block = vita.block_of(spec)
            n, k = -(-n // block) * block, -(-k // block) * block
        return m * k + n * k + m * n
    c = layer if spec is None else vita.to_blocks(layer, spec)
    return c.n * c.h * c.w * c.ic + c.oc * c.ic * c.k * c.k + c.n * c.oh * c.ow * c.oc
