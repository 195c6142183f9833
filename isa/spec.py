"""The spec model: frozen dataclasses for an ISA, its instructions, operands, fields, formats and spaces.

Specs are normally built by ``isa.loader`` from TOML; every expression in them is already parsed and checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from isa.lang.scalar import ScalarEnv
from isa.lang.tree import Access, Assign, Expr, walk
from isa.lang.typecheck import Semantics

FIELD_KINDS = ("int", "addr", "flag", "reg", "target", "enum", "type")
OPERAND_KINDS = ("tensor", "register")
CONSTRAINT_KINDS = ("align", "divisible", "space", "capacity", "layout", "range", "other")


def type_bindings(types: Mapping[str, tuple[str, ...]]) -> list[dict[str, str]]:
    """Every binding of type variables to one of their dtypes (one empty binding when there are none)."""
    names = list(types)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*types.values())]


@dataclass(frozen=True, slots=True)
class Enum:
    """Named integer codes (``values`` keeps declaration order)."""

    name: str
    values: Mapping[str, int]

    def name_of(self, code: int) -> str | None:
        for name, value in self.values.items():
            if value == code:
                return name
        return None


@dataclass(frozen=True, slots=True)
class Space:
    """A memory space: capacity in bytes, addressing unit in bytes, and its code in the enum ``space``."""

    name: str
    id: int
    bytes: int
    unit_bytes: int = 1
    summary: str = ""


@dataclass(frozen=True, slots=True)
class Field:
    """A bit field of an instruction format: ``bits`` wide at bit ``lsb`` (LSB-first over the whole word)."""

    name: str
    bits: int
    lsb: int
    signed: bool = False
    kind: str = "int"
    enum: str | None = None
    default: int | None = None
    max: int | None = None
    doc: str = ""

    @property
    def lo(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        """Largest value the field can hold."""
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1


@dataclass(frozen=True, slots=True)
class Format:
    """A bit layout ``bits`` wide; each field's ``lsb`` already has the unit rule applied."""

    name: str
    bits: int
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"format '{self.name}' has no field '{name}'")


@dataclass(frozen=True, slots=True)
class Operand:
    """A tensor (or register) operand of an instruction's semantics."""

    name: str
    kind: str
    dtype: str  # a dtype name or a type variable
    shape: tuple[Expr, ...]
    space: str | None = None  # a space name, or the name of a field whose enum is "space"
    space_is_field: bool = False
    strides: tuple[Expr, ...] | None = None
    addr: Expr | None = None
    doc: str = ""
    # for a space of which every cluster has a copy (DianNao's SMEM): the cluster whose copy the operand lies
    # in (an expression over fields and registers, as ``addr``); None: the issuing core's own
    cluster: Expr | None = None


@dataclass(frozen=True, slots=True)
class Constraint:
    """A rule an instruction instance must satisfy; ``text`` is the rule as written. ``dynamic``: whether
    the rule reads an operand (a register holding an address, say), so that only a run can check it
    (``isa.instance.reads_operands``); decided once, as the rule is built."""

    kind: str
    rule: Expr
    text: str
    message: str
    dynamic: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dynamic", any(isinstance(n, Access) for n in walk(self.rule)))


@dataclass(frozen=True, slots=True)
class Timing:
    """How long an instruction takes: the unit it occupies, its latency and its occupancy (cycles).

    ``asynchronous`` (the key ``async``): the instruction is issued to its unit's queue and the issuing core
    goes on; the unit runs it in the background (latency and cycles are the unit's), and the program waits
    for it with an instruction of group ``wait`` before it touches what the instruction reads or writes.

    ``engine``: which of the unit's engines runs an instance; a unit's engines run their work side by side."""

    unit: str | None = None
    latency: Expr | None = None
    cycles: Expr | None = None
    doc: str = ""
    asynchronous: bool = False
    # which of the unit's engines runs an instance (an expression over fields; None: engine 0). A unit's
    # engines run side by side, each its own queue (Cambricon's IO-DMA and Move-DMA, anchors §3.2)
    engine: Expr | None = None


