"""x86 extended from spec files alone, no Python changes.

- tests/extensions/x86_vpdpwssd.toml: an int16 GEMM and conv compiled for this CPU select vpdpwssd from its
  semantics, LLVM calls the intrinsic the spec names, and the result, run for real, is bit-exact with numpy.
- tests/extensions/x86_vpdpbusds.toml: saturating semantics (issue 46, item 2). A u8 x s8 GEMM or conv
  selects vpdpbusds where the range proof (compiler/passes/ranges.py) shows that no partial sum can reach
  the clamp, and is refused with the bound elsewhere; the flow validates integer kernels also on inputs at
  their types' extremes, which catches a spec whose semantics wrap where its intrinsic saturates.

What this machine checks depends on its CPU. Everywhere: the selection and the refusal, the compiled loop IR
run by the reference interpreter (each instruction by its spec semantics, seeded and extreme inputs), and
the assembly LLVM emits for an AVX-512 VNNI target. Only on a CPU with AVX-512 VNNI: the kernels run for
real, so only there is the spec's semantics held to what the intrinsic computes (LLVM 22 does not
constant-fold the VNNI intrinsics, and there is no other model of them here).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import isa
from compiler import interp
from compiler.analysis.issued import issued_instructions
from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_cross import cross_build
from compiler.errors import ScheduleError
from compiler.lower import lower
from compiler.ops import cpu
from compiler.ops.nn import ConvShape, GemmShape
from compiler.passes.tensorize import unmatched
from compiler.pipeline import passes_for
from compiler.target import Target
from tandem.cli.app import app
from tandem.flows import cpu_layers
from tandem.flows.flow import extremes

HERE = Path(__file__).parent
VPDPWSSD = HERE / "x86_vpdpwssd.toml"
VPDPBUSDS = HERE / "x86_vpdpbusds.toml"
RUNNER = CliRunner()
needs_vnni = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
LAYERS = {
    "gemm": (["-p", "M=24", "-p", "N=48", "-p", "K=70"], 24 * 48 * 70 // 32),   # 32 multiply-adds each
    "conv2d": (["-p", "H=9", "-p", "W=9", "-p", "IC=6", "-p", "OC=32", "-p", "K=3", "-p", "P=1"],
               32 * 9 * 9 * 6 * 9 // 32),
}


def run(op: str, *args: str, layer: list[str] | None = None, dtype: str = "i16") -> tuple[int, str]:
    result = RUNNER.invoke(app, ["run", op, *(LAYERS[op][0] if layer is None else layer), "--target", "cpu",
                                 "--dtype", dtype, "--threads", "1", *args, "--json"])
    return result.exit_code, result.output


@needs_vnni
@pytest.mark.parametrize("op", list(LAYERS))
def test_an_int16_operator_selects_vpdpwssd_from_the_spec_and_runs_bit_exact(op: str) -> None:
    code, output = run(op, "--spec", str(VPDPWSSD))
    assert code == 0, output
    report = json.loads(output)
    assert report["validated"] and report["max_abs_err"] == 0
    assert report["detail"].startswith("bit-exact with numpy, also on 5 inputs at their types' extremes")
    assert report["instructions"] == {"vpdpwssd_512": LAYERS[op][1]}
    assert report["params"]["instruction"] == "vpdpwssd_512"
    assert report["params"]["dtype"] == "s16 x s16 -> s32"
    assert report["scalar_fallback"] == 0 and report["gops"] > 0


@needs_vnni
def test_without_the_extension_int16_runs_on_the_built_in_vpmaddwd_or_vectorized() -> None:
    """The built-in spec sums int16 pairs with AVX-512BW's vpmaddwd (no accumulator: added after it); the
    extension's vpdpwssd, which accumulates, is what the spec file adds."""
    code, output = run("gemm")
    assert code == 0, output
    report = json.loads(output)
    assert report["validated"] and report["params"]["instruction"] == "vpmaddwd_512"
    assert set(report["instructions"]) == {"vpmaddwd_512"}
    code, output = run("gemm", "--isa", "x86-avx512")
    assert code == 0, output
    report = json.loads(output)
    assert report["validated"] and report["instructions"] == {}


# ---------------------------------------------------------------------------------------------- vpdpbusds

SATURATING = isa.load_spec_file(VPDPBUSDS)
#: u8 x s8 layers whose every partial sum stays within int32 (256 and 8 * 9 = 72 products per output)
SMALL = {"gemm": GemmShape(1, 16, 256), "conv2d": ConvShape(3, 3, 8, 16, 3, 1, 1)}


