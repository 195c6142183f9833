"""The one ``tandem run`` flow (tandem/flows/run.py): the same steps for every target, bad parameters refused
before
any work, tuning keeps the cheapest candidate, and the report's contract is the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from compiler.backend.llvm import host_cpu
from compiler.ops.nn import ConvShape, GemmShape
from tandem.flows import run as flow_module
from tandem.flows.check import exact
from tandem.flows.cpu import run_cpu
from tandem.flows.cpu_layers import CpuOptions
from tandem.flows.diannao import run_diannao
from tandem.flows.flow import Execution, RunError, TargetFlow, extremes
from tandem.flows.layers import params
from tandem.flows.run import flow_for, run
from tandem.flows.targets import load_target
from tandem.flows.vita import run_vita

CONTRACT = {"op", "target", "params", "validated", "max_abs_err", "detail", "cycles", "instructions",
            "tensor_instructions", "scalar_instructions", "scalar_fallback", "unmatched", "utilization",
            "roofline_cycles", "roofline_pct", "compile_s", "simulate_s", "wall_s"}

CASES = [
    ("diannao", "add", {"shape": (3, 70), "cores": 2}),
    ("diannao", "conv2d", {"H": 6, "W": 5, "IC": 8, "OC": 16, "dtype": "int8", "cores": 2}),
    ("vita", "conv2d", {"H": 6, "W": 6, "IC": 16, "OC": 32, "vthreads": 2}),
    ("vita", "gemm", {"M": 16, "N": 32, "K": 64}),
    pytest.param("cpu", "gemm", {"M": 8, "N": 16, "K": 8, "threads": 1, "min_time": 0.002},
                 marks=pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="no AVX-512 VNNI here")),
]


@pytest.mark.parametrize(("kind", "op", "params"), CASES)
def test_every_target_compiles_executes_validates_and_reports_the_same_contract(kind, op, params) -> None:
    report = run(op, load_target(kind), {**params, "seed": 3})
    assert report.validated and report.max_abs_err == 0 and "bit-exact" in report.detail
    assert CONTRACT <= set(report.to_json()) and report.target == kind
    assert report.params["seed"] == 3 and report.cycles > 0 and report.tensor_instructions > 0
    again = run(op, load_target(kind), {**params, "seed": 3})
    np.testing.assert_array_equal(again.output, report.output)   # the seed fixes the inputs


@pytest.mark.parametrize(("kind", "op", "params", "message"), [
    ("diannao", "add", {"lanes": 4}, "DianNao add: unknown parameter 'lanes'"),
    ("diannao", "add", {"seed": -1}, "seed must be an integer >= 0"),
    ("diannao", "conv2d", {"H": 8}, "conv2d needs all of H, W and IC"),
    ("vita", "conv2d", {"dtype": "int8"}, "vita conv2d: unknown parameter 'dtype'"),
    ("vita", "gemm", {"M": 0}, "M must be an integer >= 1"),
    ("vita", "gemm", {"shape": (8, 8)}, "gemm takes -p M= N= K="),
    ("vita", "sub", {}, "no schedule for operator 'sub'"),
    ("vita", "relu", {"C": 4, "H": 4}, "vita relu: W must be given"),
    ("vita", "conv2d", {"tiling": "big"}, "tiling must be a compiler.ops.vita.Tiling"),
    ("cpu", "conv2d", {"isa": "avx9"}, "unknown isa 'avx9'"),
    ("cpu", "gemm", {"cores": 4}, "cpu gemm: unknown parameter 'cores'"),
    ("diannao", "add", {"shape": (1024, 1024, 1024)}, "need 12,884,901,888 bytes of GMEM"),
    ("diannao", "add", {"shape": "4xx64"}, "shape must be positive integers, as a list or as text like"),
    ("diannao", "relu", {"shape": [4, 0]}, "shape must be positive integers"),
    ("cpu", "conv2d", {"shape": 7}, "shape must be positive integers"),
    ("diannao", "conv2d", {"H": 4096, "W": 4096, "IC": 64, "OC": 64}, "bytes of GMEM, but the card has"),
    ("vita", "gemm", {"M": 10**6, "N": 10**6, "K": 10**6}, "bytes of DRAM, but the machine addresses"),
    ("vita", "gemm", {"M": 4096, "N": 4096, "K": 4096}, "268,435,456 GEMM micro-ops, more than the machine "
     "config's uop_budget of 50,000,000"),
])
def test_bad_parameters_are_refused_before_anything_is_compiled(kind, op, params, message, monkeypatch):
    flow = flow_for(kind)
    monkeypatch.setattr(type(flow), "compile", lambda *a: pytest.fail("compiled a bad request"))
    with pytest.raises(RunError, match=message):
        run(op, load_target(kind), params)


def test_a_shape_may_be_given_as_the_command_line_s_text() -> None:
    """A regression suite's ``params = { shape = "4x64x64" }`` is the form ``tandem run --shape`` takes."""
    report = run("add", load_target("diannao"), {"shape": "4x64x64"})
    assert report.validated and report.params["shape"] == [4, 64, 64]


