"""Where each step of an int8 network runs on each target (tandem/network/run.py): the ``run`` operator,
its parameters, the arrays in the kernel's layouts, and how the output reads back.

What each target runs (the rest runs on the host, and the table says why):

======================  ===========================================  ======================================
step                    VITA                                         CPU and DianNao
======================  ===========================================  ======================================
Conv (+ReLU/ReLU6)      conv2d with the epilogue: bias (its           conv2d int8 x int8 -> int32, then
                        rounding constant folded in), shift, clip;    ``requantize`` (network.py) on the
                        grouped (depthwise too): a block-diagonal     target: bias, shift, clip; depthwise:
                        conv2d per BLOCK input channels of whole      the depthwise kind; other grouped
                        groups, joined along channels                 ones: a conv2d per group, joined
Gemm, MatMul (+ReLU)    gemm, the same epilogue                       gemm, then ``requantize``
MatMul of activations   one gemm per head (of each image)             one gemm per head, then requantize
a batch of N > 1        a Gemm's or MatMul's M holds the batch; a     the same
                        conv or pool runs once per image
Add (+ReLU)             ``quantized_add`` on the ALU                  ``quantized_add``
MaxPool                 max_pool on the input padded with int8's     max_pool, the same padding
                        minimum (the host's packing)
GlobalAveragePool       global_avg_pool (channels split to fit the    ``rounded_mean`` (CPU; DianNao: the
                        accumulators)                                 host, a reduction)
Softmax, LayerNorm (last  host                                         CPU: ``softmax_int8``,
axis, a power-of-two                                                  ``layer_norm_int8`` over the rows (the
graph's)                                                              integer graph's rules); DianNao: host
data movement (Reshape,  host: the int8 values moved (a view, or      host
Transpose, Concat,      a copy)
Split, Slice, ...)
======================  ===========================================  ======================================

A conv's requantization shifts right by ``s = e_x + e_w - e_out`` (tandem/network/quantize.py): a left shift
(``s < 0``) is not what these kernels compute, and such a layer runs on the host, as do the float layers
(GELU, a Mul; a quantized ONNX model's softmax and layer norm) and the data movement
(tandem/network/quantized.py's ``MOVES``: no kernel moves values; a layer of several outputs, a Split, is
one).

A quantized ONNX model's graph (tandem/network/qdq.py's ``AffineGraph``) requantizes by float32 scales, with
zero points: the data moves to the target's 8-bit type and the zero point's weight sums come off the bias
(``_data_operand``); DianNao then runs ``requantize_scaled`` (in float32: no float-to-int conversion), the
CPU requantizes in the conv2d's, depthwise conv's or GEMM's own epilogue (``_fused_requantize``) and
runs ``qlinear_add`` and ``scaled_mean`` (DianNao's adds and pool run on the host); VITA, whose epilogue
only shifts, runs its max pools and leaves the float-scaled steps to the host (``NO_FLOAT_REQUANTIZE``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from compiler.ops import cpu as cpu_ops
from compiler.ops import network, reference, vita
from compiler.target import Target
from tandem.flows.flow import memory_key
from tandem.network import qdq
from tandem.network.graph import Layer
from tandem.network.operators.nn import padded_window
from tandem.network.qdq import AffineGraph
from tandem.network.quantize import PowerOfTwoGraph, clip_bounds, layer_norm_operands, softmax_last_axis
from tandem.network.quantized import MOVES, QuantizedGraph, moved, moved_inputs, table_rows
from tandem.network.steps import NotOnTarget, Placed, Placement, Step

#: on the CPU, a GEMM of fewer multiply-adds runs on one thread whatever the network's thread count: an
#: attention head's 128 x 128 x 64 takes ~5 us, and waking a second thread for it cost up to milliseconds on
#: the 2-core guests measured (experiments/networks.py)
ONE_THREAD_MACS = 1 << 21


def place(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    """How ``target`` runs ``step`` on ``values`` (the int8 tensors computed so far); NotOnTarget when it
    runs on the host."""
    first = step.layers[0]
    placer = PLACERS.get(first.op)
    if placer is None:
        shape = np.shape(values[first.inputs[0]]) if first.inputs and first.inputs[0] in values else ()
        raise NotOnTarget(_why_host(first, target, shape))
    if any(name for layer in step.layers for name in layer.outputs[1:]):
        raise NotOnTarget(f"a {first.op} of several outputs: the kernels write one")
    if isinstance(q, AffineGraph) and first.op in SCALED and target.kind in NO_FLOAT_REQUANTIZE:
        raise NotOnTarget(NO_FLOAT_REQUANTIZE[target.kind])
    batch = values[first.inputs[0]].shape[0] if first.inputs and values[first.inputs[0]].ndim else 1
    if first.op in PER_IMAGE and batch > 1:
        return _per_image(placer, step, q, values, target, batch)
    return placer(step, q, values, target)


#: the steps whose kernels take one image: a batch runs them once per image (the batch an outer loop)
PER_IMAGE = ("Conv", "MaxPool", "GlobalAveragePool")


def _per_image(placer: Callable[..., Placement], step: Step, q: QuantizedGraph, values: dict[str, np.ndarray],
               target: Target, batch: int) -> Placement:
    """``step`` over a batch of ``batch`` images: the placement of each image in turn (the step's layers
    with batch 1, its inputs' image), their parts in order, their outputs joined along the batch."""
    one = Step(tuple(replace(layer, shapes=tuple((1, *s[1:]) if s else s for s in layer.shapes))
                     for layer in step.layers))
    placements = []
    for image in range(batch):
        sliced = {**values, **{n: values[n][image:image + 1] for n in step.inputs}}
        placements.append(placer(one, q, sliced, target))
    parts, spans = [], []
    for placement in placements:
        spans.append((len(parts), len(placement.parts)))
        for part in placement.parts:   # an input computed from the parts before: this image's parts
            if callable(part.inputs):
                part = replace(part, inputs=lambda outs, f=part.inputs, at=spans[-1][0]: f(outs[at:]))
            parts.append(part)

    def join(outs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([p.join(outs[at:at + n]) for p, (at, n) in zip(placements, spans, strict=True)])
    return Placement(tuple(parts), join)


#: a quantized ONNX model's steps that requantize by a float32 scale (tandem/network/qdq.py), and the
#: targets that cannot: why
SCALED = ("Conv", "Gemm", "MatMul", "Add", "GlobalAveragePool")
NO_FLOAT_REQUANTIZE = {
    "vita": "a float32 requantization (a quantized ONNX model's scale, tandem/network/qdq.py): VITA's "
            "epilogue shifts and clips, its ALU has no float multiply, and its stores write 8 bits (its "
            "int32 sums cannot leave for the host)",
}


MOVED = "data movement: the int8 values moved on the host"
WHY_HOST = {
    "Flatten": "data movement: a view of the same int8 values",
    "Reshape": "data movement: a view of the same int8 values",
    "Transpose": "data movement: the int8 values reordered on the host",
    "Softmax": "computed in integers by the power-of-two graph's rule (reference.softmax_int8) along "
               "the last axis, else in float on dequantized values (tandem/network/quantize.py); only the "
               "CPU has its kernel (network.softmax_int8)",
    "LayerNormalization": "computed from exact integer sums by the power-of-two graph's rule "
                          "(reference.layer_norm_int8) along the last axis, else in float on dequantized "
                          "values (tandem/network/quantize.py); only the CPU has its kernel "
                          "(network.layer_norm_int8)",
    "Gelu": "computed in float on dequantized values (tandem/network/quantize.py); no int8 kernel yet",
    "Mul": "computed in float on dequantized values (tandem/network/quantize.py); no int8 kernel yet",
}


def _why_host(layer: Layer, target: Target, shape: tuple[int, ...]) -> str:
    """Why a layer no placer takes runs on the host: it moves values (``WHY_HOST``'s reason, or
    ``MOVED``), the integer graph computes it by a table of results (its input of ``shape``), or in
    float."""
    if moved(layer):
        return WHY_HOST.get(layer.op, MOVED)
    rows = table_rows(layer, shape)
    if rows is not None:
        per = " per channel" if rows > 1 else ""
        return (f"its table of 256 results{per} looked up (the integer graph's rule for a float {layer.op} "
                f"of one 8-bit input, quantized.lookup_table); no {target.kind} placement takes it")
    if layer.op in WHY_HOST and layer.op not in MOVES:
        return WHY_HOST[layer.op]
    if layer.op in IN_INTEGERS:
        return f"no {target.kind} kernel takes this {layer.op} yet: the integer graph's layer, on the host"
    return (f"computed in float on dequantized values (the integer graph's rule for {layer.op}); no "
            f"{target.kind} kernel computes it")


#: the layers the integer graphs compute in integers where they can (tandem/network/quantize.py, qdq.py)
IN_INTEGERS = ("Conv", "Gemm", "MatMul", "Add", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool")


# ---- what a step computes, whatever the target


def _one_image(x: np.ndarray) -> np.ndarray:
    """``x``, an image tensor of batch 1 (a batch's steps are placed per image: ``_per_image``)."""
    if x.shape[0] != 1:
        raise ValueError(f"a batch of {x.shape[0]} images reached a one-image placer")
    return x


def _contraction(step: Step, q: PowerOfTwoGraph) -> tuple[int, np.ndarray, tuple[int, int]]:
    """The requantization of a conv/GEMM step: its right shift, the int32 bias with the rounding constant
    folded in (zeros where the layer has none), and the clip (the fused ReLU's)."""
    layer = step.layers[0]
    e = q.exponents
    ex = e[layer.inputs[0]] if layer.name in q.weights else e[layer.inputs[0]] + e[layer.inputs[1]]
    ew = q.weight_exponents[layer.name][1] if layer.name in q.weights else 0
    shift = ex + ew - e[step.output]
    if shift < 0:
        raise NotOnTarget(f"its requantization shifts left by {-shift} (e_x + e_w < e_out); the kernels "
                          f"shift right")
    channels = step.layers[0].shape[1] if layer.op == "Conv" else step.layers[0].shape[-1]
    weights = q.weights.get(layer.name, {})
    bias = np.asarray(weights.get(2, np.zeros(channels, np.int64)), np.int64) + ((1 << shift) >> 1)
    if bias.size and (bias.min() < -2**31 or bias.max() >= 2**31):
        raise NotOnTarget("its bias does not fit the accumulators' int32")
    bounds = clip_bounds(q, step.layers[-1]) if len(step.layers) > 1 else (-128, 127)
    return shift, bias, bounds


def _depthwise(step: Step) -> bool:
    layer = step.layers[0]
    groups = layer.attrs.get("group", 1)
    w = layer.weights.get(1)
    return groups > 1 and w is not None and groups == w.shape[0] == groups * w.shape[1]


def _groups(step: Step) -> int:
    return int(step.layers[0].attrs.get("group", 1))


def _group_parts(x: np.ndarray, w: np.ndarray, groups: int, per: int
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """A grouped convolution of ``x`` (one image) by ``w`` [OC, IC / groups, K, K] as convolutions of
    ``per`` consecutive groups each (the last of what remains): each part's input channels and its weights,
    block-diagonal (a group's output channels read only its own input channels: zero elsewhere). Their
    outputs, joined along channels in order, are the grouped convolution's."""
    oc, icg = w.shape[:2]
    ocg = oc // groups
    parts = []
    for first in range(0, groups, per):
        n = min(per, groups - first)
        if n == 1:   # one group: its own weights (a view, the same memory on every call)
            parts.append((x[:, first * icg:(first + 1) * icg], w[first * ocg:(first + 1) * ocg]))
            continue
        block = np.zeros((n * ocg, n * icg, *w.shape[2:]), w.dtype)
        for j in range(n):
            block[j * ocg:(j + 1) * ocg, j * icg:(j + 1) * icg] = w[(first + j) * ocg:(first + j + 1) * ocg]
        parts.append((x[:, first * icg:(first + n) * icg], block))
    return parts


def _conv_layer(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The int8 input and weights of a conv step and its ``run`` parameters (H W IC OC K S P; IC a group's
    input channels, where the conv is grouped)."""
    layer = step.layers[0]
    a = layer.attrs
    if layer.name not in q.weights or len(layer.shape) != 4:
        raise NotOnTarget("a convolution whose weights are not constant" if layer.name not in q.weights
                          else f"a {len(layer.shape) - 2}-D convolution: the schedules take 2-D ones")
    x, w = _one_image(values[layer.inputs[0]]), q.weights[layer.name][1]
    oc, ic, kh, kw = w.shape
    window = padded_window("Conv", a, x.shape[2:], (kh, kw))
    if kh != kw or window is None:
        raise NotOnTarget(f"a {kh} x {kw} kernel, {_window_attrs(a)}: the schedules take square kernels, one "
                          f"stride and no dilation")
    stride, pads = window
    pad = pads[0][0]
    if len({p for pair in pads for p in pair}) > 1:   # uneven padding: laid out on the host, none in-kernel
        x, pad = _padded(x, pads, _zero_of(q, layer.inputs[0])), 0
    return x, w, {"H": x.shape[2], "W": x.shape[3], "IC": ic, "OC": oc, "K": kh, "S": stride, "P": pad}


def _padded(x: np.ndarray, pads: tuple[tuple[int, int], ...], value: int) -> np.ndarray:
    """Image tensor ``x`` [N, C, H, W] padded by ``pads`` ((top, bottom), (left, right)) with ``value``."""
    return np.pad(x, ((0, 0), (0, 0), *pads), constant_values=value)


def _zero_of(q: QuantizedGraph, name: str) -> int:
    """The integer that stands for 0.0 in tensor ``name`` (its zero point; 0 in a power-of-two graph)."""
    return q.affine[name].zero_point if isinstance(q, AffineGraph) else 0


def _window_attrs(attrs: dict) -> str:
    """A windowed layer's geometry attributes, as an error shows them."""
    shown = {k: attrs[k] for k in ("strides", "pads", "dilations", "auto_pad", "ceil_mode") if k in attrs}
    return ", ".join(f"{k} {v}" for k, v in shown.items()) or "default strides and pads"


def _gemm_operands(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray]
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """(data [M, K], weights [N, K]) of each GEMM a Gemm/MatMul step is: one, or one per head for a MatMul
    of two activations."""
    layer = step.layers[0]
    x = values[layer.inputs[0]]
    if layer.name in q.weights:
        w = q.weights[layer.name][1]
        w = w if layer.op == "Gemm" and layer.attrs.get("transB") else w.T
        if layer.op == "Gemm" and layer.attrs.get("transA"):
            raise NotOnTarget("Gemm with transA")
        return [(x.reshape(-1, x.shape[-1]), w)]
    b = values[layer.inputs[1]]
    if x.ndim < 2 or x.shape[:-2] != b.shape[:-2]:
        raise NotOnTarget(f"a MatMul of {list(x.shape)} by {list(b.shape)}: broadcasting is not run")
    heads = x.reshape(-1, *x.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    return [(xa, np.ascontiguousarray(xb.T)) for xa, xb in zip(*heads, strict=True)]


def _stacked(shape: tuple[int, ...]) -> Callable[[list[np.ndarray]], np.ndarray]:
    return lambda outs: np.stack(outs).reshape(shape)


def _elementwise_shape(shape: tuple[int, ...]) -> dict[str, int]:
    """An element-wise operator's [C, H, W] for a tensor of ``shape`` (NCHW with N = 1, or flattened)."""
    if len(shape) == 4 and shape[0] == 1:
        return dict(zip("CHW", shape[1:], strict=True))
    return {"C": 1, "H": 1, "W": math.prod(shape)}


def _add(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    layer = step.layers[0]
    if len(layer.inputs) != 2:
        raise NotOnTarget("an Add of a constant: computed in float on dequantized values "
                          "(tandem/network/quantize.py)")
    a, b = (values[name] for name in layer.inputs)
    if a.shape != b.shape:
        raise NotOnTarget(f"an Add broadcasting {list(a.shape)} with {list(b.shape)}")
    dims = _elementwise_shape(a.shape)
    arrays = [x.astype(np.int32).reshape(tuple(dims.values())) for x in (a, b)]
    if isinstance(q, AffineGraph):
        return _qlinear_add(step, q, dims, arrays, a.shape, target)
    e, eo = q.exponents, q.exponents[step.output]
    lo, hi = clip_bounds(q, step.layers[-1]) if len(step.layers) > 1 else (-128, 127)
    params = {**dims, "SA": e[layer.inputs[0]] - eo, "SB": e[layer.inputs[1]] - eo, "LO": lo, "HI": hi}
    return Placement((Placed(network.user_op("quantized_add"), params, arrays,
                             lambda out: out.reshape(a.shape).astype(np.int8), "quantized_add"),))


def _qlinear_add(step: Step, q: AffineGraph, dims: dict[str, int], arrays: list[np.ndarray],
                 shape: tuple[int, ...], target: Target) -> Placement:
    """A quantized ONNX model's Add: ``qlinear_add``, onnxruntime's fused float32 multiply-adds
    (compiler/ops/network.py), where the target computes them."""
    if target.kind == "diannao":
        raise NotOnTarget("onnxruntime's QLinearAdd (fused float32 multiply-adds): DianNao's scalar unit has "
                          "no fused multiply-add")
    out = q.affine[step.output]
    params = {**dims, "LO": out.bounds[0], "HI": out.bounds[1]}
    for name, constant in zip("ABF", qdq.add_constants(q, step.layers[0]), strict=True):
        params[f"M{name}"], params[f"E{name}"] = network.dyadic(constant)
    return Placement((Placed(network.user_op("qlinear_add"), params, arrays,
                             lambda out_: out_.reshape(shape).astype(out.dtype), "qlinear_add"),))


def _max_pool(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    layer = step.layers[0]
    a = layer.attrs
    kernel = tuple(a["kernel_shape"])
    window = padded_window("MaxPool", a, tuple(values[layer.inputs[0]].shape[2:]), kernel)
    if len(set(kernel)) != 1 or window is None:
        raise NotOnTarget(f"a {' x '.join(map(str, kernel))} window, {_window_attrs(a)}: the pools take "
                          f"square 2-D windows, one stride and no dilation")
    stride, pads = window
    x = _one_image(values[layer.inputs[0]])
    affine = isinstance(q, AffineGraph)
    dtype = q.affine[layer.output].dtype if affine else "int8"
    if affine and not q.affine[layer.inputs[0]].same(q.affine[layer.output]):
        raise NotOnTarget("a max pool that changes the quantization: dequantized, pooled, quantized again")
    offset = -128 if dtype == "uint8" else 0   # uint8 values move to int8's range (max commutes with it)
    padded = _padded(x.astype(np.int32) + offset, pads, -128)[0]
    params = {"C": padded.shape[0], "H": padded.shape[1], "W": padded.shape[2], "K": kernel[0], "S": stride}
    return Placement((Placed("max_pool", params, [padded],
                             lambda out: (out.reshape(layer.shape) - offset).astype(dtype)),))


# ---- VITA


def _vita_conv(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    if _groups(step) > 1:
        return _vita_grouped(step, q, values, target)
    x, w, dims = _conv_layer(step, q, values)
    shift, bias, bounds = _contraction(step, q)
    if _disjoint_windows(dims):
        return _vita_windows_gemm(x, w, bias, shift, bounds, step.layers[-1].shape, target)
    return Placement((_vita_conv2d(x, w, bias, dims, shift, bounds, target),))


def _disjoint_windows(dims: dict[str, int]) -> bool:
    """Whether a conv's windows do not overlap and hold no padding (stride = kernel > 1, no padding: a ViT's
    patch embedding): a GEMM of its windows by its kernels (``_windows``) on every target, which reads no
    value twice; as a conv2d, a 16 x 16 kernel over 768 output channels fits no VITA tiling and runs past
    DianNao's instruction budget."""
    return dims["K"] > 1 and dims["S"] == dims["K"] and dims["P"] == 0


def _windows(x: np.ndarray, k: int, size: tuple[int, int]) -> np.ndarray:
    """The disjoint k x k windows of image ``x`` [1, C, H, W] (stride k: ``size`` = (OH, OW) of them, the rows
    and columns past the last left out) as the rows of [OH * OW, C * k * k], in OIHW's order within a row."""
    oh, ow = size
    windows = x[0, :, :oh * k, :ow * k].reshape(x.shape[1], oh, k, ow, k).transpose(1, 3, 0, 2, 4)
    return np.ascontiguousarray(windows.reshape(oh * ow, -1))


def _vita_windows_gemm(x: np.ndarray, w: np.ndarray, bias: np.ndarray, shift: int, bounds: tuple[int, int],
                       shape: tuple[int, ...], target: Target) -> Placement:
    """A conv of disjoint windows (``_disjoint_windows``) as one GEMM of its windows [OH * OW, IC * K * K] by
    its kernels [OC, IC * K * K], with the conv's epilogue."""
    _, oc, oh, ow = shape
    data = _windows(x, w.shape[-1], (oh, ow))
    m, depth = data.shape
    params = {"M": m, "N": oc, "K": depth, "bias": True, "shift": shift, "clip": bounds}
    packed = vita.pack_dense(data, w.reshape(oc, -1), target.spec)
    return Placement((Placed("gemm", params, [*packed, vita.pack_bias(bias, target.spec)],
                             lambda out: vita.unpack_out(out, "gemm", oc)[:m].astype(np.int8).T
                             .reshape(1, oc, oh, ow), WINDOWS_GEMM),))


def _vita_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray, dims: dict[str, int], shift: int,
                 bounds: tuple[int, int], target: Target, label: str = "") -> Placed:
    """VITA's conv2d of int8 ``x`` (one image) by ``w`` with the whole epilogue: ``bias`` (rounding constant
    included), ``shift``, the clip to ``bounds``."""
    batch = vita.batch_of(target.spec)
    images = np.concatenate([x, np.zeros((batch - 1, *x.shape[1:]), np.int8)]) if batch > 1 else x
    data, kernel = vita.pack_conv(images, w, target.spec)
    params = {**dims, "N": batch, "bias": True, "shift": shift, "clip": bounds}
    oc = w.shape[0]
    return Placed("conv2d", params, [data, kernel, vita.pack_bias(bias, target.spec)],
                  lambda out: vita.unpack_out(out, "conv2d", oc)[:1].astype(np.int8), label)


def _vita_grouped(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target
                  ) -> Placement:
    """A grouped conv on VITA's GEMM core, which has no grouped or per-channel form: as conv2ds of as many
    whole groups as fit BLOCK input channels (one at least), each block-diagonal (``_group_parts``: a
    depthwise conv's BLOCK channels a diagonal), joined along channels. Every multiply-add runs on GEMM
    instructions, up to BLOCK / (IC / groups) times as many as the layer's (the GEMM utilization counts them
    all; TVM's VTA flow leaves depthwise convs to the CPU instead)."""
    x, w, dims = _conv_layer(step, q, values)
    shift, bias, bounds = _contraction(step, q)
    groups, icg = _groups(step), w.shape[1]
    per = max(1, vita.block_of(target.spec) // icg)
    label = "conv2d (block-diagonal)" if per > 1 else "conv2d (a group)"
    parts, lo = [], 0
    for xg, wg in _group_parts(x, w, groups, per):
        oc = wg.shape[0]
        parts.append(_vita_conv2d(xg, wg, bias[lo:lo + oc], {**dims, "IC": wg.shape[1], "OC": oc}, shift,
                                  bounds, target, label))
        lo += oc
    return Placement(tuple(parts), lambda outs: np.concatenate(outs, axis=1))


def _vita_gemm(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    shift, bias, bounds = _contraction(step, q)
    parts = []
    for data, weight in _gemm_operands(step, q, values):
        (m, k), n = data.shape, weight.shape[0]
        packed = vita.pack_dense(data, weight, target.spec)
        params = {"M": m, "N": n, "K": k, "bias": True, "shift": shift, "clip": bounds}
        parts.append(Placed("gemm", params, [*packed, vita.pack_bias(bias[:n], target.spec)],
                            lambda out, m=m, n=n: vita.unpack_out(out, "gemm", n)[:m].astype(np.int8)))
    return Placement(tuple(parts), _stacked(step.layers[-1].shape))


WINDOWS_GEMM = "gemm (the conv's windows)"
#: the most values a global average pool on VITA takes (14 x 14 compiles in seconds; 16 x 16 nests its
#: stages deeper than Python's default recursion limit, and 28 x 28 compiles in minutes)
VITA_POOL_TAPS = 196


def _vita_global_avg_pool(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target
                          ) -> Placement:
    """The pool by groups of channels that fit the accumulators (all the image's rows at once)."""
    x = _one_image(values[step.layers[0].inputs[0]])
    c, h, w = x.shape[1:]
    if h * w > VITA_POOL_TAPS:
        raise NotOnTarget(f"a mean of {h} x {w} values: VITA's pool computes one ALU stage per value, and "
                          f"its compiler nests them (more than {VITA_POOL_TAPS} exceed Python's recursion "
                          f"limit)")
    lanes = vita.batch_of(target.spec) * vita.block_of(target.spec)
    blocks = -(-c // lanes)
    fits = [b for b in range(blocks, 0, -1) if vita.pool_rows(b, h, w, (h, w), 1, target.spec) is not None]
    if not fits:
        raise NotOnTarget(f"one channel block of a {h} x {w} image does not fit the accumulators")
    per = fits[0] * lanes
    parts = tuple(Placed("global_avg_pool", {"C": min(per, c - lo), "H": h, "W": w},
                         [x[0, lo:lo + per].astype(np.int32)], lambda out: out.astype(np.int8))
                  for lo in range(0, c, per))
    return Placement(parts, lambda outs: np.concatenate(outs).reshape(step.layers[-1].shape))


# ---- the CPU and DianNao: int32 sums on the target, then the epilogue (requantize) on the target


def _sums_then_requantize(step: Step, q: QuantizedGraph, sums: list[Placed], to_chw: Callable,
                          from_chw: Callable, channels: int, spatial: tuple[int, int],
                          correction: np.ndarray | int = 0, target_kind: str = "cpu",
                          per_part: list[tuple[slice, np.ndarray]] | None = None,
                          joined: Callable | None = None) -> Placement:
    """The step as its int32 sums (``sums``) and then ``requantize`` on the target over [C, H, W] (``to_chw``
    of the sums' outputs; ``from_chw`` back to the graph's layout), ``correction`` (per channel, or per
    element of [C, H, W]) added to the bias. A quantized ONNX model's step: ``requantize_scaled`` by its
    float32 scale per channel instead (its output float32 where the target has no float-to-int
    conversion: exact integers, converted to 8 bits on the host). On the CPU, where each part is a conv2d
    or a GEMM and ``per_part`` says which output channels it computes and their correction, each part
    requantizes its own sums in its epilogue instead (``_fused_requantize``), in either scheme, the parts'
    outputs then ``joined`` into the graph's layout (default: ``from_chw`` of ``to_chw``)."""
    dims = {"C": channels, "H": spatial[0], "W": spatial[1]}
    if target_kind == "cpu" and per_part is not None and all(part.op in FUSES_REQUANTIZE for part in sums):
        return _fused_requantize(step, q, sums, per_part, joined or (lambda outs: from_chw(to_chw(outs))))
    if isinstance(q, AffineGraph):
        layer, out = step.layers[0], q.affine[step.output]
        bias = np.asarray(q.weights[layer.name].get(2, np.zeros(channels, np.int64)), np.int64)
        scale = np.broadcast_to(qdq.contraction_scale(q, layer)[:, None, None], (channels, *spatial)).copy()
        params = {**dims, "ZP": out.zero_point, "LO": out.bounds[0], "HI": out.bounds[1],
                  "F": int(target_kind == "diannao")}
        op, extra = "requantize_scaled", [scale]
        dtype = out.dtype
    else:
        shift, bias, bounds = _contraction(step, q)
        params = {**dims, "S": shift, "LO": bounds[0], "HI": bounds[1]}
        op, extra, dtype = "requantize", [], "int8"
    correction = np.asarray(correction, np.int64)
    if correction.ndim == 1:
        correction = correction[:, None, None]
    total = bias[:, None, None] + correction
    if total.size and (total.min() < -2**31 or total.max() >= 2**31):
        raise NotOnTarget("its bias and offset correction do not fit int32")
    repeated = np.broadcast_to(total.astype(np.int32), (channels, *spatial)).copy()
    epilogue = Placed(network.user_op(op), params, lambda outs: [to_chw(outs), repeated, *extra],
                      lambda out: from_chw(out).astype(dtype), op, sums=False)
    return Placement((*sums, epilogue), lambda outs: outs[-1])


#: the CPU's kernels that requantize their sums in their epilogue (``compiler.ops.cpu_epilogue.Requantize``,
#: ``compiler.ops.cpu_epilogue.ShiftClip``)
FUSES_REQUANTIZE = ("conv2d", "gemm", "depthwise")


def _fused_requantize(step: Step, q: QuantizedGraph, sums: list[Placed],
                      per_part: list[tuple[slice, np.ndarray]], join: Callable) -> Placement:
    """A conv or GEMM on the CPU: each part's sums requantized in its own epilogue, with its channels' bias
    plus correction: a quantized ONNX model's by their float32 scales to the output's zero point and bounds
    (``epilogue=requantize``), a power-of-two graph's by its right shift and clip (``epilogue=shift``,
    the bias holding the rounding constant); the 8-bit values joined by ``join`` (the parts' outputs -> the
    graph's layout)."""
    layer = step.layers[0]
    if isinstance(q, AffineGraph):
        out = q.affine[step.output]
        channels = layer.shape[1] if layer.op == "Conv" else layer.shape[-1]
        bias = np.asarray(q.weights[layer.name].get(2, np.zeros(channels, np.int64)), np.int64)
        scale, dtype = qdq.contraction_scale(q, layer), out.dtype
        epilogue = {"epilogue": "requantize", "ZP": out.zero_point, "LO": out.bounds[0], "HI": out.bounds[1]}
    else:
        shift, bias, bounds = _contraction(step, q)
        scale, dtype = None, "int8"
        epilogue = {"epilogue": "shift", "shift": shift, "LO": bounds[0], "HI": bounds[1]}
    parts = []
    for part, (channels_of, correction) in zip(sums, per_part, strict=True):
        total = bias[channels_of] + np.asarray(correction, np.int64)
        if total.size and (total.min() < -2**31 or total.max() >= 2**31):
            raise NotOnTarget("its bias and offset correction do not fit int32")
        scales = [] if scale is None else [np.ascontiguousarray(scale[channels_of])]
        arrays = [*part.inputs, total.astype(np.int32), *scales]
        parts.append(replace(part, params={**part.params, **epilogue}, inputs=arrays,
                             label=f"{part.label or part.op} (requantize fused)"))
    return Placement(tuple(parts), lambda outs: join(outs).astype(dtype))


def _nonnegative(q: PowerOfTwoGraph, name: str) -> bool:
    """Whether tensor ``name`` of the integer graph is >= 0 by construction: a ReLU's (or a clip's at 0 or
    above), or what pooling or data movement makes of such."""
    producer = next((layer for layer in q.graph.layers if name in layer.outputs), None)
    if producer is None:
        return False
    if producer.op in ("Relu", "Clip"):
        return clip_bounds(q, producer)[0] >= 0
    if producer.op == "Softmax":   # probabilities, quantized by rounding: >= 0
        return True
    if producer.op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
        return _nonnegative(q, producer.inputs[0])
    if moved(producer) and all(q.exponents[n] == q.exponents[name] for n in moved_inputs(producer)):
        constants = [producer.weights[i] for i in moved(producer) if i in producer.weights]
        return all(_nonnegative(q, n) for n in moved_inputs(producer)) and all(
            np.all(np.asarray(c) >= 0) for c in constants)
    return False


def _data_operand(q: QuantizedGraph, name: str, x: np.ndarray, w: np.ndarray, pad: int, unsigned: bool,
                  pad_in_kernel: bool = False, move: tuple[int, int] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Data for a target's 8-bit multiplier, uint8 (the CPU's vpdpbusd: u8 x s8) or int8 (DianNao's,
    VITA's), with what comes off each output channel's bias. The data moves by an offset to the target's
    type (+128 for int8 on the CPU, -128 for uint8 on DianNao); where the tensor's real zero (its zero point:
    0 in a power-of-two graph) is then not 0, ``(zero + offset) * sum(w)`` comes off each channel's bias and
    the padded border must hold that moved zero: written by the kernel's packing where ``pad_in_kernel``
    (the CPU's conv2d: its ``pad_value``), else padded on the host first. int8 data that is >= 0 by
    construction (after a ReLU) goes to the CPU as it is. Returns the data, the bias correction, the
    padding the kernel still applies and the value its border holds."""
    zero, offset = move or data_offset(q, name, unsigned)   # (``move``: data_offset's, found already)
    dtype = np.uint8 if unsigned else np.int8
    if zero + offset == 0:
        return moved_data(x, offset, dtype), np.zeros(w.shape[0], np.int64), pad, 0
    correction = -(zero + offset) * weight_sums(w)
    if pad and pad_in_kernel:
        return moved_data(x, offset, dtype), correction, pad, zero + offset
    if pad:
        x = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(pad, pad)] * 2, constant_values=zero)
    return moved_data(x, offset, dtype), correction, 0, 0


def data_offset(q: QuantizedGraph, name: str, unsigned: bool) -> tuple[int, int]:
    """Tensor ``name``'s real zero (its zero point; 0 in a power-of-two graph) and the offset that moves its
    values to the target's 8-bit multiplier type (``_data_operand``): uint8 where ``unsigned``, else int8."""
    if isinstance(q, AffineGraph):
        a = q.affine[name]
        return a.zero_point, {("uint8", True): 0, ("int8", True): 128, ("uint8", False): -128,
                              ("int8", False): 0}[(a.dtype, unsigned)]
    return 0, 128 if unsigned and not _nonnegative(q, name) else 0


def moved_data(x: np.ndarray, offset: int, dtype: type) -> np.ndarray:
    """``x + offset`` in ``dtype`` (``x`` itself where nothing moves and the type is already ``dtype``;
    ``compiler.ops.cpu.moved`` otherwise)."""
    x = np.asarray(x)
    if offset == 0:
        return x.astype(dtype, copy=False)
    return cpu_ops.moved(x, offset, np.empty(x.shape, dtype))


#: each weight array's per-output-channel sums, by the array's memory (``weight_sums``)
_SUMS: dict[tuple, tuple[weakref.ref, np.ndarray]] = {}


def weight_sums(w: np.ndarray) -> np.ndarray:
    """The sum of each output channel's weights (int64), computed once for as long as the weights (the
    same memory, their array alive) come back: a network's inference places its steps again on new data."""
    base = w if w.base is None else w.base
    key = memory_key(w)
    held = _SUMS.get(key)
    if held is not None and held[0]() is base:
        return held[1]
    if len(_SUMS) > 4096:   # drop the weights no longer alive
        for dead in [k for k, (ref, _) in _SUMS.items() if ref() is None]:
            del _SUMS[dead]
    sums = w.reshape(w.shape[0], -1).astype(np.int64).sum(axis=1)
    _SUMS[key] = (weakref.ref(base), sums)
    return sums


def _sums_op(step: Step, dims: dict[str, int]) -> tuple[str, dict[str, int]]:
    """The ``run`` operator of a conv's int32 sums and its parameters: conv2d, or depthwise (C channels)."""
    if not _depthwise(step):
        return "conv2d", dims
    return "depthwise", {"H": dims["H"], "W": dims["W"], "C": dims["OC"], "K": dims["K"], "S": dims["S"],
                         "P": dims["P"]}


def _sums_conv(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    """A conv on the CPU or DianNao: its int32 sums, then ``requantize`` over all its channels. A conv of
    disjoint windows is one GEMM of its windows (``_disjoint_windows``); a depthwise conv the target's
    depthwise kind; another grouped one a conv2d per group, on its own input channels (the groups' sums
    joined along channels before the one requantization)."""
    x, w, dims = _conv_layer(step, q, values)
    _, oc, oh, ow = step.layers[-1].shape
    name, unsigned = step.layers[0].inputs[0], target.kind == "cpu"
    int8 = {} if unsigned else {"dtype": "int8"}
    sums, corrections = [], []
    if _groups(step) == 1 and _disjoint_windows(dims):   # one GEMM of its windows: [OH * OW, OC] sums
        w = w.reshape(oc, -1)
        data, correction, _, _ = _data_operand(q, name, _windows(x, dims["K"], (oh, ow)), w, 0, unsigned)
        threads = {"threads": 1} if unsigned and data.size * oc < ONE_THREAD_MACS else {}
        sums.append(Placed("gemm", {"M": oh * ow, "N": oc, "K": w.shape[1], **int8, **threads}, [data, w],
                           lambda out: np.ascontiguousarray(out.reshape(oh * ow, oc).T).reshape(oc, oh, ow),
                           WINDOWS_GEMM))
        corrections.append(correction)
    elif _depthwise(step):   # the contraction flow's layouts: NCHW data, [C, 1, K, K] weights
        data, correction, pad, _ = _data_operand(q, name, x, w, dims["P"], unsigned)
        op, params = _sums_op(step, {**dims, "H": data.shape[2], "W": data.shape[3], "P": pad})
        sums.append(Placed(op, {**params, **int8}, [data, w], lambda out: out.reshape(oc, oh, ow)))
        corrections.append(correction)
    else:
        for xg, wg in _group_parts(x, w, _groups(step), 1):
            data, correction, pad, fill = _data_operand(q, name, xg, wg, dims["P"], unsigned,
                                                        pad_in_kernel=unsigned)
            params = {**dims, "H": data.shape[2], "W": data.shape[3], "IC": wg.shape[1], "OC": wg.shape[0],
                      "P": pad, **int8, **({"pad_value": fill} if fill else {})}
            sums.append(_conv2d_sums(data, wg, params, unsigned, (oh, ow)))
            corrections.append(correction)
    n, correction = len(sums), np.concatenate(corrections)
    ends = np.cumsum([0, *(len(c) for c in corrections)])
    per_part = [(slice(lo, hi), c) for lo, hi, c in zip(ends[:-1], ends[1:], corrections, strict=True)]
    return _sums_then_requantize(step, q, sums, lambda outs: np.concatenate(outs[:n]),
                                 lambda out: out.reshape(1, oc, oh, ow), oc, (oh, ow), correction,
                                 target.kind, per_part)


def _conv2d_sums(data: np.ndarray, w: np.ndarray, params: dict[str, int], nchw: bool, size: tuple[int, int]
                 ) -> Placed:
    """A conv2d's int32 sums as [OC, OH, OW]: on NCHW data by OIHW weights (the CPU's), or on HWC data by
    OHWI weights (DianNao's)."""
    oc = w.shape[0]
    if nchw:
        return Placed("conv2d", params, [data, w], lambda out: out.reshape(oc, *size))
    return Placed("conv2d", params, [np.ascontiguousarray(data[0].transpose(1, 2, 0)),
                                     np.ascontiguousarray(w.transpose(0, 2, 3, 1))],
                  lambda out: np.ascontiguousarray(out.reshape(*size, oc).transpose(2, 0, 1)))


def _gemm_then_requantize(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target
                          ) -> Placement:
    """Each GEMM's int32 sums [M, N], then one requantize over [N, GEMMs * M] (channels first). The data goes
    in the target's type (``_data_operand``; the correction of each GEMM is its own columns', also when its
    "weights" are an activation: a MatMul of two)."""
    operands = _gemm_operands(step, q, values)
    m, n = operands[0][0].shape[0], operands[0][1].shape[0]
    g = len(operands)
    unsigned = target.kind == "cpu"
    name = step.layers[0].inputs[0]
    move = data_offset(q, name, unsigned)   # once for the step's GEMMs (one per head of each image)
    moved = [_data_operand(q, name, d, wt, 0, unsigned, move=move)[:3] for d, wt in operands]
    operands = [(u[0], wt) for u, (_, wt) in zip(moved, operands, strict=True)]
    per_gemm = np.stack([u[1] for u in moved], axis=1)   # [N, G]
    # [N, G * M, 1], for a requantize pass after the sums (the CPU's GEMMs fuse it, with per_part's)
    correction = 0 if target.kind == "cpu" else np.repeat(per_gemm, m, axis=1)[:, :, None]
    options: dict[str, object] = {} if unsigned else {"dtype": "int8"}
    if target.kind == "cpu" and m * n * operands[0][0].shape[1] < ONE_THREAD_MACS:
        options["threads"] = 1
    sums = [Placed("gemm", {"M": d.shape[0], "N": wt.shape[0], "K": d.shape[1], **options},
                   [d, wt], lambda out: out) for d, wt in operands]
    shape = step.layers[-1].shape

    def to_chw(outs):   # [G, M, N] -> [N, G * M, 1]
        return np.ascontiguousarray(np.stack(outs[:g]).reshape(g * m, n).T).reshape(n, g * m, 1)

    def from_chw(out):
        return np.ascontiguousarray(out.reshape(n, g * m).T).reshape(shape)
    per_part = [(slice(0, n), per_gemm[:, k]) for k in range(g)]
    return _sums_then_requantize(step, q, sums, to_chw, from_chw, n, (g * m, 1), correction, target.kind,
                                 per_part, lambda outs: np.stack(outs[:g]).reshape(shape))   # no transposes


def _rounded_mean(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    x = _one_image(values[step.layers[0].inputs[0]])
    c, h, w = x.shape[1:]
    if isinstance(q, AffineGraph):   # onnxruntime's QLinearGlobalAveragePool
        layer, out = step.layers[0], q.affine[step.output]
        params = {"C": c, "H": h, "W": w, "Z": q.affine[layer.inputs[0]].zero_point * h * w,
                  "ZP": out.zero_point, "LO": out.bounds[0], "HI": out.bounds[1]}
        scale = np.full(c, qdq.mean_scale(q, layer, h * w), np.float32)
        return Placement((Placed(network.user_op("scaled_mean"), params, [x[0].astype(np.int32), scale],
                                 lambda out_: out_.reshape(layer.shape).astype(out.dtype), "scaled_mean"),))
    return Placement((Placed(network.user_op("rounded_mean"), {"C": c, "H": h, "W": w},
                             [x[0].astype(np.int32)], lambda out: out.reshape(step.layers[-1].shape),
                             "rounded_mean"),))


def _no_rounded_mean(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target
                     ) -> Placement:
    raise NotOnTarget("DianNao's schedules take element-wise user operators (one stage); its int8 rounded "
                      "mean, a reduction, has none yet")


def _softmax_int8(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    """A power-of-two graph's softmax along the last axis (``reference.softmax_int8``): one kernel over its
    rows (``network.softmax_int8``), the table of exponentials of its input's exponent an input."""
    layer = step.layers[0]
    x = values[layer.inputs[0]]
    if not isinstance(q, PowerOfTwoGraph) or not softmax_last_axis(layer, x.ndim) or x.ndim == 0:
        raise NotOnTarget(WHY_HOST["Softmax"])
    d = x.shape[-1]
    table = np.concatenate([[0], reference.softmax_table(q.exponents[layer.inputs[0]])]).astype(np.int32)
    params = {"R": x.size // d, "D": d, "E": q.exponents[layer.output],
              "MASK": int(layer.inputs[0] in q.masks)}   # (the kernel's masked value is -128: MASKED)
    return Placement((Placed(network.user_op("softmax_int8"), params, [x.reshape(-1, d), table],
                             lambda out: out.reshape(layer.shape), "softmax_int8"),))


def _layer_norm_int8(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target
                     ) -> Placement:
    """A power-of-two graph's layer norm along the last axis (``reference.layer_norm_int8``): one kernel over
    its rows (``network.layer_norm_int8``), its scale, shift and epsilon at their exponents inputs."""
    layer = step.layers[0]
    x = values[layer.inputs[0]]
    operands = layer_norm_operands(q, layer, x.ndim) if isinstance(q, PowerOfTwoGraph) else None
    if operands is None:
        raise NotOnTarget(WHY_HOST["LayerNormalization"])
    gamma, beta, eps = operands
    d = x.shape[-1]
    return Placement((Placed(network.user_op("layer_norm_int8"), {"R": x.size // d, "D": d},
                             [x.reshape(-1, d), gamma, beta, np.array([eps], np.float32)],
                             lambda out: out.reshape(layer.shape), "layer_norm_int8"),))


def _on_host(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
    first = step.layers[0]
    raise NotOnTarget(_why_host(first, target, np.shape(values[first.inputs[0]])))


def _by_target(**placers: Callable) -> Callable:
    def placer(step: Step, q: QuantizedGraph, values: dict[str, np.ndarray], target: Target) -> Placement:
        return placers[target.kind](step, q, values, target)
    return placer


PLACERS: dict[str, Callable[..., Placement]] = {
    "Conv": _by_target(vita=_vita_conv, cpu=_sums_conv, diannao=_sums_conv),
    "Gemm": _by_target(vita=_vita_gemm, cpu=_gemm_then_requantize, diannao=_gemm_then_requantize),
    "MatMul": _by_target(vita=_vita_gemm, cpu=_gemm_then_requantize, diannao=_gemm_then_requantize),
    "Add": _add,
    "MaxPool": _max_pool,
    "GlobalAveragePool": _by_target(vita=_vita_global_avg_pool, cpu=_rounded_mean, diannao=_no_rounded_mean),
    "Softmax": _by_target(vita=_on_host, cpu=_softmax_int8, diannao=_on_host),
    "LayerNormalization": _by_target(vita=_on_host, cpu=_layer_norm_int8, diannao=_on_host),
}
