"""TensorIR's operator kinds (``compiler/ops/contractions.py``: conv1d, conv3d, dilated, grouped and
transposed convolution, batch matmul) on a target that compiles a GEMM: the part of the one ``tandem run``
flow every such target shares.

The operator's iterators are fused onto a GEMM's by characteristic vectors (``compiler.passes.reindex``,
TensorIR Sec. 4.2); the operands are reindexed on the host (the layout transform), every outer iteration (a
group, a batch) runs the one GEMM kernel the target's own GEMM flow compiled, and the output is restored to
the plain layout. A target contributes a subclass: the GEMM it maps onto (``mapping``), how its GEMM flow
takes and returns operands (``pack``, ``unpack``), its epilogue (``finish``), its options and its roofline,
and whether a GEMM runs transposed (``transposed``: weights by data, when the target's lanes would be mostly
padding otherwise and its data and weights have the same type).
"""

from __future__ import annotations

import dataclasses
import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.errors import ScheduleError
from compiler.ops import contractions
from compiler.passes.reindex import IntrinsicMapping, canonical_gemm, map_to_intrinsic
from compiler.target import Target
from sim.core.energy import summed
from tandem.flows.flow import GEMM_KEYS, Execution, RunError, TargetFlow, reject_unknown, take_int

#: the value range of each element type the kinds take
RANGES = {"int8": (-128, 128), "uint8": (0, 256), "int16": (-2**15, 2**15)}


@dataclass(frozen=True)
class ContractionJob:
    """One operator mapped onto a GEMM that runs ``mapping.outer_extent`` times (``gemm``: the target's GEMM
    flow's job)."""

    op: contractions.Contraction
    mapping: IntrinsicMapping
    gemm: Any
    mnk: tuple[int, int, int]        # the mapping's GEMM: rows (M), columns (N), reduction (K)
    options: dict[str, Any]
    transposed: bool = False         # run as the N x M GEMM of weights by data, its output transposed back
    kernel: str = "gemm"             # the GEMM flow's operator that ran it

    @property
    def candidates(self) -> Sequence[Any]:
        return self.gemm.candidates

    @property
    def run_mnk(self) -> tuple[int, int, int]:
        """The GEMM the target runs: ``mnk``, or its transpose."""
        m, n, k = self.mnk
        return (n, m, k) if self.transposed else (m, n, k)


