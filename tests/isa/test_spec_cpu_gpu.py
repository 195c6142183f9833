"""The real-machine specs isa/specs/x86.toml, arm.toml and cuda.toml: UNIT's tensorized instructions.

Each instruction's semantics must compute what the hardware computes. The executor's results are compared with
hand-written numpy references (integer dot products bit-exactly, including int32 wraparound; floating point
against float64 with a stated tolerance); the LLVM intrinsic each spec names must compile, with LLVM 22 from
llvmlite, to the instruction it models; and where this machine has the instruction, the spec's semantics must
agree with the hardware itself.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
import pytest

import isa
from isa.instance import execute, operand_shape, timing_of
from isa.lang.tree import Access, Binary, Cast, Name, Reduce

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
SPECS = {name: isa.load_isa(name) for name in ("x86", "arm", "cuda")}


# ---------------------------------------------------------------------------------------------- references


def wrap_i32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of exact (int64) values into int32."""
    x = np.asarray(x, dtype=np.int64)
    return ((x - I32_MIN) % 2**32 + I32_MIN).astype(np.int32)


def wrap_u32(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, dtype=np.int64) % 2**32).astype(np.uint32)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) by bit operations; returned as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    keep = (bits >> 16) & 1                      # the last bit bf16 keeps: ties go to where it is 0
    rounded = ((bits + 0x7FFF + keep) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def dot_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, group: int) -> np.ndarray:
    """Exact c[i] + sum_j a[group*i + j] * b[group*i + j] in int64 (wrapped later by the caller)."""
    products = a.astype(np.int64) * b.astype(np.int64)
    return c.astype(np.int64) + products.reshape(len(c), group).sum(axis=1)


JUNK = {np.dtype(np.int32): 0x5A5A5A5A, np.dtype(np.uint32): 0xA5A5A5A5, np.dtype(np.float32): np.nan}


def run(spec_name: str, name: str, **tensors: np.ndarray) -> dict[str, np.ndarray]:
    """Execute instruction ``name``; the result register d, written but not read, starts out as junk."""
    spec = SPECS[spec_name]
    if "d" not in tensors and any(op.name == "d" for op in spec.instruction(name).operands):
        c = tensors["c"]                                 # in these specs d has c's dtype and shape
        tensors = {**tensors, "d": np.full(c.shape, JUNK[c.dtype], c.dtype)}
    return execute(spec, spec.insn(name), tensors)


# ---------------------------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    spec: str
    name: str
    intrinsic: str
    semantics: str                          # str() of the typed semantics
    indices: dict[str, tuple[str, int]]     # index -> (kind, extent)
    operands: dict[str, tuple[str, tuple]]  # operand -> (dtype, shape)
    timing: tuple[str, int, int]            # (unit, latency, cycles)


