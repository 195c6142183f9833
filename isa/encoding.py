"""Bit-field layouts: placing fields, and encoding/decoding field values to and from integers.

Layouts are LSB-first over the whole instruction word. With ``unit_bits`` (VTA's structs are C bit-fields of
``uint64_t``), a field that would straddle a unit boundary starts at the next unit, as C compilers lay them
out;
this is how VTA's LOAD/STORE leave bits 58-63 empty and start ``y_size`` at bit 64.
"""

from __future__ import annotations

from collections.abc import Mapping

from isa.errors import EncodingError
from isa.spec import Field, Format


class LayoutError(ValueError):
    """A layout is impossible; ``field`` names the culprit."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def place_fields(
    fields: list[tuple[str, int, int | None]], total_bits: int, unit_bits: int | None
) -> list[int]:
    """The LSB of each (name, bits, explicit lsb or None), checking overlaps and the total width."""
    placed: list[tuple[str, int, int]] = []
    cursor = 0
    out = []
    for name, bits, lsb in fields:
        if bits <= 0:
            raise LayoutError(f"a field must be at least 1 bit wide, but '{name}' has {bits}", name)
        if unit_bits is not None and bits > unit_bits:
            raise LayoutError(f"field '{name}' ({bits} bits) is wider than the {unit_bits}-bit unit", name)
        if lsb is None:
            lsb = cursor
            if unit_bits is not None and lsb // unit_bits != (lsb + bits - 1) // unit_bits:
                lsb = (lsb // unit_bits + 1) * unit_bits
        for other, olsb, obits in placed:
            if lsb < olsb + obits and olsb < lsb + bits:
                raise LayoutError(
                    f"field '{name}' (bits {lsb}..{lsb + bits - 1}) overlaps field '{other}' "
                    f"(bits {olsb}..{olsb + obits - 1})",
                    name,
                )
        if lsb + bits > total_bits:
            raise LayoutError(
                f"field '{name}' ends at bit {lsb + bits - 1}, beyond the {total_bits}-bit word", name
            )
        placed.append((name, lsb, bits))
        out.append(lsb)
        cursor = lsb + bits
    return out


def pack(fmt: Format, values: Mapping[str, int], *, what: str = "") -> int:
    """The word holding ``values`` (every field of ``fmt``; missing ones are 0) as an unsigned integer."""
    word = 0
    for f in fmt.fields:
        v = int(values.get(f.name, 0))
        if not f.lo <= v <= f.hi:
            raise EncodingError(
                f"{what or fmt.name}: field '{f.name}' = {v} does not fit in {f.bits} "
                f"{'signed ' if f.signed else ''}bits ({f.lo}..{f.hi})"
            )
        word |= (v & ((1 << f.bits) - 1)) << f.lsb
    return word


def unpack(fmt: Format, word: int) -> dict[str, int]:
    """Every field's value in ``word`` (sign-extended for signed fields)."""
    out = {}
    for f in fmt.fields:
        v = (word >> f.lsb) & ((1 << f.bits) - 1)
        if f.signed and v >> (f.bits - 1):
            v -= 1 << f.bits
        out[f.name] = v
    return out


def fixed_pattern(fmt: Format, fixed: Mapping[str, int]) -> tuple[int, int]:
    """(mask, value): the bits that identify an instruction with these fixed field values."""
    mask = value = 0
    for name, v in fixed.items():
        f = fmt.field(name)
        m = ((1 << f.bits) - 1) << f.lsb
        mask |= m
        value |= (v & ((1 << f.bits) - 1)) << f.lsb
    return mask, value


def field_mask(f: Field) -> int:
    return ((1 << f.bits) - 1) << f.lsb