def test_an_unknown_target_kind_is_named() -> None:
    with pytest.raises(RunError, match="unknown target 'gpu'"):
        flow_for("gpu")


@dataclass(frozen=True)
class ToyJob:
    candidates: tuple[int, ...]


class ToyFlow(TargetFlow):
    """A target whose kernel adds ``candidate`` to its input and whose cost is ``10 - candidate``."""

    kind = "toy"

    def __init__(self) -> None:
        self.steps: list[str] = []

    def plan(self, op: str, params: dict[str, Any], target) -> ToyJob:
        self.steps.append("plan")
        return ToyJob(tuple(params.pop("candidates")))

    def inputs(self, job, rng):
        self.steps.append("inputs")
        return [rng.integers(0, 100, 8)]

    def check_inputs(self, job, given):
        return list(given)

    def compile(self, job, candidate, target):
        self.steps.append(f"compile {candidate}")
        return candidate

    def cost(self, job, compiled, inputs, target) -> float:
        return 10 - compiled

    def execute(self, job, compiled, inputs, target) -> Execution:
        self.steps.append(f"execute {compiled}")
        return Execution(inputs[0] + compiled, 100, {"add": 1}, 1, 0, 0, [], {})

    def reference(self, job, inputs):
        return inputs[0] + 2   # what candidate 2 computes

    def roofline(self, job, target, execution) -> int:
        return 25

    def params(self, job, candidate, target) -> dict[str, Any]:
        return {"candidate": candidate}


def test_run_measures_every_candidate_and_executes_the_cheapest(monkeypatch) -> None:
    toy = ToyFlow()
    monkeypatch.setattr(flow_module, "flow_for", lambda kind, op=None: toy)
    report = run("add", load_target("diannao"), {"candidates": [0, 2, 1]})
    assert toy.steps == ["plan", "inputs", "compile 0", "compile 2", "compile 1", "execute 2"]
    assert report.params["candidate"] == 2 and report.validated
    assert report.params["tuned"] == [{"candidate": str(c), "cost": 10 - c} for c in (0, 2, 1)]
    assert report.roofline_pct == 25.0


def test_one_candidate_is_not_measured_and_a_wrong_output_is_reported(monkeypatch) -> None:
    toy = ToyFlow()
    monkeypatch.setattr(flow_module, "flow_for", lambda kind, op=None: toy)
    report = run("add", load_target("diannao"), {"candidates": [1]})
    assert toy.steps == ["plan", "inputs", "compile 1", "execute 1"] and report.params["tuned"] == []
    assert not report.validated and report.max_abs_err == 1.0
    assert report.detail == "8 of 8 outputs differ from numpy (max |err| 1)"


def test_exact_treats_nan_as_equal_and_names_a_shape_mismatch() -> None:
    a = np.array([1.0, np.nan], np.float32)
    assert exact(a, a.copy()).validated
    assert not exact(a, np.zeros(3, np.float32)).validated


def test_the_target_wrappers_are_the_one_flow() -> None:
    layer = ConvShape(6, 6, 16, 32)
    target = load_target("vita", "tvm-paper")
    assert run_vita(layer, 2, target).cycles == run("conv2d", target, {**params(layer), "vthreads": 2}).cycles
    direct = run("sub", load_target("diannao"), {"shape": (9, 70), "cores": 3})
    assert run_diannao("sub", (9, 70), cores=3).cycles == direct.cycles


def test_a_job_without_candidates_is_a_run_error_not_a_crash(monkeypatch) -> None:
    toy = ToyFlow()
    monkeypatch.setattr(flow_module, "flow_for", lambda kind, op=None: toy)
    with pytest.raises(RunError, match="no schedule fits"):
        run("add", load_target("diannao"), {"candidates": []})
    assert toy.steps == ["plan"]


