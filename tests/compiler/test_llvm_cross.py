"""The arm target (issue 22, item 4): UNIT's GEMM and conv2d tensorized onto the arm spec's sdot and compiled
by LLVM for AArch64 (compiler/backend/llvm_cross.py), checked without an ARM machine.

The assembly is inspected: sdot on whole q registers in the kernel's inner loop, as many per iteration as the
schedule's tile has accumulators, nothing of x86 in it; the loop IR the code is compiled from (after
tensorize) is run by the reference interpreter and compared with numpy bit for bit. Running the code itself
under qemu-aarch64 is tests/compiler/test_llvm_qemu.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import isa
from compiler import interp
from compiler.analysis.issued import issued_instructions
from compiler.backend.llvm_cross import cross_build, function_assembly, needed_features
from compiler.errors import CodegenError, ScheduleError
from compiler.lower import lower
from compiler.ops import cpu
from compiler.ops.nn import ConvShape, GemmShape
from compiler.pipeline import compile_func
from compiler.target import Target
from isa.loader import SPECS_DIR
from tandem.flows import cpu_layers
from tandem.flows.cpu_layers import CpuOptions, Layer

ARM = isa.load_isa("arm")
TARGET = Target("arm", ARM)
SDOT_Q = re.compile(r"^\s*sdot\s+v\d+\.4s, v\d+\.16b, v\d+\.16b$", re.MULTILINE)
X86 = re.compile(r"%[a-z]|[xyz]mm\d|vpdpbusd|avx|\bvp[a-z]+", re.IGNORECASE)
S8 = CpuOptions("int8")   # sdot's s8 x s8


def compiled(layer: Layer, tuning: cpu.CpuTuning | None = None, target: Target = TARGET):
    """The int8 layer's schedule, its loop IR after the arm pipeline, and the object for AArch64."""
    sched = cpu_layers.schedule(layer, "arm-dot", tuning or cpu.CpuTuning(), target, S8)
    func = compile_func(lower(sched.schedule, sched.args), target)
    return sched, func, cross_build(func, target.triple)


def loops(asm: str) -> dict[str, str]:
    """Each loop of the assembly that is one block: its label, and its text up to the branch back to it."""
    found = {}
    blocks = re.split(r"^(\.LBB\d+_\d+):$", asm, flags=re.MULTILINE)
    for label, text in zip(blocks[1::2], blocks[2::2], strict=True):
        back = re.search(rf"^\s*b(\.\w+)?\s+{re.escape(label)}$", text, re.MULTILINE)
        if back:
            found[label] = text[: back.end()]
    return found


