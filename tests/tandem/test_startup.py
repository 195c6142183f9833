"""A command imports what it uses and nothing more (issue 49): ``tandem --help`` starts without numpy, the
compiler or a simulator; ``tandem run --target vita`` without the other targets' backends and simulators, the
polyhedral analysis (islpy), LLVM, onnx, matplotlib or pydantic. Each case runs in a fresh interpreter and
reads ``sys.modules`` after the command: a module imported at the top of a command's module, or a package
``__init__`` that imports its siblings, fails it by name. (The start-up times themselves are measured in
benchmarks/test_startup.py, not here.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys
from tandem.cli.app import app
try:
    app(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""

#: what a VITA run does not use: other targets' backends and simulators, and the heavy libraries
NOT_FOR_VITA = ("islpy", "matplotlib", "onnx", "onnxruntime", "llvmlite", "pydantic", "torch", "tvm", "ray",
                "egglog", "compiler.backend.llvm", "compiler.backend.diannao", "compiler.backend.nvptx",
                "compiler.ops.cpu", "compiler.ops.diannao", "compiler.analysis.poly_rank",
                "sim.diannao.machine", "tandem.network", "tandem.flows.cpu", "tandem.flows.diannao",
                "simpy", "numpy.ma")
#: what printing the command list does not use: all the work, and numpy
NOT_FOR_HELP = ("numpy", "compiler.ir", "compiler.te", "compiler.passes", "compiler.backend", "isa.asm",
                "isa.spec", "sim.vita.machine", "sim.diannao.machine", "simpy", "tandem.flows.catalogue",
                "tandem.flows.run", *NOT_FOR_VITA)


def imported_by(*argv: str) -> set[str]:
    """The modules loaded after ``tandem ARGV`` runs in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def offenders(modules: set[str], barred: tuple[str, ...]) -> list[str]:
    """The barred names that ``modules`` holds, as a package or any of its submodules."""
    return sorted(name for name in barred if any(m == name or m.startswith(name + ".") for m in modules))


def test_the_help_imports_no_compiler_simulator_or_numpy() -> None:
    modules = imported_by("--help")
    assert offenders(modules, NOT_FOR_HELP) == []
    assert "tandem.cli.run" in modules   # the check is live: the command modules themselves were imported


@pytest.mark.parametrize("op", ["gemm", "conv2d"])
def test_a_vita_run_imports_no_other_target_nor_heavy_library(op: str) -> None:
    params = ["-p", "M=16", "-p", "N=16", "-p", "K=16"] if op == "gemm" else \
        ["-p", "H=8", "-p", "W=8", "-p", "IC=16", "-p", "OC=16"]
    modules = imported_by("run", op, "--target", "vita", *params)
    assert offenders(modules, NOT_FOR_VITA) == []
    assert {"sim.vita.machine", "compiler.backend.vita"} <= modules   # it ran VITA's compiler and simulator


def test_the_check_names_what_a_package_import_drags_in() -> None:
    """The rule the tests above apply: a barred package is found through any of its submodules."""
    assert offenders({"islpy._isl", "numpy"}, ("islpy", "llvmlite", "numpy")) == ["islpy", "numpy"]
    assert offenders({"compiler.backend.vita"}, ("compiler.backend.diannao",)) == []
