"""``tandem compile gemm|conv2d --target arm``: UNIT's schedules tensorized onto the arm spec's sdot.

UNIT (CGO 2021) tensorizes onto ARM DOT (Sec. III.A) with the same rewriter as onto AVX-512 VNNI, and
TensorIR targets the same sdot; here the same code does both. ``compile_arm`` schedules the int8 x int8
GEMM or conv2d of ``compiler.ops.cpu`` (isa ``arm-dot``: the blocking of the spec's first instruction whose
semantics sum i8 x i8 products into int32 lanes, sdot_v4i32 in the built-in spec: 4 lanes of 4 products),
runs the ``arm`` pipeline (the CPU's passes; ``tensorize`` selects the instruction through the one matcher)
and compiles the result with the CPU's LLVM code generator for the target's triple
(``compiler.backend.llvm_cross``: object code and assembly, the spec's intrinsic and features).

What it checks without an ARM machine: ``interpreted`` runs the compiled loop IR (tensor instructions
included, executed by their spec semantics) in the reference interpreter on seeded inputs and compares with
numpy, bit for bit. ``emulated`` runs the object code itself under ``qemu-aarch64`` where it is installed
(``compiler.backend.llvm_qemu``) and says why not where it is not. Nothing is timed: an emulator's time says
nothing about an ARM core's.

Parameters (``-p``): gemm ``M N K`` (16 each by default), conv2d ``H W IC OC K S P`` (as ``tandem run``);
``parallel``, ``unroll_oc`` and ``unroll_x`` (UNIT's breaking points, ``compiler.ops.cpu.CpuTuning``; by
default the first of ``tandem.flows.cpu_tuning.tuning_space`` for the instruction's lanes); ``seed`` (of the
checks' inputs, 0 by default). Bad input is a ``RunError`` naming the parameter.

``tandem compile --target arm`` calls ``compile_options`` (its options as text: ``WorkloadError`` for a bad
option) and, with ``--run``, ``run_checks``; the command line only prints what they return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler import interp
from compiler.analysis.issued import issued_instructions
from compiler.backend.llvm_cross import CrossObject, cross_build
from compiler.backend.llvm_qemu import run_emulated, unavailable
from compiler.errors import IRTypeError, ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.ops import cpu
from compiler.ops.nn import GemmShape
from compiler.pipeline import compile_func
from compiler.target import Target
from tandem.flows import cpu_layers
from tandem.flows.check import Check, compare
from tandem.flows.cpu_layers import DEFAULT_OPTIONS, CpuOptions, Layer
from tandem.flows.cpu_tuning import tuning_space
from tandem.flows.flow import CONV_KEYS, GEMM_KEYS, RunError, reject_unknown, take_conv, take_gemm, take_int
from tandem.flows.params import WorkloadError, int_param, parse_params

OPS = ("gemm", "conv2d")
ISA = "arm-dot"
TUNING_KEYS = ("parallel", "unroll_oc", "unroll_x")
SEED = 0


@dataclass(frozen=True)
class ArmBuild:
    """A compiled layer: its schedule, the loop IR after the pipeline (and after each step), the object."""

    layer: Layer
    schedule: cpu.CpuSchedule
    func: ir.PrimFunc
    stages: tuple[tuple[str, str], ...]
    obj: CrossObject
    seed: int = SEED   # of the inputs ``interpreted`` and ``emulated`` draw
    options: CpuOptions = DEFAULT_OPTIONS   # the element type

    @property
    def issued(self) -> dict[str, int]:
        """Tensor instructions issued per call: the product of the loop extents around each (an upper bound
        where a tile's tail is guarded)."""
        return issued_instructions(self.func)

    def mnemonic_counts(self) -> dict[str, int]:
        """How many times each tensor instruction's mnemonic (its name up to ``_``: ``sdot``) appears in the
        segments' assembly: the static count after LLVM's unrolling."""
        text = "\n".join(self.obj.function(s.name) for s in self.obj.segments)
        words = [line.split()[0] for line in text.splitlines() if line.strip() and line.startswith("\t")]
        return {name: words.count(name.split("_")[0]) for name in self.issued}


def compile_arm(op: str, params: Mapping[str, Any], target: Target, dtype: str = "int8") -> ArmBuild:
    """Schedule ``op`` with ``params`` (integers) for ``target`` (kind ``arm``), run its pipeline, keeping
    the printed IR after each step, and compile the result for the target's triple."""
    if target.kind != "arm" or target.triple is None:
        raise RunError(f"compile_arm compiles for the arm target, not {target.kind!r}")
    if op not in OPS:
        raise RunError(f"arm: no schedule for operator {op!r}; the arm target compiles {', '.join(OPS)} "
                       f"(UNIT's schedules, tensorized onto the spec's dot product)")
    if dtype not in cpu.DTYPES:
        raise RunError(f"arm {op}: dtype {dtype!r} is not compiled; expected one of {', '.join(cpu.DTYPES)} "
                       f"(int8: s8 x s8, sdot's)")
    where, given = f"arm {op}", dict(params)
    if op == "gemm":
        layer, keys = GemmShape(*take_gemm(given, where)), GEMM_KEYS
    else:
        layer, keys = take_conv(given, where), CONV_KEYS
    options = CpuOptions(dtype)
    chosen = {key: take_int(given, key, None, 1, where) for key in TUNING_KEYS}
    seed = take_int(given, "seed", SEED, 0, where)
    reject_unknown(given, (*keys, *TUNING_KEYS), where)
    try:
        pk = cpu.packing(ISA, dtype, target.spec)
        tuning = tuning_space(layer, pk.lanes)[0]
        tuning = cpu.CpuTuning(**{k: v if v is not None else getattr(tuning, k) for k, v in chosen.items()})
        sched = cpu_layers.schedule(layer, ISA, tuning, target, options)
    except ScheduleError as exc:
        raise RunError(f"{where}: {exc}") from None
    stages: list[tuple[str, str]] = []
    func = compile_func(lower(sched.schedule, sched.args, f"{op}_arm"), target,
                        dump=lambda name, f: stages.append((name, str(f))))
    return ArmBuild(layer, sched, func, tuple(stages), cross_build(func, target.triple), seed, options)


def packed_inputs(build: ArmBuild, seed: int | None = None) -> tuple[tuple[np.ndarray, np.ndarray], list]:
    """Seeded data and weights in the plain layout, and the kernel's arguments (packed, output zeroed);
    ``seed`` by default the build's."""
    plain = cpu_layers.inputs(build.layer, build.seed if seed is None else seed, build.options)
    packed = cpu_layers.pack(build.layer, *plain, build.schedule.packing, options=build.options)
    return plain, [*packed, np.zeros(build.func.params[-1].shape, np.int32)]


def interpreted(build: ArmBuild, seed: int | None = None) -> Check:
    """The compiled loop IR run by the reference interpreter (each sdot by its spec semantics) vs numpy."""
    plain, args = packed_inputs(build, seed)
    interp.run(build.func, args)
    return compare(cpu_layers.unpack(build.layer, args[-1]), cpu_layers.reference(build.layer, *plain),
                   dtypes.int32)


def emulated(build: ArmBuild, seed: int | None = None) -> Check | str:
    """The object code run under qemu vs numpy, or why it cannot run here (no emulator or linker)."""
    reason = unavailable(build.obj.triple)
    if reason is not None:
        return reason
    plain, args = packed_inputs(build, seed)
    run_emulated(build.obj, args)
    return compare(cpu_layers.unpack(build.layer, args[-1]), cpu_layers.reference(build.layer, *plain),
                   dtypes.int32)


def compile_options(op: str, shape: str | None, dtype: str | None, params: Sequence[str], target: Target
                    ) -> ArmBuild:
    """``tandem compile --target arm``'s options compiled by ``compile_arm``: the layer as ``-p KEY=VALUE``
    (integers; no ``--shape``), an integer ``--dtype`` (int8 by default). WorkloadError for a bad option,
    RunError for a bad parameter."""
    if shape is not None:
        raise WorkloadError("--shape", f"target {target.kind!r} takes the layer as -p (gemm: M, N, K; "
                                       "conv2d: H, W, IC, OC, K, S, P)")
    try:
        element = dtypes.dtype(dtype or "int8").name
    except IRTypeError:
        raise WorkloadError("--dtype", f"expected int8, uint8 or int16, but got {dtype!r}") from None
    values = {k: int_param(k, v, None) for k, v in parse_params(params).items()}
    return compile_arm(op, values, target, element)


def run_checks(build: ArmBuild) -> list[tuple[str, Check | str]]:
    """``--run``'s checks by name: the interpreter's, then qemu's (or why it cannot run here)."""
    return [("interpreter", interpreted(build)), (f"qemu ({build.obj.triple})", emulated(build))]
