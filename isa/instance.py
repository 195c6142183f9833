"""Running and checking instruction instances: ``execute`` (the generic executor on numpy arrays) and
``check_constraints`` (every violated rule, in words)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from isa.dtypes import DTYPES
from isa.errors import ExecError
from isa.executor import run_semantics
from isa.lang.scalar import evaluate
from isa.lang.tree import Access, Name, to_text, walk
from isa.spec import ISA, Constraint, Insn, Instruction


def _resolve(spec: ISA, insn: Insn | str) -> tuple[Instruction, Insn]:
    if isinstance(insn, str):
        insn = spec.insn(insn)
    return spec.instruction(insn.name), insn


def operand_shape(spec: ISA, insn: Insn, name: str) -> tuple[int, ...]:
    """The shape of operand ``name`` of ``insn`` (shape expressions evaluated on its fields)."""
    instr = spec.instruction(insn.name)
    env = spec.scalar_env(insn.values, spec.types_of(insn))
    return tuple(int(evaluate(e, env)) for e in instr.operand(name).shape)


def execute(spec: ISA, insn: Insn | str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``insn``'s semantics on ``tensors`` (operand name -> array) and return the tensors it writes.

    Each array must have the operand's shape (evaluated on the instance's fields) and the numpy dtype that
    stores the operand's dtype (bf16 is stored as float32). An operand that is only written may be left out:
    it starts as zeros. Inputs are not modified.
    """
    instr, insn = _resolve(spec, insn)
    types = spec.types_of(insn)
    sem = instr.typed_semantics(types)
    env = spec.scalar_env(insn.values, types, tensors)
    arrays = {}
    needed = list(dict.fromkeys(sem.reads + sem.writes))
    for name in needed:
        op = instr.operand(name)
        dt = DTYPES[instr.operand_dtype(op, types)]
        shape = tuple(int(evaluate(e, env)) for e in op.shape)
        if name not in tensors:
            if name in sem.reads:
                raise ExecError(f"{insn.name}: operand '{name}' is missing; it needs {', '.join(needed)}")
            arrays[name] = np.zeros(shape, dt.numpy)  # only written: start from zeros
            continue
        arr = np.asarray(tensors[name])
        if arr.dtype != dt.numpy:
            raise ExecError(
                f"{insn.name}: operand '{name}' is {dt.name}, stored as {dt.numpy}, but got an "
                f"array of {arr.dtype}"
            )
        if arr.shape != shape:
            raise ExecError(f"{insn.name}: operand '{name}' must have shape {shape}, but got {arr.shape}")
        arrays[name] = arr
    for name in tensors:
        if name not in arrays and not any(op.name == name for op in instr.operands):
            raise ExecError(
                f"{insn.name}: no operand '{name}'; operands are "
                f"{', '.join(op.name for op in instr.operands)}"
            )
    try:
        return run_semantics(sem, arrays, env)
    except ExecError as e:
        raise ExecError(f"{insn.name}: {e}") from None


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule an instance breaks: the constraint kind, the rule as written, the spec's message, the values."""

    instruction: str
    kind: str
    rule: str
    message: str
    values: tuple[tuple[str, int], ...] = ()

    @property
    def detail(self) -> str:
        """The rule's message, the rule and the values it read: what every report of a violation says."""
        vals = f" ({', '.join(f'{k} = {v}' for k, v in self.values)})" if self.values else ""
        return f"{self.message}: violated '{self.rule}'{vals}"

    def __str__(self) -> str:
        return f"{self.instruction}: {self.detail}"


def reads_operands(c: Constraint) -> bool:
    """Whether rule ``c`` reads an operand (a register, say): it can only be checked when the instruction
    runs, on the operand's value then; every other rule depends on the instance's fields alone."""
    return c.dynamic


