"""One inference of a network whose kernels are compiled and checked (tandem/network/run.py), timed end to
end as a user times onnxruntime's ``session.run``: the float input quantized, every step's host work (the
data moved to the kernel's type and layout, the outputs read back), every kernel call, the steps that run on
the host, and the output dequantized.

The inference is prepared once (``prepare_inference``), as the kernels are compiled once: each step gets a
runner that does only what depends on the input. A step in general is placed again on each inference
(tandem/network/place.py's ``place``, then its kernels, then its output joined in the graph's layout). These
CPU steps run without placing and keep their outputs in the layout the kernel wrote them in, so that the
next kernel reads them without a move through the graph's NCHW layout (issue 48, item 5):

- a conv2d or a depthwise conv with its requantization fused (``_window_runner``): its weights, bias and
  scales packed once, its padded data buffer kept (the border written once), its output kept blocked
  (``Blocked``: ``[1, C/L, H, W, L]``, 8 bits). Where its input is a kernel's blocked output in the blocks
  its data takes (``compiler.ops.cpu.data_lanes``), a conv with no padding reads that output as it is; a
  padded one whose input has no other reader has that input's conv recompiled to write into the inside of
  its padded data (a ``Writer``: ``compiler.passes.place_output``); otherwise its input is copied into the
  buffer (``compiler.ops.cpu.reblock`` from a blocked output, ``to_blocks`` from the graph's layout);
- the float input, where a conv alone reads it (the stem): quantized by one kernel straight into the inside
  of the conv's padded data (``input_quantizer``: ``compiler.ops.network.quantize_blocked``, onnxruntime's
  QuantizeLinear, the graph's ``input_quantization``), in one pass where the host took several;
- an element-wise kernel (a QLinearAdd, a power-of-two graph's add) whose inputs are all blocked alike, with
  no lanes past the channels (``_elementwise_runner``): run on the blocked arrays as they are, its output
  blocked alike; or whose inputs are 8-bit tensors in the graph's layout (a transformer's residual add,
  ``_plain_elementwise_runner``): compiled for their types, run on them flat;
- a Gemm or MatMul by constant weights (``_gemm_runner``): its weights, bias and scales packed once, its
  input moved to the multiplier's type by a kernel (``byte_mover``: ``compiler.ops.network.moved_bytes``,
  parallel, bound to the arrays it last moved), its output in the graph's layout (a GEMM's rows are the
  graph's);
- a MatMul of two activations (attention's, ``_heads_runner``): one GEMM kernel for every head, on arrays
  kept for all heads (the data moved, the second operand packed, ``compiler.ops.cpu.pack_columns``, and
  its bias corrections summed, each in one pass over all heads), its output in the graph's layout;
- a max pool of a blocked input (``_max_pool_runner``): ``compiler.ops.network.max_pool_blocked``, which
  pads by clamping its taps, no padded copy; a global average pool of one (``_mean_runner``):
  ``scaled_mean_blocked`` or ``rounded_mean_blocked``;
- a row-wise kernel of one activation (``_rows_runner``: the power-of-two graph's softmax and layer norm): its
  constants bound once, its input copied into a kept array;
- a host layer computed by its table of results (``_table_runner``: an unfolded BatchNormalization, a GELU)
  on a blocked input: ``compiler.ops.network.lookup_blocked``, its output blocked alike; one table on an
  input in the graph's layout (a transformer's GELU, its Mul by 1/sqrt(d); ``_flat_table_runner``):
  ``network.lookup``, its int32 table's lookups vectorized as dword gathers; a table that maps every value
  to itself (a Mul by 2^-k whose output exponent is its input's plus k): its input handed on
  (``_alias_runner``).

Every other step reads its inputs in the graph's layout (a blocked tensor is unpacked once, when first read
so). Each runner is checked when it is prepared: on the checked run's input, its output equals the step's
placement run, bit for bit, else the step keeps the placement run (``PreparedInference.general`` says why).

    inference = prepare_inference(q, target, plan, kernels, inputs)   # kernels: per step, its Prepared
    integers, reals = inference(inputs)
    result = time_inference(q, target, plan, kernels, inputs)
    result.seconds, result.output
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler.backend import aligned as aligned_arrays
from compiler.backend.aligned import aligned
from compiler.backend.llvm import build
from compiler.ops import cpu as cpu_ops
from compiler.ops import network
from compiler.ops.nn import ConvShape
from compiler.passes.place_output import place_output
from compiler.target import Target
from tandem.flows import cpu as cpu_flow
from tandem.flows import cpu_layers
from tandem.flows.flow import Routed, RunError
from tandem.flows.run import Prepared, prepare
from tandem.network.host_kernels import (
    byte_mover,
    column_packer,
    flat_lookup,
    input_quantizer,
    plain_quantizer,
    rebinding,
    view_mover,
)
from tandem.network.place import data_offset, moved_data, place
from tandem.network.quantized import QuantizedGraph, view_of
from tandem.network.steps import Placed, Placement, Step

#: at least this many timed inferences, and at least ``min_time`` seconds of them (after one warm-up)
MIN_RUNS = 5


@dataclass(frozen=True)
class Blocked:
    """A tensor as a CPU kernel wrote it: ``array`` ``[N, C/L, *sizes, L]`` (channel ``b * L + j`` at block
    ``b``, lane ``j``; lanes past ``channels`` hold anything), each value in the kernel's wider integer;
    ``dtype`` the graph tensor's type."""

    array: np.ndarray
    channels: int
    dtype: np.dtype

    def plain(self) -> np.ndarray:
        """The tensor in the graph's layout ``[N, C, *sizes]`` and type."""
        return cpu_ops.unpack_window(self.array, self.channels).astype(self.dtype)


