"""experiments/diannao_conv_cycles.py (issue 50, item 1): a conv layer's cycles taken apart add up: on every
launched core, busy (its units) + stalled + idle are the kernel's cycles, and the stalls' causes sum to the
stalls."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _load(name: str):
    """The experiment script ``experiments/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


exp = _load("diannao_conv_cycles")


def test_the_shares_of_a_layers_cycles_add_up():
    (shape, cout), = exp.QUICK_LAYERS
    row = exp.breakdown(1, shape, cout)
    busy = sum(row[f"{u}_pct"] for u in (*exp.UNITS, "other"))
    assert abs(busy + row["stalled_pct"] + row["idle_pct"] - 100) < 0.5
    assert abs(sum(row[f"stalled_{c}_pct"] for c in exp.CAUSES) - row["stalled_pct"]) < 0.5
    assert 0 < row["roofline_pct"] <= 100 and 0 < row["cores"] <= exp.CORES and "GMEM->" in row["bytes"]


def test_the_table_ii_layers_are_the_loop_partition_experiments():
    other = _load("diannao_loop_partition")
    assert [(x, w[0]) for x, w in other.CONV_LAYERS] == list(exp.LAYERS) and len(exp.LAYERS) == 16
