"""Every built-in spec loads, and every encodable instruction and record round-trips through its encoding,
its assembly text and the program file format (property tests over random in-range field values)."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from isa.binary import decode_record, encode_record

SPECS = isa.builtin_specs()


@cache
def _loaded(name: str) -> isa.ISA:
    return isa.load_isa(name)


def _cases(kind: str) -> list[tuple[str, str]]:
    out = []
    for name in SPECS:
        spec = _loaded(name)
        if kind == "insn":
            out += [(name, i.name) for i in spec.instructions.values() if i.format is not None]
        else:
            out += [(name, d) for d in spec.data]
    return out


def _value(data, spec: isa.ISA, instr_types, f, n_insns: int):
    if f.kind == "type":
        return data.draw(st.sampled_from(list(instr_types[f.name])))
    if f.kind == "enum":
        return data.draw(st.sampled_from(list(spec.enums[f.enum].values)))
    if f.kind == "target":
        return data.draw(st.integers(0, n_insns))
    hi = f.hi if f.max is None else min(f.hi, f.max)
    return data.draw(st.integers(f.lo, hi))


def test_there_are_built_in_specs_for_every_target():
    assert {"vita", "diannao", "x86", "arm", "cuda"} <= set(SPECS)


@pytest.mark.parametrize("name", SPECS)
def test_every_instruction_has_typed_semantics_for_every_type_binding(name):
    spec = _loaded(name)
    assert spec.instructions, f"{name} declares no instructions"
    for instr in spec.instructions.values():
        assert instr.summary
        for binding in instr.bindings():
            instr.typed_semantics(binding)  # raises if a binding was not typed at load


@pytest.mark.parametrize(("name", "insn_name"), _cases("insn"))
@settings(max_examples=25)
@given(data=st.data())
def test_instruction_round_trips_through_word_text_and_file(name, insn_name, data):
    spec = _loaded(name)
    instr = spec.instruction(insn_name)
    values = {f.name: _value(data, spec, instr.types, f, 1) for f in instr.fields}
    insn = spec.insn(insn_name, **values)
    assert isa.decode_insn(spec, isa.encode_insn(spec, insn)) == insn
    program = isa.Program(spec, [insn])
    assert isa.assemble(isa.disassemble(program), isa=spec) == program
    assert isa.decode_program(isa.encode_program(program), spec=spec) == program


@pytest.mark.parametrize(("name", "kind"), _cases("data"))
@settings(max_examples=25)
@given(data=st.data())
def test_data_record_round_trips(name, kind, data):
    spec = _loaded(name)
    fmt = spec.data[kind].format
    rec = spec.insn(kind, **{f.name: _value(data, spec, {}, f, 0) for f in fmt.fields})
    assert decode_record(spec, kind, encode_record(spec, rec)) == rec
    program = isa.Program(spec, [], {kind: [rec, rec]})
    assert isa.assemble(isa.disassemble(program), isa=spec) == program
    assert isa.decode_program(isa.encode_program(program), spec=spec) == program


@pytest.mark.parametrize("name", [n for n in SPECS if _loaded(n).insn_bits is not None])
def test_programs_name_their_isa_so_text_and_files_load_it_by_name(name):
    spec = _loaded(name)
    first = next(i for i in spec.instructions.values() if i.format is not None)
    def first_value(f):
        if f.kind == "type":
            return first.types[f.name][0]
        return next(iter(spec.enums[f.enum].values)) if f.kind == "enum" else 0

    values = {f.name: first_value(f) for f in first.fields}
    program = isa.Program(spec, [spec.insn(first.name, **values)])
    assert isa.assemble(isa.disassemble(program)) == program
    assert isa.decode_program(isa.encode_program(program)) == program
