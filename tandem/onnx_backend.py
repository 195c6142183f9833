"""Tandem as an ONNX backend (``onnx.backend.base.Backend``): a model prepared once, run on numpy inputs,
its outputs in the types the model declares.

    from tandem.onnx_backend import TandemBackend
    rep = TandemBackend.prepare(model)          # "CPU": the float reference (tandem/network/graph.py)
    (y,) = rep.run([x])                         # or rep.run({"input": x})

The float reference computes every layer exactly (float64) and rounds it to its declared type, with every
attribute ONNX gives the operators it claims (tandem/network/operators); a model it cannot compute (an
operator, attribute or output it does not implement) is refused at ``prepare`` with a GraphError naming the
node, and never computed wrong. A model whose input shapes are symbolic is imported again for each new set
of input shapes, at ``run``.

ONNX's own node tests run against it in tests/tandem/test_onnx_backend.py; the cases of the claimed
operators it does not pass are listed, with their reasons, in tandem/network/operators/gaps.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep, namedtupledict

from tandem.network import graph as tg
from tandem.network.graph import Graph, GraphError

#: the devices Tandem's backend runs on: the host's float reference
DEVICES = ("CPU",)


class TandemRep(BackendRep):
    """A prepared model: its import for the input shapes seen so far (one import per set of shapes)."""

    def __init__(self, model: Any, graph: Graph | None) -> None:
        self.model = model
        self.names = [v.name for v in model.graph.output]
        self.graphs: dict[tuple, Graph] = {}
        self.first = graph
        if graph is not None:
            self.graphs[tuple(graph.inputs.values())] = graph

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """The model's outputs (in graph order) for ``inputs``: a list in the graph inputs' order, one
        array, or a mapping by name."""
        graph = self.first or self._graph_for(inputs)
        named = _named(graph, inputs)
        shapes = tuple(np.shape(named[n]) for n in graph.inputs)
        if shapes != tuple(graph.inputs.values()):
            graph = self._graph_for(named)
        values = tg.tensors(graph, named)
        return namedtupledict("Outputs", self.names)(*[values[n] for n in graph.outputs])

    def _graph_for(self, inputs: Any) -> Graph:
        names = [v.name for v in self.model.graph.input
                 if v.name not in {t.name for t in self.model.graph.initializer}]
        arrays = inputs if isinstance(inputs, Mapping) else dict(zip(names, _listed(inputs), strict=False))
        for name, value in arrays.items():
            if not isinstance(value, np.ndarray | np.generic):
                raise GraphError(f"input {name} is a {type(value).__name__}: Tandem's backend takes tensors "
                                 f"(numpy arrays), not sequences, maps or optionals")
        shapes = {n: tuple(np.shape(arrays[n])) for n in names if n in arrays}
        key = tuple(shapes.values())
        if key not in self.graphs:
            self.graphs[key] = tg.load(self.model, shapes, fold=False)
        return self.graphs[key]


class TandemBackend(Backend):
    """``prepare`` imports the model (tandem/network/graph.py, nothing folded: each node computed as ONNX
    defines it); a model Tandem cannot compute raises GraphError there."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> TandemRep:
        _check_device(device)
        proto, _ = tg.read(model)
        try:
            graph = tg.load(proto, fold=False)
        except GraphError as exc:
            if "dynamic shape" not in str(exc):
                raise
            graph = None   # imported at run, for the inputs' shapes
        return TandemRep(proto, graph)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() in DEVICES


def _check_device(device: str) -> None:
    if not TandemBackend.supports_device(device):
        raise GraphError(f"device {device!r}: Tandem's ONNX backend runs on {', '.join(DEVICES)}")


def _listed(inputs: Any) -> list[np.ndarray]:
    if isinstance(inputs, np.ndarray):
        return [inputs]
    if isinstance(inputs, Sequence):
        return list(inputs)
    raise GraphError(f"inputs of type {type(inputs).__name__}: give a list of arrays, one array or a dict "
                     f"by input name")


def _named(graph: Graph, inputs: Any) -> dict[str, np.ndarray]:
    """``inputs`` by graph input name."""
    if isinstance(inputs, Mapping):
        return dict(inputs)
    arrays = _listed(inputs)
    if len(arrays) != len(graph.inputs):
        raise GraphError(f"{graph.name}: {len(arrays)} inputs given for the {len(graph.inputs)} graph inputs "
                         f"({', '.join(graph.inputs)})")
    return dict(zip(graph.inputs, arrays, strict=True))
