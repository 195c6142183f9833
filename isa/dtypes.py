"""Scalar dtypes of the ISA language, their numpy storage and exact casts.

bf16 has no numpy type: bf16 values are stored in float32 arrays holding bf16-representable values, and every
result typed bf16 is rounded to nearest-even on the 16 high bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class DType:
    """A scalar type: ``kind`` is "int", "uint", "float" or "bool"; ``bits`` its width."""

    name: str
    kind: str
    bits: int

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that stores values of this type."""
        return np.dtype(_NUMPY[self.name])

    def min(self) -> int:
        return -(1 << (self.bits - 1)) if self.kind == "int" else 0

    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.kind == "int" else (1 << self.bits) - 1


_SPECS = {
    "i8": ("int", 8), "i16": ("int", 16), "i32": ("int", 32), "i64": ("int", 64),
    "u8": ("uint", 8), "u16": ("uint", 16), "u32": ("uint", 32), "u64": ("uint", 64),
    "f16": ("float", 16), "bf16": ("float", 16), "f32": ("float", 32), "f64": ("float", 64),
    "bool": ("bool", 1),
}
_NUMPY = {
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "float32", "f32": "float32", "f64": "float64", "bool": "bool",
}
ALIASES = {"fp16": "f16", "fp32": "f32", "fp64": "f64", "int8": "i8", "int16": "i16", "int32": "i32",
           "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
           "float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16"}

DTYPES: dict[str, DType] = {name: DType(name, kind, bits) for name, (kind, bits) in _SPECS.items()}


def canonical(name: str) -> str | None:
    """The canonical dtype name for ``name`` (an alias or a name), or None if it names no dtype."""
    name = ALIASES.get(name, name)
    return name if name in DTYPES else None


def dtype(name: str) -> DType:
    """The DType called ``name`` (aliases accepted); KeyError if there is none."""
    key = canonical(name)
    if key is None:
        raise KeyError(name)
    return DTYPES[key]


def round_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even), returned as float32."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(nan, np.float32(np.nan), out)


_BELOW_2_63 = float(2**63 - 1024)  # the largest float64 below 2**63


def convert(values, dt: DType) -> np.ndarray:
    """Convert an array (or scalar) to ``dt`` with the hardware's rules.

    Integers wrap modulo 2**bits; floats round to nearest even; float -> integer truncates toward zero and
    then wraps; bool is "not zero".
    """
    arr = np.asarray(values)
    if dt.kind == "bool":
        return arr != 0
    if dt.is_int:
        if arr.dtype.kind == "f":
            with np.errstate(invalid="ignore", over="ignore"):
                arr = np.trunc(arr.astype(np.float64))
                # beyond int64 the wrap is undefined anyway; saturate first (NaN -> 0) so the cast is defined
                # on every machine (2.0**63 - 1 rounds to 2.0**63, which does not fit: use the float below it)
                arr = np.clip(np.nan_to_num(arr, nan=0.0), -(2.0**63), _BELOW_2_63).astype(np.int64)
        if arr.dtype.kind == "b":
            arr = arr.astype(np.int64)
        return arr.astype(dt.numpy, copy=False) if arr.dtype == dt.numpy else _wrap(arr, dt)
    if dt.name == "bf16":
        if arr.dtype not in (np.float32, np.float16, np.bool_):  # f64, int: avoid rounding twice
            return round_bf16(_f32_round_to_odd(arr))
        return round_bf16(arr.astype(np.float32))
    with np.errstate(over="ignore"):
        return arr.astype(dt.numpy)


def _f32_round_to_odd(values) -> np.ndarray:
    """``values`` (float64, or integers exact in it) as float32 rounded to odd: truncated toward zero, with
    the last bit set when inexact. Rounding that to bf16 gives the correctly rounded bf16 (rounding to nearest
    twice, f64 -> f32 -> bf16, can land on a tie that the exact value was not on)."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        f = np.where(np.abs(f.astype(np.float64)) > np.abs(x), np.nextafter(f, np.float32(0)), f)
        inexact = (f.astype(np.float64) != x) & ~np.isnan(x)
        return (np.asarray(f).view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


def _wrap(arr: np.ndarray, dt: DType) -> np.ndarray:
    """Two's-complement wrap of an integer array into ``dt`` (numpy's astype already wraps integer inputs)."""
    if arr.dtype.kind in "iu":
        return arr.astype(dt.numpy)
    return np.asarray(arr).astype(np.int64).astype(dt.numpy)