DOT4 = "d[i] = c[i] + sum(j, {t}(a[4 * i + j]) * {t}(b[4 * i + j]))"
DOT2 = "d[i] = c[i] + sum(j, i32(a[2 * i + j]) * i32(b[2 * i + j]))"
TABLE = [
    Row("x86", "vpdpbusd_512", "llvm.x86.avx512.vpdpbusd.512", DOT4.format(t="i32"),
        {"i": ("spatial", 16), "j": ("reduce", 4)},
        {"a": ("u8", (64,)), "b": ("i8", (64,)), "c": ("i32", (16,)), "d": ("i32", (16,))}, ("port0", 5, 1)),
    Row("x86", "vpdpbusd_256", "llvm.x86.avx512.vpdpbusd.256", DOT4.format(t="i32"),
        {"i": ("spatial", 8), "j": ("reduce", 4)},
        {"a": ("u8", (32,)), "b": ("i8", (32,)), "c": ("i32", (8,)), "d": ("i32", (8,))}, ("port0", 5, 1)),
    Row("x86", "vpmaddwd_512", "llvm.x86.avx512.pmaddw.d.512", DOT2,
        {"i": ("spatial", 16), "j": ("reduce", 2)},
        {"a": ("i16", (32,)), "b": ("i16", (32,)), "c": ("i32", (16,)), "d": ("i32", (16,))},
        ("port0", 6, 1)),
    Row("x86", "vpmaddwd_256", "llvm.x86.avx2.pmadd.wd", DOT2,
        {"i": ("spatial", 8), "j": ("reduce", 2)},
        {"a": ("i16", (16,)), "b": ("i16", (16,)), "c": ("i32", (8,)), "d": ("i32", (8,))}, ("port0", 4, 1)),
    Row("x86", "vdpbf16ps_512", "llvm.x86.avx512bf16.dpbf16ps.512",
        "d[i] = c[i] + sum(j, f32(a[2 * i + j]) * f32(b[2 * i + j]))",
        {"i": ("spatial", 16), "j": ("reduce", 2)},
        {"a": ("bf16", (32,)), "b": ("bf16", (32,)), "c": ("f32", (16,)), "d": ("f32", (16,))},
        ("port0", 6, 1)),
    Row("x86", "vfmadd_ps_512", "llvm.fma.v16f32", "d[i] = f32(f64(a[i]) * f64(b[i]) + f64(c[i]))",
        {"i": ("spatial", 16)},
        {"a": ("f32", (16,)), "b": ("f32", (16,)), "c": ("f32", (16,)), "d": ("f32", (16,))}, ("fma", 4, 1)),
    Row("x86", "vfmadd_ps_256", "llvm.fma.v8f32", "d[i] = f32(f64(a[i]) * f64(b[i]) + f64(c[i]))",
        {"i": ("spatial", 8)},
        {"a": ("f32", (8,)), "b": ("f32", (8,)), "c": ("f32", (8,)), "d": ("f32", (8,))}, ("fma", 4, 1)),
    Row("arm", "sdot_v4i32", "llvm.aarch64.neon.sdot.v4i32.v16i8", DOT4.format(t="i32"),
        {"i": ("spatial", 4), "j": ("reduce", 4)},
        {"a": ("i8", (16,)), "b": ("i8", (16,)), "c": ("i32", (4,)), "d": ("i32", (4,))}, ("simd", 3, 1)),
    Row("arm", "udot_v4i32", "llvm.aarch64.neon.udot.v4i32.v16i8", DOT4.format(t="u32"),
        {"i": ("spatial", 4), "j": ("reduce", 4)},
        {"a": ("u8", (16,)), "b": ("u8", (16,)), "c": ("u32", (4,)), "d": ("u32", (4,))}, ("simd", 3, 1)),
    Row("arm", "sdot_v2i32", "llvm.aarch64.neon.sdot.v2i32.v8i8", DOT4.format(t="i32"),
        {"i": ("spatial", 2), "j": ("reduce", 4)},
        {"a": ("i8", (8,)), "b": ("i8", (8,)), "c": ("i32", (2,)), "d": ("i32", (2,))}, ("simd", 3, 1)),
    Row("arm", "udot_v2i32", "llvm.aarch64.neon.udot.v2i32.v8i8", DOT4.format(t="u32"),
        {"i": ("spatial", 2), "j": ("reduce", 4)},
        {"a": ("u8", (8,)), "b": ("u8", (8,)), "c": ("u32", (2,)), "d": ("u32", (2,))}, ("simd", 3, 1)),
    Row("cuda", "wmma_m16n16k16_f16_f32", "llvm.nvvm.wmma.m16n16k16.mma.row.row.f32.f32",
        "c[i, j] += sum(k, f32(a[i, k]) * f32(b[k, j]))",
        {"i": ("spatial", 16), "j": ("spatial", 16), "k": ("reduce", 16)},
        {"a": ("f16", (16, 16)), "b": ("f16", (16, 16)), "c": ("f32", (16, 16))}, ("tensorcore", 64, 32)),
    Row("cuda", "wmma_m16n16k16_f16_f16", "llvm.nvvm.wmma.m16n16k16.mma.row.row.f16.f16",
        "c[i, j] = f16(f32(c[i, j]) + sum(k, f32(a[i, k]) * f32(b[k, j])))",
        {"i": ("spatial", 16), "j": ("spatial", 16), "k": ("reduce", 16)},
        {"a": ("f16", (16, 16)), "b": ("f16", (16, 16)), "c": ("f16", (16, 16))}, ("tensorcore", 64, 32)),
]
ROW_IDS = [r.name for r in TABLE]


def test_the_table_covers_every_instruction_of_the_three_specs_that_calls_an_llvm_intrinsic() -> None:
    listed = {(r.spec, r.name) for r in TABLE}
    shipped = {(s, n) for s, spec in SPECS.items() for n, i in spec.instructions.items()
               if i.intrinsic.startswith("llvm.")}
    assert listed == shipped


