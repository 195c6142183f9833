"""Conv on the DianNao target: the schedule (compiler/ops/diannao.py ``conv2d``), the reduction matching of
tensorize (conv/qconv from their isa/ semantics), padding folded into copies and guards removed around
on-chip compute by preprocess (seed 001 Alg. 1 LAYOUT and COM), and partitioning on ``tid // d``.

Every pass is interpreted before and after on random inputs; with all passes every marked statement
becomes an instruction."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import isa
from compiler.backend.diannao import codegen
from compiler.ir import PrimFunc, dtypes
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.ops import reference
from compiler.ops.diannao import block_weights
from compiler.ops.diannao_conv_plans import sub_rows_fit
from compiler.passes.tensorize import Match, NoMatch, select, unmatched
from compiler.pipeline import compile_func
from compiler.target import Target
from compiler.testing import assert_same_results
from tandem.flows.diannao import conv2d_matches, run_kernel

SPEC = isa.load_isa("diannao")
TARGET = Target("diannao", SPEC)


def stages(h, w, cin, cout, k=3, stride=1, pad=1, dtype="float32", cores=4, skip=(), relu=False, bias=False):
    d = dops.conv2d(h, w, cin, cout, k, stride, pad, dtype, cores, spec=SPEC, relu=relu, bias=bias)
    out: list[tuple[str, PrimFunc]] = []
    compile_func(lower(d.schedule, list(d.args), "conv"), TARGET, dump=lambda n, f: out.append((n, f)),
                 skip=skip)
    return out


def insns(func: PrimFunc) -> list[ir.TensorInsn]:
    found: list[ir.TensorInsn] = []

    def visit(node) -> None:
        if isinstance(node, ir.TensorInsn):
            found.append(node)
    from compiler.ir.functor import post_order_visit
    post_order_visit(func.body, visit)
    return found


def test_a_small_layer_becomes_vzero_memcpy_and_conv_only() -> None:
    funcs = stages(6, 5, 4, 32, cores=4)
    final = funcs[-1][1]
    assert unmatched(final, SPEC) == []
    names = sorted({i.name for i in insns(final)})
    assert names == ["conv", "memcpy", "vzero"]
    convs = {str(i) for i in insns(final) if i.name == "conv"}
    # the cheapest cut of this tiny layer: 1 row group x 2 channel groups, each core one tile of all 6
    # output rows (8 padded input rows, 7 wide) for its 16 channels
    assert convs == {"diannao.conv(h=8, w=7, cin=4, cout=16, kh=3, kw=3, s=1, "
                     "out=Y.nmem[0], inp=Xp.nmem[0], wgt=Wb.wmem[0])"}


@settings(max_examples=12, deadline=None)
@given(
    hw=st.tuples(st.integers(3, 9), st.integers(3, 9)),
    cin=st.sampled_from([1, 3, 4, 8]),
    cout=st.sampled_from([16, 32, 64]),
    k=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    pad=st.sampled_from([0, 1]),
    cores=st.sampled_from([1, 2, 4]),
    dtype=st.sampled_from(["float32", "int8"]),
)
def test_every_pass_keeps_the_result(hw, cin, cout, k, stride, pad, cores, dtype) -> None:
    funcs = stages(*hw, cin, cout, k, stride, pad, dtype, cores)
    note(str(funcs[-1][1]))
    for (_, before), (name, after) in zip(funcs, funcs[1:], strict=False):
        # tensorize replaces the loop's f32 sum by the instruction's, in another order: 1e-5 relative
        assert_same_results(before, after, name, seeds=1, rtol=1e-5 if name == "tensorize" else 0.0)


#: The layers the epilogue tests draw (stride 1, padding 1).
EPILOGUE_LAYERS = dict(hw=st.tuples(st.integers(3, 9), st.integers(3, 9)), cin=st.sampled_from([1, 4]),
                       cout=st.sampled_from([16, 32, 64]), k=st.sampled_from([1, 3]),
                       cores=st.sampled_from([1, 2, 4, 16]), dtype=st.sampled_from(["float32", "int8"]))


def _every_pass_keeps_the_result(funcs: list[tuple[str, PrimFunc]]) -> None:
    note(str(funcs[-1][1]))
    for (_, before), (name, after) in zip(funcs, funcs[1:], strict=False):
        assert_same_results(before, after, name, seeds=1, rtol=1e-5 if name == "tensorize" else 0.0)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(**EPILOGUE_LAYERS)
def test_a_relu_epilogue_runs_in_place_on_each_tile_and_every_pass_keeps_the_result(hw, cin, cout, k, cores,
                                                                                    dtype) -> None:
    """PolyDL's fusion (Algorithm 3) on the card: the ReLU runs on each output tile in NMEM right after the
    conv that finishes it, as one in-place ``relu`` on the conv's own tile (the ``inplace`` pass folds the
    epilogue's buffer into it), and the tile is copied out once: as many relus as convs, no NMEM buffer of
    its own, the same copies as without it."""
    funcs = stages(*hw, cin, cout, k, 1, 1, dtype, cores, relu=True)
    _every_pass_keeps_the_result(funcs)
    final = funcs[-1][1]
    assert unmatched(final, SPEC) == []
    found = insns(final)
    convs = [i for i in found if i.name in ("conv", "qconv")]
    relus = [i for i in found if i.name == "relu"]
    assert len(relus) == len(convs) > 0
    assert {r.buffer.name for i in relus for r in i.regions} == {r.buffer.name for i in convs
                                                                for r in i.regions if r.operand == "out"}
    plain = insns(stages(*hw, cin, cout, k, 1, 1, dtype, cores)[-1][1])
    assert _copies_out(found, "Yr") == _copies_out(plain, "Y")


@settings(max_examples=8, deadline=None, derandomize=True)
@given(**EPILOGUE_LAYERS, relu=st.booleans())
def test_a_bias_is_one_cycle_add_on_each_tile_before_the_relu_and_every_pass_keeps_the_result(
        hw, cin, cout, k, cores, dtype, relu) -> None:
    """The per-output-channel bias on the card: each core copies its channels of B into NMEM once, and each
    output tile (rows of the core's channels, HWC) gets them added by one ``vcycadd`` on the conv's own tile,
    right after the conv and before the ReLU; a tile that is no whole number of vectors is extended by rows
    (preprocessing) until it is."""
    funcs = stages(*hw, cin, cout, k, 1, 1, dtype, cores, relu=relu, bias=True)
    _every_pass_keeps_the_result(funcs)
    final = funcs[-1][1]
    found = insns(final)
    convs = [i for i in found if i.name in ("conv", "qconv")]
    adds = [i for i in found if i.name == "vcycadd"]
    assert unmatched(final, SPEC) == []
    assert len(adds) == len(convs) > 0
    tiles = {r.buffer.name for i in convs for r in i.regions if r.operand == "out"}
    assert all({r.buffer.name for r in i.regions if r.operand in ("dst", "a")} == tiles for i in adds)
    order = " ".join(i.name for i in found if i.name in ("conv", "qconv", "vcycadd", "relu"))
    for tile in re.split(r"\bq?conv\b", order)[1:]:   # after each conv: its epilogue
        assert tile.split() == (["vcycadd", "relu"] if relu else ["vcycadd"])
    # once per core (not per tile): the core's channels of B, as many as each add's segment
    bias_copies = [_fields(i) for i in found if i.name == "memcpy" and
                   any(r.operand == "src" and r.buffer.name == "B" for r in i.regions)]
    assert 0 < len(bias_copies) <= len(convs)
    assert {c["len"] * c["count"] for c in bias_copies} >= {4 * _fields(a)["m"] for a in adds}


def _fields(insn: ir.TensorInsn) -> dict[str, int]:
    return {f.name: f.value.value for f in insn.fields}


@pytest.mark.parametrize("hw", [16, 7])
def test_a_bias_adds_whole_vectors_extending_a_tile_by_rows_where_it_is_not(hw) -> None:
    """One vcycadd per conv over the tile's pixels x the core's channels; where those are no whole number
    of vectors (64: 7 x 7 pixels x 16 channels, 784 elements), the add runs over more pixels of the tile
    (zero-filled first: seed 001's AddExtraCompute), and the result, run on the card, is still numpy's."""
    final = stages(hw, hw, 8, 64, 3, 1, 1, "int8", 16, bias=True)[-1][1]
    assert unmatched(final, SPEC) == []
    found = insns(final)
    adds = [_fields(i) for i in found if i.name == "vcycadd"]
    assert len(adds) == len([i for i in found if i.name == "qconv"]) > 0
    convs = [_fields(i) for i in found if i.name == "qconv"]   # in the order of their adds
    pairs = list(zip(adds, convs, strict=True))
    assert all(a["m"] == c["cout"] and a["count"] * a["m"] % 64 == 0 for a, c in pairs)
    pixels = [((c["h"] - c["kh"]) // c["s"] + 1) * ((c["w"] - c["kw"]) // c["s"] + 1) for c in convs]
    assert all(a["count"] >= n for a, n in zip(adds, pixels, strict=True))
    assert any(a["count"] > n for a, n in zip(adds, pixels, strict=True)) == (hw == 7)
    from tandem.flows.run import run
    from tandem.flows.targets import load_target

    report = run("conv2d", load_target("diannao"), {"H": hw, "W": hw, "IC": 8, "OC": 64, "dtype": "int8",
                                                     "bias": True})
    assert report.validated and report.scalar_fallback == 0
    assert report.instructions["vcycadd"] == report.instructions["qconv"]   # as run: one per tile


def _copies_out(found: list[ir.TensorInsn], out: str) -> list[str]:
    """The fields of the copies into GMEM array ``out``."""
    return sorted(str(i.fields) for i in found if i.name == "memcpy" and
                  any(r.operand == "dst" and r.buffer.name == out for r in i.regions))


@st.composite
def shared_plans(draw):
    """A layer and a cluster-shared cut of it (``ConvPlan.sub_rows > 0``) that leaves no group empty."""
    h, w = draw(st.integers(3, 12)), draw(st.integers(3, 8))
    cin, cout = draw(st.sampled_from([1, 3, 4])), draw(st.sampled_from([16, 32, 64]))
    k, stride = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 2]))
    pad = draw(st.sampled_from([0, 1]))
    assume(k <= min(h, w) + 2 * pad)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    clusters = draw(st.sampled_from([q for q in range(1, min(4, oh) + 1) if -(-oh // q) * (q - 1) < oh]))
    cg = draw(st.sampled_from([g for g in (1, 2, 4) if (cout // 16) % g == 0]))
    rs = 4 // cg
    fitting = [t for t in range(1, -(-oh // clusters) + 1) if sub_rows_fit(oh, clusters, t, rs)]
    assume(fitting)
    smem_rows = draw(st.sampled_from(fitting))
    tile = draw(st.integers(1, -(-smem_rows // rs)))
    plan = dops.ConvPlan(oh, ow, clusters, cg, tile, 0, rs, smem_rows)
    return (h, w, cin, cout, k, stride, pad), plan, draw(st.sampled_from(["float32", "int8"]))


@settings(max_examples=6, deadline=None, derandomize=True)
@given(shared_plans())
def test_cluster_shared_cuts_keep_the_result_and_share_their_tile(case) -> None:
    """Every pass keeps the result of a cluster-shared cut, every marked statement becomes an instruction,
    and one core per cluster fills the SMEM tile."""
    _check_shared_cut(case, note)


def test_a_shared_cut_whose_last_core_has_fewer_rows_reads_only_filled_smem() -> None:
    """10 rows over 4 cores (3, 3, 3, 1): the last core's copies from the SMEM tile keep their guard, since
    unguarded they would read rows past the image that nothing wrote (found by the random shapes above)."""
    plan = dops.ConvPlan(oh=10, ow=1, row_groups=1, cout_groups=1, tile_rows=1, estimate=0, sub_rows=4,
                         smem_rows=10)
    _check_shared_cut(((12, 3, 1, 16, 3, 1, 0), plan, "float32"), lambda text: None)


def _check_shared_cut(case, note) -> None:
    (h, w, cin, cout, k, stride, pad), plan, dtype = case
    d = dops.conv2d(h, w, cin, cout, k, stride, pad, dtype, plan=plan, spec=SPEC)
    funcs: list[tuple[str, PrimFunc]] = []
    compile_func(lower(d.schedule, list(d.args), "conv"), TARGET, dump=lambda n, f: funcs.append((n, f)))
    final = funcs[-1][1]
    note(str(final))
    for (_, before), (name, after) in zip(funcs, funcs[1:], strict=False):
        assert_same_results(before, after, name, seeds=1, rtol=1e-5 if name == "tensorize" else 0.0)
    assert unmatched(final, SPEC) == []
    # the tile filled once per cluster (a fill, or a prefetch hoisted above the weights' copy: hoist_fill), or
    # once for the card (share_card)
    assert any(mark in str(final) for mark in ("cluster_fill", "cluster_prefetch", "card_fill"))
    # on the card, where one core per cluster fills the tile: bit-exact for int8, within f32's bound
    rng = np.random.default_rng(0)
    if dtype == "int8":
        x = rng.integers(-128, 128, (h, w, cin), dtype=np.int8)
        wt = rng.integers(-128, 128, (cout, k, k, cin), dtype=np.int8)
    else:
        x = rng.standard_normal((h, w, cin)).astype(np.float32)
        wt = rng.standard_normal((cout, k, k, cin)).astype(np.float32)
    y = np.zeros((plan.oh, plan.ow, cout), np.int32 if dtype == "int8" else np.float32)
    _, outs = run_kernel(codegen(final, SPEC), [x, block_weights(wt.transpose(1, 2, 3, 0)), y])
    assert conv2d_matches(outs[-1], x, wt, stride, pad)


@pytest.mark.parametrize("case", [
    (6, 5, 4, 32, 3, 1, 1, "float32", 4),
    (9, 7, 3, 16, 3, 2, 1, "float32", 2),
    (8, 8, 8, 64, 1, 1, 0, "int8", 4),
    (7, 6, 4, 32, 3, 1, 0, "int8", 2),
])
def test_marked_statements_all_become_instructions(case) -> None:
    *layer, dtype, cores = case
    final = stages(*layer, dtype=dtype, cores=cores)[-1][1]
    assert unmatched(final, SPEC) == []
    want = "qconv" if dtype == "int8" else "conv"
    assert want in {i.name for i in insns(final)}


def test_without_preprocessing_the_padded_copy_stays_scalar() -> None:
    """Loop partitioning alone cuts the padded copy into a zero column, the interior and a zero column per
    row, and the border rows into zero stores that miss vzero's size and alignment rules."""
    final = stages(6, 5, 4, 32, cores=4, skip=("preprocess",))[-1][1]
    reasons = [str(x) for x in unmatched(final, SPEC)]
    assert "copy: the loop body holds 3 statements" in reasons
    assert any("vzero: divisible constraint" in r for r in reasons)


# ---- the matcher on hand-written nests

def _conv_nest(acc_dtype: str, src_dtype: str, guard: bool = False) -> ir.Stmt:
    inp = ir.Buffer("I", (5 * 6 * 2,), dtypes.dtype(src_dtype), "nmem")
    wgt = ir.Buffer("K", (3 * 3 * 2 * 16,), dtypes.dtype(src_dtype), "wmem")
    out = ir.Buffer("O", (3 * 4 * 16,), dtypes.dtype(acc_dtype), "nmem")
    y, x, co, ky, kx, ci = (ir.Var(n) for n in ("y", "x", "co", "ky", "kx", "ci"))
    at = y * 64 + x * 16 + co
    a = ir.cast(inp[(y + ky) * 12 + (x + kx) * 2 + ci], acc_dtype)
    b = ir.cast(wgt[ky * 96 + kx * 32 + ci * 16 + co], acc_dtype)
    update = ir.Store(out, (at,), out[at] + a * b)
    if guard:
        update = ir.IfThenElse(y < 2, update, None)
    body = ir.seq(ir.Store(out, (at,), ir.const(0, acc_dtype)), _loops([(ky, 3), (kx, 3), (ci, 2)], update))
    return _loops([(y, 3), (x, 4), (co, 16)], body)


def _loops(vs, body):
    for v, n in reversed(vs):
        body = ir.For(v, ir.const(0), ir.const(n), body)
    return body


def test_the_fields_come_from_extents_and_strides() -> None:
    got = select(_conv_nest("float32", "float32"), SPEC, "conv")
    assert isinstance(got, Match)
    assert got.fields == {"h": 5, "w": 6, "cin": 2, "cout": 16, "kh": 3, "kw": 3, "s": 1}
    assert isinstance(select(_conv_nest("int32", "int8"), SPEC, "conv"), Match)  # qconv, found by semantics


def test_a_narrow_accumulator_is_not_the_instruction() -> None:
    got = select(_conv_nest("float16", "float16"), SPEC, "conv")
    assert isinstance(got, NoMatch)
    assert "conv sums in f32 and rounds to f16 once; the nest accumulates in f16" in got.reason


def test_a_guarded_update_is_reported() -> None:
    got = select(_conv_nest("float32", "float32", guard=True), SPEC, "conv")
    assert isinstance(got, NoMatch) and "the update is guarded by `if y < 2`" in got.reason


@pytest.mark.parametrize("oc", [48, 96])
def test_channel_group_counts_that_are_not_powers_of_two_divide_the_core_index(oc: int) -> None:
    # 12 cores over 3 or 6 channel groups: the core's group is tid // groups, its part tid % groups, which
    # the scalar unit computes by a multiply and a shift (it has no divide)
    from tandem.flows.run import run
    from tandem.flows.targets import load_target

    groups = oc // 16
    plan = dops.ConvPlan(oh=12, ow=12, row_groups=12 // groups, cout_groups=groups, tile_rows=groups // 3 * 3,
                         estimate=0)
    report = run("conv2d", load_target("diannao"), {"H": 12, "W": 12, "IC": 16, "OC": oc, "dtype": "int8",
                                                     "cores": 12, "plan": plan})
    assert report.validated and report.max_abs_err == 0 and report.params["cores_used"] == 12
    assert report.scalar_fallback == 0


def test_the_flows_relu_is_the_epilogue_checked_against_numpy_and_timed() -> None:
    """``tandem run conv2d --target diannao --relu``: the output equals numpy's max(conv, 0) (bit for bit in
    int8), one relu per conv runs on the simulated card, and the epilogue's vector time is added."""
    from tandem.flows.flow import RunError
    from tandem.flows.run import run
    from tandem.flows.targets import load_target

    target = load_target("diannao")
    layer = {"H": 10, "W": 10, "IC": 8, "OC": 32, "dtype": "int8"}
    plain, fused = (run("conv2d", target, {**layer, **extra}) for extra in ({}, {"relu": True}))
    assert plain.validated and fused.validated and fused.params["relu"] is True
    assert (fused.output >= 0).all() and (fused.output == 0).any() and (plain.output < 0).any()
    np.testing.assert_array_equal(fused.output, np.maximum(plain.output, 0))
    assert fused.instructions["relu"] == fused.instructions["qconv"] and "relu" not in plain.instructions
    assert fused.cycles > plain.cycles
    with pytest.raises(RunError, match="relu must be true or false"):
        run("conv2d", target, {**layer, "relu": 2})
    with pytest.raises(RunError, match="unknown parameter 'relu'"):
        run("add", target, {"shape": (4, 64), "relu": True})


@pytest.mark.parametrize("dtype", ["int8", "int16", "float32"])
def test_the_flows_bias_is_added_before_the_relu_checked_against_numpy(dtype) -> None:
    """``tandem run conv2d --target diannao -p bias=1 [--relu]``: a third input, one value per output channel
    in the output's type, added on the card by one vcycadd per tile; the output equals numpy's conv + bias
    (then max(., 0)): bit for bit in integers, within the f32 bound (one rounding more) in float32."""
    from tandem.flows.diannao import FLOW
    from tandem.flows.flow import RunError
    from tandem.flows.run import run
    from tandem.flows.targets import load_target

    target = load_target("diannao")
    layer = {"H": 16, "W": 16, "IC": 8, "OC": 48, "dtype": dtype}
    for relu in (False, True):
        report = run("conv2d", target, {**layer, "bias": True, "relu": relu})
        assert report.validated and report.params["bias"] is True and report.scalar_fallback == 0
        conv = "conv" if dtype == "float32" else "qconv"
        # one vcycadd per tile: after its conv, or its three kernel rows' convs (a plan's ``split_ky``)
        adds = report.instructions["vcycadd"]
        assert report.instructions[conv] in (adds, 3 * adds)
        job = FLOW.plan("conv2d", {**layer, "bias": True, "relu": relu}, target)
        x, wt, b = FLOW.inputs(job, np.random.default_rng(0))   # run's inputs (seed 0)
        assert b.shape == (48,) and b.dtype == (np.float32 if dtype == "float32" else np.int32)
        exact = reference.conv2d(x, wt, 1, 1, layout="HWC")
        if dtype == "float32":
            want = exact + b
            np.testing.assert_allclose(report.output, np.maximum(want, 0) if relu else want, rtol=1e-5,
                                       atol=1e-4)
        else:   # i16 products overflow i32: the card wraps after the conv and after the add, then the ReLU
            want = (exact.astype(np.int64).astype(np.int32).astype(np.int64) + b).astype(np.int32)
            np.testing.assert_array_equal(report.output, np.maximum(want, 0) if relu else want)
    with pytest.raises(RunError, match="bias must be true or false"):
        run("conv2d", target, {**layer, "bias": 3})
    job = FLOW.plan("conv2d", {**layer, "bias": True}, target)
    x, wt, b = FLOW.inputs(job, np.random.default_rng(0))
    with pytest.raises(RunError, match=r"expected 3 input arrays \(input, weights, bias\)"):
        FLOW.check_inputs(job, [x, wt])
    with pytest.raises(RunError, match="expected a bias of 48"):
        FLOW.check_inputs(job, [x, wt, b[:47]])


@pytest.mark.parametrize(("hw", "cin", "cout", "every"), [(14, 16, 16, 1), (9, 4, 64, 6), (10, 8, 32, 4),
                                                          (16, 64, 64, 13)])   # (cuts by kernel rows too)
def test_every_cut_the_planner_lists_compiles_and_computes_numpys_result(hw, cin, cout, every) -> None:
    """conv_plans lists only cuts the compiler can build: of each form (rows or clusters' rows x channel
    groups, weights staged in SMEM or not), every tile size it offers, double-buffered or not; each runs on
    the card bit-exact (every ``every``-th cut, in the estimate's order)."""
    from compiler.ops.nn import ConvShape
    from tandem.flows.diannao import compile_conv2d

    plans = sorted(dops.conv_plans(hw, hw, cin, cout, 3, 1, 1, 1, 16, SPEC), key=lambda p: p.estimate)
    rng = np.random.default_rng(hw)
    x = rng.integers(-128, 128, (hw, hw, cin), dtype=np.int8)
    wt = rng.integers(-128, 128, (cout, 3, 3, cin), dtype=np.int8)
    forms = set()
    for plan in plans[::every]:
        _, func = compile_conv2d(ConvShape(hw, hw, cin, cout, 3, 1, 1), "int8", 16, TARGET, plan=plan)
        _, outs = run_kernel(codegen(func, SPEC), [x, dops.block_weights(wt.transpose(1, 2, 3, 0)),
                                                   np.zeros((hw, hw, cout), np.int32)])
        assert conv2d_matches(outs[-1], x, wt, 1, 1), plan
        forms.add((plan.sub_rows > 0, plan.cluster_groups > 1, plan.sub_rows > 1))
    assert len(forms) >= 2   # (16 output channels: one block, no channel groups)


@pytest.mark.parametrize(("plan", "dtype", "interpret"), [
    (dops.ConvPlan(oh=8, ow=8, row_groups=2, cout_groups=2, tile_rows=1, estimate=0, sub_rows=2, smem_rows=2,
                   split_ky=True), "int8", False),
    (dops.ConvPlan(oh=8, ow=8, row_groups=2, cout_groups=2, tile_rows=2, estimate=0, sub_rows=2, smem_rows=4,
                   split_ky=True), "float32", True),
    (dops.ConvPlan(oh=8, ow=8, row_groups=4, cout_groups=2, tile_rows=2, estimate=0, split_ky=True), "int8",
     False),
])
def test_a_conv_one_kernel_row_at_a_time_streams_its_weights_and_keeps_the_result(plan, dtype,
                                                                                  interpret) -> None:
    """``split_ky``: each tile's conv is one conv per kernel row (kh = 1) summed on the vector unit, the
    weights in kernel-row-major order, so that ``stream_copies`` loads each row's weights while the core
    computes with the row before: every pass keeps the result (interpreted for one case), and the card's
    result is numpy's."""
    cin = 32 if dtype == "int8" else 8   # a padded input row of whole vectors: each kernel row's conv aligned
    d = dops.conv2d(8, 8, cin, 32, 3, 1, 1, dtype, 16, plan=plan, spec=SPEC)
    funcs: list[tuple[str, PrimFunc]] = []
    compile_func(lower(d.schedule, list(d.args), "conv"), TARGET, dump=lambda n, f: funcs.append((n, f)))
    for (_, before), (name, after) in zip(funcs, funcs[1:], strict=False) if interpret else ():
        assert_same_results(before, after, name, seeds=1, rtol=1e-5 if name == "tensorize" else 0.0)
    final = funcs[-1][1]
    assert unmatched(final, SPEC) == []
    convs = [i for i in insns(final) if i.name in ("conv", "qconv")]
    fields = [{f.name: f.value.value for f in i.fields} for i in convs]
    assert convs and all(f["kh"] * f["kw"] == 3 for f in fields)   # one kernel row (or column) each
    streamed = [i for i in insns(final) if i.name == "memcpy_async" and i.regions[0].buffer.scope == "wmem"]
    # rows 1 and 2 of the weights (in each piece of the core loop), loaded while the core computes
    assert len({i.regions[0].offset.value for i in streamed} - {0}) == 2
    rng = np.random.default_rng(0)
    if dtype == "int8":
        x = rng.integers(-128, 128, (8, 8, cin), dtype=np.int8)
        wt = rng.integers(-128, 128, (32, 3, 3, cin), dtype=np.int8)
    else:
        x = rng.standard_normal((8, 8, cin)).astype(np.float32)
        wt = rng.standard_normal((32, 3, 3, cin)).astype(np.float32)
    y = np.zeros((8, 8, 32), np.int32 if dtype == "int8" else np.float32)
    _, outs = run_kernel(codegen(final, SPEC), [x, block_weights(wt.transpose(1, 2, 3, 0)), y])
    assert conv2d_matches(outs[-1], x, wt, 1, 1)
