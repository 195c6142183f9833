"""The built-in DianNao spec (isa/specs/diannao.toml): what each instruction computes, which instances its
constraints reject, how long it takes, how it is encoded, and which parameter overrides it accepts.

Every expected value comes from a hand-written numpy (or plain Python) reference in this file, never from isa
code; integers are compared bit-exactly, floats exactly where IEEE rounding makes the result unique and with a
stated tolerance otherwise.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from isa.binary import decode_insn, encode_insn
from isa.instance import check_constraints, execute, operand_shape, timing_of, to_text
from isa.lang.scalar import evaluate

SPEC = isa.load_isa("diannao")
P = SPEC.params

NP = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "f16": np.float16, "f32": np.float32}
BITS = {"i8": 8, "i16": 16, "i32": 32}
INT_EDGES = {
    "i8": [-128, 127, -1, 0, 1, -127],
    "i16": [-32768, 32767, -1, 0, 1, 255],
    "i32": [-(2**31), 2**31 - 1, -1, 0, 1, 65536],
}
FLOAT_EDGES = {
    "f16": [0.0, -0.0, 65504.0, -65504.0, 2.0**-24, 1.0, -1.0, np.inf, -np.inf],
    "f32": [0.0, -0.0, 3.4028235e38, -3.4028235e38, 1e-45, 1.0, -1.0, np.inf, -np.inf],
}
BINARY = ["vadd", "vsub", "vmul", "vmax", "vmin"]
ALL_T = ["i8", "i16", "i32", "f16", "f32"]


def wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap of int64 values to ``bits`` bits (still int64)."""
    x = np.asarray(x, dtype=np.int64)
    half = np.int64(1) << (bits - 1)
    return ((x + half) % (np.int64(1) << bits)) - half


def i32(x: int) -> int:
    return ((x + 2**31) % 2**32) - 2**31


def vectors(dt: str, n: int, seed: int, count: int = 2) -> list[np.ndarray]:
    """``count`` random vectors of ``dt``; the first two carry the edge values, paired with themselves
    (max + max overflows) and reversed (max - min, min * max)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        if dt in BITS:
            info = np.iinfo(NP[dt])
            out.append(rng.integers(info.min, info.max, n, endpoint=True).astype(NP[dt]))
        else:
            out.append((rng.standard_normal(n) * 50).astype(NP[dt]))
    edges = np.array(INT_EDGES[dt] if dt in BITS else FLOAT_EDGES[dt], dtype=NP[dt])
    k = len(edges)
    out[0][:k] = edges
    out[0][k:2 * k] = edges
    if count > 1:
        out[1][:k] = edges
        out[1][k:2 * k] = edges[::-1]
    return out


# ---------------------------------------------------------------------------------- the spec itself

def test_header_params_and_spaces_are_the_documented_defaults():
    assert SPEC.name == "diannao" and SPEC.insn_bits == 128
    assert (P["CLUSTERS"], P["CORES_PER_CLUSTER"], P["NUM_CORES"]) == (4, 4, 16)
    assert {name: s.bytes for name, s in SPEC.spaces.items()} == {
        "GMEM": 1 << 30, "SMEM": 2 << 20, "NMEM": 512 << 10, "WMEM": 1 << 20}
    assert dict(SPEC.enums["space"].values) == {"GMEM": 0, "SMEM": 1, "NMEM": 2, "WMEM": 3}
    assert (P["VECTOR_ALIGN"], P["VECTOR_ELEMS"], P["CONV_BLOCK"], P["NUM_REGS"]) == (64, 64, 16, 32)
    assert (P["VFU_BYTES_PER_CYCLE"], P["TFU_MACS_PER_CYCLE"]) == (128, 256)
    assert list(SPEC.enums["dtype"].values) == ALL_T
    assert list(SPEC.enums["id"].values) == ["CORE_ID", "CLUSTER_ID", "CORE_DIM", "CLUSTER_DIM"]
    assert list(SPEC.enums["scope"].values) == ["CLUSTER", "ALL"]


def test_every_format_is_128_bits_with_an_8_bit_opcode_at_bit_0_and_opcodes_are_distinct():
    for fmt in SPEC.formats.values():
        assert fmt.bits == 128, fmt.name
        assert (fmt.fields[0].name, fmt.fields[0].lsb, fmt.fields[0].bits) == ("opcode", 0, 8), fmt.name
    opcodes = [instr.fixed["opcode"] for instr in SPEC.instructions.values()]
    assert all(set(instr.fixed) == {"opcode"} for instr in SPEC.instructions.values())
    assert len(opcodes) == len(set(opcodes))


def test_every_instruction_has_a_timing_unit_and_a_group():
    for instr in SPEC.instructions.values():
        assert instr.timing.unit in {"scalar", "vfu", "tfu", "dma", "ctrl"}, instr.name
        assert instr.timing.latency is not None and instr.timing.cycles is not None, instr.name
        assert instr.group, instr.name


def test_type_variables_allow_exactly_the_documented_dtypes():
    allowed = {name: dict(instr.types) for name, instr in SPEC.instructions.items() if instr.types}
    expected = {op: {"T": tuple(ALL_T)} for op in [*BINARY, "vcycadd", "relu", "vabs"]}
    floats = {"T": ("f16", "f32")}
    expected |= {act: floats for act in ACTIVATIONS} | {"conv": floats, "matmul": floats}
    expected["qconv"] = {"T": ("i8", "i16")}
    expected |= {"lde": {"T": ("i8", "i16", "i32")}, "ste": {"T": ("i8", "i16", "i32")}, "fld": floats,
                 "fst": floats}
    assert allowed == expected


# --------------------------------------------------------------------------------- vector semantics

def ref_binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "i":
        x, y = a.astype(np.int64), b.astype(np.int64)
        r = {"vadd": x + y, "vsub": x - y, "vmul": x * y,
             "vmax": np.where(x >= y, x, y), "vmin": np.where(x <= y, x, y)}[op]
        return wrap(r, a.dtype.itemsize * 8).astype(a.dtype)
    # exact in float64 (or rounded twice, harmless for + - * of f16/f32 values), then rounded once to T
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        r = {"vadd": x + y, "vsub": x - y, "vmul": x * y,
             "vmax": np.where(x >= y, x, y), "vmin": np.where(x <= y, x, y)}[op]
        return r.astype(a.dtype)


@pytest.mark.parametrize("dt", ALL_T)
@pytest.mark.parametrize("op", BINARY)
def test_vector_binary_wraps_integers_and_rounds_floats_like_numpy(op, dt):
    n = 128
    a, b = vectors(dt, n, seed=BINARY.index(op) * 10 + ALL_T.index(dt))
    dst = np.zeros(n, NP[dt])
    insn = SPEC.insn(op, T=dt, dst=0, a=1024, b=2048, n=n)
    got = execute(SPEC, insn, {"dst": dst, "a": a, "b": b})
    assert set(got) == {"dst"}
    # IEEE + - * max min have one correct answer: compare bit for bit (NaN where inf - inf or 0 * inf)
    assert got["dst"].dtype == NP[dt]
    assert np.array_equal(got["dst"], ref_binary(op, a, b), equal_nan=True)


def test_vadd_i8_overflow_wraps_around():
    insn = SPEC.insn("vadd", T="i8", dst=0, a=64, b=128, n=64)
    a = np.full(64, 127, np.int8)
    b = np.ones(64, np.int8)
    assert np.all(execute(SPEC, insn, {"dst": np.zeros(64, np.int8), "a": a, "b": b})["dst"] == -128)


@pytest.mark.parametrize("dt", ALL_T)
def test_vcycadd_adds_the_segment_to_every_one_of_counts_segments(dt):
    """Cambricon's cycle add: b (m elements) added to each of a's count rows of m (a conv's bias on an HWC
    tile); integers wrap, floats round once, as vadd of a and b repeated count times."""
    count, m = 12, 16
    a, b = (v.reshape(count, m) for v in vectors(dt, count * m, seed=200 + ALL_T.index(dt)))
    b = b[3]   # a row carrying edge values
    insn = SPEC.insn("vcycadd", T=dt, dst=0, a=0, b=4096, count=count, m=m)
    assert check_constraints(SPEC, insn) == []
    got = execute(SPEC, insn, {"dst": np.zeros((count, m), NP[dt]), "a": a, "b": b})
    assert set(got) == {"dst"}
    assert np.array_equal(got["dst"], ref_binary("vadd", a, np.tile(b, (count, 1))), equal_nan=True)
    cycles = -(-count * m * np.dtype(NP[dt]).itemsize // P["VFU_BYTES_PER_CYCLE"])
    assert timing_of(SPEC, insn) == ("vfu", P["VFU_LATENCY"], cycles)


@pytest.mark.parametrize(("fields", "rule"), [
    ({"count": 3, "m": 16}, "multiple of VECTOR_ELEMS"),        # 48 elements
    ({"count": 4, "m": 16, "b": 32}, "b must be VECTOR_ALIGN-byte aligned"),
    ({"count": 4, "m": 16, "b": 64}, "dst must not overlap b"),
])
def test_vcycadd_constraints_name_the_rule_they_break(fields, rule):
    insn = SPEC.insn("vcycadd", T="f32", **{"dst": 0, "a": 0, "b": 4096, **fields})
    assert any(rule in v.message for v in check_constraints(SPEC, insn))


@pytest.mark.parametrize("dt", ALL_T)
def test_relu_clamps_negatives_to_zero_in_place(dt):
    (x,) = vectors(dt, 128, seed=100 + ALL_T.index(dt), count=1)
    got = execute(SPEC, SPEC.insn("relu", T=dt, dst=0, n=128), {"dst": x})["dst"]
    assert np.array_equal(got, np.where(x > 0, x, np.zeros_like(x)))
    assert (x < 0).any()  # the input still holds its negatives: execute did not modify it


@pytest.mark.parametrize("dt", ALL_T)
def test_vabs_keeps_the_most_negative_integer(dt):
    (x,) = vectors(dt, 128, seed=200 + ALL_T.index(dt), count=1)
    got = execute(SPEC, SPEC.insn("vabs", T=dt, dst=0, n=128), {"dst": x})["dst"]
    if dt in BITS:
        expected = wrap(np.abs(x.astype(np.int64)), BITS[dt]).astype(NP[dt])  # abs(-128) = 128 wraps to -128
        assert expected[0] == x[0] == np.iinfo(NP[dt]).min
    else:
        expected = np.where(x < 0, -x, x)
    assert np.array_equal(got, expected)


# sigmoid is three T-rounded operations (exp, +, /), vrsqrt two: within a few ulps of T; the others are one
ACT_TOL = {"f16": (2e-3, 2e-3), "f32": (1e-6, 1e-7)}
ACTIVATIONS = {
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "tanh": np.tanh, "vexp": np.exp,
    "vrecip": lambda x: 1.0 / x, "vrsqrt": lambda x: 1.0 / np.sqrt(x),
}


@pytest.mark.parametrize("dt", ["f16", "f32"])
@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_float_activations_match_numpy_float64_within_a_few_ulps(act, dt):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(192) * 4).astype(NP[dt])
    x[:8] = np.array([0.0, -0.0, 30.0, -30.0, 1e-3, -1e-3, np.inf, -np.inf], NP[dt])
    if act == "vrsqrt":
        x = np.abs(x)
    got = execute(SPEC, SPEC.insn(act, T=dt, dst=0, n=192), {"dst": x})["dst"]
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", divide="ignore"):
        expected = ACTIVATIONS[act](x64).astype(NP[dt]).astype(np.float64)   # rounded to T (f16 overflows)
    rtol, atol = ACT_TOL[dt]
    assert got.dtype == NP[dt]
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=rtol, atol=atol)


def test_vzero_clears_every_byte():
    dst = np.random.default_rng(3).integers(0, 256, 256, endpoint=False).astype(np.uint8)
    dst[:2] = [255, 1]
    got = execute(SPEC, SPEC.insn("vzero", dst_space="SMEM", dst=0, n=256), {"dst": dst})["dst"]
    assert got.dtype == np.uint8 and np.array_equal(got, np.zeros(256, np.uint8))


# ---------------------------------------------------------------------------------------------- DMA

def strided_copy_ref(dst_mem, src_mem, dst, src, length, count, dst_stride, src_stride):
    """Seed 001's memcpy with a destination stride: count rows of length bytes."""
    out = dst_mem.copy()
    for r in range(count):
        out[dst + r * dst_stride: dst + r * dst_stride + length] = src_mem[src + r * src_stride:
                                                                           src + r * src_stride + length]
    return out