def test_the_warpgroup_instructions_are_ptx_reading_shared_operands_on_sm_90a_only() -> None:
    """Hopper's wgmma.mma_async has no LLVM intrinsic: the spec names the PTX instruction, which the NVPTX
    backend emits inline; a and b are shared-memory tensors, c the warpgroup's 128 threads' registers."""
    warpgroup = {n: i for n, i in SPECS["cuda"].instructions.items() if not i.intrinsic.startswith("llvm.")}
    assert set(warpgroup) == {"wgmma_m64n256k16_f16_f32", "wgmma_m64n128k16_f16_f32"}
    for name, instr in warpgroup.items():
        n = int(name.split("n")[1].split("k")[0])
        assert instr.intrinsic == f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16"
        assert instr.threads == 128 and instr.features == (("sm_90a",),) and instr.group == "wgmma"
        assert [(op.name, op.kind) for op in instr.operands] == [("a", "tensor"), ("b", "tensor"),
                                                                   ("c", "register")]
        assert str(instr.typed_semantics()) == "c[i, j] += sum(k, f32(a[i, k]) * f32(b[k, j]))"
        insn = SPECS["cuda"].insn(name)
        assert operand_shape(SPECS["cuda"], insn, "b") == (16, n)
        assert timing_of(SPECS["cuda"], insn) == ("tensorcore", 128 if n == 256 else 96, n // 2)


@pytest.mark.parametrize("spec_name", sorted(SPECS))
def test_real_isas_have_register_operands_and_no_encodings(spec_name: str) -> None:
    spec = SPECS[spec_name]
    assert spec.name == spec_name and spec.summary
    assert spec.insn_bits is None and not spec.formats and not spec.spaces
    for instr in spec.instructions.values():
        assert instr.format is None and instr.fields == () and instr.types == {}
        assert instr.summary and instr.doc and instr.group
        for op in instr.operands:
            # a warpgroup instruction's factors are in shared memory (descriptors), with no space or address
            kind = "tensor" if instr.threads == 128 and op.name != "c" else "register"
            assert op.kind == kind and op.space is None and op.addr is None, (instr.name, op.name)


@pytest.mark.parametrize("row", TABLE, ids=ROW_IDS)
def test_instruction_intrinsic_operands_indices_semantics_and_timing(row: Row) -> None:
    spec = SPECS[row.spec]
    instr = spec.instruction(row.name)
    insn = spec.insn(row.name)
    assert instr.intrinsic == row.intrinsic
    sem = instr.typed_semantics()
    assert str(sem) == row.semantics
    assert {iv.name: (iv.kind, int(str(iv.extent))) for iv in sem.indices} == row.indices
    got = {op.name: (op.dtype, operand_shape(spec, insn, op.name)) for op in instr.operands}
    assert got == row.operands
    assert timing_of(spec, insn) == row.timing


@pytest.mark.parametrize("row", [r for r in TABLE if r.spec != "cuda" and not r.name.startswith("vfmadd")],
                         ids=lambda r: r.name)
def test_dot_products_are_a_sum_of_products_of_widened_bytes_added_to_c(row: Row) -> None:
    """UNIT's Inspector matches this tree: d[i] = c[i] + sum(j, acc(a[G*i + j]) * acc(b[G*i + j]))."""
    sem = SPECS[row.spec].instruction(row.name).typed_semantics()
    acc = row.operands["d"][0]
    group = row.indices["j"][1]
    (stmt,) = sem.statements
    assert (stmt.target.tensor, stmt.op, stmt.target.indices) == ("d", "=", (Name("i", "index", "int"),))
    assert sem.reads == ("c", "a", "b") and sem.writes == ("d",)
    add = stmt.value
    assert isinstance(add, Binary) and add.op == "+" and add.dtype == acc
    assert isinstance(add.lhs, Access) and add.lhs.tensor == "c"
    red = add.rhs
    assert isinstance(red, Reduce) and (red.op, red.axes, red.dtype) == ("sum", ("j",), acc)
    mul = red.body
    assert isinstance(mul, Binary) and mul.op == "*" and mul.dtype == acc
    for side, tensor in ((mul.lhs, "a"), (mul.rhs, "b")):
        assert isinstance(side, Cast) and side.dtype == acc
        load = side.value
        assert isinstance(load, Access) and load.tensor == tensor and load.dtype == row.operands[tensor][0]
        assert str(load) == f"{tensor}[{group} * i + j]"


def test_tensor_core_accumulates_in_place() -> None:
    """UNIT: the Tensor Core's accumulator is opaque, so c is both read and written (c += ...)."""
    sem = SPECS["cuda"].instruction("wmma_m16n16k16_f16_f32").typed_semantics()
    (stmt,) = sem.statements
    assert stmt.op == "+=" and stmt.target.tensor == "c"
    assert set(sem.reads) == {"a", "b", "c"} and sem.writes == ("c",)
    assert isinstance(stmt.value, Reduce) and stmt.value.axes == ("k",)
    assert "nvcuda::wmma::mma_sync" in SPECS["cuda"].instruction("wmma_m16n16k16_f16_f32").doc


def test_arm_spec_mentions_the_aarch32_name_unit_printed() -> None:
    assert "arm.neon.sdot.v4i32.v16i8" in SPECS["arm"].instruction("sdot_v4i32").doc


# ---------------------------------------------------------------------------------------------- integer dots


def int_cases(rng: np.random.Generator, lanes: int, a_range: tuple[int, int], b_range: tuple[int, int],
              a_dt, b_dt, c_dt, group: int = 4) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Random inputs plus every combination of extremes (products and sums that overflow the accumulator)."""
    n = group * lanes
    cinfo = np.iinfo(c_dt)
    cases = [(rng.integers(*a_range, n, endpoint=True).astype(a_dt),
              rng.integers(*b_range, n, endpoint=True).astype(b_dt),
              rng.integers(cinfo.min, cinfo.max, lanes, endpoint=True).astype(c_dt)) for _ in range(20)]
    for a in a_range:
        for b in b_range:
            for c in (cinfo.min, cinfo.max, 0):
                cases.append((np.full(n, a, a_dt), np.full(n, b, b_dt), np.full(lanes, c, c_dt)))
    return cases


@pytest.mark.parametrize(("name", "lanes"), [("vpdpbusd_512", 16), ("vpdpbusd_256", 8)])
def test_vpdpbusd_matches_numpy_and_wraps_at_int32(name: str, lanes: int) -> None:
    rng = np.random.default_rng(1)
    wrapped = 0
    for a, b, c in int_cases(rng, lanes, (0, 255), (-128, 127), np.uint8, np.int8, np.int32):
        exact = dot_reference(a, b, c, 4)
        out = run("x86", name, a=a, b=b, c=c)
        assert set(out) == {"d"} and out["d"].dtype == np.int32
        assert np.array_equal(out["d"], wrap_i32(exact)), (a, b, c)
        wrapped += int(np.any((exact < I32_MIN) | (exact > I32_MAX)))
    assert wrapped >= 2  # the extremes overflow int32: 2**31 - 1 + 4 * 255 * 127 wraps to a negative number


def test_vpdpbusd_reads_a_as_unsigned_and_b_as_signed_bytes() -> None:
    a = np.tile(np.array([255, 1, 2, 3], np.uint8), 16)
    b = np.tile(np.array([1, -1, 2, -128], np.int8), 16)
    c = np.arange(16, dtype=np.int32)
    d = run("x86", "vpdpbusd_512", a=a, b=b, c=c)["d"]
    assert np.array_equal(d, c + (255 - 1 + 4 - 384))   # 255 * 1 + 1 * -1 + 2 * 2 + 3 * -128 = -126


def test_vpdpbusd_lane_i_uses_bytes_4i_to_4i_plus_3() -> None:
    a = np.zeros(64, np.uint8)
    a[4 * 5 + 2] = 7                                     # lane 5, j = 2
    b = np.full(64, 3, np.int8)
    d = run("x86", "vpdpbusd_512", a=a, b=b, c=np.zeros(16, np.int32))["d"]
    assert np.array_equal(d, np.where(np.arange(16) == 5, 21, 0))


@pytest.mark.parametrize(("name", "lanes"), [("vpmaddwd_512", 16), ("vpmaddwd_256", 8)])
def test_vpmaddwd_matches_numpy_and_wraps_at_int32(name: str, lanes: int) -> None:
    rng = np.random.default_rng(11)
    wrapped = 0
    for a, b, c in int_cases(rng, lanes, (-32768, 32767), (-32768, 32767), np.int16, np.int16, np.int32, 2):
        exact = dot_reference(a, b, c, 2)
        assert np.array_equal(run("x86", name, a=a, b=b, c=c)["d"], wrap_i32(exact)), (a, b, c)
        wrapped += int(np.any((exact < I32_MIN) | (exact > I32_MAX)))
    assert wrapped >= 2


def test_vpmaddwd_takes_no_accumulator_its_result_is_added_to_c() -> None:
    """LLVM's pmadd.wd returns the pair sums only: the spec says which operand the backend adds them to."""
    for name in ("vpmaddwd_512", "vpmaddwd_256"):
        instr = SPECS["x86"].instruction(name)
        assert instr.intrinsic_args == ("a", "b") and instr.intrinsic_accumulator == "c"
    assert SPECS["x86"].instruction("vpdpbusd_512").intrinsic_accumulator is None


@pytest.mark.parametrize(("name", "lanes"), [("sdot_v4i32", 4), ("sdot_v2i32", 2)])
def test_sdot_matches_numpy_and_wraps_at_int32(name: str, lanes: int) -> None:
    rng = np.random.default_rng(2)
    wrapped = 0
    for a, b, c in int_cases(rng, lanes, (-128, 127), (-128, 127), np.int8, np.int8, np.int32):
        exact = dot_reference(a, b, c, 4)
        d = run("arm", name, a=a, b=b, c=c)["d"]
        assert d.dtype == np.int32 and np.array_equal(d, wrap_i32(exact)), (a, b, c)
        wrapped += int(np.any((exact < I32_MIN) | (exact > I32_MAX)))
    assert wrapped >= 4  # e.g. 2**31 - 1 + 4 * (-128) * (-128)


@pytest.mark.parametrize(("name", "lanes"), [("udot_v4i32", 4), ("udot_v2i32", 2)])
def test_udot_matches_numpy_and_wraps_at_uint32(name: str, lanes: int) -> None:
    rng = np.random.default_rng(3)
    wrapped = 0
    for a, b, c in int_cases(rng, lanes, (0, 255), (0, 255), np.uint8, np.uint8, np.uint32):
        exact = dot_reference(a, b, c, 4)
        d = run("arm", name, a=a, b=b, c=c)["d"]
        assert d.dtype == np.uint32 and np.array_equal(d, wrap_u32(exact)), (a, b, c)
        wrapped += int(np.any(exact > 2**32 - 1))
    assert wrapped >= 1  # 2**32 - 1 + 4 * 255 * 255


def test_sdot_reads_both_operands_as_signed_and_udot_as_unsigned() -> None:
    a = np.full(16, -1, np.int8)
    b = np.full(16, -128, np.int8)
    d = run("arm", "sdot_v4i32", a=a, b=b, c=np.zeros(4, np.int32))["d"]
    assert np.array_equal(d, np.full(4, 512, np.int32))
    d = run("arm", "udot_v4i32", a=a.view(np.uint8), b=b.view(np.uint8), c=np.zeros(4, np.uint32))["d"]
    assert np.array_equal(d, np.full(4, 4 * 255 * 128, np.uint32))


# --------------------------------------------------------------------------------------------- floating point


def test_vdpbf16ps_matches_a_float64_reference() -> None:
    rng = np.random.default_rng(4)
    # bf16 has an 8-bit significand: round the inputs first, so they are what a bf16 register can hold
    a = to_bf16(rng.normal(0.0, 4.0, 32).astype(np.float32))
    b = to_bf16(rng.normal(0.0, 4.0, 32).astype(np.float32))
    a[:4] = [0.0, -0.0, 3.0e38, -1.0e-30]                # zeros, near the largest bf16, a tiny one
    b[:4] = [5.0, 1.0, 0.5, 2.0]
    a, b = to_bf16(a), to_bf16(b)
    assert not np.any(a.view(np.uint32) & 0xFFFF) and not np.any(b.view(np.uint32) & 0xFFFF)
    c = rng.normal(0.0, 100.0, 16).astype(np.float32)
    d = run("x86", "vdpbf16ps_512", a=a, b=b, c=c)["d"]
    pairs = (a.astype(np.float64) * b.astype(np.float64)).reshape(16, 2)
    expected = c.astype(np.float64) + pairs.sum(axis=1)
    # products of bf16 values are exact in f32; the two fp32 additions each round by at most half an ulp
    scale = np.abs(c.astype(np.float64)) + np.abs(pairs).sum(axis=1)
    assert d.dtype == np.float32
    assert np.all(np.abs(d - expected) <= 2.0**-23 * scale), d - expected


def test_vdpbf16ps_pairs_lane_i_with_elements_2i_and_2i_plus_1() -> None:
    a = np.arange(32, dtype=np.float32)                  # small integers are exact in bf16
    b = np.ones(32, np.float32)
    d = run("x86", "vdpbf16ps_512", a=a, b=b, c=np.full(16, 0.5, np.float32))["d"]
    assert np.array_equal(d, np.arange(16) * 4 + 1 + 0.5)


def test_vfmadd_matches_float64_rounded_once_to_float32() -> None:
    rng = np.random.default_rng(5)
    for scale in (1.0, 1.0e-20, 1.0e20):                # tiny products become f32 subnormals, huge ones inf
        a, b, c = (rng.normal(0.0, scale, 16).astype(np.float32) for _ in range(3))
        d = run("x86", "vfmadd_ps_512", a=a, b=b, c=c)["d"]
        with np.errstate(over="ignore"):
            expected = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)
        assert d.dtype == np.float32 and np.array_equal(d, expected)


