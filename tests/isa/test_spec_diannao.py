"""The built-in DianNao spec (isa/specs/diannao.toml): what each instruction computes, which instances its
constraints reject, how long it takes, how it is encoded, and which parameter overrides it accepts.

Every expected value comes from a hand-written numpy (or plain Python) reference in this file, never from isa
code; integers are compared bit-exactly, floats exactly where IEEE rounding makes the result unique and with a
stated tolerance otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from isa.binary import decode_insn, encode_insn
from isa.instance import check_constraints, execute, operand_shape, timing_of
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
    expected = {op: {"T": tuple(ALL_T)} for op in [*BINARY, "relu", "vabs"]}
    floats = {"T": ("f16", "f32")}
    expected |= {"sigmoid": floats, "tanh": floats, "conv": floats, "matmul": floats}
    expected["qconv"] = {"T": ("i8", "i16")}
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


# sigmoid is three T-rounded operations (exp, +, /): within a few ulps of T; tanh is one
ACT_TOL = {"f16": (2e-3, 2e-3), "f32": (1e-6, 1e-7)}


@pytest.mark.parametrize("dt", ["f16", "f32"])
@pytest.mark.parametrize("act", ["sigmoid", "tanh"])
def test_float_activations_match_numpy_float64_within_a_few_ulps(act, dt):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(192) * 4).astype(NP[dt])
    x[:8] = np.array([0.0, -0.0, 30.0, -30.0, 1e-3, -1e-3, np.inf, -np.inf], NP[dt])
    got = execute(SPEC, SPEC.insn(act, T=dt, dst=0, n=192), {"dst": x})["dst"]
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        expected = 1.0 / (1.0 + np.exp(-x64)) if act == "sigmoid" else np.tanh(x64)
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


# -------------------------------------------------------------------------------------- constraints

VALID = {
    "memcpy": dict(dst_space="NMEM", src_space="GMEM", dst=0, src=4096, len=256, count=4, dst_stride=256,
                   src_stride=1024),
    "vzero": dict(dst_space="NMEM", dst=64, n=1024),
    **{op: dict(T="f32", dst=0, a=8192, b=16384, n=1024) for op in BINARY},
    "relu": dict(T="i8", dst=0, n=128),
    "vabs": dict(T="i16", dst=64, n=128),
    "sigmoid": dict(T="f16", dst=128, n=64),
    "tanh": dict(T="f32", dst=0, n=256),
    "conv": dict(T="f16", out=0, inp=65536, wgt=0, h=10, w=10, cin=16, cout=32, kh=3, kw=3, s=1),
    "qconv": dict(T="i8", out=0, inp=65536, wgt=64, h=10, w=10, cin=16, cout=32, kh=3, kw=3, s=2),
    "matmul": dict(T="f32", out=0, a=65536, b=0, m=64, k=64, n=64),
}


@pytest.mark.parametrize("name", list(SPEC.instructions))
def test_a_valid_instance_of_every_instruction_breaks_no_rule(name):
    fields = VALID.get(name, {})
    if name not in VALID:  # scalar and control instructions have no rules beyond their field ranges
        assert SPEC.instruction(name).constraints == ()
    assert check_constraints(SPEC, SPEC.insn(name, **fields)) == []


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


@pytest.mark.parametrize("name", [*BINARY, "relu", "vabs", "sigmoid", "tanh"])
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


ALLOWED_DIRECTIONS = {("GMEM", "SMEM"), ("GMEM", "NMEM"), ("GMEM", "WMEM"), ("SMEM", "NMEM"),
                      ("SMEM", "WMEM"), ("NMEM", "WMEM"), ("NMEM", "NMEM")}
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
        assert "dst_space != src_space or dst_space == NMEM" in str(v)
        assert f"{dst_space}->{dst_space}" in str(v)  # the message lists the refused same-space copy


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


@pytest.mark.parametrize(("name", "dt", "cycles"), [("conv", "f16", 1152), ("conv", "f32", 2304),
                                                    ("qconv", "i8", 576)])
def test_conv_timing_is_256_16_bit_macs_per_cycle(name, dt, cycles):
    # 8 x 8 outputs x 32 channels x 3 x 3 x 16 = 294912 MACs
    insn = SPEC.insn(name, T=dt, h=10, w=10, cin=16, cout=32, kh=3, kw=3, s=1)
    assert timing_of(SPEC, insn) == ("tfu", 16, cycles)


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