def byte_offsets(insn, name, tensors=None):
    """Byte offsets of every element of operand ``name`` from the spec's shape, strides and addr."""
    op = SPEC.instruction(insn.name).operand(name)
    env = SPEC.scalar_env(insn.values, SPEC.types_of(insn), tensors or {})
    shape = operand_shape(SPEC, insn, name)
    strides = [evaluate(s, env) for s in op.strides]
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    return evaluate(op.addr, env) + sum(g * s for g, s in zip(grids, strides, strict=True))


MEMCPY_CASES = [
    # dst_space, src_space, dst, src, len, count, dst_stride, src_stride
    ("NMEM", "GMEM", 64, 3000, 14, 4, 14, 56),     # seed 001: rows of 14 picked out of a wider source
    ("SMEM", "NMEM", 130, 0, 16, 5, 24, 16),       # padding: a contiguous source into rows 24 bytes apart
    ("NMEM", "NMEM", 1000, 0, 7, 3, 9, 11),        # within NMEM, both strided, odd sizes
    ("WMEM", "SMEM", 0, 5, 100, 1, 0, 0),          # one row: strides do not matter
]


@pytest.mark.parametrize(("dsp", "ssp", "dst", "src", "length", "count", "dstr", "sstr"), MEMCPY_CASES)
def test_memcpy_moves_strided_rows_between_flat_memories(dsp, ssp, dst, src, length, count, dstr, sstr):
    rng = np.random.default_rng(11)
    src_mem = rng.integers(0, 256, 4096, endpoint=False).astype(np.uint8)
    src_mem[src:src + 2] = [0, 255]
    dst_mem = rng.integers(0, 256, 4096, endpoint=False).astype(np.uint8)
    if dsp == ssp:  # one memory: the source rows and the destination rows are parts of the same array
        src_mem = dst_mem
    insn = SPEC.insn("memcpy", dst_space=dsp, src_space=ssp, dst=dst, src=src, len=length, count=count,
                     dst_stride=dstr, src_stride=sstr)
    assert check_constraints(SPEC, insn) == []
    src_idx, dst_idx = byte_offsets(insn, "src"), byte_offsets(insn, "dst")
    got = execute(SPEC, insn, {"src": src_mem[src_idx], "dst": dst_mem[dst_idx]})["dst"]
    after = dst_mem.copy()
    after[dst_idx] = got
    assert np.array_equal(after, strided_copy_ref(dst_mem, src_mem, dst, src, length, count, dstr, sstr))


def test_memcpy_operands_live_in_the_spaces_its_fields_name():
    instr = SPEC.instruction("memcpy")
    assert [(o.name, o.space, o.space_is_field, o.dtype) for o in instr.operands] == [
        ("dst", "dst_space", True, "u8"), ("src", "src_space", True, "u8")]
    insn = SPEC.insn("memcpy", dst_space="NMEM", src_space="GMEM", len=10, count=3, dst_stride=10,
                     src_stride=20)
    assert operand_shape(SPEC, insn, "dst") == operand_shape(SPEC, insn, "src") == (3, 10)


# memcpyr: memcpy's copy at R[rd] + dst_off and R[rs1] + src_off. Every direction memcpy allows: two different
# spaces, or NMEM->NMEM.
COPY_DIRECTIONS = [(d, s) for d in ["GMEM", "SMEM", "NMEM", "WMEM"] for s in ["GMEM", "SMEM", "NMEM", "WMEM"]
                   if d != s or d == "NMEM"]
TEST_MEMORY_BYTES = 4096  # each flat memory below; a copy touches at most 4 * 88 + 48 = 400 bytes of it


def row_bytes(addr: int, count: int, length: int, stride: int) -> np.ndarray:
    """The addresses of ``count`` rows of ``length`` bytes from ``addr``, ``stride`` apart: [count, len]."""
    return addr + stride * np.arange(count)[:, None] + np.arange(length)[None, :]


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_memcpyr_copies_strided_rows_like_memcpy_at_register_plus_offset_addresses(data):
    dsp, ssp = data.draw(st.sampled_from(COPY_DIRECTIONS), label="direction")
    length = data.draw(st.integers(1, 48), label="len")
    count = data.draw(st.integers(1, 5), label="count")
    # rows must not overlap when there are several; one row may have any stride
    stride = st.integers(length, length + 40) if count > 1 else st.integers(0, 100)
    dstr, sstr = data.draw(stride, label="dst_stride"), data.draw(stride, label="src_stride")
    d_extent, s_extent = (count - 1) * dstr + length, (count - 1) * sstr + length
    half = TEST_MEMORY_BYTES // 2
    if dsp == ssp:  # one memory: the source in its low half, the destination in its high half (no overlap)
        dst_at = data.draw(st.integers(half, TEST_MEMORY_BYTES - d_extent), label="dst address")
        src_at = data.draw(st.integers(0, half - s_extent), label="src address")
    else:
        dst_at = data.draw(st.integers(0, TEST_MEMORY_BYTES - d_extent), label="dst address")
        src_at = data.draw(st.integers(0, TEST_MEMORY_BYTES - s_extent), label="src address")
    # the addresses split into a register and a signed offset, either of them negative
    rd, rs1 = data.draw(st.integers(0, 31), label="rd"), data.draw(st.integers(0, 31), label="rs1")
    regs = registers(data.draw(st.integers(0, 1000), label="register seed"))
    dst_off = data.draw(st.integers(-(2**23), 2**23), label="dst_off")
    regs[rd] = dst_at - dst_off
    if rs1 == rd:  # one base register for both: the offsets alone tell the addresses apart
        src_off = src_at - int(regs[rs1])
    else:
        src_off = data.draw(st.integers(-(2**23), 2**23), label="src_off")
        regs[rs1] = src_at - src_off
    insn = SPEC.insn("memcpyr", dst_space=dsp, src_space=ssp, rd=rd, rs1=rs1, dst_off=dst_off,
                     src_off=src_off, len=length, count=count, dst_stride=dstr, src_stride=sstr)
    assert check_constraints(SPEC, insn, {"R": regs}) == []

    rng = np.random.default_rng(dst_at * 7919 + src_at)
    dst_mem = rng.integers(0, 256, TEST_MEMORY_BYTES, endpoint=False).astype(np.uint8)
    src_mem = rng.integers(0, 256, TEST_MEMORY_BYTES, endpoint=False).astype(np.uint8)
    if dsp == ssp:  # one memory: the source rows and the destination rows are parts of the same array
        src_mem = dst_mem
    dst_addr, src_addr = int(regs[rd]) + dst_off, int(regs[rs1]) + src_off  # what the copy reads and writes
    dst_idx, src_idx = row_bytes(dst_addr, count, length, dstr), row_bytes(src_addr, count, length, sstr)
    # the spec's operand addresses are these: R[rd] + dst_off and R[rs1] + src_off, rows stride apart
    assert np.array_equal(byte_offsets(insn, "dst", {"R": regs}), dst_idx)
    assert np.array_equal(byte_offsets(insn, "src", {"R": regs}), src_idx)

    before = regs.copy()
    got = execute(SPEC, insn, {"R": regs, "src": src_mem[src_idx], "dst": dst_mem[dst_idx]})
    assert set(got) == {"dst"} and np.array_equal(regs, before)  # the registers are read, never written
    after = dst_mem.copy()
    after[dst_idx] = got["dst"]
    expected = strided_copy_ref(dst_mem, src_mem, dst_addr, src_addr, length, count, dstr, sstr)
    assert np.array_equal(after, expected), (dsp, ssp, dst_addr, src_addr, length, count, dstr, sstr)
    # the same copy as memcpy at the computed addresses gives the same bytes
    plain = SPEC.insn("memcpy", dst_space=dsp, src_space=ssp, dst=dst_addr, src=src_addr, len=length,
                      count=count, dst_stride=dstr, src_stride=sstr)
    assert np.array_equal(execute(SPEC, plain, {"src": src_mem[src_idx], "dst": dst_mem[dst_idx]})["dst"],
                          got["dst"])


def test_memcpyr_operands_are_the_registers_and_rows_at_register_plus_offset():
    instr = SPEC.instruction("memcpyr")
    assert [(o.name, o.kind, o.space, o.space_is_field, o.dtype) for o in instr.operands] == [
        ("R", "register", None, False, "i32"), ("dst", "tensor", "dst_space", True, "u8"),
        ("src", "tensor", "src_space", True, "u8")]
    assert [to_text(s) for s in instr.operand("R").shape] == ["NUM_REGS"]
    assert to_text(instr.operand("dst").addr) == "R[rd] + dst_off"
    assert to_text(instr.operand("src").addr) == "R[rs1] + src_off"
    insn = SPEC.insn("memcpyr", dst_space="NMEM", src_space="GMEM", rd=1, rs1=2, dst_off=-8, src_off=8,
                     len=10, count=3, dst_stride=10, src_stride=20)
    assert operand_shape(SPEC, insn, "dst") == operand_shape(SPEC, insn, "src") == (3, 10)


# -------------------------------------------------------------------------------------- tensor unit

def dense_conv_weights(wgt: np.ndarray) -> np.ndarray:
    """[CO // 16, KH, KW, CI, 16] -> [KH, KW, CI, CO] with co = block * 16 + lane."""
    nb, kh, kw, ci, blk = wgt.shape
    return wgt.transpose(1, 2, 3, 0, 4).reshape(kh, kw, ci, nb * blk)


