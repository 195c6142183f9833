"""Shared pytest configuration: the ``golden`` fixture, ``--update-golden``, hypothesis profiles, and the
kernel cache off (``TANDEM_CACHE_DIR=off``: the tests' runs, CLI processes included, compile every kernel).

Golden files live at ``tests/golden/<test_file_stem>/<test_name>.txt`` (the test name with every
character outside ``[A-Za-z0-9_.-]`` replaced by ``_``). A test calls ``golden.check(text)``:
- the file matches: the test goes on;
- the file differs: the test fails with a unified diff (expected = golden file, actual = text);
- ``pytest --update-golden``: the file is (re)written and the test goes on;
- the file is missing: it is written and the test fails, asking for ``pytest --update-golden``
  after review, so a missing golden file is never a silent pass.

Hypothesis uses the "ci" profile (derandomized, no deadline) when the ``CI`` environment variable is
set, and the "dev" profile (random, no deadline) otherwise.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"

# every run in the tests compiles its kernels: none is read from, or written to, the user's kernel cache
# (tandem/flows/kernel_cache.py; tests/tandem/test_kernel_cache.py gives it folders of its own)
os.environ["TANDEM_CACHE_DIR"] = "off"

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files under tests/golden/ with the text the tests produce",
    )


def _sanitize(name: str) -> str:
    """A test name usable as a file name: characters outside [A-Za-z0-9_.-] become '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _normalize(text: str) -> str:
    """Golden text ends with exactly one newline, so editors and git do not cause diffs."""
    return text.rstrip("\n") + "\n"


class Golden:
    """Compares a test's text output with its golden file (see the module docstring)."""

    def __init__(self, path: Path, update: bool) -> None:
        self.path = path
        self.update = update

    def check(self, text: str) -> None:
        actual = _normalize(text)
        if self.update or not self.path.exists():
            missing = not self.path.exists()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(actual, encoding="utf-8", newline="\n")
            if missing and not self.update:
                pytest.fail(
                    f"golden file {self._shown()} was missing; it has been written now. "
                    "Review it, then run `pytest --update-golden` to accept it.",
                    pytrace=False,
                )
            return
        expected = self.path.read_text(encoding="utf-8")
        if actual != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    fromfile=f"{self._shown()} (golden)",
                    tofile="actual",
                )
            )
            raise AssertionError(
                f"output differs from golden file {self._shown()}; "
                "if the change is intended, run `pytest --update-golden` and review the diff\n"
                + diff
            )

    def _shown(self) -> str:
        try:
            return str(self.path.relative_to(GOLDEN_DIR.parent.parent))
        except ValueError:
            return str(self.path)


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """``golden.check(text)`` against ``tests/golden/<test_file_stem>/<test_name>.txt``."""
    path = GOLDEN_DIR / request.path.stem / f"{_sanitize(request.node.name)}.txt"
    return Golden(path, update=request.config.getoption("--update-golden"))


@pytest.fixture
def seed_001_memcpy():
    """Seed 001's MEMCPY example (Sec. IV-C), lowered: a (4, 14) int32 copy split over 4 cores bound to
    ``tid``, each core staging its 4 columns of A in NMEM with a MEMCPY mark, so the last core's copy is
    guarded by ``tid*4 + j < 14``."""
    from compiler import te
    from compiler.pipeline import build
    from compiler.schedule import create_schedule

    A = te.placeholder((4, 14), "int32", name="A")
    B = te.compute((4, 14), lambda i, j: A[i, j], name="B")
    s = create_schedule(B)
    AL = s.cache_read(A, "nmem", [B])
    i, w = B.op.axis
    wo, j = s[B].split(w, nparts=4, names=("wo", "j"))
    s[B].reorder(wo, i, j)
    s[B].bind(wo, te.thread_axis("core", name="tid"))
    s[AL].compute_at(s[B], wo)
    s[AL].pragma(s[AL].op.axis[0], "intrin", "MEMCPY")
    return build(s, [A, B], "memcpy")
