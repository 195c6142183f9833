"""Binary forms: instruction words, data records, and whole programs.

    encode_insn(spec, insn) -> int          decode_insn(spec, word) -> Insn
    encode_record(spec, rec) -> int         decode_record(spec, kind, word) -> Insn
    encode_program(program) -> bytes        decode_program(data, spec=None) -> Program
    instruction_stream(program) -> bytes    (just the instruction words, as a device fetches them)

Words are little-endian in memory (VTA's instruction is two little-endian uint64 words, low word first).

A program file is: b"TNDM", u16 version (1), the ISA name (u16 length + UTF-8), the parameter overrides
(u16 count; each: u16 length + name, i64 value), the instructions (u32 count, u16 bytes per word, words),
and the data sections (u16 count; each: u16 length + kind name, u16 bytes per record, u32 count,
records).
"""

from __future__ import annotations

import struct

from isa.encoding import fixed_pattern, pack, unpack
from isa.errors import EncodingError, ISASpecError
from isa.spec import ISA, Insn

MAGIC = b"TNDM"
VERSION = 1


def encode_insn(spec: ISA, insn: Insn) -> int:
    """The instruction word of ``insn`` as an unsigned integer (bit 0 = the format's LSB)."""
    instr = spec.instruction(insn.name)
    if instr.format is None:
        raise EncodingError(f"{insn.name}: instruction has no encoding in ISA '{spec.name}'")
    values = {**insn.values, **instr.fixed}
    return pack(instr.format, values, what=insn.name)


def decode_insn(spec: ISA, word: int) -> Insn:
    """The instruction whose fixed fields match ``word``, with its field values (EncodingError if none)."""
    for instr in _decoders(spec):
        mask, value = fixed_pattern(instr.format, instr.fixed)
        if word & mask == value and word >> instr.format.bits == 0:
            fields = unpack(instr.format, word)
            return Insn(instr.name, tuple((f.name, fields[f.name]) for f in instr.fields))
    raise EncodingError(
        f"word 0x{word:0{(spec.insn_bits or 64) // 4}x} decodes to no instruction of ISA '{spec.name}'"
    )


def _decoders(spec: ISA):
    return [i for i in spec.instructions.values() if i.format is not None]


def encode_record(spec: ISA, rec: Insn) -> int:
    """The word of data record ``rec`` (its name is the data kind)."""
    kind = _data_kind(spec, rec.name)
    return pack(kind.format, rec.values, what=rec.name)


def decode_record(spec: ISA, kind: str, word: int) -> Insn:
    """The data record of kind ``kind`` held in ``word``."""
    fmt = _data_kind(spec, kind).format
    if word >> fmt.bits:
        raise EncodingError(f"{kind}: word 0x{word:x} is wider than the {fmt.bits}-bit record")
    fields = unpack(fmt, word)
    return Insn(kind, tuple((f.name, fields[f.name]) for f in fmt.fields))


def _data_kind(spec: ISA, name: str):
    try:
        return spec.data[name]
    except KeyError:
        raise EncodingError(f"ISA '{spec.name}' has no data kind '{name}'") from None


def _word_bytes(bits: int) -> int:
    return (bits + 7) // 8


def instruction_stream(program) -> bytes:
    """The instruction words of ``program``, back to back, as the device's fetch unit reads them."""
    spec = program.isa
    if spec.insn_bits is None:
        raise EncodingError(f"ISA '{spec.name}' has no instruction width (insn_bits)")
    n = _word_bytes(spec.insn_bits)
    return b"".join(encode_insn(spec, i).to_bytes(n, "little") for i in program.insns)


def record_stream(program, kind: str) -> bytes:
    """The records of data kind ``kind`` of ``program``, back to back (VITA's micro-op buffer image)."""
    spec = program.isa
    n = _word_bytes(_data_kind(spec, kind).format.bits)
    return b"".join(encode_record(spec, r).to_bytes(n, "little") for r in program.records(kind))


def _put_str(out: bytearray, s: str) -> None:
    b = s.encode()
    out += struct.pack("<H", len(b)) + b


