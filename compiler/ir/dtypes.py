"""Scalar data types of the loop IR.

A ``DType`` is a value (kind, bits). The names are numpy's: ``int8 uint8 int16 int32 int64 float16 bfloat16
float32`` plus ``bool`` for conditions. numpy has no bfloat16, so bfloat16 data is stored in float32 arrays
whose values are bfloat16-representable (see ``round_to``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from compiler.errors import IRTypeError

_KINDS = ("int", "uint", "float", "bfloat", "bool")


@dataclass(frozen=True, slots=True)
class DType:
    """A scalar type: ``kind`` is one of int, uint, float, bfloat, bool; ``bits`` its width."""

    kind: str
    bits: int

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise IRTypeError(f"dtype kind: expected one of {_KINDS}, but got {self.kind!r}")

    @property
    def name(self) -> str:
        return "bool" if self.kind == "bool" else f"{self.kind}{self.bits}"

    @property
    def short(self) -> str:
        """The printer's and the ISA language's cast name: i8, u8, i32, f32, bf16, bool."""
        if self.kind == "bool":
            return "bool"
        return {"int": "i", "uint": "u", "float": "f", "bfloat": "bf"}[self.kind] + str(self.bits)

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def is_float(self) -> bool:
        return self.kind in ("float", "bfloat")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def min_value(self) -> int | float:
        if self.kind == "int":
            return -(1 << (self.bits - 1))
        if self.kind in ("uint", "bool"):
            return 0
        return -float(np.finfo(self.numpy).max) if self.kind == "float" else -_BF16_MAX

    @property
    def max_value(self) -> int | float:
        if self.kind == "int":
            return (1 << (self.bits - 1)) - 1
        if self.kind == "uint":
            return (1 << self.bits) - 1
        if self.kind == "bool":
            return 1
        return float(np.finfo(self.numpy).max) if self.kind == "float" else _BF16_MAX

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that stores values of this type (float32 for bfloat16)."""
        if self.kind == "bfloat":
            return np.dtype("float32")
        return np.dtype(self.name)

    def __str__(self) -> str:
        return self.name


_BF16_MAX = float(np.frombuffer(np.array([0x7F7F0000], "<u4").tobytes(), "<f4")[0])

bool_ = DType("bool", 1)
int8 = DType("int", 8)
uint8 = DType("uint", 8)
int16 = DType("int", 16)
int32 = DType("int", 32)
int64 = DType("int", 64)
float16 = DType("float", 16)
bfloat16 = DType("bfloat", 16)
float32 = DType("float", 32)

ALL = (bool_, int8, uint8, int16, int32, int64, float16, bfloat16, float32)
_BY_NAME = {d.name: d for d in ALL} | {d.short: d for d in ALL}
#: every name ``dtype`` takes (numpy's and the short ones)
NAMES = frozenset(_BY_NAME)


@cache
def _from_name(name: str) -> DType:
    try:
        return _BY_NAME[name]
    except KeyError:
        names = ", ".join(d.name for d in ALL)
        raise IRTypeError(f"unknown dtype {name!r}: expected one of {names}") from None


def dtype(value: str | DType | np.dtype | type) -> DType:
    """Convert a name (``"int8"``, ``"i8"``), a numpy dtype or a ``DType`` to a ``DType``."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return _from_name(value)
    try:
        return _from_name(np.dtype(value).name)
    except TypeError:
        raise IRTypeError(f"expected a dtype, but got {value!r}") from None


def wrap_int(value: int, dt: DType) -> int:
    """Wrap a Python integer to ``dt``'s width with two's-complement semantics."""
    if dt.kind == "bool":
        return 1 if value else 0
    mask = (1 << dt.bits) - 1
    value &= mask
    if dt.kind == "int" and value >> (dt.bits - 1):
        value -= 1 << dt.bits
    return value


def round_to(value: float, dt: DType) -> float:
    """Round a Python float to the nearest value of float type ``dt`` (round to nearest even)."""
    if dt.bits == 32 and dt.kind == "float":
        return float(np.float32(value))
    if dt.kind == "float" and dt.bits == 16:
        return float(np.float16(value))
    if dt.kind == "bfloat":
        return float(round_bfloat16(np.float32(value)))
    raise IRTypeError(f"round_to: expected a float dtype, but got {dt}")


def round_bfloat16(values: np.ndarray | np.floating) -> np.ndarray:
    """Round float32 values to bfloat16 precision (round to nearest even), kept in float32 storage."""
    arr = np.asarray(values, dtype=np.float32)
    bits = arr.view(np.uint32).astype(np.uint64)
    nan = np.isnan(arr)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(nan, arr, out)
