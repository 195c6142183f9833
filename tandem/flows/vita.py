"""VITA's part of the one ``tandem run`` flow (tandem/flows/run.py): an int8 conv2d or GEMM scheduled for
VITA,
compiled, simulated on sim/vita and compared with numpy bit for bit.

Parameters besides the layer (conv2d: ``H W IC OC K S P`` and ``N`` images; gemm: ``M N K``):
``vthreads`` (virtual threads, 0 = none), the epilogue's ``relu`` (clip at 0 instead of -128), ``shift``
(default 8), ``bias`` (true: a third input, an int32 bias per output channel added before the shift) and
``clip`` ((lo, hi) within int8, instead of relu's or int8's bounds), ``tiling`` (a
``compiler.ops.vita.Tiling``, else the cost model's choice) and ``tune`` (> 0: compile and simulate the
``tune`` tilings that ``compiler.ops.vita.estimate_cycles`` ranks first, a tiling the model cannot tell from
an earlier one's mirror over the other thread axis counted once, and keep the fastest; timing does not
depend on the data). In the report:

- ``params``: the layer, ``vthreads``, the ``tiling`` used (rows, oc_block, ic_block, vthreads,
  vthread_axis), the config, and the ``tuned`` candidates measured (tiling, cycles);
- ``instructions`` counts the emitted instructions by name (each runs once: VITA has no branches), and
  ``scalar_fallback`` is 0 (VITA cannot run scalar code; a statement the passes cannot map is a compile
  error instead);
- ``utilization``: the GEMM core's busy cycles over all cycles ("gemm") and each unit's busy share;
- ``roofline_cycles``: the larger of the layer's multiply-adds at the GEMM core's peak and its compulsory
  DRAM traffic (input, weights, output once) at the DRAM bandwidth.

A layer is a ``ConvShape`` or a ``GemmShape`` (tandem/flows/layers.py); VITA's functions of one (schedule,
packing, reference, DRAM traffic) and the ``Epilogue`` are tandem/flows/vita_layers.py.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import isa
from compiler.backend.vita import VitaKernel, build_vita
from compiler.errors import LoweringError, ScheduleError
from compiler.lower import lower
from compiler.ops import contractions, network, reference, vita
from compiler.ops.nn import GemmShape
from compiler.passes import check_token_order
from compiler.passes.fuse_reduction_ends import fusable_ends
from compiler.passes.reindex import IntrinsicMapping, map_to_intrinsic
from compiler.pipeline import build
from compiler.target import Target
from sim.core.energy import summed, table_for
from sim.vita import energy as vita_energy
from sim.vita.config import VitaConfig, peak_macs_per_cycle
from sim.vita.machine import VitaResult, simulate
from tandem.flows import flow, layers, vita_layers
from tandem.flows.check import Check
from tandem.flows.contraction import ContractionFlow, ContractionJob, pads_less_transposed, plain_traffic
from tandem.flows.flow import ByOperator, Execution, RunError, RunReport, TargetFlow
from tandem.flows.kernel_cache import ours
from tandem.flows.layers import Layer
from tandem.flows.run import run
from tandem.flows.targets import as_target
from tandem.flows.user_ops import UserOp, load_user_op
from tandem.flows.vita_layers import DEFAULT_EPILOGUE, Epilogue

DEFAULT_CONFIG = "vta-default"
OPS = ("conv2d", "gemm")
#: the simulator has no data-dependent branch or memory access: equal programs take equal cycles on any data
TIMING_DEPENDS_ON_DATA = False
OPTIONS = ("vthreads", "tune", "relu", "shift", "bias", "clip", "tiling")


def one_uop_timing(spec: isa.ISA, name: str) -> tuple[int, int]:
    """(latency, cycles) of instruction ``name`` of ``spec`` with one micro-op, from its timing."""
    _, latency, cycles = isa.timing_of(spec, spec.insn(name, uop_end=1, iter_out=1, iter_in=1))
    return latency or 0, cycles or 0


def machine_costs(target: Target, epilogue: Epilogue = DEFAULT_EPILOGUE) -> vita.MachineCosts:
    """The numbers the schedule's cost model uses: the spec's timing (DRAM bandwidth, the GEMM and ALU
    instructions' pipeline fill, the ALU's cycles per micro-op and how many ALU instructions the epilogue
    takes on this spec) and the config's DRAM latency. Where the spec has instructions for a reduction's
    first and last steps (``fuse_reduction_ends.fusable_ends``), no reset, and no epilogue without a bias
    (the pass fuses none with one), is charged per output vector."""
    gemm_fill, _ = one_uop_timing(target.spec, "GEMM")
    alu_fill, alu_per_uop = one_uop_timing(target.spec, "ALU_MAX")
    first, last = fusable_ends(target.spec)
    ops = 0 if last and not epilogue.bias else vita.epilogue_ops(target.spec, epilogue.relu, epilogue.bias,
                                                                  epilogue.bounds)
    return vita.MachineCosts(dram_bytes_per_cycle(target), target.config.dram_latency_cycles,
                             max(gemm_fill, alu_fill), alu_per_uop, ops, 0 if first else 1)


def dram_bytes_per_cycle(target: Target) -> int:
    """The DRAM bandwidth of the target's machine (a spec parameter, which a config may override)."""
    return target.spec.params["DRAM_BYTES_PER_CYCLE"]