class Tensors:
    """An inference's tensors by name: in the graph's layout (``plain``), or blocked as a kernel wrote them
    (``blocked``), unpacked when a step first reads them plain (``read``, ``need``); a float graph input
    (``floats``) that a runner quantizes itself is quantized by ``quantize`` if a step reads it plain."""

    def __init__(self, plain: Mapping[str, np.ndarray], floats: Mapping[str, np.ndarray] | None = None,
                 quantize: Callable[[str, np.ndarray], np.ndarray] | None = None) -> None:
        self.plain: dict[str, np.ndarray] = dict(plain)
        self.blocked: dict[str, Blocked] = {}
        #: the float graph inputs as given (a runner that quantizes its input itself reads it here)
        self.floats: dict[str, np.ndarray] = dict(floats or {})
        self.quantize = quantize
        #: while the inference is prepared: how many steps read each tensor, and the kernels' outputs that
        #: can move into their one reader's padded data (``_window_runner``'s ``Writer``)
        self.readers: dict[str, int] = {}
        self.writers: dict[str, Writer] = {}

    def read(self, name: str) -> np.ndarray:
        if name not in self.plain:
            self.plain[name] = self.blocked[name].plain() if name in self.blocked else \
                self.quantize(name, self.floats[name])   # (a runner's quantizer did not take the array)
        return self.plain[name]

    def need(self, names: Sequence[str]) -> None:
        """Every blocked tensor of ``names`` also in the graph's layout."""
        for name in names:
            if name in self.blocked:
                self.read(name)


Runner = Callable[[Tensors], None]


@dataclass
class Writer:
    """A conv's runner whose output can move into the padded data of the one step that reads it: ``into``
    recompiles its kernel to write there (``compiler.passes.place_output``) and returns the output's new
    place, or None where the buffer does not fit; ``run`` is the runner."""

    run: Runner
    into: Callable[[np.ndarray], Blocked | None]


@dataclass(frozen=True)
class PreparedInference:
    """A network's inference with a runner per step (see the module docstring); ``general`` says, for each
    step that is placed on every inference, why it is (None: it has a runner of its own). The runners write
    into arrays they keep, so one inference runs at a time (not from two threads at once); what a call
    returns is its own."""

    q: QuantizedGraph
    runners: tuple[Runner, ...]
    general: tuple[str | None, ...] = field(repr=False)
    #: the graph inputs whose one reader's runner quantizes them itself (``input_quantizer``)
    quantized_by_runner: frozenset[str] = frozenset()
    #: the other inputs' kernels that quantize them (``plain_quantizer``; None for an array they do not take)
    quantizers: Mapping[str, Callable[[np.ndarray], np.ndarray | None]] = field(default_factory=dict)

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The network's integer output on the float ``inputs``, and that output dequantized."""
        q, plain = self.q, {}
        for name in q.graph.inputs:
            if name not in self.quantized_by_runner:
                quantize = self.quantizers.get(name)
                value = quantize(inputs[name]) if quantize is not None else None
                plain[name] = q.quantize_input(name, inputs[name]) if value is None else value
        tensors = Tensors(plain, inputs, q.quantize_input)
        for run in self.runners:
            run(tensors)
        output = np.array(tensors.read(q.graph.output))   # (a runner's kept array is written again)
        return output, q.dequantize(q.graph.output, output)


def prepare_inference(q: QuantizedGraph, target: Target, plan: Sequence[Step],
                      kernels: Sequence[Sequence[Prepared] | None], inputs: Mapping[str, np.ndarray]
                      ) -> PreparedInference:
    """The inference of ``plan`` (``kernels[i]``: step ``plan[i]``'s compiled kernels, in the order its
    placement runs them; None: the step runs on the host, as the integer graph's layers), each step's runner
    built and checked on one inference of ``inputs``."""
    tensors = Tensors({name: q.quantize_input(name, inputs[name]) for name in q.graph.inputs}, inputs)
    for step in plan:
        for name in set(step.inputs):
            tensors.readers[name] = tensors.readers.get(name, 0) + 1
    tensors.readers[q.graph.output] = tensors.readers.get(q.graph.output, 0) + 1   # read at the end
    runners, general = [], []
    threads = max((getattr(_job(k), "threads", 1) for ks in kernels if ks for k in ks), default=1)
    for step, prepared in zip(plan, kernels, strict=True):
        placed = _placed_runner(step, q, target, prepared)
        placement = placed(tensors)
        if placement is None:
            table = _table_runner(step, q, target, threads, tensors)
            if table is not None and _agrees(table, step, tensors, tensors.plain.pop(step.output)):
                runners.append(table)
                general.append(None)
                continue
            view = _view_runner(step, tensors)
            runners.append(view or placed)
            general.append("it runs on the host" + (": a view of its input" if view else ""))
            continue
        want = tensors.plain.pop(step.output)
        try:
            runner, why = _own_runner(step, q, target, placement, prepared, tensors, want, threads)
        except RunError as exc:   # a kernel of its own it could not compile: placed as before
            runner, why = None, f"its own runner's kernel was refused: {exc}"
        if runner is not None:
            if _agrees(runner, step, tensors, want):
                runners.append(runner)
                general.append(None)
                if isinstance(getattr(runner, "writer", None), Writer):
                    tensors.writers[step.output] = runner.writer
                continue
            why = "its own runner's output differed from its placement's"
        tensors.plain[step.output] = want
        runners.append(placed)
        general.append(why)
    quantizing = frozenset(getattr(run, "quantizes", None) for run in runners) - {None}
    quantizers = {}
    for name in set(q.graph.inputs) - quantizing:
        quantize, x = plain_quantizer(q, name, inputs[name], target, threads), inputs[name]
        if quantize is not None and np.array_equal(quantize(x), q.quantize_input(name, x)):
            quantizers[name] = quantize
    return PreparedInference(q, tuple(runners), tuple(general), quantizing, quantizers)


