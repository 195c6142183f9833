"""The corpus of PyTorch-exported architectures (tests/models/corpus/*.onnx, written by export_corpus.py):
each graph as PyTorch's exporter wrote it, its large float initializers stripped to their names, shapes and
types, and filled again at load time with seeded values that a trained network's would resemble (``fill``).

    model = corpus.load("resnet18", "dynamo", seed=0)     # an onnx.ModelProto, ready to import

Stripped: every floating-point initializer of more than ``KEEP`` elements (weights, biases, batch-norm
statistics). Kept as exported: integer initializers (shapes, axes, indices) and small float constants (a
layer norm's epsilon, a scale). Filled: a convolution's or matrix product's weights with He-normal values
(std sqrt(2 / fan_in)); a batch norm's scale near 1, its shift and mean near 0, its variance in
[0.5, 1.5]; a layer norm's scale near 1; everything else normal with std 0.02 (biases, embeddings).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

CORPUS = Path(__file__).resolve().parent / "corpus"
KEEP = 16
ARCHITECTURES = ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_0", "shufflenet_v2_x0_5",
                 "efficientnet_b0", "googlenet", "densenet121", "regnet_y_400mf", "convnext_tiny", "vit_b_16")
TRANSFORMERS = ("bert_block", "gpt2_prefill", "gpt2_decode")   # tests/models/blocks.py
EXPORTERS = ("torchscript", "dynamo")
#: exported also with a symbolic batch axis (NAME.EXPORTER.batch.onnx): imported at batch 4 by the tests
BATCHED = ("resnet18", "gpt2_prefill", "gpt2_decode")
STRIPPED = "tandem_stripped"   # the doc_string of a stripped initializer


def strip(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each large float initializer reduced to its name, shape and type (and the nodes'
    documentation strings and metadata, the exporter's stack traces, dropped)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
    for tensor in out.graph.initializer:
        if tensor.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE) \
                and math.prod(tensor.dims) > KEEP:
            dims, kind, name = list(tensor.dims), tensor.data_type, tensor.name
            tensor.Clear()
            tensor.name, tensor.data_type, tensor.doc_string = name, kind, STRIPPED
            tensor.dims.extend(dims)
    return out


def fill(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """``model`` with its stripped initializers filled with seeded values (the module's rule)."""
    rng = np.random.default_rng(seed)
    roles = _roles(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for tensor in out.graph.initializer:
        if tensor.doc_string != STRIPPED:
            continue
        shape = tuple(tensor.dims)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        value = _value(roles.get(tensor.name, ("", 0)), shape, rng).astype(dtype)
        tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
    return out


def load(name: str, exporter: str, seed: int = 0, batch: bool = False) -> onnx.ModelProto:
    """The corpus model ``name`` as ``exporter`` wrote it (with ``batch``: its symbolic-batch export),
    filled from ``seed``."""
    return fill(onnx.load(str(CORPUS / f"{name}.{exporter}{'.batch' if batch else ''}.onnx")), seed)


def _roles(model: onnx.ModelProto) -> dict[str, tuple[str, int]]:
    """What each initializer is to the first node that reads it, and its fan-in where it is a weight:
    ("weight", fan_in), ("bn_scale" | "bn_var" | "ln_scale", 0)."""
    roles: dict[str, tuple[str, int]] = {}
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            shape = dims.get(name)
            if shape is None or name in roles:
                continue
            if node.op_type in ("Conv", "ConvTranspose") and position == 1:
                roles[name] = ("weight", math.prod(shape[1:]))
            elif node.op_type == "MatMul" and position == 1 and len(shape) >= 2:
                roles[name] = ("weight", shape[-2])
            elif node.op_type == "Gemm" and position == 1:
                trans_b = any(a.name == "transB" and a.i for a in node.attribute)
                roles[name] = ("weight", shape[1] if trans_b else shape[0])
            elif node.op_type == "BatchNormalization" and position in (1, 4):
                roles[name] = ("bn_scale" if position == 1 else "bn_var", 0)
            elif node.op_type == "LayerNormalization" and position == 1:
                roles[name] = ("ln_scale", 0)
    return roles


def _value(role: tuple[str, int], shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    kind, fan_in = role
    if kind == "weight":
        return rng.standard_normal(shape) * math.sqrt(2.0 / max(fan_in, 1))
    if kind in ("bn_scale", "ln_scale"):
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if kind == "bn_var":
        return rng.uniform(0.5, 1.5, shape)
    return 0.02 * rng.standard_normal(shape)