@pytest.mark.parametrize("op", list(SMALL))
def test_vpdpbusds_is_selected_where_the_sum_cannot_saturate_and_interprets_bit_exact(op: str) -> None:
    """Everywhere: the extension's instruction is the one asked for, the range proof holds, every marked
    statement becomes vpdpbusds, and the compiled loop IR in the reference interpreter equals numpy on
    seeded inputs and at the extremes (which exercises the spec's semantics, not the CPU); LLVM emits it."""
    layer, target = SMALL[op], Target("cpu", SATURATING)
    sched = cpu_layers.schedule(layer, "x86-vnni", cpu.CpuTuning(3, 2, 3), target)
    assert sched.packing.instruction == "vpdpbusds_512" and sched.mapping.instruction == "vpdpbusds_512"
    func = lower(sched.schedule, sched.args)
    for p in passes_for("cpu"):
        func = p(func, target)
    assert unmatched(func, SATURATING) == [] and set(issued_instructions(func)) == {"vpdpbusds_512"}
    seeded = list(cpu_layers.inputs(layer, 0))
    for name, arrays in [("seeded", seeded), *extremes(seeded)]:
        out = np.zeros(func.params[-1].shape, np.int32)
        interp.run(func, [*cpu_layers.pack(layer, *arrays, sched.packing), out])
        np.testing.assert_array_equal(cpu_layers.unpack(layer, out), cpu_layers.reference(layer, *arrays),
                                      err_msg=name)
    assert "vpdpbusds\t" in cross_build(func, "x86_64-unknown-linux-gnu").assembly


@pytest.mark.parametrize(("layer", "terms"), [(GemmShape(1, 16, 70000), "70,000"),
                                              (ConvShape(3, 3, 7312, 16, 3, 1, 1), "65,808")])
def test_vpdpbusds_is_refused_with_the_bound_where_the_sum_can_saturate(layer, terms: str) -> None:
    """65,792 u8 x s8 products reach -2**31 + 32,768; one more quadruple of them passes the clamp."""
    with pytest.raises(ScheduleError, match=rf"vpdpbusds_512 is not applicable \(range\): vpdpbusds_512 "
                       rf"saturates at -2,147,483,648.*, but the sum of {terms} terms in "
                       rf"\[-32,640, 32,385\]"):
        cpu_layers.schedule(layer, "x86-vnni", cpu.CpuTuning(), Target("cpu", SATURATING))


def wrapping_spec(tmp_path: Path) -> Path:
    """The fixture with vpdpbusd's wrapping semantics under vpdpbusds's intrinsic: a wrong spec."""
    right = VPDPBUSDS.read_text()
    text = right.replace("i32(min(max(i64(c[i]) + sum(j, i64(a[4*i + j]) * i64(b[4*i + j])), -2147483648), "
                         "2147483647))", "c[i] + sum(j, i32(a[4*i + j]) * i32(b[4*i + j]))")
    assert text != right
    path = tmp_path / "x86_vpdpbusds_wrapping.toml"
    path.write_text(text)
    return path


@needs_vnni
@pytest.mark.parametrize(("op", "layer", "count"), [
    ("gemm", ["-p", "M=2", "-p", "N=16", "-p", "K=256"], 2 * 256 // 4),
    ("conv2d", ["-p", "H=3", "-p", "W=3", "-p", "IC=8", "-p", "OC=16", "-p", "K=3", "-p", "P=1"], 9 * 2 * 9)])
def test_tandem_run_selects_vpdpbusds_and_runs_it_bit_exact_also_at_the_extremes(op, layer, count) -> None:
    code, output = run(op, "--spec", str(VPDPBUSDS), "--isa", "x86-vnni", layer=layer, dtype="uint8")
    assert code == 0, output
    report = json.loads(output)
    assert report["validated"] and report["instructions"] == {"vpdpbusds_512": count}, report
    assert "also on 5 inputs at their types' extremes" in report["detail"]


@needs_vnni
def test_tandem_run_refuses_vpdpbusds_with_the_bound_for_a_long_reduction() -> None:
    code, output = run("gemm", "--spec", str(VPDPBUSDS), "--isa", "x86-vnni", dtype="uint8",
                       layer=["-p", "M=1", "-p", "N=16", "-p", "K=70000"])
    assert code == 2 and "vpdpbusds_512 saturates at -2,147,483,648 and 2,147,483,647" in output, output


@needs_vnni
def test_a_spec_that_says_vpdpbusds_wraps_fails_validation_at_the_extremes(tmp_path: Path) -> None:
    """The wrong spec is selected (a plain sum needs no proof) and random inputs never saturate; the
    extremes do (K = 70,000 > 65,793: 70,000 * 255 * -128 < -2**31), where the CPU's vpdpbusds clamps."""
    code, output = run("gemm", "--spec", str(wrapping_spec(tmp_path)), "--isa", "x86-vnni", dtype="uint8",
                       layer=["-p", "M=1", "-p", "N=16", "-p", "K=70000"])
    assert code == 1, output
    report = json.loads(output)
    assert report["instructions"] == {"vpdpbusds_512": 70000 // 4}
    assert not report["validated"] and "on inputs at their extremes" in report["detail"], report["detail"]
