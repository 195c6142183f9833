"""Every command of README.md's ``sh`` blocks runs as written, each block in order from a fresh folder
holding the repository's files, and exits 0; the example programs and images they name are what
examples/make_examples.py makes.

Not run here, each for its reason: the install lines (``python3 -m venv ...``, ``pip install``: CI's own
.ci/run installs from the project's files and runs the test command, and the demo has its own test), and the
GPU check script (it needs a GPU machine)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {
    "python3 -m venv": "installs into a fresh virtual environment: CI's .ci/run does that",
    ".venv/bin/pip": "installs extras: CI's .ci/run installs the project",
    "bash gpu/": "needs a GPU machine (gpu/run_device_checks.sh)",
}


def blocks() -> list[list[str]]:
    """The commands of each ``sh`` block, in order."""
    found = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return [[c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()] for block in found]


def commands() -> list[str]:
    return [c for block in blocks() for c in block]


def test_the_readme_has_commands_and_every_skip_is_one_of_the_reasons_above() -> None:
    cmds = commands()
    assert len(cmds) >= 20
    assert all(c.startswith(("tandem ", "sed ")) or any(c.startswith(k) for k in SKIP) for c in cmds)


@pytest.fixture
def workdir(tmp_path) -> Path:
    """A fresh folder with the repository's inputs linked in: outputs land here, not in the checkout."""
    for name in ("examples", "tests", "isa", "experiments", "gpu"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


RUN = [[c for c in block if not any(c.startswith(k) for k in SKIP)] for block in blocks()]


@pytest.mark.parametrize("block", [b for b in RUN if b], ids=lambda b: b[0][:60])
def test_each_block_runs_as_written_in_order(block: list[str], workdir: Path) -> None:
    """A block is a script: its commands run in order in one folder (a sweep's database, then its report),
    the block on its own (so test workers may take blocks in any order)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in block:
        done = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, command


def test_the_shipped_examples_are_what_the_script_makes() -> None:
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "examples" / "make_examples.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    for name, data in make.files().items():
        assert (ROOT / "examples" / name).read_bytes() == data, f"examples/{name} is stale: rerun the script"