@dataclass(frozen=True, slots=True)
class Instruction:
    """One instruction: operands, semantics (typed per binding of its type variables), constraints, timing."""

    name: str
    summary: str
    format: Format | None
    fixed: Mapping[str, int]
    types: Mapping[str, tuple[str, ...]]
    operands: tuple[Operand, ...]
    semantics: str
    statements: tuple[Assign, ...]
    typed: Mapping[tuple[tuple[str, str], ...], Semantics]
    constraints: tuple[Constraint, ...] = ()
    timing: Timing = field(default_factory=Timing)
    intrinsic: str | None = None
    group: str | None = None
    doc: str = ""
    #: the operands the intrinsic takes, in its argument order (a real machine's backend calls it so)
    intrinsic_args: tuple[str, ...] = ()
    #: the CPU features the instruction needs: any one of these sets (LLVM's names, e.g. avx512vnni)
    features: tuple[tuple[str, ...], ...] = ()
    #: the threads that execute one instance together (a GPU's warp: 32, a Hopper warpgroup: 128; 1 elsewhere)
    threads: int = 1
    #: the operand the intrinsic's result is added to, for an intrinsic that takes no accumulator (AVX2's
    #: llvm.x86.avx2.pmadd.wd returns the pair sums only): the backend adds it, ``d = c + intrinsic(a, b)``
    intrinsic_accumulator: str | None = None

    @property
    def fields(self) -> tuple[Field, ...]:
        """The fields an instance sets (the format's fields that are not fixed)."""
        if self.format is None:
            return ()
        return tuple(f for f in self.format.fields if f.name not in self.fixed)

    def field(self, name: str) -> Field:
        if self.format is None:
            raise KeyError(f"instruction '{self.name}' has no fields")
        return self.format.field(name)

    def operand(self, name: str) -> Operand:
        for op in self.operands:
            if op.name == name:
                return op
        raise KeyError(f"instruction '{self.name}' has no operand '{name}'")

    def runs_with(self, features: frozenset[str] | set[str]) -> bool:
        """Whether a machine with ``features`` has one of the feature sets the instruction needs."""
        return not self.features or any(set(option) <= features for option in self.features)

    def bindings(self) -> list[dict[str, str]]:
        """Every binding of the type variables (one empty binding when there are none)."""
        return type_bindings(self.types)

    def typed_semantics(self, types: Mapping[str, str] | None = None) -> Semantics:
        """The typed semantics for ``types``, a binding of every type variable (omit it if there are none)."""
        key = tuple(sorted((types or {}).items()))
        try:
            return self.typed[key]
        except KeyError:
            wanted = ", ".join(f"{k} in {list(v)}" for k, v in self.types.items()) or "no type variables"
            raise KeyError(
                f"instruction '{self.name}': no semantics for types {dict(key)}; expected {wanted}"
            ) from None

    def operand_dtype(self, op: Operand, types: Mapping[str, str]) -> str:
        return types.get(op.dtype, op.dtype)


@dataclass(frozen=True, slots=True)
class DataKind:
    """A kind of record a Program carries besides instructions (VITA's micro-ops), encoded with ``format``."""

    name: str
    summary: str
    format: Format


@dataclass(frozen=True, slots=True)
class Insn:
    """An instance of an instruction (or a data record): its name and the values of its non-fixed fields.

    Values are integers: enum fields hold codes, type fields hold the code of their dtype in the field's enum.
    Build one with ``ISA.insn(name, **fields)``, which accepts names for enum and type fields.
    """

    name: str
    fields: tuple[tuple[str, int], ...] = ()

    def __getitem__(self, key: str) -> int:
        for k, v in self.fields:
            if k == key:
                return v
        raise KeyError(f"{self.name} has no field '{key}'")

    def get(self, key: str, default: int | None = None) -> int | None:
        for k, v in self.fields:
            if k == key:
                return v
        return default

    @property
    def values(self) -> dict[str, int]:
        return dict(self.fields)

    def __reduce__(self) -> tuple:
        return Insn, (self.name, self.fields)   # a program pickles as fast as its tuples (the kernel cache)


