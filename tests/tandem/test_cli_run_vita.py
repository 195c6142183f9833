"""``tandem run conv2d|gemm --target vita``: the JSON contract, virtual threads, configs, tuning, exit 2 on
bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from compiler.ops.nn import ConvShape, GemmShape
from tandem.cli.app import app
from tandem.flows.targets import load_target
from tandem.flows.vita import roofline_cycles, run_vita

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


def test_tuning_does_not_spend_a_run_on_a_tiling_the_model_cannot_tell_from_one_already_tried() -> None:
    """The same tile over the other thread axis, at the same estimate, is one guess of the cost model:
    tuning measures distinct candidates instead."""
    from compiler.ops import vita
    from tandem.flows.vita import machine_costs
    target = load_target("vita", "tvm-paper")
    layer = ConvShape(14, 14, 32, 64, 3, 1, 1)
    report = run_json("conv2d", *CONV, "--vthreads", "2", "--tune", "3", "--config", "tvm-paper")
    tried = [vita.Tiling(**c["tiling"]) for c in report["params"]["tuned"]]
    costs = machine_costs(target)
    guesses = {(t.rows, t.oc_block, t.ic_block, vita.estimate_cycles(layer, t, target.spec, costs))
               for t in tried}
    assert len(guesses) == len(tried) == 3


def test_roofline_is_the_larger_of_peak_compute_and_compulsory_traffic() -> None:
    target = load_target("vita", "tvm-paper")
    conv = ConvShape(56, 56, 64, 64, 1, 1, 0)   # 1x1: memory-bound on this machine
    traffic = 56 * 56 * 64 * 2 + 64 * 64
    assert roofline_cycles(conv, target) == -(-traffic // target.spec.params["DRAM_BYTES_PER_CYCLE"])
    gemm = GemmShape(256, 256, 256)
    assert roofline_cycles(gemm, target) == 256 ** 3 // 256


def test_runs_are_deterministic() -> None:
    layer = ConvShape(8, 8, 32, 32)
    first, second = run_vita(layer, 2), run_vita(layer, 2)
    assert first.cycles == second.cycles and first.instructions == second.instructions


@pytest.mark.parametrize("args,message", [
    (["sub"], "no schedule for operator 'sub'"),
    (["relu", "-p", "C=4"], "vita relu: H must be given"),
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


@pytest.mark.parametrize("op,params", [
    ("conv2d", ["-p", "H=8", "-p", "W=8", "-p", "IC=3", "-p", "OC=16"]),     # an RGB first layer
    ("conv2d", ["-p", "H=6", "-p", "W=6", "-p", "IC=24", "-p", "OC=40", "-p", "K=1", "-p", "P=0"]),
    ("gemm", ["-p", "M=5", "-p", "N=15", "-p", "K=20"]),
])
def test_channels_that_are_not_whole_blocks_are_padded_and_computed(op: str, params: list[str]) -> None:
    """Seed 001's COM: the layouts pad the channels to whole GEMM blocks with zeros and the machine computes
    the extra lanes (which come out 0), instead of refusing the layer."""
    report = run_json(op, *params)
    assert report["validated"] is True and report["max_abs_err"] == 0


def test_a_batch_that_is_not_a_whole_block_is_padded_too() -> None:
    """On a machine that multiplies 2 rows per micro-op (LOG_BATCH = 1), a GEMM of 5 rows runs 3 row
    blocks, the last one half padding."""
    import dataclasses

    from sim.vita.config import load_config

    config = load_config("vta-default")
    params = {**config.isa_params, "LOG_BATCH": 1}
    target = load_target("vita", dataclasses.replace(config, isa_params=params))
    report = run_vita(GemmShape(5, 15, 20), 0, target)
    assert report.validated and report.output.shape == (3, 1, 2, 16)
    assert not report.output[2, :, 1].any() and not report.output[..., 15:].any()   # the padding lanes


def test_the_padding_lanes_of_given_inputs_must_be_zero() -> None:
    import numpy as np

    from compiler.ops import vita
    from tandem.flows.flow import RunError

    layer = GemmShape(4, 16, 20)
    rng = np.random.default_rng(0)
    a, w = rng.integers(-128, 128, (4, 20), dtype=np.int8), rng.integers(-128, 128, (16, 20), dtype=np.int8)
    data, weight = vita.pack_dense(a, w, load_target("vita").spec)
    assert data.shape == (4, 2, 1, 16) and run_vita(layer, inputs=[data, weight]).validated
    data[0, 1, 0, 7] = 1   # lane 23 of 20
    with pytest.raises(RunError, match=r"the lanes of the data past the layer's channels \(the padding to "
                       r"whole blocks of 16\) must be 0"):
        run_vita(layer, inputs=[data, weight])