def roofline_cycles(layer: Layer, target: Target) -> int:
    """The larger of the layer's MACs at the GEMM core's peak and its compulsory traffic at DRAM speed."""
    return max(math.ceil(layer.macs / peak_macs_per_cycle(target.spec)),
               math.ceil(vita_layers.dram_bytes(layer) / dram_bytes_per_cycle(target)))


def compile_layer(layer: Layer, tiling: vita.Tiling, target: Target, epilogue: Epilogue = DEFAULT_EPILOGUE,
                  scheduled: vita.VitaSchedule | None = None) -> tuple[vita.VitaSchedule, VitaKernel]:
    """Schedule ``layer`` with ``tiling`` (or take ``scheduled``, that schedule made already), run the
    ``vita`` pipeline and emit the program; its tokens are checked against Theorem 3.1
    (``check_token_order``). Lowering reads a schedule and changes nothing in it."""
    vs = scheduled or vita_layers.schedule(layer, tiling, target.spec, epilogue)
    kernel = build_vita(build(vs.schedule, vs.args, target=target), target.spec)
    check_token_order(kernel.tokens)
    return vs, kernel


@dataclass(frozen=True)
class VitaJob:
    """A conv2d or GEMM to run on VITA: its epilogue, candidate tilings and packed input shapes."""

    layer: Layer
    vthreads: int
    epilogue: Epilogue
    candidates: tuple[vita.Tiling, ...]
    input_shapes: tuple[tuple[int, ...], ...]   # data, weights (and bias), packed as the schedule takes them
    spec: isa.ISA                                # the machine's, whose blocks the layouts pad to
    vthreads_used: int = 0                       # fewer than asked when that many do not cut the layer
    #: the schedule ``plan`` made of the first candidate (for its inputs' shapes), which ``compile`` takes
    scheduled: vita.VitaSchedule | None = field(default=None, compare=False, repr=False)


def _check_size(layer: Layer, target: Target) -> None:
    """The layer fits the machine's DRAM space and its work the config's micro-op budget: checked before any
    tiling is ranked, code emitted or array allocated."""
    have, need = target.spec.spaces["DRAM"].bytes, vita_layers.dram_bytes(layer, target.spec)
    op, params = layers.op_of(layer), layers.params(layer)
    if need > have:
        raise RunError(f"VITA {op} {params}: its input, weights and output need "
                       f"{need:,} bytes of DRAM, but the machine addresses {have:,}")
    # the DRAM image, the simulator's copy of it and the result's; the packed inputs and the reference
    flow.check_host_memory(4 * need, f"VITA {op}", params)
    check_budget(layer.macs, target, f"VITA {op} {params}")


def check_budget(macs: int, target: Target, what: str) -> None:
    """RunError when ``macs`` multiply-adds need more GEMM micro-ops than the config's ``uop_budget`` (each
    micro-op does at most a full GEMM block's)."""
    uops = math.ceil(macs / peak_macs_per_cycle(target.spec))
    budget = target.config.uop_budget
    if uops > budget:
        raise RunError(f"{what}: needs at least {uops:,} GEMM micro-ops, more than the machine config's "
                       f"uop_budget of {budget:,}; make the problem smaller, or raise uop_budget in a config "
                       f"of your own (--config)")


