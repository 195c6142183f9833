"""Which of the spec's instructions ``tandem run --target cpu`` sums a layer's products with
(tandem/flows/cpu.py ``host_packing``): the first of ``compiler.ops.cpu.packings`` this CPU runs (vpdpbusd
with AVX-512 VNNI; vpmaddwd, the operands widened to int16, on an AVX2 CPU), or the one ``instruction``
names, which this CPU must run. Every run is checked against numpy bit for bit."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_operands import host_features
from compiler.ops.nn import ConvShape, GemmShape
from tandem.cli.app import app
from tandem.flows import cpu as cpu_flow
from tandem.flows.cpu import run_cpu
from tandem.flows.cpu_layers import CpuOptions, Layer
from tandem.flows.cpu_tuning import tuning_space
from tandem.flows.flow import RunError
from tandem.flows.layers import op_of
from tandem.flows.run import run
from tandem.flows.targets import load_target

VNNI = host_cpu()["avx512vnni"]
needs_avx2 = pytest.mark.skipif("avx2" not in host_features(), reason="this CPU has no AVX2")
REQUANTIZE = {"epilogue": "requantize", "ZP": 3}


@needs_avx2
@pytest.mark.parametrize("layer", [ConvShape(14, 14, 32, 24, 3, 1, 1), ConvShape(9, 9, 5, 20, 3, 2, 0),
                                   GemmShape(20, 40, 36)], ids=op_of)
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
def test_vpmaddwd_runs_every_integer_layer_bit_exact(layer: Layer, dtype: str) -> None:
    r = run_cpu(layer, "x86-vnni", threads=2, min_time=0.005,
                options=CpuOptions(dtype, instruction="vpmaddwd_256"))
    assert r.validated and r.max_abs_err == 0
    assert r.params["instruction"] == "vpmaddwd_256" and set(r.instructions) == {"vpmaddwd_256"}
    assert r.scalar_fallback == 0


@needs_avx2
def test_a_requantizing_epilogue_on_vpmaddwd_is_bit_exact() -> None:
    r = run("conv2d", load_target("cpu"), {"H": 10, "W": 10, "IC": 16, "OC": 32, "K": 3, "S": 1, "P": 1,
                                           "instruction": "vpmaddwd_256", "threads": 1, "min_time": 0.005,
                                           **REQUANTIZE})
    assert r.validated and set(r.instructions) == {"vpmaddwd_256"}


@pytest.mark.skipif(VNNI or "avx2" not in host_features(), reason="a CPU with AVX2 and without VNNI")
def test_a_cpu_without_vnni_tensorizes_onto_vpmaddwd_by_default() -> None:
    r = run_cpu(ConvShape(8, 8, 16, 16, 3, 1, 1), threads=1, min_time=0.005)
    assert r.params["isa"] == "x86-vnni" and r.params["instruction"] == "vpmaddwd_256"
    assert r.validated and r.tensor_instructions > 0
    # held to the measured peak of the instruction it runs on
    assert r.utilization["vpmaddwd_256"] == pytest.approx(r.measured["gops"] / r.measured["peak_gops"])
    assert r.roofline_cycles > 0 and 0 < r.roofline_pct


@pytest.mark.skipif(VNNI, reason="this CPU runs vpdpbusd")
def test_an_instruction_this_cpu_lacks_is_refused_naming_what_it_needs() -> None:
    with pytest.raises(RunError, match=r"cannot run vpdpbusd_512 needs avx512vnni; leave the instruction "):
        run("gemm", load_target("cpu"), {"M": 4, "N": 16, "K": 8, "instruction": "vpdpbusd_512"})


def test_a_cpu_that_runs_none_of_the_instructions_is_told_what_each_needs(monkeypatch) -> None:
    monkeypatch.setattr(cpu_flow, "instruction_runs_on_cpu", lambda instr: False)
    with pytest.raises(RunError, match=r"runs none of the spec's instructions for int16 products "
                                       r"\(vpmaddwd_512 needs avx512bw; vpmaddwd_256 needs avx2\)"):
        run("gemm", load_target("cpu"), {"M": 4, "N": 16, "K": 8, "dtype": "int16", "isa": "x86-vnni"})
    assert cpu_flow.default_isa(CpuOptions("int16"), load_target("cpu")) == cpu_flow.vectorized_isa()


@needs_avx2
def test_the_command_line_takes_the_instruction() -> None:
    result = CliRunner().invoke(app, ["run", "gemm", "--target", "cpu", "--instruction", "vpmaddwd_256",
                                      "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["validated"] and report["params"]["instruction"] == "vpmaddwd_256"


@pytest.mark.parametrize(("params", "match"), [
    ({"instruction": "vpmaddwd_256", "isa": "x86-avx512"}, "instruction names the spec's instruction a "
                                                          "tensorized isa"),
    ({"instruction": "vfmadd_ps_512"}, "vfmadd_ps_512 does not sum uint8 x int8 products"),
    ({"instruction": "vpmadd"}, "has no instruction 'vpmadd'"),
])
def test_a_bad_instruction_is_refused_before_it_compiles(params: dict, match: str) -> None:
    with pytest.raises(RunError, match=match):
        run("gemm", load_target("cpu"), {"M": 4, "N": 16, "K": 8, **params})


@needs_avx2
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_the_avx2_vectorized_schedule_runs_8_lanes(dtype: str) -> None:
    r = run_cpu(GemmShape(20, 40, 36), "x86-avx2", threads=1, min_time=0.005, options=CpuOptions(dtype))
    assert r.validated and r.params["isa"] == "x86-avx2" and r.tensor_instructions == 0
    if dtype == "float32" and not host_cpu()["avx512f"] and "fma" in host_features():
        # held to the spec's fp32 multiply-add this CPU runs, its peak measured from the spec
        assert r.utilization["vfmadd_ps_256"] == pytest.approx(r.measured["gops"] / r.measured["peak_gops"])


def test_avx2_registers_hold_tiles_of_at_most_8_instructions() -> None:
    """16 registers: 8 accumulators, the weight vectors and a broadcast; a GEMM's squarest tile first."""
    for layer in (GemmShape(128, 768, 768), ConvShape(56, 56, 64, 64, 3, 1, 1)):
        space = tuning_space(layer, 8, 1, registers=16)
        assert all(t.unroll_oc * t.unroll_x <= 8 for t in space)
        assert max(t.unroll_oc * t.unroll_x for t in tuning_space(layer, 16, 1)) > 8   # AVX-512's 32
    first = tuning_space(GemmShape(128, 768, 768), 8, 1, registers=16)[0]
    assert (first.unroll_oc, first.unroll_x) == (2, 4)
