"""``tandem run --target cpu`` (tandem/flows/cpu.py): compile, run for real on this CPU, validate, time."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from compiler.analysis.issued import issued_instructions
from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_probe import measure_peak, tsc_hz
from compiler.errors import ScheduleError
from compiler.ops import cpu
from compiler.ops.cpu import U8, CpuTuning
from compiler.ops.nn import ConvShape, GemmShape
from tandem.cli.app import app
from tandem.flows import cpu_layers
from tandem.flows.cpu import compile_layer, run_cpu
from tandem.flows.cpu_layers import CpuOptions, Layer
from tandem.flows.cpu_tuning import select, tuning_space
from tandem.flows.flow import RunError
from tandem.flows.layers import op_of
from tandem.flows.targets import load_target

pytestmark = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
runner = CliRunner()
F32 = CpuOptions("float32")


@pytest.mark.parametrize("layer", [ConvShape(14, 14, 32, 32), ConvShape(9, 9, 5, 20, 3, 2, 0),
                                   GemmShape(20, 40, 36)], ids=op_of)
@pytest.mark.parametrize("isa", ["x86-vnni", "x86-avx512", "none"])
def test_run_cpu_validates_bit_exact_and_reports_gops(layer: Layer, isa: str) -> None:
    r = run_cpu(layer, isa, threads=2, min_time=0.005)
    m = r.measured
    assert r.validated and r.max_abs_err == 0
    assert r.detail.startswith("bit-exact with numpy, also on 5 inputs at their types' extremes")
    assert m["gops"] > 0 and m["seconds"] > 0 and r.cycles > 0
    assert m["gops"] == pytest.approx(2 * layer.macs / m["seconds"] / 1e9)
    assert r.utilization["vpdpbusd"] == pytest.approx(m["gops"] / m["peak_gops"])
    assert (r.tensor_instructions > 0) == (isa == "x86-vnni") and r.scalar_fallback == 0


def test_references_are_computed_with_numpys_blas_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's numpy references (integer GEMMs go through float64 BLAS) keep OpenBLAS to one thread: its
    threads spin after a call, and a 2-thread kernel timed next ran at its 1-thread speed (ResNet-18's C5:
    6.5 us per call before a 3136x576x64 float64 matmul, 12.5 us right after it)."""
    from threadpoolctl import threadpool_info

    from tandem.flows import cpu as cpu_flow

    seen: list[list[int]] = []
    reference = cpu_flow.CpuLayerFlow.reference

    def watched(self, job, inputs):
        seen.append([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"])
        return reference(self, job, inputs)

    monkeypatch.setattr(cpu_flow.CpuLayerFlow, "reference", watched)
    assert run_cpu(GemmShape(20, 40, 36), threads=2, min_time=0.005).validated
    assert len(seen) == 6 and all(n == 1 for threads in seen for n in threads)


def test_vnni_issues_one_instruction_per_64_padded_multiply_adds() -> None:
    layer = ConvShape(14, 14, 32, 32, 3, 1, 1)
    r = run_cpu(layer, "x86-vnni", threads=1, tuning=CpuTuning(3, 2, 7), min_time=0.005)
    assert r.instructions == {"vpdpbusd_512": layer.macs // 64}


def test_tuning_measures_candidates_and_keeps_the_fastest() -> None:
    layer = ConvShape(14, 14, 32, 32)
    space = tuning_space(layer)
    assert space[0].unroll_oc * space[0].unroll_x <= 28 and len(space) >= 8
    r = run_cpu(layer, threads=1, tune=3, min_time=0.005)
    assert [t["tuning"] for t in r.params["tuned"]] == [str(t) for t in space[:3]]
    assert r.params["tuning"] == min(r.params["tuned"], key=lambda t: t["seconds"])["tuning"]


def test_the_peak_and_the_clock_are_measured() -> None:
    assert measure_peak(1) > 10 and tsc_hz() > 1e8


def test_cli_json_contract_and_errors() -> None:
    result = runner.invoke(app, ["run", "gemm", "--target", "cpu", "-p", "M=8", "-p", "N=16", "-p", "K=8",
                                 "--json", "--threads", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    for key in ("validated", "cycles", "instructions", "utilization", "roofline_cycles", "gops", "seconds",
                "peak_gops", "params", "unmatched", "scalar_fallback"):
        assert key in report
    assert report["validated"] and report["params"]["isa"] == "x86-vnni"
    bad = runner.invoke(app, ["run", "conv2d", "--target", "cpu", "--isa", "avx9"])
    assert bad.exit_code == 2 and "unknown isa 'avx9'" in bad.output
    bad = runner.invoke(app, ["run", "conv2d", "--target", "cpu", "-p", "Q=3"])
    assert bad.exit_code == 2 and "unknown parameter" in bad.output


def test_issued_instructions_multiplies_the_loop_extents() -> None:
    layer = GemmShape(32, 32, 64)
    func, _ = compile_layer(layer, "x86-vnni", CpuTuning(2, 1, 4), threads=1, target=load_target("cpu"))
    assert issued_instructions(func) == {"vpdpbusd_512": 32 * 2 * 16}  # rows x column blocks x K/4


@pytest.mark.parametrize("layer", [GemmShape(1, 17, 3), ConvShape(3, 3, 16, 16),
                                   ConvShape(1, 1, 16, 16, 1, 1, 0)],
                         ids=["gemv", "3x3-map", "1x1-map"])
def test_outputs_narrower_than_four_columns_compile_and_run(layer: Layer) -> None:
    assert tuning_space(layer), "a legal layer needs at least one tuning"
    r = run_cpu(layer, threads=1, min_time=0.005)
    assert r.validated and r.max_abs_err == 0


def test_a_convs_tile_covers_the_instructions_the_cpu_needs_in_flight() -> None:
    """With up to 8 chains in flight (one vpdpbusd a cycle) ResNet-18's C2 keeps the 2 x 4 tile; where the
    CPU needs 12 (Zen 5 issues two a cycle), 2 x 7. The probe counts them on this CPU, from the spec's
    instruction alone."""
    from compiler.backend.llvm_probe import CHAINS, chains_to_peak
    from compiler.errors import CodegenError

    c2 = ConvShape(56, 56, 64, 64, 3, 1, 1)
    assert (tuning_space(c2)[0].unroll_oc, tuning_space(c2)[0].unroll_x) == (2, 4)
    first = tuning_space(c2, chains=12)[0]
    assert (first.unroll_oc, first.unroll_x) == (2, 7)
    assert chains_to_peak(load_target("cpu").spec, "vpdpbusd_512") in CHAINS
    with pytest.raises(CodegenError, match="vita.LOAD_INP: no intrinsic this CPU runs to measure"):
        chains_to_peak(load_target("vita").spec, "LOAD_INP")   # a spec instruction with no LLVM intrinsic


def test_a_gemms_tile_is_16_instructions_over_two_weight_blocks() -> None:
    """A GEMM's first tile on AVX-512: 2 oc blocks x 8 rows (10 loads per 16 instructions), not 1 x 16
    (17 loads per 16: PolyDL's GNMT-1 ran at half the vpdpbusd peak with it) nor 24 accumulators; a GEMM of
    one oc block keeps 1 x 16, a GEMV its 4 x 1."""
    for shape in [(128, 2048, 4096), (128, 768, 768), (197, 3072, 768)]:
        first = tuning_space(GemmShape(*shape))[0]
        assert (first.unroll_oc, first.unroll_x) == (2, 8), shape
    first = tuning_space(GemmShape(1024, 16, 4096))[0]
    assert (first.unroll_oc, first.unroll_x) == (1, 16)
    first = tuning_space(GemmShape(1, 768, 768))[0]
    assert (first.unroll_oc, first.unroll_x) == (4, 1)


@pytest.mark.parametrize("tuning", [CpuTuning(1, 2, 8), CpuTuning(2, 2, 8), CpuTuning(2, 2, 8, (1, 0))],
                         ids=str)
def test_a_gemms_tile_prefetches_the_next_weight_tile(tuning: CpuTuning) -> None:
    """Each reduction step of a tile prefetches (into L2) the line of each of its oc blocks one oc tile on
    (``compiler.ops.cpu._unit_schedule``'s ``streamed``), whether the oc tiles are their own loop or fused
    with the row tiles: one prefetcht1 per oc block and step in the instructions' loop (which LLVM may
    unroll), the sums bit-exact."""
    layer = GemmShape(40, 96, 256)
    _, kernel = compile_layer(layer, "x86-vnni", tuning, 1, load_target("cpu"))
    body = _innermost_loop(kernel.assembly(), "vpdpbusd")
    steps = sum("vpdpbusd" in x for x in body) // (tuning.unroll_oc * tuning.unroll_x)
    assert steps >= 1 and sum("prefetcht1" in x for x in body) == steps * tuning.unroll_oc, body
    r = run_cpu(layer, "x86-vnni", threads=2, tuning=tuning, min_time=0.005)
    assert r.validated and r.max_abs_err == 0, r.detail


@pytest.mark.parametrize(("tuning", "threads"), [(CpuTuning(1, 2, 8, (), 16), 1),
                                                  (CpuTuning(1, 2, 8, (1, 0), 7), 2),
                                                  (CpuTuning(1, 1, 4, (), 32), 2)], ids=str)
@pytest.mark.parametrize("isa", ["x86-vnni", "x86-avx512"])
def test_a_gemm_in_k_blocks_is_exact(tuning: CpuTuning, threads: int, isa: str) -> None:
    """BLIS's k_c loop (``CpuTuning.k_block``), blocks that do not divide K (75 steps of 4) and a tail of
    rows and blocks: bit-exact with numpy (fp32: within the float bound)."""
    r = run_cpu(GemmShape(40, 50, 300), isa, threads=threads, tuning=tuning, min_time=0.005)
    assert r.validated, r.detail
    assert r.max_abs_err == 0 or isa == "x86-avx512"


def _innermost_loop(assembly: str, marker: str) -> list[str]:
    """The instructions of the innermost loop that holds ``marker``: from a label to the first backward
    jump to it."""
    lines = assembly.split("\n")
    labels = {line.split(":")[0]: k for k, line in enumerate(lines) if re.match(r"^\.LBB\d+_\d+:", line)}
    loops = []
    for k, line in enumerate(lines):
        jump = re.match(r"\s+j\w+\s+(\.LBB\d+_\d+)", line)
        if jump and labels.get(jump.group(1), k) < k:
            loops.append(lines[labels[jump.group(1)]:k])
    return min((body for body in loops if any(marker in x for x in body)), key=len)


@pytest.mark.parametrize(("isa", "options", "marker"), [("x86-vnni", CpuOptions(), "vpdpbusd"),
                                                        ("x86-avx512", F32, "vfmadd")])
def test_a_gemm_in_k_blocks_keeps_its_sums_in_registers(isa: str, options: CpuOptions, marker: str) -> None:
    """Within a K block a tile's sums do not touch memory: the block's loop stores nothing (the parallel
    loop's [begin, end) clamped, so that LLVM bounds the indices; fp32's vector indices canonical, so that
    LLVM sees the tile's accesses a constant apart). Not yet where the parallel loop fuses two loops (its
    floordiv indices): there each step stores its sums."""
    for threads in (1, 2):
        _, kernel = compile_layer(GemmShape(64, 64, 1024), isa, CpuTuning(1, 2, 8, (), 64), threads,
                                  load_target("cpu"), options)
        body = _innermost_loop(kernel.assembly(), marker)
        assert sum(marker in x for x in body) >= 16
        assert not [x for x in body if re.search(r"vmov\w+\s+%zmm\d+, .*\)", x)], body


def test_an_epilogue_is_not_fused_into_a_tensorized_k_blocked_gemm() -> None:
    """A tensorized K-blocked GEMM sums into its output itself: a ReLU placed after the instruction's store
    would run on every block's partial sums. Refused, saying why (before: a silent wrong answer)."""
    with pytest.raises(RunError, match="relu epilogue cannot be fused.*an instruction's"):
        run_cpu(GemmShape(40, 48, 300), threads=1, tuning=CpuTuning(1, 2, 8, (), 16), min_time=0.005,
                options=CpuOptions(epilogue="relu"))
    for layer, tuning in [(ConvShape(14, 14, 32, 32), CpuTuning(1, 2, 4, (), 8)),
                          (GemmShape(40, 48, 300), CpuTuning(2, 2, 8, (), 8))]:
        with pytest.raises(ScheduleError, match="k_block blocks a GEMM's reduction, inside a parallel"):
            cpu_layers.schedule(layer, "x86-vnni", tuning, load_target("cpu"))


def test_a_gemm_whose_tile_outgrows_the_cache_is_k_blocked() -> None:
    """PolyDL's long-K GEMM (K = 32768): a 2 x 8 tile's operands over all of K are 1.3 MB; in blocks of 1024
    steps of 4 they are 160 KB, within a quarter of a 1 MB L2, in BLIS's order with the oc blocks parallel.
    With one oc block the row tiles come first. GNMT-1's (K = 4096, 160 KB) is not blocked; nor is a GEMM
    given no cache, nor one whose first loop has too few iterations to share between the threads."""
    long_k = GemmShape(1024, 1024, 32768)
    assert tuning_space(long_k, k_cache=1 << 18)[0] == CpuTuning(1, 2, 8, (), 1024)
    assert tuning_space(GemmShape(1024, 16, 32768), threads=2, k_cache=1 << 18)[0] == \
        CpuTuning(1, 1, 16, (1, 0), 2048)
    assert tuning_space(GemmShape(16, 16, 32768), threads=2, k_cache=1 << 18)[0].k_block == 0
    assert tuning_space(GemmShape(128, 2048, 4096), k_cache=1 << 18)[0].k_block == 0
    assert tuning_space(long_k)[0].k_block == 0


def test_the_wide_layers_keep_their_tunings() -> None:
    # UNIT Table I #1 (35x35 input, 3x3 stride 2: 17 columns) has no dividing tile of 4+ columns; it must not
    # fall back to 1-column tiles
    assert tuning_space(ConvShape(35, 35, 288, 384, 3, 2, 0))[0].unroll_x >= 4


@pytest.mark.parametrize("op", ["gemm", "conv1d"])
def test_int8_runs_vectorized_or_widened_onto_vpmaddwd(op: str) -> None:
    """s8 x s8 (the arm target's sdot dtype) on x86: vpdpbusd is u8 x s8, so x86-vnni runs it on the first
    instruction whose wider operands hold it (AVX-512BW's vpmaddwd, int16 pairs); x86-avx512 computes it
    vectorized. Both bit-exact, their inputs drawn over s8's whole range."""
    from tandem.flows.run import run

    params = {"M": 12, "N": 20, "K": 9} if op == "gemm" else {"W": 20, "IC": 8, "OC": 20, "K": 3}
    r = run(op, load_target("cpu"), {**params, "dtype": "int8", "isa": "x86-avx512", "min_time": 0.005})
    assert r.validated and r.params["dtype"] == "s8 x s8 -> s32"
    assert cpu_layers.inputs(GemmShape(4, 4, 4), 0, CpuOptions("int8"))[0].dtype == "int8"
    widened = run(op, load_target("cpu"), {**params, "dtype": "int8", "min_time": 0.005})
    assert widened.validated and widened.params["instruction"] == "vpmaddwd_512"
    assert set(widened.instructions) == {"vpmaddwd_512"}


FLOAT_LAYERS = [ConvShape(14, 14, 32, 48), ConvShape(9, 9, 5, 20, 3, 2, 0), GemmShape(20, 40, 36)]


@pytest.mark.parametrize("layer", FLOAT_LAYERS, ids=["conv", "conv-s2", "gemm"])
def test_float32_runs_on_avx512_fmas_within_the_rounding_bound(layer: Layer) -> None:
    """PolyDL's fp32 setting: the untensorized schedule with its reduction in a fp_contract pragma, so LLVM
    fuses each multiply and add into vfmadd; the output is within K * 2^-23 * sum|a*b| of numpy's exact
    result and the run is held to the measured FMA peak."""
    r = run_cpu(layer, threads=1, min_time=0.005, options=F32)
    assert r.params["isa"] == "x86-avx512" and r.params["dtype"] == "f32 x f32 -> f32"
    assert r.validated and "K * 2^-23" in r.detail and r.max_abs_err > 0   # fused: not numpy's roundings
    assert r.utilization["fma"] == pytest.approx(r.measured["gops"] / r.measured["peak_gops"])
    assert r.output.dtype == np.float32
    func, kernel = compile_layer(layer, "x86-avx512", tuning_space(layer)[0], 1, load_target("cpu"), F32)
    assert "pragma_fp_contract" in str(func.body)
    assert "fmul contract" in kernel.llvm_ir and "vfmadd" in kernel.assembly()


def test_a_wrong_float_result_is_caught() -> None:
    from tandem.flows.cpu import FLOW

    layer = GemmShape(8, 16, 32)
    job = FLOW.plan("gemm", {"M": 8, "N": 16, "K": 32, "dtype": "float32", "threads": 1}, load_target("cpu"))
    data, weight = cpu_layers.inputs(layer, 0, F32)
    want = cpu_layers.reference(layer, data, weight, options=F32)
    off = want.astype(np.float32)
    off[3, 5] += 1e-3
    check = FLOW.validate(job, [data, weight], off, want)
    assert not check.validated and "1 of 128 outputs outside" in check.detail


@pytest.mark.parametrize("op", ["conv1d", "batch_matmul"])
def test_float32_is_refused_where_the_flow_has_no_float_schedule(op: str) -> None:
    sizes = ["-p", "B=1", "-p", "M=4", "-p", "N=4", "-p", "K=4"] if op == "batch_matmul" else []
    result = runner.invoke(app, ["run", op, "--target", "cpu", "--dtype", "float32", *sizes])
    assert result.exit_code == 2 and "dtype float32 runs conv2d and gemm only" in result.output


@pytest.mark.parametrize(("layer", "dtype", "epilogue"), [
    (ConvShape(14, 14, 32, 32), "uint8", "relu"), (GemmShape(20, 48, 64), "uint8", "relu"),
    (ConvShape(9, 9, 16, 32), "float32", "relu6")], ids=["conv-relu", "gemm-relu", "f32-relu6"])
def test_an_epilogue_is_fused_into_the_operator_and_checked_against_numpy(layer: Layer, dtype: str,
                                                                           epilogue: str) -> None:
    """PolyDL's Algorithm 3 on the CPU flow: the element-wise nest after the operator goes into it (UNIT's
    schedule copies each accumulator out once: right after that copy), the output equals numpy's
    operator followed by the epilogue, and no separate pass over the output is left."""
    without, with_epilogue = CpuOptions(dtype), CpuOptions(dtype, epilogue)
    r = run_cpu(layer, threads=1, min_time=0.005, options=with_epilogue)
    assert r.validated and r.params["epilogue"] == epilogue
    assert (r.output >= 0).all() and (r.output == 0).any()
    # a float bound scales with the products, not the clipped output
    data, weight = cpu_layers.inputs(layer, 0, without)
    np.testing.assert_array_equal(cpu_layers.magnitude(layer, data, weight, options=with_epilogue),
                                  cpu_layers.reference(layer, np.abs(data), np.abs(weight), options=without))
    first, target = tuning_space(layer)[0], load_target("cpu")
    func, _ = compile_layer(layer, r.params["isa"], first, 1, target, with_epilogue)
    assert "max(" in str(func.body)
    plain, _ = compile_layer(layer, r.params["isa"], first, 1, target, without)
    assert str(plain.body).count("for ") == str(func.body).count("for ")   # no loop nest of its own


@pytest.mark.parametrize(("layer", "dtype", "epilogue"), [
    (ConvShape(14, 14, 32, 40), "uint8", "relu"), (GemmShape(20, 40, 64), "uint8", None),
    (ConvShape(9, 9, 16, 32), "float32", "relu6")], ids=["conv-relu", "gemm", "f32-relu6"])
def test_a_bias_add_is_fused_with_the_epilogue_and_checked_against_numpy(layer: Layer, dtype: str,
                                                                         epilogue: str | None) -> None:
    """The bias add (one value per output channel, a third input) and the epilogue are one element-wise
    nest fused by Algorithm 3: the result is numpy's operator + bias, then the epilogue; 40 channels leave
    a block of 16 lanes with 8 padding lanes, which read the packed bias's zeros."""
    biased = CpuOptions(dtype, epilogue, bias=True)
    r = run_cpu(layer, threads=1, min_time=0.005, options=biased)
    assert r.validated and r.params["bias"] is True and r.params["epilogue"] == epilogue
    data, weight, bias = cpu_layers.inputs(layer, 0, biased)
    assert bias.shape == ((layer.oc,) if isinstance(layer, ConvShape) else (layer.n,)) and bias.any()
    without = cpu_layers.reference(layer, data, weight, options=CpuOptions(dtype, epilogue))
    assert not np.array_equal(r.output, without)   # the bias changed the result
    first, target = tuning_space(layer)[0], load_target("cpu")
    func, _ = compile_layer(layer, r.params["isa"], first, 1, target, biased)
    assert [p.name for p in func.params][-2:] == ["bias", func.params[-1].name]
    plain, _ = compile_layer(layer, r.params["isa"], first, 1, target, CpuOptions(dtype))
    assert str(plain.body).count("for ") == str(func.body).count("for ")   # no loop nest of its own


def test_gemm_t_reads_one_bias_value_per_output_row() -> None:
    """gemm_t's output is [N, M/16, 16]: its bias is indexed by the row, not by the lanes."""
    layer, options = GemmShape(20, 40, 64), CpuOptions(bias=True, transposed=True)
    data, weight, bias = cpu_layers.inputs(layer, 1, options)
    func, kernel = compile_layer(layer, "x86-vnni", tuning_space(layer, options=options)[0], 1,
                                 load_target("cpu"), options)
    out = np.zeros(func.params[-1].shape, np.int32)
    kernel(*cpu_layers.pack(layer, data, weight, U8, bias, options=options), out)
    np.testing.assert_array_equal(cpu_layers.unpack(layer, out, options),
                                  cpu_layers.reference(layer, data, weight, bias, options=options))


def test_a_bias_of_the_wrong_shape_or_value_is_refused() -> None:
    from compiler.ops.cpu import Window
    from tandem.flows.flow import RunError
    from tandem.flows.run import run

    with pytest.raises(ValueError, match="a bias is for conv2d, gemm, gemm_t and depthwise"):
        cpu_layers.inputs(Window((8,), 16, 16, 3, 1, 1, 1, False, False), 0, CpuOptions(bias=True))

    with pytest.raises(RunError, match="bias must be true or false"):
        run("gemm", load_target("cpu"), {"M": 8, "N": 16, "K": 8, "bias": 2})
    with pytest.raises(RunError, match=r"\(data, weights, bias\), but got"):
        run("gemm", load_target("cpu"), {"M": 8, "N": 16, "K": 8, "bias": 1},
            inputs=[np.zeros((8, 8), np.uint8), np.zeros((16, 8), np.int8), np.zeros(8, np.int32)])


FUSED = [{"epilogue": "requantize", "ZP": 3, "LO": 0, "HI": 255},
         {"epilogue": "shift", "shift": 9, "LO": -128, "HI": 127}, {"epilogue": "relu", "bias": True}]


@pytest.mark.parametrize("epilogue", FUSED, ids=["requantize", "shift", "relu"])
def test_a_depthwise_conv_fuses_its_bias_and_requantization(epilogue) -> None:
    """A depthwise conv's epilogue (a MobileNet's per-channel requantization) goes into its kernel as a
    conv2d's does: numpy's depthwise sums, plus the bias, requantized; 40 channels leave padding lanes."""
    from tandem.flows.flow import RunError
    from tandem.flows.run import run

    params = {"H": 15, "W": 13, "C": 40, "K": 3, "S": 2, "P": 1, "threads": 1, "min_time": 0.005}
    r = run("depthwise", load_target("cpu"), {**params, **epilogue})
    assert r.validated and r.params["bias"] and r.params["epilogue"] == epilogue["epilogue"]
    assert r.output.min() >= epilogue.get("LO", 0) and r.output.max() <= epilogue.get("HI", 2**31)
    with pytest.raises(RunError, match="fused into conv2d, gemm and depthwise; conv1d gives its int32 sums"):
        run("conv1d", load_target("cpu"), {"W": 20, "IC": 8, "OC": 16, "K": 3, **epilogue})


def test_a_bad_epilogue_is_refused() -> None:
    from tandem.flows.flow import RunError
    from tandem.flows.run import run

    with pytest.raises(RunError, match="unknown epilogue 'gelu'; expected one of relu, relu6"):
        run("gemm", load_target("cpu"), {"M": 8, "N": 16, "K": 8, "epilogue": "gelu"})


def test_a_gemm_whose_output_streams_to_memory_writes_its_rows_in_order() -> None:
    """GNMT-3 (2048 x 4096 x 32): 32 MB of int32 sums, 8 steps of K a tile, 8 bytes written an instruction:
    its output streams to a 32 MB last cache's memory as it is written, so its row tiles go outside its oc
    blocks; long-N (K = 1024) and GNMT-1 (a 1 MB output) keep the ranking's order, as does fp32's GNMT-3."""
    from tandem.flows.cpu_tuning import streams_output

    target, tile = load_target("cpu"), CpuTuning(1, 2, 8)
    u8 = cpu.packing("x86-vnni", "uint8", target.spec, "vpdpbusd_512")
    llc = 32 << 20
    assert streams_output(GemmShape(2048, 4096, 32), tile, u8, CpuOptions(), llc)
    assert not streams_output(GemmShape(1024, 32768, 1024), tile, u8, CpuOptions(), llc)
    assert not streams_output(GemmShape(128, 2048, 4096), tile, u8, CpuOptions(), llc)
    f32 = cpu.packing("x86-avx512", "float32", target.spec)
    assert not streams_output(GemmShape(2048, 4096, 32), tile, f32, F32, llc)


def test_a_streamed_output_is_stored_past_the_caches_and_stays_exact() -> None:
    """``CpuTuning.stream``: the tile's copy-out is marked ``pragma_nontemporal``; each full-line vector
    store to a line-aligned output is a non-temporal one (``vmovnt*``), one to an output off a line an
    ordinary store, and a fence ends the slice; both compute what numpy does (GNMT-3 on 1 thread, 32 MB
    of int32 sums past a 32 MB L3: 545 -> 676 GOPS measured on AMD EPYC znver5), chosen on one thread."""
    from compiler.backend import aligned
    from compiler.ir import Attr
    from compiler.ir.functor import IRVisitor

    target, layer = load_target("cpu"), GemmShape(64, 48, 32)
    tuning = CpuTuning(1, 2, 8, (1, 0), stream=True)
    func, kernel = compile_layer(layer, "x86-vnni", tuning, 2, target)
    marks: list[str] = []

    class _Marks(IRVisitor):
        def visit_Attr(self, s: Attr) -> None:
            marks.append(s.key)
            self.generic_visit(s)

    _Marks().visit(func.body)
    assert "pragma_nontemporal" in marks and str(tuning).endswith(" stream")
    assert "!nontemporal" in kernel.llvm_ir and "fence seq_cst" in kernel.llvm_ir
    assert re.search(r"vmovnt(ps|dq)\s+%zmm", kernel.assembly())
    data, weight = cpu_layers.inputs(layer, 0)
    packed = [aligned.aligned(a) for a in cpu_layers.pack(layer, data, weight, U8)]
    want = cpu_layers.reference(layer, data, weight)
    shape, dtype = func.params[-1].shape, func.params[-1].dtype.numpy
    raw = aligned.zeros(int(np.prod(shape)) + 16, dtype)
    for out in (aligned.zeros(shape, dtype), raw[8:8 + int(np.prod(shape))].reshape(shape)):
        kernel(*packed, out, threads=2)
        np.testing.assert_array_equal(cpu_layers.unpack(layer, out), want)
    for threads in (1, 2):   # past the caches on one thread only: two cores' stores outrun the memory's
        (chosen, *_), how = select(GemmShape(2048, 4096, 32), "x86-vnni", threads, 0, None, target)
        assert chosen.stream == (how["by"] == "polydl, its output streamed past the caches") == \
            (threads == 1 and how["by"].startswith("polydl, its output streamed"))