def encode_program(program) -> bytes:
    """The binary file form of ``program`` (see the module docstring)."""
    spec = program.isa
    out = bytearray(MAGIC + struct.pack("<H", VERSION))
    _put_str(out, spec.name)
    overrides = spec.overrides
    out += struct.pack("<H", len(overrides))
    for k, v in overrides.items():
        _put_str(out, k)
        out += struct.pack("<q", v)
    stream = instruction_stream(program) if program.insns else b""
    out += struct.pack("<IH", len(program.insns), _word_bytes(spec.insn_bits or 0))
    out += stream
    out += struct.pack("<H", len(program.data))
    for kind, records in program.data:
        _put_str(out, kind)
        out += struct.pack("<HI", _word_bytes(_data_kind(spec, kind).format.bits), len(records))
        out += record_stream(program, kind)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise EncodingError(
                f"program file ends early: {what} at byte {self.pos} needs {n} bytes, "
                f"{len(self.data) - self.pos} left"
            )
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))

    def string(self, what: str) -> str:
        (n,) = self.unpack("<H", what)
        try:
            return self.take(n, what).decode()
        except UnicodeDecodeError:
            raise EncodingError(f"program file: {what} at byte {self.pos - n} is not UTF-8") from None


def decode_program(data: bytes, spec: ISA | None = None):
    """The Program held in ``data``; the ISA is loaded by name (with the file's overrides) unless given."""
    from isa.loader import load_isa
    from isa.program import Program

    r = _Reader(bytes(data))
    if r.take(4, "the magic number") != MAGIC:
        raise EncodingError("not a Tandem program file: it does not start with b'TNDM'")
    (version,) = r.unpack("<H", "the version")
    if version != VERSION:
        raise EncodingError(f"program file version {version} is not supported (expected {VERSION})")
    name = r.string("the ISA name")
    (n_params,) = r.unpack("<H", "the parameter count")
    params = {}
    for _ in range(n_params):
        key = r.string("a parameter name")
        (params[key],) = r.unpack("<q", f"parameter '{key}'")
    if spec is None:
        try:
            spec = load_isa(name, params=params)
        except ISASpecError as e:
            raise EncodingError(f"program file is for ISA {name!r} with overrides {params}, which cannot be "
                                f"loaded: {e}") from None
    elif spec.name != name or spec.overrides != params:
        raise EncodingError(
            f"program file is for ISA '{name}' with overrides {params}, but the given ISA is "
            f"'{spec.name}' with {spec.overrides}"
        )
    count, width = r.unpack("<IH", "the instruction count")
    if width != _word_bytes(spec.insn_bits or 0):   # a width of 0 would read 2**32 instructions from nothing
        raise EncodingError(f"program file has {width}-byte instruction words, but ISA '{spec.name}' has "
                            f"{_word_bytes(spec.insn_bits or 0)}-byte ones")
    insns = []
    for k in range(count):
        word = int.from_bytes(r.take(width, f"instruction {k}"), "little")
        try:
            insns.append(decode_insn(spec, word))
        except EncodingError as e:
            raise EncodingError(f"instruction {k}: {e}") from None
    (n_kinds,) = r.unpack("<H", "the data section count")
    data_sections = {}
    for _ in range(n_kinds):
        kind = r.string("a data kind")
        width, count = r.unpack("<HI", f"data section '{kind}'")
        if kind in data_sections:
            raise EncodingError(f"program file has data section '{kind}' twice")
        if width != _word_bytes(_data_kind(spec, kind).format.bits):
            raise EncodingError(f"program file has {width}-byte '{kind}' records, but ISA '{spec.name}' has "
                                f"{_word_bytes(_data_kind(spec, kind).format.bits)}-byte ones")
        data_sections[kind] = tuple(
            decode_record(spec, kind, int.from_bytes(r.take(width, f"{kind} record {k}"), "little"))
            for k in range(count)
        )
    if r.pos != len(r.data):
        raise EncodingError(f"program file has {len(r.data) - r.pos} unexpected bytes at the end")
    return Program(spec, tuple(insns), data_sections)