def check_constraints(
    spec: ISA, insn: Insn | str, tensors: Mapping[str, np.ndarray] | None = None, which: str = "all"
) -> list[Violation]:
    """Every rule ``insn`` breaks (an empty list when it satisfies all): field ranges, allowed types, and the
    instruction's constraints evaluated on its fields, the ISA's parameters and ``tensors``.

    ``which`` = "static" checks what the fields alone decide (ranges, types, rules that read no operand);
    "dynamic" only the rules that read operands (registers holding addresses, say), on ``tensors``."""
    instr, insn = _resolve(spec, insn)
    out: list[Violation] = []
    if which not in ("all", "static", "dynamic"):
        raise ValueError(f"which must be 'all', 'static' or 'dynamic', not {which!r}")
    if which == "dynamic":
        env = spec.scalar_env(insn.values, spec.types_of(insn), tensors or {})
        return _check_rules(insn, [c for c in instr.constraints if reads_operands(c)], env)
    for f in instr.fields:
        v = insn.get(f.name, 0)
        if not f.lo <= v <= f.hi:
            out.append(
                Violation(
                    insn.name,
                    "range",
                    f"{f.lo} <= {f.name} <= {f.hi}",
                    f"field '{f.name}' does not fit in {f.bits} bits",
                    ((f.name, v),),
                )
            )
        elif f.max is not None and v > f.max:
            out.append(
                Violation(
                    insn.name,
                    "range",
                    f"{f.name} <= {f.max}",
                    f"field '{f.name}' is above its largest meaningful value",
                    ((f.name, v),),
                )
            )
    types = spec.types_of(insn)
    for tv, allowed in instr.types.items():
        if types[tv] not in allowed:
            out.append(
                Violation(
                    insn.name,
                    "type",
                    f"{tv} in {list(allowed)}",
                    f"type {tv} = {types[tv]} is not supported",
                    (),
                )
            )
    if len(out) > 0 and any(v.kind == "type" for v in out):
        return out  # rules over bytes(T) cannot be evaluated with an unsupported type
    rules = [c for c in instr.constraints if which == "all" or not reads_operands(c)]
    if tensors is None and not any(reads_operands(c) for c in rules):   # the fields alone decide
        values = insn.values
        memo = _memo(spec)
        reads = memo.get((insn.name, "rules", which))
        if reads is None:
            reads = memo[insn.name, "rules", which] = _names_read([c.rule for c in rules])
        key = (insn.name, which, tuple(types.items()), tuple(values.get(n) for n in reads))
        broken = memo.get(key)
        if broken is None:
            broken = memo[key] = tuple(_check_rules(insn, rules, spec.scalar_env(values, types)))
        return out + list(broken)
    env = spec.scalar_env(insn.values, types, tensors or {})
    return out + _check_rules(insn, rules, env)


def _check_rules(insn: Insn, rules: list[Constraint], env) -> list[Violation]:
    out = []
    for c in rules:
        try:
            ok = evaluate(c.rule, env)
        except ExecError as e:
            out.append(Violation(insn.name, c.kind, c.text, f"{c.message} (cannot evaluate: {e})",
                                 _values_read(c, env)))
            continue
        if not ok:
            out.append(Violation(insn.name, c.kind, c.text, c.message, _values_read(c, env)))
    return out


def _values_read(c: Constraint, env) -> tuple[tuple[str, int], ...]:
    """The values a broken rule read, for its Violation: its fields and parameters, and its operand values
    (registers holding addresses, say)."""
    names = sorted({n.id for n in walk(c.rule) if isinstance(n, Name) and n.kind in ("field", "param")})
    values = tuple((n, env.values[n]) for n in names if n in env.values)
    for node in walk(c.rule):
        if isinstance(node, Access) and to_text(node) not in dict(values):
            try:
                values += ((to_text(node), int(evaluate(node, env))),)
            except (ExecError, KeyError, TypeError, ValueError):
                pass
    return values


def timing_of(spec: ISA, insn: Insn) -> tuple[str | None, int | None, int | None]:
    """(unit, latency, cycles) of ``insn`` from its spec's timing expressions (None where not given)."""
    t = spec.instruction(insn.name).timing
    values, types, memo = insn.values, spec.types_of(insn), _memo(spec)
    reads = memo.get((insn.name, "timing"))
    if reads is None:
        reads = memo[insn.name, "timing"] = _names_read([e for e in (t.latency, t.cycles) if e is not None])
    key = (insn.name, "timing", tuple(types.items()), tuple(values.get(n) for n in reads))
    found = memo.get(key)
    if found is None:
        env = spec.scalar_env(values, types)
        lat = int(evaluate(t.latency, env)) if t.latency is not None else None
        cyc = int(evaluate(t.cycles, env)) if t.cycles is not None else None
        found = memo[key] = (t.unit, lat, cyc)
    return found


def engine_of(spec: ISA, insn: Insn) -> int:
    """The engine of its unit that runs ``insn`` (its timing's ``engine``; 0 without one)."""
    engine = spec.instruction(insn.name).timing.engine
    if engine is None:
        return 0
    value = int(evaluate(engine, spec.scalar_env(insn.values, spec.types_of(insn))))
    if value < 0:
        raise ValueError(f"{insn.name}: its timing's engine is {value}; engines are numbered from 0")
    return value


# Programs repeat an instruction with other addresses, and a rule or a timing expression reads a few of its
# fields: their results are kept per spec, by the values of the names they read (and the instance's types).
# A spec is keyed by identity and held, so that its id is not reused while its results are kept.
_MEMOS: dict[int, tuple[ISA, dict]] = {}
_MEMO_SPECS, _MEMO_ENTRIES = 16, 1 << 16


def _memo(spec: ISA) -> dict:
    entry = _MEMOS.get(id(spec))
    if entry is None or len(entry[1]) > _MEMO_ENTRIES:
        if len(_MEMOS) >= _MEMO_SPECS:
            _MEMOS.clear()
        entry = _MEMOS[id(spec)] = (spec, {})
    return entry[1]


def _names_read(trees: list) -> tuple[str, ...]:
    """Every plain name the expressions ``trees`` read (fields, parameters, enum values), sorted."""
    return tuple(sorted({n.id for tree in trees for n in walk(tree) if isinstance(n, Name)}))


__all__ = ["Violation", "check_constraints", "execute", "operand_shape", "reads_operands", "timing_of",
           "to_text"]
