"""DianNao's flat tiling and constant vectors, shared by its element-wise schedules (``compiler.ops.diannao``)
and its network operators (``compiler.ops.diannao_network``): a 1-D operator's vectors shared by the cores
the card launches and walked in tiles that divide each core's share (so that element i of a tile is
``i % tile``), constant vectors filled once per core (no instruction fills a vector with a constant), and
the loose marks the one matcher reads."""

from __future__ import annotations

from collections.abc import Sequence

import isa
from compiler import te
from compiler.schedule import Schedule, Stage


def lanes_of(spec: isa.ISA) -> int:
    """The elements of one vector: every vector instruction's count is a multiple of VECTOR_ELEMS."""
    return spec.params["VECTOR_ELEMS"]


def launchable(cores: int, work: int, spec: isa.ISA) -> int:
    """The most cores, at most ``cores`` and at most one per unit of ``work``, that the card launches: 1 to
    CORES_PER_CLUSTER, or whole clusters."""
    per_cluster = spec.params["CORES_PER_CLUSTER"]
    n = max(1, min(cores, work))
    return n if n <= per_cluster else n // per_cluster * per_cluster


def constant_vector(value: float, n: int, lanes: int, name: str, dtype: str = "float32") -> list[te.Tensor]:
    """A vector of ``n`` copies of ``value``, in two stages: no instruction fills a vector with a constant,
    so LANES of them are scalar stores, and copies of that seed make the rest (``fill_constants``)."""
    seed = te.compute((lanes,), lambda i: te.const(value, dtype), name=f"{name}_seed")
    if n == lanes:
        return [seed]
    return [seed, te.compute((n,), lambda i: seed[i % lanes], name=name)]


def fill_constants(s: Schedule, constants: Sequence[Sequence[te.Tensor]], stage: Stage,
                   axis: te.IterVar) -> None:
    """Compute constant vectors (each ``constant_vector``'s stages) once, at ``axis`` of ``stage`` (a core's
    start): each seed marked as a fill (scalar), each copy one LANES-element copy per chunk."""
    for seed, *copies in constants:
        s[seed].set_scope("nmem")
        s[seed].compute_at(stage, axis)
        mark_intrin(s[seed], seed.op.axis[0], "fill")
        for t in copies:
            s[t].set_scope("nmem")
            s[t].compute_at(stage, axis)
            outer, inner = s[t].split(t.op.axis[0], factor=seed.shape[0], names=("chunk", "lane"))
            mark_intrin(s[t], inner, "copy", unroll=[outer])


def per_core(s: Schedule, out: te.Tensor, axis: te.IterVar, cores: int) -> tuple[te.IterVar, te.IterVar]:
    """``out``'s ``axis`` split over ``cores`` cores: (the bound core loop, the rest)."""
    core, rest = s[out].split(axis, nparts=cores, names=("core", "rest"))
    s[out].bind(core, te.thread_axis("core", name="tid"))
    return core, rest


def flat_plan(n: int, buffers: int, itemsize: int, cores: int, spec: isa.ISA) -> tuple[int, int]:
    """(cores, tile) for a 1-D operator over ``n`` elements in whole vectors of LANES: the vectors shared by
    the cores the card launches, each core's share walked in tiles of as many vectors as ``buffers`` tile
    buffers fit in NMEM, a divisor of the share (so that element i of a tile is i % tile)."""
    lanes = lanes_of(spec)
    vectors = -(-n // lanes)
    cores = launchable(cores, vectors, spec)
    share = -(-vectors // cores)
    fit = max(1, spec.params["NMEM_BYTES"] // buffers // (lanes * itemsize))
    return cores, lanes * max(v for v in range(1, min(share, fit) + 1) if share % v == 0)


def flat_tiles(s: Schedule, out: te.Tensor, cores: int, tile: int,
                lanes: int) -> tuple[te.IterVar, te.IterVar, te.IterVar]:
    """``out`` (1-D) split as ``flat_plan`` says: (the core loop, the tile loop, the tile's vector loop),
    loops ordered core, tile, vector, lane."""
    vec, _ = s[out].split(out.op.axis[0], factor=lanes, names=("vec", "lane"))
    core, rest = per_core(s, out, vec, cores)
    tile_loop, v = s[out].split(rest, factor=tile // lanes, names=("tile", "v"))
    return core, tile_loop, v


def mark_intrin(stage: Stage, axis: te.IterVar, mark: str, unroll: Sequence[te.IterVar] = ()) -> None:
    """Mark ``axis`` of ``stage`` for instruction ``mark`` (a loose name the one matcher reads), its
    ``unroll`` loops unrolled (the vector instructions take immediate NMEM addresses)."""
    for loop in unroll:
        stage.unroll(loop)
    stage.pragma(axis, "intrin", mark)