def test_vfmadd_is_fused_the_product_is_not_rounded() -> None:
    x = np.float32(1 + 2.0**-12)
    a = np.full(16, x, np.float32)
    c = np.full(16, -(1 + 2.0**-11), np.float32)
    # x * x = 1 + 2**-11 + 2**-24: rounded to f32 first it would lose the 2**-24 and the sum would be 0
    assert np.float32(x * x) + c[0] == 0.0
    d = run("x86", "vfmadd_ps_512", a=a, b=a, c=c)["d"]
    assert np.array_equal(d, np.full(16, 2.0**-24, np.float32))


def test_wmma_f32_accumulator_matches_a_float64_matmul() -> None:
    rng = np.random.default_rng(6)
    a = rng.uniform(-2.0, 2.0, (16, 16)).astype(np.float16)
    b = rng.uniform(-2.0, 2.0, (16, 16)).astype(np.float16)
    a[0, :] = np.float16(65504.0)                          # the largest f16: the products still fit in f32
    b[:, 0] = np.float16(-6.0e-8)                          # the smallest f16 subnormal, about 2**-24
    c = rng.normal(0.0, 10.0, (16, 16)).astype(np.float32)
    before = c.copy()
    out = run("cuda", "wmma_m16n16k16_f16_f32", a=a, b=b, c=c)
    assert set(out) == {"c"} and out["c"].dtype == np.float32
    assert np.array_equal(c, before)                       # execute returns the new c, the input is untouched
    expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(c.astype(np.float64)) + np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    # 16 additions in f32, each rounding by at most half an ulp of a partial sum bounded by scale
    assert np.all(np.abs(out["c"] - expected) <= 16 * 2.0**-24 * scale)


