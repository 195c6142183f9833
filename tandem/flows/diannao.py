"""DianNao's part of the one ``tandem run`` flow (tandem/flows/run.py), and the launcher of DianNao kernels.

``FLOW`` schedules an element-wise operator (add, sub, mul, maximum, relu) or a conv2d for the card
(compiler/ops/diannao.py), runs the ``diannao`` pipeline (optionally without seed 001's loop partitioning or
preprocessing: ``skip``), generates the SPMD program (compiler/backend/diannao.py) and runs it on
sim/diannao. Its parameters besides the layer: ``dtype`` (default float32), ``cores`` (16), ``tile``
(elements per core's tile; the schedule's choice by default), ``skip`` (pass names) and, for a conv2d,
``plan`` (a ``compiler.ops.diannao.ConvPlan``: the cut over the cores; the schedule's estimate's best by
default), ``tune`` (> 0: compile and simulate the ``tune`` cuts the estimate ranks first and keep the
fastest), ``relu`` (true: the ReLU on each output tile in NMEM before its copy-out) and ``bias`` (true: a
per-output-channel bias of the output's type, a third input, added to each output tile in NMEM before the
ReLU, one cycle add per tile). Element-wise
outputs are bit-exact with numpy; integer convolutions too, float ones within the bound of summing in f32
(``conv2d_within_bound``). ``utilization`` is per unit (vfu, tfu, dma); ``roofline_cycles`` is GMEM traffic
at its bandwidth, or the vector/tensor units at their throughput.

``run_kernel`` launches a compiled kernel on a fresh card:

    kernel = compiler.backend.diannao.codegen(func, target.spec)
    result, (a, b, c) = run_kernel(kernel, [a, b, c], target)

It places each parameter's array in GMEM (64-byte aligned, in parameter order), launches the kernel on
``kernel.cores`` cores with the arrays' addresses as its arguments (R0, R1, ...), and reads every array
back, so outputs come back beside the inputs.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import isa
from compiler.analysis.poly_rank import MemoryLevel, rank_staged
from compiler.backend.diannao import DiannaoKernel, codegen
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import contractions, network, reference
from compiler.ops import diannao as dops
from compiler.ops import diannao_network as dnet
from compiler.ops.nn import ConvShape
from compiler.passes.reindex import IntrinsicMapping
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from compiler.target import Target
from sim.core.energy import table_for
from sim.diannao import energy as diannao_energy
from sim.diannao.config import DiannaoConfig, card_cores
from sim.diannao.errors import LaunchError
from sim.diannao.machine import Card, DiannaoResult
from tandem.flows import flow
from tandem.flows.check import Check
from tandem.flows.contraction import ContractionFlow, ContractionJob, canonical_mapping, pads_less_transposed
from tandem.flows.flow import ByOperator, Execution, RunError, RunReport, TargetFlow
from tandem.flows.kernel_cache import ours
from tandem.flows.run import run
from tandem.flows.targets import as_target
from tandem.flows.user_ops import UserOp, is_user_op, load_user_op

GMEM_ALIGN = 64  # bytes: each array starts on a GDRAM access granule (isa/specs/diannao.toml, VECTOR_ALIGN)


def check_arrays(kernel: DiannaoKernel, arrays: Sequence[np.ndarray]) -> None:
    """Raise ``LaunchError`` unless ``arrays`` match ``kernel.params``: one numpy array per parameter, of the
    parameter's dtype and shape (or any shape with as many elements, the parameters being flat)."""
    names = ", ".join(p.name for p in kernel.params)
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence):
        raise LaunchError(f"run_kernel: expected a sequence of arrays for ({names}), but got "
                          f"{type(arrays).__name__}")
    if len(arrays) != len(kernel.params):
        raise LaunchError(f"run_kernel: expected {len(kernel.params)} arrays ({names}), but got "
                          f"{len(arrays)}")
    for k, (param, array) in enumerate(zip(kernel.params, arrays, strict=True)):
        what = f"run_kernel: argument {k}, '{param.name}'"
        if not isinstance(array, np.ndarray):
            raise LaunchError(f"{what}: expected a numpy array, but got {type(array).__name__}")
        if array.dtype != param.dtype.numpy:
            raise LaunchError(f"{what}: expected dtype {param.dtype.numpy}, but got {array.dtype}")
        if array.shape != param.shape and array.size != param.size:
            raise LaunchError(f"{what}: expected shape {list(param.shape)} ({param.size} elements), but got "
                              f"{list(array.shape)}")


def run_kernel(kernel: DiannaoKernel, arrays: Sequence[np.ndarray],
               config: Target | DiannaoConfig | str = "default",
               trace: bool = False) -> tuple[DiannaoResult, list[np.ndarray]]:
    """Launch ``kernel`` on a fresh card of ``config`` (a Target, or a machine config with its spec) with
    ``arrays`` in GMEM; return what the launch measured and every array as it is in GMEM afterwards (same
    dtypes and shapes as given). A kernel compiled for another spec is refused."""
    check_arrays(kernel, arrays)
    target = as_target("diannao", config)
    card = Card(target.config, spec=target.spec)
    buffers = [card.to_gmem(a, card.alloc(a.nbytes, GMEM_ALIGN)) for a in arrays]
    result = card.launch(kernel.program, cores=kernel.cores, args=[b.addr for b in buffers], trace=trace)
    return result, [card.from_gmem(b) for b in buffers]


# ---- the DianNao flow