def _placed_runner(step: Step, q: QuantizedGraph, target: Target, prepared: Sequence[Prepared] | None
                   ) -> Callable[[Tensors], Placement | None]:
    """The step as placed on each inference: its inputs read in the graph's layout, ``place``d, its kernels
    run and their outputs joined (``prepared`` None: the integer graph's layers, on the host); returns the
    placement (None on the host)."""
    reads = [name for layer in step.layers for name in layer.inputs if name]

    def run(tensors: Tensors) -> Placement | None:
        tensors.need(reads)
        values = tensors.plain
        if prepared is None:
            for layer in step.layers:
                q.write_outputs(layer, values)
            return None
        placement = place(step, q, values, target)
        outs: list[np.ndarray] = []
        for part, kernel in zip(placement.parts, prepared, strict=True):
            arrays = part.inputs(outs) if callable(part.inputs) else part.inputs
            outs.append(part.unpack(kernel.output(arrays)))
        values[step.output] = placement.join(outs)
        return placement
    return run


def _agrees(runner: Runner, step: Step, tensors: Tensors, want: np.ndarray) -> bool:
    """Whether ``runner`` writes the step's output ``want`` (its placement's, in the graph's layout), bit for
    bit: its output is then left in ``tensors``; where not, ``want`` is."""
    runner(tensors)
    got = tensors.read(step.output)
    if got.dtype == want.dtype and np.array_equal(got, want):
        return True
    tensors.blocked.pop(step.output, None)
    tensors.plain[step.output] = want
    return False


def _table_runner(step: Step, q: QuantizedGraph, target: Target, threads: int, tensors: Tensors
                  ) -> Runner | None:
    """A host layer computed by its table of results (``QuantizedGraph.tables``: an element-wise float layer
    of one 8-bit input, a row per channel for an unfolded BatchNormalization) on its input blocked as a
    kernel wrote it: ``compiler.ops.network.lookup_blocked`` (compiled here, on ``threads``) looks each value
    up in its channel's row, the output blocked alike (no unpacking); None for another step."""
    layer = step.layers[0]
    table = getattr(q, "tables", {}).get(layer.name) if len(step.layers) == 1 else None
    if table is not None and _identity(table, tensors, layer.inputs[0]):
        return _alias_runner(step, tensors)
    if table is not None and table.ndim == 1 and layer.inputs[0] not in tensors.blocked:
        return _flat_table_runner(step, table, target, threads, tensors)
    source = tensors.blocked.get(layer.inputs[0]) if table is not None else None
    # (the kernel's type must be the graph tensor's, whose least value the table's first entry is)
    if source is None or source.array.ndim != 5 or source.array.dtype != np.dtype(source.dtype):
        return None
    _, blocks, h, w, lanes = source.array.shape
    rows = np.zeros((blocks * lanes, table.shape[-1]), table.dtype)   # lanes past the channels: row 0s
    rows[:source.channels] = table   # (one row for every channel where the table is one row)
    operand = source.array.reshape(source.array.shape[1:])
    try:
        look = prepare(network.user_op("lookup_blocked"), target,
                       {"B": blocks, "H": h, "W": w, "L": lanes, "N": table.shape[-1],
                        "T": operand.dtype.name, "TO": table.dtype.name, "threads": threads},
                       inputs=[operand, rows])
    except RunError:   # (a type the operator does not take): the layer stays on the host
        return None
    result = _output_of(look)
    call = look.compiled[1].bind(operand, rows, result)
    output = Blocked(result[None], source.channels, table.dtype)

    def run(tensors: Tensors) -> None:
        call()
        tensors.blocked[step.output] = output
    return run


def _identity(table: np.ndarray, tensors: Tensors, name: str) -> bool:
    """Whether ``table`` (``_table_runner``'s) maps every value of input ``name`` to itself, in its type: a
    power-of-two graph's Mul by 2^-k whose output exponent is its input's plus k (attention's 1/sqrt(64))."""
    source = tensors.blocked.get(name)
    dtype = np.dtype(source.dtype) if source is not None else tensors.read(name).dtype
    if dtype != table.dtype or dtype not in (np.int8, np.uint8) or table.shape[-1] != 256:
        return False
    same = bool(np.all(table == np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1)))
    return same and (source is None or source.array.dtype == dtype)


def _alias_runner(step: Step, tensors: Tensors) -> Runner:
    """A step whose output is its input, value for value (``_identity``): the input's array, not a copy."""
    name = step.layers[0].inputs[0]

    def run(tensors: Tensors) -> None:
        if name in tensors.blocked:
            tensors.blocked[step.output] = tensors.blocked[name]
        else:
            tensors.plain[step.output] = tensors.read(name)
    return run