def test_wmma_f16_accumulator_matches_a_float64_matmul_rounded_to_f16() -> None:
    rng = np.random.default_rng(7)
    a = rng.uniform(-1.0, 1.0, (16, 16)).astype(np.float16)
    b = rng.uniform(-1.0, 1.0, (16, 16)).astype(np.float16)
    c = rng.uniform(-8.0, 8.0, (16, 16)).astype(np.float16)
    got = run("cuda", "wmma_m16n16k16_f16_f16", a=a, b=b, c=c)["c"]
    exact = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    assert got.dtype == np.float16
    # the f32 sum is within 16 * 2**-24 relative of exact; the final f16 rounding is within one f16 ulp
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= ulp), got.astype(np.float64) - exact


# ---------------------------------------------------------------------------------------------- LLVM 22


H2 = "<2 x half>"
# (target triple, CPU, argument types in LLVM's operand order, return type, the mnemonic LLVM must emit)
LLVM_TARGETS = {
    "vpdpbusd_512": ("x86_64-unknown-linux-gnu", "znver4", ["<16 x i32>", "<64 x i8>", "<64 x i8>"],
                     "<16 x i32>", "vpdpbusd\t%zmm"),
    "vpdpbusd_256": ("x86_64-unknown-linux-gnu", "znver4", ["<8 x i32>", "<32 x i8>", "<32 x i8>"],
                     "<8 x i32>", "vpdpbusd\t%ymm"),
    "vpmaddwd_512": ("x86_64-unknown-linux-gnu", "znver4", ["<32 x i16>", "<32 x i16>"], "<16 x i32>",
                     "vpmaddwd\t%zmm"),
    "vpmaddwd_256": ("x86_64-unknown-linux-gnu", "znver3", ["<16 x i16>", "<16 x i16>"], "<8 x i32>",
                     "vpmaddwd\t%ymm"),
    "vdpbf16ps_512": ("x86_64-unknown-linux-gnu", "znver4",
                      ["<16 x float>", "<32 x bfloat>", "<32 x bfloat>"], "<16 x float>", "vdpbf16ps\t%zmm"),
    "vfmadd_ps_512": ("x86_64-unknown-linux-gnu", "znver4", ["<16 x float>"] * 3, "<16 x float>",
                      "vfmadd213ps\t%zmm"),
    "vfmadd_ps_256": ("x86_64-unknown-linux-gnu", "znver3", ["<8 x float>"] * 3, "<8 x float>",
                      "vfmadd213ps\t%ymm"),
    "sdot_v4i32": ("aarch64-unknown-linux-gnu", "neoverse-n1", ["<4 x i32>", "<16 x i8>", "<16 x i8>"],
                   "<4 x i32>", "sdot\tv0.4s, v1.16b, v2.16b"),
    "udot_v4i32": ("aarch64-unknown-linux-gnu", "neoverse-n1", ["<4 x i32>", "<16 x i8>", "<16 x i8>"],
                   "<4 x i32>", "udot\tv0.4s, v1.16b, v2.16b"),
    "sdot_v2i32": ("aarch64-unknown-linux-gnu", "neoverse-n1", ["<2 x i32>", "<8 x i8>", "<8 x i8>"],
                   "<2 x i32>", "sdot\tv0.2s, v1.8b, v2.8b"),
    "udot_v2i32": ("aarch64-unknown-linux-gnu", "neoverse-n1", ["<2 x i32>", "<8 x i8>", "<8 x i8>"],
                   "<2 x i32>", "udot\tv0.2s, v1.8b, v2.8b"),
    # per-thread fragments: a and b are 8 x <2 x half> each; an f32 accumulator is 8 floats, an f16 one
    # 4 x <2 x half>
    "wmma_m16n16k16_f16_f32": ("nvptx64-nvidia-cuda", "sm_70", [H2] * 16 + ["float"] * 8,
                               "{" + ", ".join(["float"] * 8) + "}",
                               "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32"),
    "wmma_m16n16k16_f16_f16": ("nvptx64-nvidia-cuda", "sm_70", [H2] * 20, "{" + ", ".join([H2] * 4) + "}",
                               "wmma.mma.sync.aligned.row.row.m16n16k16.f16.f16"),
}


