"""The cuda target in the one run flow, on any machine: configs, parameter checks before any work, and what
``tandem run --target cuda`` says where there is no GPU; the experiment's compile-only mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compiler.backend import cuda_runtime
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import TargetError, load_target

ROOT = Path(__file__).resolve().parents[2]
NO_GPU = cuda_runtime.unavailable()


def test_the_configs_name_the_architecture_and_every_value_has_a_source():
    from sim.core.config import uncommented_values
    from tandem.flows.cuda_config import CONFIGS_DIR

    assert load_target("cuda").config.arch == "sm_90"
    assert load_target("cuda", "sm80").config.arch == "sm_80"
    for path in CONFIGS_DIR.glob("*.toml"):
        assert uncommented_values(path) == [], path


def test_a_spec_of_another_family_is_refused():
    with pytest.raises(TargetError, match="needs a spec of the 'cuda' ISA family"):
        load_target("cuda", spec=ROOT / "isa" / "specs" / "x86.toml")


@pytest.mark.parametrize(("params", "message"), [
    ({"M": 64, "N": 64, "K": 64, "dtype": "int8"}, "dtype must be f16"),
    ({"M": 64, "N": 64, "K": 64, "Q": 3}, "Q"),
    ({"M": 0, "N": 64, "K": 64}, "M"),
])
def test_bad_parameters_are_refused_before_any_work(params, message):
    with pytest.raises(RunError, match=message):
        run("gemm", load_target("cuda"), params)


def test_an_unknown_operator_is_refused_naming_the_ones_there_are():
    with pytest.raises(RunError, match="expected one of gemm, conv2d"):
        run("softmax", load_target("cuda"), {})


@pytest.mark.skipif(NO_GPU is None, reason="this machine has a GPU: the run succeeds (test_cuda_device.py)")
def test_without_a_gpu_tandem_run_compiles_and_says_why_it_cannot_run():
    done = subprocess.run([sys.executable, "-m", "tandem", "run", "gemm", "--target", "cuda", "-p", "M=64",
                           "-p", "N=64", "-p", "K=64", "--json"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 2
    assert "the kernel compiled to PTX for sm_90" in done.stderr and "cannot run here" in done.stderr


def test_the_experiment_compiles_its_quick_workloads_without_a_gpu():
    command = ["experiments/unit_gpu.py", "--quick", "--compile-only", "--tune", "2"]
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("wmma.mma") == 4


def test_the_experiment_runs_its_groups_in_the_order_named_and_refuses_unknown_ones():
    command = ["experiments/unit_gpu.py", "--quick", "--compile-only", "--tune", "1", "--groups"]
    done = subprocess.run([sys.executable, *command, "gemm,table1"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert 0 <= done.stdout.index("gemm 512:") < done.stdout.index("table1 #5:")
    done = subprocess.run([sys.executable, *command, "table1,gemms"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 2 and "--groups" in done.stdout and "'table1,gemms'" in done.stdout


def test_tandem_compile_prints_the_ptx_and_checks_it_in_the_interpreter(tmp_path):
    out = tmp_path / "gemm.ptx"
    command = ["compile", "gemm", "--target", "cuda", "-p", "M=48", "-p", "N=40", "-p", "K=72", "--run",
               "--asm", str(out)]
    done = subprocess.run([sys.executable, "-m", "tandem", *command], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cuda.wmma_m16n16k16_f16_f32(a=A_shared[" in done.stdout      # the tensorized loop IR
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32" in out.read_text()
    assert "interpreter: match: every output within K * 2^-23" in done.stdout
    assert "ptxas (sm_90): assembles" in done.stdout or "ptxas (sm_90): not run" in done.stdout
