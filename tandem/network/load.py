"""A network loaded for a run: a builtin model (tandem/network/models.py) or an ONNX model, float or already
quantized (QDQ, tandem/network/qdq.py), imported once, with its int8 graph. ``tandem model``, a sweep's
network workloads and experiments/networks.py load their networks here.

    network = load_network(builtin="resnet18", seed=0, input_shapes={"input": (1, 3, 64, 64)})
    network.quantized          # a float model quantized with VTA's rule (tandem/network/quantize.py)
    load_network("resnet18_int8.onnx").quantized    # a QDQ model's own quantization
    load_network("model.onnx", scheme="affine-per-channel").quantized   # as onnxruntime's quantize_static

A float model's int8 schemes (``SCHEMES``): ``pow2``, per-tensor power-of-two exponents (VTA's rule,
tandem/network/quantize.py; every target runs it), and ``affine`` / ``affine-per-channel``, onnxruntime's
``quantize_static`` (uint8 activations with zero points, int8 weights with float scales per tensor or per
output channel, tandem/network/qdq_write.py; the CPU and DianNao run it, VITA's epilogue has no float
scale).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tandem.network import graph as tg
from tandem.network import models, qdq, qdq_write
from tandem.network.calibrate import METHODS, read_samples
from tandem.network.graph import Graph
from tandem.network.qdq import AffineGraph
from tandem.network.quantize import quantize
from tandem.network.quantized import QuantizedGraph

#: a float model's int8 schemes (the module's rule)
SCHEMES = ("pow2", "affine", "affine-per-channel")


@dataclass(frozen=True)
class Network:
    """A loaded network: ``model``, what onnxruntime runs (a builtin's ModelProto, or the file's path);
    ``graph``, the imported float graph (a QDQ model's: its float operators, nothing folded); ``seed``, the
    seed of the builtin's weights and of the calibration; ``own``, a QDQ model's own quantization (None for
    a float model)."""

    model: Any
    graph: Graph
    seed: int
    own: AffineGraph | None = None
    #: the calibration rule (tandem/network/calibrate.py) and inputs (None: ``seed``'s random ones)
    calibration: str = "max"
    samples: tuple[dict[str, np.ndarray], ...] | None = None
    #: a float model's int8 scheme (``SCHEMES``), and whether its biases are corrected for the rounding of
    #: its weights (tandem/network/bias_correction.py)
    scheme: str = "pow2"
    bias_correction: bool = False

    @cached_property
    def quantized(self) -> QuantizedGraph:
        """The int8 graph: a QDQ model's own, else the float graph quantized with VTA's rule (calibrated on
        ``samples``, else ``seed``'s inputs, by the ``calibration`` rule; computed once)."""
        if self.own is not None:
            return self.own
        if self.scheme == "pow2":
            return quantize(self.graph, self.seed, calibration=self.calibration, inputs=self.samples,
                            bias_correction=self.bias_correction)
        return qdq_write.quantize(self.graph, self.seed, per_channel=self.scheme == "affine-per-channel",
                                  inputs=self.samples, calibration=self.calibration,
                                  bias_correction=self.bias_correction)


def load_network(model: str | Path | Any = None, *, builtin: str | None = None, seed: int = 0,
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None, calibration: str = "max",
                 calibrate: Path | None = None, scheme: str = "pow2", bias_correction: bool = False
                 ) -> Network:
    """Load ``model`` (an ONNX file's path, or a ModelProto) or the builtin model ``builtin`` (its weights
    drawn from ``seed``), one of them; ``input_shapes`` gives graph inputs their shapes (required for
    symbolic dimensions); a float model's int8 graph is calibrated by the ``calibration`` rule on the
    inputs of the .npz file ``calibrate`` (tandem/network/calibrate.py; default: seeded random ones), in the
    int8 ``scheme`` (``SCHEMES``), its biases corrected for its weights' rounding where ``bias_correction``
    (a QDQ model keeps its own). Raises ModelError (an unknown builtin) or GraphError (a model Tandem
    cannot import, a calibration file that does not fit it, an unknown scheme or calibration rule)."""
    if calibration not in METHODS:
        raise tg.GraphError(f"calibration {calibration!r}: Tandem calibrates by {' or '.join(METHODS)}")
    if scheme not in SCHEMES:
        raise tg.GraphError(f"int8 scheme {scheme!r}: Tandem quantizes by {', '.join(SCHEMES)}")
    if (model is None) == (builtin is None):
        raise ValueError("expected an ONNX model or a builtin name, one of them")
    if builtin is not None:
        model = models.build(builtin, seed)
    proto, where = tg.read(model)   # parsed once
    if qdq.is_qdq(proto):
        own = qdq.load(proto, input_shapes, where)
        return Network(model, own.graph, seed, own)
    graph = tg.load(proto, input_shapes, where=where)
    samples = tuple(read_samples(calibrate, graph)) if calibrate is not None else None
    return Network(model, graph, seed, calibration=calibration, samples=samples, scheme=scheme,
                   bias_correction=bias_correction)