def call_ir(intrinsic: str, arg_types: list[str], ret: str) -> str:
    """A module whose function @f passes its arguments to ``intrinsic`` and returns (part of) its result."""
    params = ", ".join(f"{t} %x{k}" for k, t in enumerate(arg_types))
    call = f"  %r = call {ret} @{intrinsic}({params})\n"
    if ret.startswith("{"):                          # a struct of fragment registers: return the first one
        first = ret[1:-1].split(", ")[0]
        body, ret_f = f"{call}  %e = extractvalue {ret} %r, 0\n  ret {first} %e", first
    else:
        body, ret_f = f"{call}  ret {ret} %r", ret
    return f"declare {ret} @{intrinsic}({', '.join(arg_types)})\ndefine {ret_f} @f({params}) {{\n{body}\n}}\n"


@pytest.mark.parametrize("row", TABLE, ids=ROW_IDS)
def test_llvm_22_compiles_the_intrinsic_to_the_instruction(row: Row) -> None:
    triple, cpu, arg_types, ret, mnemonic = LLVM_TARGETS[row.name]
    intrinsic = SPECS[row.spec].instruction(row.name).intrinsic
    module = llvm.parse_assembly(call_ir(intrinsic, arg_types, ret))
    module.triple = triple
    module.verify()
    features = "+ptx64" if triple.startswith("nvptx") else ""   # PTX 6.4 spells wmma.mma.sync.aligned
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2)
    assert mnemonic in machine.emit_assembly(module)


