"""PolyDL over the DianNao card's scratchpads (tandem/flows/diannao.py ``polydl_ranked``): the conv plans that
use the most cores, each in its analysis form (the core loops apart and parallel), ranked by the reuses of
their GMEM arrays placed in NMEM, WMEM and SMEM."""

from __future__ import annotations

import pytest

from compiler.analysis.working_set import polyhedral
from compiler.ir import nodes as ir
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.ops.nn import ConvShape
from tandem.flows.diannao import polydl_ranked
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import load_target

TARGET = load_target("diannao")
SPEC = TARGET.spec
CONV = ConvShape(14, 14, 32, 64, 3, 1, 1)


def plans() -> list[dops.ConvPlan]:
    return dops.conv_plans(CONV.h, CONV.w, CONV.ic, CONV.oc, CONV.k, CONV.s, CONV.p, 4, 16, SPEC)


def test_the_plans_that_use_the_most_cores_are_ranked_cheapest_first():
    ranked = polydl_ranked(CONV, "float32", 16, TARGET)
    most = max(p.cores for p in plans())
    assert sorted(map(repr, (p for p, _ in ranked))) == sorted(repr(p) for p in plans() if p.cores == most)
    costs = [c for _, c in ranked]
    assert costs == sorted(costs) and len(ranked) >= 2
    assert dops.conv_plan(CONV.h, CONV.w, CONV.ic, CONV.oc, CONV.k, CONV.s, CONV.p, 4, 16, SPEC) in plans()


@pytest.mark.parametrize("shared", [False, True])
def test_the_analysis_form_keeps_the_core_loops_apart_and_is_affine(shared):
    plan = next(p for p in plans() if bool(p.sub_rows) == shared)
    run = lower(*_args(dops.conv2d(CONV.h, CONV.w, CONV.ic, CONV.oc, CONV.k, CONV.s, CONV.p, plan=plan,
                                   spec=SPEC)), "c").body
    form = lower(*_args(dops.conv2d(CONV.h, CONV.w, CONV.ic, CONV.oc, CONV.k, CONV.s, CONV.p, plan=plan,
                                    spec=SPEC, analysis=True)), "c").body
    assert _bound(run) and not _bound(form)                # the core axis is bound only in the runnable form
    want = ["rg", "sub", "cg"] if shared else ["rg", "cg"]
    assert _loops(form)[: len(want)] == want
    polyhedral(form, registers=("nmem", "smem", "wmem"))   # no floordiv by the group counts: analysable


def test_polydls_choice_runs_in_the_flow_and_matches_numpy():
    plan = polydl_ranked(CONV, "float32", 16, TARGET)[0][0]
    layer = {"H": CONV.h, "W": CONV.w, "IC": CONV.ic, "OC": CONV.oc, "K": CONV.k, "S": CONV.s, "P": CONV.p}
    report = run("conv2d", TARGET, {**layer, "plan": plan})
    assert report.validated and report.cycles > 0
    assert report.params["cores_used"] == plan.cores and report.params["tile"] == plan.tile_rows
    default = run("conv2d", TARGET, dict(layer))   # the estimate's plan
    assert default.validated


def test_a_plan_that_is_not_a_conv_plan_is_refused():
    with pytest.raises(RunError, match="plan must be a compiler.ops.diannao.ConvPlan"):
        run("conv2d", TARGET, {"H": 14, "W": 14, "IC": 32, "OC": 64, "plan": "4x4"})


def _args(sched: dops.DiannaoSchedule):
    return sched.schedule, list(sched.args)


def _bound(body: ir.Stmt) -> bool:
    found = []
    post_order_visit(body, lambda x: found.append(x) if isinstance(x, ir.For) and
                     x.kind is ir.ForKind.THREAD_BINDING else None)
    return bool(found)


def _loops(body: ir.Stmt) -> list[str]:
    names, s = [], body
    while isinstance(s, ir.For | ir.Attr | ir.Allocate):
        if isinstance(s, ir.For):
            names.append(s.var.name)
        s = s.body
    return names
