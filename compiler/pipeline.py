"""The table of contents: for each target, the passes that turn lowered loop IR into its final form.

Read this file to find where a change belongs. ``compile_func`` runs a target's passes in order, handing the
passes that select or place instructions the target's ISA spec (``compiler.target.Target``: the spec is a
value with the machine's parameters applied, never looked up by name); after
each one it runs the verifier for the stage the pass leaves the program in (on by default; set
``TANDEM_VERIFY=0`` to skip) and hands the program to ``dump`` when one is given
(``tandem compile ... --dump-passes``).

Targets:
- ``reference``: simplify, then flatten to one-dimensional buffers — what the interpreter and the
  LLVM backend consume.
- ``diannao``: seed 001's flow: flatten, fold an element-wise stage into the NMEM tile it reads (``inplace``:
  a conv's ReLU epilogue becomes the in-place ``relu``), fold padding into zero-fill + copy (Alg. 1's padding
  case, before partitioning cuts the padded copy apart), partition loops to remove guards (Alg. 2), simplify,
  preprocess marked statements against instruction constraints (Alg. 1), partition again (preprocessing turns
  a padded copy into a guarded one), select tensor instructions (Sec. IV-D), and let one core per cluster fill
  the SMEM tiles its cluster shares (the two-level tiling of Sec. V), and pipeline the tile loops a schedule
  marks (``double_buffer``: the next tile's copies issued asynchronously while the core computes, TVM's
  InjectDoubleBuffer; consecutive SMEM tiles' shared rows copied on chip, ``reuse_rows``), and fill a buffer
  that is read part by part as it is read (``stream_copies``: a conv's weights by kernel rows), load what
  every cluster fills alike once for the card, sending it between the clusters' SMEMs (``share_card``), and
  issue a pipeline's first tile fill before the copies that precede it (``hoist_fill``).
  ``compiler.backend.diannao`` turns the
  result into an SPMD program. ``skip`` drops passes by name (``loop_partition``, ``preprocess``) to measure
  what each one buys.
- ``vita``: TVM Sec. 3.4-3.5's flow for VITA: flatten, fold the epilogue stages into the accumulator
  (``inplace``), turn marked copies into 2-D DMA loads and stores with padding (``inject_dma``), select
  GEMM/ALU tile instructions (``tensorize_tiles``), fuse each reduction's init and epilogue into its first
  and last GEMM steps where the spec has instructions for them (``fuse_reduction_ends``), lift each
  loop body's allocations to its start so that its statements share one list (``lift_alloc``), add the
  dependency tokens between the load, compute and store units (``inject_sync``, per virtual thread), then
  give each virtual thread its own buffers and interleave the threads into one stream
  (``inject_virtual_thread``), and simplify the addresses the threads' numbers made constant.
  ``compiler.backend.vita`` emits the program.
- ``cpu``: UNIT's flow for x86 (Sec. III.C): the schedule (``compiler.ops.cpu``) already tiled and marked
  the loops the Inspector mapped; simplify, partition the loops whose tiles do not divide the layer (seed
  001's Alg. 2: the tail becomes its own guard-free copy, where UNIT leaves a ``likely`` guard around every
  instruction), replace each marked nest by its instruction with its operands' views (``tensorize`` on the
  x86 spec), simplify the offsets. ``compiler.backend.llvm`` compiles the
  result for this CPU.
- ``arm``: the ``cpu`` passes, with the AArch64 spec (UNIT's ARM DOT, sdot); ``compiler.backend.llvm_cross``
  compiles the result to AArch64 object code.
- ``cuda``: UNIT's flow for NVIDIA Tensor Cores (Sec. V.E): the schedule (``compiler.ops.cuda``) writes the
  kernel's loop IR itself (thread bindings, shared tiles, fragments) with each Tensor Core nest marked;
  ``tensorize_registers`` replaces each marked nest by the spec's instruction. ``compiler.backend.nvptx``
  compiles the result to PTX.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from compiler.errors import LoweringError
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.passes import (
    double_buffer,
    flatten,
    fold_padding,
    fuse_reduction_ends,
    hoist_fill,
    inject_dma,
    inject_sync,
    inject_virtual_thread,
    inplace,
    lift_alloc,
    loop_partition,
    preprocess,
    share_card,
    share_smem,
    simplify,
    stream_copies,
    tensorize,
    tensorize_registers,
    tensorize_tiles,
)
from compiler.schedule import Schedule
from compiler.target import Target
from compiler.te import Tensor
from compiler.verify import verify


@dataclass(frozen=True)
class Pass:
    """One step of a pipeline: ``fn`` maps a function to a function in verifier stage ``stage``; a pass
    with ``spec`` set is called as ``fn(func, spec)`` with the target's ISA spec."""

    name: str
    fn: Callable[..., ir.PrimFunc]
    stage: str
    group: str = ""  # the name ``skip`` knows it by, when it repeats a pass (default: its own name)
    spec: bool = False

    def __call__(self, func: ir.PrimFunc, target: Target) -> ir.PrimFunc:
        return self.fn(func, target.spec) if self.spec else self.fn(func)

    @property
    def skip_name(self) -> str:
        return self.group or self.name

    @property
    def flag(self) -> str:
        """The kebab-case name used on the command line."""
        return self.name.replace("_", "-")


