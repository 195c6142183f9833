"""Tandem's pytest plugin (tandem/regress/plugin.py, a pytest11 entry point): the example suite passes
against its
committed golden cycles, a changed golden value fails naming the test, the case and both values, a missing
ones are all written and fail once, and --tandem-update-golden accepts new values."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "testing"
GOLDEN = Path("golden_cycles") / "test_regressions" / "test_a_gemm_and_an_element_wise_op.json"


def pytest_run(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=where,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A copy of the example suite, outside the repository (its own rootdir)."""
    shutil.copytree(EXAMPLE, tmp_path / "suite")
    return tmp_path / "suite"


def test_the_plugin_is_registered_as_a_pytest_entry_point():
    assert any(e.name == "tandem" and e.value == "tandem.regress.plugin"
               for e in entry_points(group="pytest11"))


def test_the_example_suite_passes_against_its_golden_cycles(suite):
    done = pytest_run(suite)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_a_golden_mismatch_names_the_test_the_case_and_both_values(suite):
    path = suite / GOLDEN
    stored = json.loads(path.read_text())
    real = stored["gemm 16x64x64 on vita"]
    stored["gemm 16x64x64 on vita"] = real - 25
    path.write_text(json.dumps(stored))
    done = pytest_run(suite)
    assert done.returncode == 1
    assert "test_regressions.py::test_a_gemm_and_an_element_wise_op: case 'gemm 16x64x64 on vita': golden " \
           f"cycles {real - 25:,}, now {real:,}" in done.stdout
    assert "2 passed" in done.stdout                                  # the other tests still pass

    done = pytest_run(suite, "--tandem-update-golden")
    assert done.returncode == 0 and json.loads(path.read_text())["gemm 16x64x64 on vita"] == real


def test_cases_without_golden_cycles_are_all_written_and_fail_once(suite):
    """Two new cases in one test: one run writes both and fails naming both (saying the next run compares
    with them); the next run passes."""
    path = suite / GOLDEN
    stored = json.loads(path.read_text())
    gone = {case: stored.pop(case) for case in ("add 64x64 on diannao", "gemm 16x64x64 on vita")}
    path.write_text(json.dumps(stored))
    done = pytest_run(suite, "-k", "element_wise")
    assert done.returncode == 1
    text = " ".join(done.stdout.split())
    assert "2 case(s) had no golden cycles, now written to" in text
    assert all(f"'{case}': {cycles:,}" in text for case, cycles in gone.items())
    assert "The next run compares with these values" in text
    assert gone.items() <= json.loads(path.read_text()).items()
    assert pytest_run(suite, "-k", "element_wise").returncode == 0
