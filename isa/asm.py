"""Text assembly of Programs: ``disassemble(program) -> str`` and ``assemble(text) -> Program``.

    .isa vita                      # the ISA (a built-in spec name)
    .param LOG_BLOCK = 3           # parameter overrides, if any
    .data uop                      # records of a data kind, one per line
        dst_idx=0, src_idx=0, wgt_idx=0
    .text                          # instructions
    loop:                          # a label: the index of the next instruction
        vadd.f32 dst=0x0, a=0x100, b=0x200, n=64
        blt r1, r2, loop

Arguments are ``field=value`` or positional (in field order, type fields excluded: they are the mnemonic's
suffix). Values: integers (``12``, ``0x40``, ``-3``), enum names, registers ``r3`` for fields of kind "reg",
labels for fields of kind "target". Fields left out take their default (0 if none); the disassembler leaves
out
fields that equal a declared default. ``assemble(disassemble(p)) == p`` for every program.
"""

from __future__ import annotations

import re

from isa.dtypes import canonical
from isa.errors import AsmError, EncodingError, ISASpecError
from isa.program import Program
from isa.spec import ISA, Field, Insn

_LABEL = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*):\s*(.*)$")
_INT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*)$")


def disassemble(program: Program) -> str:
    """The text form of ``program``."""
    spec = program.isa
    lines = [f"# Tandem program for ISA '{spec.name}'", f".isa {spec.name}"]
    lines += [f".param {k} = {v}" for k, v in spec.overrides.items()]
    for kind, records in program.data:
        lines.append(f".data {kind}")
        fields = spec.data[kind].format.fields
        lines += [f"    {_args(spec, fields, rec, {})}".rstrip() for rec in records]
    lines.append(".text")
    targets = sorted(
        {
            rec[f.name]
            for rec in program.insns
            for f in spec.instructions[rec.name].fields
            if f.kind == "target"
        }
    )
    labels = {t: f"L{t}" for t in targets}
    for pc, insn in enumerate(program.insns):
        if pc in labels:
            lines.append(f"{labels[pc]}:")
        lines.append(f"    {format_insn(spec, insn, labels)}")
    if len(program.insns) in labels:
        lines.append(f"{labels[len(program.insns)]}:")
    return "\n".join(lines) + "\n"


def format_insn(spec: ISA, insn: Insn, labels: dict[int, str] | None = None) -> str:
    """One instruction as assembly text, e.g. ``vadd.f32 dst=0x0, a=0x100, b=0x200, n=64``; branch targets
    print as ``labels[target]``, or as the bare instruction index where ``labels`` has none."""
    instr = spec.instructions[insn.name]
    suffix = "".join(f".{spec.types_of(insn)[tv]}" for tv in instr.types)
    args = _args(spec, [f for f in instr.fields if f.kind != "type"], insn, labels)
    return f"{insn.name}{suffix} {args}".rstrip()


def _args(spec: ISA, fields, insn: Insn, labels: dict[int, str] | None) -> str:
    parts = []
    for f in fields:
        v = insn[f.name]
        if f.default is not None and v == f.default:
            continue
        parts.append(f"{f.name}={_value(spec, f, v, labels)}")
    return ", ".join(parts)


def _value(spec: ISA, f: Field, v: int, labels: dict[int, str] | None) -> str:
    if f.kind == "addr":
        return hex(v)
    if f.kind == "reg":
        return f"r{v}"
    if f.kind == "target":
        return labels.get(v, str(v)) if labels is not None else str(v)
    if f.enum is not None:
        name = spec.enums[f.enum].name_of(v)
        return name if name is not None else str(v)
    return str(v)


def assemble(text: str, isa: ISA | None = None, source: str = "<asm>") -> Program:
    """The Program written in ``text``; its ``.isa`` line names a built-in ISA unless ``isa`` is given."""
    return _Assembler(text, isa, source).run()


