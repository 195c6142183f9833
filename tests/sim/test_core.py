"""What both simulators share (sim/core): the port model, the trace writer (and the contract, the constraint
and deadlock errors, tested where each simulator raises them)."""

from __future__ import annotations

import pytest

from sim.core.ports import Ports
from sim.core.trace import chrome_trace


def test_a_port_serves_requests_first_come_first_served_and_a_request_waits_for_all_its_ports():
    ports = Ports(["gmem", "smem0"])
    assert ports.reserve([("gmem", 10)], now=0) == 0
    assert ports.reserve([("gmem", 5)], now=3) == 10          # queued behind the first transfer
    assert ports.reserve([("smem0", 4)], now=3) == 3          # another port is free
    assert ports.reserve([("gmem", 1), ("smem0", 1)], now=0) == 15
    assert ports.free_at == {"gmem": 16, "smem0": 16}


def test_a_trace_has_the_named_tracks_in_order_and_one_slice_per_record():
    trace = chrome_trace([("b", "x", 0, 4, "instruction"), ("c", "y", 2, 3, "stall")], ["a", "b"], 100.0, 4)
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    assert names == ["a", "b", "c"]
    slices = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"]
    assert slices == [("x", 1, 0.0, 0.04), ("y", 2, 0.02, 0.01)]
    assert trace["otherData"] == {"cycles": 4, "clock_mhz": 100.0}


def test_a_request_fits_in_a_gap_before_a_transfer_promised_for_later():
    ports = Ports(["gmem", "smem0"])
    assert ports.reserve([("gmem", 10), ("smem0", 10)], now=100, horizon=0) == 100   # promised from 100
    assert ports.reserve([("smem0", 30)], now=5, horizon=5) == 5                     # fits before it
    assert ports.reserve([("smem0", 80)], now=6, horizon=6) == 110                   # does not: after it
    assert ports.reserve([("gmem", 20), ("smem0", 20)], now=7, horizon=7) == 35     # both free from 35
    assert ports.reserve([("gmem", 60)], now=8, horizon=8) == 110                   # 55..115 is not free
    assert ports.free_at == {"gmem": 170, "smem0": 190}


def test_a_split_request_on_one_port_takes_its_cycles_in_the_gaps_between_promised_transfers():
    ports = Ports(["gmem", "smem0"])
    for start in (100, 200, 300):   # GMEM->SMEM copies promised: SMEM busy 100..110, 200..210, 300..310
        assert ports.reserve([("gmem", 20), ("smem0", 10)], now=start, horizon=0) == start
    # 150 cycles of SMEM from 50: 50..100, 110..200, then 10 more from 210: ends at 220, reported from 70
    assert ports.reserve([("smem0", 150)], now=50, horizon=50, split=True) == 220 - 150
    assert ports.busy["smem0"][:4] == [(50, 100), (100, 110), (110, 200), (200, 210)]
    # unsplit, the same request waits for a gap of its whole length: after the last promise
    whole = Ports(["gmem", "smem0"])
    for start in (100, 200, 300):
        whole.reserve([("gmem", 20), ("smem0", 10)], now=start, horizon=0)
    assert whole.reserve([("smem0", 150)], now=50, horizon=50) == 310
    # a request that holds two ports is never split (both free together for 50 cycles first from 220);
    # one with no gap ahead takes one piece
    assert ports.reserve([("gmem", 50), ("smem0", 50)], now=60, horizon=0, split=True) == 220
    assert ports.reserve([("gmem", 5)], now=400, split=True) == 400


def test_intervals_that_ended_by_the_horizon_are_forgotten():
    ports = Ports(["gmem"])
    for now in range(0, 1000, 10):
        ports.reserve([("gmem", 5)], now)
    assert ports.busy["gmem"] == [(990, 995)]


def test_taking_one_port_is_reserving_it_alone():
    one, many = Ports(["dram"]), Ports(["dram"])
    for now, cycles in ((0, 8), (3, 2), (20, 1), (20, 4)):
        assert one.take("dram", cycles, now) == many.reserve([("dram", cycles)], now)


@pytest.mark.parametrize(("cls", "default"), [("vita", "vta-default"), ("diannao", "default")])
def test_a_key_a_config_leaves_out_takes_the_default_configs_value(cls: str, default: str) -> None:
    """One set of defaults: the config dataclass's field defaults are the shipped default config's values."""
    from dataclasses import MISSING, fields
    from importlib import import_module

    module = import_module(f"sim.{cls}.config")
    config_cls = next(v for k, v in vars(module).items() if k.endswith("Config") and k != "TomlConfig"
                      and isinstance(v, type))
    shipped = module.load_config(default)
    for f in fields(config_cls):
        if f.default is not MISSING and f.name not in ("name", "summary", "spec", "source"):
            assert getattr(shipped, f.name) == f.default, f"{config_cls.__name__}.{f.name}"
