"""``tandem regress``: the example suite passes against its committed baseline; a slower schedule is a
regression naming the case and both cycle counts (exit 1); a tolerance admits it; improvements and new or
missing cases are listed; bad suites and baselines are refused naming the line or the case (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.regress.suite import RegressError, compare, read_suite

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "regress" / "experiments.toml"

SUITE = """\
[suite]
name = "mine"

[[targets]]
target = "vita"
name = "vita"

[[cases]]
layer = "conv2d"
params = {{ H = 14, W = 14, IC = 64, OC = 64, K = 3, S = 1, P = 1, vthreads = {vthreads} }}
name = "C9 at 14x14x64"

[[cases]]
layer = "gemm"
params = {{ M = 16, N = 64, K = 64 }}
"""


def regress(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tandem", "regress", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_the_example_suite_passes_against_its_committed_baseline():
    done = regress(str(EXAMPLE), "--jobs", "2", "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["passed"] and report["cases"] == 30
    assert len(report["unchanged"]) == 30 and not report["new"] and not report["gone"]
    assert all(r["validated"] for r in report["results"].values())


def test_a_slower_schedule_is_a_regression_with_the_case_and_both_cycle_counts(tmp_path):
    suite = tmp_path / "mine.toml"
    suite.write_text(SUITE.format(vthreads=2))
    assert regress(str(suite), "--update", "--jobs", "1").returncode == 0
    baseline = json.loads((tmp_path / "mine.baseline.json").read_text())
    fast = baseline["cases"]["vita | C9 at 14x14x64"]["cycles"]

    suite.write_text(SUITE.format(vthreads=0))       # the same layer without virtual threads: slower
    done = regress(str(suite), "--jobs", "1", "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    (regression,) = report["regressions"]
    slow = report["results"]["vita | C9 at 14x14x64"]["cycles"]
    assert slow > fast
    assert regression["case"] == "vita | C9 at 14x14x64"
    assert (regression["old_cycles"], regression["new_cycles"]) == (fast, slow)
    table = regress(str(suite), "--jobs", "1")
    assert table.returncode == 1 and "REGRESSION" in table.stdout and f"{fast:,}" in table.stdout \
        and f"{slow:,}" in table.stdout
    pct = 100 * (slow - fast) / fast
    assert regress(str(suite), "--jobs", "1", "--tolerance", f"{pct + 1:.1f}").returncode == 0

    suite.write_text(SUITE.format(vthreads=2).replace('name = "C9 at 14x14x64"', 'name = "renamed"'))
    report = json.loads(regress(str(suite), "--jobs", "1", "--json").stdout)
    assert report["new"] == ["vita | renamed"] and report["gone"] == ["vita | C9 at 14x14x64"]


def test_compare_lists_regressions_improvements_and_cases_that_stop_validating():
    old = {"a": {"validated": True, "cycles": 100}, "b": {"validated": True, "cycles": 100},
           "c": {"validated": True, "cycles": 100}, "d": {"validated": True, "cycles": 100}}
    new = {"a": {"validated": True, "cycles": 101}, "b": {"validated": True, "cycles": 90},
           "c": {"validated": False, "cycles": 100, "error": "3 elements differ"},
           "d": {"validated": True, "cycles": 100}}
    out = compare(new, old)
    assert [r["case"] for r in out.regressions] == ["a", "c"]
    assert "no longer validates: 3 elements differ" in out.regressions[1]["why"]
    assert [r["case"] for r in out.improvements] == ["b"] and out.unchanged == ["d"] and not out.passed
    assert compare(new, old, tolerance_pct=1.0).regressions[0]["case"] == "c"


def test_a_case_slower_within_the_tolerance_is_tolerated_not_unchanged():
    """``--tolerance 100``: a case whose cycles doubled passes, but it is listed as slower, not unchanged."""
    old = {"a": {"validated": True, "cycles": 100}, "b": {"validated": True, "cycles": 100}}
    new = {"a": {"validated": True, "cycles": 180}, "b": {"validated": True, "cycles": 100}}
    out = compare(new, old, tolerance_pct=100.0)
    assert out.passed and out.unchanged == ["b"]
    assert out.tolerated == [{"case": "a", "old_cycles": 100, "new_cycles": 180, "change_pct": 80.0}]
    assert out.to_json()["tolerated"] == out.tolerated


@pytest.mark.parametrize(("text", "message"), [
    (SUITE.format(vthreads=0).replace('layer = "gemm"', 'layer = "frobnicate"'),
     r"mine.toml:13: vita: no schedule for operator .frobnicate."),
    (SUITE.format(vthreads=0).replace('target = "vita"', 'target = "tpu"'),
     r"mine.toml:4: target must be one of vita, diannao"),
    (SUITE.format(vthreads=0) + '\n[[cases]]\nlayers = "resnet18"\ntargets = ["gpu"]\n',
     r"mine.toml:17: no target 'gpu' in the suite; its targets are vita"),
    (SUITE.format(vthreads=0) + '\n[[cases]]\nonnx = "missing.onnx"\n',
     r"mine.toml:17: the ONNX file .*missing.onnx does not exist"),
    (SUITE.format(vthreads=0).replace("[[targets]]", "[[targets]]\nspec = \"nowhere.toml\""),
     r"mine.toml:\d+: the file .*nowhere.toml does not exist"),
    (SUITE.format(vthreads=0) + '\n[[cases]]\nlayer = "gemm"\nparams = { M = 16, N = 64, K = 64 }\n',
     r"case 'vita \| gemm:M=16,N=64,K=64' runs twice"),
])
def test_a_bad_suite_is_refused_naming_the_line_or_the_case(tmp_path, text, message):
    suite = tmp_path / "mine.toml"
    suite.write_text(text)
    with pytest.raises(RegressError, match=message):
        read_suite(suite)
    done = regress(str(suite), "--update")
    assert done.returncode == 2 and "error:" in done.stderr


def test_a_baseline_of_another_suite_or_none_at_all_is_refused(tmp_path):
    suite = tmp_path / "mine.toml"
    suite.write_text(SUITE.format(vthreads=0))
    done = regress(str(suite))
    assert done.returncode == 2 and "cannot read the baseline" in done.stderr and "--update" in done.stderr
    done = regress(str(suite), "--baseline", str(EXAMPLE.with_name("experiments.baseline.json")))
    assert done.returncode == 2
    assert "this baseline is of suite 'experiments', not 'mine'" in done.stderr


def test_an_operator_of_your_own_and_an_isa_extension_run_as_cases(tmp_path):
    """A case names a FILE.py:NAME operator (beside the suite) on a target whose spec extends the built-in
    one: the regression suite of an ISA extension."""
    ext = ROOT / "tests" / "extensions"
    shutil.copy(ext / "my_ops.py", tmp_path / "my_ops.py")
    shutil.copy(ext / "diannao_vaddrelu.toml", tmp_path / "vaddrelu.toml")
    (tmp_path / "ext.toml").write_text(
        '[suite]\nname = "ext"\n\n[[targets]]\ntarget = "diannao"\nname = "plain"\n\n[[targets]]\n'
        'target = "diannao"\nspec = "vaddrelu.toml"\nname = "fused"\n\n[[cases]]\n'
        'layer = "my_ops.py:add_relu"\nparams = { n = 4096, rows = 3, cores = 1 }\nname = "add_relu"\n')
    done = regress(str(tmp_path / "ext.toml"), "--update", "--jobs", "1", "--json", cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)["results"]
    assert results["plain | add_relu"]["validated"] and results["fused | add_relu"]["validated"]
    assert "vaddrelu" in results["fused | add_relu"]["instructions"]
    assert results["fused | add_relu"]["cycles"] < results["plain | add_relu"]["cycles"]