class VitaLayerFlow(TargetFlow):
    """conv2d and gemm on VITA: the cost model's tilings (or ``tune`` of them simulated), compiled with the
    layer's epilogue, simulated on sim/vita and compared with numpy bit for bit."""

    kind = "vita"

    def plan(self, op: str, params: dict[str, Any], target: Target) -> VitaJob:
        if op not in OPS:
            raise RunError(f"VITA: no schedule for operator {op!r}; expected one of {', '.join(OPS)}")
        where = f"vita {op}"
        layer: Layer
        if op == "gemm":
            layer, keys = GemmShape(*flow.take_gemm(params, where)), flow.GEMM_KEYS
        else:
            layer, keys = flow.take_conv(params, where, images=True), (*flow.CONV_KEYS, "N", "shape")
        vthreads = flow.take_int(params, "vthreads", 0, 0, where)
        tune = flow.take_int(params, "tune", 0, 0, where)
        epilogue = Epilogue.take(params, where)
        tiling = params.pop("tiling", None)
        if isinstance(tiling, dict):
            tiling = vita.Tiling(**tiling)
        if tiling is not None and not isinstance(tiling, vita.Tiling):
            raise RunError(f"{where}: tiling must be a compiler.ops.vita.Tiling, but got {tiling!r}")
        flow.reject_unknown(params, (*keys, *OPTIONS), where)
        _check_size(layer, target)
        try:
            if tiling is not None:
                candidates, used = [tiling], tiling.vthreads
            else:
                ranked, used = _ranked_with_fallback(layer, vthreads, target, epilogue)
                candidates = _distinct(ranked, tune, layer, target, epilogue) if tune > 0 else ranked[:1]
            scheduled = vita_layers.schedule(layer, candidates[0], target.spec, epilogue)
        except ScheduleError as exc:
            raise RunError(f"VITA {op} {layers.params(layer)}: {exc}") from None
        shapes = tuple(tuple(a.shape) for a in scheduled.args[:-1])
        return VitaJob(layer, vthreads, epilogue, tuple(candidates), shapes, target.spec, used, scheduled)

    def inputs(self, job: VitaJob, rng: np.random.Generator) -> list[np.ndarray]:
        plain = [rng.integers(-128, 128, shape, dtype=np.int8) for shape in layers.plain_shapes(job.layer)]
        packed = vita_layers.pack(job.layer, plain, job.spec)
        if job.epilogue.bias:   # sums of about the accumulators' magnitude, so that the bias matters
            reach = 1 << (job.epilogue.shift + 7)
            packed.append(vita.pack_bias(rng.integers(-reach, reach, layers.channels(job.layer)), job.spec))
        return packed

    def check_inputs(self, job: VitaJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in given]
        got = [(tuple(a.shape), a.dtype) for a in arrays]
        want = [(s, np.dtype(np.int8 if i < 2 else np.int32)) for i, s in enumerate(job.input_shapes)]
        if got != want:
            bias = " and an int32 bias" if job.epilogue.bias else ""
            raise RunError(f"VITA {layers.op_of(job.layer)}: expected int8 data and weights{bias} of shapes "
                           f"{[list(s) for s in job.input_shapes]}, but got "
                           f"{[(list(s), str(d)) for s, d in got]}")
        repacked = vita_layers.pack(job.layer, vita_layers.unpack(job.layer, arrays[:2]), job.spec)
        for name, array, clean in zip(("data", "weights"), arrays[:2], repacked, strict=True):
            if not np.array_equal(array, clean):
                raise RunError(f"VITA {layers.op_of(job.layer)} {layers.params(job.layer)}: the lanes of the "
                               f"{name} past the layer's channels (the padding to whole blocks of "
                               f"{vita.block_of(job.spec)}) must be 0")
        return arrays

    def compile(self, job: VitaJob, candidate: vita.Tiling, target: Target
                ) -> tuple[vita.VitaSchedule, VitaKernel]:
        first = job.scheduled if job.scheduled is not None and candidate == job.candidates[0] else None
        return compile_layer(job.layer, candidate, target, job.epilogue, first)

    def stores_kernels(self, job: VitaJob) -> bool:
        return True

    def execute(self, job: VitaJob, compiled: tuple[vita.VitaSchedule, VitaKernel], inputs: list[np.ndarray],
                target: Target) -> Execution:
        vs, kernel = compiled
        result = simulate(kernel.program, kernel.dram_image(inputs), target.config)
        out = kernel.read(result.dram, vs.args[-1].name).reshape(vs.args[-1].shape)
        return Execution(
            output=out, cycles=result.cycles,
            instructions=dict(Counter(i.name for i in kernel.program.insns)),
            tensor_instructions=len(kernel.program.insns), scalar_instructions=0, scalar_fallback=0,
            unmatched=[], utilization=utilization(result), program=kernel.program,
            measured={"dram_bytes": dram_bytes(result)}, costs=vita_energy.costs(kernel.program,
                                                                                table_for(target.config)))

    def reference(self, job: VitaJob, inputs: list[np.ndarray]) -> np.ndarray:
        return vita_layers.reference(job.layer, inputs, job.epilogue)

    def roofline(self, job: VitaJob, target: Target, execution: Execution) -> int:
        return roofline_cycles(job.layer, target)

    def params(self, job: VitaJob, candidate: vita.Tiling, target: Target) -> dict[str, Any]:
        return {**layers.params(job.layer), "vthreads": job.vthreads, "vthreads_used": job.vthreads_used,
                "tiling": asdict(candidate),
                "config": target.config.name, **job.epilogue.params}

    def tuned_entry(self, candidate: vita.Tiling, cost: float) -> dict[str, Any]:
        return {"tiling": asdict(candidate), "cycles": int(cost)}

    def selection(self, job: VitaJob, compiled: tuple[vita.VitaSchedule, VitaKernel]) -> tuple:
        return compiled[0].selection


