"""Tests of the ``tandem`` command line (tandem/cli/app.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import tandem.cli.demo
from tandem.cli.app import app
from tandem.cli.demo import Row
from tandem.flows.check import Check

runner = CliRunner()


def test_help_describes_tandem() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    assert "Tandem" in result.output
    assert "demo" in result.output and "version" in result.output


def _commands(group, prefix=""):
    for name, command in getattr(group, "commands", {}).items():
        yield prefix + name, command
        yield from _commands(command, prefix + name + " ")


def test_every_command_summary_is_one_sentence_the_help_wraps_at_word_boundaries() -> None:
    """The commands list shows each command's first help paragraph with its line breaks kept: one line
    each, so that no description breaks mid-sentence."""
    import typer.main
    for name, command in _commands(typer.main.get_command(app)):
        summary = (command.help or "").strip().split("\n\n")[0]
        assert summary and "\n" not in summary, f"tandem {name}: {summary!r}"


def test_help_states_the_exit_statuses_once_for_every_command() -> None:
    text = " ".join(runner.invoke(app, ["--help"]).output.split())
    assert "Exit status, for every command: 0 success; 1 the work ran and failed" in text
    assert "2 bad input, refused before any work" in text


def test_run_help_shows_the_default_target_and_every_operator_s_keys() -> None:
    text = " ".join(runner.invoke(app, ["run", "--help"]).output.replace("│", " ").split())
    assert "[--target diannao|vita|cpu|cuda (default diannao)]" in text
    for keys in ("batch_matmul: B M N K", "softmax, layer_norm, gelu: R D", "clip: C H W LO HI",
                 "max_pool, avg_pool: C H W K S", "conv3d: D H W IC OC K S P"):
        assert keys in text, keys


def test_version_prints_tandem_and_runtime_versions() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"tandem {tandem.__version__}"
    for name in ("python", "numpy", "simpy", "llvmlite"):
        assert any(line.startswith(f"{name} ") for line in lines), result.output


def test_demo_exits_nonzero_when_a_check_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = [
        Row("good", Check(True, 0.0, "fine")),
        Row("bad", Check(False, float("nan"), "ValueError: expected [4], but got [5]")),
    ]
    monkeypatch.setattr(tandem.cli.demo, "run_demo", lambda: checks)
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output and "PASS" in result.output
    assert "expected [4], but got [5]" in result.output  # brackets are text, not rich markup
    assert "1 of 2 checks failed" in result.output


def test_demo_exits_zero_when_all_checks_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = [
        Row("one", Check(True, 0.0, "fine"), ir="for i in range(4):\n  C[i] = A[i]"),
        Row("two", Check(True, 0.0, "ok")),
    ]
    monkeypatch.setattr(tandem.cli.demo, "run_demo", lambda: checks)
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output
    assert "all 2 checks passed" in result.output
    assert "C[i] = A[i]" not in result.output
    shown = runner.invoke(app, ["demo", "--show-ir"])
    assert shown.exit_code == 0, shown.output
    assert "C[i] = A[i]" in shown.output


def test_demo_exits_nonzero_when_no_check_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tandem.cli.demo, "run_demo", lambda: [])
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 1, result.output


def test_real_demo_passes() -> None:
    """The real demo against the compiler: every check passes (needs compiler/ to be in place)."""
    result = runner.invoke(app, ["demo", "--show-ir"])
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output
