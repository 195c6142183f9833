"""x86 plus vpdpwssd from a spec file alone (tests/extensions/x86_vpdpwssd.toml): an int16 GEMM and conv
compiled for this CPU select it from its semantics, LLVM calls the intrinsic the spec names, and the result,
run for real, is bit-exact with numpy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compiler.backend.llvm import host_cpu
from tandem.cli.app import app

VPDPWSSD = Path(__file__).parent / "x86_vpdpwssd.toml"
RUNNER = CliRunner()
pytestmark = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")
LAYERS = {
    "gemm": (["-p", "M=24", "-p", "N=48", "-p", "K=70"], 24 * 48 * 70 // 32),   # 32 multiply-adds each
    "conv2d": (["-p", "H=9", "-p", "W=9", "-p", "IC=6", "-p", "OC=32", "-p", "K=3", "-p", "P=1"],
               32 * 9 * 9 * 6 * 9 // 32),
}


def run(op: str, *args: str) -> tuple[int, str]:
    result = RUNNER.invoke(app, ["run", op, *LAYERS[op][0], "--target", "cpu", "--dtype", "i16", "--threads",
                                 "1", *args, "--json"])
    return result.exit_code, result.output


@pytest.mark.parametrize("op", list(LAYERS))
def test_an_int16_operator_selects_vpdpwssd_from_the_spec_and_runs_bit_exact(op: str) -> None:
    code, output = run(op, "--spec", str(VPDPWSSD))
    assert code == 0, output
    report = json.loads(output)
    assert report["validated"] and report["max_abs_err"] == 0 and report["detail"] == "bit-exact with numpy"
    assert report["instructions"] == {"vpdpwssd_512": LAYERS[op][1]}
    assert report["params"]["instruction"] == "vpdpwssd_512"
    assert report["params"]["dtype"] == "s16 x s16 -> s32"
    assert report["scalar_fallback"] == 0 and report["gops"] > 0


def test_without_the_extension_int16_is_refused_for_tensorization_and_runs_vectorized() -> None:
    code, output = run("gemm")
    assert code == 2 and "no instruction that sums int16 x int16 products" in output
    code, output = run("gemm", "--isa", "x86-avx512")
    assert code == 0, output
    report = json.loads(output)
    assert report["validated"] and report["instructions"] == {}
