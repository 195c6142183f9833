"""The CPU's functions of a layer: what the cpu flows (tandem/flows/cpu.py) do with a conv2d
(``ConvShape``), a GEMM (``GemmShape``) or a direct convolution of TensorIR's kinds
(``compiler.ops.cpu.Window``), computed as ``CpuOptions`` say (element type, a fused bias and epilogue, a
GEMM's rows on the lanes).

- ``schedule``: UNIT's schedule of the layer (``compiler.ops.cpu``);
- ``inputs``: seeded data, weights and bias in the plain layouts (tandem/flows/layers.py);
- ``pack`` / ``unpack``: to and from the kernel's layouts (``compiler.ops.cpu``'s ``pack_*``), with
  ``bias_axes`` the packed output's axes that index the bias;
- ``reference``, ``magnitude``, ``check``: numpy's result, the float rounding bound's scale, the comparison;
- ``fused_extents``: the data-parallel loops outside the unrolled tile, which the tunings cut
  (tandem/flows/cpu_tuning.py, tandem/flows/polydl.py);
- ``fits``: the size check before a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from compiler.ops import cpu, cpu_epilogue
from compiler.ops.nn import ConvShape, GemmShape
from compiler.ops.reference import conv_nd
from compiler.target import Target
from tandem.flows import layers
from tandem.flows.check import Check, exact, within_bound
from tandem.flows.flow import RunError, check_host_memory, random_bias

#: what the CPU flows run: a conv2d, a GEMM, or a direct convolution of TensorIR's kinds
Layer = ConvShape | GemmShape | cpu.Window


@dataclass(frozen=True)
class CpuOptions:
    """How the CPU computes a layer: ``dtype`` (u8 data x s8 weights; or ``compiler.ops.cpu.DTYPES``' others),
    an element-wise ``epilogue`` on the output (``compiler.ops.cpu_epilogue.EPILOGUES``) or a
    ``requantize``ation to 8 bits (an integer type's, with a bias: by a float32 scale per output channel,
    ``compiler.ops.cpu_epilogue.Requantize``, or by a right shift, ``compiler.ops.cpu_epilogue.ShiftClip``),
    and a per-output-channel ``bias`` added before it (conv2d and GEMM), all fused into the operator (PolyDL's
    Algorithm 3); for a GEMM, ``transposed``: the kernel with the data's rows on the lanes
    (``compiler.ops.cpu.gemm_t``); for a conv2d, ``pad_value``: what its padded border holds (a quantized
    input's zero point, the integer that stands for 0.0; written by the packing, no copy of its own);
    ``instruction``: the spec's instruction a tensorized isa sums the products with (None: the first of
    ``compiler.ops.cpu.packings``; the cpu flow picks the first this CPU runs)."""

    dtype: str = "uint8"
    epilogue: str | None = None
    bias: bool = False
    transposed: bool = False
    requantize: cpu_epilogue.Requantize | cpu_epilogue.ShiftClip | None = None
    pad_value: int = 0
    instruction: str | None = None

    def __post_init__(self) -> None:
        if self.requantize is not None and (not self.bias or self.epilogue is not None or self.is_float):
            raise ValueError(f"cpu: requantize takes an integer type ({self.dtype}) and a bias, and no other "
                             f"epilogue ({self.epilogue})")

    @property
    def is_float(self) -> bool:
        return self.dtype == "float32"

    @property
    def params(self) -> dict[str, str | bool]:
        """The element type, bias and epilogue as ``run`` parameters (none for the defaults: u8 x s8, no bias,
        no epilogue)."""
        rq = self.requantize
        return {**({"dtype": self.dtype} if self.dtype != "uint8" else {}),
                **({"bias": True} if self.bias else {}),
                **({"epilogue": self.epilogue} if self.epilogue else {}),
                **(requantize_params(rq) if rq else {}),
                **({"pad_value": self.pad_value} if self.pad_value else {}),
                **({"instruction": self.instruction} if self.instruction else {})}


def requantize_params(rq: cpu_epilogue.Requantize | cpu_epilogue.ShiftClip) -> dict[str, str | int]:
    """A requantizing epilogue as ``run`` parameters: ``epilogue=requantize`` with ``ZP``, ``LO``, ``HI``
    (by a float scale), or ``epilogue=shift`` with ``shift``, ``LO``, ``HI``."""
    if isinstance(rq, cpu_epilogue.Requantize):
        return {"epilogue": "requantize", "ZP": rq.zero_point, "LO": rq.lo, "HI": rq.hi}
    return {"epilogue": "shift", "shift": rq.shift, "LO": rq.lo, "HI": rq.hi}


#: u8 data x s8 weights, no epilogue, no bias: what a layer runs as unless told otherwise
DEFAULT_OPTIONS = CpuOptions()


def op_of(layer: Layer, options: CpuOptions = DEFAULT_OPTIONS) -> str:
    """The CPU's operator of ``layer``: ``conv2d``, ``gemm``, ``gemm_t`` (transposed) or ``window``."""
    if isinstance(layer, cpu.Window):
        return "window"
    return "gemm_t" if options.transposed and isinstance(layer, GemmShape) else layers.op_of(layer)


def params(layer: Layer) -> dict[str, object]:
    """``layer`` as the report's parameters: a window's sizes, channels, kernel, stride, dilation and kind,
    else ``tandem.flows.layers.params``."""
    if isinstance(layer, cpu.Window):
        return {"N": layer.n, "sizes": list(layer.sizes), "IC": layer.ic, "OC": layer.oc, "K": layer.k,
                "S": layer.s, "DIL": layer.dil, "depthwise": layer.depthwise}
    return layers.params(layer)


def _check_bias(layer: Layer, options: CpuOptions) -> None:
    if options.bias and isinstance(layer, cpu.Window) and not layer.depthwise:
        raise ValueError("cpu: a bias is for conv2d, gemm, gemm_t and depthwise, not a window of TensorIR's "
                         "other kinds")


def schedule(layer: Layer, isa: str, tuning: cpu.CpuTuning, target: Target,
             options: CpuOptions = DEFAULT_OPTIONS) -> cpu.CpuSchedule:
    """UNIT's schedule of ``layer`` for ``isa`` on ``target``'s spec with ``tuning``'s breaking points."""
    _check_bias(layer, options)
    if isinstance(layer, cpu.Window):
        return cpu.conv(layer, isa, tuning, spec=target.spec, dtype=options.dtype,
                        instruction=options.instruction)
    if isinstance(layer, ConvShape):
        return cpu.conv2d(layer, isa, tuning, spec=target.spec, dtype=options.dtype,
                          instruction=options.instruction)
    kernel = cpu.gemm_t if options.transposed else cpu.gemm
    return kernel(layer.m, layer.n, layer.k, isa, tuning, spec=target.spec, dtype=options.dtype,
                  instruction=options.instruction)


def inputs(layer: Layer, seed: int | np.random.Generator, options: CpuOptions = DEFAULT_OPTIONS
           ) -> tuple[np.ndarray, ...]:
    """Seeded data and weights in the operator's plain layout (NCHW/OIHW, or [M, K]/[N, K]), each over its
    element type's whole range (``compiler.ops.cpu.DTYPES``: u8 and s8, s8 and s8, or int16), or uniform in
    [-1, 1) for float32; with a bias, then the bias, one per output channel (conv2d: OC; a GEMM: N) in the
    result's type: int32 in [-2^16, 2^16), or float32 in [-1, 1); with a requantization, then its float32
    scale per output channel, in [2^-16, 2^-10) (sums of a few hundred products land around the 8-bit range,
    some saturating)."""
    _check_bias(layer, options)
    rng = np.random.default_rng(seed)
    shapes = _plain_shapes(layer)
    arrays = tuple(rng.uniform(-1, 1, shape).astype(t) if np.dtype(t).kind == "f" else
                   rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, shape).astype(t)
                   for shape, t in zip(shapes, cpu.DTYPES[options.dtype], strict=True))
    if not options.bias:
        return arrays
    bias = random_bias(rng, layers.channels(layer), np.float32 if options.is_float else np.int32)
    if options.requantize is None or not options.requantize.scaled:
        return (*arrays, bias)
    return (*arrays, bias, rng.uniform(2.0**-16, 2.0**-10, layers.channels(layer)).astype(np.float32))