# ---------------------------------------------------------------------------------------------- this machine


llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(",")) \
    if llvm.get_process_triple().startswith("x86_64") else set()
NEEDS = {"vpdpbusd_512": {"+avx512vnni"}, "vpdpbusd_256": {"+avx512vnni", "+avx512vl"},
         "vdpbf16ps_512": {"+avx512bf16"}, "vfmadd_ps_512": {"+avx512f"}, "vpmaddwd_512": {"+avx512bw"},
         "vpmaddwd_256": {"+avx2"}, "vfmadd_ps_256": {"+fma"}}


def on_this_cpu(name: str, ir_types: tuple[str, str, str, str], order: str, d: np.ndarray,
                args: dict[str, np.ndarray]) -> np.ndarray:
    """Run the intrinsic of x86 instruction ``name`` once on this CPU (JIT-compiled by llvmlite)."""
    intrinsic = SPECS["x86"].instruction(name).intrinsic
    td, *targs = ir_types
    loads = "\n".join(f"  %{n} = load {t}, ptr %p{n}, align 1" for n, t in zip(order, targs, strict=True))
    call_args = ", ".join(f"{t} %{n}" for n, t in zip(order, targs, strict=True))
    ir = (f"declare {td} @{intrinsic}({', '.join(targs)})\n"
          f"define void @run(ptr %pd, {', '.join(f'ptr %p{n}' for n in order)}) {{\n{loads}\n"
          f"  %r = call {td} @{intrinsic}({call_args})\n"
          f"  store {td} %r, ptr %pd, align 1\n  ret void\n}}\n")
    module = llvm.parse_assembly(ir)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (1 + len(order)))(engine.get_function_address("run"))
    buffers = [np.ascontiguousarray(args[n]) for n in order]
    fn(d.ctypes.data, *[buf.ctypes.data for buf in buffers])
    return d