PIPELINES: dict[str, tuple[Pass, ...]] = {
    "reference": (
        Pass("simplify", simplify, "loop-ir"),
        Pass("flatten", flatten, "flat"),
    ),
    "diannao": (
        Pass("simplify", simplify, "loop-ir"),
        Pass("flatten", flatten, "flat"),
        Pass("inplace", inplace, "flat"),
        Pass("fold_padding", fold_padding, "flat", group="preprocess", spec=True),
        Pass("loop_partition", loop_partition, "flat"),
        Pass("simplify_partitioned", simplify, "flat"),
        Pass("preprocess", preprocess, "flat", spec=True),
        Pass("loop_partition_preprocessed", loop_partition, "flat", group="loop_partition"),
        Pass("simplify_preprocessed", simplify, "flat"),
        Pass("tensorize", tensorize, "flat", spec=True),
        Pass("share_smem", share_smem, "flat"),
        Pass("double_buffer", double_buffer, "flat", spec=True),
        Pass("stream_copies", stream_copies, "flat", spec=True),
        Pass("share_card", share_card, "flat", spec=True),
        Pass("hoist_fill", hoist_fill, "flat", spec=True),
    ),
    "vita": (
        Pass("simplify", simplify, "loop-ir"),
        Pass("flatten", flatten, "flat"),
        Pass("inplace", inplace, "flat"),
        Pass("inject_dma", inject_dma, "flat", spec=True),
        Pass("tensorize_tiles", tensorize_tiles, "flat", spec=True),
        Pass("fuse_reduction_ends", fuse_reduction_ends, "flat", spec=True),
        Pass("lift_alloc", lift_alloc, "flat"),
        Pass("inject_sync", inject_sync, "flat", spec=True),
        Pass("inject_virtual_thread", inject_virtual_thread, "flat", spec=True),
        Pass("simplify_threads", simplify, "flat", group="simplify"),
    ),
    "cpu": (
        Pass("simplify", simplify, "loop-ir"),
        Pass("loop_partition", loop_partition, "loop-ir"),
        Pass("simplify_partitioned", simplify, "loop-ir", group="simplify"),
        Pass("tensorize", tensorize, "loop-ir", spec=True),
        Pass("simplify_tensorized", simplify, "loop-ir", group="simplify"),
    ),
    "cuda": (
        Pass("tensorize_registers", tensorize_registers, "loop-ir", spec=True),
    ),
}
PIPELINES["arm"] = PIPELINES["cpu"]   # UNIT's flow is the same; only the spec (and LLVM's triple) differ
OPTIONAL = frozenset({"loop_partition", "preprocess", "double_buffer", "stream_copies", "hoist_fill",
                      "share_card"})

Dump = Callable[[str, ir.PrimFunc], None]


def _verify_enabled(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    return os.environ.get("TANDEM_VERIFY", "1") != "0"


def passes_for(target: str, skip: Collection[str] = ()) -> tuple[Pass, ...]:
    """The ordered passes of target kind ``target``, without those named in ``skip`` (only OPTIONAL ones
    may go)."""
    try:
        passes = PIPELINES[target]
    except KeyError:
        raise LoweringError(
            f"unknown target {target!r}; expected one of {', '.join(sorted(PIPELINES))}"
        ) from None
    names = {p.skip_name for p in passes}
    for name in skip:
        if name not in OPTIONAL or name not in names:
            can = ", ".join(sorted(OPTIONAL & names)) or "none"
            raise LoweringError(f"target {target!r} cannot skip pass {name!r}; optional passes: {can}")
    return tuple(p for p in passes if p.skip_name not in skip)


def compile_func(
    func: ir.PrimFunc,
    target: Target | str = "reference",
    *,
    verify_each: bool | None = None,
    dump: Dump | None = None,
    skip: Collection[str] = (),
) -> ir.PrimFunc:
    """Run ``target``'s passes (less ``skip``) on a lowered function, verifying (and dumping) after each.

    ``target`` is a ``Target``; a name is accepted only for the ``reference`` pipeline, which needs no spec.
    """
    if isinstance(target, str):
        target = Target(target)
    check = _verify_enabled(verify_each)
    if check:
        verify(func, "loop-ir", after="lower")
    if dump is not None:
        dump("lower", func)
    for p in passes_for(target.kind, skip):
        func = p(func, target)
        if check:
            verify(func, p.stage, after=p.name)
        if dump is not None:
            dump(p.name, func)
    return func


def build(
    schedule: Schedule,
    args: Sequence[Tensor],
    name: str = "main",
    target: Target | str = "reference",
    *,
    verify_each: bool | None = None,
    dump: Dump | None = None,
    skip: Collection[str] = (),
) -> ir.PrimFunc:
    """Lower ``schedule`` and run ``target``'s pipeline (less ``skip``) on it."""
    return compile_func(lower(schedule, args, name), target, verify_each=verify_each, dump=dump, skip=skip)
