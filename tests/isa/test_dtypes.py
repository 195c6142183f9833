"""Scalar dtypes (isa.dtypes): names and ranges, convert()'s hardware rules, and bfloat16 rounding."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.dtypes import DTYPES, canonical, convert, dtype, round_bf16

INT_BITS = {"i8": (8, True), "i16": (16, True), "i32": (32, True), "i64": (64, True), "u8": (8, False),
            "u16": (16, False), "u32": (32, False), "u64": (64, False)}


def wrap(v: int, name: str) -> int:
    bits, signed = INT_BITS[name]
    v %= 1 << bits
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def bf16_reference(b: int) -> int:
    """The bits of the bfloat16 nearest to the float32 with bits ``b`` (ties to even), or None for a NaN: keep
    the high half, add one unit of it when the dropped half is above the midpoint, or at it and the kept part
    is odd. Carries run into the exponent, as they should (the largest float32 rounds to infinity)."""
    if (b & 0x7F800000) == 0x7F800000 and b & 0x007FFFFF:
        return None
    kept, dropped = b & 0xFFFF0000, b & 0xFFFF
    if dropped > 0x8000 or (dropped == 0x8000 and kept & 0x10000):
        kept += 0x10000
    return kept


# ------------------------------------------------------------------------------------------ names

def test_dtype_table():
    expected = {"i8": ("int", 8, 1), "i16": ("int", 16, 2), "i32": ("int", 32, 4), "i64": ("int", 64, 8),
                "u8": ("uint", 8, 1), "u16": ("uint", 16, 2), "u32": ("uint", 32, 4), "u64": ("uint", 64, 8),
                "f16": ("float", 16, 2), "bf16": ("float", 16, 2), "f32": ("float", 32, 4),
                "f64": ("float", 64, 8), "bool": ("bool", 1, 1)}
    assert {n: (d.kind, d.bits, d.bytes) for n, d in DTYPES.items()} == expected
    assert DTYPES["bf16"].numpy == np.float32  # bf16 values live in float32 arrays
    assert DTYPES["f16"].numpy == np.float16


@pytest.mark.parametrize(("name", "lo", "hi"), [
    ("i8", -128, 127), ("u8", 0, 255), ("i16", -32768, 32767), ("u16", 0, 65535),
    ("i32", -(2**31), 2**31 - 1), ("u32", 0, 2**32 - 1), ("i64", -(2**63), 2**63 - 1), ("u64", 0, 2**64 - 1),
])
def test_integer_ranges(name, lo, hi):
    assert (DTYPES[name].min(), DTYPES[name].max()) == (lo, hi)
    assert DTYPES[name].is_int and not DTYPES[name].is_float


@pytest.mark.parametrize(("alias", "name"), [("fp16", "f16"), ("fp32", "f32"), ("int8", "i8"),
                                             ("uint32", "u32"), ("bfloat16", "bf16"), ("f32", "f32")])
def test_aliases(alias, name):
    assert canonical(alias) == name
    assert dtype(alias) is DTYPES[name]


def test_unknown_names():
    assert canonical("i7") is None
    assert canonical("T") is None
    with pytest.raises(KeyError):
        dtype("float128")


# ------------------------------------------------------------------------------------------ convert: integers

@pytest.mark.parametrize("dst", list(INT_BITS))
def test_integers_wrap_modulo_two_to_the_bits(dst):
    values = [0, 1, -1, 127, 128, 255, 256, -128, -129, 32767, 32768, 65535, 65536, -32769, 2**31 - 1, 2**31,
              2**32 - 1, 2**32, -(2**31) - 1, 2**63 - 1, -(2**63), 12345678901234]
    out = convert(np.array(values, dtype=np.int64), DTYPES[dst])
    assert out.dtype == DTYPES[dst].numpy
    assert out.tolist() == [wrap(v, dst) for v in values]


@settings(max_examples=200)
@given(st.sampled_from(list(INT_BITS)), st.sampled_from(list(INT_BITS)),
       st.lists(st.integers(-(2**63), 2**64 - 1), min_size=1, max_size=20))
def test_any_integer_conversion_wraps(src, dst, values):
    a = np.array([wrap(v, src) for v in values], dtype=DTYPES[src].numpy)
    assert convert(a, DTYPES[dst]).tolist() == [wrap(wrap(v, src), dst) for v in values]


def test_spelled_out_wraps():
    assert convert(np.array([200, 255, 128], np.uint8), DTYPES["i8"]).tolist() == [-56, -1, -128]
    assert convert(np.array([-1, -128], np.int8), DTYPES["u8"]).tolist() == [255, 128]
    assert convert(np.array([40000], np.int32), DTYPES["i16"]).tolist() == [-25536]
    assert convert(np.array([-1], np.int32), DTYPES["u32"]).tolist() == [2**32 - 1]
    assert convert(np.array([2**31], np.int64), DTYPES["i32"]).tolist() == [-(2**31)]
    assert convert(300, DTYPES["i8"]).tolist() == 44  # a Python scalar works too


# ------------------------------------------------------------------------------------------ convert: floats

@pytest.mark.parametrize("dst", ["i8", "u8", "i16", "i32", "u32", "i64"])
@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64])
def test_float_to_integer_truncates_toward_zero_then_wraps(src, dst):
    values = [0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5, -1.5, 2.5, -2.5, 127.9, -128.9, 128.0, 255.5, 256.0,
              -129.0, 1000.75, -1000.75, 65504.0, -65504.0, 3e9, -3e9, 1e15 + 0.5, 2.0**62]
    with np.errstate(over="ignore"):
        a = np.array(values, dtype=np.float64).astype(src)
    a = a[np.isfinite(a)]  # f16 cannot hold the large ones
    out = convert(a, DTYPES[dst])
    assert out.tolist() == [wrap(math.trunc(float(v)), dst) for v in a]


def test_nan_converts_to_zero_on_every_machine():
    for name in ("i8", "u8", "i32", "i64"):
        assert convert(np.array([np.nan], np.float32), DTYPES[name]).tolist() == [0]


def test_bool_conversions():
    assert convert(np.array([0, 3, -1]), DTYPES["bool"]).tolist() == [False, True, True]
    assert convert(np.array([0.0, -0.0, 0.5, np.nan]), DTYPES["bool"]).tolist() == [False, False, True, True]
    assert convert(np.array([True, False]), DTYPES["i8"]).tolist() == [1, 0]
    assert convert(np.array([True, False]), DTYPES["f32"]).tolist() == [1.0, 0.0]


def test_float_conversions_round_to_nearest_even():
    x = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 65519.0, 65520.0, 1e-8, -70000.0], np.float32)
    with np.errstate(over="ignore"):
        assert convert(x, DTYPES["f16"]).tolist() == [1.0, 1 + 2.0**-9, 65504.0, np.inf, 0.0, -np.inf]
    y = np.array([1 + 2.0**-24, 1 + 3 * 2.0**-24, 16777217.0], np.float64)
    assert convert(y, DTYPES["f32"]).tolist() == [1.0, 1 + 2.0**-22, 16777216.0]
    n = np.array([2**24 + 1, 2**24 + 3], np.int32)
    assert convert(n, DTYPES["f32"]).tolist() == [2.0**24, 2.0**24 + 4]


def test_conversion_to_bf16_rounds_once_from_doubles_and_integers():
    # f64 -> f32 -> bf16 would round 1 + 2**-8 + 2**-30 to the tie 1 + 2**-8 first, then down to 1.0
    x = np.array([1 + 2.0**-8 + 2.0**-30, 1 + 2.0**-8, -(1 + 2.0**-8 + 2.0**-40), 1 + 3 * 2.0**-8])
    assert convert(x, DTYPES["bf16"]).tolist() == [1 + 2.0**-7, 1.0, -(1 + 2.0**-7), 1 + 2.0**-6]
    n = np.array([2**24 + 2**16 + 1, 2**24 + 2**16, 2**24 + 3 * 2**16, -(2**31), 0], np.int32)
    expected = [2.0**24 + 2.0**17, 2.0**24, 2.0**24 + 2.0**18, -(2.0**31), 0.0]
    assert convert(n, DTYPES["bf16"]).tolist() == expected
    out = convert(np.array([1e300, -1e300, np.inf, np.nan]), DTYPES["bf16"])
    assert out.dtype == np.float32
    assert out[:3].tolist() == [np.inf, -np.inf, np.inf]
    assert np.isnan(out[3])


@settings(max_examples=200)
@given(st.lists(st.floats(min_value=-1e30, max_value=1e30, allow_nan=False), min_size=1, max_size=20))
def test_conversion_of_doubles_to_bf16_is_correctly_rounded(values):
    out = convert(np.array(values, np.float64), DTYPES["bf16"]).tolist()
    for v, got in zip(values, out, strict=True):
        if v == 0 or abs(v) < 2.0**-126:  # subnormal bf16: not this test's business
            continue
        m, e = math.frexp(v)
        assert got == math.ldexp(round(m * 256), e - 8), v  # round() ties to even


# ------------------------------------------------------------------------------------------ round_bf16

@pytest.mark.parametrize(("value", "rounded"), [
    (1.0, 1.0),
    (1 + 2.0**-8, 1.0),                       # a tie goes to the even neighbour (1.0000000)
    (1 + 3 * 2.0**-8, 1 + 2.0**-6),           # a tie between 1.0000001 and 1.0000010 goes up
    (1 + 2.0**-8 + 2.0**-23, 1 + 2.0**-7),    # just above the tie goes up
    (1 + 2.0**-8 - 2.0**-23, 1.0),            # just below goes down
    (-(1 + 2.0**-8), -1.0),                   # ties are symmetric in sign
    (-(1 + 3 * 2.0**-8), -(1 + 2.0**-6)),
    (256.0 + 1.0, 256.0),
    (3.4028234663852886e38, math.inf),        # the largest float32 rounds up past the largest bf16
    (-3.4028234663852886e38, -math.inf),
    (math.inf, math.inf),
    (-0.0, -0.0),
    (2.0**-149, 0.0),                         # the smallest subnormal is below half a bf16 subnormal step
])
def test_round_bf16_ties_to_even(value, rounded):
    out = round_bf16(np.array([value], np.float32))
    assert out.dtype == np.float32
    assert out.tolist() == [rounded]
    assert math.copysign(1, out[0]) == math.copysign(1, rounded)


def test_round_bf16_keeps_nan_a_nan():
    nans = np.array([0x7FC00000, 0x7F800001, 0xFFC00000, 0x7FFFFFFF, 0x7F80FFFF], np.uint32).view(np.float32)
    out = round_bf16(nans)
    assert np.isnan(out).all()  # even 0x7F800001, whose high half alone reads as infinity


@settings(max_examples=100)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=50))
def test_round_bf16_matches_the_bit_reference_on_any_float32(bit_patterns):
    x = np.array(bit_patterns, np.uint32).view(np.float32)
    out = round_bf16(x).view(np.uint32).tolist()
    for b, got in zip(bit_patterns, out, strict=True):
        want = bf16_reference(b)
        if want is None:
            assert math.isnan(bits_f32(got))
        else:
            assert got == want, hex(b)


def test_round_bf16_on_every_exponent_with_edge_fractions():
    patterns = [(e << 23) | frac | sign for e in range(256) for sign in (0, 1 << 31)
                for frac in (0, 0x7FFF, 0x8000, 0x8001, 0x18000, 0x17FFF, 0x7FFFFF, 0x7F8000)]
    x = np.array(patterns, np.uint32).view(np.float32)
    out = round_bf16(x).view(np.uint32)
    for b, got in zip(patterns, out.tolist(), strict=True):
        want = bf16_reference(b)
        assert (math.isnan(bits_f32(got)) if want is None else got == want), hex(b)
    assert (out & 0xFFFF == 0)[~np.isnan(round_bf16(x))].all()  # results are bf16 values
