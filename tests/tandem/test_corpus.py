"""The models users bring: PyTorch's exports of real architectures (tests/models/corpus/, both exporters,
their weights stripped and filled with seeded values at load: tests/models/corpus.py) import, compute what
onnxruntime computes, and run as int8 networks on the targets with every target step bit-exact."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tandem.network import graph as tg

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
sys.path.insert(0, str(MODELS_DIR))
import corpus  # noqa: E402

FILES = sorted(corpus.CORPUS.glob("*.onnx"))
CASES = [tuple(path.name.split(".")[:2]) for path in FILES if not path.name.endswith(".batch.onnx")]
BATCHED = [(name, exporter) for name in corpus.BATCHED for exporter in corpus.EXPORTERS]
HAS_ORT = importlib.util.find_spec("onnxruntime") is not None


def test_the_corpus_holds_every_architecture_from_both_exporters():
    assert set(CASES) == {(name, exporter) for name in (*corpus.ARCHITECTURES, *corpus.TRANSFORMERS)
                          for exporter in corpus.EXPORTERS}
    assert len(FILES) == len(CASES) + len(BATCHED)
    assert sum(path.stat().st_size for path in FILES) < 4 << 20   # stripped: a few MiB in all


def test_a_stripped_model_is_filled_the_same_from_the_same_seed_and_otherwise_from_another():
    a, b, c = (corpus.load("resnet18", "dynamo", seed) for seed in (0, 0, 1))
    assert a.SerializeToString() == b.SerializeToString() != c.SerializeToString()


def _compared(model, input_shapes=None):
    """``model`` imported (at ``input_shapes``) and computed on seeded inputs, against onnxruntime."""
    graph = tg.load(model, input_shapes)
    inputs = tg.random_inputs(graph, np.random.default_rng(0))
    values = tg.tensors(graph, inputs)
    outputs = [values[n] for n in graph.outputs]
    assert all(np.all(np.isfinite(y)) for y in outputs)
    if not HAS_ORT:
        pytest.skip("onnxruntime is not installed (the test extra): the import is not compared")
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(outputs, session.run(None, inputs), strict=True):
        scale = max(float(np.abs(want).max()), 1e-6)
        assert got.shape == want.shape and float(np.abs(got - want).max()) <= 1e-4 * scale
        assert math.isfinite(scale)


@pytest.mark.parametrize(("name", "exporter"), CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_each_export_imports_and_computes_what_onnxruntime_computes(name: str, exporter: str):
    _compared(corpus.load(name, exporter))


@pytest.mark.parametrize(("name", "exporter"), BATCHED, ids=[f"{n}-{e}" for n, e in BATCHED])
def test_an_export_with_a_symbolic_batch_imports_at_batch_4(name: str, exporter: str):
    model = corpus.load(name, exporter, batch=True)
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    shapes = {i.name: (4, *[d.dim_value for d in i.type.tensor_type.shape.dim][1:]) for i in inputs}
    with pytest.raises(tg.GraphError, match="dynamic shape"):
        tg.load(model)
    _compared(model, shapes)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "gpt2_decode"])
@pytest.mark.parametrize("exporter", corpus.EXPORTERS)
def test_an_architecture_exported_afresh_imports_and_computes_what_onnxruntime_computes(name, exporter):
    """With the `models` extra (PyTorch): the exporter of today, not the committed graph."""
    pytest.importorskip("torch", reason="PyTorch is not installed (the models extra)")
    pytest.importorskip("torchvision", reason="torchvision is not installed (the models extra)")
    import export_corpus

    model = corpus.fill(corpus.strip(export_corpus.export(name, exporter)), seed=0)
    graph = tg.load(model)
    inputs = tg.random_inputs(graph, np.random.default_rng(0))
    values = tg.tensors(graph, inputs)
    if not HAS_ORT:
        pytest.skip("onnxruntime is not installed (the test extra): the import is not compared")
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip((values[n] for n in graph.outputs), session.run(None, inputs), strict=True):
        assert np.abs(got - want).max() <= 1e-4 * max(float(np.abs(want).max()), 1e-6)
