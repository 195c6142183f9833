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

from compiler.analysis.working_set import Nest, WorkingSet, polyhedral, working_sets
from compiler.ir import nodes as ir
from compiler.ir.functor import IRVisitor, buffers_of, loads_in


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


def cache_line_bytes(root: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The size of this CPU's cache lines as the OS reports them (its first data cache's), else 64."""
    for index in sorted(Path(root).glob("index*")):
        try:
            if (index / "type").read_text().strip() != "Instruction":
                return int((index / "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
    return 64


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
    return _pack([(size, levels) for size in working], levels)


def _pack(items: Sequence[tuple[int, Sequence[MemoryLevel]]], levels: Sequence[MemoryLevel]) -> Placement:
    """Algorithm 2's greedy packing: the sizes smallest first, each into the first of its own candidate
    levels (fastest first) where it still fits beside what that level holds, else to memory."""
    held = {lv.name: 0 for lv in levels}
    memory = 0
    for size, candidates in sorted(items, key=lambda item: item[0]):
        for lv in candidates:
            if held[lv.name] + size <= lv.bytes:
                held[lv.name] += size
                break
        else:
            memory += size
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


# ------------------------------------------------------------------------------------- scratchpads
def place_scratchpads(found: Sequence[WorkingSet], homes: Mapping[str, str], levels: Sequence[MemoryLevel]
                      ) -> Placement:
    """Algorithm 2 for memories that each hold one kind of data (a compiler-managed scratchpad per operand:
    VITA's input and weight buffers, DianNao's NMEM and WMEM): a dependence's working set counts the bytes
    of the buffer it reuses only, and goes, smallest first, into that buffer's home level (``homes``: buffer
    name -> level name) where it still fits beside what the level holds, else to memory (as does the
    working set of a buffer with no home)."""
    items = []
    for ws in found:
        low, high = next(((lo, hi) for name, lo, hi in ws.by_buffer if name == ws.buffer), (0, 0))
        home = [lv for lv in levels if lv.name == homes.get(ws.buffer)]
        items += [(size, home) for size in ([low] if ws.parallel else [low, high])]
    return _pack(items, levels)


def scratchpad_homes(body: ir.Stmt) -> dict[str, str]:
    """Each global buffer that a staged loop nest copies into an on-chip buffer, and that buffer's scope:
    the ``Store``\\ s into a non-global buffer whose values load the global one."""
    homes: dict[str, str] = {}

    class _Copies(IRVisitor):
        def visit_Store(self, s: ir.Store) -> None:
            if s.buffer.scope != "global":
                for load in loads_in(s.value):
                    if load.buffer.scope == "global":
                        homes.setdefault(load.buffer.name, s.buffer.scope)
            self.generic_visit(s)

    _Copies().visit(body)
    return homes


def scratchpad_levels(spec, scopes: Sequence[str]) -> list[MemoryLevel]:
    """The on-chip memories of ``scopes`` as levels, from ``spec``'s spaces (a scope is the space of its
    upper-case name): capacity its bytes, one entry (``unit_bytes``) per cycle, one cycle of latency."""
    out = []
    for scope in dict.fromkeys(scopes):
        space = spec.spaces.get(scope.upper())
        if space is None:
            raise ValueError(f"scope {scope!r}: the spec {spec.source} has no space {scope.upper()} "
                             f"(its spaces: {', '.join(spec.spaces)})")
        out.append(MemoryLevel(scope, space.bytes, 1.0, float(space.unit_bytes)))
    return out


def rank_staged(variants: Mapping[Hashable, ir.Stmt], spec, memory: MemoryLevel,
                parallel: Mapping[Hashable, tuple[ir.Var, ...]] | None = None) -> list[Ranked]:
    """PolyDL over scratchpads: each variant a staged loop nest (its data copied between global memory and
    on-chip buffers, as a schedule for VITA or DianNao lowers); the reuses of the global buffers (Algorithm
    1, the on-chip buffers left out; ``parallel`` each variant's loops that run in parallel), each placed
    in the scratchpad its copies fill (``place_scratchpads``, levels from ``spec``), costed by Eq. (1) with
    ``memory`` the DRAM; cheapest first, ties in the order given. NotAnalysable where a nest is outside the
    polyhedral model."""
    out = []
    for name, body in variants.items():
        homes = scratchpad_homes(body)
        on_chip = tuple(sorted({b.scope for b in buffers_of(body) if b.scope != "global"}))
        levels = scratchpad_levels(spec, list(homes.values()))
        found = working_sets(polyhedral(body, registers=on_chip), (parallel or {}).get(name, ()))
        placement = place_scratchpads(found, homes, levels)
        out.append(Ranked(name, placement.cost(levels, memory), placement))
    return sorted(out, key=lambda r: r.cost)