class _Assembler:
    def __init__(self, text: str, spec: ISA | None, source: str) -> None:
        self.lines = text.splitlines()
        self.spec = spec
        self.source = source
        self.isa_name: str | None = None
        self.params: dict[str, int] = {}
        self.data_lines: dict[str, int] = {}  # data kind -> line of its first .data directive

    def error(self, line: int, message: str) -> AsmError:
        return AsmError(message, line=line, source=self.source)

    def run(self) -> Program:
        section = ".text"
        insns: list[tuple[int, str, list[str]]] = []  # (line, mnemonic, args)
        data: dict[str, list[tuple[int, list[str]]]] = {}
        labels: dict[str, int] = {}
        for no, raw in enumerate(self.lines, start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("."):
                section = self.directive(no, line, section, data)
                continue
            m = _LABEL.match(line)
            if m:
                if section != ".text":
                    raise self.error(no, "labels belong in the .text section")
                if m.group(1) in labels:
                    raise self.error(no, f"label '{m.group(1)}' is defined twice")
                labels[m.group(1)] = len(insns)
                line = m.group(2).strip()
                if not line:
                    continue
            if section == ".text":
                mnemonic, _, rest = line.partition(" ")
                insns.append((no, mnemonic, _split_args(rest)))
            else:
                data[section].append((no, _split_args(line)))
        spec = self.resolve_isa()
        program_insns = [self.instruction(spec, no, mnemonic, args, labels) for no, mnemonic, args in insns]
        records = {
            kind: tuple(self.record(spec, kind, no, args) for no, args in recs) for kind, recs in data.items()
        }
        try:
            return Program(spec, program_insns, records)
        except EncodingError as e:
            raise AsmError(str(e), source=self.source) from None

    def directive(self, no: int, line: str, section: str, data: dict) -> str:
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        if word == ".isa":
            if not rest:
                raise self.error(no, ".isa needs an ISA name")
            self.isa_name = rest
            return section
        if word == ".param":
            key, eq, value = rest.partition("=")
            if not eq or not _INT.match(value.strip()):
                raise self.error(no, f"expected '.param NAME = INTEGER', but got '{line}'")
            self.params[key.strip()] = self.integer(no, value.strip())
            return section
        if word == ".data":
            if not rest:
                raise self.error(no, ".data needs a data kind name")
            data.setdefault(rest, [])
            self.data_lines.setdefault(rest, no)
            return rest
        if word == ".text":
            return ".text"
        raise self.error(no, f"unknown directive '{word}'; directives are .isa, .param, .data, .text")

    def integer(self, no: int, text: str) -> int:
        """The value of integer literal ``text`` (``_INT``), which must fit in 64 bits as every spec value."""
        try:
            value = int(text.replace("_", ""), 0)
        except ValueError:   # '0x_', or more decimal digits than int() reads
            value = None
        if value is None or not -(2**63) <= value < 2**64:
            shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text)} characters)"
            raise self.error(no, f"'{shown}' is not an integer of at most 64 bits")
        return value

    def resolve_isa(self) -> ISA:
        if self.spec is not None:
            if self.isa_name is not None and self.isa_name != self.spec.name:
                raise AsmError(
                    f"the text is for ISA '{self.isa_name}', but ISA '{self.spec.name}' was given",
                    source=self.source,
                )
            if self.params and self.params != self.spec.overrides:
                raise AsmError(
                    f"the text overrides {self.params}, but the given ISA has {self.spec.overrides}",
                    source=self.source,
                )
            return self.spec
        if self.isa_name is None:
            raise AsmError("no '.isa NAME' line, and no ISA was given", source=self.source)
        from isa.loader import load_isa

        try:
            return load_isa(self.isa_name, params=self.params)
        except ISASpecError as e:
            raise AsmError(f"cannot load ISA '{self.isa_name}': {e}", source=self.source) from None

    def instruction(self, spec: ISA, no: int, mnemonic: str, args: list[str], labels: dict[str, int]) -> Insn:
        name, *suffixes = mnemonic.split(".")
        if name not in spec.instructions:
            raise self.error(no, f"unknown instruction '{name}' in ISA '{spec.name}'")
        instr = spec.instructions[name]
        if len(suffixes) != len(instr.types):
            want = "".join(f".{tv}" for tv in instr.types) or "no type suffix"
            raise self.error(no, f"{name} takes {want}, but got '{mnemonic}'")
        values: dict[str, int | str] = dict(zip(instr.types, suffixes, strict=True))
        fields = [f for f in instr.fields if f.kind != "type"]
        self.bind(no, name, fields, args, values, spec, labels)
        for tv in instr.types:
            if canonical(str(values[tv])) not in instr.types[tv]:
                raise self.error(
                    no,
                    f"{name}: type {tv} must be one of {', '.join(instr.types[tv])}, but got '{values[tv]}'",
                )
        try:
            return spec.insn(name, **values)
        except EncodingError as e:
            raise self.error(no, str(e)) from None

    def record(self, spec: ISA, kind: str, no: int, args: list[str]) -> Insn:
        if kind not in spec.data:
            raise self.error(self.data_lines[kind], f"ISA '{spec.name}' has no data kind '{kind}'")
        values: dict[str, int | str] = {}
        self.bind(no, kind, list(spec.data[kind].format.fields), args, values, spec, {})
        try:
            return spec.insn(kind, **values)
        except EncodingError as e:
            raise self.error(no, str(e)) from None

    def bind(
        self,
        no: int,
        name: str,
        fields: list[Field],
        args: list[str],
        values: dict,
        spec: ISA,
        labels: dict[str, int],
    ) -> None:
        by_name = {f.name: f for f in fields}
        position = 0
        for arg in args:
            key, eq, text = arg.partition("=")
            if eq:
                key, text = key.strip(), text.strip()
                if key not in by_name:
                    raise self.error(
                        no, f"{name} has no field '{key}'; fields are {', '.join(by_name) or 'none'}"
                    )
                f = by_name[key]
            else:
                if position >= len(fields):
                    raise self.error(no, f"{name} takes {len(fields)} arguments, but got more")
                f, text = fields[position], arg.strip()
                position += 1
            if f.name in values:
                raise self.error(no, f"{name}: field '{f.name}' is given twice")
            values[f.name] = self.parse_value(no, name, f, text, labels)

    def parse_value(self, no: int, name: str, f: Field, text: str, labels: dict[str, int]) -> int | str:
        if _INT.match(text):
            return self.integer(no, text)
        if f.kind == "reg" and re.fullmatch(r"r\d+", text):
            return self.integer(no, text[1:])
        if f.kind == "target":
            if text not in labels:
                raise self.error(no, f"{name}: undefined label '{text}'")
            return labels[text]
        if f.enum is not None:
            return text  # ISA.insn() resolves the name and reports an unknown one
        raise self.error(no, f"{name}: field '{f.name}' takes a number, but got '{text}'")


def _split_args(text: str) -> list[str]:
    text = text.strip()
    if not text:
        return []
    return [a.strip() for a in text.split(",")]
