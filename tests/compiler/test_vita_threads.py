"""Virtual threads on VITA (TVM Sec. 3.5): per-thread synchronization, interleaving, Theorem 3.1.

Any tiling and any number of threads must give a program whose token queues line up (check_token_order)
and that runs to the end on the simulator, bit-exact with numpy; a wrong interleaving must be caught."""

import functools
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import isa
from compiler.backend.vita import build_vita
from compiler.errors import TokenOrderError
from compiler.ir import nodes as ir
from compiler.ir.dae_tokens import DepToken
from compiler.ir.functor import IRMutator, post_order_visit
from compiler.ops import vita
from compiler.passes import check_token_order
from compiler.pipeline import build
from compiler.target import Target
from sim.vita.machine import DeadlockError, simulate

VITA = isa.load_isa("vita")
TARGET = Target("vita", VITA)
vconv2d = functools.partial(vita.conv2d, spec=VITA)
vdense = functools.partial(vita.dense, spec=VITA)

# the pass module, for its unit cutting (compiler.passes.inject_virtual_thread names the function)
interleave = sys.modules["compiler.passes.inject_virtual_thread"]


def _tokens(func: ir.PrimFunc) -> list[DepToken]:
    found: list[DepToken] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, DepToken) else None)
    return found


def _inputs(vs: vita.VitaSchedule, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, a.shape, dtype=np.int8) for a in vs.args[:2]]


def _simulate(func: ir.PrimFunc, vs: vita.VitaSchedule, inputs, config: str = "vta-default"):
    kernel = build_vita(func, VITA)
    result = simulate(kernel.program, kernel.dram_image(inputs), config)
    out = kernel.read(result.dram, vs.args[-1].name).reshape(vs.args[-1].shape)
    return kernel, result, out


LAYER = vita.ConvShape(8, 8, 32, 64, 3, 1, 1)


def test_outer_loops_add_no_token_that_inner_tokens_already_give():
    vs = vconv2d(LAYER, tiling=vita.Tiling(4, 1, 1, 2, "oc"))
    func = build(vs.schedule, vs.args, target=TARGET)
    names = sorted({t.token.split("#")[0] + ("" if "next" not in t.token else " carried")
                    for t in _tokens(func)})
    # one forward token per unit pair of the chunk and the tile, and the two carried ones that matter:
    # the next chunk's load waits for this chunk's GEMM, the next tile's GEMM for this tile's store
    assert names == ["compute->load carried", "compute->store", "load->compute", "store->compute carried"]


def test_each_thread_gets_its_own_buffers_and_no_vthread_loop_is_left():
    vs = vconv2d(LAYER, tiling=vita.Tiling(4, 1, 1, 2, "oc"))
    func = build(vs.schedule, vs.args, target=TARGET)
    loops, allocs = [], []
    post_order_visit(func.body, lambda n: loops.append(n) if isinstance(n, ir.For) else
                     allocs.append(n.buffer.name) if isinstance(n, ir.Allocate) else None)
    assert not [lp for lp in loops if lp.thread == "vthread"]
    assert sorted(allocs) == ["kernel.wgt.vt0", "kernel.wgt.vt1", "pad.inp.vt0", "pad.inp.vt1",
                              "res.vt0", "res.vt1"]


def test_a_threads_loads_stay_together_so_its_gemm_can_start():
    vs = vconv2d(LAYER, tiling=vita.Tiling(4, 1, 1, 2, "oc"))
    func = build(vs.schedule, vs.args, target=TARGET)
    kernel = build_vita(func, VITA)
    loads = [i.name for i in kernel.program.insns if i.name in ("LOAD_INP", "LOAD_WGT") and i["x_size"]]
    # thread 0's input and weights, then thread 1's: not both inputs first
    assert loads[:4] == ["LOAD_INP", "LOAD_WGT", "LOAD_INP", "LOAD_WGT"]


def test_latency_hiding_shortens_a_load_bound_layer():
    layer = vita.ConvShape(14, 14, 64, 64, 3, 1, 1)
    serial = vconv2d(layer, tiling=vita.Tiling(7, 1, 2, 0))
    threaded = vconv2d(layer, tiling=vita.Tiling(7, 1, 2, 2, "oc"))
    inputs = _inputs(serial)
    cycles = []
    for vs in (serial, threaded):
        _, result, out = _simulate(build(vs.schedule, vs.args, target=TARGET), vs, inputs)
        np.testing.assert_array_equal(out, vita.conv2d_reference(*inputs, layer))
        cycles.append(result.cycles)
    assert cycles[1] < 0.9 * cycles[0], cycles