ELEMENTWISE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum}
OPS = (*ELEMENTWISE, "relu", "conv2d")
NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int16": np.int16,
                "int8": np.int8}
CONV_DTYPES = {"float32": "float32", "int8": "int32", "int16": "int32"}  # input dtype -> output dtype
DEFAULT_SHAPE = (256, 56, 56)
OPTIONS = ("dtype", "cores", "tile", "skip")


@dataclass(frozen=True)
class DiannaoJob:
    """One operator for the card: element-wise over ``shape``, or the conv2d layer ``conv`` (HWC input,
    (Cout, K, K, Cin) weights)."""

    op: str
    dtype: str
    cores: int
    tile: int | None
    skip: tuple[str, ...]
    shape: tuple[int, ...]
    conv: ConvShape | None = None
    user: UserOp | None = None    # a user's element-wise operator (tandem/flows/user_ops.py)
    network: dict[str, int] | None = None   # a network operator's parameters, defaults applied
    mnk: tuple[int, int, int] | None = None   # a GEMM's rows, columns and reduction (DiannaoGemmFlow)
    candidates: tuple = (None,)   # one schedule: the card's tiles follow from its capacities (a conv's
    #                               cut: the given ConvPlan, else the schedule's estimate's)
    relu: bool = False   # a conv's ReLU epilogue, on each output tile in NMEM (compiler.ops.diannao.conv2d)
    bias: bool = False   # a conv's per-output-channel bias, a third input, added before the ReLU in NMEM

    @property
    def where(self) -> str:
        return f"DianNao {self.op}"


@dataclass(frozen=True)
class DiannaoCompiled:
    sched: dops.DiannaoSchedule
    func: ir.PrimFunc
    kernel: DiannaoKernel