def _plain_shapes(layer: Layer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of ``layer``'s data and weights in the plain layouts."""
    if isinstance(layer, cpu.Window):
        taps = (layer.k,) * len(layer.sizes)
        return ((layer.n, layer.ic, *layer.sizes),
                (layer.oc, *taps) if layer.depthwise else (layer.oc, layer.ic, *taps))
    return layers.plain_shapes(layer)


def bias_axes(options: CpuOptions) -> tuple[int, ...]:
    """The axes of the packed output that say its element's channel, which index the packed bias (``pack``):
    conv2d's output ``[1, OC/y, OH, OW, y]`` and gemm's ``[M, N/y, y]`` read bias ``[OC/y, y]`` at axes 1 and
    -1; the transposed GEMM's ``[N, M/y, y]`` reads bias ``[N]`` at axis 0."""
    return (0,) if options.transposed else (1, -1)


def pack(layer: Layer, data: np.ndarray, weight: np.ndarray, pk: cpu.Packing = cpu.U8,
         *per_channel: np.ndarray, options: CpuOptions = DEFAULT_OPTIONS) -> tuple[np.ndarray, ...]:
    """The kernel's inputs in its packed layouts: data and weights, then the per-output-channel arrays given
    (the bias, a requantization's scale), each laid out as the output's channels are (``bias_axes``)."""
    return (*_pack(layer, data, weight, pk, options), *(_by_channel(v, pk, options) for v in per_channel))


def pack_data(layer: Layer, data: np.ndarray, pk: cpu.Packing = cpu.U8, options: CpuOptions = DEFAULT_OPTIONS
              ) -> np.ndarray:
    """``pack``'s first array alone: the data in the kernel's layout (no weights packed)."""
    weight = np.zeros((0, *_plain_shapes(layer)[1][1:]), cpu.DTYPES[options.dtype][1])
    return _pack(layer, data, weight, pk, options)[0]


def pack_weights(layer: Layer, weight: np.ndarray, pk: cpu.Packing = cpu.U8,
                 options: CpuOptions = DEFAULT_OPTIONS) -> np.ndarray:
    """``pack``'s second array alone: the weights in the kernel's layout (no data packed), which a kernel
    called again on new data with the same weights keeps."""
    data = np.zeros((0, *_plain_shapes(layer)[0][1:]), cpu.DTYPES[options.dtype][0])
    return _pack(layer, data, weight, pk, options)[1]


def pack_channels(values: np.ndarray, pk: cpu.Packing = cpu.U8, options: CpuOptions = DEFAULT_OPTIONS
                  ) -> np.ndarray:
    """``pack``'s per-output-channel arrays (a bias, a scale), each alone."""
    return _by_channel(values, pk, options)


def _by_channel(values: np.ndarray, pk: cpu.Packing, options: CpuOptions) -> np.ndarray:
    """One value per output channel, laid out as the packed output's channels (zeros fill the blocks)."""
    if len(bias_axes(options)) == 1:   # the output's rows are its channels: one value per row
        return np.ascontiguousarray(values)
    blocks = np.zeros(-(-values.size // pk.lanes) * pk.lanes, values.dtype)
    blocks[: values.size] = values
    return blocks.reshape(-1, pk.lanes)


def _pack(layer: Layer, data: np.ndarray, weight: np.ndarray, pk: cpu.Packing, options: CpuOptions
          ) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(layer, cpu.Window) and layer.depthwise:
        return cpu.pack_depthwise(data, weight, layer.k, layer.dil, pk)
    if isinstance(layer, cpu.Window) and layer.pixels:
        return cpu.pack_pixels(data, weight, layer, pk)
    if isinstance(layer, cpu.Window):
        return cpu.pack_window(data, weight, pk)
    if isinstance(layer, ConvShape):
        return cpu.pack_conv(data, weight, layer, pk, options.pad_value)
    return (cpu.pack_gemm_t if options.transposed else cpu.pack_gemm)(data, weight, pk)


def unpack(layer: Layer, out: np.ndarray, options: CpuOptions = DEFAULT_OPTIONS) -> np.ndarray:
    """The kernel's packed output in the operator's plain layout (padding dropped)."""
    if isinstance(layer, cpu.Window) and layer.pixels:
        return cpu.unpack_pixels(out, layer.out[-1])
    if isinstance(layer, cpu.Window):
        return cpu.unpack_window(out, layer.oc)
    if isinstance(layer, ConvShape):
        return cpu.unpack_conv(out, layer)
    return cpu.unpack_gemm_t(out, layer.m) if options.transposed else cpu.unpack_gemm(out, layer.n)


def reference(layer: Layer, data: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
              scale: np.ndarray | None = None, *, options: CpuOptions = DEFAULT_OPTIONS) -> np.ndarray:
    """numpy's result (its bias added and its epilogue, or its requantization by ``scale``, applied): int32
    for the integer types (the sum and the bias wrapped to int32 before the epilogue, as the kernel's int32
    arithmetic has them), exact (float64) for float32."""
    if isinstance(layer, cpu.Window):
        kernels, groups = (weight[:, None], layer.ic) if layer.depthwise else (weight, 1)
        out = conv_nd(data, kernels, layer.s, 0, layer.dil, groups)
    elif isinstance(layer, ConvShape) and options.pad_value:   # the border holds pad_value, not 0
        p = layer.p
        padded = np.pad(data, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=options.pad_value)
        out = layers.exact(replace(layer, h=layer.h + 2 * p, w=layer.w + 2 * p, p=0), padded, weight)
    else:
        out = layers.exact(layer, data, weight)
    return finish(layer, out, bias, scale, options)


def finish(layer: Layer, out: np.ndarray, bias: np.ndarray | None = None, scale: np.ndarray | None = None,
           options: CpuOptions = DEFAULT_OPTIONS) -> np.ndarray:
    """``reference``'s last steps on the exact sums ``out`` (plain layout): the bias added, wrapped to int32
    for the integer types, then the requantization or the epilogue."""
    if bias is not None:   # one per output channel: NCHW's C, or the GEMM's N
        out = out + bias.astype(out.dtype).reshape(_channel_shape(layer))
    if not options.is_float:   # the kernel sums (and adds the bias) in int32, wrapping before its epilogue
        out = out.astype(np.int32)
    if options.requantize is not None:
        by_channel = None if scale is None else np.asarray(scale, np.float32).reshape(_channel_shape(layer))
        out = options.requantize.reference(out, by_channel)
    if options.epilogue is not None:
        out = cpu_epilogue.EPILOGUES[options.epilogue][1](out)
    return out.astype(np.float64 if options.is_float else np.int32)


def _channel_shape(layer: Layer) -> tuple[int, ...]:
    """How a per-output-channel vector broadcasts over the plain output: NCHW's C, or the GEMM's N."""
    if isinstance(layer, cpu.Window):
        return (-1, *(1,) * len(layer.out))
    return (-1, 1, 1) if isinstance(layer, ConvShape) else (-1,)


def magnitude(layer: Layer, data: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
              options: CpuOptions = DEFAULT_OPTIONS) -> np.ndarray:
    """Each output's sum of its products' magnitudes and its bias's (float64, no epilogue): what ``check``
    scales a float result's rounding bound by."""
    return reference(layer, np.abs(data), np.abs(weight), None if bias is None else np.abs(bias),
                     options=replace(options, epilogue=None))


def check(layer: Layer, got: np.ndarray, want: np.ndarray, magnitude: np.ndarray | None = None,
          options: CpuOptions = DEFAULT_OPTIONS) -> Check:
    """``got`` against numpy's ``want``: integers bit for bit; float32 within K * 2^-23 * ``magnitude`` of
    the exact result, K the reduction's length, one more with a bias (each of its roundings, fused or not,
    errs by at most 2^-24 of a partial sum, and a ReLU or ReLU6 after it only narrows the difference)."""
    if not options.is_float:
        return exact(got, want)
    return within_bound(got, want, magnitude, layer.macs // max(1, want.size) + options.bias)


def fused_extents(layer: Layer, lanes: int = cpu.LANES, options: CpuOptions = DEFAULT_OPTIONS
                  ) -> tuple[int, ...]:
    """Extents of the data-parallel loops outside the unrolled tile (before tiling), with ``lanes`` output
    channels per instruction."""
    if isinstance(layer, cpu.Window) and layer.pixels:
        return (layer.n, layer.oc, *layer.out[:-1], -(-layer.out[-1] // lanes))
    if isinstance(layer, cpu.Window):
        return (layer.n, -(-layer.oc // lanes), *layer.out)
    if isinstance(layer, ConvShape):
        return (1, -(-layer.oc // lanes), layer.oh, layer.ow)
    m, n = layer.m, layer.n
    return (-(-m // lanes), n) if options.transposed else (-(-n // lanes), m)


def fits(layer: Layer, where: str, options: CpuOptions = DEFAULT_OPTIONS) -> None:
    """RunError unless each of ``layer``'s arrays (data, weights, output) has fewer than 2**31 elements (the
    compiler's int32 extents) and all of them, with the copies the run makes (packed inputs; the int32
    output, numpy's int64 reference and their float64 difference), fit in this machine's memory."""
    if isinstance(layer, cpu.Window):
        taps = layer.k ** len(layer.sizes)
        weights = layer.oc * taps * (1 if layer.depthwise else layer.ic)
        inputs_ = [layer.n * layer.ic * math.prod(layer.sizes), weights]
        output = layer.n * layer.oc * math.prod(layer.out)
    elif isinstance(layer, ConvShape):
        c = layer
        inputs_, output = [c.ic * c.h * c.w, c.oc * c.ic * c.k * c.k], max(c.oc * c.oh * c.ow, 0)
    else:
        inputs_, output = [layer.m * layer.k, layer.n * layer.k], layer.m * layer.n
    item = np.dtype(cpu.DTYPES[options.dtype][0]).itemsize
    if max(*inputs_, output) >= 2**31:
        raise RunError(f"{where} {params(layer)}: an array of {max(*inputs_, output):,} elements; the "
                       f"compiler's extents are int32, so each array must have fewer than 2**31")
    check_host_memory(2 * item * sum(inputs_) + 32 * output, where, params(layer))