def test_progress_is_reported_per_measured_candidate(monkeypatch) -> None:
    toy, seen = ToyFlow(), []
    monkeypatch.setattr(flow_module, "flow_for", lambda kind, op=None: toy)
    run("add", load_target("diannao"), {"candidates": [0, 2, 1]}, progress=lambda *a: seen.append(a))
    assert seen == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize(("kind", "op", "params"), [
    ("vita", "gemm", {"M": 512, "N": 512, "K": 512}),
    ("cpu", "gemm", {"M": 512, "N": 512, "K": 512}),
])
def test_a_run_larger_than_the_host_memory_is_refused_in_plan(kind, op, params, monkeypatch):
    """On a machine with 1 MiB of memory, a 512-cubed GEMM's arrays and copies do not fit: the plan says so
    before anything is allocated or compiled."""
    import tandem.flows.flow

    pages = {"SC_PHYS_PAGES": 256, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(tandem.flows.flow.os, "sysconf", lambda name: pages[name])
    monkeypatch.setattr(type(flow_for(kind)), "compile", lambda *a: pytest.fail("compiled a bad request"))
    with pytest.raises(RunError, match=r"the run needs about [\d,]+ bytes of memory, but this machine has "
                       r"1,048,576; give a smaller layer"):
        run(op, load_target(kind), params)


class SaturatingToy(ToyFlow):
    """A kernel that doubles its int8 input into int16 but saturates at +-100 where numpy's sum does not:
    random inputs in [-10, 10] never show it; the inputs at their types' extremes do."""

    def inputs(self, job, rng):
        return [rng.integers(-10, 11, 8).astype(np.int8)]

    def execute(self, job, compiled, inputs, target) -> Execution:
        self.steps.append("execute")
        return Execution(np.clip(2 * inputs[0].astype(np.int16), -100, 100), 1, {}, 0, 0, 0, [], {})

    def reference(self, job, inputs):
        return 2 * inputs[0].astype(np.int16)

    def extreme_inputs(self, job, inputs):
        return extremes(inputs)


def test_integer_kernels_are_validated_also_at_their_inputs_extremes(monkeypatch) -> None:
    """Issue 46 item 2: a kernel that saturates where the operator wraps (or the other way round) passes
    on random inputs and is caught at the extremes; given inputs are the caller's and are checked alone."""
    toy = SaturatingToy()
    monkeypatch.setattr(flow_module, "flow_for", lambda kind, op=None: toy)
    report = run("add", load_target("diannao"), {"candidates": [0]})
    assert not report.validated and report.max_abs_err == 154.0   # 2 * 127 = 254, clamped to 100
    assert report.detail == ("on inputs at their extremes (all max): 8 of 8 outputs differ from numpy "
                             "(max |err| 154)")
    given = run("add", load_target("diannao"), {"candidates": [0]}, inputs=[np.arange(8, dtype=np.int8)])
    assert given.validated and given.detail == "bit-exact with numpy"


def test_the_extremes_are_every_array_at_its_maximum_or_minimum_and_alternating() -> None:
    cases = dict(extremes([np.zeros((2, 2), np.uint8), np.zeros(3, np.int8)]))
    assert list(cases) == ["all max", "all min", "data max and others min", "data min and others max",
                           "alternating max and min"]
    assert [a.tolist() for a in cases["data max and others min"]] == [[[255, 255], [255, 255]], [-128] * 3]
    assert [a.tolist() for a in cases["alternating max and min"]] == [[[255, 0], [255, 0]], [127, -128, 127]]
    assert extremes([np.zeros(3, np.float32)]) == []


def test_a_cpu_gemm_whose_sum_wraps_validates_at_the_extremes_with_its_bias_and_relu() -> None:
    """int16 x int16 at -32768 each: 8 products of 2**30 wrap int32 to 0; the bias (at its extremes, int32)
    wraps with them and the ReLU comes after, in the kernel and in numpy's reference alike."""
    report = run_cpu(GemmShape(2, 16, 8), "x86-avx512", threads=1, min_time=0.002,
                     options=CpuOptions("int16", "relu", True))
    assert report.validated, report.detail
    assert report.detail.startswith("bit-exact with numpy, also on 5 inputs at their types' extremes "
                                    "(all max; ")


def test_reference_of_plans_each_distinct_request_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A network asks for a reused kernel's reference at every step: the job is planned once per target,
    operator and parameters; the answers are the reference's on each call's own inputs."""
    target = load_target("vita")
    flow = flow_for("vita", "gemm").flows["gemm"]
    planned = []
    real = type(flow).plan
    monkeypatch.setattr(type(flow), "plan", lambda self, *a: planned.append(a[0]) or real(self, *a))
    monkeypatch.setattr(flow_module, "_PLANNED", {})
    rng = np.random.default_rng(0)
    params = {"M": 16, "N": 16, "K": 16}
    arrays = [flow.inputs(flow.plan("gemm", dict(params), target), rng) for _ in range(2)]
    planned.clear()
    first, second = (flow_module.reference_of("gemm", target, params, a) for a in arrays)
    assert len(planned) == 1 and not np.array_equal(first, second)
    assert np.array_equal(second, flow_module.reference_of("gemm", target, {**params, "seed": 4}, arrays[1]))
    flow_module.reference_of("gemm", target, {**params, "K": 32},
                             flow.inputs(flow.plan("gemm", {**params, "K": 32}, target), rng))
    assert len(planned) == 3   # the K=32 request's own plan, and the inputs' above