def _flat_table_runner(step: Step, table: np.ndarray, target: Target, threads: int, tensors: Tensors
                       ) -> Runner | None:
    """A host layer of one table of results on an 8-bit input in the graph's layout, looked up by a kernel
    (``host_kernels.flat_lookup``); None where there is no such kernel."""
    name = step.layers[0].inputs[0]
    look = flat_lookup(tensors.read(name), table, tensors.plain[step.output].shape, target, threads)
    if look is None:
        return None

    def run(tensors: Tensors) -> None:
        tensors.plain[step.output] = look(tensors.read(name))
    return run


#: the host's layers that may only reshape, transpose or select from their input (``_view_runner``)
RESHAPES = ("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Gather")   # (``quantized.view_of``)


def _view_runner(step: Step, tensors: Tensors) -> Runner | None:
    """A host step that only reshapes, transposes or, by one constant index, selects from its one input (a
    Gather: PyTorch's export of attention splits the packed query, key and value so), its output (just
    computed by the integer graph) equal to the input's values so viewed: a view of the input on each
    inference, one array while the input is (a reshape numpy cannot view: copied into a kept array); None
    for another step."""
    layer = step.layers[0]
    if len(step.layers) != 1 or layer.op not in RESHAPES or len(layer.outputs) != 1:
        return None
    name, out = layer.inputs[0], tensors.plain[step.output]
    x = tensors.read(name)
    view = view_of(layer, x.ndim, out.shape)
    if view is None or x.dtype != out.dtype or layer.op != "Gather" and x.size != out.size:
        return None
    seen = view(x) if layer.op in ("Transpose", "Gather") else x.reshape(out.shape)   # (a copy where it must)
    if seen.shape != out.shape or not np.array_equal(seen, out):
        return None
    kept = np.empty(out.shape, out.dtype)
    last: list = [None, None]   # the last input and its view

    def run(tensors: Tensors) -> None:
        x = tensors.read(name)
        if x is not last[0]:
            try:
                last[:] = x, view(x)
            except ValueError:   # (a transposed view's merged axes: copied into kept)
                last[:] = x, kept
        if last[1] is kept:
            np.copyto(kept.reshape(x.shape), x)
        tensors.plain[step.output] = last[1]
    return run


def _own_runner(step: Step, q: QuantizedGraph, target: Target, placement: Placement,
                prepared: Sequence[Prepared], tensors: Tensors, want: np.ndarray, threads: int
                ) -> tuple[Runner | None, str]:
    """A runner of the step's own that needs no placement (the module docstring's kinds), built from its
    placement on this inference's ``tensors`` (``threads``: the inference's); or None and why not."""
    if step.op == "MatMul" and step.layers[0].name not in q.weights:
        return _heads_runner(step, q, placement, prepared, target, tensors, want, threads)
    if len(placement.parts) != 1:
        return None, f"it runs as {len(placement.parts)} kernels"
    part, kernel = placement.parts[0], prepared[0]
    job = _job(kernel)
    conv = isinstance(job, cpu_flow.CpuJob) and isinstance(job.layer, ConvShape) and part.op == "conv2d"
    if conv or isinstance(job, cpu_flow.WindowJob) and job.job.layer.depthwise:
        return _window_runner(step, q, part.inputs, kernel, target, tensors, want.dtype)
    if isinstance(job, cpu_flow.CpuJob) and part.op == "gemm" and step.layers[0].name in q.weights:
        return _gemm_runner(step, q, part.inputs, kernel, target, tensors, want)
    if isinstance(job, cpu_flow.CpuUserJob) and cpu_flow.elementwise(job.user.output):
        return _elementwise_runner(step, part, kernel, target, tensors, want.dtype)
    if step.op == "GlobalAveragePool" and part.label in ("scaled_mean", "rounded_mean"):
        return _mean_runner(step, part, job.threads, target, tensors, want)
    if step.op == "MaxPool" and isinstance(job, cpu_flow.CpuUserJob):
        return _max_pool_runner(step, part.params, job.threads, target, tensors, want.dtype)
    if part.label in ("softmax_int8", "layer_norm_int8") and isinstance(job, cpu_flow.CpuUserJob):
        return _rows_runner(step, part, kernel, want)
    return None, f"no runner of its own for a {part.label or part.op}"


def _job(kernel: Prepared) -> object:
    """The job of the flow that compiled ``kernel`` (a target's flow routes each operator to its own)."""
    return kernel.job.job if isinstance(kernel.job, Routed) else kernel.job


