"""The generic executor (isa.executor.run_semantics) against references written here with Python ints.

Integer results are compared bit-exactly. Every reference wraps explicitly (two's complement at the dtype's
width) and never calls isa code; float references round with numpy scalar conversions only.
"""

from __future__ import annotations

import math
import struct
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import isa
from isa import executor
from isa.errors import ExecError
from isa.executor import run_semantics
from isa.instance import execute
from isa.lang.parser import parse_statements
from isa.lang.scalar import ScalarEnv
from isa.lang.tree import Num
from isa.lang.typecheck import TensorSig, typecheck

NP = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16,
      "u32": np.uint32, "u64": np.uint64, "f16": np.float16, "bf16": np.float32, "f32": np.float32,
      "bool": np.bool_}
INT_BITS = {"i8": (8, True), "i16": (16, True), "i32": (32, True), "i64": (64, True), "u8": (8, False),
            "u16": (16, False), "u32": (32, False), "u64": (64, False)}


def wrap(v: int, dt: str) -> int:
    """``v`` reduced to dtype ``dt`` by two's-complement wrapping (the reference's only integer rounding)."""
    bits, signed = INT_BITS[dt]
    v %= 1 << bits
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def lo_hi(dt: str) -> tuple[int, int]:
    bits, signed = INT_BITS[dt]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def arr(dt: str, values) -> np.ndarray:
    return np.array(values, dtype=NP[dt])


def run(text: str, tensors: dict[str, tuple[str, np.ndarray]], indices: dict, scalars: dict | None = None,
        types: dict | None = None) -> dict[str, np.ndarray]:
    """Typecheck ``text`` for ``tensors`` (name -> (dtype, array)) and run it; ``indices`` maps a name to its
    kind or to (kind, extent)."""
    sigs = {name: TensorSig(dt, tuple(Num(n) for n in a.shape)) for name, (dt, a) in tensors.items()}
    idx = {name: (spec, None) if isinstance(spec, str) else (spec[0], Num(spec[1]))
           for name, spec in indices.items()}
    scalars = scalars or {}
    sem = typecheck(text, parse_statements(text), tensors=sigs, indices=idx,
                    scalars={name: "field" for name in scalars}, types=types or {})
    inputs = {name: a for name, (_, a) in tensors.items()}
    before = {name: a.copy() for name, a in inputs.items()}
    out = run_semantics(sem, inputs, ScalarEnv(scalars))
    for name, a in inputs.items():  # inputs are never modified
        assert np.array_equal(a, before[name], equal_nan=True), name
    return out


def edge_values(dt: str) -> list[int]:
    lo, hi = lo_hi(dt)
    return sorted({lo, lo + 1, -1 if lo < 0 else 2, 0, 1, 7, hi - 1, hi})