LAYER_FLOW = VitaLayerFlow()


class VitaContractionFlow(ContractionFlow):
    """TensorIR's kinds on VITA (tandem/flows/contraction.py): mapped onto the spec's GEMM instruction, run as
    the GEMMs of VitaLayerFlow (tilings, virtual threads, tuning), operands packed in its layouts, the int8
    shift-and-clip epilogue applied."""

    kind = "vita"
    gemm_flow = LAYER_FLOW
    options = ("vthreads", "tune", "relu")

    def mapping(self, op: contractions.Contraction, target: Target, where: str) -> IntrinsicMapping:
        """The mapping onto the first instruction of the spec the operator maps onto (VITA's GEMM)."""
        reasons = []
        for name in target.spec.instructions:
            found = map_to_intrinsic(op.out.op, target.spec, name)
            if isinstance(found, IntrinsicMapping):
                return found
            if found.check == "access":
                reasons.append(str(found))
        raise RunError(f"{where}: no instruction of the spec computes it "
                       f"({'; '.join(reasons) or 'none matches its multiply-accumulate'})")

    def dtypes(self, options: dict[str, Any]) -> tuple[str, str]:
        return "int8", "int8"

    def check_size(self, job_shape: tuple[int, int, int, int], target: Target, where: str) -> None:
        count, m, n, k = job_shape
        check_budget(count * m * n * k, target, f"{where} ({count} GEMMs of {m}x{n}x{k})")

    def pack(self, job: ContractionJob, data: np.ndarray, weight: np.ndarray, target: Target
             ) -> list[np.ndarray]:
        return list(vita.pack_dense(data, weight, target.spec))

    def unpack(self, job: ContractionJob, output: np.ndarray) -> np.ndarray:
        m, n, _ = job.run_mnk
        return vita.unpack_out(output, "gemm", n)[:m]

    def transposed(self, mnk: tuple[int, int, int], target: Target, options: dict[str, Any]) -> bool:
        """Data and weights are both int8: the orientation that pads less (rows in BATCHes, columns in
        BLOCK_OUTs)."""
        params = target.spec.params
        return pads_less_transposed(mnk, params["BATCH"], params["BLOCK_OUT"])

    def finish(self, job: ContractionJob, exact: np.ndarray) -> np.ndarray:
        # the accumulators wrap at 32 bits; then the schedule's shift by 8 and clip to int8
        return reference.shift_clip(exact.astype(np.int32), 8, bool(job.options.get("relu", False)))

    def roofline(self, job: ContractionJob, target: Target, execution: Execution) -> int:
        return max(math.ceil(job.op.macs / peak_macs_per_cycle(target.spec)),
                   math.ceil(plain_traffic(job) / dram_bytes_per_cycle(target)))


@dataclass(frozen=True)
class NetworkJob:
    """A network operator on VITA: the plain int32 inputs' shapes, the clip bounds, and the kernels that
    compute it: element-wise ones (``inputs`` tensors of ``tiles`` tiles each in chunks of ``chunk``; a
    concat is one copy per input) or a max pool (``blocks`` channel tiles, ``rows`` output rows a chunk)."""

    op: str
    params: dict[str, int]
    shapes: tuple[tuple[int, ...], ...]
    bounds: tuple[int, int]
    kernels: tuple[dict[str, int], ...]
    candidates: tuple[None, ...] = (None,)


