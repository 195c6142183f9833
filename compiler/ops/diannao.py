"""Default schedules for the DianNao target (seed 001 Sec. IV-A and V): split the work across the cores of
the card, tile each core's share by the capacity of its neuron memory, stage tiles through NMEM with marked
copies, and mark the compute for a vector instruction.

An element-wise operator over a contiguous tensor computes the same on its flat view, so the schedules work
on one dimension of ``prod(shape)`` elements: each of ``cores`` cores takes a contiguous share (``split
nparts``), which it walks in tiles (``split factor``). When the sizes do not divide, lowering leaves guards:
loop partitioning and preprocessing are what make the result tensorizable.

Marks name instructions loosely on purpose: a copy is marked ``"copy"`` and an add ``"add"``; the
instruction that matches is found from the isa/ semantics (``compiler.passes.tensorize``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import isa
from compiler import ops, te
from compiler.errors import ScheduleError
from compiler.schedule import Schedule, create_schedule

BINARY = {"add": ops.add, "sub": ops.sub, "mul": ops.mul, "maximum": ops.maximum}
UNARY = {"relu": ops.relu}


@dataclass(frozen=True)
class DiannaoSchedule:
    """A schedule with its argument tensors (inputs, then the output) and the tile it chose."""

    schedule: Schedule
    args: tuple[te.Tensor, ...]
    cores: int
    tile: int


def tile_elements(elements_per_core: int, buffers: int, itemsize: int, spec: isa.ISA | None = None) -> int:
    """The tile (elements) that fits ``buffers`` NMEM buffers, balanced over the tiles of a core's share and
    rounded up to the vector unit's element multiple (VECTOR_ELEMS) unless that would exceed the share."""
    spec = spec or isa.load_isa("diannao")
    vec = spec.params["VECTOR_ELEMS"]
    align = spec.params["VECTOR_ALIGN"]
    per_buffer = spec.params["NMEM_BYTES"] // buffers // align * align
    max_tile = per_buffer // itemsize // vec * vec
    if max_tile < vec:
        raise ScheduleError(f"DianNao: {buffers} buffers of {vec} elements do not fit NMEM")
    tiles = math.ceil(elements_per_core / max_tile)
    rounded = math.ceil(math.ceil(elements_per_core / tiles) / vec) * vec
    return min(max_tile, rounded, elements_per_core)  # a tile never spans two cores' shares


def elementwise(op: str, shape: tuple[int, ...], dtype: str = "float32", cores: int = 16,
                tile: int | None = None) -> DiannaoSchedule:
    """``op`` (add, sub, mul, maximum, relu) over ``shape``: per core, tiles copied GMEM -> NMEM, one vector
    instruction per tile, and the result copied back; relu computes in place in its output tile.

    ``tile`` (elements) defaults to ``tile_elements``; a tile is never larger than a core's share."""
    if op not in BINARY and op not in UNARY:
        raise ScheduleError(f"DianNao element-wise: unknown op {op!r}; expected one of "
                            f"{', '.join([*BINARY, *UNARY])}")
    if not 1 <= cores:
        raise ScheduleError(f"DianNao element-wise: expected at least one core, but got {cores}")
    n = math.prod(shape)
    inputs = tuple(te.placeholder((n,), dtype, name=x) for x in ("A", "B")[: 1 if op in UNARY else 2])
    out = UNARY[op](inputs[0]) if op in UNARY else BINARY[op](*inputs)
    s = create_schedule(out)
    itemsize = out.dtype.bits // 8
    share = math.ceil(n / cores)
    buffers = len(inputs) + 1 if op in BINARY else 1
    tile = min(tile, share) if tile else tile_elements(share, buffers, itemsize)
    staged = [s.cache_read(x, "nmem", [out]) for x in inputs] if op in BINARY else []
    local = s.cache_write(out, "nmem")
    core, rest = s[out].split(out.op.axis[0], nparts=cores, names=("core", "rest"))
    outer, inner = s[out].split(rest, factor=tile, names=("tile", "e"))
    s[out].bind(core, te.thread_axis("core", name="tid"))
    for t in (*staged, local):
        s[t].compute_at(s[out], outer)
    for t in staged:
        s[t].pragma(s[t].op.axis[0], "intrin", "copy")
    s[local].pragma(s[local].op.axis[0], "intrin", op)
    s[out].pragma(inner, "intrin", "copy")
    return DiannaoSchedule(s, (*inputs, out), cores, tile)
