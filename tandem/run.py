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
from dataclasses import asdict, dataclass, field

import numpy as np

from compiler.backend.diannao import codegen
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from sim.diannao.config import DiannaoConfig, load_config
from tandem.diannao_run import run_kernel

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
                tile: int | None = None, config: str | DiannaoConfig = "default",
                skip: Collection[str] = (), seed: int = SEED,
                inputs: Sequence[np.ndarray] | None = None) -> RunReport:
    """Compile ``op`` on ``shape`` for the DianNao card, simulate it and compare with numpy.

    ``inputs`` are the operator's input arrays (A, B for a binary op; A for relu), each of ``prod(shape)``
    elements (any shape) and of ``dtype``; without them, random arrays drawn from ``seed``."""
    start = time.perf_counter()
    cfg = config if isinstance(config, DiannaoConfig) else load_config(config)
    if op not in ELEMENTWISE and op != "relu":
        raise RunError(f"DianNao: no schedule for operator {op!r}; expected one of "
                       f"{', '.join([*ELEMENTWISE, 'relu'])}")
    if dtype not in NUMPY_DTYPES:
        raise RunError(f"DianNao: unsupported dtype {dtype!r}; expected one of {', '.join(NUMPY_DTYPES)}")
    if cores > cfg.cores:
        raise RunError(f"DianNao: {cores} cores requested, but config {cfg.name!r} has {cfg.cores}")
    sched = dops.elementwise(op, shape, dtype, cores, tile)
    func = compile_func(lower(sched.schedule, list(sched.args), op), "diannao", skip=tuple(skip))
    kernel = codegen(func, cfg.spec())
    compiled = time.perf_counter()

    n = math.prod(shape)
    if inputs is None:
        rng = np.random.default_rng(seed)
        inputs = [_random(rng, n, dtype) for _ in sched.args[:-1]]
    else:
        inputs = _given_inputs(op, inputs, len(sched.args) - 1, n, dtype)
    result, arrays = run_kernel(kernel, [*inputs, np.zeros(n, NUMPY_DTYPES[dtype])], config=cfg)
    simulated = time.perf_counter()

    got = arrays[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.maximum(inputs[0], 0).astype(got.dtype) if op == "relu" else ELEMENTWISE[op](*inputs)
    validated = bool(np.array_equal(got, want, equal_nan=True))
    err = float(np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if n else 0.0
    roof = roofline_cycles(op, n, dtype, cores, cfg)
    return RunReport(
        op=op, target="diannao",
        params={"shape": list(shape), "dtype": dtype, "cores": cores, "tile": sched.tile, "config": cfg.name,
                "skip": sorted(skip)},
        validated=validated, max_abs_err=err, cycles=result.cycles, instructions=result.instructions,
        tensor_instructions=result.tensor_instructions, scalar_instructions=result.scalar_instructions,
        scalar_fallback=kernel.fallback_count(result.executed),
        unmatched=sorted({str(x) for x in unmatched(func)}),
        utilization={u: round(result.utilization(u), 4) for u in ("vfu", "tfu", "dma")},
        roofline_cycles=roof, roofline_pct=round(100.0 * roof / result.cycles, 2) if result.cycles else 0.0,
        compile_s=round(compiled - start, 4), simulate_s=round(simulated - compiled, 4),
        wall_s=round(time.perf_counter() - start, 4),
        detail="bit-exact with numpy" if validated else f"max |err| {err:.3g} against numpy",
        output=got, reference=want, program=str(kernel.program),
    )


def roofline_cycles(op: str, elements: int, dtype: str, cores: int, config: DiannaoConfig) -> int:
    """The fewest cycles the card could take: every operand crosses GMEM once (its port is shared by all
    cores), and each core's vector unit handles its share at VFU_BYTES_PER_CYCLE."""
    params = config.spec().params
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
