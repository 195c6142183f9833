"""Fuzz the assembler and the disassembler (isa/asm.py) of every built-in spec.

Run the full fuzzers with ``pytest -m fuzz tests/fuzz`` (2,000 examples each, random); the default run takes a
small derandomized slice of the same tests (tests/fuzz/conftest.py).

- random text (the spec's mnemonics, fields and directives mixed with garbage, huge numbers, unicode) either
  assembles or raises ``AsmError``; what assembles disassembles to text that assembles to the same program;
- random valid programs (instructions and records drawn from the spec's fields and their legal ranges)
  round-trip: ``assemble(disassemble(p)) == p``.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

import isa
from isa.dtypes import canonical
from isa.errors import AsmError
from isa.spec import ISA, Field

SPECS = isa.builtin_specs()


# ------------------------------------------------------------------------------------------ valid programs
def field_values(spec: ISA, instr, f: Field, n_insns: int) -> st.SearchStrategy[int]:
    """Legal values of field ``f``: a listed dtype's code for a type field, a branch target inside the
    program, anything in the field's range otherwise (its edges drawn often)."""
    if f.kind == "type":
        codes = spec.enums[f.enum].values
        allowed = instr.types[f.name] if instr is not None else [canonical(n) for n in codes]
        return st.sampled_from([c for n, c in codes.items() if canonical(n) in allowed])
    if f.kind == "target":
        return st.integers(0, n_insns)
    edges = st.sampled_from([f.lo, f.hi, 0, min(1, f.hi), f.default if f.default is not None else 0])
    return st.one_of(edges, st.integers(f.lo, f.hi))


@st.composite
def programs(draw, spec: ISA) -> isa.Program:
    names = sorted(spec.instructions)
    n = draw(st.integers(0, 12))
    insns = []
    for _ in range(n):
        instr = spec.instructions[draw(st.sampled_from(names))]
        values = {f.name: draw(field_values(spec, instr, f, n)) for f in instr.fields}
        insns.append(spec.insn(instr.name, **values))
    data = {}
    for kind in sorted(spec.data):
        if draw(st.booleans()):
            fields = spec.data[kind].format.fields
            data[kind] = [spec.insn(kind, **{f.name: draw(field_values(spec, None, f, 0)) for f in fields})
                          for _ in range(draw(st.integers(0, 5)))]
    return isa.Program(spec, insns, data)


@pytest.mark.parametrize("name", SPECS)
def test_valid_programs_round_trip_through_text(fuzz, name: str) -> None:
    spec = isa.load_isa(name)

    def prop(program: isa.Program) -> None:
        text = isa.disassemble(program)
        assert isa.assemble(text) == program, text
        assert isa.assemble(text, spec) == program, text

    fuzz.check(programs(spec), prop, ci_examples=100)


# ------------------------------------------------------------------------------------------ random text
NUMBERS = st.one_of(
    st.integers(-5, 300).map(str),
    st.integers(-(2**80), 2**80).map(str),
    st.integers(0, 2**70).map(hex),
    st.sampled_from(["0", "-0", "+1", "0x", "0b", "0b102", "1_0", "_1", "1__", "9" * 5000, "0x" + "f" * 5000,
                     "1.5", "1e3", "0o17", "٣", "１２"]),
)
GARBAGE = st.one_of(st.text(max_size=12), st.text(alphabet="=,.#:; \t\"'rLx0123456789-_", max_size=12))


def lines(spec: ISA) -> st.SearchStrategy[str]:
    """One line of assembly text: an instruction, a data record, a label or a directive, often broken."""
    mnemonics = sorted(spec.instructions) + sorted(spec.data)
    suffixes = sorted({canonical(n) or n for e in spec.enums.values() for n in e.values} | {"f32", "i8", "x"})
    fields = sorted({f.name for i in spec.instructions.values() for f in i.fields}
                    | {f.name for d in spec.data.values() for f in d.format.fields} | {"nope"})
    enum_names = sorted({n for e in spec.enums.values() for n in e.values})
    value = st.one_of(NUMBERS, st.sampled_from(enum_names or ["x"]),
                      st.integers(0, 40).map(lambda r: f"r{r}"),
                      st.sampled_from(["L0", "L1", "loop", "r", "r-1", ""]), GARBAGE)
    arg = st.one_of(value, st.tuples(st.sampled_from(fields), value).map(lambda t: f"{t[0]}={t[1]}"),
                    st.tuples(GARBAGE, value).map(lambda t: f"{t[0]}={t[1]}"))
    mnemonic = st.one_of(
        st.sampled_from(mnemonics or ["nop"]),
        st.tuples(st.sampled_from(mnemonics or ["nop"]), st.lists(st.sampled_from(suffixes), max_size=3)).map(
            lambda t: ".".join([t[0], *t[1]])),
        GARBAGE,
    )
    insn = st.tuples(mnemonic, st.lists(arg, max_size=10)).map(lambda t: f"{t[0]} {', '.join(t[1])}")
    label = st.sampled_from(["L0", "L1", "loop", "_x"]).map(lambda s: s + ":")
    directive = st.one_of(
        st.sampled_from([".isa " + spec.name, ".isa", ".isa nope", ".isa ../specs/vita", ".text", ".data",
                         f".data {next(iter(spec.data), 'uop')}", ".data nope", ".bogus", "."]),
        st.tuples(st.sampled_from(sorted(spec.params) or ["P"]), NUMBERS).map(
            lambda t: f".param {t[0]} = {t[1]}"),
        GARBAGE.map(lambda s: ".param " + s),
    )
    return st.one_of(insn, insn, insn, label, st.tuples(label, insn).map(" ".join), directive,
                     st.text(max_size=40), insn.map(lambda s: s + " # comment"))


@pytest.mark.parametrize("name", SPECS)
def test_random_text_assembles_or_raises_asmerror(fuzz, name: str) -> None:
    spec = isa.load_isa(name)
    texts = st.tuples(st.booleans(), st.lists(lines(spec), max_size=12)).map(
        lambda t: "\n".join(([f".isa {spec.name}"] if t[0] else []) + t[1]))

    def prop(text: str) -> None:
        for given in (spec, None):
            try:
                program = isa.assemble(text, given)
            except AsmError:
                continue
            again = isa.disassemble(program)
            assert isa.assemble(again) == program, again

    fuzz.check(texts, prop, ci_examples=60, pinned=[
        # found by this fuzzer: int() refuses more than 4300 digits, and str() prints no more (ValueError)
        ".isa diannao\n.param GMEM_BYTES = 0x" + "f" * 5000,
        ".isa diannao\n.param GMEM_BYTES = " + "9" * 5000,
        ".isa diannao\n.text\nvadd.f32 dst=" + "9" * 5000,
        ".isa diannao\n.text\nadd r" + "9" * 5000,
        ".isa diannao\n.text\nvadd.f32 dst=0x_",
        ".isa ../specs/vita\n.text",   # a path, not a built-in name
    ])
