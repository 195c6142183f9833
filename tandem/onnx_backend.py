"""Tandem as an ONNX backend (``onnx.backend.base.Backend``): a model prepared once, run on numpy inputs,
its outputs in the types the model declares.

    from tandem.onnx_backend import TandemBackend
    rep = TandemBackend.prepare(model)          # "CPU": the float reference (tandem/network/graph.py)
    (y,) = rep.run([x])                         # or rep.run({"input": x})

The float reference computes every layer exactly (float64) and rounds it to its declared type, with every
attribute ONNX gives the operators it claims (tandem/network/operators); a model it cannot compute (an
operator, attribute or output it does not implement) is refused at ``prepare`` with a GraphError naming the
node, and never computed wrong. A model whose input shapes are symbolic is imported again for each new set
of input shapes, at ``run``; one with a shape that depends on its inputs' values, at each ``run`` with
those values as constants.

ONNX's own node tests run against it in tests/tandem/test_onnx_backend.py; the cases of the claimed
operators it does not pass are listed, with their reasons, in tandem/network/operators/gaps.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep, namedtupledict

from tandem.network import graph as tg
from tandem.network.graph import DataDependentShapeError, DynamicInputError, Graph, GraphError

#: the devices Tandem's backend runs on: the host's float reference
DEVICES = ("CPU",)


class TandemRep(BackendRep):
    """A prepared model: imported once where its shapes are static; else imported for each new set of
    input shapes (symbolic input dimensions), or for each run with the inputs' values as constants (a shape
    that depends on them, e.g. a reduction's axes given as a graph input)."""

    def __init__(self, model: Any, graph: Graph | None, by_values: bool = False) -> None:
        self.model = model
        self.names = [v.name for v in model.graph.output]
        self.inputs = [v.name for v in model.graph.input
                       if v.name not in {t.name for t in model.graph.initializer}]
        self.graphs: dict[tuple, Graph] = {}
        self.by_values = by_values
        if graph is not None:
            self.graphs[tuple(graph.inputs.values())] = graph

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """The model's outputs (in graph order) for ``inputs``: a list in the graph inputs' order, one
        array, or a mapping by name."""
        named = self._named(inputs)
        if self.by_values:
            graph = tg.load(_with_constants(self.model, named), fold=False)
            values = tg.tensors(graph, {})
        else:
            shapes = {n: tuple(np.shape(named[n])) for n in self.inputs}
            key = tuple(shapes.values())
            if key not in self.graphs:
                self.graphs[key] = tg.load(self.model, shapes, fold=False)
            graph = self.graphs[key]
            values = tg.tensors(graph, named)
        return namedtupledict("Outputs", self.names)(*[values[n] for n in graph.outputs])

    def _named(self, inputs: Any) -> dict[str, np.ndarray]:
        """``inputs`` by graph input name, each a tensor."""
        if isinstance(inputs, Mapping):
            named = dict(inputs)
        else:
            arrays = _listed(inputs)
            if len(arrays) != len(self.inputs):
                raise GraphError(f"{len(arrays)} inputs given for the {len(self.inputs)} graph inputs "
                                 f"({', '.join(self.inputs)})")
            named = dict(zip(self.inputs, arrays, strict=True))
        missing = [n for n in self.inputs if n not in named]
        if missing:
            raise GraphError(f"no array for the graph input {missing[0]}")
        for name, value in named.items():
            if not isinstance(value, np.ndarray | np.generic):
                raise GraphError(f"input {name} is a {type(value).__name__}: Tandem's backend takes tensors "
                                 f"(numpy arrays), not sequences, maps or optionals")
        return named


class TandemBackend(Backend):
    """``prepare`` imports the model (tandem/network/graph.py, nothing folded: each node computed as ONNX
    defines it); a model Tandem cannot compute raises GraphError there."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> TandemRep:
        _check_device(device)
        proto, _ = tg.read(model)
        try:
            return TandemRep(proto, tg.load(proto, fold=False))
        except DynamicInputError:
            return TandemRep(proto, None)                     # imported at run, for the inputs' shapes
        except DataDependentShapeError:
            return TandemRep(proto, None, by_values=True)     # imported at run, with the inputs' values

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() in DEVICES


def _with_constants(model: Any, values: Mapping[str, np.ndarray]) -> Any:
    """``model`` with its graph inputs made initializers holding ``values``."""
    from onnx import numpy_helper

    out = type(model)()
    out.CopyFrom(model)
    kept = [v for v in out.graph.input if v.name not in values]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    out.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), n) for n, v in values.items())
    return out


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
