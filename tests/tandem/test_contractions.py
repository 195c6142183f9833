"""TensorIR's operator kinds (``tandem run conv1d|conv3d|dilated_conv|group_conv|depthwise|conv_transpose|
batch_matmul``) on VITA, DianNao and this CPU, validated bit for bit against compiler/ops/reference. VITA and
DianNao map them onto a GEMM by characteristic vectors (VITA: the spec's GEMM instruction; DianNao: the
canonical GEMM as the card's 1 x 1 conv on qconv) and run GEMMs on reindexed operands; the CPU runs the
convolutions directly, the window read in the kernel (UNIT's schedule in 1 to 3 dimensions, and the
depthwise one), and batch matmul on its GEMM."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from compiler.backend.llvm import host_cpu
from tandem.cli.app import app
from tandem.flows.flow import RunError
from tandem.flows.run import flow_for, run
from tandem.flows.targets import load_target

RUNNER = CliRunner()
TARGET = load_target("vita")
CPU = load_target("cpu")
DIANNAO = load_target("diannao")
TARGETS = {"vita": TARGET, "cpu": CPU, "diannao": DIANNAO}
#: the CPU's cases check the dot-product instruction UNIT's schedule selects: they need a CPU that has it
NEEDS_VNNI = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
ON_EACH_TARGET = [pytest.param(t, id=k, marks=NEEDS_VNNI if k == "cpu" else ()) for k, t in TARGETS.items()]
KINDS = {
    "conv1d": {"W": 20, "IC": 5, "OC": 24, "S": 2},
    "conv3d": {"D": 3, "H": 4, "W": 5, "IC": 3, "OC": 16},
    "dilated_conv": {"H": 7, "W": 6, "IC": 16, "OC": 8},
    "group_conv": {"H": 5, "W": 5, "IC": 12, "OC": 24, "G": 3},
    "batch_matmul": {"B": 3, "M": 5, "N": 17, "K": 40},
    "conv_transpose": {"H": 4, "W": 5, "IC": 6, "OC": 20, "K": 4, "S": 3, "P": 2},
    "depthwise": {"H": 6, "W": 5, "C": 5, "S": 2},
}


@pytest.mark.parametrize("target", ON_EACH_TARGET)
@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_runs_on_the_gemm_and_validates_bit_exactly(kind, target):
    report = run(kind, target, dict(KINDS[kind]))
    assert report.validated and report.max_abs_err == 0 and report.scalar_fallback == 0
    if target is TARGET:
        assert report.instructions["GEMM"] >= 1
    elif target is DIANNAO:   # every multiply-add on the card's integer conv instruction
        assert report.unmatched == [] and report.instructions["qconv"] >= 1
    else:   # every multiply-add on the dot-product instruction the UNIT schedule selects
        assert report.unmatched == [] and report.params["instruction"] in report.instructions
    if target is CPU and kind != "batch_matmul":   # a direct convolution, one per group
        assert report.params["window"]["count"] == (3 if kind == "group_conv" else 1)
        assert report.params["mapping"].startswith("lanes = channels" if kind == "depthwise" else
                                                   "lanes = output")
        return
    gemm = report.params["gemm"]
    outer = {"group_conv": 3, "batch_matmul": 3, "depthwise": 5}
    assert gemm["count"] == outer.get(kind, 1)
    rows = "b" if target is TARGET else "m"   # the row index of VITA's GEMM, of the canonical GEMM
    pixels = f"GEMM: {rows} <- fuse(n, " if kind != "batch_matmul" else f"GEMM: {rows} <- fuse(i)"
    assert report.params["mapping"].startswith(pixels)


@pytest.mark.parametrize(("kind", "params", "count"), [
    # 2 x 2 x 3 outputs, 16 output channels in one block, 8 input channels in 2 groups of 4, 27 taps
    ("conv3d", {"D": 4, "H": 4, "W": 5, "IC": 8, "OC": 16, "P": 0, "K": 3}, 1 * 2 * 2 * 3 * 2 * 27),
    # 2 images x 5 x 5 outputs x 2 channel blocks, 3 kernel rows x one group of 4 taps (the 4th weight 0)
    ("depthwise", {"H": 5, "W": 5, "C": 20, "N": 2}, 2 * 2 * 25 * 3 * 1),
    # to 3 channels: 16 pixels on the lanes; 3 channels x 12 rows x 1 block of 12 columns, 2 input groups,
    # 16 taps of the stride-1 conv over the spread 15 x 15 input
    ("conv_transpose", {"H": 6, "W": 6, "IC": 8, "OC": 3, "K": 4, "S": 2, "P": 1}, 3 * 12 * 1 * 2 * 16),
])
@NEEDS_VNNI
def test_the_cpu_reads_the_window_in_the_kernel(kind, params, count):
    """No im2col on the CPU: the kernel walks the padded input, one vpdpbusd per output block, input-channel
    group and tap (a depthwise conv: per output block, kernel row and group of 4 taps along W; a conv of
    few output channels: per channel and block of 16 output pixels)."""
    report = run(kind, CPU, {**params, "min_time": 0.01})
    assert report.validated and report.instructions == {report.params["instruction"]: count}


def test_the_cli_reports_the_mapping_and_the_gemms_it_ran():
    result = RUNNER.invoke(app, ["run", "group_conv", "--target", "vita", "-p", "H=6", "-p", "W=6", "-p",
                                 "IC=8", "-p", "OC=16", "-p", "G=2", "--relu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["validated"] is True and report["params"]["relu"] is True
    # 8 output channels per group would fill half of VITA's 16 lanes: it runs as 8 rows x 36 columns
    assert report["params"]["gemm"] == {"M": 36, "N": 8, "K": 36, "count": 2, "transposed": True,
                                        "kernel": "gemm"}
    assert report["params"]["gemms"] == 2


@pytest.mark.parametrize("target", [TARGET, DIANNAO], ids=["vita", "diannao"])
def test_a_gemm_of_few_columns_runs_transposed_filling_the_lanes_with_pixels(target, monkeypatch):
    """A depthwise conv's GEMMs have one output channel each: weights by data (1 x pixels) fills the 16
    lanes the data by weights (pixels x 1) would leave 15/16 empty; same result, fewer cycles."""
    params = {"H": 10, "W": 10, "C": 4}
    transposed = run("depthwise", target, dict(params))
    assert transposed.validated and transposed.params["gemm"]["transposed"] is True
    flow = type(flow_for(target.kind).flows["depthwise"])
    monkeypatch.setattr(flow, "transposed", lambda self, *args: False)
    plain = run("depthwise", target, dict(params))
    assert plain.validated and plain.params["gemm"]["transposed"] is False
    assert (transposed.output == plain.output).all() and transposed.cycles < plain.cycles


@pytest.mark.parametrize(("kind", "params", "message"), [
    ("group_conv", {"H": 4, "W": 4, "IC": 10, "OC": 16, "G": 4},
     "G = 4 groups must divide IC = 10 and OC = 16"),
    ("conv1d", {"W": 3, "IC": 4, "OC": 4, "K": 7, "P": 0},
     "a kernel of K = 7 with DIL = 1 reaches 7 elements, more than the input's 3 with P = 0"),
    ("conv3d", {"D": 2, "H": 2, "IC": 4, "OC": 4}, "W must be given; conv3d needs all of D, H, W, IC, OC"),
    ("batch_matmul", {"B": 2, "M": 4, "N": 4, "K": 4, "G": 2}, "unknown parameter 'G'"),
    ("conv_transpose", {"H": 4, "W": 4, "IC": 4, "OC": 4, "P": 3}, "P = 3 crops more than the K - 1 = 2"),
    ("batch_matmul", {"B": 10**4, "M": 512, "N": 512, "K": 512}, "more than the machine config's uop_budget"),
])
def test_impossible_shapes_are_refused_naming_the_parameter(kind, params, message):
    with pytest.raises(RunError, match=message):
        run(kind, TARGET, params)


def test_int16_kinds_on_the_card_sum_in_int32():
    report = run("conv1d", DIANNAO, {"W": 12, "IC": 6, "OC": 20, "dtype": "int16"})
    assert report.validated and report.output.dtype.name == "int32" and report.params["dtype"] == "int16"
    with pytest.raises(RunError, match="dtype 'float32' is not one of the integer types"):
        run("conv1d", DIANNAO, {"W": 12, "IC": 6, "OC": 20, "dtype": "float32"})


def test_gemm_on_the_card_is_a_1x1_conv_on_its_conv_instruction():
    report = run("gemm", DIANNAO, {"M": 20, "N": 24, "K": 40, "dtype": "int8"})
    assert report.validated and report.instructions["qconv"] >= 1 and report.output.shape == (20, 24)
    assert (report.params["M"], report.params["N"], report.params["K"]) == (20, 24, 40)


def test_a_gemm_deeper_than_the_conv_fields_runs_as_a_strided_conv_of_the_same_bytes():
    """K = 4100 channels do not fit qconv's cin field (12 bits): the card's GEMM is then the 2x2 conv with
    stride 2 of a (2M) x 2 input of 1025 channels, the same bytes. A prime K beyond the field runs on the
    scalar unit, and the report says why."""
    report = run("gemm", DIANNAO, {"M": 4, "N": 16, "K": 4100, "dtype": "int8"})
    assert report.validated and report.scalar_fallback == 0 and report.instructions["qconv"] >= 1
    assert report.params["conv"] == {"H": 8, "W": 2, "IC": 1025, "OC": 16, "K": 2, "S": 2, "P": 0}
    scalar = run("gemm", DIANNAO, {"M": 2, "N": 3, "K": 4099, "dtype": "int8"})
    assert scalar.validated and scalar.scalar_fallback > 0
    assert any("field cin = 4099 does not fit in its 12 bits" in reason for reason in scalar.unmatched)


@st.composite
def shapes(draw, kind: str) -> dict:
    """A small random shape of ``kind``."""
    if kind == "batch_matmul":
        return {"B": draw(st.integers(1, 3)), "M": draw(st.integers(1, 9)),
                      "N": draw(st.integers(1, 20)), "K": draw(st.integers(1, 40))}
    k = draw(st.sampled_from([1, 2, 3]))
    params = {"W": draw(st.integers(k, 7)), "K": k, "S": draw(st.integers(1, 2)),
              "P": draw(st.integers(0, k - 1))}
    if kind != "conv1d":
        params["H"] = draw(st.integers(k, 7))
    if kind == "conv3d":
        params["D"] = draw(st.integers(k, 3))
    if kind == "depthwise":
        return {**params, "C": draw(st.integers(1, 4))}
    groups = draw(st.integers(2, 3)) if kind == "group_conv" else 1
    params.update(IC=groups * draw(st.integers(1, 5)), OC=groups * draw(st.integers(1, 5)))
    if kind == "group_conv":
        params["G"] = groups
    if kind == "dilated_conv":   # a dilation of 2 reaches 2 (K - 1) + 1 elements
        params.update(H=params["H"] + k, W=params["W"] + k)
    return params


@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=5, deadline=None, derandomize=True)
@given(data=st.data(), seed=st.integers(0, 99))
def test_random_shapes_of_every_kind_validate_on_every_target(kind, target, data, seed):
    params = data.draw(shapes(kind), label="params")
    extra = {"min_time": 0.005} if target is CPU else {}   # the CPU times each run
    report = run(kind, target, {**params, **extra, "seed": seed})
    assert report.validated and report.max_abs_err == 0


def test_a_match_whose_fields_the_encoding_cannot_hold_is_not_taken():
    """One output pixel of 18 input channels: qconv's loops also fit as a window of kh = 18 rows, which its
    4-bit field cannot encode; that assignment is skipped (it used to fail at encoding) and the layer
    validates."""
    report = run("group_conv", DIANNAO, {"H": 3, "W": 3, "K": 3, "P": 0, "IC": 4, "OC": 2, "G": 2})
    assert report.validated and report.max_abs_err == 0


@NEEDS_VNNI
def test_the_cpu_puts_the_pixels_on_the_lanes_of_a_gemm_of_few_columns(monkeypatch):
    """Batched GEMMs of 3 columns: vpdpbusd multiplies u8 data by s8 weights, so the operands cannot swap;
    the CPU runs the GEMM transposed instead (gemm_t: the data's rows on the lanes, each weight group
    broadcast), with the same result as the plain GEMM's."""
    from tandem.flows.cpu import CpuContractionFlow

    params = {"B": 2, "M": 40, "N": 3, "K": 32, "min_time": 0.01}
    lanes = run("batch_matmul", CPU, dict(params))
    assert lanes.validated and lanes.params["gemm"]["kernel"] == "gemm_t"
    assert lanes.params["instruction"] in lanes.instructions and lanes.unmatched == []
    monkeypatch.setattr(CpuContractionFlow, "kernel", lambda self, kind, *args: kind)
    plain = run("batch_matmul", CPU, dict(params))
    assert plain.params["gemm"]["kernel"] == "gemm" and (plain.output == lanes.output).all()


def test_the_card_keeps_a_gemm_untransposed_when_the_data_would_not_fit_as_weights():
    """Transposed, the data are the conv's weights, which the card holds whole in WMEM: a transposed conv to
    RGB at batch 16 (65536 pixels x 1024) would need 64 MiB of the card's 16 MiB, so it runs as it is."""
    from tandem.flows.diannao import DiannaoContractionFlow

    flow = DiannaoContractionFlow()
    assert flow.transposed((4096, 3, 1024), DIANNAO, {"dtype": "int8"}) is True
    assert flow.transposed((65536, 3, 1024), DIANNAO, {"dtype": "int8"}) is False
