"""The ``tandem run --target vita`` flow: schedule an int8 conv2d or GEMM for VITA, compile it, simulate it
on sim/vita and compare with numpy bit for bit.

``run_vita`` returns the same ``RunReport`` as the DianNao target (the ``--json`` contract of tandem/run.py);
for VITA:

- ``params``: the layer (H, W, IC, OC, K, S, P, or M, N, K for gemm), ``vthreads``, the ``tiling`` used
  (rows, oc_block, ic_block, vthreads, vthread_axis), the config and the ``tuned`` candidates measured;
- ``instructions`` counts the emitted instructions by name (each runs once: VITA has no branches), and
  ``scalar_fallback`` is 0 (VITA cannot run scalar code; a statement the passes cannot map is a compile
  error instead);
- ``utilization``: the GEMM core's busy cycles over all cycles ("gemm") and each unit's busy share;
- ``roofline_cycles``: the simulated machine's bound for the layer, the larger of its multiply-adds at the
  GEMM core's peak and its compulsory DRAM traffic (input, weights, output once) at the DRAM bandwidth.

``tune_tiling`` compiles and simulates the ``top`` tilings that ``compiler.ops.vita.estimate_cycles`` ranks
first and keeps the fastest: a measured search over the model's short list (timing does not depend on the
data, so candidates run on zeros).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np

import isa
from compiler.backend.vita import VitaKernel, build_vita
from compiler.errors import ScheduleError
from compiler.ops import vita
from compiler.passes import check_token_order
from compiler.pipeline import build
from compiler.target import Target
from sim.vita.config import VitaConfig, peak_macs_per_cycle
from sim.vita.machine import VitaResult, simulate
from tandem.run import RunError, RunReport
from tandem.targets import as_target

DEFAULT_CONFIG = "vta-default"


@dataclass(frozen=True)
class VitaLayer:
    """What ``run_vita`` runs: a conv2d layer, or a GEMM of m x k data with n x k weights."""

    op: str
    conv: vita.ConvShape

    @staticmethod
    def conv2d(h: int, w: int, ic: int, oc: int, k: int = 3, s: int = 1, p: int = 1, n: int = 1) -> VitaLayer:
        return VitaLayer("conv2d", vita.ConvShape(h, w, ic, oc, k, s, p, n))

    @staticmethod
    def gemm(m: int, n: int, k: int) -> VitaLayer:
        return VitaLayer("gemm", vita.ConvShape(m, 1, k, n, 1, 1, 0))   # dense is conv2d of m x 1, 1 x 1

    @property
    def params(self) -> dict[str, int]:
        c = self.conv
        if self.op == "gemm":
            return {"M": c.h, "N": c.oc, "K": c.ic}
        images = {"N": c.n} if c.n != 1 else {}
        return {**images, "H": c.h, "W": c.w, "IC": c.ic, "OC": c.oc, "K": c.k, "S": c.s, "P": c.p}

    def tiled(self, spec: isa.ISA) -> vita.ConvShape:
        """The layer the schedule tiles on ``spec``'s machine (a GEMM's rows come in batch blocks)."""
        c = self.conv
        return vita.dense_shape(c.h, c.oc, c.ic, spec) if self.op == "gemm" else c

    def schedule(self, tiling: vita.Tiling, spec, relu: bool = False, shift: int = 8) -> vita.VitaSchedule:
        c = self.conv
        if self.op == "gemm":
            return vita.dense(c.h, c.oc, c.ic, shift, relu, tiling, tiling.vthreads, spec=spec)
        return vita.conv2d(c, shift, relu, tiling, tiling.vthreads, spec=spec)

    def reference(self, inputs: list[np.ndarray], relu: bool = False, shift: int = 8) -> np.ndarray:
        if self.op == "gemm":
            return vita.dense_reference(*inputs, shift, relu)
        return vita.conv2d_reference(*inputs, self.conv, shift, relu)

    def dram_bytes(self) -> int:
        """Compulsory DRAM traffic in bytes: int8 input, weights and output, each once."""
        c = self.conv
        return c.n * c.h * c.w * c.ic + c.oc * c.ic * c.k * c.k + c.n * c.oh * c.ow * c.oc


def _one_uop_timing(spec: isa.ISA, name: str) -> tuple[int, int]:
    """(latency, cycles) of instruction ``name`` of ``spec`` with one micro-op, from its timing."""
    _, latency, cycles = isa.timing_of(spec, spec.insn(name, uop_end=1, iter_out=1, iter_in=1))
    return latency or 0, cycles or 0


def machine_costs(target: Target) -> vita.MachineCosts:
    """The numbers the schedule's cost model uses: the spec's timing (DRAM bandwidth, the GEMM and ALU
    instructions' pipeline fill and the ALU's cycles per micro-op) and the config's DRAM latency."""
    gemm_fill, _ = _one_uop_timing(target.spec, "GEMM")
    alu_fill, alu_per_uop = _one_uop_timing(target.spec, "ALU_MAX")
    return vita.MachineCosts(dram_bytes_per_cycle(target), target.config.dram_latency_cycles,
                             max(gemm_fill, alu_fill), alu_per_uop)


def dram_bytes_per_cycle(target: Target) -> int:
    """The DRAM bandwidth of the target's machine (a spec parameter, which a config may override)."""
    return target.spec.params["DRAM_BYTES_PER_CYCLE"]


