"""Start-up of the command line (issue 49): ``tandem --help`` and a trivial VITA run,
``tandem run gemm --target vita -p M=16 -p N=16 -p K=16``, each a fresh process as a user starts it (wall
time of the whole process: interpreter, imports, compile, simulate, check, report). ``extra_info`` records
whether Python may cache bytecode here (``PYTHONDONTWRITEBYTECODE`` set: every module is compiled from source
on every start, ~0.15 s more).

    pytest benchmarks/test_startup.py --benchmark-only
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COMMANDS = {
    "help": ["--help"],
    "vita-gemm-16": ["run", "gemm", "--target", "vita", "-p", "M=16", "-p", "N=16", "-p", "K=16"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_startup(benchmark, command: str) -> None:
    argv = [sys.executable, "-m", "tandem", *COMMANDS[command]]

    def start() -> None:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]

    start()   # the first start may compile and cache the modules' bytecode
    benchmark.pedantic(start, rounds=7, iterations=1)
    benchmark.extra_info.update(command="tandem " + " ".join(COMMANDS[command]),
                                bytecode_cached=not os.environ.get("PYTHONDONTWRITEBYTECODE"))
