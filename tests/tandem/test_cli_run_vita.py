"""``tandem run conv2d|gemm --target vita``: the JSON contract, virtual threads, configs, tuning, exit 2 on
bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tandem.cli import app
from tandem.targets import load_target
from tandem.vita_run import VitaLayer, roofline_cycles, run_vita

RUNNER = CliRunner()
CONTRACT = {"op", "target", "params", "validated", "max_abs_err", "cycles", "instructions", "scalar_fallback",
            "utilization", "wall_s"}
CONV = ["-p", "H=14", "-p", "W=14", "-p", "IC=32", "-p", "OC=64"]


def run_json(*args: str) -> dict:
    result = RUNNER.invoke(app, ["run", *args, "--target", "vita", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("vthreads", [0, 2])
@pytest.mark.parametrize("config", ["vta-default", "tvm-paper"])
def test_conv2d_validates_bit_exact_on_both_configs(vthreads: int, config: str) -> None:
    report = run_json("conv2d", *CONV, "--vthreads", str(vthreads), "--config", config)
    assert CONTRACT <= set(report)
    assert report["target"] == "vita" and report["params"]["config"] == config
    assert report["params"]["vthreads"] == vthreads and report["params"]["tiling"]["vthreads"] == vthreads
    assert report["validated"] is True and report["max_abs_err"] == 0.0 and report["scalar_fallback"] == 0
    assert report["instructions"]["GEMM"] > 0 and report["instructions"]["FINISH"] == 1
    assert 0 < report["utilization"]["gemm"] <= 1
    assert report["cycles"] >= report["roofline_cycles"] > 0


@pytest.mark.parametrize("m,n,k", [(16, 16, 16), (64, 256, 256), (8, 64, 512)])
def test_gemm_shapes_validate_with_and_without_threads(m: int, n: int, k: int) -> None:
    for vthreads in (0, 2):
        report = run_json("gemm", "-p", f"M={m}", "-p", f"N={n}", "-p", f"K={k}", "--vthreads", str(vthreads))
        assert report["validated"] is True, report
        assert {"M": m, "N": n, "K": k}.items() <= report["params"].items()


def test_tuning_measures_candidates_and_keeps_the_fastest() -> None:
    report = run_json("conv2d", *CONV, "--vthreads", "2", "--tune", "3", "--config", "tvm-paper")
    tuned = report["params"]["tuned"]
    assert len(tuned) == 3
    best = min(tuned, key=lambda c: c["cycles"])
    assert report["params"]["tiling"] == best["tiling"] and report["cycles"] == best["cycles"]


def test_roofline_is_the_larger_of_peak_compute_and_compulsory_traffic() -> None:
    target = load_target("vita", "tvm-paper")
    conv = VitaLayer.conv2d(56, 56, 64, 64, 1, 1, 0)   # 1x1: memory-bound on this machine
    traffic = 56 * 56 * 64 * 2 + 64 * 64
    assert roofline_cycles(conv, target) == -(-traffic // target.spec.params["DRAM_BYTES_PER_CYCLE"])
    gemm = VitaLayer.gemm(256, 256, 256)
    assert roofline_cycles(gemm, target) == 256 ** 3 // 256


def test_runs_are_deterministic() -> None:
    layer = VitaLayer.conv2d(8, 8, 32, 32)
    first, second = run_vita(layer, 2), run_vita(layer, 2)
    assert first.cycles == second.cycles and first.instructions == second.instructions


@pytest.mark.parametrize("args,message", [
    (["relu"], "no schedule for operator 'relu'"),
    (["conv2d", "-p", "H=8", "-p", "W=8", "-p", "IC=24"], "IC = 24 is not a multiple of the GEMM block 16"),
    (["conv2d", "-p", "M=8"], "vita conv2d: unknown parameter 'M'"),
    (["gemm", "--shape", "8x8"], "gemm takes -p M= N= K="),
    (["gemm", "-p", "M=8", "--config", "no-such-config"], "no-such-config"),
])
def test_bad_input_exits_2_with_one_error_line(args: list[str], message: str) -> None:
    result = RUNNER.invoke(app, ["run", *args, "--target", "vita"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_thread_count_that_does_not_cut_the_layer_falls_back_and_says_so() -> None:
    report = run_json("conv2d", "-p", "H=7", "-p", "W=7", "-p", "IC=16", "-p", "OC=32", "--vthreads", "3")
    p = report["params"]
    assert report["validated"] and p["vthreads"] == 3 and p["vthreads_used"] == 2 == p["tiling"]["vthreads"]
    result = RUNNER.invoke(app, ["run", "conv2d", "-p", "H=7", "-p", "W=7", "-p", "IC=16", "-p", "OC=32",
                                 "--vthreads", "3", "--target", "vita"])
    assert result.exit_code == 0 and "2 virtual threads, 3 asked" in " ".join(result.output.split())
