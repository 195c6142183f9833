"""Tests of tandem/cli/demo.py that do not need the compiler: references, comparison, error rows."""

from __future__ import annotations

import numpy as np
import pytest

import tandem.cli.demo as demo


def test_run_demo_turns_exceptions_into_failed_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(rng: np.random.Generator):
        raise ValueError("expected a positive factor, but got 0")

    def fine(rng: np.random.Generator):
        out = np.ones(3, np.int32)
        return out, out.copy(), "ir text"

    monkeypatch.setattr(demo, "CHECKS", [("boom", boom), ("fine", fine)])
    rows = demo.run_demo()
    assert [row.name for row in rows] == ["boom", "fine"]
    assert not rows[0].check.validated and rows[0].check.detail.startswith("ValueError: expected a positive")
    assert rows[1].check.validated and rows[1].ir == "ir text"