class VitaNetworkOpFlow(TargetFlow):
    """The network operators VITA's ALU computes (``compiler.ops.vita.elementwise`` and ``pool``):
    residual_add, relu, clip, concat, max_pool, avg_pool and global_avg_pool over int32 [C, H, W] tensors
    (``compiler/ops/network.py``'s shapes and parameters), loaded into the accumulators, stored as int8:
    VITA's output is the operator's result saturated to int8 (its STORE keeps 8 bits), as its conv and GEMM
    epilogues end. Average pooling is the int8 network's: int8 inputs, the window's mean rounded half up
    (``vita.mean_steps``: no divide, a multiply and shifts exact over int8 sums), where network.py's is
    float32. The float operators are refused with the reason."""

    kind = "vita"
    OPS = ("residual_add", "relu", "clip", "concat", "max_pool", "avg_pool", "global_avg_pool")
    POOLS = ("max_pool", "avg_pool", "global_avg_pool")
    AVERAGES = ("avg_pool", "global_avg_pool")   # int8 values in int32: the mean's steps are exact on those
    WHY_NOT = {
        "softmax": "it is float32 and needs exp; VITA's ALU is integer",
        "layer_norm": "it is float32 and needs a square root; VITA's ALU is integer",
        "gelu": "it is float32 and needs tanh; VITA's ALU is integer",
    }

    def plan(self, op: str, params: dict[str, Any], target: Target) -> NetworkJob:
        where = f"vita {op}"
        if op in self.WHY_NOT:
            raise RunError(f"{where}: not on VITA: {self.WHY_NOT[op]}; it runs on the cpu target")
        keys = {"C": None, "H": None, "W": None, **({"LO": 0, "HI": 127} if op == "clip" else {}),
                **({"C2": 0} if op == "concat" else {}),
                **({"K": 2, "S": 2} if op in ("max_pool", "avg_pool") else {})}
        least = {"C": 1, "H": 1, "W": 1, "C2": 0, "LO": -2**31, "HI": -2**31, "K": 1, "S": 1}
        values = {key: flow.take_int(params, key, default, least[key], where)
                  for key, default in keys.items()}
        missing = [key for key, value in values.items() if value is None]
        if missing:
            raise RunError(f"{where}: {missing[0]} must be given; {op} needs C, H and W")
        flow.reject_unknown(params, keys, where)
        c, h, w = values["C"], values["H"], values["W"]
        lo, hi = (values["LO"], values["HI"]) if op == "clip" else (0 if op == "relu" else -128, 127)
        if op == "clip" and not lo <= hi:
            raise RunError(f"{where}: LO = {lo} must not exceed HI = {hi}")
        bounds = (max(lo, -128), min(hi, 127))   # the clip, then int8's saturation
        if bounds[0] > bounds[1]:
            raise RunError(f"{where}: [LO, HI] = [{lo}, {hi}] lies outside int8's [-128, 127]")
        shapes = [(c, h, w)] * (2 if op in ("residual_add", "concat") else 1)
        if op == "concat":
            shapes[1] = (values["C2"] or c, h, w)
        flow.check_host_memory(sum(5 * math.prod(x) for x in shapes), where, values)
        if op in self.POOLS:
            return NetworkJob(op, values, tuple(shapes), bounds, (self._pool(op, values, target, where),))
        inputs = 2 if op == "residual_add" else 1
        copies = shapes if op == "concat" else shapes[:1]
        kernels = tuple(dict(zip(("inputs", "tiles", "chunk"), (inputs, *alu_tiles(math.prod(x), inputs,
                                                                                      target)), strict=True))
                        for x in copies)
        return NetworkJob(op, values, tuple(shapes), bounds, kernels)

    @staticmethod
    def _pool(op: str, values: dict[str, int], target: Target, where: str) -> dict[str, Any]:
        """A pool's kernel: its window and stride (a global average pool's window is the image), its
        channel tiles and the output rows a chunk of the accumulators holds."""
        c, h, w = (values[key] for key in ("C", "H", "W"))
        kh, kw, s = (h, w, 1) if op == "global_avg_pool" else (values["K"], values["K"], values["S"])
        if kh > h or kw > w:
            raise RunError(f"{where}: a window of K = {kh} is larger than the {h} x {w} input")
        blocks = -(-c // (vita.batch_of(target.spec) * vita.block_of(target.spec)))
        rows = vita.pool_rows(blocks, h, w, (kh, kw), s, target.spec)
        if rows is None:
            raise RunError(f"{where}: {kh} input rows of {w} x {blocks} tiles do not fit in the accumulators "
                           f"({target.spec.params['ACC_BUFF_DEPTH']} tiles) with one output row")
        if op != "max_pool":
            try:
                vita.mean_steps(kh * kw, -128, 127, target.spec.params["ALUOP_IMM_BIT_WIDTH"])
            except ScheduleError as exc:
                raise RunError(f"{where}: {exc}") from None
        return {"blocks": blocks, "rows": rows, "window": [kh, kw], "stride": s}

    def inputs(self, job: NetworkJob, rng: np.random.Generator) -> list[np.ndarray]:
        low, high = (-128, 128) if job.op in self.AVERAGES else (-300, 300)
        return [rng.integers(low, high, shape).astype(np.int32) for shape in job.shapes]

    def check_inputs(self, job: NetworkJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in given]
        if [(a.shape, a.dtype) for a in arrays] != [(x, np.dtype(np.int32)) for x in job.shapes]:
            raise RunError(f"vita {job.op}: expected int32 inputs of shapes {[list(x) for x in job.shapes]}, "
                           f"but got {[(list(a.shape), str(a.dtype)) for a in arrays]}")
        if job.op in self.AVERAGES and any(a.size and (a.min() < -128 or a.max() > 127) for a in arrays):
            raise RunError(f"vita {job.op}: the input holds values outside int8's [-128, 127]; an average "
                           f"on VITA is the int8 network's")
        return arrays

    def stores_kernels(self, job: NetworkJob) -> bool:
        return True

    def compile(self, job: NetworkJob, candidate: None, target: Target) -> list[tuple[Any, VitaKernel]]:
        compiled = []
        p = job.params
        for k in job.kernels:
            if job.op in self.POOLS:
                kind = "max" if job.op == "max_pool" else "avg"
                vs = vita.pool(kind, k["blocks"], p["H"], p["W"], tuple(k["window"]), k["stride"], k["rows"],
                               spec=target.spec)
            else:
                vs = vita.elementwise(k["inputs"], k["tiles"], k["chunk"], job.bounds, spec=target.spec)
            kernel = build_vita(build(vs.schedule, vs.args, target=target), target.spec)
            check_token_order(kernel.tokens)
            compiled.append((vs, kernel))
        return compiled

    def execute(self, job: NetworkJob, compiled: list[tuple[Any, VitaKernel]], inputs: list[np.ndarray],
                target: Target) -> Execution:
        groups = [inputs] if job.op != "concat" else [[x] for x in inputs]
        outputs, results, programs = [], [], []
        for (vs, kernel), arrays in zip(compiled, groups, strict=True):
            shape = vs.args[0].shape
            if job.op in self.POOLS:   # [C, H, W] -> [H, W, blocks, BATCH, BLOCK_OUT], zero channels added
                c, h, w = arrays[0].shape
                padded = np.zeros((math.prod(shape[2:]), h, w), np.int32)
                padded[:c] = arrays[0]
                packed = [np.ascontiguousarray(np.moveaxis(padded, 0, -1).reshape(shape))]
            else:   # the elements in order, in whole chunks of tiles
                packed = flat_tiles(arrays, shape)
            result = simulate(kernel.program, kernel.dram_image(packed), target.config)
            out = np.asarray(kernel.read(result.dram, vs.args[-1].name))
            if job.op in self.POOLS:
                oh, ow = vs.args[-1].shape[:2]
                pooled = np.moveaxis(out.reshape(oh, ow, -1), -1, 0)[: arrays[0].shape[0]]
                outputs.append(pooled.reshape(-1) if job.op == "global_avg_pool" else pooled)
            else:
                outputs.append(out.ravel()[: arrays[0].size].reshape(arrays[0].shape))
            results.append(result)
            programs.append(kernel.program)
        return alu_execution(np.concatenate(outputs, axis=0), programs, results, target)

    def reference(self, job: NetworkJob, inputs: list[np.ndarray]) -> np.ndarray:
        """The network operator's own reference (compiler/ops/network.py), saturated to int8."""
        named = {key: job.params[key] for key in ("LO", "HI", "K", "S") if key in job.params}
        if job.op in self.AVERAGES:   # the int8 network's: the window's sum over its size, rounded half up
            (kernel,) = job.kernels
            kh, kw = kernel["window"]
            sums = reference.pool2d(inputs[0], (kh, kw), kernel["stride"], "sum").astype(np.int64)
            exact = reference.rounded_mean(sums, kh * kw)
            exact = exact.reshape(-1) if job.op == "global_avg_pool" else exact
        else:
            exact = getattr(network, f"{job.op}_reference")(*inputs, **named)
        return np.clip(exact, -128, 127).astype(np.int8)

    def roofline(self, job: NetworkJob, target: Target, execution: Execution) -> int:
        """The compulsory traffic at DRAM speed: the int32 inputs in, the int8 output out."""
        traffic = 4 * sum(math.prod(x) for x in job.shapes) + execution.output.size
        return math.ceil(traffic / dram_bytes_per_cycle(target))

    def selection(self, job: NetworkJob, compiled: list[tuple[Any, VitaKernel]]) -> tuple:
        return tuple(s for vs, _ in compiled for s in vs.selection)

    def params(self, job: NetworkJob, candidate: None, target: Target) -> dict[str, Any]:
        return {**job.params, "kernels": list(job.kernels), "clip": list(job.bounds)}

    def tuned_entry(self, candidate: None, cost: float) -> dict[str, Any]:
        return {"cycles": cost}


def alu_tiles(elements: int, inputs: int, target: Target) -> tuple[int, int]:
    """(tiles, chunk) of an element-wise kernel on the ALU: the elements in whole accumulator tiles, padded
    to whole chunks: as few chunks as the accumulators allow (each holds a chunk of every input), as even
    as they can be (padding less than a tile per chunk)."""
    per_tile = vita.batch_of(target.spec) * vita.block_of(target.spec)
    tiles = -(-elements // per_tile)
    chunks = -(-tiles // (target.spec.params["ACC_BUFF_DEPTH"] // max(inputs, 1)))
    chunk = -(-tiles // chunks)
    return chunks * chunk, chunk


def alu_execution(output: np.ndarray, programs: Sequence[isa.Program], results: Sequence[VitaResult],
                  target: Target) -> Execution:
    """What the ALU kernels' runs measured: their cycles and energy summed, every instruction a tile
    instruction."""
    counts = Counter(i.name for p in programs for i in p.insns)
    return Execution(
        output=output, cycles=sum(r.cycles for r in results), instructions=dict(counts),
        tensor_instructions=sum(counts.values()), scalar_instructions=0, scalar_fallback=0, unmatched=[],
        utilization=utilization(results[0]), program="\n".join(str(p) for p in programs),
        measured={"dram_bytes": sum(dram_bytes(r) for r in results)},
        costs=summed([vita_energy.costs(p, table_for(target.config)) for p in programs]))


def flat_tiles(arrays: Sequence[np.ndarray], shape: tuple[int, ...]) -> list[np.ndarray]:
    """Each array's elements in order, zero-padded to the kernel's ``shape`` of accumulator tiles."""
    packed = [np.zeros(math.prod(shape), np.int32) for _ in arrays]
    for flat, x in zip(packed, arrays, strict=True):
        flat[: x.size] = x.ravel()
    return [p.reshape(shape) for p in packed]


@dataclass(frozen=True)
class VitaUserJob:
    """A user's element-wise operator on VITA's ALU and its accumulator tiles."""

    user: UserOp
    tiles: int
    chunk: int
    candidates: tuple[None, ...] = (None,)


class VitaUserFlow(TargetFlow):
    """A user's operator (``tandem run FILE.py:NAME --target vita``, tandem/flows/user_ops.py) on VITA's ALU:
    an
    element-wise one over int32 inputs whose output is int8 (VITA's store writes 8 bits), each operation of
    its expression an ALU stage (``compiler.ops.vita.elementwise_of``), selected from the spec's ALU
    instructions by the one matcher; what is not element-wise, or is an operation no ALU instruction of the
    spec computes, is refused with the reason. Bit-exact against the operator's reference."""

    kind = "vita"

    def plan(self, op: str, params: dict[str, Any], target: Target) -> VitaUserJob:
        user = load_user_op(op, params)
        n = math.prod(user.output.shape)
        flow.check_host_memory(5 * n * (len(user.inputs) + 1), op, user.params)
        tiles, chunk = alu_tiles(n, len(user.inputs), target)
        return VitaUserJob(user, tiles, chunk)

    def inputs(self, job: VitaUserJob, rng: np.random.Generator) -> list[np.ndarray]:
        return job.user.random_inputs(rng)

    def check_inputs(self, job: VitaUserJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        return job.user.check_inputs(given)

    def stores_kernels(self, job: VitaUserJob) -> bool:
        """The network operators' (compiler/ops/network.py: Tandem's own code); not a user's (its file is
        not part of the key)."""
        return ours(job.user.path)

    def compile(self, job: VitaUserJob, candidate: None, target: Target) -> tuple[Any, VitaKernel]:
        try:
            vs = vita.elementwise_of(job.user.inputs, job.user.output, job.tiles, job.chunk, spec=target.spec)
            kernel = build_vita(build(vs.schedule, vs.args, target=target), target.spec)
        except (ScheduleError, LoweringError) as exc:
            raise RunError(f"{job.user.where}: {exc}") from None
        check_token_order(kernel.tokens)
        return vs, kernel

    def execute(self, job: VitaUserJob, compiled: tuple[Any, VitaKernel], inputs: list[np.ndarray],
                target: Target) -> Execution:
        vs, kernel = compiled
        result = simulate(kernel.program, kernel.dram_image(flat_tiles(inputs, vs.args[0].shape)),
                          target.config)
        out = np.asarray(kernel.read(result.dram, vs.args[-1].name)).ravel()
        shape = job.user.output.shape
        return alu_execution(out[: math.prod(shape)].reshape(shape), [kernel.program], [result], target)

    def reference(self, job: VitaUserJob, inputs: list[np.ndarray]) -> np.ndarray:
        return job.user.reference(inputs)

    def validate(self, job: VitaUserJob, inputs: list[np.ndarray], got: np.ndarray,
                 want: np.ndarray) -> Check:
        return job.user.validate(got, want)

    def roofline(self, job: VitaUserJob, target: Target, execution: Execution) -> int:
        """The compulsory traffic at DRAM speed: the int32 inputs in, the int8 output out."""
        traffic = 4 * sum(math.prod(t.shape) for t in job.user.inputs) + execution.output.size
        return math.ceil(traffic / dram_bytes_per_cycle(target))

    def selection(self, job: VitaUserJob, compiled: tuple[Any, VitaKernel]) -> tuple:
        return compiled[0].selection

    def params(self, job: VitaUserJob, candidate: None, target: Target) -> dict[str, Any]:
        return {"operator": job.user.params, "tiles": job.tiles, "chunk": job.chunk}

    def tuned_entry(self, candidate: None, cost: float) -> dict[str, Any]:
        return {"cycles": cost}


USER_FLOW = VitaUserFlow()


FLOW = ByOperator("vita", {**dict.fromkeys(OPS, LAYER_FLOW),
                           **dict.fromkeys(contractions.KINDS.keys() - set(OPS), VitaContractionFlow()),
                           **dict.fromkeys(network.OPERATORS, VitaNetworkOpFlow())})


def _ranked_with_fallback(layer: Layer, vthreads: int, target: Target, epilogue: Epilogue
                          ) -> tuple[list[vita.Tiling], int]:
    """The ranked tilings for ``vthreads`` virtual threads or, when no tiling cuts the layer into that many
    threads' whole tiles, for the largest count below that does (down to none); and the count used. The
    ScheduleError of the count asked for when none works."""
    tiled = vita_layers.tiled(layer, target.spec)
    # no count above both the output channel blocks and the output rows can cut the layer
    most = max(tiled.oc // vita.block_of(target.spec), tiled.oh, 1)
    first = None
    for n in (vthreads, *range(min(vthreads - 1, most), 1, -1), 0) if vthreads > 1 else (vthreads,):
        try:
            return vita.rank_tilings(tiled, n, spec=target.spec, costs=machine_costs(target, epilogue),
                                     bias=epilogue.bias), n
        except ScheduleError as exc:
            first = first or exc
    raise first


def _distinct(ranked: Sequence[vita.Tiling], count: int, layer: Layer, target: Target, epilogue: Epilogue
              ) -> list[vita.Tiling]:
    """The first ``count`` of ``ranked`` less each tiling that mirrors an earlier one: the same tile shape
    over the other thread axis at the same estimate. The model cannot tell such two apart, so simulating
    both would spend a tuning run on one guess."""
    tiled = vita_layers.tiled(layer, target.spec)
    costs = machine_costs(target, epilogue)
    seen: set[tuple[int, ...]] = set()
    out: list[vita.Tiling] = []
    for t in ranked:
        key = (t.rows, t.oc_block, t.ic_block, vita.estimate_cycles(tiled, t, target.spec, costs))
        if key not in seen:
            seen.add(key)
            out.append(t)
            if len(out) == count:
                break
    return out


def polydl_ranked(layer: Layer, tilings: Sequence[vita.Tiling], target: Target,
                  epilogue: Epilogue = DEFAULT_EPILOGUE) -> list[tuple[vita.Tiling, float]]:
    """``tilings`` ranked by PolyDL over VITA's scratchpads (``compiler.analysis.poly_rank.rank_staged``):
    each tiling's schedule lowered with its copies between DRAM and the input and weight buffers, the
    reuses of the DRAM arrays placed in the buffer their copies fill, costed by Eq. (1) with the config's
    DRAM latency and the spec's DRAM bandwidth; (tiling, cost), cheapest first, ties bigger tiles first
    (more rows, then output and input channel blocks: fewer instructions)."""
    from compiler.analysis.poly_rank import MemoryLevel, rank_staged  # islpy: only where ranked so

    bodies = {}
    for tiling in sorted(tilings, key=lambda t: (-t.rows, -t.oc_block, -t.ic_block)):
        vs = vita_layers.schedule(layer, tiling, target.spec, epilogue)
        bodies[tiling] = lower(vs.schedule, vs.args).body
    dram = MemoryLevel("DRAM", 0, float(target.config.dram_latency_cycles),
                       float(dram_bytes_per_cycle(target)))
    return [(r.name, r.cost) for r in rank_staged(bodies, target.spec, dram)]


def run_vita(layer: Layer, vthreads: int = 0, config: str | VitaConfig | Target = DEFAULT_CONFIG,
             tiling: vita.Tiling | None = None, tune: int = 0, relu: bool = False, seed: int = 0,
             inputs: list[np.ndarray] | None = None) -> RunReport:
    """``run`` for VITA: ``layer`` (a conv2d or a GEMM) with ``vthreads`` virtual threads (0: none) on
    ``config`` (the target, or a machine config, object, name or file, to run with its spec). The tiling is
    ``tiling``, else the best of ``tune`` simulated candidates when ``tune`` > 0, else the cost model's first
    choice."""
    params: dict[str, Any] = {**layers.params(layer), "vthreads": vthreads, "tiling": tiling, "tune": tune,
                              "relu": relu, "seed": seed}
    return run(layers.op_of(layer), as_target("vita", config), params, inputs=inputs)


def dram_bytes(result: VitaResult) -> int:
    """The bytes the run's loads and stores moved between DRAM and the on-chip buffers."""
    return sum(result.bytes_moved.values())


def utilization(result: VitaResult) -> dict[str, float]:
    """The GEMM core's busy share ("gemm") and each unit's ("load", "compute", "store")."""
    out = {"gemm": round(result.gemm_utilization, 4)}
    for unit in ("load", "compute", "store"):
        out[unit] = round(result.units[unit].busy / result.cycles, 4) if result.cycles else 0.0
    return out
