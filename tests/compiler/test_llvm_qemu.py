"""The AArch64 code of the arm target run for real, under qemu-aarch64 (compiler/backend/llvm_qemu.py).

These tests need Debian's qemu-user and an AArch64 linker (binutils-aarch64-linux-gnu or lld) and skip with
the reason where either is missing; tests/compiler/test_llvm_cross.py checks the same kernels without them
(assembly, and the loop IR in the interpreter).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import isa
from compiler import te
from compiler.backend.llvm_cross import cross_build
from compiler.backend.llvm_qemu import STUB_WORDS, harness_module, run_emulated, unavailable
from compiler.errors import CodegenError, CpuRuntimeError
from compiler.lower import lower
from compiler.ops import cpu
from compiler.ops.nn import ConvShape, GemmShape
from compiler.pipeline import compile_func
from compiler.schedule import create_schedule
from compiler.target import Target
from tandem.flows import cpu_layers
from tandem.flows.cpu_layers import CpuOptions, Layer

TARGET = Target("arm", isa.load_isa("arm"))
MISSING = unavailable(TARGET.triple)
needs_qemu = pytest.mark.skipif(MISSING is not None, reason=f"cannot run AArch64 code here: {MISSING}")
S8 = CpuOptions("int8")   # sdot's s8 x s8


def build(layer: Layer, tuning: cpu.CpuTuning | None = None):
    sched = cpu_layers.schedule(layer, "arm-dot", tuning or cpu.CpuTuning(), TARGET, S8)
    func = compile_func(lower(sched.schedule, sched.args), TARGET)
    return sched, cross_build(func, TARGET.triple)


def emulate(layer: Layer, sched, obj, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    data, weight = cpu_layers.inputs(layer, seed, S8)
    out = np.zeros(obj.func.params[-1].shape, np.int32)
    args = [*cpu_layers.pack(layer, data, weight, sched.packing), out]
    run_emulated(obj, args)
    return cpu_layers.unpack(layer, args[-1]), cpu_layers.reference(layer, data, weight)


@needs_qemu
@pytest.mark.parametrize("mnk", [(16, 32, 64), (13, 10, 7), (33, 20, 132)])
def test_gemm_under_qemu_equals_numpy(mnk) -> None:
    layer = GemmShape(*mnk)
    got, want = emulate(layer, *build(layer), seed=sum(mnk))
    np.testing.assert_array_equal(got, want)


@needs_qemu
def test_conv2d_under_qemu_equals_numpy() -> None:
    layer = ConvShape(9, 7, 12, 20, 3, 2, 1)
    got, want = emulate(layer, *build(layer, cpu.CpuTuning(parallel=3, unroll_oc=2, unroll_x=4)))
    np.testing.assert_array_equal(got, want)


@needs_qemu
def test_a_fault_is_reported_by_its_message() -> None:
    """An index known only at run time is checked by the code; its fault comes back as the exit status."""
    a = te.placeholder((8,), "int32", name="a")
    idx = te.placeholder((1,), "int32", name="idx")
    out = te.compute((1,), lambda i: a[idx[i]], name="out")
    func = compile_func(lower(create_schedule(out), [a, idx, out]), TARGET)
    obj = cross_build(func, TARGET.triple)
    values, result = np.arange(8, dtype=np.int32), np.zeros(1, np.int32)
    run_emulated(obj, [values, np.array([5], np.int32), result])
    assert result[0] == 5
    with pytest.raises(CpuRuntimeError, match="under qemu-aarch64.*out"):
        run_emulated(obj, [values, np.array([8], np.int32), result])


@needs_qemu
def test_bad_arguments_are_refused_before_running() -> None:
    layer = GemmShape(4, 4, 4)
    _, obj = build(layer)
    with pytest.raises(CpuRuntimeError, match="expected 3 arguments"):
        run_emulated(obj, [np.zeros((4, 4), np.int8)])
    with pytest.raises(CpuRuntimeError, match="'gemm'"):
        run_emulated(obj, [np.zeros((4, 4), np.int8), np.zeros((1, 1, 4, 4), np.int8), np.zeros(3, np.int32)])


def test_without_the_tools_the_reason_is_named(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert "no qemu-aarch64" in unavailable(TARGET.triple)
    assert "only aarch64" in unavailable("x86_64-unknown-linux-gnu")
    _, obj = build(GemmShape(4, 4, 4))
    with pytest.raises(CodegenError, match="cannot run main for aarch64-unknown-linux-gnu: no qemu-aarch64"):
        run_emulated(obj, [np.zeros((4, 4), np.int8), np.zeros((1, 1, 4, 4), np.int8),
                           np.zeros((4, 1, 4), np.int32)])


def test_the_harness_calls_each_segment_and_writes_only_outputs() -> None:
    """No emulator needed: the harness module's text. The 3 x 4 int32 output (48 bytes) is written, the
    inputs not; a fault and the end exit."""
    _, obj = build(GemmShape(3, 4, 4))
    arrays = [np.zeros((3, 4), np.int8), np.zeros((1, 1, 4, 4), np.int8), np.zeros((3, 1, 4), np.int32)]
    text = str(harness_module(obj, arrays))
    assert all(f'call i32 @"{s.name}"' in text for s in obj.segments) and 'define void @"_start"()' in text
    assert re.findall(r"i64 (\S+), i64 64\)$", text, re.MULTILINE) == ["48"]     # write(1, out, 48)
    assert len(re.findall(r"i64 0, i64 0, i64 94\)$", text, re.MULTILINE)) == 2   # exit_group(code), (0)
    assert f"i32 {STUB_WORDS[1]}" in text                                          # svc #0