@dataclass(frozen=True, slots=True)
class ISA:
    """An instruction set for one configuration (``params`` already include overrides and derived values)."""

    name: str
    summary: str
    insn_bits: int | None
    params: Mapping[str, int]
    enums: Mapping[str, Enum]
    spaces: Mapping[str, Space]
    formats: Mapping[str, Format]
    instructions: Mapping[str, Instruction]
    data: Mapping[str, DataKind]
    source: str = "<spec>"
    defaults: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    text: str = field(default="", repr=False)  # the TOML it was loaded from ("" when built in Python)
    #: the instructions the spec's own file declares (new ones and changed ones), in its order; the others
    #: come from the specs it ``extends``. The CPU schedules' choice of a dot product (compiler/ops/cpu.py,
    #: ``packing``) tries these first, so that an extension's instruction is the one used.
    declared: tuple[str, ...] = ()

    def __hash__(self) -> int:
        return hash((self.name, self.source, self.text, tuple(sorted(self.params.items()))))

    def with_params(self, params: Mapping[str, int]) -> ISA:
        """This spec with parameter overrides ``params`` applied on top of its own (derived values follow).

        The spec is reloaded from the text it was loaded from (once per distinct text and parameters), so a
        machine config can apply its parameters to any spec value, built-in or a user's file, without
        looking a spec up by name.
        """
        if not params or all(self.params.get(k) == v for k, v in params.items()):
            return self
        if not self.text:
            raise ValueError(f"ISA '{self.name}' was built in Python and cannot be reloaded with parameters")
        from isa.loader import load_spec_text

        return load_spec_text(self.text, self.source, {**self.overrides, **params})

    def instruction(self, name: str) -> Instruction:
        try:
            return self.instructions[name]
        except KeyError:
            raise KeyError(
                f"ISA '{self.name}' has no instruction '{name}'; it has {', '.join(self.instructions)}"
            ) from None

    def insn(self, name: str, **values: int | str) -> Insn:
        """An instance of instruction (or data kind) ``name``; enum and type fields accept names.

        Fields left out take their default, or 0 when they have none. Raises ``EncodingError`` naming the
        field for unknown fields, unknown names and values that do not fit.
        """
        from isa.errors import EncodingError

        if name in self.instructions:
            fields = self.instructions[name].fields
        elif name in self.data:
            fields = self.data[name].format.fields
        else:
            raise EncodingError(f"ISA '{self.name}' has no instruction or data kind '{name}'")
        known = {f.name for f in fields}
        unknown = sorted(set(values) - known)
        if unknown:
            raise EncodingError(
                f"{name}: unknown field '{unknown[0]}'; fields are "
                f"{', '.join(f.name for f in fields) or 'none'}"
            )
        out = []
        for f in fields:
            v = values.get(f.name, f.default if f.default is not None else 0)
            if isinstance(v, str):
                v = self.code_of(f, v, name)
            if isinstance(v, bool):
                v = int(v)
            if not isinstance(v, int) or not f.lo <= v <= f.hi:
                raise EncodingError(
                    f"{name}: field '{f.name}' = {v!r} does not fit in {f.bits} "
                    f"{'signed ' if f.signed else ''}bits ({f.lo}..{f.hi})"
                )
            out.append((f.name, v))
        return Insn(name, tuple(out))

    def code_of(self, f: Field, value: str, where: str) -> int:
        """The code of name ``value`` in field ``f``'s enum."""
        from isa.errors import EncodingError

        if f.enum is None:
            raise EncodingError(f"{where}: field '{f.name}' takes a number, but got {value!r}")
        e = self.enums[f.enum]
        key = value
        if f.kind == "type":
            from isa.dtypes import canonical

            key = next((n for n in e.values if canonical(n) == canonical(value)), value)
        if key not in e.values:
            raise EncodingError(
                f"{where}: field '{f.name}' takes one of {', '.join(e.values)}, but got {value!r}"
            )
        return e.values[key]

    def types_of(self, insn: Insn) -> dict[str, str]:
        """The dtype bound to each type variable of ``insn`` by its type fields."""
        from isa.dtypes import canonical

        instr = self.instruction(insn.name)
        out = {}
        for tv in instr.types:
            f = instr.field(tv)
            name = self.enums[f.enum].name_of(insn[tv])
            out[tv] = canonical(name) if name is not None else f"<code {insn[tv]}>"
        return out

    @property
    def overrides(self) -> dict[str, int]:
        """Parameters whose value differs from the spec's default."""
        return {k: v for k, v in self.params.items() if k in self.defaults and self.defaults[k] != v}

    def enum_values(self) -> dict[str, int]:
        """Every enum member name with its code (names are unique across enums)."""
        return {name: code for e in self.enums.values() for name, code in e.values.items()}

    def space_by_id(self, code: int) -> Space | None:
        for s in self.spaces.values():
            if s.id == code:
                return s
        return None

    def scalar_env(
        self,
        fields: Mapping[str, int] | None = None,
        types: Mapping[str, str] | None = None,
        tensors: Mapping[str, object] | None = None,
    ) -> ScalarEnv:
        """The environment an instruction's scalar expressions evaluate in."""
        values = {**self.enum_values(), **self.params, **(fields or {})}

        def capacity(code: int) -> int:
            space = self.space_by_id(code)
            if space is None:
                raise KeyError(f"no memory space has code {code}")
            return space.bytes

        return ScalarEnv(values, dict(types or {}), dict(tensors or {}), capacity)