class DiannaoLayerFlow(TargetFlow):
    """The card's built-in operators (``OPS``: element-wise add, sub, mul, maximum and relu; conv2d) and a
    user's element-wise operator (``FILE.py:NAME``), scheduled on its cores and simulated on sim/diannao."""

    kind = "diannao"

    def plan(self, op: str, params: dict[str, Any], target: Target) -> DiannaoJob:
        if is_user_op(op):
            return self._plan_user(op, params, target)
        if op == "relu" and params.keys() & {"C", "H", "W"}:   # network.py's relu over [C, H, W]
            return NETWORK_FLOW.plan(op, params, target)
        if op not in OPS:
            raise RunError(f"DianNao: no schedule for operator {op!r}; expected one of {', '.join(OPS)}")
        where = f"DianNao {op}"
        dtype = params.pop("dtype", "float32")
        if dtype not in NUMPY_DTYPES:
            raise RunError(f"DianNao: unsupported dtype {dtype!r}; expected one of {', '.join(NUMPY_DTYPES)}")
        cores = flow.take_int(params, "cores", 16, 1, where)
        tile, skip = self._options(params, cores, target, where)
        conv = None
        if op == "conv2d":
            if dtype not in CONV_DTYPES:
                raise RunError(f"DianNao conv2d: dtype {dtype} is not compiled: the conv instruction sums "
                               f"f16 inputs in f32 and rounds once, which a one-stage tensor expression "
                               f"cannot state; expected one of {', '.join(CONV_DTYPES)}")
            conv = flow.take_conv(params, where)
            shape = (conv.h, conv.w, conv.ic)
            plan = params.pop("plan", None)
            if plan is not None and not isinstance(plan, dops.ConvPlan):
                raise RunError(f"{where}: plan must be a compiler.ops.diannao.ConvPlan, not {plan!r}")
            tune = flow.take_int(params, "tune", 0, 0, where)
            relu, bias = (params.pop(name, False) for name in ("relu", "bias"))
            for name, value in (("relu", relu), ("bias", bias)):
                if not isinstance(value, bool | int | np.integer) or value not in (0, 1):
                    raise RunError(f"{where}: {name} must be true or false (1 or 0), but got {value!r}")
        else:
            shape, plan, relu, bias = flow.take_shape(params, DEFAULT_SHAPE, where), None, False, False
            tune = 0
        conv_keys = ("H", "W", "IC", "OC", "K", "S", "P", "relu", "bias", "tune") if conv else ()
        flow.reject_unknown(params, ("shape", *OPTIONS, *conv_keys), where)
        job = _fits(DiannaoJob(op, dtype, cores, tile, skip, shape, conv, candidates=(plan,), relu=bool(relu),
                               bias=bool(bias)), target)   # its arrays fit GMEM: checked before the cuts
        if conv is None or plan is not None:
            return job
        return dataclasses.replace(job, candidates=tuning_plans(conv, dtype, cores, target, max(tune, 1)))

    @staticmethod
    def _options(params: dict[str, Any], cores: int, target: Target, where: str):
        """The tile and the skipped passes, after checking the cores against the card's."""
        if cores > card_cores(target.spec):
            raise RunError(f"DianNao: {cores} cores requested, but config {target.config.name!r} has "
                           f"{card_cores(target.spec)}")
        return flow.take_int(params, "tile", None, 1, where), tuple(sorted(params.pop("skip", ())))

    def _plan_user(self, op: str, params: dict[str, Any], target: Target) -> DiannaoJob:
        """A user's operator: the card's options first, every other parameter is the operator's."""
        cores = flow.take_int(params, "cores", 16, 1, op)
        tile, skip = self._options(params, cores, target, op)
        user = load_user_op(op, {k: params.pop(k) for k in list(params)})
        dtype = user.output.dtype.name
        if dtype not in NUMPY_DTYPES:
            raise RunError(f"{op}: the output's dtype {dtype} does not run on the card; expected one of "
                           f"{', '.join(NUMPY_DTYPES)}")
        return _fits(DiannaoJob(op, dtype, cores, tile, skip, tuple(user.output.shape), user=user), target)

    def inputs(self, job: DiannaoJob, rng: np.random.Generator) -> list[np.ndarray]:
        if job.user is not None:
            return job.user.random_inputs(rng)
        if job.conv is None:
            n = math.prod(job.shape)
            return [_random(rng, n, job.dtype) for _ in range(1 if job.op == "relu" else 2)]
        c = job.conv
        arrays = [_random(rng, c.h * c.w * c.ic, job.dtype).reshape(job.shape),
                  _random(rng, c.oc * c.k * c.k * c.ic, job.dtype).reshape(c.oc, c.k, c.k, c.ic)]
        if job.bias:
            arrays.append(flow.random_bias(rng, c.oc, NUMPY_DTYPES[CONV_DTYPES[job.dtype]]))
        return arrays

    def check_inputs(self, job: DiannaoJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        if job.user is not None:
            return job.user.check_inputs(given)
        np_dt = NUMPY_DTYPES[job.dtype]
        if job.conv is not None:
            c = job.conv
            names = "input, weights, bias" if job.bias else "input, weights"
            if len(given) != 2 + job.bias:
                raise RunError(f"{job.where}: expected {2 + job.bias} input arrays ({names}), but got "
                               f"{len(given)}")
            x, wt, *bias = (np.asarray(a) for a in given)
            want = [(c.h, c.w, c.ic), (c.oc, c.k, c.k, c.ic)]
            if [x.shape, wt.shape] != want or x.dtype != np_dt or wt.dtype != np_dt:
                raise RunError(f"{job.where}: expected an input {list(want[0])} and weights "
                               f"{list(want[1])} of {job.dtype}, but got {list(x.shape)} {x.dtype} and "
                               f"{list(wt.shape)} {wt.dtype}")
            out_dt = np.dtype(NUMPY_DTYPES[CONV_DTYPES[job.dtype]])
            if bias and (bias[0].shape != (c.oc,) or bias[0].dtype != out_dt):
                raise RunError(f"{job.where}: expected a bias of {c.oc} {out_dt} (the output's type), but "
                               f"got {list(bias[0].shape)} {bias[0].dtype}")
            return [x, wt, *bias]
        count, n = 1 if job.op == "relu" else 2, math.prod(job.shape)
        if len(given) != count:
            raise RunError(f"{job.where}: expected {count} input array(s), but got {len(given)}")
        flat = []
        for k, x in enumerate(given):
            x = np.asarray(x)
            if x.size != n or x.dtype != np_dt:
                raise RunError(f"{job.where}: input {k}: expected {n} elements of {job.dtype}, but got "
                               f"{x.size} elements of {x.dtype}")
            flat.append(x.reshape(-1))
        return flat

    def stores_kernels(self, job: DiannaoJob) -> bool:
        """The card's own operators' kernels and the network operators'; not a user's (FILE.py:NAME: its file
        is not part of the key)."""
        return not is_user_op(job.op) or ours(job.op.rpartition(":")[0])

    def compile(self, job: DiannaoJob, candidate: dops.ConvPlan | None, target: Target) -> DiannaoCompiled:
        if job.user is not None:
            try:
                sched = dops.elementwise_of(job.user.inputs, job.user.output, job.cores, job.tile,
                                            spec=target.spec)
            except ScheduleError as exc:
                raise RunError(f"{job.op}: {exc}") from None
            func = compile_func(lower(sched.schedule, list(sched.args), job.user.name), target, skip=job.skip)
        elif job.conv is not None:
            sched, func = compile_conv2d(_to_blocks(job.conv, target.spec), job.dtype, job.cores, target,
                                         job.skip, plan=candidate, relu=job.relu, bias=job.bias)
        else:
            sched = dops.elementwise(job.op, job.shape, job.dtype, job.cores, job.tile, spec=target.spec)
            func = compile_func(lower(sched.schedule, list(sched.args), job.op), target, skip=job.skip)
        return DiannaoCompiled(sched, func, codegen(func, target.spec))

    def execute(self, job: DiannaoJob, compiled: DiannaoCompiled, inputs: list[np.ndarray],
                target: Target) -> Execution:
        result, after = self.launch(job, compiled, inputs, target)
        out_shape = tuple(compiled.sched.args[-1].shape)
        out = after[-1].reshape(job.shape if job.user is not None else out_shape)
        if job.conv is not None:
            out = out[..., :job.conv.oc]   # the padding channels' outputs, computed and dropped
        return _execution(compiled, result, out, target, {"tile": compiled.sched.tile,
                          **({"cores_used": compiled.sched.cores} if job.conv is not None else {})})

    def launch(self, job: DiannaoJob, compiled: DiannaoCompiled, inputs: list[np.ndarray],
               target: Target, trace: bool = False) -> tuple[DiannaoResult, list[np.ndarray]]:
        """Run ``compiled`` on a fresh card with ``inputs`` in the kernel's layout (``run_kernel``): what the
        launch measured, per core and unit (and its trace, with ``trace``), and every array afterwards (the
        output last)."""
        out_shape = tuple(compiled.sched.args[-1].shape)
        if job.conv is None:   # element-wise kernels take flat arrays
            out = np.zeros(math.prod(job.shape), NUMPY_DTYPES[job.dtype])
            arrays = [*(x.reshape(-1) for x in inputs), out]
        else:   # the weights go in the conv instruction's blocks, (cout/16, k, k, cin, 16), zero past cout
            block = target.spec.params["CONV_BLOCK"]
            wt = np.transpose(inputs[1], (1, 2, 3, 0))
            wt = np.pad(wt, ((0, 0),) * 3 + ((0, out_shape[-1] - wt.shape[-1]),))
            out_dt = NUMPY_DTYPES[CONV_DTYPES[job.dtype]]
            bias = [np.pad(b, (0, out_shape[-1] - b.size)) for b in inputs[2:]]   # zero past cout, too
            arrays = [inputs[0], dops.block_weights(wt, block), *bias, np.zeros(out_shape, out_dt)]
        return run_kernel(compiled.kernel, arrays, config=target, trace=trace)

    def reference(self, job: DiannaoJob, inputs: list[np.ndarray]) -> np.ndarray:
        if job.user is not None:
            return job.user.reference(inputs)
        if job.conv is not None:
            out_dt = np.dtype(NUMPY_DTYPES[CONV_DTYPES[job.dtype]])
            return _conv_exact(job, inputs, out_dt if out_dt.kind == "i" else None).astype(out_dt)
        with np.errstate(over="ignore", invalid="ignore"):
            if job.op == "relu":
                return np.maximum(inputs[0], 0).astype(NUMPY_DTYPES[job.dtype])
            return ELEMENTWISE[job.op](*inputs)

    def validate(self, job: DiannaoJob, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        if job.user is not None:
            return job.user.validate(got, want)
        if job.conv is None or got.dtype.kind == "i":
            return super().validate(job, inputs, got, want)
        x, wt, *bias = inputs
        want64 = _conv_exact(job, inputs)
        err = float(np.max(np.abs(got.astype(np.float64) - want64))) if got.size else 0.0
        ok = conv2d_within_bound(got, x, wt, job.conv.s, job.conv.p, relu=job.relu,
                                 bias=bias[0] if bias else None, exact=want64)
        detail = "within the f32 summation bound" if ok else f"max |err| {err:.3g} against numpy"
        return Check(ok, err, detail)

    def roofline(self, job: DiannaoJob, target: Target, execution: Execution) -> int:
        if job.conv is not None:
            return conv2d_roofline(job.conv, job.dtype, job.cores, target)
        operands = len(job.user.inputs) + 1 if job.user is not None else 2 if job.op == "relu" else 3
        return roofline_cycles(operands, math.prod(job.shape), job.dtype, job.cores, target)

    def selection(self, job: DiannaoJob, compiled: DiannaoCompiled) -> tuple:
        return compiled.sched.selection

    def params(self, job: DiannaoJob, candidate: dops.ConvPlan | None, target: Target) -> dict[str, Any]:
        out = {"shape": list(job.shape), "dtype": job.dtype, "cores": job.cores, "config": target.config.name,
               "skip": list(job.skip)}
        if job.user is not None:
            out["operator"] = job.user.params
        if job.conv is not None:
            c = job.conv
            out.update(H=c.h, W=c.w, IC=c.ic, OC=c.oc, K=c.k, S=c.s, P=c.p, relu=job.relu, bias=job.bias)
            if isinstance(candidate, dops.ConvPlan):
                out["plan"] = candidate.describe()
        return out


def _activated(out: np.ndarray, relu: bool, bias: np.ndarray | None = None,
               wrap: np.dtype | None = None) -> np.ndarray:
    """A conv's exact result (float64) with its epilogue: the bias added, then the ReLU, where asked; with
    ``wrap`` (an integer type), wrapped to it after the conv and after the add, as the card's i32 does."""
    if wrap is not None:
        out = out.astype(np.int64).astype(wrap).astype(np.int64)
        out = (out + bias).astype(wrap) if bias is not None else out
    elif bias is not None:
        out = out + bias.astype(np.float64)
    return np.maximum(out, 0) if relu else out


def _conv_exact(job: DiannaoJob, inputs: Sequence[np.ndarray], wrap: np.dtype | None = None) -> np.ndarray:
    """A conv job's exact result with its epilogue (``_activated``) from its inputs (x, weights[, bias])."""
    x, wt, *bias = inputs
    return _activated(reference.conv2d(x, wt, job.conv.s, job.conv.p, layout="HWC"), job.relu,
                      bias[0] if bias else None, wrap)


def _execution(compiled: DiannaoCompiled, result: DiannaoResult, output: np.ndarray, target: Target,
               chosen: dict[str, Any]) -> Execution:
    """What one launch of ``compiled`` on ``target`` measured, with its ``output`` in the operator's own
    layout, and its energy."""
    kernel = compiled.kernel
    return Execution(
        output=output,
        cycles=result.cycles, instructions=result.instructions,
        tensor_instructions=result.tensor_instructions, scalar_instructions=result.scalar_instructions,
        scalar_fallback=kernel.fallback_count(result.executed),
        unmatched=sorted({str(x) for x in unmatched(compiled.func, kernel.program.isa)}),
        utilization={u: round(result.utilization(u), 4) for u in ("vfu", "tfu", "dma")},
        program=kernel.program, chosen=chosen,
        costs=diannao_energy.costs(kernel.program, result.executed, table_for(target.config)))


def _to_blocks(conv: ConvShape, spec: isa.ISA) -> ConvShape:
    """``conv`` with its output channels rounded up to whole CONV_BLOCKs: the layer the card computes. The
    weights' extra channels are zero and their outputs are dropped (seed 001 Algorithm 1, COM: harmless
    extra compute instead of a guard the conv instruction cannot take)."""
    block = spec.params["CONV_BLOCK"]
    return dataclasses.replace(conv, oc=-(-conv.oc // block) * block)


def tuning_plans(conv: ConvShape, dtype: str, cores: int, target: Target, count: int) -> tuple:
    """The candidates ``tune`` simulates, keeping the fastest: of the cuts of ``conv`` (its output channels
    in whole blocks; ``compiler.ops.diannao.conv_plans``), the ``count`` the estimate ranks first, each with
    the tile sizes the estimate ranks first for it (``ConvPlan.cut``: cuts differ more than tile sizes do,
    and the estimate ranks cuts less surely than it ranks one cut's tile sizes)."""
    c = _to_blocks(conv, target.spec)
    try:
        plans = dops.conv_plans(c.h, c.w, c.ic, c.oc, c.k, c.s, c.p, np.dtype(NUMPY_DTYPES[dtype]).itemsize,
                                cores, target.spec)
    except ScheduleError as e:
        raise RunError(str(e)) from None
    best: dict[tuple, dops.ConvPlan] = {}
    for plan in sorted(plans, key=lambda p: p.estimate):
        best.setdefault(plan.cut, plan)
    return tuple(best.values())[:count]


def _fits(job: DiannaoJob, target: Target) -> DiannaoJob:
    """``job``, unless its arrays (inputs and output, each 64-byte aligned) outgrow the card's GMEM: checked
    before anything is allocated or compiled."""
    itemsize = np.dtype(NUMPY_DTYPES[job.dtype]).itemsize
    if job.conv is not None:
        c = job.conv
        out_size = np.dtype(NUMPY_DTYPES[CONV_DTYPES[job.dtype]]).itemsize
        oc = _to_blocks(c, target.spec).oc
        sizes = [c.h * c.w * c.ic * itemsize, oc * c.k * c.k * c.ic * itemsize, c.oh * c.ow * oc * out_size]
    elif job.user is not None:
        sizes = [math.prod(t.shape) * t.dtype.bits // 8 for t in (*job.user.inputs, job.user.output)]
    else:
        sizes = [math.prod(job.shape) * itemsize] * (2 if job.op == "relu" else 3)
    need = sum(-(-s // GMEM_ALIGN) * GMEM_ALIGN for s in sizes)
    have = target.spec.params["GMEM_BYTES"]
    if need > have:
        raise RunError(f"{job.where}: its arrays need {need:,} bytes of GMEM, but the card has {have:,} "
                       f"(GMEM_BYTES); give a smaller shape")
    return job


class DiannaoGemmFlow(DiannaoLayerFlow):
    """GEMM ``out[M, N] = data[M, K] x weight[N, K]^T`` on the card as a convolution whose memory layout is
    the GEMM's own: the 1 x 1 convolution of M pixels of K channels (H = M, W = 1, IC = K, OC = N), or, where
    K is more than the conv instruction's fields hold, the f x f convolution with stride f of an (M f) x f
    input of K / f^2 channels, one output pixel per row (the same bytes: a row of K is f x f x K/f^2). The
    conv2d schedule computes it and the one matcher selects the conv instruction of its dtype (qconv for
    int8/int16, summing in i32); the first f whose kernel has every multiply-add on it is taken, else the
    1x1 conv with what no instruction computes on the scalar unit (``unmatched`` says why). Parameters: M,
    N, K and the card's options."""

    def plan(self, op: str, params: dict[str, Any], target: Target) -> DiannaoJob:
        where = "DianNao gemm"
        m, n, k = (flow.take_int(params, key, None, 1, where) for key in flow.GEMM_KEYS)
        if None in (m, n, k):
            raise RunError(f"{where}: M, N and K must be given")
        options = {key: params.pop(key) for key in list(params)}
        first = None
        for f in (f for f in range(1, 8) if k % (f * f) == 0):
            conv = {**options, "H": m * f, "W": f, "IC": k // (f * f), "OC": n, "K": f, "S": f, "P": 0}
            job = dataclasses.replace(super().plan("conv2d", dict(conv), target), op="gemm", mnk=(m, n, k))
            compiled = super().compile(job, None, target)
            job = dataclasses.replace(job, candidates=(compiled,))   # compiled once, here
            if not unmatched(compiled.func, target.spec):
                return job
            first = first or job
        return first   # none is all on the conv instruction: the 1x1 conv, the rest on the scalar unit

    def compile(self, job: DiannaoJob, candidate: DiannaoCompiled, target: Target) -> DiannaoCompiled:
        return candidate   # the kernel ``plan`` compiled to choose the convolution

    def stores_kernels(self, job: DiannaoJob) -> bool:
        return False   # ``plan`` compiles: the candidate is the kernel

    def inputs(self, job: DiannaoJob, rng: np.random.Generator) -> list[np.ndarray]:
        m, n, k = job.mnk
        return [_random(rng, m * k, job.dtype).reshape(m, k), _random(rng, n * k, job.dtype).reshape(n, k)]

    def check_inputs(self, job: DiannaoJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in given]
        (m, n, k), dt = job.mnk, np.dtype(NUMPY_DTYPES[job.dtype])
        want = [(m, k), (n, k)]
        if [(a.shape, a.dtype) for a in arrays] != [(s, dt) for s in want]:
            raise RunError(f"{job.where}: expected data {list(want[0])} and weights {list(want[1])} of "
                           f"{job.dtype}, but got {[(list(a.shape), str(a.dtype)) for a in arrays]}")
        return arrays

    def execute(self, job: DiannaoJob, compiled: DiannaoCompiled, inputs: list[np.ndarray],
                target: Target) -> Execution:
        run = super().execute(job, compiled, _conv_form(job, inputs), target)
        return dataclasses.replace(run, output=run.output.reshape(job.mnk[0], job.mnk[1]))

    def reference(self, job: DiannaoJob, inputs: list[np.ndarray]) -> np.ndarray:
        return super().reference(job, _conv_form(job, inputs)).reshape(job.mnk[0], job.mnk[1])

    def validate(self, job: DiannaoJob, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> Check:
        shape = (job.mnk[0], 1, job.mnk[1])
        return super().validate(job, _conv_form(job, inputs), got.reshape(shape), want.reshape(shape))

    def params(self, job: DiannaoJob, candidate: DiannaoCompiled, target: Target) -> dict[str, Any]:
        both = super().params(job, candidate, target)
        m, n, k = job.mnk
        return {**{key: v for key, v in both.items() if key not in flow.CONV_KEYS}, "shape": [m, n, k],
                "M": m, "N": n, "K": k, "conv": {key: v for key, v in both.items() if key in flow.CONV_KEYS}}


def _conv_form(job: DiannaoJob, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """A GEMM's data [M, K] and weights [N, K] as its convolution's HWC input and (OC, f, f, IC) weights:
    the same bytes, reshaped."""
    data, weight = inputs
    c = job.conv
    return [data.reshape(c.h, c.w, c.ic), weight.reshape(c.oc, c.k, c.k, c.ic)]


class DiannaoContractionFlow(ContractionFlow):
    """TensorIR's kinds on the card (tandem/flows/contraction.py): mapped onto the canonical GEMM of their
    element type (the card's GEMM is a schedule, ``DiannaoGemmFlow``, not one instruction), each GEMM a
    launch of the 1 x 1 conv kernel on qconv; the int32 sums are the output. ``dtype``: int8 (default) or
    int16."""

    kind = "diannao"
    gemm_flow = DiannaoGemmFlow()
    options = ("dtype", "cores", "tile", "skip")

    def plan(self, op: str, params: dict[str, Any], target: Target) -> ContractionJob:
        dtype = params.setdefault("dtype", "int8")
        if dtype not in INTEGER_KINDS:
            raise RunError(f"DianNao {op}: dtype {dtype!r} is not one of the integer types it is defined on "
                           f"({', '.join(INTEGER_KINDS)})")
        return super().plan(op, params, target)

    def mapping(self, op: contractions.Contraction, target: Target, where: str) -> IntrinsicMapping:
        return canonical_mapping(op, where)

    def dtypes(self, options: dict[str, Any]) -> tuple[str, str]:
        return options["dtype"], options["dtype"]

    def check_size(self, job_shape: tuple[int, int, int, int], target: Target, where: str) -> None:
        """The reindexed operands of every GEMM fit in this machine's memory (the GEMM flow checks that one
        GEMM's arrays fit in GMEM)."""
        count, m, n, k = job_shape
        flow.check_host_memory(count * (2 * (m * k + n * k) + 8 * m * n), where,
                          {"gemms": count, "M": m, "N": n, "K": k})

    def transposed(self, mnk: tuple[int, int, int], target: Target, options: dict[str, Any]) -> bool:
        """Data and weights have one type: the orientation that pads less (pixels one by one, output
        channels in CONV_BLOCKs), unless the data, as the transposed GEMM's weights, would outgrow the WMEM
        of every core together (the weights of a conv are not tiled along its reduction)."""
        m, _, k = mnk
        itemsize = np.dtype(NUMPY_DTYPES[options["dtype"]]).itemsize
        fits = m * k * itemsize <= target.spec.params["WMEM_BYTES"] * card_cores(target.spec)
        return fits and pads_less_transposed(mnk, 1, target.spec.params["CONV_BLOCK"])

    def roofline(self, job: ContractionJob, target: Target, execution: Execution) -> int:
        size = np.dtype(job.op.data.dtype.numpy).itemsize
        plain = [math.prod(s) for s in job.op.plain]
        traffic = (plain[0] + plain[1]) * size + plain[2] * 4
        return tensor_roofline(job.op.macs, size, traffic, job.gemm.cores, target)


class DiannaoNetworkOpFlow(DiannaoLayerFlow):
    """The operators of compiler/ops/network.py on the card, written as operators of our own (their inputs,
    reference and validation are a user operator's): residual_add, relu and clip element-wise on the vector
    units (``elementwise_of``, as a user's); pooling, global average pooling, concat, softmax, layer norm
    and GELU by their schedules in the card's layouts (compiler/ops/diannao_network.py), the inputs
    converted to them on the host and the output back. ``cores`` and ``skip`` as for the other operators."""

    def plan(self, op: str, params: dict[str, Any], target: Target) -> DiannaoJob:
        if op in dnet.OPERATORS and params.get("tile") is not None:
            raise RunError(f"DianNao {op}: 'tile' is not an option of its schedule (it tiles by rows)")
        job = dataclasses.replace(self._plan_user(network.user_op(op), params, target), op=op)
        if op not in dnet.OPERATORS:
            return job
        bound = inspect.signature(getattr(network, op)).bind(**job.user.params)
        bound.apply_defaults()
        return dataclasses.replace(job, network=dict(bound.arguments))

    def compile(self, job: DiannaoJob, candidate: dops.ConvPlan | None, target: Target) -> DiannaoCompiled:
        if job.network is None:
            return super().compile(job, candidate, target)
        try:
            sched = dnet.schedule(job.op, job.network, job.cores, spec=target.spec)
        except ScheduleError as exc:
            raise RunError(f"{job.where}: {exc}") from None
        func = compile_func(lower(sched.schedule, list(sched.args), job.op), target, skip=job.skip)
        return DiannaoCompiled(sched, func, codegen(func, target.spec))

    def execute(self, job: DiannaoJob, compiled: DiannaoCompiled, inputs: list[np.ndarray],
                target: Target) -> Execution:
        if job.network is None:
            return super().execute(job, compiled, inputs, target)
        out = compiled.sched.args[-1]
        arrays = [*dnet.pack(job.op, inputs, target.spec), np.zeros(out.shape, out.dtype.numpy)]
        result, after = run_kernel(compiled.kernel, arrays, config=target)
        return _execution(compiled, result, dnet.unpack(job.op, after[-1], job.shape), target,
                          {"tile": compiled.sched.tile, "cores_used": compiled.sched.cores})

    def roofline(self, job: DiannaoJob, target: Target, execution: Execution) -> int:
        """Element-wise: as the built-in ones; the others: their inputs and output crossing GMEM once."""
        if job.network is None:
            return super().roofline(job, target, execution)
        traffic = sum(math.prod(t.shape) * t.dtype.bits // 8 for t in (*job.user.inputs, job.user.output))
        return math.ceil(traffic / target.config.gmem_bytes_per_cycle)


INTEGER_KINDS = ("int8", "int16")
USER_FLOW = DiannaoLayerFlow()   # the flow of the built-in operators takes user operators (FILE.py:NAME) too
NETWORK_FLOW = DiannaoNetworkOpFlow()
FLOW = ByOperator("diannao", {**dict.fromkeys(network.OPERATORS, NETWORK_FLOW),
                              **dict.fromkeys(OPS, USER_FLOW), "gemm": DiannaoContractionFlow.gemm_flow,
                              **dict.fromkeys(contractions.KINDS.keys() - {"conv2d"},
                                              DiannaoContractionFlow())})


def run_diannao(op: str, shape: tuple[int, ...], dtype: str = "float32", cores: int = 16,
                tile: int | None = None, config: str | DiannaoConfig | Target = "default",
                skip: Collection[str] = (), seed: int = 0,
                inputs: Sequence[np.ndarray] | None = None, conv: ConvShape | None = None,
                tune: int = 0) -> RunReport:
    """``run`` for the DianNao card: ``op`` on ``shape`` (conv2d: the input's (H, W, Cin), and ``conv`` the
    layer, by default 16 output channels, a 3 x 3 kernel, stride 1, padding 1). ``inputs``: A, B (binary) or
    A (relu) of ``prod(shape)`` elements, or the HWC input and (Cout, K, K, Cin) weights of a conv2d; by
    default random arrays drawn from ``seed``. ``config`` is the target, or a machine config (object, name
    or file) to run with its spec. A conv2d's ``tune`` (> 0): the fastest of the estimate's first cuts."""
    params: dict[str, Any] = {"dtype": dtype, "cores": cores, "tile": tile, "skip": tuple(skip), "seed": seed}
    if op == "conv2d" and conv is not None:
        if (conv.h, conv.w, conv.ic) != tuple(shape):
            raise RunError(f"DianNao conv2d: the layer {conv} does not take the input shape {list(shape)}")
        params.update(H=conv.h, W=conv.w, IC=conv.ic, OC=conv.oc, K=conv.k, S=conv.s, P=conv.p, tune=tune)
    else:
        params["shape"] = tuple(shape)
    return run(op, as_target("diannao", config), params, inputs=inputs)


def compile_conv2d(conv: ConvShape, dtype: str, cores: int, target: Target,
                   skip: Collection[str] = (), plan: dops.ConvPlan | None = None, relu: bool = False,
                   bias: bool = False) -> tuple[dops.DiannaoSchedule, ir.PrimFunc]:
    """The conv2d schedule for the DianNao card (``plan``'s cut, else the estimate's best; with ``bias`` and
    ``relu``, its epilogue on each tile in NMEM) and the ``diannao`` pipeline's output (less ``skip``); use
    ``compiler.passes.tensorize.unmatched`` on the function to see what stayed scalar without simulating."""
    try:
        sched = dops.conv2d(conv.h, conv.w, conv.ic, conv.oc, conv.k, conv.s, conv.p, dtype, cores, plan,
                            spec=target.spec, relu=relu, bias=bias)
    except ScheduleError as e:
        raise RunError(str(e)) from None
    return sched, compile_func(lower(sched.schedule, list(sched.args), "conv2d"), target, skip=tuple(skip))


def polydl_ranked(conv: ConvShape, dtype: str, cores: int, target: Target
                  ) -> list[tuple[dops.ConvPlan, float]]:
    """The conv plans of ``conv`` (its output channels in whole blocks) ranked by PolyDL over the card's
    scratchpads (``compiler.analysis.poly_rank.rank_staged``), cheapest first: as PolyDL fixes its parallel
    loop to use every thread, the plans that use the most cores, each lowered in its analysis form (the
    row-group, sub-row and channel-group loops apart and parallel), the reuses of the GMEM arrays placed in
    the memory their copies fill (NMEM, WMEM, SMEM: sizes from the spec), costed by Eq. (1) with GMEM's
    latency (the spec's GMEM_LATENCY) and the config's bandwidth. (plan, cost) pairs."""
    plans = dops.conv_plans(conv.h, conv.w, conv.ic, conv.oc, conv.k, conv.s, conv.p,
                            np.dtype(NUMPY_DTYPES[dtype]).itemsize, cores, target.spec)
    most = max(plan.cores for plan in plans)
    bodies, parallel = {}, {}
    for plan in (p for p in plans if p.cores == most):
        sched = dops.conv2d(conv.h, conv.w, conv.ic, conv.oc, conv.k, conv.s, conv.p, dtype, cores, plan,
                            spec=target.spec, analysis=True)
        bodies[plan] = body = lower(sched.schedule, list(sched.args), "conv2d").body
        parallel[plan] = _core_loops(body)
    gmem = MemoryLevel("GMEM", 0, float(target.spec.params["GMEM_LATENCY"]),
                       float(target.config.gmem_bytes_per_cycle))
    return [(r.name, r.cost) for r in rank_staged(bodies, target.spec, gmem, parallel)]


def _core_loops(body: ir.Stmt) -> tuple[ir.Var, ...]:
    """The variables of the loops that split a conv schedule's analysis form over cores."""
    found: list[ir.Var] = []
    post_order_visit(body, lambda x: found.append(x.var) if isinstance(x, ir.For) and
                     x.var.name in dops.CORE_LOOPS else None)
    return tuple(found)


def conv2d_matches(out: np.ndarray, x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> bool:
    """Whether the card's conv ``out`` is numpy's: bit-exact for an integer output (i32 sums wrap like the
    card's), within ``conv2d_within_bound`` for a float one."""
    if out.dtype.kind == "i":
        want = reference.conv2d(x, wt, stride, pad, layout="HWC").astype(out.dtype)
        return out.shape == want.shape and bool(np.array_equal(out, want))
    return conv2d_within_bound(out, x, wt, stride, pad)


def conv2d_within_bound(out: np.ndarray, x: np.ndarray, wt: np.ndarray, stride: int, pad: int,
                        relu: bool = False, bias: np.ndarray | None = None,
                        exact: np.ndarray | None = None) -> bool:
    """Whether the float conv ``out`` is within the error of summing n = k*k*cin products in f32 in any order
    and rounding once to out's dtype: |out - exact| <= (n + 2) 2**-24 sum|x w| + u |exact| + tiny, with
    u = 2**-11 for f16 outputs and 0 for f32; with ``relu``, against max(exact, 0) (a ReLU moves two values
    no further apart); with a ``bias``, exact and sum|x w| count it and n one rounding more (its add's).
    ``exact``: that exact result (float64, epilogue applied) where the caller has it already."""
    if exact is None:
        exact = _activated(reference.conv2d(x, wt, stride, pad, layout="HWC"), relu, bias)
    magnitude = reference.conv2d(np.abs(x), np.abs(wt), stride, pad, layout="HWC")
    n = wt.shape[1] * wt.shape[2] * wt.shape[3]
    if bias is not None:
        magnitude, n = magnitude + np.abs(bias.astype(np.float64)), n + 1
    u, tiny = (2.0**-11, 2.0**-25) if out.dtype == np.float16 else (0.0, 2.0**-150)
    bound = (n + 2) * 2.0**-24 * magnitude * (1 + u) + u * np.abs(exact) + tiny
    return out.shape == exact.shape and bool((np.abs(out.astype(np.float64) - exact) <= bound).all())


def conv2d_roofline(conv: ConvShape, dtype: str, cores: int, target: Target) -> int:
    """The fewest cycles the card could take for a conv layer: the tensor units of all cores share the MACs
    evenly, and the input, weights and output cross GMEM once."""
    size = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    out_size = np.dtype(NUMPY_DTYPES[CONV_DTYPES[dtype]]).itemsize
    traffic = ((conv.h * conv.w * conv.ic + conv.oc * conv.k * conv.k * conv.ic) * size
               + conv.oh * conv.ow * conv.oc * out_size)
    return tensor_roofline(conv.macs, size, traffic, cores, target)


def tensor_roofline(macs: int, itemsize: int, traffic: int, cores: int, target: Target) -> int:
    """The fewest cycles for ``macs`` multiply-accumulates of ``itemsize``-byte operands shared evenly by the
    tensor units of ``cores`` cores, and ``traffic`` bytes crossing GMEM once."""
    tfu = math.ceil(macs * itemsize / (2 * target.spec.params["TFU_MACS_PER_CYCLE"]) / cores)
    return max(tfu, math.ceil(traffic / target.config.gmem_bytes_per_cycle))


def roofline_cycles(operands: int, elements: int, dtype: str, cores: int, target: Target) -> int:
    """The fewest cycles the card could take for an element-wise operator of ``operands`` tensors (inputs
    and output): every operand crosses GMEM once (its port is shared by all cores), and each core's vector
    unit handles its share at VFU_BYTES_PER_CYCLE."""
    params, config = target.spec.params, target.config
    size = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    gmem = math.ceil(operands * elements * size / config.gmem_bytes_per_cycle)
    vector = math.ceil(math.ceil(elements / cores) * size / params["VFU_BYTES_PER_CYCLE"])
    return max(gmem, vector)


def _random(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    dt = np.dtype(NUMPY_DTYPES[dtype])
    if dt.kind == "i":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dt)
    return rng.standard_normal(n).astype(dt)