class ContractionFlow(TargetFlow):
    """The shared steps; see the module docstring for what a target's subclass provides."""

    gemm_flow: TargetFlow
    options: tuple[str, ...] = ()    # run() parameters passed on to the GEMM flow

    @abstractmethod
    def mapping(self, op: contractions.Contraction, target: Target, where: str) -> IntrinsicMapping:
        """The mapping of ``op`` onto the target's GEMM (RunError saying why there is none)."""

    @abstractmethod
    def dtypes(self, options: dict[str, Any]) -> tuple[str, str]:
        """The data and weight element types for the GEMM flow's ``options``."""

    def pack(self, job: ContractionJob, data: np.ndarray, weight: np.ndarray, target: Target
             ) -> list[np.ndarray]:
        """One GEMM's [M, K] data and [N, K] weights as the GEMM flow takes its inputs: by default as they
        are (contiguous)."""
        return [np.ascontiguousarray(data), np.ascontiguousarray(weight)]

    def unpack(self, job: ContractionJob, output: np.ndarray) -> np.ndarray:
        """The GEMM flow's output as the [M, N] result: by default as it is."""
        return output

    def finish(self, job: ContractionJob, exact: np.ndarray) -> np.ndarray:
        """The operator's exact result as the target's kernel outputs it (its epilogue, its type): by default
        the int32 sums, which wrap like numpy's cast."""
        return exact.astype(np.int32)

    @abstractmethod
    def check_size(self, job_shape: tuple[int, int, int, int], target: Target, where: str) -> None:
        """RunError when ``(count, m, n, k)`` GEMMs are more work than the target allows."""

    def kernel(self, kind: str, mnk: tuple[int, int, int], target: Target, options: dict[str, Any]) -> str:
        """The GEMM flow's operator for a mapping of ``kind`` ("gemm"): by default ``kind``."""
        return kind

    def transposed(self, mnk: tuple[int, int, int], target: Target, options: dict[str, Any]) -> bool:
        """Whether to run the GEMM transposed, weights by data (a target whose data and weights have the same
        type may: ``pads_less_transposed``). By default not."""
        return False

    def plan(self, op: str, params: dict[str, Any], target: Target) -> ContractionJob:
        where = f"{target.kind} {op}"
        options = {key: params.pop(key) for key in self.options if key in params}
        operator = contraction_of(op, params, self.dtypes(options), where, self.options)
        mapping = self.mapping(operator, target, where)
        data, weight = (mapping.layouts[name] for name in _inputs(mapping))
        if len(weight) != 2 or data != (data[0], weight[1]):
            raise RunError(f"{where}: {mapping.instruction} is no GEMM of [rows, k] x [cols, k] operands "
                           f"({mapping})")
        kind = "gemm"   # the GEMM flow's operator
        mnk = (mapping.extent(data[0]), mapping.extent(weight[0]), mapping.extent(weight[1]))
        self.check_size((mapping.outer_extent, *mnk), target, where)
        transposed = self.transposed(mnk, target, options)
        shape = ContractionJob(operator, mapping, None, mnk, options, transposed).run_mnk
        kernel = self.kernel(kind, mnk, target, options)
        gemm = self.gemm_flow.plan(kernel, {**dict(zip(GEMM_KEYS, shape, strict=True)), **options}, target)
        return ContractionJob(operator, mapping, gemm, mnk, options, transposed, kernel)

    def inputs(self, job: ContractionJob, rng: np.random.Generator) -> list[np.ndarray]:
        return contraction_inputs(job.op, rng)

    def check_inputs(self, job: ContractionJob, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        return check_contraction_inputs(job.op, given)

    def compile(self, job: ContractionJob, candidate: Any, target: Target) -> Any:
        return self.gemm_flow.compile(job.gemm, candidate, target)

    def execute(self, job: ContractionJob, compiled: Any, inputs: list[np.ndarray], target: Target
                ) -> Execution:
        runs = [self.gemm_flow.execute(job.gemm, compiled, packed, target)
                for packed in self._problems(job, inputs, target)]
        combined = repeated(runs, self._joined(job, [r.output for r in runs]), job.op.macs)
        return dataclasses.replace(combined, chosen={**combined.chosen, "gemms": len(runs)})

    def output(self, job: ContractionJob, compiled: Any, inputs: list[np.ndarray], target: Target
               ) -> np.ndarray:
        """Each GEMM called once, nothing measured: the operator's output."""
        return self._joined(job, [self.gemm_flow.output(job.gemm, compiled, packed, target)
                                  for packed in self._problems(job, inputs, target)])

    def _joined(self, job: ContractionJob, outputs: list[np.ndarray]) -> np.ndarray:
        """The GEMMs' outputs as the operator's, in its layout."""
        canonical = np.stack([self.unpack(job, out) for out in outputs])
        if job.transposed:
            canonical = canonical.transpose(0, 2, 1)
        return job.op.layout_out(job.mapping.restore(canonical))

    def cost(self, job: ContractionJob, compiled: Any, inputs: list[np.ndarray], target: Target) -> float:
        """Every GEMM runs the same kernel on operands of one shape: the first's cost, times their count."""
        first = self._problems(job, inputs, target, only_first=True)[0]
        return self.gemm_flow.cost(job.gemm, compiled, first, target) * job.mapping.outer_extent

    def reference(self, job: ContractionJob, inputs: list[np.ndarray]) -> np.ndarray:
        return self.finish(job, job.op.reference(*inputs))

    def params(self, job: ContractionJob, candidate: Any, target: Target) -> dict[str, Any]:
        gemm = self.gemm_flow.params(job.gemm, candidate, target)
        return {**job.op.params, **{k: v for k, v in gemm.items() if k not in GEMM_KEYS},
                "gemm": {**dict(zip(GEMM_KEYS, job.mnk, strict=True)), "count": job.mapping.outer_extent,
                         "transposed": job.transposed, "kernel": job.kernel},
                "mapping": str(job.mapping)}

    def tuned_entry(self, candidate: Any, cost: float) -> dict[str, Any]:
        return self.gemm_flow.tuned_entry(candidate, cost)

    def _problems(self, job: ContractionJob, inputs: list[np.ndarray], target: Target,
                  only_first: bool = False) -> list[list[np.ndarray]]:
        """Each GEMM's inputs: the operands reindexed, then packed for the GEMM flow."""
        arrays = {job.op.data.name: job.op.layout_data(inputs[0]),
                  job.op.weight.name: job.op.layout_weight(inputs[1])}
        data, weight = (job.mapping.reindex(arrays, name) for name in _inputs(job.mapping))
        if job.transposed:
            data, weight = weight, data
        return [self.pack(job, data[q], weight[q], target) for q in range(1 if only_first else len(data))]


def contraction_of(op: str, params: dict[str, Any], dtypes: tuple[str, str], where: str,
                   options: Sequence[str] = ()) -> contractions.Contraction:
    """The operator ``op`` of ``params`` (each of its keys popped; any other key left is refused, the
    message listing the target's ``options`` too) on data and weights of ``dtypes``; RunError naming the
    parameter that is missing or makes it empty or impossible."""
    values = {key: take_int(params, key, default, 0 if key == "P" else 1, where)
              for key, default in contractions.KINDS[op].items()}
    missing = [key for key, value in values.items() if value is None]
    if missing:
        raise RunError(f"{where}: {missing[0]} must be given; {op} needs all of "
                       f"{', '.join(k for k, d in contractions.KINDS[op].items() if d is None)}")
    reject_unknown(params, (*contractions.KINDS[op], *options), where)
    try:
        return contractions.contraction(op, values, dtypes)
    except ScheduleError as exc:
        raise RunError(f"{where} {values}: {exc}") from None


def contraction_inputs(op: contractions.Contraction, rng: np.random.Generator) -> list[np.ndarray]:
    """Seeded data and weights of ``op`` in the plain layouts, each over its type's whole range."""
    types = (op.data.dtype.numpy, op.weight.dtype.numpy)
    return [rng.integers(*RANGES[np.dtype(t).name], shape).astype(t)
            for shape, t in zip(op.plain[:2], types, strict=True)]


def check_contraction_inputs(op: contractions.Contraction, given: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``given`` as arrays, RunError unless they are ``op``'s data and weights (shapes and types)."""
    arrays = [np.asarray(a) for a in given]
    want = [(s, np.dtype(t.dtype.numpy)) for s, t in zip(op.plain[:2], (op.data, op.weight), strict=True)]
    if [(tuple(a.shape), a.dtype) for a in arrays] != want:
        shown = [(list(s), str(d)) for s, d in want]
        raise RunError(f"{op.kind}: expected data and weights {shown}, but got "
                       f"{[(list(a.shape), str(a.dtype)) for a in arrays]}")
    return arrays


def canonical_mapping(op: contractions.Contraction, where: str) -> IntrinsicMapping:
    """The mapping of ``op`` onto the canonical GEMM of its element types (``reindex.canonical_gemm``), for
    a target whose GEMM is a schedule; RunError saying why when there is none."""
    found = map_to_intrinsic(op.out.op, *canonical_gemm(op.data.dtype.short, op.weight.dtype.short))
    if not isinstance(found, IntrinsicMapping):
        raise RunError(f"{where}: {found}")
    return found


def repeated(runs: Sequence[Execution], output: np.ndarray, macs: int) -> Execution:
    """One Execution of ``runs``, one compiled kernel run on the operands of each group or batch: ``output``,
    their cycles, measured seconds, DRAM bytes and energy summed, the first run's instruction counts times
    their number, and a measured rate (GOPS over the operator's ``macs``, each utilization of it against
    the measured peak) over the whole."""
    first = runs[0]
    measured, utilization = first.measured, first.utilization
    if "dram_bytes" in measured:
        measured = {**measured, "dram_bytes": sum(r.measured["dram_bytes"] for r in runs)}
    if "seconds" in measured:
        seconds = sum(r.measured["seconds"] for r in runs)
        gops = 2 * macs / seconds / 1e9 if measured.get("gops") is not None else None
        measured = {**measured, "seconds": seconds, "gops": gops}
        if gops and measured.get("peak_gops"):
            utilization = {name: gops / measured["peak_gops"] for name in utilization}
    return dataclasses.replace(
        first, output=output, cycles=sum(r.cycles for r in runs),
        instructions={name: count * len(runs) for name, count in first.instructions.items()},
        tensor_instructions=first.tensor_instructions * len(runs),
        scalar_instructions=first.scalar_instructions and first.scalar_instructions * len(runs),
        utilization=utilization, measured=measured, costs=summed([r.costs for r in runs if r.costs]))


def pads_less_transposed(mnk: tuple[int, int, int], row_block: int, lane_block: int) -> bool:
    """Whether the transposed GEMM (N rows, M columns) pads less than ``mnk`` on a GEMM whose rows come in
    ``row_block``s and columns in ``lane_block``s: a depthwise conv's one output channel (N = 1) or a
    transposed conv's three would use 1/16 or 3/16 of the lanes, its pixels (M) fill them."""
    m, n, _ = mnk

    def padded(rows: int, cols: int) -> int:
        return -(-rows // row_block) * row_block * -(-cols // lane_block) * lane_block

    return padded(n, m) < padded(m, n)


def _inputs(mapping: IntrinsicMapping) -> list[str]:
    """The intrinsic's input operands, in the order its semantics reads them (data, then weights)."""
    return [name for name in mapping.layouts if name != mapping.output]


def plain_traffic(job: ContractionJob) -> int:
    """Elements of the plain data, weights and output: the compulsory traffic of the operator."""
    return sum(math.prod(shape) for shape in job.op.plain)
