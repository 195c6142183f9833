"""Tandem's builtin models, built with ``onnx.helper`` from seeded weights (nothing is downloaded):

    resnet18, resnet50      torchvision's ResNets (He et al.), 1 x 3 x 224 x 224, batch norm after every conv
    mobilenet_v2            torchvision's MobileNet V2 (Sandler et al.), 1 x 3 x 224 x 224, ReLU6 as Clip
    bert_encoder            one BERT-base encoder layer (Devlin et al.): sequence 128, hidden 768, 12 heads,
                            FFN 3072, post-norm, GELU (tanh form)
    vit_block               one ViT-B/16 encoder block (Dosovitskiy et al.): 197 tokens, hidden 768, 12 heads,
                            MLP 3072, pre-norm, GELU (tanh form)

and each CNN quantized (tandem/network/qdq_write.py: uint8 activations, int8 weights, as onnxruntime's
quantizer writes them) as NAME_qdq: resnet18_qdq, resnet50_qdq, mobilenet_v2_qdq.

``build(name, seed)`` returns the ``onnx.ModelProto`` (opset ``OPSET``); weights are drawn from ``seed`` with
He-style scales so that activations stay O(1) through the network (batch norms get random statistics, so that
folding them is not trivial). The graphs use the operators ONNX exporters emit for these networks: Conv,
BatchNormalization, Relu, Clip, Add, MaxPool, GlobalAveragePool, Flatten, Gemm, MatMul, Reshape, Transpose,
Softmax, LayerNormalization, Gelu, Mul.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tandem.network import graph as tg
from tandem.network import qdq_write

OPSET = 20   # Gelu (with approximate="tanh") is in opset 20
NAMES = ("resnet18", "resnet50", "mobilenet_v2", "bert_encoder", "vit_block")
QUANTIZED = ("resnet18_qdq", "resnet50_qdq", "mobilenet_v2_qdq")
RESIDUAL_GAIN = 0.3   # a residual branch's last batch norm scaled down (zero_init_residual's idea, milder)


class ModelError(ValueError):
    """An unknown builtin model name."""


class _Graph:
    """A graph under construction: nodes, initializers, fresh names, seeded weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, base: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def weight(self, base: str, shape: tuple[int, ...], fan_in: int) -> str:
        return self.const(base, (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))

    # ---- layers

    def conv(self, x: str, cin: int, cout: int, k: int, s: int = 1, groups: int = 1,
             bias: bool = False) -> str:
        w = self.weight("w", (cout, cin // groups, k, k), cin // groups * k * k)
        inputs = [x, w] + ([self.const("b", self.rng.standard_normal(cout).astype(np.float32) * 0.1)]
                           if bias else [])
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=groups)

    def bn(self, x: str, c: int, gain: float = 1.0) -> str:
        r = self.rng
        params = [gain * r.uniform(0.5, 1.5, c), r.standard_normal(c) * 0.1, r.standard_normal(c) * 0.1,
                  r.uniform(0.5, 1.5, c)]   # scale, bias, mean, variance
        names = [self.const(n, p.astype(np.float32)) for n, p in zip(("gamma", "beta", "mean", "var"), params,
                                                                     strict=True)]
        return self.node("BatchNormalization", [x, *names], epsilon=1e-5)

    def conv_bn(self, x: str, cin: int, cout: int, k: int, s: int = 1, groups: int = 1,
                act: str | None = "relu", gain: float = 1.0) -> str:
        """Conv, batch norm (its scale times ``gain``), then ``act``."""
        y = self.bn(self.conv(x, cin, cout, k, s, groups), cout, gain)
        if act == "relu":
            return self.node("Relu", [y])
        if act == "relu6":
            return self.node("Clip", [y, self.const("lo", np.float32(0)), self.const("hi", np.float32(6))])
        return y

    def dense(self, x: str, k: int, n: int) -> str:
        """x [..., K] @ W [K, N] + b: MatMul and Add, as transformer exporters emit them."""
        y = self.node("MatMul", [x, self.weight("w", (k, n), k)])
        return self.node("Add", [y, self.const("b", (self.rng.standard_normal(n) * 0.02).astype(np.float32))])

    def layer_norm(self, x: str, d: int) -> str:
        gamma = self.const("gamma", self.rng.uniform(0.5, 1.5, d).astype(np.float32))
        beta = self.const("beta", (self.rng.standard_normal(d) * 0.1).astype(np.float32))
        return self.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def attention(self, x: str, tokens: int, d: int, heads: int) -> str:
        """Multi-head self-attention of x [1, T, D]: Q, K, V projections, per head
        softmax(Q K^T / sqrt(dh)) V, the output projection."""
        dh = d // heads
        split = self.const("shape", np.array([1, tokens, heads, dh], np.int64))
        q, k, v = (self.node("Transpose", [self.node("Reshape", [self.dense(x, d, d), split])], perm=perm)
                   for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]))
        scores = self.node("Mul", [self.node("MatMul", [q, k]), self.const("scale", np.float32(dh ** -0.5))])
        ctx = self.node("MatMul", [self.node("Softmax", [scores], axis=-1), v])
        merged = self.node("Reshape", [self.node("Transpose", [ctx], perm=[0, 2, 1, 3]),
                                       self.const("shape", np.array([1, tokens, d], np.int64))])
        return self.dense(merged, d, d)

    def mlp(self, x: str, d: int, hidden: int) -> str:
        return self.dense(self.node("Gelu", [self.dense(x, d, hidden)], approximate="tanh"), hidden, d)

    def model(self, name: str, inputs: list[tuple[str, tuple[int, ...]]], output: str):
        """The ONNX model of the graph built so far, its output typed by ONNX's shape inference and the
        whole checked by ONNX's checker. Both read a copy that has the float weights as inputs of their
        shapes (they serialize what they are given: every weight copied thrice made ResNet-50's 98 MB of
        weights a 740 MB peak; the integer constants, a Reshape's shape, stay), and the weights move into
        the model one at a time (it builds one model)."""
        from onnx import TensorProto, checker, helper, shape_inference

        if self.initializers is None:
            raise RuntimeError("a _Graph builds one model: its weights moved into the first")
        typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs]
        floats = [t for t in self.initializers if t.data_type == TensorProto.FLOAT]
        weights = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in floats]
        shaping = [t for t in self.initializers if t.data_type != TensorProto.FLOAT]   # shapes, axes: kept
        light = self._proto(helper.make_graph(self.nodes, name, typed + weights, [], shaping))
        inferred = {v.name: v for v in shape_inference.infer_shapes(light).graph.value_info}
        light.graph.output.append(inferred[output])   # the output with the shape ONNX infers for it
        checker.check_model(light)
        model = self._proto(helper.make_graph(self.nodes, name, typed, [inferred[output]]))
        tensors, self.initializers = self.initializers, None
        for k, tensor in enumerate(tensors):
            model.graph.initializer.append(tensor)
            tensors[k] = None   # each weight's first copy dropped as its second is made
        return model

    @staticmethod
    def _proto(graph):
        from onnx import helper

        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="tandem.network.models")
        model.ir_version = 9
        return model


