"""docs/isa-extension.md: every ``tandem`` command of its ``sh`` blocks runs as written and exits 0, and the
figures it quotes are what the commands produce."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tandem.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "isa-extension.md"
RUNNER = CliRunner()


def commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)
    lines = [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def invoke(command: str, monkeypatch) -> str:
    monkeypatch.chdir(ROOT)
    words = shlex.split(command, comments=True)   # a trailing "# ..." is a shell comment
    assert words[0] == "tandem", command
    result = RUNNER.invoke(app, words[1:])
    assert result.exit_code == 0, f"{command}\n{result.output}"
    return result.output


@pytest.mark.parametrize("command", commands())
def test_the_tutorials_commands_run_as_written(command: str, monkeypatch) -> None:
    invoke(command, monkeypatch)


def test_the_figures_the_tutorial_quotes(monkeypatch) -> None:
    runs = [c for c in commands() if c.startswith("tandem run")]
    cycles = [json.loads(invoke(c + " --json", monkeypatch))["cycles"] for c in runs[:4]]
    text = DOC.read_text()
    assert f"{cycles[1]:,} against {cycles[0]:,}" in text      # the conv layer with and without ALU_CLIP
    assert f"{cycles[3]:,} against {cycles[2]:,}" in text      # add_relu with and without vaddrelu
