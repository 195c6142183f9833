"""The ``tandem run`` flow: compile an operator for a target, simulate it, validate it against numpy.

``run_diannao`` schedules the operator for the DianNao card (compiler/ops/diannao.py), runs the ``diannao``
pipeline (optionally without seed 001's loop partitioning or preprocessing), generates the SPMD program
(compiler/backend/diannao.py), runs it on sim/diannao on seeded random inputs and compares the output with
numpy. The report is the JSON contract of ``tandem run --json``:

- ``op``, ``target``, ``params`` (shape, dtype, cores, tile, config, the passes skipped);
- ``validated`` (the simulated output equals numpy: bit-exact for element-wise operators) and
  ``max_abs_err``;
- ``cycles``, ``instructions`` (executed, by opcode), ``tensor_instructions``, ``scalar_instructions``;
- ``scalar_fallback``: scalar instructions executed in statements marked for tensorization (0 when every
  marked statement became a tensor instruction), with ``unmatched``, why each such statement stayed scalar;
- ``utilization`` per unit (vfu, tfu, dma), ``roofline_cycles`` (the simulated machine's bound: GMEM
  traffic at its bandwidth, or the vector units at their throughput) and ``roofline_pct``;
- ``compile_s``, ``simulate_s`` and ``wall_s``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from compiler.backend.diannao import codegen
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.ops import reference
from compiler.ops.nn import ConvShape
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from compiler.target import Target
from sim.diannao.config import DiannaoConfig, card_cores
from tandem.diannao_run import run_kernel
from tandem.targets import as_target

ELEMENTWISE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum}
NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int16": np.int16,
                "int8": np.int8}
SEED = 0


class RunError(ValueError):
    """A request ``tandem run`` cannot serve: an unknown operator, dtype or parameter."""


@dataclass
class RunReport:
    """What one compile + simulate + validate run measured (the ``--json`` object)."""

    op: str
    target: str
    params: dict
    validated: bool
    max_abs_err: float
    cycles: int
    instructions: dict[str, int]
    tensor_instructions: int
    scalar_instructions: int
    scalar_fallback: int
    unmatched: list[str]
    utilization: dict[str, float]
    roofline_cycles: int
    roofline_pct: float
    compile_s: float
    simulate_s: float
    wall_s: float
    detail: str = field(default="", repr=False)
    # what was compared and run, for callers that show it (not part of the JSON object)
    output: np.ndarray | None = field(default=None, repr=False, compare=False)
    reference: np.ndarray | None = field(default=None, repr=False, compare=False)
    program: str = field(default="", repr=False, compare=False)

    def to_json(self) -> dict:
        report = asdict(self)
        for key in ("output", "reference", "program"):
            del report[key]
        return report


def run_diannao(op: str, shape: tuple[int, ...], dtype: str = "float32", cores: int = 16,
                tile: int | None = None, config: str | DiannaoConfig | Target = "default",
                skip: Collection[str] = (), seed: int = SEED,
                inputs: Sequence[np.ndarray] | None = None, conv: ConvShape | None = None) -> RunReport:
    """Compile ``op`` on ``shape`` for the DianNao card, simulate it and compare with numpy.

    Element-wise ops: ``inputs`` are A, B (binary) or A (relu), each of ``prod(shape)`` elements of
    ``dtype``. ``conv2d``: ``shape`` is the input's (H, W, Cin) and ``inputs`` (optional) are the HWC input
    and the (Cout, K, K, Cin) weights; ``conv`` is the layer (its h, w, ic those of ``shape``; by default 16
    output channels, a 3 x 3 kernel, stride 1, padding 1), its oc and k taken from the weights when given.
    Without ``inputs``, random arrays drawn from ``seed``. ``config`` is the target (its spec and machine
    config), or a machine config (object, name or file) to run with its spec."""
    start = time.perf_counter()
    target = as_target("diannao", config)
    cfg = target.config
    if op not in ELEMENTWISE and op not in ("relu", "conv2d"):
        raise RunError(f"DianNao: no schedule for operator {op!r}; expected one of "
                       f"{', '.join([*ELEMENTWISE, 'relu', 'conv2d'])}")
    if dtype not in NUMPY_DTYPES:
        raise RunError(f"DianNao: unsupported dtype {dtype!r}; expected one of {', '.join(NUMPY_DTYPES)}")
    if cores > card_cores(target.spec):
        raise RunError(f"DianNao: {cores} cores requested, but config {cfg.name!r} has "
                       f"{card_cores(target.spec)}")
    if op == "conv2d":
        return _run_conv(tuple(shape), dtype, cores, target, skip, seed, inputs, conv, start)
    sched = dops.elementwise(op, shape, dtype, cores, tile, spec=target.spec)
    func = compile_func(lower(sched.schedule, list(sched.args), op), target, skip=tuple(skip))
    kernel = codegen(func, target.spec)
    compiled = time.perf_counter()

    n = math.prod(shape)
    if inputs is None:
        rng = np.random.default_rng(seed)
        inputs = [_random(rng, n, dtype) for _ in sched.args[:-1]]
    else:
        inputs = _given_inputs(op, inputs, len(sched.args) - 1, n, dtype)
    result, arrays = run_kernel(kernel, [*inputs, np.zeros(n, NUMPY_DTYPES[dtype])], config=target)
    simulated = time.perf_counter()

    got = arrays[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.maximum(inputs[0], 0).astype(got.dtype) if op == "relu" else ELEMENTWISE[op](*inputs)
    validated = bool(np.array_equal(got, want, equal_nan=True))
    err = float(np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if n else 0.0
    roof = roofline_cycles(op, n, dtype, cores, target)
    params = {"shape": list(shape), "dtype": dtype, "cores": cores, "tile": sched.tile, "config": cfg.name,
              "skip": sorted(skip)}
    detail = "bit-exact with numpy" if validated else f"max |err| {err:.3g} against numpy"
    return _report(op, params, func, kernel, result, (validated, err, detail), roof,
                   (start, compiled, simulated), got, want)


def _report(op: str, params: dict, func, kernel, result, check: tuple[bool, float, str], roof: int,
            times: tuple[float, float, float], got: np.ndarray, want: np.ndarray) -> RunReport:
    """The RunReport of a simulated kernel: ``check`` is (validated, max_abs_err, detail), ``times`` the
    perf_counter at start, after compiling and after simulating."""
    validated, err, detail = check
    start, compiled, simulated = times
    return RunReport(
        op=op, target="diannao", params=params,
        validated=validated, max_abs_err=err, cycles=result.cycles, instructions=result.instructions,
        tensor_instructions=result.tensor_instructions, scalar_instructions=result.scalar_instructions,
        scalar_fallback=kernel.fallback_count(result.executed),
        unmatched=sorted({str(x) for x in unmatched(func, kernel.program.isa)}),
        utilization={u: round(result.utilization(u), 4) for u in ("vfu", "tfu", "dma")},
        roofline_cycles=roof, roofline_pct=round(100.0 * roof / result.cycles, 2) if result.cycles else 0.0,
        compile_s=round(compiled - start, 4), simulate_s=round(simulated - compiled, 4),
        wall_s=round(time.perf_counter() - start, 4), detail=detail,
        output=got, reference=want, program=str(kernel.program),
    )


CONV_DTYPES = {"float32": "float32", "int8": "int32", "int16": "int32"}  # input dtype -> output dtype


def _run_conv(shape: tuple[int, ...], dtype: str, cores: int, target: Target, skip: Collection[str],
              seed: int, inputs: Sequence[np.ndarray] | None, conv: ConvShape | None,
              start: float) -> RunReport:
    if len(shape) != 3:
        raise RunError(f"DianNao conv2d: expected the input shape H x W x Cin, but got {list(shape)}")
    if dtype not in CONV_DTYPES:
        raise RunError(f"DianNao conv2d: dtype {dtype} is not compiled: the conv instruction sums f16 inputs "
                       f"in f32 and rounds once, which a one-stage tensor expression cannot state; expected "
                       f"one of {', '.join(CONV_DTYPES)}")
    h, w, cin = shape
    conv = conv or ConvShape(h, w, cin, 16, 3, 1, 1)
    if (conv.h, conv.w, conv.ic) != (h, w, cin):
        raise RunError(f"DianNao conv2d: the layer {conv} does not take the input shape {list(shape)}")
    rng = np.random.default_rng(seed)
    np_dt = NUMPY_DTYPES[dtype]
    if inputs is not None:
        if len(inputs) != 2:
            raise RunError(f"DianNao conv2d: expected 2 input arrays (input, weights), but got {len(inputs)}")
        x, wt = (np.asarray(a) for a in inputs)
        if x.shape != shape or wt.ndim != 4 or wt.shape[1] != wt.shape[2] or wt.shape[3] != cin \
                or x.dtype != np_dt or wt.dtype != np_dt:
            raise RunError(f"DianNao conv2d: expected an input {list(shape)} and weights (Cout, K, K, {cin}) "
                           f"of {dtype}, but got {list(x.shape)} {x.dtype} and {list(wt.shape)} {wt.dtype}")
        conv = replace(conv, oc=wt.shape[0], k=wt.shape[1])
    else:
        x = _random(rng, h * w * cin, dtype).reshape(shape)
        wt = _random(rng, conv.oc * conv.k * conv.k * cin, dtype).reshape(conv.oc, conv.k, conv.k, cin)
    sched, func = compile_conv2d(conv, dtype, cores, target, skip)
    kernel = codegen(func, target.spec)
    compiled = time.perf_counter()

    cfg = target.config
    block = target.spec.params["CONV_BLOCK"]
    blocked = dops.block_weights(np.transpose(wt, (1, 2, 3, 0)), block)   # (cout/16, k, k, cin, 16)
    out_shape = tuple(sched.args[-1].shape)
    out_dt = NUMPY_DTYPES[CONV_DTYPES[dtype]]
    result, arrays = run_kernel(kernel, [x, blocked, np.zeros(out_shape, out_dt)], config=target)
    simulated = time.perf_counter()

    got = arrays[-1].reshape(out_shape)
    exact = reference.conv2d(x, wt, conv.s, conv.p, layout="HWC")
    want = exact.astype(np.int64).astype(out_dt) if np.dtype(out_dt).kind == "i" else exact.astype(out_dt)
    validated = conv2d_matches(got, x, wt, conv.s, conv.p)
    err = float(np.max(np.abs(got.astype(np.float64) - exact))) if got.size else 0.0
    roof = conv2d_roofline(conv, dtype, cores, target)
    params = {"shape": list(shape), "dtype": dtype, "cores": cores, "tile": sched.tile, "config": cfg.name,
              "skip": sorted(skip), "cores_used": sched.cores, "H": h, "W": w, "IC": cin, "OC": conv.oc,
              "K": conv.k, "S": conv.s, "P": conv.p}
    exactly = "bit-exact with numpy" if np.dtype(out_dt).kind == "i" else "within the f32 summation bound"
    detail = exactly if validated else f"max |err| {err:.3g} against numpy"
    return _report("conv2d", params, func, kernel, result, (validated, err, detail), roof,
                   (start, compiled, simulated), got, want)


def compile_conv2d(conv: ConvShape, dtype: str, cores: int, target: Target,
                   skip: Collection[str] = ()) -> tuple[dops.DiannaoSchedule, ir.PrimFunc]:
    """The conv2d schedule for the DianNao card and the ``diannao`` pipeline's output (less ``skip``); use
    ``compiler.passes.tensorize.unmatched`` on the function to see what stayed scalar without simulating."""
    try:
        sched = dops.conv2d(conv.h, conv.w, conv.ic, conv.oc, conv.k, conv.s, conv.p, dtype, cores,
                            spec=target.spec)
    except ScheduleError as e:
        raise RunError(str(e)) from None
    return sched, compile_func(lower(sched.schedule, list(sched.args), "conv2d"), target, skip=tuple(skip))


def conv2d_matches(out: np.ndarray, x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> bool:
    """Whether the card's conv ``out`` is numpy's: bit-exact for an integer output (i32 sums wrap like the
    card's), within ``conv2d_within_bound`` for a float one."""
    if out.dtype.kind == "i":
        want = reference.conv2d(x, wt, stride, pad, layout="HWC").astype(out.dtype)
        return out.shape == want.shape and bool(np.array_equal(out, want))
    return conv2d_within_bound(out, x, wt, stride, pad)


def conv2d_within_bound(out: np.ndarray, x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> bool:
    """Whether the float conv ``out`` is within the error of summing n = k*k*cin products in f32 in any order
    and rounding once to out's dtype: |out - exact| <= (n + 2) 2**-24 sum|x w| + u |exact| + tiny, with
    u = 2**-11 for f16 outputs and 0 for f32."""
    exact = reference.conv2d(x, wt, stride, pad, layout="HWC")
    magnitude = reference.conv2d(np.abs(x), np.abs(wt), stride, pad, layout="HWC")
    n = wt.shape[1] * wt.shape[2] * wt.shape[3]
    u, tiny = (2.0**-11, 2.0**-25) if out.dtype == np.float16 else (0.0, 2.0**-150)
    bound = (n + 2) * 2.0**-24 * magnitude * (1 + u) + u * np.abs(exact) + tiny
    return out.shape == exact.shape and bool((np.abs(out.astype(np.float64) - exact) <= bound).all())


def conv2d_roofline(conv: ConvShape, dtype: str, cores: int, target: Target) -> int:
    """The fewest cycles the card could take for a conv layer: the tensor units of all cores share the MACs
    evenly, and the input, weights and output cross GMEM once."""
    params, config = target.spec.params, target.config
    size = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    tfu = math.ceil(conv.macs * size / (2 * params["TFU_MACS_PER_CYCLE"]) / cores)
    out_size = np.dtype(NUMPY_DTYPES[CONV_DTYPES[dtype]]).itemsize
    traffic = ((conv.h * conv.w * conv.ic + conv.oc * conv.k * conv.k * conv.ic) * size
               + conv.oh * conv.ow * conv.oc * out_size)
    return max(tfu, math.ceil(traffic / config.gmem_bytes_per_cycle))


def roofline_cycles(op: str, elements: int, dtype: str, cores: int, target: Target) -> int:
    """The fewest cycles the card could take: every operand crosses GMEM once (its port is shared by all
    cores), and each core's vector unit handles its share at VFU_BYTES_PER_CYCLE."""
    params, config = target.spec.params, target.config
    size = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    operands = 2 if op == "relu" else 3
    gmem = math.ceil(operands * elements * size / config.gmem_bytes_per_cycle)
    vector = math.ceil(math.ceil(elements / cores) * size / params["VFU_BYTES_PER_CYCLE"])
    return max(gmem, vector)


def _given_inputs(op: str, inputs: Sequence[np.ndarray], count: int, n: int, dtype: str) -> list[np.ndarray]:
    """The caller's ``inputs``, flattened, after checking their number, sizes and dtype (RunError if not)."""
    if len(inputs) != count:
        raise RunError(f"DianNao {op}: expected {count} input array(s), but got {len(inputs)}")
    flat = []
    for k, x in enumerate(inputs):
        x = np.asarray(x)
        if x.size != n or x.dtype != NUMPY_DTYPES[dtype]:
            raise RunError(f"DianNao {op}: input {k}: expected {n} elements of {dtype}, but got {x.size} "
                           f"elements of {x.dtype}")
        flat.append(x.reshape(-1))
    return flat


def _random(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    dt = np.dtype(NUMPY_DTYPES[dtype])
    if dt.kind == "i":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dt)
    return rng.standard_normal(n).astype(dt)