def roofline_cycles(layer: VitaLayer, target: Target) -> int:
    """The larger of the layer's MACs at the GEMM core's peak and its compulsory traffic at DRAM speed."""
    return max(math.ceil(layer.conv.macs / peak_macs_per_cycle(target.spec)),
               math.ceil(layer.dram_bytes() / dram_bytes_per_cycle(target)))


def compile_layer(layer: VitaLayer, tiling: vita.Tiling, target: Target, relu: bool = False
                  ) -> tuple[vita.VitaSchedule, VitaKernel]:
    """Schedule ``layer`` with ``tiling``, run the ``vita`` pipeline and emit the program; its tokens are
    checked against Theorem 3.1 (``check_token_order``)."""
    vs = layer.schedule(tiling, target.spec, relu)
    kernel = build_vita(build(vs.schedule, vs.args, target=target), target.spec)
    check_token_order(kernel.tokens)
    return vs, kernel


def tune_tiling(layer: VitaLayer, vthreads: int, target: Target, top: int = 4
                ) -> tuple[vita.Tiling, list[tuple[vita.Tiling, int]]]:
    """The fastest of the ``top`` tilings the cost model ranks first, by simulated cycles, and every
    candidate measured (tiling, cycles) in rank order."""
    ranked = vita.rank_tilings(layer.tiled(target.spec), vthreads, spec=target.spec,
                               costs=machine_costs(target))[:max(top, 1)]
    measured = []
    for t in ranked:
        vs, kernel = compile_layer(layer, t, target)
        zeros = [np.zeros(a.shape, np.int8) for a in vs.args[:2]]
        measured.append((t, simulate(kernel.program, kernel.dram_image(zeros), target.config).cycles))
    best = min(measured, key=lambda m: m[1])[0]
    return best, measured


def run_vita(layer: VitaLayer, vthreads: int = 0, config: str | VitaConfig | Target = DEFAULT_CONFIG,
             tiling: vita.Tiling | None = None, tune: int = 0, relu: bool = False, seed: int = 0,
             inputs: list[np.ndarray] | None = None) -> RunReport:
    """Compile ``layer`` for VITA with ``vthreads`` virtual threads (0: none), simulate it on ``config`` and
    compare with numpy. The tiling is ``tiling``, else the best of ``tune`` measured candidates when
    ``tune`` > 0, else the cost model's first choice. ``config`` is the target (its spec and machine
    config), or a machine config (object, name or file) to run with its spec."""
    start = time.perf_counter()
    target = as_target("vita", config)
    cfg = target.config
    if vthreads < 0:
        raise RunError(f"VITA: vthreads must be >= 0, but got {vthreads}")
    tuned: list[tuple[vita.Tiling, int]] = []
    try:
        if tiling is None and tune > 0:
            tiling, tuned = tune_tiling(layer, vthreads, target, tune)
        elif tiling is None:
            tiling = vita.choose_tiling(layer.tiled(target.spec), vthreads, spec=target.spec,
                                        costs=machine_costs(target))
    except ScheduleError as exc:
        raise RunError(f"VITA {layer.op} {layer.params}: {exc}") from None
    vs, kernel = compile_layer(layer, tiling, target, relu)
    compiled = time.perf_counter()
    if inputs is None:
        rng = np.random.default_rng(seed)
        inputs = [rng.integers(-128, 128, a.shape, dtype=np.int8) for a in vs.args[:2]]
    result = simulate(kernel.program, kernel.dram_image(inputs), cfg)
    simulated = time.perf_counter()
    out = kernel.read(result.dram, vs.args[-1].name).reshape(vs.args[-1].shape)
    want = layer.reference(inputs, relu)
    diff = int(np.max(np.abs(out.astype(np.int32) - want.astype(np.int32)))) if out.size else 0
    roof = roofline_cycles(layer, target)
    return RunReport(
        op=layer.op, target="vita",
        params={**layer.params, "vthreads": vthreads, "tiling": asdict(tiling), "config": cfg.name,
                "relu": relu, "seed": seed,
                "tuned": [{"tiling": asdict(t), "cycles": c} for t, c in tuned]},
        validated=diff == 0, max_abs_err=float(diff), cycles=result.cycles,
        instructions=dict(Counter(i.name for i in kernel.program.insns)),
        tensor_instructions=len(kernel.program.insns), scalar_instructions=0, scalar_fallback=0,
        unmatched=[], utilization=utilization(result),
        roofline_cycles=roof, roofline_pct=round(100.0 * roof / result.cycles, 2) if result.cycles else 0.0,
        compile_s=compiled - start, simulate_s=simulated - compiled, wall_s=time.perf_counter() - start,
        detail="bit-exact" if diff == 0 else f"{int(np.count_nonzero(out != want))} outputs differ",
        output=out, reference=want)


def utilization(result: VitaResult) -> dict[str, float]:
    """The GEMM core's busy share ("gemm") and each unit's ("load", "compute", "store")."""
    out = {"gemm": round(result.gemm_utilization, 4)}
    for unit in ("load", "compute", "store"):
        out[unit] = round(result.units[unit].busy / result.cycles, 4) if result.cycles else 0.0
    return out
