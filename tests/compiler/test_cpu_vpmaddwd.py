"""Integer operators on vpmaddwd (isa/specs/x86.toml), the dot product of x86 CPUs without VNNI.

``compiler.ops.cpu.packings`` lists every instruction that sums an operator's products exactly into int32
lanes: the spec's vpdpbusd for u8 x s8 first, then vpmaddwd, whose int16 operands hold u8 and s8 values (the
packing widens them). Its LLVM intrinsic takes no accumulator: the spec's ``intrinsic_accumulator`` says the
backend adds its result to c. Each compiled kernel equals numpy bit for bit, and every pass of the pipeline
keeps the interpreted result (the interpreter runs each instruction by its spec semantics).
"""

from __future__ import annotations

import numpy as np
import pytest

import isa
from compiler.backend.llvm import build
from compiler.backend.llvm_operands import host_features
from compiler.backend.llvm_probe import measure_instruction_peak
from compiler.errors import CodegenError, ScheduleError
from compiler.ir import TensorInsn
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import reference
from compiler.ops.cpu import (
    CpuTuning,
    conv2d,
    gemm,
    pack_conv,
    pack_gemm,
    packing,
    packings,
    unpack_conv,
    unpack_gemm,
)
from compiler.ops.nn import ConvShape
from compiler.pipeline import compile_func, passes_for
from compiler.target import Target
from compiler.testing import assert_same_results

X86 = isa.load_isa("x86")
TARGET = Target("cpu", X86)
needs_avx2 = pytest.mark.skipif("avx2" not in host_features(), reason="this CPU has no AVX2")
RANGES = {"uint8": ((0, 255), (-128, 127)), "int8": ((-128, 127), (-128, 127)),
          "int16": ((-32768, 32767), (-32768, 32767))}
NUMPY = {"uint8": (np.uint8, np.int8), "int8": (np.int8, np.int8), "int16": (np.int16, np.int16)}


def compiled(sched):
    return compile_func(lower(sched.schedule, sched.args), TARGET)


def tensor_instructions(func) -> list[str]:
    found: list[str] = []
    post_order_visit(func.body, lambda n: found.append(n.name) if isinstance(n, TensorInsn) else None)
    return found


def operands(dtype: str, *shapes: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(lo, hi, shape, endpoint=True).astype(t)
            for (lo, hi), t, shape in zip(RANGES[dtype], NUMPY[dtype], shapes, strict=True)]


def test_the_exact_instruction_comes_first_then_those_whose_wider_operands_hold_the_products() -> None:
    assert [pk.instruction for pk in packings("uint8", X86)] == \
        ["vpdpbusd_512", "vpdpbusd_256", "vpmaddwd_512", "vpmaddwd_256"]
    widened = packing("x86-vnni", "uint8", X86, "vpmaddwd_256")
    assert (widened.data, widened.weight, widened.lanes, widened.group) == ("int16", "int16", 8, 2)
    assert [pk.instruction for pk in packings("int8", X86)] == ["vpmaddwd_512", "vpmaddwd_256"]
    assert packings("float32", X86) == []
    # an instruction whose operands cannot hold the values is no candidate: AArch64's udot (u8 x u8 -> u32)
    assert packings("uint8", isa.load_isa("arm")) == []


@pytest.mark.parametrize(("instruction", "match"), [
    ("vfmadd_ps_512", "vfmadd_ps_512 does not sum uint8 x int8 products into int32 register lanes"),
    ("vpdpbusdx", "has no instruction 'vpdpbusdx'"),
])
def test_an_instruction_that_does_not_sum_the_products_is_refused_by_name(instruction: str, match: str
                                                                           ) -> None:
    with pytest.raises(ScheduleError, match=match):
        packing("x86-vnni", "uint8", X86, instruction)


def test_every_pass_keeps_the_result_of_a_widened_conv() -> None:
    sched = conv2d(ConvShape(6, 7, 6, 20, 3, 1, 1), "x86-vnni", CpuTuning(3, 2, 3), spec=X86,
                   instruction="vpmaddwd_256")
    func = lower(sched.schedule, sched.args)
    for p in passes_for("cpu"):
        after = p(func, TARGET)
        assert_same_results(func, after, p.name, seeds=2)
        func = after
    assert set(tensor_instructions(func)) == {"vpmaddwd_256"}


@needs_avx2
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
@pytest.mark.parametrize("layer", [ConvShape(14, 14, 64, 32, 3, 1, 1), ConvShape(9, 9, 5, 20, 3, 2, 0),
                                   ConvShape(8, 6, 3, 5, 1, 1, 0)], ids=str)
def test_a_conv_on_vpmaddwd_equals_numpy_bit_for_bit(layer: ConvShape, dtype: str) -> None:
    sched = conv2d(layer, "x86-vnni", CpuTuning(2, 2, 4), spec=X86, dtype=dtype, instruction="vpmaddwd_256")
    func = compiled(sched)
    assert set(tensor_instructions(func)) == {"vpmaddwd_256"}
    data, kernel = operands(dtype, (1, layer.ic, layer.h, layer.w), (layer.oc, layer.ic, layer.k, layer.k))
    packed = pack_conv(data, kernel, layer, sched.packing)
    assert packed[0].dtype == np.int16 and packed[1].dtype == np.int16
    out = np.zeros(sched.args[2].shape, np.int32)
    build(func)(*packed, out)
    want = reference.conv2d(data, kernel, layer.s, layer.p)
    np.testing.assert_array_equal(unpack_conv(out, layer), want.astype(np.int32))


@needs_avx2
def test_sums_that_wrap_at_int32_wrap_as_numpy_says() -> None:
    """int16 extremes: 2 x (-32768)^2 per pair, 64 pairs a lane: the int32 sums wrap (vpaddd), exactly as the
    reference wrapped to int32."""
    m, n, k = 3, 16, 128
    a, b = np.full((m, k), -32768, np.int16), np.full((n, k), -32768, np.int16)
    sched = gemm(m, n, k, "x86-vnni", CpuTuning(1, 1, 1), spec=X86, dtype="int16", instruction="vpmaddwd_256")
    out = np.zeros(sched.args[2].shape, np.int32)
    build(compiled(sched))(*pack_gemm(a, b, sched.packing), out)
    exact = reference.dense(a, b)
    assert np.any(exact > np.iinfo(np.int32).max)
    np.testing.assert_array_equal(unpack_gemm(out, n), exact.astype(np.int32))


@needs_avx2
def test_the_peak_of_an_instruction_is_measured_from_its_spec_alone() -> None:
    """16 multiply-adds a vpmaddwd_256, on one thread and on two at once (each thread its own loop; on a
    loaded machine two may read no more than one)."""
    one = measure_instruction_peak(X86, "vpmaddwd_256", 1)
    two = measure_instruction_peak(X86, "vpmaddwd_256", 2)
    assert one > 10 and two > 0.5 * one


def test_an_instruction_that_cannot_be_measured_says_why() -> None:
    with pytest.raises(CodegenError, match="vdpbf16ps_512 names no LLVM intrinsic with its arguments"):
        measure_instruction_peak(X86, "vdpbf16ps_512")
    if "avx512vnni" not in host_features():
        with pytest.raises(CodegenError, match=r"lacks the features of vpdpbusd_512 \(avx512vnni\)"):
            measure_instruction_peak(X86, "vpdpbusd_512")