def _window_runner(step: Step, q: QuantizedGraph, arrays: list[np.ndarray], kernel: Prepared,
                   target: Target, tensors: Tensors, dtype: np.dtype) -> tuple[Runner | None, str]:
    """A conv2d, or a depthwise conv, whose requantization is fused (its inputs: data, weights, bias, and a
    scale where it requantizes by one), run on a padded data buffer it keeps, its output blocked."""
    job = _job(kernel)
    if isinstance(job, cpu_flow.WindowJob):   # the data padded by the contraction's layout
        job, arrays = job.job, kernel.job.flow.problems(job, arrays)[0]
    name = step.inputs[0]
    data, weight, *per_channel = arrays
    x = tensors.read(name)
    if not per_channel:
        return None, "its requantization is not fused"
    pk, options, layer = job.packing, job.options, job.layer
    packed = aligned(cpu_layers.pack_data(layer, data, pk, options))   # the buffer: its border written once
    pad, group = (packed.shape[2] - x.shape[2]) // 2, packed.shape[-1]
    inside = packed[(slice(None),) * 2 + tuple(slice(pad, pad + s) for s in x.shape[2:])]
    margin = (data.shape[2] - x.shape[2]) // 2   # what the data holds of the padding
    _, offset = data_offset(q, name, True)
    moved = moved_data(x, offset, data.dtype)
    if data.shape[:2] != x.shape[:2] or not np.array_equal(
            data[(slice(None),) * 2 + tuple(slice(margin, margin + s) for s in x.shape[2:])], moved):
        return None, "its data is not its input moved to uint8 by the offset"
    weights = aligned(cpu_layers.pack_weights(layer, weight, pk, options))
    channels = [aligned(cpu_layers.pack_channels(v, pk, options)) for v in per_channel]
    source = tensors.blocked.get(name)
    same = source is not None and source.array.dtype == packed.dtype and offset == 0
    writer = tensors.writers.get(name) if same and tensors.readers.get(name) == 1 else None
    if same and source.array.shape == packed.shape:   # no border, the same blocks: the output before as is
        data, reads = source.array, None
    elif writer is not None and writer.into(packed) is not None:   # the step before writes our data
        writer.run(tensors)
        data, reads = packed, None
    else:
        data, reads = packed, name
    held = [Blocked(_output_of(kernel), layer.oc, dtype)]   # the output, and the call that writes it
    held.append(kernel.compiled[1].bind(data, weights, *channels, held[0].array))
    quantize = input_quantizer(q, reads, x.shape, packed, pad, offset, target, kernel.compiled[1].threads) \
        if reads in q.graph.inputs and tensors.readers.get(reads) == 1 else None

    def run(tensors: Tensors) -> None:
        if reads is not None and not (quantize is not None and quantize(tensors.floats.get(reads))):
            source = tensors.blocked.get(reads)
            if source is not None and source.array.shape[-1] % group == 0:
                cpu_ops.reblock(source.array, inside, offset)
            else:
                cpu_ops.to_blocks(inside, moved_data(tensors.read(reads), offset, packed.dtype), group)
        held[1]()
        tensors.blocked[step.output] = held[0]

    def into(buffer: np.ndarray) -> Blocked | None:
        """Recompile the kernel to write its output inside ``buffer`` (the next conv's padded data)."""
        func, out = kernel.compiled[0], held[0].array
        border = (buffer.shape[2] - out.shape[2]) // 2
        fits = buffer.dtype == out.dtype and buffer.shape[:2] == out.shape[:2] and border >= 0 and \
            buffer.shape[-1] == out.shape[-1] and buffer.shape[3] >= out.shape[3] + 2 * border
        if not fits:
            return None
        placed = place_output(func, buffer.shape, (0, 0, border, border, 0))
        inner = buffer[:, :, border:border + out.shape[2], border:border + out.shape[3]]
        held[0] = Blocked(inner, layer.oc, dtype)
        held[1] = build(placed, threads=kernel.compiled[1].threads).bind(data, weights, *channels, buffer)
        return held[0]
    run.writer = Writer(run, into)
    run.quantizes = reads if quantize is not None else None
    return run, ""


def _gemm_runner(step: Step, q: QuantizedGraph, arrays: list[np.ndarray], kernel: Prepared, target: Target,
                 tensors: Tensors, want: np.ndarray) -> tuple[Runner | None, str]:
    """A Gemm or MatMul by constant weights whose requantization is fused: its weights, bias and scales
    packed once, its input moved and packed on each inference, its output in the graph's layout (a GEMM's
    rows are the graph's)."""
    job: cpu_flow.CpuJob = _job(kernel)
    name = step.inputs[0]
    data, weight, *per_channel = arrays
    x = tensors.read(name)
    _, offset = data_offset(q, name, True)
    if not per_channel or x.size != data.size or not np.array_equal(
            moved_data(x, offset, data.dtype).reshape(data.shape), data):
        return None, "its data is not its input moved to uint8 by the offset"
    pk, options, layer = job.packing, job.options, job.layer
    weights = aligned(cpu_layers.pack_weights(layer, weight, pk, options))
    channels = [aligned(cpu_layers.pack_channels(v, pk, options)) for v in per_channel]
    call, result, rows = kernel.compiled[1], _output_of(kernel), data.shape
    packed = aligned(cpu_layers.pack_data(layer, data, pk, options))
    kept = packed.shape == rows   # the rows as they are: moved into one kept array, the kernel bound once
    bound = call.bind(packed, weights, *channels, result) if kept else None
    move = byte_mover(packed.size, offset, x.dtype, packed.dtype, target, call.threads)
    view = cpu_layers.unpack(layer, result, options).reshape(want.shape).astype(want.dtype, copy=False)
    view = view if np.shares_memory(view, result) else None   # the output a view of the kernel's: kept

    def run(tensors: Tensors) -> None:
        if kept:
            move(tensors.read(name), packed)
            bound()
        else:
            moved = moved_data(tensors.read(name), offset, data.dtype).reshape(rows)
            call(cpu_layers.pack_data(layer, moved, pk, options), weights, *channels, result)
        out = view if view is not None else \
            cpu_layers.unpack(layer, result, options).reshape(want.shape).astype(want.dtype, copy=False)
        tensors.plain[step.output] = out
    return run, ""


