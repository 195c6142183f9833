"""A network's kernels in a process pool (tandem/network/jobs.py, ``run_network(jobs=N)``, ``tandem model
--jobs``): the same rows, cycles and output as one job, every kernel still checked; ``--jobs`` refused where
it does not apply."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.flows.targets import load_target
from tandem.network import graph as tg
from tandem.network import models, quantize
from tandem.network.jobs import jobs_for, kernel_tasks
from tandem.network.run import run_network
from tandem.network.steps import steps

RUNNER = CliRunner()


def row_facts(report) -> list[tuple]:
    """What a run says of each step, less its wall times."""
    return [(r.step, r.where, r.kernel, r.cycles, r.validated, r.kernel_validated, r.timing, r.why,
             r.kernels) for r in report.rows]


@pytest.fixture(scope="module")
def small_resnet():
    # ResNet-18 on 32 x 32 images: repeated blocks (kernels reused), residual adds, pooling, a classifier
    return quantize.quantize(tg.load(models.build("resnet18"), {"input": (1, 3, 32, 32)}), samples=1)


@pytest.mark.parametrize("resimulate", [False, True])
def test_two_jobs_give_the_rows_and_output_of_one(small_resnet, resimulate: bool) -> None:
    target = load_target("vita")
    one = run_network(small_resnet, target, resimulate=resimulate, jobs=1)
    two = run_network(small_resnet, target, resimulate=resimulate, jobs=2)
    assert one.validated and two.validated
    assert row_facts(two) == row_facts(one)
    assert np.array_equal(two.output, one.output)
    assert any("reused" in r.timing for r in two.rows) != resimulate


def test_the_pool_runs_each_distinct_kernel_once_and_reports_progress(small_resnet) -> None:
    target = load_target("vita")
    plan = steps(small_resnet)
    oracle = small_resnet.run_integer(tg.random_inputs(small_resnet.graph, np.random.default_rng(1)))
    distinct = kernel_tasks(small_resnet, target, plan, oracle, None, reuse=True)
    every = kernel_tasks(small_resnet, target, plan, oracle, None, reuse=False)
    assert 0 < len(distinct) < len(every)   # the repeated blocks share their kernels
    seen: list[tuple[int, int]] = []
    run_network(small_resnet, target, jobs=2, progress=lambda done, total, step: seen.append((done, total)))
    assert (len(distinct), len(distinct)) in seen and seen[-1] == (len(plan), len(plan))


def test_a_job_count_is_checked() -> None:
    assert jobs_for(3) == 3 and jobs_for(0) >= 1
    with pytest.raises(ValueError, match="jobs must be 0"):
        jobs_for(-1)


@pytest.mark.parametrize("args, message", [
    (["--builtin", "resnet18", "--jobs", "2"], "give --target"),
    (["--builtin", "resnet18", "--target", "cpu", "--jobs", "2"], "times each kernel for real"),
])
def test_jobs_where_they_do_not_apply_are_refused_before_any_work(args, message) -> None:
    result = RUNNER.invoke(app, ["model", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_a_worker_that_dies_is_an_error_not_a_hang(monkeypatch) -> None:
    import os
    from concurrent.futures.process import BrokenProcessPool

    from tandem.network import jobs

    monkeypatch.setattr(jobs, "_run_task", lambda task, target, cache: os._exit(1))   # forked with it
    tasks = {(k,): ("gemm", {}, [], f"step{k}") for k in range(3)}
    with pytest.raises(BrokenProcessPool):
        jobs.run_tasks(tasks, load_target("vita"), 2)


def test_a_kernel_refused_in_a_worker_is_refused_here(monkeypatch) -> None:
    from tandem.flows.flow import RunError
    from tandem.network import jobs

    def refuse(task, target, cache):
        raise RunError(f"VITA {task[0]}: refused in a worker")
    monkeypatch.setattr(jobs, "_run_task", refuse)
    tasks = {(k,): ("gemm", {}, [], f"step{k}") for k in range(2)}
    with pytest.raises(RunError, match="refused in a worker"):
        jobs.run_tasks(tasks, load_target("vita"), 2)
