"""Tandem's pytest plugin: regression tests of your own operators, targets, configs and specs in a few lines.

Installed with Tandem (a ``pytest11`` entry point), it gives every test suite three fixtures and one option:

    def test_my_conv_stays_exact_and_no_slower(tandem_run, assert_bit_exact, golden_cycles):
        report = tandem_run("conv2d", "vita", config="tvm-paper", H=14, W=14, IC=64, OC=64)
        assert_bit_exact(report)
        golden_cycles.check("conv 14x14x64", report.cycles)

- ``tandem_run(op, target, config=None, spec=None, **params)``: compile ``op`` for the target (a config and a
  spec file as ``tandem run`` takes them: built-in names or paths, or a ``Target``), run it on seeded random
  inputs, compare it with numpy: ``tandem.flows.run.run``'s ``RunReport`` (cycles, instructions, validation);
- ``assert_bit_exact(report)``: fails, naming the operator and target and what numpy said, unless the run
  matched numpy bit for bit;
- ``golden_cycles.check(case, cycles)``: compares with the test's golden file, ``golden_cycles/<test file
  stem>/<test name>.json`` next to the test file, exactly (simulated cycles are deterministic); a mismatch
  fails with the test, the case and both values; ``pytest --tandem-update-golden`` writes the new values
  instead; the cases the file lacks are all written, then the test fails once naming them (so a missing
  golden value never passes silently, and the next run compares with the written values).

docs/regression-testing.md is the guide; examples/testing/test_regressions.py is a worked example.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

UPDATE = "--tandem-update-golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tandem", "Tandem regression tests")
    group.addoption(UPDATE, action="store_true", default=False,
                    help="write the cycles the tests measure into their golden_cycles files instead of "
                         "comparing with them")


class GoldenCycles:
    """One test's golden cycles: a JSON object of case name -> cycles."""

    def __init__(self, path: Path, test: str, update: bool) -> None:
        self.path, self.test, self.update = path, test, update
        self.seen: dict[str, int] = {}
        self.written: dict[str, int] = {}   # cases the file lacked, written by this test

    def _stored(self) -> dict[str, int]:
        if not self.path.exists():
            return {}
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            pytest.fail(f"{self.test}: golden cycles file {self.path} cannot be read: {exc}", pytrace=False)
        if not isinstance(stored, dict) or not all(isinstance(v, int) for v in stored.values()):
            pytest.fail(f"{self.test}: golden cycles file {self.path} must hold an object of case name -> "
                        "integer cycles", pytrace=False)
        return stored

    def check(self, case: str, cycles: int) -> None:
        """Compare ``cycles`` of ``case`` with the golden value (or record it, see the module docstring)."""
        if isinstance(cycles, bool) or not isinstance(cycles, int) or cycles < 0:
            raise TypeError(f"{self.test}: golden_cycles.check({case!r}, ...) takes an integer number of "
                            f"cycles >= 0, but got {cycles!r}")
        if case in self.seen:
            raise ValueError(f"{self.test}: case {case!r} checked twice in one test; name each case once")
        self.seen[case] = cycles
        stored = self._stored()
        if self.update or case not in stored:
            missing = case not in stored
            stored[case] = cycles
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(dict(sorted(stored.items())), indent=2) + "\n", encoding="utf-8")
            if missing and not self.update:
                self.written[case] = cycles   # the test goes on; it fails once at its end (report_written)
            return
        if stored[case] != cycles:
            old = stored[case]
            change = f"{100 * (cycles - old) / old:+.2f}%" if old else "from 0"
            pytest.fail(f"{self.test}: case {case!r}: golden cycles {old:,}, now {cycles:,} ({change}); if "
                        f"the change is intended, run pytest {UPDATE}", pytrace=False)


    def report_written(self) -> None:
        """Fail once for every case this test wrote because the file lacked it."""
        if self.written:
            cases = "; ".join(f"{case!r}: {cycles:,}" for case, cycles in self.written.items())
            pytest.fail(f"{self.test}: {len(self.written)} case(s) had no golden cycles, now written to "
                        f"{self.path}: {cases}. The next run compares with these values; this run fails so "
                        f"that you review them (and commit the file). {UPDATE} records new cases without "
                        f"failing.", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """After a test that passed: its golden_cycles' newly written cases fail it, once, naming all of them."""
    result = yield
    golden = getattr(item, "funcargs", {}).get("golden_cycles")
    if isinstance(golden, GoldenCycles):
        golden.report_written()
    return result


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


@pytest.fixture
def golden_cycles(request: pytest.FixtureRequest) -> GoldenCycles:
    """The test's golden cycles (``golden_cycles/<file stem>/<test name>.json`` beside the test file)."""
    path = request.path.parent / "golden_cycles" / request.path.stem / f"{_sanitize(request.node.name)}.json"
    return GoldenCycles(path, request.node.nodeid, request.config.getoption(UPDATE))


@pytest.fixture
def tandem_run() -> Callable[..., Any]:
    """``tandem_run(op, target, config=None, spec=None, **params)``: ``tandem.flows.run.run`` on a target
    resolved as ``tandem run`` resolves it; the ``RunReport``."""
    from tandem.flows.run import run
    from tandem.flows.targets import load_target

    def _run(op: str, target: Any = "vita", config: Any = None, spec: Any = None, **params: Any):
        from compiler.target import Target

        resolved = target if isinstance(target, Target) else load_target(target, config, spec)
        return run(op, resolved, params)

    return _run


@pytest.fixture
def assert_bit_exact() -> Callable[[Any], None]:
    """``assert_bit_exact(report)``: the run matched numpy bit for bit, or the test fails saying how not."""

    def _check(report: Any) -> None:
        if not report.validated or report.max_abs_err != 0:
            pytest.fail(f"{report.op} on {report.target} ({report.params}): not bit-exact against numpy: "
                        f"{report.detail or 'largest difference ' + str(report.max_abs_err)}", pytrace=False)

    return _check