def _heads_runner(step: Step, q: QuantizedGraph, placement: Placement, prepared: Sequence[Prepared],
                  target: Target, tensors: Tensors, want: np.ndarray, threads: int
                  ) -> tuple[Runner | None, str]:
    """A MatMul of two activations (attention's, one GEMM per head), its requantization fused: one kernel
    for every head, called on each head's slice of arrays kept for all heads. On each inference the data of
    every head is moved to uint8 in one pass, the second operand packed as the kernel's weights in one pass
    (into a zero-padded copy first where K or N do not fill the kernel's blocks: ViT's 197 tokens) and each
    head's bias correction (``-(zero + offset) * sum(weights)``, ``place._data_operand``) summed in one; the
    heads' outputs are one array, the graph's tensor a view of it."""
    parts, layer = placement.parts, step.layers[0]
    jobs = [_job(kernel) for kernel in prepared]
    job = jobs[0]
    if not all(isinstance(j, cpu_flow.CpuJob) and p.op == "gemm" for j, p in zip(jobs, parts, strict=True)):
        return None, "its parts are not all GEMMs on this CPU"
    if any(part.params != parts[0].params for part in parts) or len(parts[0].inputs) < 3:
        return None, "its heads' GEMMs differ, or their requantization is not fused"
    pk, options, shape = job.packing, job.options, job.layer
    m, n, k = shape.m, shape.n, shape.k
    heads, blocks, groups = len(parts), -(-n // pk.lanes), -(-k // pk.group)
    if options.transposed:
        return None, "its heads' GEMMs are transposed (few columns)"
    b = tensors.read(layer.inputs[1])
    zero, offset = data_offset(q, layer.inputs[0], True)
    moved = -(zero + offset)
    sums = b.reshape(heads, k, n).astype(np.int64).sum(axis=1)
    base = np.stack([part.inputs[2].reshape(-1)[:n] for part in parts]) - moved * sums
    if np.any(base != base[0]):
        return None, "its heads' biases differ beyond their offset corrections"
    data = np.zeros((heads, m, groups * pk.group), parts[0].inputs[0].dtype)
    weights = np.empty((heads, blocks, groups, pk.lanes, pk.group), parts[0].inputs[1].dtype)
    # the keys as columns [heads, N, K] where K runs contiguous (a transposed view's words: moved as such)
    by_columns = np.swapaxes(b.reshape(heads, k, n), -1, -2).strides[-1] == b.itemsize
    padded = None if (n % pk.lanes, k % pk.group) == (0, 0) else np.zeros(
        (heads, blocks * pk.lanes, groups * pk.group) if by_columns else
        (heads, groups * pk.group, blocks * pk.lanes), weights.dtype)
    inside = None if padded is None else padded[:, :n, :k] if by_columns else padded[:, :k, :n]
    biases = np.zeros((heads, blocks * pk.lanes), np.int32)
    biases[:, :n] = base[0]   # (each inference adds the columns' sums where the data moved)
    scales = [cpu_layers.pack_channels(v, pk, options) for v in parts[0].inputs[3:]]
    func, call = prepared[0].compiled
    out = np.empty((heads, *func.params[-1].shape), func.params[-1].dtype.numpy)
    if out.dtype != want.dtype or out[0].size != m * blocks * pk.lanes:
        return None, f"its GEMMs write {out.dtype} [{m}, {blocks * pk.lanes}], not the step's {want.dtype}"
    each = call.bind_each([(data[h], weights[h], biases[h].reshape(blocks, pk.lanes), *scales, out[h])
                           for h in range(heads)], threads)   # (the heads shared among the threads)
    total = np.int16 if k * 128 < 2 ** 15 else np.int64   # the columns' sums: the narrowest that holds them
    result = out.reshape(heads, m, -1)[..., :n].reshape(want.shape)
    rows = data[..., :k]   # (all of data where K fills the groups: then moved by a kernel)
    first = tensors.read(layer.inputs[0]).dtype
    move = byte_mover(rows.size, offset, first, data.dtype, target, threads)
    pack = column_packer((heads, k, n), weights, biases, base[0], moved, target, threads)
    move_view = view_mover(data, offset, target, threads) if groups * pk.group == k else None

    def run(tensors: Tensors) -> None:
        x, w = tensors.read(layer.inputs[0]), tensors.read(layer.inputs[1]).reshape(heads, k, n)
        if move_view is None or not move_view(x.reshape(heads, m, k)):
            move(x, rows)
        packed = pack(w)
        if not packed:
            if padded is None:
                cpu_ops.pack_columns(w, weights)
            else:
                np.copyto(inside, np.swapaxes(w, -1, -2) if by_columns else w)
                cpu_ops.pack_columns(np.swapaxes(padded, -1, -2) if by_columns else padded, weights)
        if moved and not (packed and by_columns):   # (the packer sums contiguous columns; numpy the others)
            sums = np.swapaxes(w, -1, -2).sum(axis=-1, dtype=total) if by_columns else \
                w.sum(axis=1, dtype=total)
            np.add(base[0], np.multiply(sums, moved, dtype=np.int64), out=biases[:, :n], casting="unsafe")
        each()
        tensors.plain[step.output] = result
    return run, ""


def _rows_runner(step: Step, part: Placed, kernel: Prepared, want: np.ndarray) -> tuple[Runner | None, str]:
    """A row-wise kernel of one activation (``network.softmax_int8``, ``layer_norm_int8``; its other inputs
    constants): run on its input where that is a contiguous array of the kernel's type (bound to it while
    it comes again, ``host_kernels.rebinding``), else on a copy in a kept array; its output the graph's
    tensor reshaped."""
    x, *constants = part.inputs
    data, out = aligned_arrays.empty(x.shape, x.dtype), _output_of(kernel)
    copied, on_input = kernel.compiled[1].bind(data, *constants, out), rebinding(kernel.compiled[1])
    name, result = step.inputs[0], out.reshape(want.shape)   # (one array each time: its readers stay bound)

    def run(tensors: Tensors) -> None:
        x = tensors.read(name)
        if x.flags.c_contiguous and x.dtype == data.dtype and x.size == data.size:
            on_input((x,), lambda: (x.reshape(data.shape), *constants, out))
        else:
            np.copyto(data, x.reshape(data.shape))
            copied()
        tensors.plain[step.output] = result
    return run, ""


def _output_of(kernel: Prepared) -> np.ndarray:
    """An array for ``kernel``'s output, which its runner writes on every inference: a step's output lives
    until the inference's end, and the next inference writes it again (what an inference returns is a copy,
    in the graph's layout)."""
    out = kernel.compiled[0].params[-1]
    return aligned_arrays.empty(out.shape, out.dtype.numpy)


def _operand(source: np.ndarray, shape: tuple[int, ...], dtype: np.dtype
             ) -> tuple[np.ndarray, Callable[[], None]]:
    """``source`` (the array a kernel before this one writes on every inference: its runner keeps it) as an
    operand of ``shape`` and ``dtype``: a view of it, or, in another integer type (a power-of-two conv's
    int32 beside an add's int8), an array of the kernel's type and the copy that refreshes it before each
    call."""
    if source.dtype == dtype:
        return source.reshape(shape), lambda: None
    into = aligned_arrays.empty(shape, dtype)
    return into, lambda: np.copyto(into, source.reshape(shape))


def _max_pool_runner(step: Step, params: dict, threads: int, target: Target, tensors: Tensors,
                     dtype: np.dtype) -> tuple[Runner | None, str]:
    """A max pool of a kernel's blocked output: ``max_pool_blocked`` (compiled here) on it as it is, no padded
    copy and no offset (the maximum commutes with one); its output blocked alike."""
    name = step.inputs[0]
    source = tensors.blocked.get(name)
    if source is None:
        return None, "its input is not a kernel's blocked output"
    _, blocks, h, w, lanes = source.array.shape
    pad = (params["H"] - h) // 2   # the placement's input is padded on every side
    operand = source.array.reshape(source.array.shape[1:])
    pool = prepare(network.user_op("max_pool_blocked"), target,
                   {"B": blocks, "H": h, "W": w, "L": lanes, "K": params["K"], "S": params["S"], "P": pad,
                    "T": operand.dtype.name, "threads": threads}, inputs=[operand])
    result = _output_of(pool)
    call = pool.compiled[1].bind(operand, result)
    output = Blocked(result[None], source.channels, dtype)

    def run(tensors: Tensors) -> None:
        call()
        tensors.blocked[step.output] = output
    return run, ""


def _elementwise_runner(step: Step, part: Placed, kernel: Prepared, target: Target, tensors: Tensors,
                        dtype: np.dtype) -> tuple[Runner | None, str]:
    """An element-wise kernel on the step's inputs, each blocked alike by the kernels before it: the kernel
    runs on the blocked arrays (it reads element ``i`` of each where it writes element ``i``, whatever the
    layout; where the blocks hold lanes past the channels, the kernel compiled here for the blocks' size
    computes them too, as the lanes carry anything), its output blocked alike."""
    names, arrays = step.inputs, part.inputs
    sources = [tensors.blocked.get(name) for name in names]
    first = sources[0]
    if all(source is None for source in sources):
        return _plain_elementwise_runner(step, part, kernel, target, tensors, dtype)
    if first is None or any(s is None or s.array.shape != first.array.shape or s.channels != first.channels
                            for s in sources):
        return None, "its inputs are not blocked alike by the kernels before it"
    if len(arrays) != len(names) or any(
            not np.array_equal(a.ravel(), tensors.read(n).astype(a.dtype).ravel())
            for a, n in zip(arrays, names, strict=False)):
        return None, "its kernel reads other arrays than its inputs"
    _, blocks, *sizes, lanes = first.array.shape
    typed = _typed(_job(kernel).user.name, part.params, [s.array.dtype for s in sources])
    if blocks * lanes != first.channels or typed != part.params:   # over every lane, on the blocks' types
        every = {**typed, "C": blocks * lanes, "threads": _job(kernel).threads}
        kernel = prepare(kernel.op, target, every, inputs=[s.array.reshape(blocks * lanes, *sizes)
                                                           for s in sources])
    func, call = kernel.compiled
    params = func.params[:len(sources)]
    if any(s.array.size != math.prod(p.shape) for s, p in zip(sources, params, strict=True)):
        return None, "its kernel's operands are not the size of its inputs' blocks"
    result = _output_of(kernel)
    output = Blocked(result.reshape(first.array.shape), first.channels, dtype)
    operands, refreshes = zip(*(_operand(s.array, p.shape, p.dtype.numpy)
                                for s, p in zip(sources, params, strict=True)), strict=True)
    call_bound = call.bind(*operands, result)

    def run(tensors: Tensors) -> None:
        for refresh in refreshes:
            refresh()
        call_bound()
        tensors.blocked[step.output] = output
    return run, ""


def _plain_elementwise_runner(step: Step, part: Placed, kernel: Prepared, target: Target, tensors: Tensors,
                              dtype: np.dtype) -> tuple[Runner | None, str]:
    """An element-wise kernel on inputs in the graph's layout, 8-bit alike (a transformer's residual adds):
    compiled here for their types, run on them as they are (flat), its output the graph's tensor."""
    names = step.inputs
    xs = [tensors.read(name) for name in names]
    shape = xs[0].shape
    if len(part.inputs) != len(names) or any(x.shape != shape or x.dtype.itemsize != 1 for x in xs):
        return None, "its inputs are not 8-bit tensors of one shape"
    op = _job(kernel).user.name
    typed = _typed(op, part.params, [x.dtype for x in xs])
    if typed == part.params:
        return None, "its kernel takes no 8-bit inputs"
    sizes = tuple(a.shape for a in part.inputs)
    kernel = prepare(kernel.op, target, {**typed, "threads": _job(kernel).threads},
                     inputs=[x.reshape(size) for x, size in zip(xs, sizes, strict=True)])
    call, result = rebinding(kernel.compiled[1]), _output_of(kernel)
    output = result.reshape(shape)

    def run(tensors: Tensors) -> None:
        given = tuple(tensors.read(n) for n in names)
        call(given, lambda: (*(np.ascontiguousarray(x).reshape(size) for x, size in zip(given, sizes,
                                                                                     strict=True)), result))
        tensors.plain[step.output] = output.astype(dtype, copy=False)
    return run, ""


#: the element-wise operators that read (and write) 8-bit arrays: their type parameters, input by input, then
#: the output's (``compiler.ops.network``)
TYPED = {"qlinear_add": ("TA", "TB", "TO"), "quantized_add": ("TA", "TB")}


def _typed(op: str, params: dict, types: Sequence[np.dtype]) -> dict:
    """``params`` of element-wise operator ``op`` with its inputs' ``types``, and its output in the 8-bit type
    that holds its bounds, where it takes them (``TYPED``)."""
    keys = TYPED.get(op)
    if keys is None:
        return params
    typed = {**params, **{key: t.name for key, t in zip(keys, types, strict=False)}}
    if len(keys) > len(types):
        typed[keys[-1]] = network.narrow_type(params["LO"], params["HI"])
    return typed


def _mean_runner(step: Step, part: Placed, threads: int, target: Target, tensors: Tensors, want: np.ndarray
                 ) -> tuple[Runner | None, str]:
    """A global average pool of a blocked input: ``scaled_mean_blocked`` (a quantized model's, by its scale)
    or ``rounded_mean_blocked`` (a power-of-two graph's), compiled here, on it as it is, each block's lanes
    its channels in order; its small output in the graph's layout."""
    name = step.inputs[0]
    source = tensors.blocked.get(name)
    if source is None:
        return None, "its input is not a kernel's blocked output"
    _, blocks, h, w, lanes = source.array.shape
    operand = source.array.reshape(source.array.shape[1:])
    operands = [operand]
    params: dict = {"B": blocks, "H": h, "W": w, "L": lanes, "T": operand.dtype.name, "threads": threads}
    if part.label == "scaled_mean":
        scale = np.zeros(blocks * lanes, np.float32)
        scale[:source.channels] = part.inputs[1]
        operands.append(scale.reshape(blocks, lanes))
        params.update({k: part.params[k] for k in ("Z", "ZP", "LO", "HI")})
    mean = prepare(network.user_op(f"{part.label}_blocked"), target, params, inputs=operands)
    result = _output_of(mean)
    call = mean.compiled[1].bind(*operands, result)
    means, kept = result.reshape(-1)[:source.channels].reshape(want.shape), np.empty(want.shape, want.dtype)

    def run(tensors: Tensors) -> None:
        call()
        np.copyto(kept, means, casting="unsafe")   # (one array each time: its reader stays bound to it)
        tensors.plain[step.output] = kept
    return run, ""


@dataclass(frozen=True)
class Inference:
    """The median seconds of one inference over ``runs`` timed ones, the last one's integer output, and why
    each step is placed again on every inference (``PreparedInference.general``)."""

    seconds: float
    runs: int
    output: np.ndarray = field(repr=False)
    general: tuple[str | None, ...] = field(default=(), repr=False)


def time_inference(q: QuantizedGraph, target: Target, plan: Sequence[Step],
                   kernels: Sequence[Sequence[Prepared] | None], inputs: Mapping[str, np.ndarray],
                   min_time: float = 0.2) -> Inference:
    """The inference prepared (``prepare_inference``, not timed, as compiling is not), one warm-up (in which
    the runners compile what they compile for the layouts they first see: ``host_kernels.by_layout``),
    then at least ``MIN_RUNS`` and ``min_time`` seconds of them; the median."""
    inference = prepare_inference(q, target, plan, kernels, inputs)
    output, _ = inference(inputs)
    times: list[float] = []
    while len(times) < MIN_RUNS or sum(times) < min_time:
        start = time.perf_counter()
        output, _ = inference(inputs)
        times.append(time.perf_counter() - start)
    return Inference(float(np.median(times)), len(times), output, inference.general)
