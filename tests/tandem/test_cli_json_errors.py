"""``--json`` on a failure: every command that takes it prints one JSON object on stdout,
``{"error": ..., "type": ..., "exit": ...}``, whether click refused an option, the command refused its input
or its work; and an option that does not apply to a target is named as the option, not as a parameter."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tandem.cli.app import app

RUNNER = CliRunner()

BAD = {
    "run: an option that does not apply": ["run", "add", "--vthreads", "2"],
    "run: an unknown option": ["run", "gemm", "--bogus"],
    "run: a bad option value": ["run", "gemm", "--target", "vita", "--tune", "x"],
    "run: a -p value that is not an integer": ["run", "gemm", "--target", "vita", "-p", "M=abc"],
    "model: a missing file": ["model", "no-such-model.onnx"],
    "regress: a missing suite": ["regress", "no-such-suite.toml"],
    "sim vita: a missing program": ["sim", "vita", "no-such-program.s"],
    "sim diannao: a missing program": ["sim", "diannao", "no-such-program.s"],
    "sweep: a missing --db": ["sweep", "no-such-sweep.toml"],
    "sweep: a missing sweep file": ["sweep", "no-such-sweep.toml", "--db", "results.db"],
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_failure_under_json_prints_one_json_object_on_stdout(case, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = RUNNER.invoke(app, [*BAD[case], "--json"])
    assert result.exit_code == 2, result.output
    failure = json.loads(result.stdout)
    assert set(failure) == {"error", "type", "exit"} and failure["exit"] == 2
    assert failure["error"] and failure["type"]
    assert "error" in result.stderr.lower()   # the lines on stderr stay


def test_a_json_failure_names_the_error_type_and_says_what_is_wrong() -> None:
    result = RUNNER.invoke(app, ["run", "gemm", "--target", "vita", "-p", "M=abc", "--json"])
    failure = json.loads(result.stdout)
    assert failure == {"error": "-p M: expected an integer, but got 'abc'", "type": "WorkloadError",
                       "exit": 2}


def test_a_run_that_fails_its_check_prints_only_its_report(monkeypatch) -> None:
    """Exit 1 after the report was printed: the report is the one object (no error object after it)."""
    import dataclasses

    from tandem.flows import run as flows_run
    real = flows_run.run
    monkeypatch.setattr(flows_run, "run", lambda *a, **k: dataclasses.replace(real(*a, **k), validated=False))
    result = RUNNER.invoke(app, ["run", "add", "--shape", "64", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["validated"] is False


@pytest.mark.parametrize("args, says", [
    (["add", "--vthreads", "2"], "DianNao add: --vthreads does not apply here; it takes -p cores, --dtype"),
    (["conv2d", "--target", "vita", "--no-partition"], "vita conv2d: --no-partition does not apply here"),
    (["gemm", "--target", "cpu", "--vthreads", "2"], "cpu gemm: --vthreads does not apply here"),
])
def test_an_option_that_does_not_apply_to_the_target_is_named_as_the_option(args, says) -> None:
    result = RUNNER.invoke(app, ["run", *args])
    assert result.exit_code == 2 and says in result.output and "parameter" not in result.output