def conv_ref(inp: np.ndarray, wgt: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """A loop of matmuls in float64 over the kernel taps; also the sum of |products| (the error scale)."""
    h, w, _ = inp.shape
    dense = dense_conv_weights(wgt.astype(np.float64))
    kh, kw, _, cout = dense.shape
    oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
    out = np.zeros((oh, ow, cout))
    scale = np.zeros((oh, ow, cout))
    x = inp.astype(np.float64)
    for ky in range(kh):
        for kx in range(kw):
            patch = x[ky: ky + s * (oh - 1) + 1: s, kx: kx + s * (ow - 1) + 1: s, :]
            out += patch @ dense[ky, kx]
            scale += np.abs(patch) @ np.abs(dense[ky, kx])
    return out, scale


CONV_CASES = [  # h, w, cin, cout, kh, kw, s
    (6, 7, 3, 16, 3, 3, 1),
    (9, 8, 5, 32, 3, 2, 2),     # two weight blocks, a non-square kernel, a stride that drops the last column
    (4, 4, 8, 16, 1, 1, 1),     # a 1x1 conv is a matmul per pixel
]


@pytest.mark.parametrize("dt", ["f16", "f32"])
@pytest.mark.parametrize(("h", "w", "cin", "cout", "kh", "kw", "s"), CONV_CASES)
def test_conv_matches_a_float64_loop_of_matmuls(dt, h, w, cin, cout, kh, kw, s):
    rng = np.random.default_rng(h * 100 + cout)
    inp = rng.standard_normal((h, w, cin)).astype(NP[dt])
    wgt = rng.standard_normal((cout // 16, kh, kw, cin, 16)).astype(NP[dt])
    insn = SPEC.insn("conv", T=dt, out=0, inp=65536, wgt=0, h=h, w=w, cin=cin, cout=cout, kh=kh, kw=kw, s=s)
    assert check_constraints(SPEC, insn) == []
    oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
    got = execute(SPEC, insn, {"out": np.zeros((oh, ow, cout), NP[dt]), "inp": inp, "wgt": wgt})["out"]
    expected, scale = conv_ref(inp, wgt, s)
    assert got.dtype == NP[dt] and got.shape == (oh, ow, cout)
    # f32 accumulation (a relative 1e-5 of the sum of |products|), then one rounding to T (half an ulp of T)
    ulp = 2.0**-11 if dt == "f16" else 2.0**-24
    err = np.abs(got.astype(np.float64) - expected)
    assert np.all(err <= 1e-5 * scale + ulp * np.abs(expected) + 1e-30)


def test_conv_weight_block_and_lane_select_the_output_channel():
    # only weight [block 1, lane 3] of the single tap is 1: output channel 16 + 3 = 19 copies input channel 0
    inp = np.arange(2 * 2 * 2, dtype=np.float32).reshape(2, 2, 2) + 1
    wgt = np.zeros((2, 1, 1, 2, 16), np.float32)
    wgt[1, 0, 0, 0, 3] = 1.0
    insn = SPEC.insn("conv", T="f32", out=0, inp=8192, wgt=0, h=2, w=2, cin=2, cout=32, kh=1, kw=1, s=1)
    got = execute(SPEC, insn, {"out": np.zeros((2, 2, 32), np.float32), "inp": inp, "wgt": wgt})["out"]
    expected = np.zeros((2, 2, 32), np.float32)
    expected[:, :, 19] = inp[:, :, 0]
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("dt", ["i8", "i16"])
def test_qconv_accumulates_in_i32_and_wraps(dt):
    h, w, cin, cout, kh, kw, s = 5, 5, 4, 16, 2, 2, 1
    rng = np.random.default_rng(5)
    info = np.iinfo(NP[dt])
    inp = rng.integers(info.min, info.max, (h, w, cin), endpoint=True).astype(NP[dt])
    wgt = rng.integers(info.min, info.max, (1, kh, kw, cin, 16), endpoint=True).astype(NP[dt])
    inp[0, 0:2, :] = info.min  # a corner of min * min products: 16 * 2**30 for i16 wraps around i32
    inp[1, 0:2, :] = info.min
    wgt[0, :, :, :, 0] = info.min
    insn = SPEC.insn("qconv", T=dt, out=0, inp=4096, wgt=0, h=h, w=w, cin=cin, cout=cout, kh=kh, kw=kw, s=s)
    assert check_constraints(SPEC, insn) == []
    got = execute(SPEC, insn, {"out": np.zeros((4, 4, 16), np.int32), "inp": inp, "wgt": wgt})["out"]
    dense = dense_conv_weights(wgt.astype(np.int64))
    expected = np.zeros((4, 4, 16), np.int64)
    for y in range(4):
        for x in range(4):
            expected[y, x] = np.einsum("abc,abcd->d", inp[y:y + kh, x:x + kw].astype(np.int64), dense)
    assert got.dtype == np.int32
    assert np.array_equal(got, wrap(expected, 32))
    if dt == "i16":
        assert expected[0, 0, 0] == 16 * 2**30 and got[0, 0, 0] == 0


@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_matmul_reads_blocked_weights(dt):
    m, k, n = 5, 24, 32
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(NP[dt])
    b = rng.standard_normal((n // 16, k, 16)).astype(NP[dt])
    insn = SPEC.insn("matmul", T=dt, out=0, a=4096, b=0, m=m, k=k, n=n)
    assert check_constraints(SPEC, insn) == []
    got = execute(SPEC, insn, {"out": np.zeros((m, n), NP[dt]), "a": a, "b": b})["out"]
    dense = b.astype(np.float64).transpose(1, 0, 2).reshape(k, n)  # b[j // 16, r, j % 16] = B[r, j]
    expected = a.astype(np.float64) @ dense
    scale = np.abs(a.astype(np.float64)) @ np.abs(dense)
    ulp = 2.0**-11 if dt == "f16" else 2.0**-24
    assert np.all(np.abs(got.astype(np.float64) - expected) <= 1e-5 * scale + ulp * np.abs(expected))


def test_f16_matmul_and_conv_accumulate_in_f32_and_round_once():
    # 2048 + 16 x 1: an f16 running sum sticks at 2048 (2049 rounds to even), an f32 one reaches 2064 exactly
    a = np.ones((1, 17), np.float16)
    a[0, 0] = 2048
    mm = SPEC.insn("matmul", T="f16", out=0, a=4096, b=0, m=1, k=17, n=16)
    b = np.ones((1, 17, 16), np.float16)
    got = execute(SPEC, mm, {"out": np.zeros((1, 16), np.float16), "a": a, "b": b})
    assert np.all(got["out"] == 2064)
    conv = SPEC.insn("conv", T="f16", out=0, inp=4096, wgt=0, h=1, w=1, cin=17, cout=16, kh=1, kw=1, s=1)
    got = execute(SPEC, conv, {"out": np.zeros((1, 1, 16), np.float16), "inp": a.reshape(1, 1, 17),
                               "wgt": np.ones((1, 1, 1, 17, 16), np.float16)})
    assert np.all(got["out"] == 2064)


# -------------------------------------------------------------------------------------- scalar unit

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def _srl(a: int, b: int) -> int:
    amount = min(b % 2**32, 32)  # the amount is read unsigned: a negative amount is huge
    return 0 if amount >= 32 else i32((a % 2**32) >> amount)


ALU_REF = {
    "add": lambda a, b: i32(a + b),
    "sub": lambda a, b: i32(a - b),
    "mul": lambda a, b: i32(a * b),
    "and": lambda a, b: i32(a & b),
    "or": lambda a, b: i32(a | b),
    "xor": lambda a, b: i32(a ^ b),
    "sll": lambda a, b: 0 if b >= 32 else i32(a << max(b, 0)),     # amounts clamped to [0, 32]
    "sra": lambda a, b: a >> min(max(b, 0), 31),                   # 32 and more fill with the sign
    "srl": _srl,
    "slt": lambda a, b: int(a < b),
}
ALU_PAIRS = [(INT_MAX, 1), (INT_MIN, -1), (INT_MIN, INT_MIN), (INT_MAX, INT_MAX), (-8, 33), (-8, 32),
             (-8, 31), (5, -1), (-1, 1), (1, -1), (0x12345678, 4), (-123456, 7), (0, 0)]


def registers(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(INT_MIN, INT_MAX, 32, endpoint=True).astype(np.int32)


@pytest.mark.parametrize("op", list(ALU_REF))
def test_register_alu_ops_wrap_at_32_bits_and_write_only_rd(op):
    for k, (a, b) in enumerate(ALU_PAIRS):
        regs = registers(k)
        regs[4], regs[9] = a, b
        got = execute(SPEC, SPEC.insn(op, rd=17, rs1=4, rs2=9), {"R": regs})["R"]
        expected = regs.copy()
        expected[17] = ALU_REF[op](a, b)
        assert np.array_equal(got, expected), (op, a, b, int(got[17]), int(expected[17]))


def test_register_alu_reads_before_it_writes_when_rd_is_a_source():
    regs = registers(1)
    regs[3] = 2**30
    got = execute(SPEC, SPEC.insn("add", rd=3, rs1=3, rs2=3), {"R": regs})["R"]
    assert got[3] == INT_MIN  # 2**30 + 2**30 wraps


@pytest.mark.parametrize(("base", "imm"), [(1, INT_MAX), (-1, INT_MIN), (100, -100), (INT_MIN, -1)])
def test_addi_adds_a_signed_32_bit_immediate(base, imm):
    regs = registers(2)
    regs[1] = base
    got = execute(SPEC, SPEC.insn("addi", rd=2, rs1=1, imm=imm), {"R": regs})["R"]
    assert got[2] == i32(base + imm) and np.array_equal(np.delete(got, 2), np.delete(regs, 2))


@pytest.mark.parametrize("imm", [INT_MIN, INT_MAX, -1, 0, 12345])
def test_li_loads_any_32_bit_value(imm):
    got = execute(SPEC, SPEC.insn("li", rd=31, imm=imm), {"R": np.zeros(32, np.int32)})["R"]
    assert got[31] == imm and not got[:31].any()


def test_ld_loads_the_word_at_register_plus_offset_of_the_named_space():
    regs = registers(3)
    regs[6] = 4096
    insn = SPEC.insn("ld", rd=7, rs1=6, imm=-8, space="SMEM")
    op = SPEC.instruction("ld").operand("m")
    assert (op.space, op.space_is_field, op.dtype) == ("space", True, "i32")
    assert evaluate(op.addr, SPEC.scalar_env(insn.values, {}, {"R": regs})) == 4096 - 8
    got = execute(SPEC, insn, {"R": regs, "m": np.array([INT_MIN], np.int32)})
    assert set(got) == {"R"} and got["R"][7] == INT_MIN


def test_st_stores_rs2_and_leaves_the_registers_alone():
    regs = registers(4)
    regs[2] = INT_MAX
    insn = SPEC.insn("st", rs1=1, rs2=2, imm=12, space="GMEM")
    got = execute(SPEC, insn, {"R": regs, "m": np.zeros(1, np.int32)})
    assert set(got) == {"m"} and got["m"][0] == INT_MAX


@pytest.mark.parametrize(("which", "k"),
                         [("CORE_ID", 0), ("CLUSTER_ID", 1), ("CORE_DIM", 2), ("CLUSTER_DIM", 3)])
def test_rdid_reads_the_id_register_it_names(which, k):
    ids = np.array([3, 2, 4, 4], np.int32)  # core 3 of cluster 2 on a 4 x 4 card
    got = execute(SPEC, SPEC.insn("rdid", rd=5, which=which), {"R": np.zeros(32, np.int32), "ids": ids})["R"]
    assert got[5] == ids[k]


BRANCHES = [  # name, R[rs1], R[rs2], taken
    ("beq", 7, 7, True), ("beq", 7, -7, False),
    ("bne", 7, -7, True), ("bne", INT_MIN, INT_MIN, False),
    ("blt", -1, 1, True), ("blt", 1, -1, False), ("blt", 5, 5, False), ("blt", INT_MIN, INT_MAX, True),
    ("bge", 5, 5, True), ("bge", 1, -1, True), ("bge", -1, 1, False),
]


@pytest.mark.parametrize(("name", "a", "b", "taken"), BRANCHES)
def test_branches_go_to_target_when_taken_and_fall_through_otherwise(name, a, b, taken):
    regs = registers(5)
    regs[1], regs[2] = a, b
    got = execute(SPEC, SPEC.insn(name, rs1=1, rs2=2, target=3), {"R": regs, "pc": np.array([10], np.int32)})
    assert set(got) == {"pc"} and got["pc"][0] == (3 if taken else 11)


def test_jmp_always_goes_to_target():
    got = execute(SPEC, SPEC.insn("jmp", target=42), {"pc": np.array([10], np.int32)})
    assert got["pc"][0] == 42


@pytest.mark.parametrize(("name", "fields"),
                         [("barrier", {"scope": "CLUSTER"}), ("barrier", {"scope": "ALL"}), ("halt", {})])
def test_barrier_and_halt_have_no_data_effect(name, fields):
    assert execute(SPEC, SPEC.insn(name, **fields), {}) == {}
    assert timing_of(SPEC, SPEC.insn(name, **fields))[0] == "ctrl"


# ---------------------------------------------------------------------------------- scalar float (F)
# References in plain Python: f32 + - * computed in float64, then rounded to f32 (float64's 53 bits are more
# than 2 * 24 + 2, so rounding twice gives the correctly rounded f32), RISC-V's FMAX.S/FMIN.S rules, and the
# integer -> f32 and f32 -> f16 roundings written with exact fractions.

FPU = ["fadd", "fsub", "fmul", "fmax", "fmin"]
F32_MAX = float(np.finfo(np.float32).max)
F32_EDGES = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, F32_MAX, -F32_MAX,
             2.0**-149, -(2.0**-149), 2.0**-126 - 2.0**-149, 2.0**-126, 65504.0, 65520.0, 1 / 3]


def f32_of_bits(bits: int) -> float:
    return float(np.array([bits], np.uint32).view(np.float32)[0])


def bits_of_f32(x) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


def same_float(got, expected: float) -> bool:
    """Equal including the sign of zero, or both NaN (NaN payloads are not specified)."""
    if math.isnan(expected):
        return math.isnan(got)
    return float(got) == expected and math.copysign(1.0, got) == math.copysign(1.0, expected)


def _f32_arith(op: str):
    def ref(a: float, b: float) -> float:
        x, y = np.float64(a), np.float64(b)
        with np.errstate(all="ignore"):
            return float(np.float32({"fadd": x + y, "fsub": x - y, "fmul": x * y}[op]))
    return ref


def ref_fmax(a: float, b: float) -> float:
    """RISC-V FMAX.S: the larger value, -0.0 < +0.0; a NaN operand gives the other one (both NaN: NaN)."""
    if math.isnan(a) or math.isnan(b):
        return b if math.isnan(a) else a
    if a == b:  # equal, or +0.0 and -0.0: the one with the positive sign
        return a if math.copysign(1.0, a) > 0 else b
    return a if a > b else b


def ref_fmin(a: float, b: float) -> float:
    """RISC-V FMIN.S: the smaller value, -0.0 < +0.0; a NaN operand gives the other one (both NaN: NaN)."""
    if math.isnan(a) or math.isnan(b):
        return b if math.isnan(a) else a
    if a == b:
        return a if math.copysign(1.0, a) < 0 else b
    return a if a < b else b


FPU_REF = {"fadd": _f32_arith("fadd"), "fsub": _f32_arith("fsub"), "fmul": _f32_arith("fmul"),
           "fmax": ref_fmax, "fmin": ref_fmin}


def ref_fcvt(x: int) -> float:
    """The signed integer ``x`` rounded to 24 significant bits, ties to even."""
    shift = max(abs(x).bit_length() - 24, 0)
    return float(round(Fraction(x, 2**shift)) * 2**shift)


def ref_f16_round(x: float) -> float:
    """``x`` rounded to the nearest f16 value, ties to even; a result past 65504 is inf (keeps -0.0)."""
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    # the exponent of the leading bit; below 2**-14 (subnormals) the spacing stays 2**-24
    exponent = max(math.frexp(abs(x))[1] - 1, -14)
    spacing = Fraction(2) ** (exponent - 10)
    r = round(Fraction(x) / spacing) * spacing
    return math.copysign(math.inf if abs(r) > 65504 else float(r), x)


def ref_f16_value(bits: int) -> float:
    """The value of the f16 bit pattern ``bits``."""
    sign = -1.0 if bits >> 15 else 1.0
    exponent, fraction = (bits >> 10) & 0x1F, bits & 0x3FF
    if exponent == 0x1F:
        return math.nan if fraction else sign * math.inf
    if exponent == 0:
        return sign * fraction * 2.0**-24
    return sign * (1024 + fraction) * 2.0 ** (exponent - 25)


def float_registers(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(32) * 100).astype(np.float32)


def run_fpu(op: str, a: float, b: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(F after ``op`` rd=20, rs1=6, rs2=11 on a, b; F before)."""
    regs = float_registers(seed)
    regs[6], regs[11] = a, b
    got = execute(SPEC, SPEC.insn(op, rd=20, rs1=6, rs2=11), {"F": regs})
    assert set(got) == {"F"} and got["F"].dtype == np.float32
    return got["F"], regs


def test_float_instructions_use_a_second_register_file_of_num_regs_f32():
    for name in [*FPU, "fcvt", "fld", "fst"]:
        op = SPEC.instruction(name).operand("F")
        assert (op.kind, op.dtype, [to_text(s) for s in op.shape]) == ("register", "f32", ["NUM_REGS"]), name
    for name in ["fcvt", "lde", "ste", "fld", "fst"]:  # R holds the integer, or the address base
        assert SPEC.instruction(name).operand("R").dtype == "i32", name


@pytest.mark.parametrize("op", FPU)
def test_fpu_ops_on_edge_values_follow_ieee_f32_and_risc_v_max_min(op):
    for k, (a, b) in enumerate(itertools.product(F32_EDGES, repeat=2)):
        got, before = run_fpu(op, a, b, seed=k % 4)
        expected = FPU_REF[op](float(np.float32(a)), float(np.float32(b)))
        assert same_float(got[20], expected), (op, a, b, float(got[20]), expected)
        assert np.array_equal(np.delete(got, 20), np.delete(before, 20), equal_nan=True)


@pytest.mark.parametrize("op", FPU)
@settings(max_examples=60, deadline=None)
@given(a=st.integers(0, 2**32 - 1), b=st.integers(0, 2**32 - 1))
def test_fpu_ops_on_random_f32_bit_patterns_match_the_reference(op, a, b):
    x, y = f32_of_bits(a), f32_of_bits(b)
    got, _ = run_fpu(op, x, y)
    assert same_float(got[20], FPU_REF[op](x, y)), (op, hex(a), hex(b), float(got[20]))


def test_fadd_rounds_to_f32_after_each_operation():
    got, _ = run_fpu("fadd", 1.0, 2.0**-24)      # exactly half an f32 ulp of 1.0: the tie goes to even (1.0)
    assert got[20] == 1.0
    got, _ = run_fpu("fadd", 1.0, 3 * 2.0**-24)  # 1.5 ulps: rounds up to 1 + 2 ulps
    assert got[20] == 1.0 + 2.0**-22
    got, _ = run_fpu("fmul", F32_MAX, 2.0)       # overflow gives inf, also where float64 would not overflow
    assert got[20] == math.inf
    got, _ = run_fpu("fmul", 2.0**-100, 2.0**-49)  # 2**-149, the smallest subnormal: not flushed to zero
    assert got[20] == 2.0**-149


@pytest.mark.parametrize("x", [INT_MIN, INT_MAX, -1, 0, 1, 2**24, 2**24 + 1, 2**24 + 3, -(2**24 + 1),
                               2**25 + 6, 2**31 - 64, 2**31 - 65])
def test_fcvt_rounds_an_integer_register_to_the_nearest_f32(x):
    regs, fregs = registers(6), float_registers(6)
    regs[13] = x
    got = execute(SPEC, SPEC.insn("fcvt", rd=2, rs1=13), {"F": fregs, "R": regs})
    assert set(got) == {"F"}
    assert got["F"][2] == ref_fcvt(x), (x, float(got["F"][2]), ref_fcvt(x))
    assert np.array_equal(np.delete(got["F"], 2), np.delete(fregs, 2))


@settings(max_examples=60, deadline=None)
@given(x=st.integers(INT_MIN, INT_MAX))
def test_fcvt_of_random_integers_matches_the_reference(x):
    regs = np.zeros(32, np.int32)
    regs[1] = x
    got = execute(SPEC, SPEC.insn("fcvt", rd=31, rs1=1), {"F": np.zeros(32, np.float32), "R": regs})["F"]
    assert got[31] == ref_fcvt(x)


def typed_access(name: str, t: str, space: str, **fields):
    """(instance, its R registers with R[1] = 4096) of a typed load or store at R[1] - 8."""
    regs = registers(8)
    regs[1] = 4096
    return SPEC.insn(name, T=t, rs1=1, space=space, imm=-8, **fields), regs


@pytest.mark.parametrize("name", ["lde", "ste", "fld", "fst"])
def test_typed_loads_and_stores_address_one_element_of_t_at_register_plus_offset(name):
    t = SPEC.instruction(name).types["T"][0]
    insn, regs = typed_access(name, t, "SMEM")
    op = SPEC.instruction(name).operand("m")
    assert (op.space, op.space_is_field, op.dtype) == ("space", True, "T")
    assert operand_shape(SPEC, insn, "m") == (1,)
    assert evaluate(op.addr, SPEC.scalar_env(insn.values, SPEC.types_of(insn), {"R": regs})) == 4096 - 8


INT_T_BITS = [*BITS.items()]


@pytest.mark.parametrize(("t", "bits"), INT_T_BITS)
def test_lde_sign_extends_the_element_it_loads(t, bits):
    rng = np.random.default_rng(bits)
    patterns = [2**(bits - 1), 2**(bits - 1) - 1, 2**bits - 1, 0, 1,
                *rng.integers(0, 2**bits, 20, endpoint=False).tolist()]
    for raw in patterns:  # min, max, -1, 0, 1, random
        insn, regs = typed_access("lde", t, "NMEM", rd=7)
        m = np.array([raw], f"u{bits // 8}").view(NP[t])
        got = execute(SPEC, insn, {"R": regs, "m": m})
        assert set(got) == {"R"}
        expected = raw - 2**bits if raw >= 2**(bits - 1) else raw
        assert got["R"][7] == expected, (t, hex(raw), int(got["R"][7]))
        assert np.array_equal(np.delete(got["R"], 7), np.delete(regs, 7))


@pytest.mark.parametrize(("t", "bits"), INT_T_BITS)
def test_ste_stores_the_low_bits_of_the_register(t, bits):
    rng = np.random.default_rng(bits + 1)
    values = [INT_MIN, INT_MAX, -1, 0, 1, i32(2**(bits - 1)), i32(-(2**(bits - 1)) - 1),  # just past T
              *rng.integers(INT_MIN, INT_MAX, 20, endpoint=True).tolist()]
    for x in values:
        insn, regs = typed_access("ste", t, "GMEM", rs2=9)
        regs[9] = x
        got = execute(SPEC, insn, {"R": regs, "m": np.zeros(1, NP[t])})
        assert set(got) == {"m"} and got["m"].dtype == NP[t]
        assert int(got["m"].view(f"u{bits // 8}")[0]) == x % 2**bits, (t, x, int(got["m"][0]))


F16_EDGE_BITS = [0x0000, 0x8000, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x0001, 0x8001, 0x03FF, 0x0400,
                 0x3C00, 0xBC00, 0x3555]  # ±0, ±65504, ±inf, NaN, ±2**-24, largest subnormal, 2**-14, ±1, 1/3


@pytest.mark.parametrize("t", ["f16", "f32"])
def test_fld_widens_the_element_it_loads_to_f32_exactly(t):
    rng = np.random.default_rng(17)
    if t == "f16":
        patterns = [*F16_EDGE_BITS, *rng.integers(0, 2**16, 40, endpoint=False).tolist()]
        values = [ref_f16_value(p) for p in patterns]
    else:
        patterns = [bits_of_f32(x) for x in F32_EDGES] + rng.integers(0, 2**32, 40, endpoint=False).tolist()
        values = [f32_of_bits(p) for p in patterns]
    for raw, value in zip(patterns, values, strict=True):
        insn, regs = typed_access("fld", t, "WMEM", rd=5)
        fregs = float_registers(raw % 7)
        m = np.array([raw], f"u{NP[t]().itemsize}").view(NP[t])
        got = execute(SPEC, insn, {"F": fregs, "R": regs, "m": m})
        assert set(got) == {"F"}
        assert same_float(got["F"][5], value), (t, hex(raw), float(got["F"][5]), value)
        assert np.array_equal(np.delete(got["F"], 5), np.delete(fregs, 5))


FST_EDGES = [*F32_EDGES, 65519.0, 65519.996, -65520.0, 1e6, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-26,
             -(2.0**-26), 3 * 2.0**-25, 2.0**-14 - 2.0**-25, 1 + 2.0**-11, 1 + 3 * 2.0**-11]


@pytest.mark.parametrize("t", ["f16", "f32"])
def test_fst_rounds_the_register_to_t_with_ties_to_even_and_overflow_to_inf(t):
    rng = np.random.default_rng(19)
    finite16 = (rng.standard_normal(30) * 3000).tolist()  # values inside the f16 range, and random patterns
    values = [*FST_EDGES, *finite16, *map(f32_of_bits, rng.integers(0, 2**32, 30, endpoint=False).tolist())]
    for x in values:
        x = float(np.float32(x))  # what an f32 register holds
        insn, regs = typed_access("fst", t, "NMEM", rs2=3)
        fregs = float_registers(4)
        fregs[3] = x
        got = execute(SPEC, insn, {"F": fregs, "R": regs, "m": np.zeros(1, NP[t])})
        assert set(got) == {"m"} and got["m"].dtype == NP[t]
        expected = ref_f16_round(x) if t == "f16" else x
        assert same_float(got["m"][0], expected), (t, x, float(got["m"][0]), expected)


def test_fst_f16_overflows_to_inf_exactly_at_half_an_ulp_past_65504():
    for x, expected in [(65519.996, 65504.0), (65520.0, math.inf), (-65520.0, -math.inf), (1e30, math.inf)]:
        insn, regs = typed_access("fst", "f16", "NMEM", rs2=3)
        fregs = np.zeros(32, np.float32)
        fregs[3] = x
        assert execute(SPEC, insn, {"F": fregs, "R": regs, "m": np.zeros(1, np.float16)})["m"][0] == expected


def test_an_f16_round_trip_through_f_registers_is_exact():
    """fld.f16 then fst.f16 gives back the f16 bit pattern it loaded (a NaN stays a NaN)."""
    patterns = np.arange(0, 2**16, 97, dtype=np.uint32).tolist() + F16_EDGE_BITS
    for raw in patterns:
        m = np.array([raw], np.uint16).view(np.float16)
        insn, regs = typed_access("fld", "f16", "NMEM", rd=4)
        fregs = execute(SPEC, insn, {"F": np.zeros(32, np.float32), "R": regs, "m": m})["F"]
        insn, _ = typed_access("fst", "f16", "NMEM", rs2=4)
        back = execute(SPEC, insn, {"F": fregs, "R": regs, "m": np.zeros(1, np.float16)})["m"]
        if math.isnan(ref_f16_value(raw)):
            assert math.isnan(back[0]), hex(raw)
        else:
            assert int(back.view(np.uint16)[0]) == raw, hex(raw)


# -------------------------------------------------------------------------------------- constraints

VALID = {
    "memcpy": dict(dst_space="NMEM", src_space="GMEM", dst=0, src=4096, len=256, count=4, dst_stride=256,
                   src_stride=1024),
    "memcpyr": dict(dst_space="NMEM", src_space="GMEM", rd=1, rs1=2, dst_off=64, src_off=-64, len=256,
                    count=4, dst_stride=256, src_stride=1024),
    "vzero": dict(dst_space="NMEM", dst=64, n=1024),
    **{op: dict(T="f32", dst=0, a=8192, b=16384, n=1024) for op in BINARY},
    "vcycadd": dict(T="i8", dst=0, a=0, b=8192, count=28, m=16),
    "relu": dict(T="i8", dst=0, n=128),
    "vabs": dict(T="i16", dst=64, n=128),
    "sigmoid": dict(T="f16", dst=128, n=64),
    "tanh": dict(T="f32", dst=0, n=256),
    "vexp": dict(T="f32", dst=64, n=128),
    "vrecip": dict(T="f16", dst=0, n=64),
    "vrsqrt": dict(T="f32", dst=0, n=192),
    "conv": dict(T="f16", out=0, inp=65536, wgt=0, h=10, w=10, cin=16, cout=32, kh=3, kw=3, s=1),
    "qconv": dict(T="i8", out=0, inp=65536, wgt=64, h=10, w=10, cin=16, cout=32, kh=3, kw=3, s=2),
    "matmul": dict(T="f32", out=0, a=65536, b=0, m=64, k=64, n=64),
}
VALID["vreq"] = dict(dst=0, a=4096, n=1024, s=8, lo=-128, hi=127)
# the asynchronous copies have their synchronous twins' fields and rules
VALID["memcpy_async"], VALID["memcpyr_async"] = VALID["memcpy"], VALID["memcpyr"]
# SMEM R1 + 64 -> SMEM R2 - 64 of cluster R0 = 0
VALID["memcpyc"] = dict(rd=2, rs1=1, rc=0, dst_off=-64, src_off=64, len=256, count=4, dst_stride=256,
                        src_stride=1024)


# registers for the rules that read them (memcpyr's base addresses: R1 = 0 in NMEM, R2 = 4160 in GMEM)
VALID_REGISTERS = np.array([0, 0, 4160] + [0] * (P["NUM_REGS"] - 3), np.int32)


@pytest.mark.parametrize("name", list(SPEC.instructions))
def test_a_valid_instance_of_every_instruction_breaks_no_rule(name):
    instr = SPEC.instruction(name)
    if name not in VALID:  # scalar and control instructions have no rules beyond their field ranges and types
        assert instr.constraints == ()
    for t in instr.types.get("T", [None]):
        fields = VALID.get(name, {}) | ({"T": t} if t is not None else {})
        assert check_constraints(SPEC, SPEC.insn(name, **fields), {"R": VALID_REGISTERS}) == [], (name, t)


def violations(name: str, **changes) -> list:
    return check_constraints(SPEC, SPEC.insn(name, **{**VALID[name], **changes}))


def only(vs: list, kind: str):
    assert [v.kind for v in vs] == [kind], [str(v) for v in vs]
    return vs[0]


@pytest.mark.parametrize(("name", "field"), [("vadd", "a"), ("vmul", "b"), ("vsub", "dst"), ("relu", "dst"),
                                             ("vzero", "dst"), ("conv", "inp"), ("matmul", "out")])
def test_a_misaligned_address_names_the_alignment_rule(name, field):
    v = only(violations(name, **{field: VALID[name][field] + 32}), "align")
    assert f"{field} % VECTOR_ALIGN == 0" in str(v) and "aligned" in str(v)


def test_misaligned_conv_weights_name_the_wmem_alignment_rule():
    v = only(violations("conv", wgt=8), "align")
    assert "wgt % WMEM_ALIGN == 0" in str(v)


@pytest.mark.parametrize("name", [*BINARY, "relu", "vabs", *ACTIVATIONS])
def test_an_element_count_not_a_multiple_of_64_names_the_divisibility_rule(name):
    v = only(violations(name, n=100), "divisible")
    assert "n % VECTOR_ELEMS == 0" in str(v) and "multiple of VECTOR_ELEMS" in str(v)
    assert ("n", 100) in v.values and ("VECTOR_ELEMS", 64) in v.values


def test_vzero_byte_count_must_be_a_multiple_of_64():
    assert "n % VECTOR_ALIGN == 0" in str(only(violations("vzero", n=96), "divisible"))


@pytest.mark.parametrize(("name", "field"), [("conv", "cout"), ("qconv", "cout"), ("matmul", "n")])
def test_output_channels_not_a_multiple_of_16_break_the_weight_layout(name, field):
    v = only(violations(name, **{field: 24}), "layout")
    assert f"{field} % CONV_BLOCK == 0" in str(v) and "CONV_BLOCK" in v.message


# Cambricon's __memcpy directions (anchors §3.2): every pair of spaces but WRAM2WRAM
ALLOWED_DIRECTIONS = {("GMEM", "SMEM"), ("GMEM", "NMEM"), ("GMEM", "WMEM"), ("SMEM", "NMEM"),
                      ("SMEM", "WMEM"), ("NMEM", "WMEM"), ("NMEM", "NMEM"), ("SMEM", "SMEM"),
                      ("GMEM", "GMEM")}
SPACES = ["GMEM", "SMEM", "NMEM", "WMEM"]


@pytest.mark.parametrize("dst_space", SPACES)
@pytest.mark.parametrize("src_space", SPACES)
def test_memcpy_allows_exactly_the_documented_directions(dst_space, src_space):
    insn = SPEC.insn("memcpy", dst_space=dst_space, src_space=src_space, dst=0, src=4096, len=64, count=1)
    vs = check_constraints(SPEC, insn)
    allowed = (dst_space, src_space) in ALLOWED_DIRECTIONS or (src_space, dst_space) in ALLOWED_DIRECTIONS
    if allowed:
        assert vs == []
    else:
        v = only(vs, "space")
        assert "dst_space != WMEM or src_space != WMEM" in str(v)
        assert "WMEM and WMEM" in str(v)  # the message names the refused direction


def test_vzero_refuses_gmem():
    assert "dst_space != GMEM" in str(only(violations("vzero", dst_space="GMEM"), "space"))


@pytest.mark.parametrize(("name", "changes", "operand"), [
    ("vadd", {"dst": (512 << 10) - 64, "n": 64}, "dst"),          # 64 f32 = 256 bytes, 64 before the end
    ("vadd", {"a": (512 << 10) - 128, "n": 64}, "a"),
    ("relu", {"dst": (512 << 10) - 64, "n": 128}, "dst"),          # i8: 128 bytes
    ("conv", {"inp": (512 << 10) - 64}, "inp"),
    ("matmul", {"out": (512 << 10) - 4096}, "out"),                # 64 x 64 f32 = 16 KiB
])
def test_an_operand_past_the_end_of_nmem_names_the_capacity_rule(name, changes, operand):
    v = only(violations(name, **changes), "capacity")
    assert f"{operand} must lie inside NMEM" in str(v) and "<= NMEM_BYTES" in str(v)


def test_conv_weights_past_the_end_of_wmem_break_the_wmem_capacity_rule():
    v = only(violations("conv", wgt=(1 << 20) - 64), "capacity")
    assert "wgt must lie inside WMEM" in str(v)


def test_memcpy_capacity_uses_the_capacity_of_the_named_space():
    end = dict(len=64, count=2, dst_stride=64, src_stride=64)
    assert violations("memcpy", dst_space="WMEM", src_space="GMEM", dst=(1 << 20) - 128, **end) == []
    v = only(violations("memcpy", dst_space="NMEM", src_space="GMEM", dst=(1 << 20) - 128, **end), "capacity")
    assert "capacity(dst_space)" in str(v) and "destination" in str(v)
    v = only(violations("memcpy", dst_space="NMEM", src_space="SMEM", dst=0, src=(2 << 20) - 100, **end),
             "capacity")
    assert "capacity(src_space)" in str(v)


def test_memcpy_rows_must_not_overlap_when_there_are_several():
    v = only(violations("memcpy", dst_stride=128), "layout")
    assert "dst_stride >= len" in str(v)
    v = only(violations("memcpy", src_stride=255), "layout")
    assert "src_stride >= len" in str(v)
    assert violations("memcpy", count=1, dst_stride=0, src_stride=0) == []


def test_nmem_to_nmem_memcpy_must_not_overlap_its_source():
    base = dict(dst_space="NMEM", src_space="NMEM", len=64, count=2, dst_stride=64, src_stride=64)
    assert violations("memcpy", dst=0, src=128, **base) == []
    assert "must not overlap" in str(only(violations("memcpy", dst=0, src=64, **base), "other"))


# memcpyr has memcpy's rules with its addresses at R[rd] + dst_off and R[rs1] + src_off
CAPACITY = {"GMEM": 1 << 30, "SMEM": 2 << 20, "NMEM": 512 << 10, "WMEM": 1 << 20}  # the documented defaults
# each memcpyr rule, in declaration order: its kind and a piece of its text that no other rule has
MEMCPYR_RULES = [("space", "dst_space != WMEM or src_space != WMEM"),
                 ("range", "len >= 1 and count >= 1"),
                 ("layout", "dst_stride >= len"), ("layout", "src_stride >= len"),
                 ("capacity", "R[rd] + dst_off >= 0"), ("capacity", "R[rs1] + src_off >= 0"),
                 ("other", "<= R[rs1] + src_off")]


def memcpyr_rules_broken(f: dict, regs: np.ndarray) -> list[int]:
    """Indices into MEMCPYR_RULES of the rules instance ``f`` (of at least one byte) breaks with registers
    ``regs``, by their documented meaning: memcpy's directions, rows that do not overlap each other, rows
    inside their space from a non-negative address, and within one space disjoint ranges (first row start to
    last row end)."""
    d_at, s_at = int(regs[f["rd"]]) + f["dst_off"], int(regs[f["rs1"]]) + f["src_off"]
    d_end = d_at + (f["count"] - 1) * f["dst_stride"] + f["len"]
    s_end = s_at + (f["count"] - 1) * f["src_stride"] + f["len"]
    same = f["dst_space"] == f["src_space"]
    ok = [not same or f["dst_space"] != "WMEM",
          f["len"] >= 1 and f["count"] >= 1,
          f["count"] <= 1 or f["dst_stride"] >= f["len"],
          f["count"] <= 1 or f["src_stride"] >= f["len"],
          d_at >= 0 and d_end <= CAPACITY[f["dst_space"]],
          s_at >= 0 and s_end <= CAPACITY[f["src_space"]],
          not same or d_end <= s_at or s_end <= d_at]
    return [k for k, good in enumerate(ok) if not good]


def memcpyr_rule_of(v) -> int | str:
    """The index in MEMCPYR_RULES of the rule violation ``v`` names (its text if none matches)."""
    matches = [k for k, (kind, key) in enumerate(MEMCPYR_RULES) if v.kind == kind and key in v.rule]
    return matches[0] if matches else v.rule


def memcpyr_violations(regs: dict[int, int], **changes) -> list:
    """check_constraints of VALID["memcpyr"] with ``changes``, the registers zero except ``regs``."""
    r = np.zeros(P["NUM_REGS"], np.int32)
    for k, value in regs.items():
        r[k] = value
    return check_constraints(SPEC, SPEC.insn("memcpyr", **{**VALID["memcpyr"], **changes}), {"R": r})


def around(x: int) -> st.SearchStrategy[int]:
    """Integers at most 300 from ``x``, often within 2 of it."""
    return st.one_of(st.integers(-2, 2), st.integers(-300, 300)).map(lambda e: x + e)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_memcpyr_breaks_exactly_the_rules_a_reference_finds(data):
    f = dict(dst_space=data.draw(st.sampled_from(SPACES)), src_space=data.draw(st.sampled_from(SPACES)),
             rd=data.draw(st.integers(0, 31)), rs1=data.draw(st.integers(0, 31)),
             len=data.draw(st.one_of(st.integers(1, 300), st.integers(65000, 65535)), label="len"),
             count=data.draw(st.one_of(st.integers(1, 4), st.integers(250, 255)), label="count"))
    for side in ("dst", "src"):  # strides around len (rows that just touch or just overlap), or any
        near = st.integers(max(f["len"] - 2, 0), min(f["len"] + 2, 65535))
        f[f"{side}_stride"] = data.draw(st.one_of(near, st.integers(0, 65535)), label=f"{side}_stride")
    d_extent = (f["count"] - 1) * f["dst_stride"] + f["len"]
    s_extent = (f["count"] - 1) * f["src_stride"] + f["len"]
    # addresses around 0, rows ending around the end of their space, a source range around either end of the
    # destination range
    d_at = data.draw(st.one_of(around(0), around(CAPACITY[f["dst_space"]] - d_extent)), label="dst address")
    s_at = data.draw(st.one_of(around(0), around(CAPACITY[f["src_space"]] - s_extent),
                               around(d_at + d_extent), around(d_at - s_extent)), label="src address")
    regs = np.zeros(32, np.int32)
    f["dst_off"] = data.draw(st.integers(-(2**24), 2**24 - 1), label="dst_off")
    f["src_off"] = data.draw(st.integers(-(2**24), 2**24 - 1), label="src_off")
    regs[f["rd"]] = d_at - f["dst_off"]
    if f["rs1"] != f["rd"]:  # (one base register for both: the source address follows from src_off)
        regs[f["rs1"]] = s_at - f["src_off"]
    got = check_constraints(SPEC, SPEC.insn("memcpyr", **f), {"R": regs})
    assert [memcpyr_rule_of(v) for v in got] == memcpyr_rules_broken(f, regs), [str(v) for v in got]


@pytest.mark.parametrize("dst_space", SPACES)
@pytest.mark.parametrize("src_space", SPACES)
def test_memcpyr_allows_the_directions_memcpy_allows_whatever_the_registers_hold(dst_space, src_space):
    insn = SPEC.insn("memcpyr", **{**VALID["memcpyr"], "dst_space": dst_space, "src_space": src_space})
    allowed = (dst_space, src_space) in ALLOWED_DIRECTIONS or (src_space, dst_space) in ALLOWED_DIRECTIONS
    vs = check_constraints(SPEC, insn, which="static")  # no registers needed to decide the direction
    if allowed:
        assert vs == []
    else:
        v = only(vs, "space")
        assert "dst_space != WMEM or src_space != WMEM" in str(v)
        assert "WMEM and WMEM" in str(v)
    assert check_constraints(SPEC, insn, {"R": VALID_REGISTERS}) == vs


def test_memcpyr_copies_at_least_one_byte_in_rows_that_do_not_overlap():
    regs = {1: 0, 2: 4160}
    assert "len >= 1 and count >= 1" in str(only(memcpyr_violations(regs, len=0), "range"))
    assert "len >= 1 and count >= 1" in str(only(memcpyr_violations(regs, count=0), "range"))
    assert "dst_stride >= len" in str(only(memcpyr_violations(regs, dst_stride=255), "layout"))
    assert "src_stride >= len" in str(only(memcpyr_violations(regs, src_stride=255), "layout"))
    assert memcpyr_violations(regs, count=1, dst_stride=0, src_stride=0) == []


@pytest.mark.parametrize(("base", "off", "fits"), [
    (64, -64, True),                            # address 0
    (0, -64, False),                            # address -64: a negative address is outside the space
    (-(2**20), 2**20, True),                    # a negative register plus a positive offset
    ((512 << 10) - 1024 - 64, 64, True),        # the last row ends exactly at the end of NMEM
    ((512 << 10) - 1024 - 63, 64, False),       # one byte past it
    (-(2**31), -1, False),                      # wrapped to 32 bits this would be 2**31 - 1 and "fit" below
    (2**31 - 1, 1, False),                      # wrapped to 32 bits this would be -2**31
    (2**31 - 1, -(2**24), False),
])
def test_memcpyr_destination_rows_must_lie_inside_the_destination_space(base, off, fits):
    # 4 rows of 256 bytes, 256 apart: 1024 bytes from the address into NMEM
    vs = memcpyr_violations({1: base, 2: 4160}, dst_off=off)
    if fits:
        assert vs == []
    else:
        v = only(vs, "capacity")
        assert "capacity(dst_space)" in v.rule and "the destination rows must lie inside dst_space" in str(v)
        assert ("R[rd]", base) in v.values and ("dst_off", off) in v.values
        assert f"R[rd] = {base}" in str(v)


def test_memcpyr_source_rows_must_lie_inside_the_source_space():
    # 4 rows of 256 bytes, 1024 apart: 3328 bytes from the address into GMEM
    assert memcpyr_violations({1: 0, 2: (1 << 30) - 3328 + 64}, src_off=-64) == []
    v = only(memcpyr_violations({1: 0, 2: (1 << 30) - 3328 + 65}, src_off=-64), "capacity")
    assert "capacity(src_space)" in v.rule and ("R[rs1]", (1 << 30) - 3328 + 65) in v.values
    v = only(memcpyr_violations({1: 0, 2: 63}, src_off=-64), "capacity")
    assert "R[rs1] + src_off >= 0" in v.rule and ("R[rs1]", 63) in v.values


def test_nmem_to_nmem_memcpyr_must_not_overlap_its_source():
    base = dict(dst_space="NMEM", src_space="NMEM", len=64, count=2, dst_stride=64, src_stride=64)
    # destination [R1 + 0, R1 + 128), source [R2 + 0, R2 + 128)
    assert memcpyr_violations({1: 1000, 2: 1128}, dst_off=0, src_off=0, **base) == []   # touching: fine
    assert memcpyr_violations({1: 1128, 2: 1000}, dst_off=0, src_off=0, **base) == []
    v = only(memcpyr_violations({1: 1000, 2: 1127}, dst_off=0, src_off=0, **base), "other")
    assert "must not overlap" in str(v)
    reads = [(k, x) for k, x in v.values if k.startswith("R[")]
    assert reads == [("R[rd]", 1000), ("R[rs1]", 1127)]  # each register once, though the rule reads it twice
    # one base register for both: the offsets alone decide
    assert memcpyr_violations({5: 4096}, rd=5, rs1=5, dst_off=128, src_off=0, **base) == []
    v = only(memcpyr_violations({5: 4096}, rd=5, rs1=5, dst_off=127, src_off=0, **base), "other")
    assert [(k, x) for k, x in v.values if k.startswith("R[")] == [("R[rd]", 4096), ("R[rs1]", 4096)]


def test_vector_ops_may_work_in_place_but_not_on_partly_overlapping_operands():
    assert violations("vadd", dst=8192) == []                      # dst == a
    v = only(violations("vadd", dst=8192 + 64), "other")           # dst starts inside a
    assert "dst must be a or not overlap it" in str(v)


def test_a_field_above_its_largest_meaningful_value_is_a_range_violation():
    vs = violations("vadd", dst=512 << 10, n=64)                   # fits 20 bits, but NMEM ends at 512 KiB
    assert [v.kind for v in vs] == ["range", "capacity"]  # the field's max, then the operand's extent
    assert "dst <= 524287" in str(vs[0]) and "largest meaningful value" in str(vs[0])


def test_sigmoid_rejects_integer_types():
    vs = check_constraints(SPEC, SPEC.insn("sigmoid", T="i8", dst=0, n=64))
    assert [v.kind for v in vs] == ["type"] and "T = i8" in str(vs[0])


@pytest.mark.parametrize(("name", "t"), [("lde", "f16"), ("ste", "f32"), ("fld", "i8"), ("fst", "i32")])
def test_integer_loads_and_stores_reject_float_types_and_float_ones_integer_types(name, t):
    vs = check_constraints(SPEC, SPEC.insn(name, T=t, rd=1, rs1=2, space="NMEM", imm=4)
                           if name in ("lde", "fld") else SPEC.insn(name, T=t, rs1=2, rs2=1, space="NMEM"))
    assert [v.kind for v in vs] == ["type"] and f"T = {t}" in str(vs[0])


def test_conv_rejects_a_kernel_larger_than_its_input_and_a_zero_stride():
    assert "kh <= h" in str(only(violations("conv", kh=11, h=10, w=12), "range"))
    vs = violations("conv", s=0)
    assert [v.kind for v in vs] == ["range"] and "s >= 1" in str(vs[0])


# ------------------------------------------------------------------------------------------- timing

@pytest.mark.parametrize(("fields", "cycles"), [
    (dict(T="f32", n=64), 2), (dict(T="f16", n=64), 1), (dict(T="i8", n=64), 1), (dict(T="f32", n=4096), 128),
])
def test_vector_timing_is_128_bytes_per_cycle_with_whole_cycles(fields, cycles):
    assert timing_of(SPEC, SPEC.insn("vadd", dst=0, a=0, b=0, **fields)) == ("vfu", 4, cycles)


@pytest.mark.parametrize(("dsp", "ssp", "latency", "per_row"), [
    ("NMEM", "GMEM", 256, 16), ("SMEM", "GMEM", 256, 16), ("NMEM", "SMEM", 32, 8), ("WMEM", "NMEM", 8, 8)])
def test_dma_timing_follows_the_slowest_level_it_touches(dsp, ssp, latency, per_row):
    insn = SPEC.insn("memcpy", dst_space=dsp, src_space=ssp, len=1000, count=3, dst_stride=1000,
                     src_stride=1000)
    # ceil(1000 / 64) = 16 cycles a row from or to GMEM, ceil(1000 / 128) = 8 elsewhere
    assert timing_of(SPEC, insn) == ("dma", latency, 3 * per_row)


def dma_timing_ref(dsp: str, ssp: str, length: int, count: int) -> tuple[str, int, int]:
    """(unit, latency, cycles) of a copy: the latency and bandwidth of the slowest level touched (GMEM, then
    SMEM, then the core's own memories), and whole cycles per row."""
    level = "GMEM" if "GMEM" in (dsp, ssp) else "SMEM" if "SMEM" in (dsp, ssp) else "LOCAL"
    bytes_per_cycle = P[f"DMA_{level}_BYTES_PER_CYCLE"]
    return "dma", P[f"{level}_LATENCY"], count * -(-length // bytes_per_cycle)


@pytest.mark.parametrize(("dsp", "ssp"), COPY_DIRECTIONS)
@pytest.mark.parametrize(("length", "count"), [(1, 1), (64, 3), (1000, 7), (65535, 255)])
def test_memcpyr_takes_as_long_as_memcpy_whatever_its_registers_and_offsets(dsp, ssp, length, count):
    expected = dma_timing_ref(dsp, ssp, length, count)
    strides = dict(len=length, count=count, dst_stride=length, src_stride=length)
    for rd, rs1, dst_off, src_off in [(1, 2, 0, 0), (31, 31, -(2**24), 2**24 - 1)]:
        insn = SPEC.insn("memcpyr", dst_space=dsp, src_space=ssp, rd=rd, rs1=rs1, dst_off=dst_off,
                         src_off=src_off, **strides)
        assert timing_of(SPEC, insn) == expected
    memcpy = SPEC.insn("memcpy", dst_space=dsp, src_space=ssp, dst=0, src=0, **strides)
    assert timing_of(SPEC, memcpy) == expected


@pytest.mark.parametrize(("name", "dt", "cycles"), [("conv", "f16", 1152), ("conv", "f32", 2304),
                                                    ("qconv", "i8", 576)])
def test_conv_timing_is_256_16_bit_macs_per_cycle(name, dt, cycles):
    # 8 x 8 outputs x 32 channels x 3 x 3 x 16 = 294912 MACs
    insn = SPEC.insn(name, T=dt, h=10, w=10, cin=16, cout=32, kh=3, kw=3, s=1)
    assert timing_of(SPEC, insn) == ("tfu", 16, cycles)


@pytest.mark.parametrize(("name", "latency"), [("fadd", "FPU_LATENCY"), ("fsub", "FPU_LATENCY"),
                                               ("fmul", "FPU_LATENCY"), ("fcvt", "FPU_LATENCY"),
                                               ("fmax", "SCALAR_LATENCY"), ("fmin", "SCALAR_LATENCY")])
def test_float_register_ops_issue_in_one_cycle_with_their_documented_latency(name, latency):
    assert (P["FPU_LATENCY"], P["SCALAR_LATENCY"]) == (4, 2)
    assert timing_of(SPEC, SPEC.insn(name)) == ("scalar", P[latency], 1)
    fast = isa.load_isa("diannao", params={"FPU_LATENCY": 2, "SCALAR_LATENCY": 1})
    assert timing_of(fast, fast.insn(name)) == ("scalar", {"FPU_LATENCY": 2, "SCALAR_LATENCY": 1}[latency], 1)


@pytest.mark.parametrize("name", ["ld", "st", "lde", "ste", "fld", "fst"])
@pytest.mark.parametrize(("space", "latency"), [("GMEM", "GMEM_LATENCY"), ("SMEM", "SMEM_LATENCY"),
                                                ("NMEM", "LOCAL_LATENCY"), ("WMEM", "LOCAL_LATENCY")])
def test_scalar_loads_and_stores_take_the_latency_of_the_level_they_access(name, space, latency):
    instr = SPEC.instruction(name)
    types = {"T": instr.types["T"][-1]} if instr.types else {}
    assert timing_of(SPEC, SPEC.insn(name, space=space, **types)) == ("scalar", P[latency], 1)


def test_matmul_and_scalar_timing():
    assert timing_of(SPEC, SPEC.insn("matmul", T="f32", m=64, n=64, k=64)) == ("tfu", 16, 2048)
    assert timing_of(SPEC, SPEC.insn("add", rd=1, rs1=2, rs2=3)) == ("scalar", 2, 1)
    assert timing_of(SPEC, SPEC.insn("ld", space="GMEM"))[1] == 256
    assert timing_of(SPEC, SPEC.insn("ld", space="NMEM"))[1] == 8


# ----------------------------------------------------------------------------------------- encoding

def test_vadd_and_memcpy_words_follow_the_documented_layouts():
    word = encode_insn(SPEC, SPEC.insn("vadd", T="f32", dst=0x40, a=0x80, b=0xC0, n=64))
    # opcode 16 | T (f32 = 4) at bit 8 | dst at 11 | a at 31 | b at 51 | n at 71
    assert word == 16 | 4 << 8 | 0x40 << 11 | 0x80 << 31 | 0xC0 << 51 | 64 << 71
    insn = SPEC.insn("memcpy", dst_space="NMEM", src_space="GMEM", dst=0x100, src=0x3FFFFFFF, len=14, count=4,
                     dst_stride=14, src_stride=56)
    word = encode_insn(SPEC, insn)
    # opcode 1 | dst_space at 8 | src_space at 10 | dst at 12 | src at 42 | len at 72 | count at 88
    # | dst_stride at 96 | src_stride at 112
    assert word == (1 | 2 << 8 | 0 << 10 | 0x100 << 12 | 0x3FFFFFFF << 42 | 14 << 72 | 4 << 88
                    | 14 << 96 | 56 << 112)


@pytest.mark.parametrize(("fields", "word"), [
    # opcode 3 | dst_space at 8 | src_space at 10 | rd at 12 | rs1 at 17 | dst_off at 22 (25 bits, two's
    # complement) | src_off at 47 | len at 72 | count at 88 | dst_stride at 96 | src_stride at 112
    (dict(dst_space="NMEM", src_space="GMEM", rd=1, rs1=2, dst_off=64, src_off=-64, len=256, count=4,
          dst_stride=256, src_stride=1024),
     3 | 2 << 8 | 0 << 10 | 1 << 12 | 2 << 17 | 64 << 22 | (2**25 - 64) << 47 | 256 << 72 | 4 << 88
     | 256 << 96 | 1024 << 112),
    (dict(dst_space="WMEM", src_space="SMEM", rd=31, rs1=0, dst_off=-(2**24), src_off=2**24 - 1, len=65535,
          count=255, dst_stride=65535, src_stride=0),
     3 | 3 << 8 | 1 << 10 | 31 << 12 | 0 << 17 | (2**25 - 2**24) << 22 | (2**24 - 1) << 47 | 65535 << 72
     | 255 << 88 | 65535 << 96 | 0 << 112),
    (dict(dst_space="NMEM", src_space="NMEM", rd=7, rs1=7, dst_off=-1, src_off=-1, len=1, count=1),
     3 | 2 << 8 | 2 << 10 | 7 << 12 | 7 << 17 | (2**25 - 1) << 22 | (2**25 - 1) << 47 | 1 << 72 | 1 << 88),
])
def test_memcpyr_words_follow_the_dmar_layout_and_decode_back(fields, word):
    insn = SPEC.insn("memcpyr", **fields)
    assert encode_insn(SPEC, insn) == word
    assert decode_insn(SPEC, word) == insn
    assert decode_insn(SPEC, word)["dst_off"] == fields["dst_off"]  # the sign comes back


@pytest.mark.parametrize(("field", "value"), [("dst_off", 2**24), ("src_off", -(2**24) - 1)])
def test_a_memcpyr_offset_outside_25_signed_bits_is_an_encoding_error(field, value):
    with pytest.raises(isa.EncodingError, match=rf"field '{field}' = {value} does not fit in 25 signed bits"):
        SPEC.insn("memcpyr", **{**VALID["memcpyr"], field: value})


@pytest.mark.parametrize(("insn", "word"), [
    # rrr: opcode | rd at 8 | rs1 at 13 | rs2 at 18
    (SPEC.insn("fadd", rd=1, rs1=2, rs2=3), 74 | 1 << 8 | 2 << 13 | 3 << 18),
    (SPEC.insn("fmin", rd=31, rs1=0, rs2=17), 78 | 31 << 8 | 0 << 13 | 17 << 18),
    # rr: opcode | rd at 8 | rs1 at 13
    (SPEC.insn("fcvt", rd=30, rs1=5), 79 | 30 << 8 | 5 << 13),
    # loadt: opcode | T at 8 | rd at 11 | rs1 at 16 | space at 21 | imm (two's complement) at 23
    (SPEC.insn("fld", T="f16", rd=3, rs1=1, space="NMEM", imm=-4),
     93 | 3 << 8 | 3 << 11 | 1 << 16 | 2 << 21 | (2**32 - 4) << 23),
    (SPEC.insn("lde", T="i16", rd=9, rs1=31, space="GMEM", imm=2**31 - 1),
     91 | 1 << 8 | 9 << 11 | 31 << 16 | 0 << 21 | (2**31 - 1) << 23),
    # storet: opcode | T at 8 | rs1 at 11 | rs2 at 16 | space at 21 | imm at 23
    (SPEC.insn("fst", T="f32", rs1=4, rs2=6, space="WMEM", imm=64),
     94 | 4 << 8 | 4 << 11 | 6 << 16 | 3 << 21 | 64 << 23),
    (SPEC.insn("ste", T="i8", rs1=2, rs2=7, space="SMEM", imm=-(2**31)),
     92 | 0 << 8 | 2 << 11 | 7 << 16 | 1 << 21 | 2**31 << 23),
])
def test_float_and_typed_memory_words_follow_the_documented_layouts(insn, word):
    assert encode_insn(SPEC, insn) == word
    assert decode_insn(SPEC, word) == insn


def _field_value(data, instr, f):
    if f.kind == "type":
        return data.draw(st.sampled_from(list(instr.types[f.name])))
    if f.kind == "enum":
        return data.draw(st.sampled_from(list(SPEC.enums[f.enum].values)))
    return data.draw(st.integers(f.lo, f.hi if f.max is None else min(f.hi, f.max)))


@pytest.mark.parametrize("name", list(SPEC.instructions))
@settings(max_examples=20)
@given(data=st.data())
def test_every_instruction_round_trips_through_its_128_bit_word(name, data):
    instr = SPEC.instruction(name)
    insn = SPEC.insn(name, **{f.name: _field_value(data, instr, f) for f in instr.fields})
    word = encode_insn(SPEC, insn)
    assert 0 <= word < 1 << 128
    assert word & 0xFF == instr.fixed["opcode"]
    assert decode_insn(SPEC, word) == insn


# ------------------------------------------------------------------------------ parameter overrides

def test_nmem_may_double_without_outgrowing_its_20_bit_fields():
    big = isa.load_isa("diannao", params={"NMEM_BYTES": 1 << 20})
    assert big.spaces["NMEM"].bytes == 1 << 20
    insn = big.insn("vadd", T="f32", dst=600000 - 600000 % 64, a=0, b=4096, n=64)
    assert check_constraints(big, insn) == []  # past the default NMEM, inside the doubled one


def test_an_nmem_that_outgrows_the_address_fields_is_a_spec_error_naming_the_field():
    with pytest.raises(isa.ISASpecError) as e:
        isa.load_isa("diannao", params={"NMEM_BYTES": 1 << 22})
    assert e.value.field == "dst" and "format 'vbin'" in str(e.value) and "too narrow" in str(e.value)


@pytest.mark.parametrize(("param", "value", "field"), [
    ("GMEM_BYTES", 1 << 31, "dst"), ("WMEM_BYTES", 1 << 21, "wgt"), ("NUM_REGS", 64, "rd"),
    ("SMEM_BYTES", 1 << 23, "dst"),
])
def test_other_capacities_that_outgrow_their_fields_are_spec_errors(param, value, field):
    with pytest.raises(isa.ISASpecError) as e:
        isa.load_isa("diannao", params={param: value})
    assert e.value.field == field and "too narrow" in str(e.value)


def test_a_smaller_nmem_moves_the_capacity_rules_with_it():
    small = isa.load_isa("diannao", params={"NMEM_BYTES": 1 << 18})
    vs = check_constraints(small, small.insn("vadd", T="f32", dst=300032, a=0, b=4096, n=64))
    # dst is above its max (NMEM_BYTES - 1) and the vector runs past the end
    assert sorted(v.kind for v in vs) == ["capacity", "range"]
    assert check_constraints(SPEC, SPEC.insn("vadd", T="f32", dst=300032, a=0, b=4096, n=64)) == []


# ----------------------------------------------------------------------------------------- assembly

def test_float_and_typed_memory_instructions_read_as_assembly_with_a_type_suffix():
    program = isa.Program(SPEC, [
        SPEC.insn("fld", T="f16", rd=3, rs1=1, space="NMEM", imm=-4),
        SPEC.insn("fadd", rd=1, rs1=2, rs2=3),
        SPEC.insn("fcvt", rd=2, rs1=9),
        SPEC.insn("ste", T="i8", rs1=2, rs2=5, space="GMEM", imm=7),
    ])
    assert isa.disassemble(program).splitlines()[3:] == [
        "    fld.f16 rd=r3, rs1=r1, space=NMEM, imm=-4",
        "    fadd rd=r1, rs1=r2, rs2=r3",
        "    fcvt rd=r2, rs1=r9",
        "    ste.i8 rs1=r2, rs2=r5, space=GMEM, imm=7",
    ]
    assert isa.assemble(isa.disassemble(program)) == program


NEW_SCALAR = ["fadd", "fsub", "fmul", "fmax", "fmin", "fcvt", "lde", "ste", "fld", "fst"]


@pytest.mark.parametrize("name", NEW_SCALAR)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_float_and_typed_memory_instructions_round_trip_through_assembly_text(name, data):
    instr = SPEC.instruction(name)
    insn = SPEC.insn(name, **{f.name: _field_value(data, instr, f) for f in instr.fields})
    program = isa.Program(SPEC, [insn, SPEC.insn("halt")])
    assert isa.assemble(isa.disassemble(program)) == program
    assert isa.decode_program(isa.encode_program(program)) == program


def test_memcpyr_reads_as_assembly_with_register_bases_and_signed_offsets():
    insn = SPEC.insn("memcpyr", dst_space="NMEM", src_space="GMEM", rd=1, rs1=2, dst_off=-64,
                     src_off=-(2**24), len=256, count=4, dst_stride=256, src_stride=1024)
    program = isa.Program(SPEC, [insn, SPEC.insn("halt")])
    assert isa.disassemble(program).splitlines()[3] == (
        "    memcpyr dst_space=NMEM, src_space=GMEM, rd=r1, rs1=r2, dst_off=-64, src_off=-16777216, len=256, "
        "count=4, dst_stride=256, src_stride=1024")
    assert isa.assemble(isa.disassemble(program)) == program
    positional = ".isa diannao\n.text\nmemcpyr NMEM, GMEM, r1, r2, -64, -0x1000000, 256, 4, 256, 1024\n"
    assert isa.assemble(positional).insns == (insn,)  # positional, a hexadecimal negative offset


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_memcpyr_round_trips_through_assembly_text_and_binary(data):
    instr = SPEC.instruction("memcpyr")
    values = {f.name: _field_value(data, instr, f) for f in instr.fields}
    for name in ("dst_off", "src_off"):  # the ends of the signed range, and small negative offsets
        values[name] = data.draw(st.one_of(st.sampled_from([-(2**24), 2**24 - 1, -1]), st.integers(-4096, 0),
                                           st.integers(-(2**24), 2**24 - 1)))
    program = isa.Program(SPEC, [SPEC.insn("memcpyr", **values), SPEC.insn("halt")])
    assert isa.assemble(isa.disassemble(program)) == program
    assert isa.decode_program(isa.encode_program(program)) == program
