"""Whole networks (tandem/network/run.py): ``tandem model --builtin resnet50 --target vita``, as a user runs
it (import, the onnxruntime check where installed, int8 calibration, every step compiled, simulated and
checked bit for bit), in a child process pinned to one core; ``extra_info`` records the wall time, the
child's peak RSS and the network's simulated cycles. The networks issue's budget: <= 60 s and <= 1.5 GB.

    pytest benchmarks/test_networks.py --benchmark-only
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest


def _one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


@pytest.mark.parametrize("model", ["resnet50", "resnet18", "mobilenet_v2"])
def test_network_on_vita(benchmark, model: str) -> None:
    def run_once() -> tuple[dict, float]:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "tandem", "model", "--builtin", model, "--target",
                               "vita", "--json"], capture_output=True, text=True, check=False,
                              preexec_fn=_one_core)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)["network"], time.perf_counter() - start

    network, wall = benchmark.pedantic(run_once, rounds=1, iterations=1)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024   # the largest child so far
    assert network["validated"]
    benchmark.extra_info.update(wall_s=round(wall, 2), peak_rss_bytes=peak, cycles=network["cycles"],
                                tensor_macs_share=network["tensor_macs_share"], on_host=network["on_host"])