def needs(name: str):
    missing = NEEDS[name] - HOST_FEATURES
    return pytest.mark.skipif(bool(missing), reason=f"this CPU lacks {', '.join(sorted(missing))}")


@pytest.mark.parametrize(("name", "lanes"), [pytest.param("vpdpbusd_512", 16, marks=needs("vpdpbusd_512")),
                                             pytest.param("vpdpbusd_256", 8, marks=needs("vpdpbusd_256"))])
def test_vpdpbusd_semantics_equal_this_cpu_bit_for_bit(name: str, lanes: int) -> None:
    rng = np.random.default_rng(8)
    types = (f"<{lanes} x i32>", f"<{lanes} x i32>", f"<{4 * lanes} x i8>", f"<{4 * lanes} x i8>")
    for a, b, c in int_cases(rng, lanes, (0, 255), (-128, 127), np.uint8, np.int8, np.int32):
        hw = on_this_cpu(name, types, "cab", np.zeros(lanes, np.int32), {"a": a, "b": b, "c": c})
        assert np.array_equal(run("x86", name, a=a, b=b, c=c)["d"], hw), (a, b, c)


@pytest.mark.parametrize(("name", "lanes"), [pytest.param("vpmaddwd_512", 16, marks=needs("vpmaddwd_512")),
                                             pytest.param("vpmaddwd_256", 8, marks=needs("vpmaddwd_256"))])
def test_vpmaddwd_semantics_equal_this_cpu_plus_c_bit_for_bit(name: str, lanes: int) -> None:
    """The intrinsic's pair sums plus c (the add the backend emits) are the spec's d, wraparound included."""
    rng = np.random.default_rng(12)
    types = (f"<{lanes} x i32>", f"<{2 * lanes} x i16>", f"<{2 * lanes} x i16>")
    for a, b, c in int_cases(rng, lanes, (-32768, 32767), (-32768, 32767), np.int16, np.int16, np.int32, 2):
        sums = on_this_cpu(name, types, "ab", np.zeros(lanes, np.int32), {"a": a, "b": b})
        hw = wrap_i32(c.astype(np.int64) + sums)
        assert np.array_equal(run("x86", name, a=a, b=b, c=c)["d"], hw), (a, b, c)


@pytest.mark.parametrize(("name", "lanes"), [pytest.param("vfmadd_ps_512", 16, marks=needs("vfmadd_ps_512")),
                                             pytest.param("vfmadd_ps_256", 8, marks=needs("vfmadd_ps_256"))])
def test_vfmadd_semantics_equal_this_cpu_bit_for_bit(name: str, lanes: int) -> None:
    rng = np.random.default_rng(9)
    x = np.float32(1 + 2.0**-12)
    cases = [(np.full(lanes, x, np.float32), np.full(lanes, x, np.float32),
              np.full(lanes, -(1 + 2.0**-11), np.float32))]
    cases += [tuple(rng.normal(0.0, s, lanes).astype(np.float32) for _ in range(3))
              for s in (1.0, 1e-20, 1e20)]
    for a, b, c in cases:
        hw = on_this_cpu(name, (f"<{lanes} x float>",) * 4, "abc", np.zeros(lanes, np.float32),
                         {"a": a, "b": b, "c": c})
        assert np.array_equal(run("x86", name, a=a, b=b, c=c)["d"], hw)


@needs("vdpbf16ps_512")
def test_vdpbf16ps_semantics_agree_with_this_cpu_to_an_ulp() -> None:
    """The hardware adds the odd product, then the even one, to c; the spec adds the products first."""
    rng = np.random.default_rng(10)
    a = to_bf16(rng.normal(0.0, 4.0, 32).astype(np.float32))
    b = to_bf16(rng.normal(0.0, 4.0, 32).astype(np.float32))
    c = rng.normal(0.0, 100.0, 16).astype(np.float32)
    bits = {k: (v.view(np.uint32) >> 16).astype(np.uint16) for k, v in (("a", a), ("b", b))}
    types = ("<16 x float>", "<16 x float>", "<32 x bfloat>", "<32 x bfloat>")
    hw = on_this_cpu("vdpbf16ps_512", types, "cab", np.zeros(16, np.float32), {**bits, "c": c})
    d = run("x86", "vdpbf16ps_512", a=a, b=b, c=c)["d"]
    scale = np.abs(c) + np.abs(a * b).reshape(16, 2).sum(axis=1)
    assert np.all(np.abs(d.astype(np.float64) - hw) <= 2.0**-23 * scale)
