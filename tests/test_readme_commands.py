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

from compiler.backend.llvm import host_cpu

ROOT = Path(__file__).resolve().parents[1]
SKIP = {
    "python3 -m venv": "installs into a fresh virtual environment: CI's .ci/run does that",
    ".venv/bin/pip": "installs extras: CI's .ci/run installs the project",
    "bash gpu/": "needs a GPU machine (gpu/run_device_checks.sh)",
}


def host_skip(command: str) -> str | None:
    """Why ``command`` cannot run as written on this CPU (None: it can)."""
    vnni = host_cpu()["avx512vnni"] or host_cpu()["avxvnni"]
    if "_qdq" in command and "--target" in command and not vnni:
        return ("this CPU has no VNNI: onnxruntime's u8 x s8 kernels saturate pair sums at int16 there "
                "(vpmaddubsw), so its run of a QDQ model is not the exact sums Tandem is compared with")
    if "--target cpu" in command and "--relu" in command and not host_cpu()["avx512vnni"]:
        return ("this CPU has no AVX-512 VNNI, so the layer runs the untensorized schedule, whose fused "
                "parallel loop indexes the input non-affinely: PolyDL's fusion refuses the epilogue")
    return None


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
    left_out = [f"{c}: {host_skip(c)}" for c in block if host_skip(c)]
    for command in (c for c in block if not host_skip(c)):
        done = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, command
    if left_out:
        pytest.skip(f"the block's other commands ran; left out on this CPU: {'; '.join(left_out)}")


def test_the_shipped_examples_are_what_the_script_makes() -> None:
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "examples" / "make_examples.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    for name, data in make.files().items():
        assert (ROOT / "examples" / name).read_bytes() == data, f"examples/{name} is stale: rerun the script"
