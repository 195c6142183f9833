"""Fuzzers of Tandem's input boundaries: only typed errors come out, never another exception or a hang.

    pytest tests/fuzz                  # the CI slice: each fuzzer derandomized, a few dozen examples (~20 s)
    pytest -m fuzz tests/fuzz          # the full fuzzers: 2,000 random examples each (a few minutes)

- test_fuzz_spec.py: the spec loader (mutated spec trees and texts) and the expression language;
- test_fuzz_asm.py: the assembler and disassembler of every built-in spec (random text, round trips);
- test_fuzz_binary.py: the binary decoder (random bytes and words, round trips);
- test_fuzz_run.py: ``tandem run``'s operators, targets, ``-p`` parameters and options (CliRunner, --json).

The ``fuzz`` fixture runs one hypothesis property under two profiles, so each test body is written once:
``ci`` (unmarked, derandomized, small) and ``fuzz`` (marked ``fuzz``, deselected by default, random,
``EXAMPLES`` examples). Every example runs under a hard 10 s alarm: one that runs over fails with the stack
where it was. No example database is written (``database=None``). A fuzzer's finding is pinned with
``check(..., pinned=[...])`` or a small test next to it. The terminal summary lists the examples each fuzzer
ran, its time and its slowest example.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

LIMIT_S = 10          # the longest one example may run
EXAMPLES = 2000       # examples per fuzzer under ``pytest -m fuzz``


class _Overrun(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` under test swallows it."""


def bounded(prop: Callable[..., None]) -> Callable[..., None]:
    """``prop``, failing (AssertionError) when one call runs over ``LIMIT_S`` seconds."""

    def on_alarm(signum, frame):
        raise _Overrun

    @functools.wraps(prop)
    def run(*args, **kwargs) -> None:
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
        try:
            prop(*args, **kwargs)
        except _Overrun as stop:
            raise AssertionError(f"the example ran over {LIMIT_S} s (a hang); see the stack above") from stop
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    return run


#: (test id, profile, examples run, seconds in all, slowest example's seconds), for the terminal summary
STATS: list[tuple[str, str, int, float, float]] = []


class Fuzz:
    """``check(strategy, prop)`` runs ``prop(value)`` on values drawn from ``strategy`` under the profile."""

    def __init__(self, profile: str, test_id: str) -> None:
        self.profile = profile
        self.test_id = test_id

    def check(self, strategy: st.SearchStrategy, prop: Callable[[object], None], *, ci_examples: int,
              pinned: Sequence[object] = (), slow: bool = False) -> None:
        """``pinned``: inputs that once broke ``prop``, run first under both profiles; ``slow``: the property
        compiles and simulates, so hypothesis' too_slow health check is suppressed."""
        fuzzing = self.profile == "fuzz"
        times: list[float] = []

        @functools.wraps(prop)
        def timed(*args, **kwargs) -> None:
            start = time.perf_counter()
            try:
                prop(*args, **kwargs)
            finally:
                times.append(time.perf_counter() - start)

        test = given(strategy)(bounded(timed))
        for value in pinned:
            test = example(value)(test)
        test = settings(
            max_examples=EXAMPLES if fuzzing else ci_examples,
            derandomize=not fuzzing,
            database=None,
            deadline=None,     # the alarm bounds each example; timings vary too much for a deadline
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow] if slow else [],
        )(test)
        try:
            test()
        finally:
            STATS.append((self.test_id, self.profile, len(times), sum(times), max(times, default=0.0)))


@pytest.fixture(params=[pytest.param("ci", id="ci"), pytest.param("fuzz", id="fuzz", marks=pytest.mark.fuzz)])
def fuzz(request: pytest.FixtureRequest) -> Fuzz:
    return Fuzz(request.param, request.node.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:
    """Examples run, time and the slowest example of each fuzzer that ran."""
    if not STATS:
        return
    terminalreporter.section("fuzzers: examples run, seconds, slowest example")
    for test_id, _, n, total, slowest in STATS:
        terminalreporter.write_line(f"{n:6d} examples {total:8.1f} s (slowest {slowest:5.2f} s)  {test_id}")
