"""Area and energy, Accelergy-style: the simulators count actions, a table prices them.

A run's **actions** (``Activity``) are counted from what executed, with no per-instruction Python: each
executed instruction's typed semantics (its spec) gives the arithmetic of one point of its iteration space
(a ``*`` is a multiply, ``+ - min max << ...`` and a reduction's accumulation an add, each at the dtype the
semantics computes it in; scalar sub-expressions of fields and immediates are per instruction, not per
point), the iteration space's size comes from the index extents evaluated on the instance's fields, and
each tensor operand it reads or writes is one access of its bytes to its memory space. A ``select`` on a
scalar condition (``use_imm``) counts the branch the instance takes; one on data counts both (a mux).

The **architecture** (``Architecture``) is what the area is made of: each memory (SRAM, registers or
off-chip DRAM, with its capacity and how many instances the machine has) and each datapath (so many
adders or multipliers of a dtype). A simulator describes its machine from the spec's parameters
(sim/vita/energy.py, sim/diannao/energy.py).

The **table** (``EnergyTable``, ``sim/core/tables/*.toml``) prices an action: pJ and um^2 per add and
multiply by dtype, SRAM access energy by capacity, register and DRAM access energy, each number with its
source; ``technology_nm`` scales energy and area from the table's node (``[scaling]``).
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import isa
from isa.dtypes import DType, canonical
from isa.dtypes import dtype as dtype_of
from isa.lang.scalar import evaluate
from isa.lang.tree import Access, Assign, Binary, Call, Cast, Expr, Name, Reduce, Unary, children, walk
from sim.core.errors import SimConfigError

TABLES = Path(__file__).parent / "tables"
DEFAULT_TABLE = "horowitz-45nm"

#: what the model does not price, its stated gaps (docs/design-space-exploration.md; tandem report shows them)
NOT_PRICED = ("control, instruction fetch and queue logic", "DMA engines and the interconnect",
              "a port's width (DRAM_BYTES_PER_CYCLE has no area)",
              "extra register-file ports (VTA++'s pipelined ALU is priced like VTA's)")

#: operators priced as a multiply; every other arithmetic or comparison on tensor data is an add
MULTIPLIES = frozenset({"*", "/"})
#: (a ``%`` or ``//`` in a semantics is by a power of two, a mask or a shift: priced as an add)
ADDS = frozenset({"+", "-", "%", "//", "<<", ">>", "&", "|", "^", "<", "<=", ">", ">=", "==", "!="})
ONE_SIDED = frozenset({"<<", ">>", "%", "//"})
ADD_CALLS = frozenset({"min", "max", "abs"})


class EnergyTableError(SimConfigError):
    """An energy table that cannot be read: names the file and the key."""


@dataclass(frozen=True)
class Cost:
    """What one action costs: energy in pJ, area in um^2 (0 where the action has no area of its own)."""

    pj: float
    um2: float = 0.0


@dataclass(frozen=True)
class EnergyTable:
    """Prices of actions at ``technology_nm`` (the table's own node is ``reference_nm``)."""

    name: str
    summary: str
    reference_nm: float
    technology_nm: float
    ops: dict[str, dict[str, Cost]]                 # "add" | "mul" -> "int8" | "fp16" ... -> cost
    sram_word_bits: int
    sram_read_pj: tuple[tuple[int, float], ...]     # (capacity bytes, pJ per word read), increasing
    sram_write_factor: float
    sram_cell_um2: float
    sram_array_efficiency: float
    register_pj: float                              # one 32-bit register access
    register_um2_per_bit: float
    dram_pj_per_byte: float
    energy_exponent: float = 1.0
    area_exponent: float = 2.0
    dram_scales: bool = False
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    # --------------------------------------------------------------------------------------- scaling
    def at(self, technology_nm: float) -> EnergyTable:
        """This table scaled to another technology node."""
        if not technology_nm > 0:
            raise EnergyTableError(f"{self.name}: technology_nm must be positive, but got {technology_nm}")
        return replace(self, technology_nm=float(technology_nm))

    @property
    def energy_scale(self) -> float:
        return (self.technology_nm / self.reference_nm) ** self.energy_exponent

    @property
    def area_scale(self) -> float:
        return (self.technology_nm / self.reference_nm) ** self.area_exponent

    # --------------------------------------------------------------------------------------- prices
    def op(self, op: str, dtype: str) -> Cost:
        """One ``op`` ("add" or "mul") on ``dtype`` (an ISA dtype name: i8, u8, f16, ...), scaled."""
        base = self._op(op, dtype_of(dtype))
        return Cost(base.pj * self.energy_scale, base.um2 * self.area_scale)

    def _op(self, op: str, dt: DType) -> Cost:
        family = "fp" if dt.is_float else "int"
        rows = sorted((int(key[len(family):]), cost) for key, cost in self.ops[op].items()
                      if key.startswith(family) and key[len(family):].isdigit())
        if not rows:
            raise EnergyTableError(f"{self.name}: [ops.{op}] prices no {family} dtype (needed for {dt.name})")
        bits = max(dt.bits, 1)
        for width, cost in rows:
            if width >= bits:
                return cost
        width, cost = rows[-1]    # wider than any listed: scale the widest (add linear, multiply quadratic)
        grow = (bits / width) ** (2 if op == "mul" else 1)
        return Cost(cost.pj * grow, cost.um2 * grow)

    def sram_access_pj(self, capacity: int, nbytes: int, write: bool = False) -> float:
        """Energy of reading (or writing) ``nbytes`` of an SRAM of ``capacity`` bytes, scaled."""
        points = self.sram_read_pj   # the log-log segment that holds capacity (or the nearest end one)
        i = next((k for k in range(len(points) - 2) if capacity <= points[k + 1][0]), len(points) - 2)
        (c0, e0), (c1, e1) = points[i], points[i + 1]
        slope = math.log(e1 / e0) / math.log(c1 / c0)
        per_word = e0 * (max(capacity, 1) / c0) ** slope
        energy = per_word * nbytes * 8 / self.sram_word_bits
        return energy * (self.sram_write_factor if write else 1.0) * self.energy_scale

    def sram_um2(self, capacity: int) -> float:
        return capacity * 8 * self.sram_cell_um2 / self.sram_array_efficiency * self.area_scale

    def register_access_pj(self, nbytes: int) -> float:
        return self.register_pj * nbytes / 4 * self.energy_scale

    def register_um2(self, capacity: int) -> float:
        return capacity * 8 * self.register_um2_per_bit * self.area_scale

    def dram_pj(self, nbytes: int) -> float:
        return self.dram_pj_per_byte * nbytes * (self.energy_scale if self.dram_scales else 1.0)


def load_table(name_or_path: str | Path = DEFAULT_TABLE, technology_nm: float | None = None) -> EnergyTable:
    """The energy table ``name_or_path`` (a file, or the name of one in sim/core/tables/), at
    ``technology_nm`` (default: the table's own node). ``EnergyTableError`` names the file and key."""
    path = Path(name_or_path)
    if not path.suffix:
        path = TABLES / f"{name_or_path}.toml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in TABLES.glob("*.toml")))
            raise EnergyTableError(f"no energy table named {name_or_path!r}; built in: {known}")
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise EnergyTableError(f"{path}: cannot read the energy table: {e}") from None
    table = _parse_table(raw, str(path))
    return table if technology_nm is None else table.at(technology_nm)


def _parse_table(raw: dict[str, Any], where: str) -> EnergyTable:
    def get(section: dict, key: str, what: str, kind: type = float) -> Any:
        if key not in section:
            raise EnergyTableError(f"{where}: {what}{key} is missing")
        value = section[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is float and not value >= 0):
            raise EnergyTableError(f"{where}: {what}{key} must be a non-negative {kind.__name__}, "
                                   f"but got {value!r}")
        return value

    sources: dict[str, str] = {}
    ops: dict[str, dict[str, Cost]] = {}
    for op in ("add", "mul"):
        section = raw.get("ops", {}).get(op)
        if not isinstance(section, dict) or not section:
            raise EnergyTableError(f"{where}: [ops.{op}] is missing")
        ops[op] = {}
        for key, row in section.items():
            if not isinstance(row, dict):
                raise EnergyTableError(f"{where}: ops.{op}.{key} must be a table {{pj, um2, source}}")
            ops[op][key] = Cost(get(row, "pj", f"ops.{op}.{key}."), get(row, "um2", f"ops.{op}.{key}."))
            sources[f"ops.{op}.{key}"] = get(row, "source", f"ops.{op}.{key}.", str)
    sram, regs, dram = raw.get("sram", {}), raw.get("registers", {}), raw.get("dram", {})
    points = sram.get("read_pj")
    if (not isinstance(points, list) or len(points) < 2
            or any(not isinstance(p, list) or len(p) != 2 or not all(x > 0 for x in p) for p in points)
            or [p[0] for p in points] != sorted({p[0] for p in points})):
        raise EnergyTableError(f"{where}: sram.read_pj must list two or more [capacity bytes, pJ] pairs of "
                               f"positive numbers in increasing capacity")
    scaling = raw.get("scaling", {})
    return EnergyTable(
        name=get(raw, "name", "", str), summary=raw.get("summary", ""),
        reference_nm=get(raw, "technology_nm", ""), technology_nm=get(raw, "technology_nm", ""),
        ops=ops, sram_word_bits=get(sram, "word_bits", "sram.", int),
        sram_read_pj=tuple((int(c), float(e)) for c, e in points),
        sram_write_factor=get(sram, "write_factor", "sram."), sram_cell_um2=get(sram, "cell_um2", "sram."),
        sram_array_efficiency=get(sram, "array_efficiency", "sram."),
        register_pj=get(regs, "access_pj", "registers."), register_um2_per_bit=get(regs, "um2_per_bit",
                                                                                       "registers."),
        dram_pj_per_byte=get(dram, "pj_per_byte", "dram."),
        energy_exponent=get(scaling, "energy_exponent", "scaling."),
        area_exponent=get(scaling, "area_exponent", "scaling."),
        dram_scales=get(scaling, "dram_scales", "scaling.", bool), sources=sources)


# ------------------------------------------------------------------------------------------- activity
@dataclass
class Activity:
    """Actions a run performed: arithmetic by (op, dtype), bytes read and written per memory space, bytes
    read from and written to off-chip memory by transfers, and register accesses (bytes)."""

    ops: Counter = field(default_factory=Counter)          # ("add" | "mul", dtype) -> operations
    reads: Counter = field(default_factory=Counter)        # memory -> bytes read
    writes: Counter = field(default_factory=Counter)       # memory -> bytes written

    def add(self, other: Activity, times: int = 1) -> None:
        """Add ``times`` repetitions of ``other``."""
        for mine, theirs in ((self.ops, other.ops), (self.reads, other.reads), (self.writes, other.writes)):
            for key, n in theirs.items():
                mine[key] += n * times


def instruction_activity(spec: isa.ISA, insn: isa.Insn) -> Activity:
    """The actions of one execution of ``insn`` (one micro-op, for an instruction whose semantics is one
    micro-op's), from its typed semantics: per point of its iteration space the arithmetic on tensor data,
    and each tensor or register operand it reads or writes once, its bytes at its memory space (a space
    given by a field resolves to the space that field names). Cached per instruction and the values of the
    fields it depends on (``_activity_fields``: instances that differ in an address share one): callers
    read it (``Activity.add``), never change it."""
    instr = spec.instruction(insn.name)
    if not instr.statements:
        return Activity()
    types = spec.types_of(insn)
    key = (spec, insn.name, tuple(types.items()),
           tuple(insn[f] for f in _activity_fields(spec, insn.name, tuple(sorted(types.items())))))
    found = _ACTIVITIES.get(key)
    if found is None:
        if len(_ACTIVITIES) >= 4096:
            _ACTIVITIES.clear()
        found = _ACTIVITIES[key] = _instruction_activity(spec, insn, instr, types)
    return found


_ACTIVITIES: dict[tuple, Activity] = {}


@lru_cache(maxsize=1024)
def _activity_fields(spec: isa.ISA, name: str, types: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The fields an instance's activity depends on: its type fields, and every field its typed semantics'
    extents and statements, its operands' shapes and its field-given spaces read (not its addresses)."""
    instr = spec.instruction(name)
    sem = instr.typed_semantics(dict(types))
    fields = {f.name for f in instr.fields}
    trees = [iv.extent for iv in sem.indices] + [e for s in sem.statements for e in (s.target, s.value)]
    used = set(instr.types)
    for operand in (*sem.reads, *sem.writes):
        op = instr.operand(operand)
        trees += list(op.shape)
        if op.kind == "tensor" and op.space_is_field:
            used.add(op.space)
    for tree in trees:
        used |= {n.id for n in walk(tree) if isinstance(n, Name) and n.id in fields}
    return tuple(sorted(used & fields))


def _instruction_activity(spec: isa.ISA, insn: isa.Insn, instr: isa.Instruction, types: dict[str, str]
                          ) -> Activity:
    activity = Activity()
    sem = instr.typed_semantics(types)
    env = spec.scalar_env(insn.values, types)
    points = math.prod(max(int(evaluate(iv.extent, env)), 0) for iv in sem.indices)
    per_point: Counter = Counter()
    for statement in sem.statements:
        _count_ops(statement, per_point, env)
    for key, n in per_point.items():
        activity.ops[key] += n * points
    for names, counter in ((sem.reads, activity.reads), (sem.writes, activity.writes)):
        for name in names:
            elements = math.prod(max(d, 0) for d in isa.operand_shape(spec, insn, name))
            nbytes = elements * dtype_of(instr.operand_dtype(instr.operand(name), types)).bytes
            counter[_space_of(spec, instr, insn, name)] += nbytes
    return activity


def _count_ops(statement: Assign, out: Counter, env: Any = None) -> None:
    """The adds and multiplies on tensor data of one point of ``statement``; with ``env`` (an instance's
    fields), a ``select`` on a scalar condition counts only the branch the instance takes."""
    if statement.op == "+=" and not any(isinstance(n, Reduce) for n in walk(statement.value)):
        # (a reduction's accumulation is counted at its Reduce)
        out["add", _wider(_known(statement.target.dtype), None)] += 1
    stack: list[Expr] = [statement.value]
    while stack:
        node = stack.pop()
        if not any(isinstance(n, Access) for n in walk(node)):
            continue   # computed once per instruction from fields and immediates
        if (env is not None and isinstance(node, Call) and node.func == "select"
                and not any(isinstance(n, Access) for n in walk(node.args[0]))):
            try:
                taken = evaluate(node.args[0], env)
            except isa.ExecError:   # a condition on the point's indices (a padding test): a mux
                taken = None
            if taken is not None:
                stack.append(node.args[1] if taken else node.args[2])
                continue
        if isinstance(node, Binary) and node.op in MULTIPLIES:
            out["mul", _wider(_data_dtype(node.lhs), _data_dtype(node.rhs))] += 1
        elif isinstance(node, Binary) and node.op in ADDS:
            rhs = None if node.op in ONE_SIDED else _data_dtype(node.rhs)   # a shift's width is its value's
            out["add", _wider(_data_dtype(node.lhs), rhs)] += 1
        elif isinstance(node, Unary) and node.op == "-":
            out["add", _wider(_data_dtype(node.operand), None)] += 1
        elif isinstance(node, Call) and node.func in ADD_CALLS:
            out["add", _wider(_known(node.dtype), None)] += 1
        elif isinstance(node, Reduce):
            out["add", _wider(_known(node.dtype), None)] += 1   # the accumulation of each point
        stack.extend(children(node))


def _data_dtype(e: Expr) -> str | None:
    """The dtype of the data ``e`` holds (None for a scalar of no fixed width): a widening cast
    (``i32(inp[...])`` of int8 data) does not make the multiplier that consumes it wider."""
    while isinstance(e, Cast | Unary):
        inner = e.operand if isinstance(e, Unary) else e.value
        known = _known(getattr(inner, "dtype", None))
        if isinstance(e, Cast) and (known is None or dtype_of(known).bits > dtype_of(e.dtype).bits):
            break
        e = inner
    return _known(getattr(e, "dtype", None))


def _known(name: str | None) -> str | None:
    return name if name is not None and canonical(name) is not None else None


def _wider(a: str | None, b: str | None) -> str:
    """The dtype of a datapath taking ``a`` and ``b``: a float one if either is float, else the wider."""
    if a is None or b is None:
        return a or b or "i32"
    da, db = dtype_of(a), dtype_of(b)
    if da.is_float != db.is_float:
        return a if da.is_float else b
    return a if da.bits >= db.bits else b


def _space_of(spec: isa.ISA, instr: isa.Instruction, insn: isa.Insn, name: str) -> str:
    op = instr.operand(name)
    if op.kind != "tensor":
        return "registers"
    if op.space_is_field:
        space = spec.space_by_id(insn[op.space])
        return space.name if space is not None else f"<space {insn[op.space]}>"
    return op.space or "registers"



# --------------------------------------------------------------------------------------- architecture
@dataclass(frozen=True)
class Memory:
    """One memory of the machine: ``kind`` "sram", "registers" or "dram" (off-chip: energy, no area);
    ``capacity`` bytes per instance, ``instances`` on the machine (each core's own buffer, per cluster...)."""

    name: str
    kind: str
    capacity: int
    instances: int = 1


@dataclass(frozen=True)
class Datapath:
    """``count`` arithmetic units doing ``op`` ("add" or "mul") on ``dtype``, in ``unit`` (for the area)."""

    unit: str
    op: str
    dtype: str
    count: int


@dataclass(frozen=True)
class Architecture:
    """What a machine is made of, for its area, and which memory each action's space is."""

    memories: tuple[Memory, ...]
    datapaths: tuple[Datapath, ...]

    def memory(self, space: str) -> Memory:
        for m in self.memories:
            if m.name == space:
                return m
        raise KeyError(f"the architecture has no memory {space!r}; it has "
                       f"{', '.join(m.name for m in self.memories)}")


@dataclass(frozen=True)
class CostReport:
    """Energy by component (pJ) and area by component (mm^2) of one run on one machine."""

    energy_pj: dict[str, float]
    area_mm2: dict[str, float]
    table: str
    technology_nm: float

    @property
    def energy_uj(self) -> float:
        return sum(self.energy_pj.values()) / 1e6

    @property
    def total_area_mm2(self) -> float:
        return sum(self.area_mm2.values())

    def to_json(self) -> dict[str, Any]:
        """The keys ``tandem run --json`` and ``tandem model --json`` add."""
        return {"energy_uj": self.energy_uj,
                "energy_breakdown_uj": {k: v / 1e6 for k, v in self.energy_pj.items()},
                "area_mm2": self.total_area_mm2, "area_breakdown_mm2": dict(self.area_mm2),
                "energy_table": self.table, "technology_nm": self.technology_nm}


def area_mm2(arch: Architecture, table: EnergyTable) -> dict[str, float]:
    """Area by component: each on-chip memory (all instances) and each unit's datapaths."""
    out: dict[str, float] = {}
    for m in arch.memories:
        if m.kind == "sram":
            out[m.name] = table.sram_um2(m.capacity) * m.instances / 1e6
        elif m.kind == "registers":
            out[m.name] = table.register_um2(m.capacity) * m.instances / 1e6
    for d in arch.datapaths:
        out[d.unit] = out.get(d.unit, 0.0) + table.op(d.op, d.dtype).um2 * d.count / 1e6
    return out


def energy_pj(activity: Activity, arch: Architecture, table: EnergyTable) -> dict[str, float]:
    """Energy by component: arithmetic ("compute"), and each memory's reads and writes."""
    out: dict[str, float] = {"compute": sum(table.op(op, dt).pj * n for (op, dt), n in activity.ops.items())}
    for space in sorted(set(activity.reads) | set(activity.writes)):
        m = arch.memory(space)
        r, w = activity.reads.get(space, 0), activity.writes.get(space, 0)
        if m.kind == "dram":
            pj = table.dram_pj(r + w)
        elif m.kind == "registers":
            pj = table.register_access_pj(r + w)
        else:
            pj = table.sram_access_pj(m.capacity, r) + table.sram_access_pj(m.capacity, w, write=True)
        out[m.name] = out.get(m.name, 0.0) + pj
    return out


def cost_report(activity: Activity, arch: Architecture, table: EnergyTable) -> CostReport:
    return CostReport(energy_pj(activity, arch, table), area_mm2(arch, table), table.name,
                      table.technology_nm)


def datapath_dtypes(spec: isa.ISA, instructions: list[isa.Instruction]) -> dict[str, str]:
    """The dtype each arithmetic ``op`` of ``instructions`` needs its datapath to be: the widest one their
    semantics compute in over every binding of their type variables (a float one before any integer)."""
    out: dict[str, str] = {}
    for instr in instructions:
        for binding in instr.bindings():
            found: Counter = Counter()
            for statement in instr.typed_semantics(binding).statements:
                _count_ops(statement, found)
            for op, dt in found:
                out[op] = dt if op not in out else _wider(out[op], dt)
    return out


@lru_cache(maxsize=32)
def _table(name_or_path: str, technology_nm: float) -> EnergyTable:
    return load_table(name_or_path, technology_nm)


def table_for(config: Any) -> EnergyTable:
    """The energy table a machine config names (``energy_table``), at its ``technology_nm``."""
    return _table(str(config.energy_table_path), float(config.technology_nm))


def summed(reports: list[CostReport]) -> CostReport | None:
    """The energy of several runs on one machine, by component (the area is the machine's: the first's);
    None when there are none."""
    if not reports:
        return None
    energy: dict[str, float] = {}
    for r in reports:
        for k, v in r.energy_pj.items():
            energy[k] = energy.get(k, 0.0) + v
    first = reports[0]
    return CostReport(energy, dict(first.area_mm2), first.table, first.technology_nm)
