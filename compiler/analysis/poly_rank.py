"""PolyDL's ranking (Tavarageri et al., Sec. 4.2): working sets packed into a memory hierarchy described as
data (Algorithm 2), a latency / bandwidth cost per variant (Eq. 1), variants ranked by it.

    levels = cpu_caches()                                   # this CPU's L1, L2, L3 from the OS
    ranked = rank({"ijk": nest1, "ikj": nest2}, levels, MEMORY)   # elements at their buffers' widths

A ``MemoryLevel`` is a cache or a scratchpad: its name, its capacity in bytes, its latency (cycles) and
bandwidth (bytes per cycle). Algorithm 2 sorts a variant's working sets (both WS_min and WS_max of every
sequential dependence, as the paper adds them, duplicates counted) from smallest to largest and puts each
into the fastest level whose occupancy it still fits; what fits nowhere goes to memory. Eq. (1) is then
``C = sum(WS_L * lat_L / bw_L) + WS_mem * lat_mem / bw_mem``; the lowest cost ranks first. The paper gives
no latencies or bandwidths: ``CPU_DEFAULTS`` are the PolyDL repository's constants (PolyRank.cpp: L1 4,
L2 14, L3 60 and memory 84 cycles; 192, 96, 16 bytes per cycle for the caches), which a caller replaces
with a machine's own.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compiler.analysis.working_set import Nest, WorkingSet, working_sets
from compiler.ir import nodes as ir


@dataclass(frozen=True)
class MemoryLevel:
    name: str
    bytes: int
    latency: float          # cycles
    bandwidth: float        # bytes per cycle

    def __post_init__(self) -> None:
        if self.bytes < 0 or self.latency <= 0 or self.bandwidth <= 0:
            raise ValueError(f"memory level {self.name}: capacity must be >= 0 bytes and latency and "
                             f"bandwidth > 0, not {self.bytes}, {self.latency}, {self.bandwidth}")


#: The PolyDL repository's latencies (cycles) and bandwidths (bytes per cycle) by level (PolyRank.cpp).
CPU_DEFAULTS = {"L1": (4.0, 192.0), "L2": (14.0, 96.0), "L3": (60.0, 16.0)}
MEMORY = MemoryLevel("memory", 0, 84.0, 8.0)


def cpu_caches(root: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> list[MemoryLevel]:
    """This CPU's data and unified caches, fastest first, with ``CPU_DEFAULTS``' latency and bandwidth, as
    the OS reports them (Linux's sysfs); an empty list where it does not."""
    found: dict[int, int] = {}
    for index in sorted(Path(root).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1024, "M": 1024 * 1024}.get(size[-1:], 1)
        found[level] = int(size.rstrip("KM")) * scale
    return [MemoryLevel(f"L{lv}", size, *CPU_DEFAULTS.get(f"L{lv}", (60.0, 16.0)))
            for lv, size in sorted(found.items())]


@dataclass(frozen=True)
class Placement:
    """Where a variant's working sets went (bytes per level, and to memory)."""

    levels: dict[str, int]
    memory: int

    def cost(self, levels: Sequence[MemoryLevel], memory: MemoryLevel) -> float:
        """Eq. (1): each level's bytes times its latency over its bandwidth, memory's likewise."""
        by_name = {lv.name: lv for lv in levels}
        total = sum(size * by_name[name].latency / by_name[name].bandwidth
                    for name, size in self.levels.items())
        return total + self.memory * memory.latency / memory.bandwidth


def sizes(found: Sequence[WorkingSet], element_bytes: int | None = None) -> list[int]:
    """The working sets Algorithm 2 places, in bytes (every element ``element_bytes`` wide, or, with None,
    its buffer's type's width): WS_min and WS_max of every sequential dependence (both, as the paper adds
    them), the one size of a parallel one."""
    out = []
    for ws in found:
        low, high = ws.bytes(element_bytes)
        out += [low] if ws.parallel else [low, high]
    return out


def place(working: Sequence[int], levels: Sequence[MemoryLevel]) -> Placement:
    """Algorithm 2: smallest first, each working set into the fastest level it still fits beside what that
    level holds; the rest to memory."""
    held = {lv.name: 0 for lv in levels}
    memory = 0
    for ws in sorted(working):
        for lv in levels:
            if held[lv.name] + ws <= lv.bytes:
                held[lv.name] += ws
                break
        else:
            memory += ws
    return Placement(held, memory)


@dataclass(frozen=True)
class Ranked:
    name: Hashable
    cost: float
    placement: Placement


def ranked(name: Hashable, found: Sequence[WorkingSet], levels: Sequence[MemoryLevel],
           memory: MemoryLevel = MEMORY, element_bytes: int | None = None) -> Ranked:
    """One variant's working sets placed (Algorithm 2) and costed (Eq. 1)."""
    placement = place(sizes(found, element_bytes), levels)
    return Ranked(name, placement.cost(levels, memory), placement)


def rank(variants: Mapping[Hashable, Nest], levels: Sequence[MemoryLevel], memory: MemoryLevel = MEMORY,
         element_bytes: int | None = None, parallel: Mapping[Hashable, tuple[ir.Var, ...]] | None = None
         ) -> list[Ranked]:
    """The variants (polyhedral nests by name) from the cheapest by Eq. (1) to the dearest (ties in the
    order given); ``element_bytes`` as ``sizes``, ``parallel`` each variant's parallel loops."""
    out = [ranked(name, working_sets(nest, (parallel or {}).get(name, ())), levels, memory, element_bytes)
           for name, nest in variants.items()]
    return sorted(out, key=lambda r: r.cost)