# ------------------------------------------------------------------------------------------- property
@st.composite
def threaded_convs(draw):
    """A small conv layer and a tiling that cuts it into whole tiles for 1-4 virtual threads."""
    threads = draw(st.integers(1, 4))
    axis = draw(st.sampled_from(["oc", "h"]))
    k, s = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 2]))
    oc_b = threads * draw(st.integers(1, 2)) if axis == "oc" else draw(st.integers(1, 3))
    ic_b = draw(st.integers(1, 3))
    rows = draw(st.integers(1, 3))
    oh = rows * draw(st.integers(1, 2)) * (threads if axis == "h" else 1)
    h = (oh - 1) * s + 1   # k = 3 pads by 1, k = 1 by 0: either way oh = (h - 1) // s + 1
    share = oc_b // threads if axis == "oc" else oc_b
    ob = draw(st.sampled_from([d for d in range(1, share + 1) if share % d == 0]))
    ib = draw(st.sampled_from([d for d in range(1, ic_b + 1) if ic_b % d == 0]))
    return vita.ConvShape(h, h, 16 * ic_b, 16 * oc_b, k, s, k // 2), vita.Tiling(rows, ob, ib, threads, axis)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(threaded_convs())
def test_any_tiling_and_thread_count_lines_up_its_tokens_and_computes_the_conv(case):
    layer, tiling = case
    assert layer.oh == tiling.rows * (layer.oh // tiling.rows)
    assume(vita.tile_fits(layer, tiling, isa.load_isa("vita")) is None)   # each thread's tiles fit
    vs = vconv2d(layer, tiling=tiling)
    func = build(vs.schedule, vs.args, target=TARGET)
    inputs = _inputs(vs, seed=layer.h)
    kernel, _, out = _simulate(func, vs, inputs)
    check_token_order(kernel.tokens)
    np.testing.assert_array_equal(out, vita.conv2d_reference(*inputs, layer))


# ------------------------------------------------------------------------------------------- mis-ordered
class _SwapThreads(IRMutator):
    """In the first statement list with the two threads' GEMM units side by side, put thread 1's first:
    a wrong interleaving (pushes come in thread order 0, 1; these pops in 1, 0)."""

    def __init__(self) -> None:
        self.done = False

    def mutate_Seq(self, s: ir.Seq) -> ir.Stmt:
        s = self.generic_mutate(s)
        if self.done or not isinstance(s, ir.Seq):
            return s
        units = interleave._units(list(s.stmts), lambda x: frozenset({"?"}))
        gemm = [k for k, u in enumerate(units) if any(_has_gemm(x) for x in u)]
        if len(gemm) < 2 or gemm[1] != gemm[0] + 1:
            return s
        a, b = gemm
        units[a], units[b] = units[b], units[a]
        self.done = True
        return ir.seq(*(x for u in units for x in u))


def _has_gemm(s: ir.Stmt) -> bool:
    found = []
    post_order_visit(s, lambda n: found.append(n) if isinstance(n, ir.TensorInsn) and n.name == "GEMM"
                     else None)
    return bool(found)


def test_a_misordered_interleaving_is_caught_by_the_checker_and_the_simulator():
    vs = vconv2d(LAYER, tiling=vita.Tiling(4, 1, 1, 2, "oc"))
    func = build(vs.schedule, vs.args, target=TARGET)
    swap = _SwapThreads()
    bad = ir.PrimFunc(func.name, func.params, swap.mutate(func.body), func.attrs)
    assert swap.done
    kernel = build_vita(bad, VITA)
    with pytest.raises(TokenOrderError, match=r"queue load -> compute: pop #0 .* is for 'load->compute#\d+' "
                                              r"\[1, 0, 0, 0\], but push #0, the token it takes, is "
                                              r"'load->compute#\d+' \[0, "):
        check_token_order(kernel.tokens)
    inputs = _inputs(vs)
    try:
        result = simulate(kernel.program, kernel.dram_image(inputs), "vta-default")
    except DeadlockError:
        return
    # no deadlock: the GEMMs ran on each other's tokens; the checker above is what flags it
    assert result.cycles > 0


def test_the_checker_names_a_pop_without_push_and_a_push_nobody_pops():
    vs = vconv2d(LAYER, tiling=vita.Tiling(4, 1, 1))
    tokens = build_vita(build(vs.schedule, vs.args, target=TARGET), VITA).tokens
    check_token_order(tokens)
    no_pushes = [t for t in tokens if not (t.action == "push" and t.src == "load")]
    with pytest.raises(TokenOrderError, match=r"queue load -> compute: pop #0 at instruction \d+ .* has no "
                                              r"push: 0 pushes"):
        check_token_order(no_pushes)
    no_pops = [t for t in tokens if not (t.action == "pop" and t.src == "load")]
    with pytest.raises(TokenOrderError, match=r"push #0 .* is never popped"):
        check_token_order(no_pops)


# ------------------------------------------------------------------------------------------- golden
def test_double_buffered_gemm_after_each_pass_and_its_assembly(golden):
    """A small GEMM (8 x 32 x 32, two chunks of K) with two virtual threads over its output blocks: the
    double-buffered program of Sec. 3.5, printed after lowering, after every pass of the ``vita``
    pipeline, and as VITA assembly."""
    from isa.asm import disassemble

    vs = vdense(8, 32, 32, tiling=vita.Tiling(4, 1, 1, 2, "oc"))
    printed: list[str] = []
    func = build(vs.schedule, vs.args, target=TARGET,
                 dump=lambda name, f: printed.append(f"# ---- after {name}\n{f}\n"))
    kernel = build_vita(func, VITA)
    check_token_order(kernel.tokens)
    golden.check("".join(printed) + "# ---- VITA assembly\n" + disassemble(kernel.program))