def _resnet(g: _Graph, blocks: tuple[int, ...], bottleneck: bool) -> str:
    x = g.conv_bn("input", 3, 64, 7, 2)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        cout = width * 4 if bottleneck else width
        for b in range(count):
            s = 2 if stage > 0 and b == 0 else 1
            if bottleneck:
                y = g.conv_bn(x, cin, width, 1)
                y = g.conv_bn(y, width, width, 3, s)
                y = g.conv_bn(y, width, cout, 1, act=None, gain=RESIDUAL_GAIN)
            else:
                y = g.conv_bn(x, cin, width, 3, s)
                y = g.conv_bn(y, width, width, 3, act=None, gain=RESIDUAL_GAIN)
            shortcut = g.conv_bn(x, cin, cout, 1, s, act=None) if s != 1 or cin != cout else x
            x = g.node("Relu", [g.node("Add", [y, shortcut])])
            cin = cout
    return _classifier(g, x, cin)


def _classifier(g: _Graph, x: str, c: int) -> str:
    flat = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    w = g.weight("fc_w", (1000, c), c)
    b = g.const("fc_b", (g.rng.standard_normal(1000) * 0.01).astype(np.float32))
    return g.node("Gemm", [flat, w, b], transB=1)


def _mobilenet_v2(g: _Graph) -> str:
    x = g.conv_bn("input", 3, 32, 3, 2, act="relu6")
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride, hidden = s if i == 0 else 1, cin * t
            y = g.conv_bn(x, cin, hidden, 1, act="relu6") if t != 1 else x
            y = g.conv_bn(y, hidden, hidden, 3, stride, groups=hidden, act="relu6")
            y = g.conv_bn(y, hidden, c, 1, act=None)
            x = g.node("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = g.conv_bn(x, cin, 1280, 1, act="relu6")
    return _classifier(g, x, 1280)


def _bert_encoder(g: _Graph, tokens: int = 128, d: int = 768, heads: int = 12, hidden: int = 3072) -> str:
    x = g.layer_norm(g.node("Add", ["input", g.attention("input", tokens, d, heads)]), d)
    return g.layer_norm(g.node("Add", [x, g.mlp(x, d, hidden)]), d)


def _vit_block(g: _Graph, tokens: int = 197, d: int = 768, heads: int = 12, hidden: int = 3072) -> str:
    x = g.node("Add", ["input", g.attention(g.layer_norm("input", d), tokens, d, heads)])
    return g.node("Add", [x, g.mlp(g.layer_norm(x, d), d, hidden)])


BUILDERS: dict[str, tuple[Callable[[_Graph], str], tuple[int, ...]]] = {
    "resnet18": (lambda g: _resnet(g, (2, 2, 2, 2), bottleneck=False), (1, 3, 224, 224)),
    "resnet50": (lambda g: _resnet(g, (3, 4, 6, 3), bottleneck=True), (1, 3, 224, 224)),
    "mobilenet_v2": (_mobilenet_v2, (1, 3, 224, 224)),
    "bert_encoder": (_bert_encoder, (1, 128, 768)),
    "vit_block": (_vit_block, (1, 197, 768)),
}


def build(name: str, seed: int = 0):
    """The builtin model ``name`` (one of ``NAMES`` or ``QUANTIZED``) as an ``onnx.ModelProto`` with weights
    drawn from ``seed`` (a quantized one calibrated on inputs from it too): its one input is "input"."""
    if name in QUANTIZED:
        return qdq_write.write(tg.load(build(name.removesuffix("_qdq"), seed)), seed)
    if name not in BUILDERS:
        raise ModelError(f"no builtin model {name!r}; expected one of {', '.join(NAMES + QUANTIZED)}")
    make, shape = BUILDERS[name]
    g = _Graph(seed)
    out = make(g)
    return g.model(name, [("input", shape)], out)