def interpreted(layer: Layer, sched, func, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The compiled loop IR's result on seeded int8 inputs (unpacked) and numpy's."""
    data, weight = cpu_layers.inputs(layer, seed, S8)
    args = [*cpu_layers.pack(layer, data, weight, sched.packing), np.zeros(func.params[-1].shape, np.int32)]
    interp.run(func, args)
    return cpu_layers.unpack(layer, args[-1]), cpu_layers.reference(layer, data, weight)


def test_the_blocking_is_read_from_the_spec_instruction() -> None:
    """sdot_v4i32: 4 int32 lanes, each the sum of 4 i8 x i8 products; the x86 spec has none of i8 operands
    (its first for s8 x s8 is vpmaddwd, on operands widened to int16), and the arm spec none for u8 x s8."""
    assert cpu.packing("arm-dot", "int8", ARM) == cpu.Packing("int8", "int8", 4, 4, "sdot_v4i32")
    assert cpu.packing("x86-vnni", "int8", isa.load_isa("x86")) == \
        cpu.Packing("int16", "int16", 16, 2, "vpmaddwd_512")
    with pytest.raises(ScheduleError, match="no instruction that sums uint8 x int8"):
        cpu.packing("arm-dot", "uint8", ARM)


def test_the_arm_target_needs_an_arm_spec_and_names_its_triple() -> None:
    assert TARGET.triple == "aarch64-unknown-linux-gnu" and Target("cpu", isa.load_isa("x86")).triple is None
    with pytest.raises(Exception, match="compiles for the 'arm' ISA family"):
        Target("arm", isa.load_isa("x86"))


def test_gemm_inner_loop_is_one_sdot_per_accumulator_of_the_tile(golden) -> None:
    """UNIT's tile: unroll_oc x unroll_x accumulators, each one sdot per reduction step; per step one weight
    vector per oc block (ldr q) and one broadcast group per row (ld1r), on q registers. The golden file is
    the loop IR after the arm pipeline: what LLVM compiles."""
    tuning = cpu.CpuTuning(parallel=2, unroll_oc=2, unroll_x=4)
    layer = GemmShape(16, 32, 64)
    sched, func, obj = compiled(layer, tuning)
    golden.check(str(func))
    assert issued_instructions(func) == {"sdot_v4i32": 16 * (32 // 4) * (64 // 4)}
    (seg,) = obj.segments
    inner = [body for body in loops(obj.function(seg.name)).values() if "sdot" in body]
    assert len(inner) == 1, obj.function(seg.name)
    body = inner[0]
    tile = tuning.unroll_oc * tuning.unroll_x
    assert len(SDOT_Q.findall(body)) == body.count("sdot") == tile
    assert len(re.findall(r"\bld1r\s+\{ v\d+\.4s \}", body)) == tuning.unroll_x
    assert len(re.findall(r"^\s*ld[ru]r?\s+q\d+", body, re.MULTILINE)) == tuning.unroll_oc


def test_no_x86_leaks_into_the_aarch64_code() -> None:
    _, func, obj = compiled(GemmShape(8, 8, 16))
    assert obj.features == ("dotprod",) and needed_features(func) == ("dotprod",)
    assert "llvm.aarch64.neon.sdot.v4i32.v16i8" in obj.llvm_ir and "x86" not in obj.llvm_ir
    assert obj.llvm_ir.count('target triple = "aarch64-unknown-linux-gnu"') == 1
    assert SDOT_Q.search(obj.assembly) and not X86.search(obj.assembly)
    elf = obj.object_code
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and int.from_bytes(elf[18:20], "little") == 183  # EM_AARCH64


@pytest.mark.parametrize("mnk", [(16, 32, 64), (13, 10, 7), (1, 4, 4), (5, 36, 20)])
def test_gemm_after_tensorize_is_bit_exact_in_the_interpreter(mnk) -> None:
    """Shapes whose rows, columns or K are not whole tiles or blocks: partitioned tails, zero padding."""
    layer = GemmShape(*mnk)
    sched, func, obj = compiled(layer)
    got, want = interpreted(layer, sched, func, seed=sum(mnk))
    np.testing.assert_array_equal(got, want)
    assert "arm.sdot_v4i32(" in str(func) and SDOT_Q.search(obj.assembly)


@pytest.mark.parametrize("conv", [ConvShape(6, 6, 8, 8, 3, 1, 1), ConvShape(7, 9, 5, 6, 3, 2, 1),
                                  ConvShape(4, 4, 4, 4, 1, 1, 0)])
def test_conv2d_after_tensorize_is_bit_exact_in_the_interpreter(conv: ConvShape) -> None:
    sched, func, obj = compiled(conv, cpu.CpuTuning(parallel=3, unroll_oc=1, unroll_x=4))
    got, want = interpreted(conv, sched, func)
    np.testing.assert_array_equal(got, want)
    assert issued_instructions(func)["sdot_v4i32"] >= conv.oh * conv.ow and SDOT_Q.search(obj.assembly)


def test_int8_extremes_wrap_as_numpy_int32() -> None:
    """Every product -128 x -128: the int32 sums are exact, as sdot's are."""
    layer = GemmShape(4, 8, 64)
    sched, func, _ = compiled(layer)
    a, b = np.full((4, 64), -128, np.int8), np.full((8, 64), -128, np.int8)
    args = [*cpu_layers.pack(layer, a, b, sched.packing), np.zeros(func.params[-1].shape, np.int32)]
    interp.run(func, args)
    np.testing.assert_array_equal(cpu_layers.unpack(layer, args[-1]),
                                  np.full((4, 8), 64 * 128 * 128, np.int32))


def test_a_spec_with_only_the_64_bit_sdot_blocks_by_2_lanes(tmp_path) -> None:
    """The lanes come from the spec's instruction, not from Python: without sdot_v4i32, sdot_v2i32 (2 lanes of
    4 products, on d registers) is selected, and the code uses .2s/.8b."""
    text = re.sub(r"\[instructions\.sdot_v4i32\].*?(?=\[instructions\.)", "",
                  (SPECS_DIR / "arm.toml").read_text(), flags=re.DOTALL)
    spec = isa.load_spec_text(text, str(tmp_path / "arm-64.toml"))
    target = Target("arm", spec)
    assert cpu.packing("arm-dot", "int8", spec) == cpu.Packing("int8", "int8", 2, 4, "sdot_v2i32")
    layer = GemmShape(6, 10, 12)
    sched, func, obj = compiled(layer, target=target)
    got, want = interpreted(layer, sched, func)
    np.testing.assert_array_equal(got, want)
    assert re.search(r"sdot\s+v\d+\.2s, v\d+\.8b, v\d+\.8b", obj.assembly) and not SDOT_Q.search(obj.assembly)


def test_a_target_without_the_spec_feature_is_refused() -> None:
    _, func, _ = compiled(GemmShape(4, 4, 4))
    with pytest.raises(CodegenError, match=r"the target \(features none\) lacks dotprod"):
        cross_build(func, TARGET.triple, features=())


def test_unknown_triple_and_function_are_named() -> None:
    _, func, obj = compiled(GemmShape(4, 4, 4))
    with pytest.raises(CodegenError, match="no LLVM target for triple 'nonsense-none-none'"):
        cross_build(func, "nonsense-none-none")
    with pytest.raises(CodegenError, match="no function 'missing'"):
        function_assembly(obj.assembly, "missing")
