"""PolyDL's choice of a CPU tuning (tandem/flows/polydl.py): the variants around UNIT's microkernel, their
analysis, the ranking, and ``tandem run --target cpu`` taking the top-ranked variant with nothing timed."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from compiler.analysis.poly_rank import MEMORY, MemoryLevel, place, sizes
from compiler.analysis.working_set import polyhedral, working_sets
from compiler.backend.llvm import host_cpu
from compiler.errors import ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ops.cpu import CpuTuning
from compiler.ops.nn import ConvShape, GemmShape
from tandem.flows import cpu_layers
from tandem.flows import polydl as cpu_polydl
from tandem.flows.cpu import compile_layer, run_cpu
from tandem.flows.cpu_layers import fused_extents
from tandem.flows.cpu_tuning import MEASURED_FALLBACK, tuning_space
from tandem.flows.polydl import analysis_nest, choose, fused_loops, variants
from tandem.flows.targets import load_target

TARGET = load_target("cpu")
CONV = ConvShape(14, 14, 64, 64)           # 14 columns: a tile of 4 leaves a tail
GEMM = GemmShape(64, 64, 256)
LEVELS = [MemoryLevel("L1", 32 * 1024, 4, 192), MemoryLevel("L2", 1024 * 1024, 14, 96)]
vnni = pytest.mark.skipif(not host_cpu()["avx512vnni"], reason="this CPU has no AVX-512 VNNI")


def test_the_variants_are_every_order_of_the_outer_loops_around_one_microkernel():
    first = tuning_space(CONV)[0]
    space = variants(CONV, first, threads=1)
    assert space[0] == first and len(set(space)) == len(space)
    assert {(t.unroll_oc, t.unroll_x) for t in space} == {(first.unroll_oc, first.unroll_x)}
    orders = {t.order or (0, 1, 2, 3) for t in space}
    assert orders == {(0, *rest) for rest in itertools.permutations((1, 2, 3))}   # the batch stays outermost
    tail = fused_extents(CONV)[-1] % first.unroll_x != 0
    for t in space:   # a column-tile loop with a tail is never fused
        assert not tail or 3 not in (t.order or (0, 1, 2, 3))[: t.parallel]
    gemm = variants(GEMM, tuning_space(GEMM)[0], threads=1)
    assert {t.order or (0, 1) for t in gemm} == {(0, 1), (1, 0)}


def test_on_two_threads_every_parallel_loop_gives_each_thread_two_iterations():
    first = tuning_space(CONV, threads=2)[0]
    extents = list(fused_extents(CONV))
    extents[1], extents[3] = -(-extents[1] // first.unroll_oc), -(-extents[3] // first.unroll_x)
    space = variants(CONV, first, threads=2)
    assert space and all(math.prod(extents[k] for k in (t.order or (0, 1, 2, 3))[: t.parallel]) >= 4
                         for t in space[1:])
    assert len(space) < len(variants(CONV, first, threads=1))   # the batch loop alone (1) is no variant


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layer", [CONV, GEMM, ConvShape(7, 7, 32, 48, k=3, s=2, p=1)],
                         ids=["conv2d", "gemm", "conv2d-3x3s2"])
def test_choose_ranks_as_if_every_order_were_lowered_and_analysed_on_its_own(layer, threads):
    """choose lowers the first order only and reorders its polyhedral nest for the others."""
    first = tuning_space(layer, threads=threads)[0]
    isa = "x86-vnni"
    want = {}
    for t in variants(layer, first, threads):
        body = analysis_nest(layer, isa, t, TARGET)
        parallel = fused_loops(body, t.parallel) if threads > 1 else ()
        found = working_sets(polyhedral(body, line_bytes=64), parallel, threads)
        want[t] = place(sizes(found), LEVELS).cost(LEVELS, MEMORY)
    got = choose(layer, first, isa, threads, TARGET, levels=LEVELS, line_bytes=64)
    assert {r.name: r.cost for r in got.ranked} == want


@vnni
@pytest.mark.parametrize("layer", [CONV, GEMM], ids=["conv2d", "gemm"])
def test_every_variant_compiles_and_is_bit_exact(layer):
    data, weight = cpu_layers.inputs(layer, 3)
    want = cpu_layers.reference(layer, data, weight)
    for tuning in variants(layer, tuning_space(layer, threads=2)[0], threads=2):
        func, kernel = compile_layer(layer, "x86-vnni", tuning, 2, TARGET)
        out = np.zeros(func.params[-1].shape, np.int32)
        kernel(*cpu_layers.pack(layer, data, weight), out)
        assert np.array_equal(cpu_layers.unpack(layer, out), want), tuning


def test_a_bad_order_is_refused_naming_the_loops():
    with pytest.raises(ScheduleError, match=r"order must be a permutation of 0..3, the loops n, ko.outer"):
        cpu_layers.schedule(CONV, "x86-vnni", CpuTuning(1, 2, 4, (0, 1, 1, 2)), TARGET)


def test_the_analysed_nest_is_unfused_and_its_parallel_loops_are_the_outermost():
    tuning = CpuTuning(2, 2, 4, (0, 2, 1, 3))
    body = analysis_nest(CONV, "x86-vnni", tuning, TARGET)
    outer = fused_loops(body, 4)
    assert [v.name for v in outer] == ["n", "y", "ko.outer", "x.outer"]   # the order asked for
    assert fused_loops(body, tuning.parallel) == outer[:2]
    polyhedral(body)   # analysable: no floordiv from fusing


def test_the_choice_is_the_cheapest_variant_by_eq_1():
    """Recomputed here from each variant's own working sets (in 64-byte lines): Algorithm 2 placement,
    Eq. (1) cost. Counting elements, as the paper does, ranks differently."""
    first = tuning_space(CONV)[0]
    choice = choose(CONV, first, "x86-vnni", 1, TARGET, LEVELS, line_bytes=64)
    assert choice.levels == tuple(LEVELS) and len(choice.ranked) == len(variants(CONV, first, 1))
    costs = {}
    for tuning in variants(CONV, first, 1):
        found = working_sets(polyhedral(analysis_nest(CONV, "x86-vnni", tuning, TARGET), line_bytes=64))
        costs[tuning] = place(sizes(found), LEVELS).cost(LEVELS, MEMORY)
    assert {r.name: r.cost for r in choice.ranked} == pytest.approx(costs)
    assert choice.ranked[0].cost == min(costs.values()) and choice.tuning == choice.ranked[0].name
    # the orders differ in what they reuse: not every variant costs the same
    assert len({round(c) for c in costs.values()}) > 1
    by_elements = choose(CONV, first, "x86-vnni", 1, TARGET, LEVELS, line_bytes=None)
    assert [r.cost for r in by_elements.ranked] != [r.cost for r in choice.ranked]


def test_on_two_threads_each_variant_costs_what_its_own_analysis_says():
    """The variants of one order share one nest (working_sets_each); each one's cost is still that of its
    own working sets with its own parallel loops."""
    first = tuning_space(CONV, threads=2)[0]
    choice = choose(CONV, first, "x86-vnni", 2, TARGET, LEVELS, line_bytes=64)
    for tuning in variants(CONV, first, 2)[:6]:
        body = analysis_nest(CONV, "x86-vnni", tuning, TARGET)
        found = working_sets(polyhedral(body, line_bytes=64), fused_loops(body, tuning.parallel), threads=2)
        cost = place(sizes(found), LEVELS).cost(LEVELS, MEMORY)
        assert next(r.cost for r in choice.ranked if r.name == tuning) == pytest.approx(cost), tuning


def test_a_larger_cache_never_makes_the_choice_dearer():
    first = tuning_space(CONV)[0]
    small = choose(CONV, first, "x86-vnni", 1, TARGET, [MemoryLevel("L1", 4096, 4, 192)])
    large = choose(CONV, first, "x86-vnni", 1, TARGET, [MemoryLevel("L1", 1 << 30, 4, 192)])
    assert large.ranked[0].cost <= small.ranked[0].cost
    assert large.ranked[0].placement.memory == 0


@vnni
def test_the_cpu_flow_runs_polydls_choice_with_nothing_timed():
    r = run_cpu(CONV, threads=1, min_time=0.005)
    choice = choose(CONV, tuning_space(CONV)[0], "x86-vnni", 1, TARGET)
    assert r.validated and r.params["tuned"] == []
    assert r.params["tuning"] == str(choice.tuning)
    selection = r.params["selection"]
    assert selection["by"] == "polydl" and selection["variants"] == len(choice.ranked)
    assert selection["cost"] == pytest.approx(choice.ranked[0].cost)


@vnni
def test_tune_still_times_unit_candidates_and_a_given_tuning_is_kept():
    r = run_cpu(GEMM, threads=1, tune=2, min_time=0.005)
    assert r.params["selection"] == {"by": "measured", "candidates": 2} and len(r.params["tuned"]) == 2
    given = CpuTuning(1, 1, 8, (1, 0))
    r = run_cpu(GEMM, threads=1, tuning=given, min_time=0.005)
    assert r.params["selection"] == {"by": "given"} and r.params["tuning"] == str(given)


@vnni
def test_a_layer_polydl_cannot_analyse_falls_back_to_measured_tuning_and_says_why(monkeypatch):
    """A loop nest with a non-affine index (here, every variant's nest replaced by one) is reported, and
    the flow times tuning_space's first candidates instead."""
    a = ir.Buffer("a", (64,), dtypes.int32)
    i = ir.Var("i")   # a square: outside the model (a floor division by a constant is quasi-affine, inside)
    square = ir.For(i, ir.const(0), ir.const(8), ir.Store(a, (i * i,), a[i]))
    monkeypatch.setattr(cpu_polydl, "analysis_nest", lambda *args: square)
    r = run_cpu(GEMM, threads=1, min_time=0.005)
    selection = r.params["selection"]
    assert r.validated and selection["by"] == "measured"
    assert "PolyDL cannot rank" in selection["why"] and "not affine" in selection["why"]
    assert len(r.params["tuned"]) == min(MEASURED_FALLBACK, len(tuning_space(GEMM)))