def all_pairs(dt: str, seed: int, extra: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, then random pairs over the whole range."""
    edges = edge_values(dt)
    a = [x for x in edges for _ in edges]
    b = [y for _ in edges for y in edges]
    lo, hi = lo_hi(dt)
    rng = np.random.default_rng(seed)
    a += [int(v) for v in rng.integers(lo, hi, size=extra, endpoint=True)]
    b += [int(v) for v in rng.integers(lo, hi, size=extra, endpoint=True)]
    return arr(dt, a), arr(dt, b)


def f32(v: float) -> float:
    """The float32 nearest to ``v``."""
    return float(np.float32(v))


def bf16_nearest(v: float) -> float:
    """The bfloat16 nearest to ``v`` (any finite double in bf16's normal range): scale the significand to 8
    bits and round it with Python's round(), which breaks ties to even."""
    m, e = math.frexp(v)
    return math.ldexp(round(m * 256), e - 8)


def bf16_bits_round(x: float) -> float:
    """The bfloat16 nearest to float32 value ``x`` (ties to even), from its bits: keep the high 16 bits and
    add one unit there when the dropped half is above the midpoint, or at it with an odd kept part."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x007FFFFF:
        return math.nan
    kept, dropped = bits & 0xFFFF0000, bits & 0xFFFF
    if dropped > 0x8000 or (dropped == 0x8000 and kept & 0x10000):
        kept += 0x10000
    return struct.unpack("<f", struct.pack("<I", kept))[0]


# ---------------------------------------------------------------------------------------- integer arithmetic

@pytest.mark.parametrize("dt", ["i8", "u8", "i16", "i32", "u32"])
@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_integer_arithmetic_wraps_at_the_dtype_width(dt, op):
    a, b = all_pairs(dt, seed=1)
    out = run(f"d[i] = a[i] {op} b[i]", {"d": (dt, np.zeros_like(a)), "a": (dt, a), "b": (dt, b)},
              {"i": "spatial"})["d"]
    fn = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
    expected = arr(dt, [wrap(fn(int(x), int(y)), dt) for x, y in zip(a, b, strict=True)])
    assert out.dtype == NP[dt]
    assert np.array_equal(out, expected)


@pytest.mark.parametrize(("dt", "text", "values", "expected"), [
    ("i8", "d[i] = a[i] + 1", [127, -128, 0], [-128, -127, 1]),
    ("i8", "d[i] = a[i] - 1", [-128, 127, 0], [127, 126, -1]),
    ("i8", "d[i] = -a[i]", [-128, 127, 0], [-128, -127, 0]),
    ("i8", "d[i] = abs(a[i])", [-128, -127, 5], [-128, 127, 5]),
    ("i8", "d[i] = a[i] * 2", [64, -65, 100], [-128, 126, -56]),
    ("u8", "d[i] = a[i] - 1", [0, 255, 1], [255, 254, 0]),
    ("u8", "d[i] = a[i] + 1", [255, 0, 128], [0, 1, 129]),
    ("u8", "d[i] = -a[i]", [1, 0, 128], [255, 0, 128]),
    ("i32", "d[i] = a[i] + 1", [2**31 - 1, -1, 0], [-(2**31), 0, 1]),
    ("i32", "d[i] = a[i] * -1", [-(2**31), 2**31 - 1, 5], [-(2**31), -(2**31) + 1, -5]),
    ("i32", "d[i] = a[i] * 65536", [65536, 32768, -1], [0, -(2**31), -65536]),
    ("i8", "d[i] = a[i] + 300", [0, 1, -100], [44, 45, -56]),  # the literal takes i8: 300 wraps to 44
    ("u64", "d[i] = a[i] & 0xFFFF_FFFF_0000_0000", [2**64 - 1, 2**32 + 5, 7], [2**64 - 2**32, 2**32, 0]),
    ("u64", "d[i] = a[i] + 0xFFFF_FFFF_FFFF_FFFF", [0, 1, 2**63], [2**64 - 1, 0, 2**63 - 1]),
])
def test_wraparound_edge_cases(dt, text, values, expected):
    a = arr(dt, values)
    out = run(text, {"d": (dt, np.zeros_like(a)), "a": (dt, a)}, {"i": "spatial"})["d"]
    assert np.array_equal(out, arr(dt, expected))


@pytest.mark.parametrize(("src", "dst"), [("i32", "i8"), ("i8", "u8"), ("u8", "i8"), ("i16", "u8"),
                                          ("u8", "i32"), ("i8", "i32"), ("u32", "i16"), ("i64", "i16")])
def test_integer_casts_wrap(src, dst):
    a, _ = all_pairs(src, seed=2)
    out = run(f"d[i] = {dst}(a[i])", {"d": (dst, np.zeros(a.shape, NP[dst])), "a": (src, a)},
              {"i": "spatial"})["d"]
    assert np.array_equal(out, arr(dst, [wrap(int(x), dst) for x in a]))


@pytest.mark.parametrize("dst", ["i8", "u8", "i16", "i32"])
def test_float_to_integer_casts_truncate_toward_zero_then_wrap(dst):
    values = [0.0, 0.5, -0.5, 0.999, -0.999, 2.9, -2.9, 127.9, 128.5, -128.9, -129.5, 255.9, 256.0, 300.7,
              -300.7, 40000.25, -70000.75, 1e9, -3e9, 1e10, 16777216.0]
    a = arr("f32", values)
    out = run(f"d[i] = {dst}(a[i])", {"d": (dst, np.zeros(a.shape, NP[dst])), "a": ("f32", a)},
              {"i": "spatial"})["d"]
    assert np.array_equal(out, arr(dst, [wrap(math.trunc(float(v)), dst) for v in a]))


# ------------------------------------------------------------------------------------------ shifts

def shift_reference(x: int, amount: int, op: str, dt: str) -> int:
    bits, _ = INT_BITS[dt]
    s = min(max(amount, 0), bits)            # amounts are clamped to [0, bits]
    return wrap(x << s, dt) if op == "<<" else x >> s   # Python's >> is arithmetic on negative values


@pytest.mark.parametrize("dt", ["i8", "u8", "i16", "i32", "u32"])
@pytest.mark.parametrize("op", ["<<", ">>"])
def test_shifts_clamp_the_amount_and_shift_signed_values_arithmetically(dt, op):
    bits, signed = INT_BITS[dt]
    xs = edge_values(dt)
    amounts = [0, 1, 3, bits - 1, bits, bits + 1]
    if signed:
        amounts += [-1, -bits, lo_hi(dt)[0]]
    amounts = [a for a in amounts if lo_hi(dt)[0] <= a <= lo_hi(dt)[1]]
    a = arr(dt, [x for x in xs for _ in amounts])
    b = arr(dt, [s for _ in xs for s in amounts])
    out = run(f"d[i] = a[i] {op} b[i]", {"d": (dt, np.zeros_like(a)), "a": (dt, a), "b": (dt, b)},
              {"i": "spatial"})["d"]
    expected = arr(dt, [shift_reference(int(x), int(s), op, dt) for x, s in zip(a, b, strict=True)])
    assert np.array_equal(out, expected)


def test_right_shift_of_a_negative_value_fills_with_sign_bits_but_unsigned_fills_with_zeros():
    out = run("d[i] = a[i] >> 1; e[i] = b[i] >> 1",
              {"d": ("i8", arr("i8", [0, 0])), "a": ("i8", arr("i8", [-128, -1])),
               "e": ("u8", arr("u8", [0, 0])), "b": ("u8", arr("u8", [128, 255]))}, {"i": "spatial"})
    assert out["d"].tolist() == [-64, -1]
    assert out["e"].tolist() == [64, 127]


# ------------------------------------------------------------------------------------------ division

@pytest.mark.parametrize("dt", ["i8", "u8", "i32"])
def test_floor_division_and_modulo_round_toward_minus_infinity(dt):
    a, b = all_pairs(dt, seed=3)
    keep = b != 0
    a, b = a[keep], b[keep]
    out = run("q[i] = a[i] // b[i]; r[i] = a[i] % b[i]",
              {"q": (dt, np.zeros_like(a)), "r": (dt, np.zeros_like(a)), "a": (dt, a), "b": (dt, b)},
              {"i": "spatial"})
    assert np.array_equal(out["q"], arr(dt, [wrap(int(x) // int(y), dt) for x, y in zip(a, b, strict=True)]))
    assert np.array_equal(out["r"], arr(dt, [wrap(int(x) % int(y), dt) for x, y in zip(a, b, strict=True)]))


def test_division_of_negatives_spelled_out():
    a, b = arr("i8", [-7, 7, -7, 7, -128, -128]), arr("i8", [2, -2, -2, 2, -1, 3])
    out = run("q[i] = a[i] // b[i]; r[i] = a[i] % b[i]",
              {"q": ("i8", np.zeros_like(a)), "r": ("i8", np.zeros_like(a)), "a": ("i8", a), "b": ("i8", b)},
              {"i": "spatial"})
    assert out["q"].tolist() == [-4, -4, 3, 3, -128, -43]   # -128 // -1 = 128 wraps to -128
    assert out["r"].tolist() == [1, -1, -1, 1, 0, 1]


@pytest.mark.parametrize("op", ["//", "%"])
def test_integer_division_by_zero_is_an_exec_error(op):
    a, b = arr("i32", [1, 2, 3]), arr("i32", [1, 0, 1])
    with pytest.raises(ExecError, match=f"'a\\[i\\] {op} b\\[i\\]': division by zero"):
        run(f"d[i] = a[i] {op} b[i]", {"d": ("i32", np.zeros_like(a)), "a": ("i32", a), "b": ("i32", b)},
            {"i": "spatial"})


# ------------------------------------------------------------------------------------------ subscripts

def test_an_out_of_range_read_names_the_tensor_the_subscript_and_the_index_values():
    a = arr("i32", range(10))
    with pytest.raises(ExecError) as info:
        run("d[i] = a[2*i + 1]", {"d": ("i32", np.zeros(6, np.int32)), "a": ("i32", a)}, {"i": "spatial"})
    assert str(info.value) == "'a[2 * i + 1]': subscript 0 of 'a' is 11, outside [0, 10) (at i=5)"


def test_an_out_of_range_second_subscript_names_position_1_and_every_index():
    b = np.zeros((3, 3), np.int8)
    with pytest.raises(ExecError) as info:
        run("d[i, j] = sum(k, b[i, j + k])", {"d": ("i8", np.zeros((3, 2), np.int8)), "b": ("i8", b)},
            {"i": "spatial", "j": "spatial", "k": ("reduce", 3)})
    msg = str(info.value)
    assert msg.startswith("'b[i, j + k]': subscript 1 of 'b' is 3, outside [0, 3) (at ")
    assert "i=0" in msg and "j=" in msg and "k=" in msg
    j, k = (int(msg.split(f"{name}=")[1].split(",")[0].rstrip(")")) for name in ("j", "k"))
    assert j + k == 3


def test_a_negative_subscript_is_out_of_range_not_python_indexing():
    with pytest.raises(ExecError, match=r"subscript 0 of 'a' is -1, outside \[0, 4\) \(at i=0\)"):
        run("d[i] = a[i - 1]", {"d": ("i8", np.zeros(4, np.int8)), "a": ("i8", np.zeros(4, np.int8))},
            {"i": "spatial"})


def test_an_out_of_range_write_is_an_error_too():
    with pytest.raises(ExecError, match=r"subscript 0 of 'd' is 4, outside \[0, 4\) \(at i=3\)"):
        run("d[i + 1] = a[i]", {"d": ("i8", np.zeros(4, np.int8)), "a": ("i8", np.zeros(4, np.int8))},
            {"i": ("spatial", 4)})


# ------------------------------------------------------------------------------------------ select

def test_select_does_not_read_the_side_it_does_not_choose():
    a = arr("i16", [10, 20, 30, 40, 50])
    out = run("d[i] = select(i + 2 < n, a[i + 2], -1)",
              {"d": ("i16", np.zeros(5, np.int16)), "a": ("i16", a)}, {"i": "spatial"}, {"n": 5})["d"]
    assert out.tolist() == [30, 40, 50, -1, -1]


def test_a_padded_convolution_masks_reads_inside_a_reduction():
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, size=7).astype(np.int8)
    w = rng.integers(-128, 128, size=3).astype(np.int8)
    out = run("d[i] = sum(k, select(i + k - 1 >= 0 and i + k - 1 < n, i32(x[i + k - 1]) * i32(w[k]), 0))",
              {"d": ("i32", np.zeros(7, np.int32)), "x": ("i8", x), "w": ("i8", w)},
              {"i": "spatial", "k": "reduce"}, {"n": 7})["d"]
    expected = [sum(int(x[i + k - 1]) * int(w[k]) for k in range(3) if 0 <= i + k - 1 < 7) for i in range(7)]
    assert out.tolist() == expected


def test_select_masks_a_division_by_zero_on_the_side_it_does_not_choose():
    a, b = arr("i32", [7, 8, -9]), arr("i32", [2, 0, 4])
    out = run("d[i] = select(b[i] != 0, a[i] // b[i], 0)",
              {"d": ("i32", np.zeros(3, np.int32)), "a": ("i32", a), "b": ("i32", b)}, {"i": "spatial"})["d"]
    assert out.tolist() == [3, 0, -3]


@pytest.mark.parametrize(("cond", "expected"), [
    ("i < n and a[i] > 0", [1, 0, 1, 0, 0]),   # a[3], a[4] do not exist: 'and' does not read them
    ("i >= n or a[i] > 0", [1, 0, 1, 1, 1]),
    ("not (i >= n or a[i] <= 0)", [1, 0, 1, 0, 0]),
])
def test_and_or_guard_the_reads_of_their_right_side(cond, expected):
    tensors = {"d": ("i8", np.zeros(5, np.int8)), "a": ("i8", arr("i8", [5, -5, 1]))}
    assert run(f"d[i] = select({cond}, 1, 0)", tensors, {"i": "spatial"}, {"n": 3})["d"].tolist() == expected


def test_a_masked_subscript_may_itself_read_and_divide_out_of_range():
    a, b = arr("i8", [10, 20, 30]), arr("i8", [2, 1, 0])
    tensors = {"d": ("i8", np.zeros(5, np.int8)), "a": ("i8", a), "b": ("i8", b)}
    out = run("d[i] = select(i < n, a[b[i]], -1)", tensors, {"i": "spatial"}, {"n": 3})["d"]
    assert out.tolist() == [30, 20, 10, -1, -1]
    out = run("d[i] = select(m > 0, a[i % m], -1)", tensors, {"i": "spatial"}, {"m": 0, "n": 3})["d"]
    assert out.tolist() == [-1] * 5


def test_a_masked_read_of_an_empty_tensor_is_not_an_error():
    tensors = {"d": ("i8", np.zeros(3, np.int8)), "a": ("i8", arr("i8", []))}
    out = run("d[i] = select(i < m, a[i + 0], 7)", tensors, {"i": ("spatial", 3)}, {"m": 0})["d"]
    assert out.tolist() == [7, 7, 7]


def test_a_read_on_the_chosen_side_is_still_checked():
    with pytest.raises(ExecError, match="subscript 0 of 'a' is 3"):
        run("d[i] = select(i < n, a[i + 1], 0)",
            {"d": ("i8", np.zeros(3, np.int8)), "a": ("i8", np.zeros(3, np.int8))},
            {"i": "spatial"}, {"n": 3})


def test_select_chooses_per_element_with_computed_conditions():
    a = arr("i8", [-128, -1, 0, 1, 127])
    out = run("d[i] = select(a[i] < 0, -a[i], a[i] * 2)",
              {"d": ("i8", np.zeros(5, np.int8)), "a": ("i8", a)}, {"i": "spatial"})["d"]
    assert out.tolist() == [-128, 1, 0, 2, -2]


# ------------------------------------------------------------------------------------------ statements

def test_plus_equals_accumulates_into_the_target_with_wrapping():
    d, a = arr("i8", [100, -100, 5]), arr("i8", [100, -100, -5])
    out = run("d[i] += a[i]", {"d": ("i8", d), "a": ("i8", a)}, {"i": "spatial"})["d"]
    assert out.tolist() == [wrap(200, "i8"), wrap(-200, "i8"), 0]


def test_plus_equals_through_a_computed_subscript_adds_every_contribution():
    d, a = arr("i8", [1, 2, 3]), arr("i8", [10, 20, 30, 40, 120, 8])
    out = run("d[i // 2] += a[i]", {"d": ("i8", d), "a": ("i8", a)}, {"i": ("spatial", 6)})["d"]
    assert out.tolist() == [1 + 10 + 20, 2 + 30 + 40, wrap(3 + 120 + 8, "i8")]


def test_a_gemm_accumulates_a_reduction():
    rng = np.random.default_rng(5)
    inp = rng.integers(-128, 128, size=(3, 16)).astype(np.int8)
    wgt = rng.integers(-128, 128, size=(4, 16)).astype(np.int8)
    acc = rng.integers(-(2**31), 2**31, size=(3, 4)).astype(np.int32)
    out = run("acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])",
              {"acc": ("i32", acc), "inp": ("i8", inp), "wgt": ("i8", wgt)},
              {"b": "spatial", "o": "spatial", "k": "reduce"})["acc"]
    expected = [[wrap(int(acc[b, o]) + sum(int(inp[b, k]) * int(wgt[o, k]) for k in range(16)), "i32")
                 for o in range(4)] for b in range(3)]
    assert out.tolist() == expected


def test_a_later_statement_reads_what_an_earlier_one_wrote():
    a = arr("i16", [1, 2, 3, 4])
    out = run("t[i] = a[i] * 3\nd[i] = t[i] + t[n - 1 - i]\nt[i] = 0",
              {"t": ("i16", np.full(4, 99, np.int16)), "d": ("i16", np.zeros(4, np.int16)), "a": ("i16", a)},
              {"i": "spatial"}, {"n": 4})
    assert out["d"].tolist() == [15, 15, 15, 15]
    assert out["t"].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize(("text", "extent", "expected"), [
    ("d[i] = d[i + 1]", 4, [20, 30, 40, 50, 50]),          # shift left
    ("d[i + 1] = d[i]", 4, [10, 10, 20, 30, 40]),          # shift right: not smeared by earlier writes
    ("d[i] = d[n - 1 - i]", 5, [50, 40, 30, 20, 10]),      # reversal in place
    ("d[i] += d[n - 1 - i]", 5, [60, 60, 60, 60, 60]),
])
def test_a_statement_reads_its_own_target_as_it_was_before_the_statement(text, extent, expected):
    d = arr("i32", [10, 20, 30, 40, 50])
    out = run(text, {"d": ("i32", d)}, {"i": ("spatial", extent)}, {"n": 5})["d"]
    assert out.tolist() == expected


def test_results_for_each_written_tensor_only():
    out = run("d[i] = a[i]", {"d": ("u8", np.zeros(2, np.uint8)), "a": ("u8", arr("u8", [3, 4]))},
              {"i": "spatial"})
    assert list(out) == ["d"]


# ---------------------------------------------------------------------------------------- chunked evaluation

CHUNK_CASES = [
    ("acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])", {"b": "spatial", "o": "spatial", "k": "reduce"}),
    ("acc[b, o] = max(k, i32(inp[b, k]) - i32(wgt[o, k]))", {"b": "spatial", "o": "spatial", "k": "reduce"}),
    ("acc[b, o] = acc[n - 1 - b, o] + sum(k, i32(inp[b, k]) * 2 + 0)",
     {"b": "spatial", "o": "spatial", "k": "reduce"}),
    ("acc[b // 2, o] += i32(inp[b, o])", {"b": ("spatial", 6), "o": ("spatial", 4)}),
]


@pytest.mark.parametrize(("text", "indices"), CHUNK_CASES)
def test_the_chunked_path_gives_the_same_results(text, indices, monkeypatch):
    rng = np.random.default_rng(6)
    tensors = {"acc": ("i32", rng.integers(-(2**31), 2**31, size=(6, 4)).astype(np.int32)),
               "inp": ("i8", rng.integers(-128, 128, size=(6, 5)).astype(np.int8)),
               "wgt": ("i8", rng.integers(-128, 128, size=(4, 5)).astype(np.int8))}
    whole = run(text, tensors, indices, {"n": 6})["acc"]
    calls = []
    compute = executor._Run.compute

    def counting(self, *args):
        calls.append(1)
        return compute(self, *args)

    monkeypatch.setattr(executor, "ELEMENT_BUDGET", 2)
    monkeypatch.setattr(executor._Run, "compute", counting)
    chunked = run(text, tensors, indices, {"n": 6})["acc"]
    assert len(calls) > 1  # the statement really was split
    assert np.array_equal(chunked, whole)


def test_chunked_results_match_a_reference():
    rng = np.random.default_rng(7)
    inp = rng.integers(-128, 128, size=(6, 5)).astype(np.int8)
    wgt = rng.integers(-128, 128, size=(4, 5)).astype(np.int8)
    acc = np.zeros((6, 4), np.int32)
    with mock.patch.object(executor, "ELEMENT_BUDGET", 1):
        out = run("acc[b, o] = acc[b, o] + sum(k, i32(inp[b, k]) * i32(wgt[o, k]) + 1)",
                  {"acc": ("i32", acc), "inp": ("i8", inp), "wgt": ("i8", wgt)},
                  {"b": "spatial", "o": "spatial", "k": "reduce"})["acc"]
    expected = [[sum(int(inp[b, k]) * int(wgt[o, k]) + 1 for k in range(5)) for o in range(4)]
                for b in range(6)]
    assert out.tolist() == expected


# ------------------------------------------------------------------------------------------ einsum vs generic

@pytest.mark.parametrize(("product", "dt", "term", "rest"), [
    ("i32(x[b, k]) * i32(y[o, k])", "i32", lambda x, y, b, o, k: int(x[b, k]) * int(y[o, k]), ""),
    ("x[b, k] * y[o, k]", "i8", lambda x, y, b, o, k: int(x[b, k]) * int(y[o, k]), ""),  # wraps at 8 bits
    ("i32(x[b, k]) * i32(y[b, k])", "i32", lambda x, y, b, o, k: int(x[b, k]) * int(y[b, k]), ""),  # shared b
    ("i32(x[b, k]) * 3", "i32", lambda x, y, b, o, k: int(x[b, k]) * 3, ""),  # no o in the product
    # a sum over an index its body does not use (k is used elsewhere, in a sum that is always 0)
    ("i32(x[b, 0]) * i32(y[o, 1])", "i32", lambda x, y, b, o, k: int(x[b, 0]) * int(y[o, 1]),
     " + sum(k, i32(x[b, k]) - i32(x[b, k]))"),
])
def test_the_einsum_fast_path_equals_the_generic_path(product, dt, term, rest):
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, size=(3, 6)).astype(np.int8)
    y = rng.integers(-128, 128, size=(3, 6)).astype(np.int8)
    x[0, :] = -128
    y[0, :] = -128  # 16384 * 6 overflows i16 territory and wraps in i8
    tensors = {"d": (dt, np.zeros((3, 3), NP[dt])), "x": ("i8", x), "y": ("i8", y)}
    idx = {"b": "spatial", "o": "spatial", "k": ("reduce", 6)}
    fast = run(f"d[b, o] = sum(k, {product}){rest}", tensors, idx)["d"]
    generic = run(f"d[b, o] = sum(k, {product} + 0){rest}", tensors, idx)["d"]
    assert np.array_equal(fast, generic)
    expected = [[wrap(sum(term(x, y, b, o, k) for k in range(6)), dt) for o in range(3)] for b in range(3)]
    assert fast.tolist() == expected


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_precision_sums_of_products_round_each_product_on_both_paths(dt):
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((4, 64)) * 30).astype(np.float16).astype(NP[dt])
    y = (rng.standard_normal((5, 64)) * 30).astype(np.float16).astype(NP[dt])
    if dt == "bf16":  # keep bf16 values: clear the low 16 bits
        x, y = ((v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) for v in (x, y))
    tensors = {"d": (dt, np.zeros((4, 5), NP[dt])), "x": (dt, x), "y": (dt, y)}
    idx = {"b": "spatial", "o": "spatial", "k": "reduce"}
    fast = run("d[b, o] = sum(k, x[b, k] * y[o, k])", tensors, idx)["d"]
    generic = run("d[b, o] = sum(k, x[b, k] * y[o, k] + 0)", tensors, idx)["d"]
    assert np.array_equal(fast, generic)
    rnd = (lambda v: float(np.float16(v))) if dt == "f16" else bf16_bits_round  # products are exact in f32
    eps = 2.0**-11 if dt == "f16" else 2.0**-8
    for b in range(4):
        for o in range(5):
            products = [rnd(float(x[b, k]) * float(y[o, k])) for k in range(64)]
            assert abs(float(fast[b, o]) - sum(products)) <= 64 * eps * sum(map(abs, products))


def test_float_einsum_equals_the_generic_path_within_rounding():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 32)).astype(np.float32)
    y = rng.standard_normal((5, 32)).astype(np.float32)
    tensors = {"d": ("f32", np.zeros((4, 5), np.float32)), "x": ("f32", x), "y": ("f32", y)}
    idx = {"b": "spatial", "o": "spatial", "k": "reduce"}
    fast = run("d[b, o] = sum(k, x[b, k] * y[o, k])", tensors, idx)["d"]
    generic = run("d[b, o] = sum(k, x[b, k] * y[o, k] + 0.0)", tensors, idx)["d"]
    exact = x.astype(np.float64) @ y.astype(np.float64).T
    # n * eps * sum |terms|
    bound = 32 * 2.0**-23 * (np.abs(x).astype(np.float64) @ np.abs(y).astype(np.float64).T)
    assert np.all(np.abs(fast - exact) <= bound)
    assert np.all(np.abs(generic - exact) <= bound)


# ------------------------------------------------------------------------------------------ reductions

@pytest.mark.parametrize("dt", ["i8", "u8", "i32", "f32"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_reductions(op, dt):
    rng = np.random.default_rng(10)
    if dt == "f32":
        a = rng.standard_normal((4, 6)).astype(np.float32)
        a[0] = [-np.inf, 1.5, -0.0, 0.0, 3.25, -7.0]
    else:
        lo, hi = lo_hi(dt)
        a = rng.integers(lo, hi, size=(4, 6), endpoint=True).astype(NP[dt])
        a[0] = [lo, hi, 0, lo, hi, 1]
        a[1] = lo
    out = run(f"d[i] = {op}(k, a[i, k])", {"d": (dt, np.zeros(4, NP[dt])), "a": (dt, a)},
              {"i": "spatial", "k": "reduce"})["d"]
    pick = max if op == "max" else min
    assert out.tolist() == [pick(a[i].tolist()) for i in range(4)]


def test_a_max_over_two_indices_and_inside_an_expression():
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4) * np.int16(-3)
    out = run("d[i] = max(j, k, a[i, j, k]) - min(j, k, a[i, j, k])",
              {"d": ("i16", np.zeros(2, np.int16)), "a": ("i16", a)},
              {"i": "spatial", "j": "reduce", "k": "reduce"})["d"]
    assert out.tolist() == [int(a[i].max()) - int(a[i].min()) for i in range(2)]


def test_a_max_over_an_empty_range_is_an_exec_error():
    with pytest.raises(ExecError, match="max\\(\\) over an empty range"):
        run("d[i] = max(k, a[i, k])",
            {"d": ("i8", np.zeros(2, np.int8)), "a": ("i8", np.zeros((2, 0), np.int8))},
            {"i": "spatial", "k": "reduce"})


def test_a_sum_over_an_empty_range_is_zero():
    out = run("d[i] = sum(k, a[i, k])",
              {"d": ("i8", np.ones(2, np.int8)), "a": ("i8", np.zeros((2, 0), np.int8))},
              {"i": "spatial", "k": "reduce"})["d"]
    assert out.tolist() == [0, 0]


# ------------------------------------------------------------------------------------------ f16 and bf16

def test_f16_arithmetic_rounds_each_result_to_nearest_even():
    rng = np.random.default_rng(11)
    a = (rng.standard_normal(200) * 100).astype(np.float16)
    b = (rng.standard_normal(200) * 100).astype(np.float16)
    a[:6] = [2048, 2048, 65504, 65504, 1, np.float16(2**-14)]
    b[:6] = [1, 3, 16, 15, np.float16(2**-11), np.float16(2**-24)]
    out = run("s[i] = a[i] + b[i]; p[i] = a[i] * b[i]",
              {"s": ("f16", np.zeros(200, np.float16)), "p": ("f16", np.zeros(200, np.float16)),
               "a": ("f16", a), "b": ("f16", b)}, {"i": "spatial"})
    # the exact sum and product of two f16 values fit a Python float; round that once (overflow: infinity)
    with np.errstate(over="ignore"):
        exp_s = np.array([np.float16(float(x) + float(y)) for x, y in zip(a, b, strict=True)])
        exp_p = np.array([np.float16(float(x) * float(y)) for x, y in zip(a, b, strict=True)])
    assert out["s"].dtype == np.float16
    assert np.array_equal(out["s"].view(np.uint16), exp_s.view(np.uint16))
    assert np.array_equal(out["p"].view(np.uint16), exp_p.view(np.uint16))
    assert out["s"][:4].tolist() == [2048.0, 2052.0, np.inf, 65504.0]  # ties to even; 65504 + 16 overflows


def bf16_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random bf16 values (float32 arrays whose low 16 bits are zero) with magnitudes in [2**-6, 2**6]."""
    v = (rng.choice([-1, 1], n) * 2.0 ** rng.uniform(-6, 6, n)).astype(np.float32)
    return (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def test_bf16_arithmetic_rounds_each_result_to_nearest_even():
    rng = np.random.default_rng(12)
    a, b = bf16_values(rng, 300), bf16_values(rng, 300)
    a[:4] = [1.0, 256.0, 1.0, -1.0]
    b[:4] = [2.0**-8, 1.0, 3 * 2.0**-8, -(2.0**-8)]
    out = run("s[i] = a[i] + b[i]; p[i] = a[i] * b[i]; m[i] = a[i] * b[i] - a[i]",
              {"s": ("bf16", np.zeros(300, np.float32)), "p": ("bf16", np.zeros(300, np.float32)),
               "m": ("bf16", np.zeros(300, np.float32)), "a": ("bf16", a), "b": ("bf16", b)},
              {"i": "spatial"})
    # with magnitudes within 2**12 of each other, sums and products are exact in float32
    exp_s = [bf16_bits_round(float(x) + float(y)) for x, y in zip(a, b, strict=True)]
    exp_p = [bf16_bits_round(float(x) * float(y)) for x, y in zip(a, b, strict=True)]
    exp_m = [bf16_nearest(p - float(x)) for p, x in zip(exp_p, a, strict=True)]  # rounded after each op
    assert out["s"].tolist() == exp_s
    assert out["p"].tolist() == exp_p
    assert out["m"].tolist() == exp_m
    assert out["s"][:4].tolist() == [1.0, 256.0, 1.015625, -1.0]


def test_casting_to_bf16_rounds_float32_and_integers_once():
    rng = np.random.default_rng(13)
    f = rng.standard_normal(200).astype(np.float32) * np.float32(1000)
    f[:3] = [1 + 2.0**-8, 1 + 2.0**-8 + 2.0**-20, -(1 + 3 * 2.0**-8)]
    n = rng.integers(-(2**31), 2**31, size=200).astype(np.int32)
    n[:2] = [2**24 + 2**16 + 1, 2**24 + 2**16]   # just above a tie, and on it
    out = run("d[i] = bf16(f[i]); e[i] = bf16(n[i])",
              {"d": ("bf16", np.zeros(200, np.float32)), "e": ("bf16", np.zeros(200, np.float32)),
               "f": ("f32", f), "n": ("i32", n)}, {"i": "spatial"})
    assert out["d"].tolist() == [bf16_bits_round(float(v)) for v in f]
    assert out["d"][:3].tolist() == [1.0, 1.0078125, -1.015625]
    assert out["e"].tolist() == [bf16_nearest(v) for v in n.tolist()]  # an i32 is exact in a double
    assert out["e"][:2].tolist() == [2.0**24 + 2.0**17, 2.0**24]


def test_f32_to_f16_casts_round_and_overflow_to_infinity():
    f = arr("f32", [1 + 2.0**-11, 1 + 3 * 2.0**-11, 65519.0, 65520.0, -1e6, 2.0**-25, 2.0**-24 * 1.5])
    out = run("d[i] = f16(f[i])", {"d": ("f16", np.zeros(7, np.float16)), "f": ("f32", f)},
              {"i": "spatial"})["d"]
    assert out.tolist() == [1.0, 1 + 2.0**-9, 65504.0, np.inf, -np.inf, 0.0, 2.0**-23]


# ------------------------------------------------------------------------------------------ through a spec

SPEC = """
[isa]
name = "exec_test"
summary = "instructions for executor tests"
insn_bits = 64

[enums.dtype]
values = ["i8", "i32", "f32"]

[spaces.MEM]
bytes = 65536

[formats.f]
fields = [
  { name = "opcode", bits = 4 },
  { name = "T", bits = 2, kind = "type", enum = "dtype" },
  { name = "n", bits = 8 },
  { name = "m", bits = 8 },
  { name = "sh", bits = 6 },
]

[instructions.GEMM]
summary = "acc += inp x wgt^T"
format = "f"
fixed = { opcode = 1 }
operands = [
  { name = "acc", space = "MEM", dtype = "i32", shape = ["n", "m"] },
  { name = "inp", space = "MEM", dtype = "i8", shape = ["n", 16] },
  { name = "wgt", space = "MEM", dtype = "i8", shape = ["m", 16] },
]
indices = { b = "spatial", o = "spatial", k = "reduce" }
semantics = "acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])"

[instructions.SHR]
summary = "typed arithmetic shift with a clipped window"
format = "f"
fixed = { opcode = 2 }
types = { T = ["i8", "i32"] }
operands = [
  { name = "d", space = "MEM", dtype = "T", shape = ["n"] },
  { name = "a", space = "MEM", dtype = "T", shape = ["n"] },
]
indices = { i = "spatial" }
semantics = "d[i] = select(i + m < n, a[i + m] >> sh, T(0))"
"""


def test_execute_through_a_spec_matches_the_reference():
    spec = isa.load_spec_text(SPEC, "exec_test.toml")
    rng = np.random.default_rng(14)
    inp = rng.integers(-128, 128, size=(2, 16)).astype(np.int8)
    wgt = rng.integers(-128, 128, size=(3, 16)).astype(np.int8)
    acc = np.array([[2**31 - 1, 0, -5], [7, -(2**31), 1]], np.int32)
    out = execute(spec, spec.insn("GEMM", n=2, m=3), {"acc": acc, "inp": inp, "wgt": wgt})
    expected = [[wrap(int(acc[b, o]) + sum(int(inp[b, k]) * int(wgt[o, k]) for k in range(16)), "i32")
                 for o in range(3)] for b in range(2)]
    assert out["acc"].tolist() == expected


@pytest.mark.parametrize("dt", ["i8", "i32"])
def test_execute_binds_the_type_variable(dt):
    spec = isa.load_spec_text(SPEC, "exec_test.toml")
    lo, hi = lo_hi(dt)
    a = arr(dt, [lo, -1, hi, 5, -6, 1])
    out = execute(spec, spec.insn("SHR", T=dt, n=6, m=2, sh=1), {"d": np.zeros(6, NP[dt]), "a": a})["d"]
    expected = [int(a[i + 2]) >> 1 if i + 2 < 6 else 0 for i in range(6)]
    assert out.tolist() == expected


def test_execute_errors_name_the_instruction():
    spec = isa.load_spec_text(SPEC, "exec_test.toml")
    a = np.zeros(4, np.int8)
    with pytest.raises(ExecError, match="^SHR: operand 'a' must have shape"):
        execute(spec, spec.insn("SHR", T="i8", n=6, m=0), {"d": np.zeros(6, np.int8), "a": a})


# ------------------------------------------------------------------------------------------ random semantics

DTS = ("i8", "i16", "i32", "u8", "f32")


class _Reject(Exception):
    """The reference left the range where the spec defines results (a float beyond int64, an infinity)."""


def _unify(a: str, b: str) -> str:
    if a == b:
        return a
    if a in ("int", "float") and b in ("int", "float"):
        return "float"
    return b if a in ("int", "float") else a


def _is_float(t: str) -> bool:
    return t in ("f32", "float")


def _round(v, t: str):
    """``v`` (a Python int or float) rounded to type ``t`` after an operation."""
    if t == "int":
        return wrap(v, "i64")
    if t == "float":
        if not math.isfinite(v):
            raise _Reject
        return v
    if t == "f32":
        if not math.isfinite(v) or abs(v) > 1e30:
            raise _Reject
        return f32(v)
    return wrap(v, t)


def _convert(v, src: str, dst: str):
    if dst == src:
        return v
    if _is_float(dst):
        return _round(float(v), dst)
    if _is_float(src):  # float -> integer: truncate toward zero, then wrap
        if abs(v) >= 2.0**62:
            raise _Reject
        v = math.trunc(v)
    return _round(int(v), dst)


class Node:
    """A random expression: its text, its type by the README's rules, and its value at one index point."""

    def __init__(self, kind: str, *args):
        self.kind = kind
        self.args = args

    def text(self) -> str:
        k, a = self.kind, self.args
        if k == "load":
            return f"{a[0]}[{', '.join(_affine(s) for s in a[2])}]"
        if k == "lit":
            return f"({a[0]!r})" if a[0] < 0 else repr(a[0])
        if k == "index":
            return a[0]
        if k == "cast":
            return f"{a[0]}({a[1].text()})"
        if k == "bin":
            return f"({a[1].text()} {a[0]} {a[2].text()})"
        if k == "minmax":
            first = a[1].text()
            if a[1].kind == "index":  # min(k, x) with a reduce index k first would be a reduction over k
                first = f"({first} + 0)"
            return f"{a[0]}({first}, {a[2].text()})"
        c, lhs, rhs, x, y = a
        return f"select({lhs.text()} {c} {rhs.text()}, {x.text()}, {y.text()})"

    def type(self) -> str:
        k, a = self.kind, self.args
        if k == "load":
            return a[1]
        if k == "lit":
            return "float" if isinstance(a[0], float) else "int"
        if k == "index":
            return "int"
        if k == "cast":
            return a[0]
        if k in ("bin", "minmax"):
            return _unify(a[1].type(), a[2].type())
        return _unify(a[3].type(), a[4].type())

    def uses(self, name: str) -> bool:
        k, a = self.kind, self.args
        if k == "load":
            return any(s[name] for s in a[2])
        if k == "index":
            return a[0] == name
        return any(c.uses(name) for c in a if isinstance(c, Node))

    def value(self, env: dict, tensors: dict):
        k, a, t = self.kind, self.args, self.type()
        if k == "load":
            arr_ = tensors[a[0]]
            pos = tuple(s["c"] + sum(s[n] * env.get(n, 0) for n in ("i", "j", "k")) for s in a[2])
            v = arr_[pos].item()
            return v
        if k == "lit":
            return a[0]
        if k == "index":
            return env[a[0]]
        if k == "cast":
            return _convert(a[1].value(env, tensors), a[1].type(), t)
        if k == "bin":
            x = _convert(a[1].value(env, tensors), a[1].type(), t)
            y = _convert(a[2].value(env, tensors), a[2].type(), t)
            return _round({"+": x + y, "-": x - y, "*": x * y}[a[0]], t)
        if k == "minmax":
            x = _convert(a[1].value(env, tensors), a[1].type(), t)
            y = _convert(a[2].value(env, tensors), a[2].type(), t)
            return max(x, y) if a[0] == "max" else min(x, y)
        c, lhs, rhs, x, y = a
        ct = _unify(lhs.type(), rhs.type())
        lv = _convert(lhs.value(env, tensors), lhs.type(), ct)
        rv = _convert(rhs.value(env, tensors), rhs.type(), ct)
        chosen = {"<": lv < rv, "<=": lv <= rv, ">": lv > rv, ">=": lv >= rv, "==": lv == rv,
                  "!=": lv != rv}[c]
        side = x if chosen else y
        return _convert(side.value(env, tensors), side.type(), t)  # only the chosen side is evaluated


def _affine(s: dict) -> str:
    terms = [f"{s[n]}*{n}" if s[n] > 1 else n for n in ("i", "j", "k") if s[n]]
    if s["c"] or not terms:
        terms.append(str(s["c"]))
    return " + ".join(terms)


def _expr(draw, dt: str, depth: int, axes: tuple[str, ...]) -> Node:
    leaf = depth == 0 or draw(st.integers(0, 3)) == 0
    if leaf:
        choice = draw(st.sampled_from(["load", "load", "load", "lit", "index"]))
        if choice == "load":
            subs = tuple({"c": draw(st.integers(0, 2)), **{n: draw(st.integers(0, 2)) if n in axes else 0
                                                          for n in ("i", "j", "k")}} for _ in range(2))
            return Node("load", f"{draw(st.sampled_from('xy'))}_{dt}", dt, subs)
        if choice == "index":
            return Node("index", draw(st.sampled_from(axes)))
        if dt == "f32" and draw(st.booleans()):
            return Node("lit", draw(st.integers(-16, 16)) / 4)
        return Node("lit", draw(st.integers(-300, 300)))
    kind = draw(st.sampled_from(["bin", "bin", "minmax", "select", "cast"]))
    sub = lambda t: _expr(draw, t, depth - 1, axes)  # noqa: E731
    if kind == "bin":
        return Node("bin", draw(st.sampled_from("+-*")), sub(dt), sub(dt))
    if kind == "minmax":
        return Node("minmax", draw(st.sampled_from(["min", "max"])), sub(dt), sub(dt))
    if kind == "cast":
        return Node("cast", dt, sub(draw(st.sampled_from(DTS))))
    ct = draw(st.sampled_from(DTS))
    cmp = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    return Node("select", cmp, sub(ct), sub(ct), sub(dt), sub(dt))


@st.composite
def random_semantics(draw):
    ext = {"i": draw(st.integers(1, 3)), "j": draw(st.integers(1, 3)), "k": draw(st.integers(1, 3))}
    dt = draw(st.sampled_from(DTS))
    mode = draw(st.sampled_from(["elementwise", "implicit", "explicit", "unit"]))
    axes = ("i", "j") if mode == "elementwise" else ("i", "j", "k")
    body = _expr(draw, dt, draw(st.integers(0, 3)), axes)
    if mode != "elementwise" and not body.uses("k"):
        t = body.type() if body.type() in DTS else dt
        body = Node("bin", draw(st.sampled_from("+*")), body, Node("load", f"x_{t}", t, (
            {"c": 0, "i": 0, "j": 1, "k": 1}, {"c": 1, "i": 1, "j": 0, "k": 0})))
    rhs = {"elementwise": body.text(), "implicit": body.text(), "explicit": f"sum(k, {body.text()})",
           "unit": f"sum({body.text()})"}[mode]
    op = draw(st.sampled_from(["=", "+="]))
    budget = draw(st.sampled_from([None, None, 1, 5]))
    seed = draw(st.integers(0, 2**32 - 1))
    return ext, dt, mode, body, f"d[i, j] {op} {rhs}", op, budget, seed


def _random_tensors(seed: int, size: int, ext: dict, dt: str) -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in DTS:
        for name in ("x", "y"):
            if t == "f32":
                a = (rng.integers(-32, 33, size=(size, size)) / 4).astype(np.float32)
            else:
                lo, hi = lo_hi(t)
                a = rng.integers(lo, hi, size=(size, size), endpoint=True).astype(NP[t])
                edges = np.array(edge_values(t), dtype=NP[t])
                a.flat[rng.integers(0, a.size, size=size)] = rng.choice(edges, size=size)
            out[f"{name}_{t}"] = (t, a)
    d = rng.integers(-100, 100, size=(ext["i"], ext["j"]))
    out["d"] = (dt, d.astype(np.float32) / 2 if dt == "f32" else np.array([[wrap(int(v), dt) for v in row]
                                                                            for row in d], dtype=NP[dt]))
    return out


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_semantics())
def test_random_semantics_match_a_per_element_python_evaluation(case):
    ext, dt, mode, body, text, op, budget, seed = case
    size = 3 + 2 * (ext["i"] - 1 + ext["j"] - 1 + ext["k"] - 1)   # every affine subscript fits
    tensors = _random_tensors(seed, size, ext, dt)
    d0 = tensors["d"][1]
    reduce = mode != "elementwise"
    indices = {"i": "spatial", "j": "spatial"} | ({"k": ("reduce", ext["k"])} if reduce else {})

    expected = np.zeros_like(d0)
    scale = np.zeros(d0.shape)  # sum of magnitudes that a float result may be off from, in rounding
    float_sum = False
    arrays = {name: a for name, (_, a) in tensors.items()}
    try:
        for i in range(ext["i"]):
            for j in range(ext["j"]):
                bt = body.type()
                if reduce:
                    acc = 0.0 if _is_float(bt) else 0
                    for k in range(ext["k"]):
                        term = body.value({"i": i, "j": j, "k": k}, arrays)
                        acc = _round(acc + term, bt)
                        scale[i, j] += abs(term)
                    float_sum = float_sum or _is_float(bt)
                    v = _convert(acc, bt, dt)
                else:
                    v = _convert(body.value({"i": i, "j": j}, arrays), bt, dt)
                    scale[i, j] += abs(v)
                if op == "+=":
                    old = d0[i, j].item()
                    v = _round(old + v, dt)
                    scale[i, j] += abs(old)
                expected[i, j] = v
    except _Reject:
        assume(False)

    if budget is None:
        out = run(text, tensors, indices)["d"]
    else:
        with mock.patch.object(executor, "ELEMENT_BUDGET", budget):
            out = run(text, tensors, indices)["d"]
    assert out.dtype == NP[dt]
    if dt == "f32" and float_sum:   # a float sum may add in another order: allow a few roundings
        assert np.all(np.abs(out.astype(np.float64) - expected) <= 2.0**-21 * scale + 1e-30), text
    else:
        assert np.array_equal(out, expected), text
