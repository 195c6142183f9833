"""VITA lowering passes (inplace, inject_dma, tensorize_tiles): each one keeps what the IR computes, and
leaves the instructions TVM Sec. 3.4-3.5 describe: 2-D DMA with padding, GEMM and ALU tile instructions."""

import functools

import pytest

import isa
from compiler.errors import LoweringError, ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import vita
from compiler.passes.inject_dma import inject_dma
from compiler.passes.inplace import inplace
from compiler.pipeline import compile_func, passes_for
from compiler.target import Target
from compiler.testing import assert_same_results

VITA = isa.load_isa("vita")
TARGET = Target("vita", VITA)
vconv2d = functools.partial(vita.conv2d, spec=VITA)
vdense = functools.partial(vita.dense, spec=VITA)

CASES = {
    "conv 6x6 pad 1": lambda vt: vconv2d(vita.ConvShape(6, 6, 32, 32, 3, 1, 1),
                                             tiling=vita.Tiling(3, 1, 1, vt)),
    "conv 9x9 stride 2": lambda vt: vconv2d(vita.ConvShape(9, 9, 32, 32, 3, 2, 1),
                                                tiling=vita.Tiling(5, 1, 1, vt)),
    "conv 1x1 relu": lambda vt: vconv2d(vita.ConvShape(6, 6, 48, 32, 1, 1, 0), relu=True,
                                            tiling=vita.Tiling(3, 1, 3, vt)),
    "dense 4x32x64": lambda vt: vdense(4, 32, 64, tiling=vita.Tiling(2, 1, 2, vt)),
}


def _instructions(func: ir.PrimFunc) -> list[str]:
    found = []
    post_order_visit(func.body, lambda n: found.append(n.name) if isinstance(n, ir.TensorInsn) else None)
    return found


@pytest.mark.parametrize("vthreads", [0, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_pass_keeps_the_result(case, vthreads):
    vs = CASES[case](vthreads)
    func = compile_func(lower(vs.schedule, vs.args), "reference")
    steps = ("inplace", "inject_dma", "tensorize_tiles", "inject_sync", "inject_virtual_thread")
    for step in (p for p in passes_for("vita") if p.name in steps):
        before, func = func, step(func, TARGET)
        assert_same_results(before, func, step.name, seeds=1)
    names = set(_instructions(func))
    assert {"LOAD_INP", "LOAD_WGT", "GEMM", "GEMM_RESET", "ALU_SHR", "ALU_MAX", "ALU_MIN",
            "STORE_OUT"} <= names


def test_padding_becomes_load_fields():
    vs = CASES["conv 6x6 pad 1"](0)
    func = inject_dma(inplace(compile_func(lower(vs.schedule, vs.args), "reference")), VITA)
    loads = []
    post_order_visit(func.body, lambda n: loads.append(n) if isinstance(n, ir.TensorInsn) and
                     n.name == "LOAD_INP" else None)
    (load,) = loads
    fields = {f.name: f.value for f in load.fields}
    assert fields["x_pad_0"] == ir.const(1) and fields["x_pad_1"] == ir.const(1)
    assert "y.o" in str(fields["y_pad_0"])   # the first row tile pads above, the others do not


def test_a_copy_that_is_no_dma_is_refused():
    x = ir.Buffer("x", (64,), dtypes.int8)
    y = ir.Buffer("y", (64,), dtypes.int8, scope="inp")
    i = ir.Var("i")
    body = ir.Attr("pragma_dma_copy", "", ir.For(i, ir.const(0), ir.const(64),
                   ir.Store(y, (i,), ir.Load(x, (i * 2 % 64,)))))
    func = ir.PrimFunc("f", (x,), ir.Allocate(y, body))
    with pytest.raises(LoweringError, match="inject_dma"):
        inject_dma(func, VITA)


def test_tilings_that_leave_partial_tiles_are_refused():
    with pytest.raises(ScheduleError, match="do not divide"):
        vconv2d(vita.ConvShape(9, 9, 32, 32, 3, 2, 1), tiling=vita.Tiling(2, 1, 1))


def test_an_element_wise_operator_sums_in_place_and_clips_on_the_alu():
    """``vita.elementwise``: ``sum = a + b`` folds into the first input's accumulators (the ALU's
    ``dst = dst + src``), each pass keeps the result, and only accumulator loads, ALU micro-ops and the store
    are left."""
    vs = vita.elementwise(2, 6, 3, (-20, 100), spec=VITA)
    func = compile_func(lower(vs.schedule, vs.args), "reference")
    for step in (p for p in passes_for("vita") if p.name in ("inplace", "inject_dma", "tensorize_tiles")):
        before, func = func, step(func, TARGET)
        assert_same_results(before, func, step.name, seeds=2)
    assert set(_instructions(func)) == {"LOAD_ACC", "ALU_ADD", "ALU_MAX", "ALU_MIN", "STORE_OUT"}
    with pytest.raises(ScheduleError, match="must lie in int8's"):
        vita.elementwise(1, 4, 4, (0, 255), spec=VITA)


def test_a_max_pool_keeps_its_result_through_each_pass():
    vs = vita.max_pool(2, 5, 5, 3, 1, 3, spec=VITA)
    func = compile_func(lower(vs.schedule, vs.args), "reference")
    for step in (p for p in passes_for("vita") if p.name in ("inplace", "inject_dma", "tensorize_tiles")):
        before, func = func, step(func, TARGET)
        assert_same_results(before, func, step.name, seeds=2)
    assert set(_instructions(func)) == {"LOAD_ACC", "GEMM_RESET", "ALU_ADD", "ALU_MAX", "ALU_MIN",
                                        "STORE_OUT"}


def test_a_strided_1x1_conv_loads_only_the_input_rows_it_reads() -> None:
    """A 1 x 1 conv of stride 2 reads every other input row: each LOAD_INP takes a tile's output rows of
    input, 2 rows apart in DRAM (its row pitch), and the result is bit-exact."""
    from compiler.ops.nn import ConvShape
    from tandem.flows.targets import load_target
    from tandem.flows.vita import compile_layer, run_vita
    target, layer = load_target("vita", "tvm-paper"), ConvShape(28, 28, 64, 64, 1, 2, 0)
    tiling = vita.Tiling(rows=2, oc_block=4, ic_block=4)
    _, kernel = compile_layer(layer, tiling, target)
    loads = [i.values for i in kernel.program.insns if i.name == "LOAD_INP" and i.values["y_size"]]
    assert loads and all(v["y_size"] == 2 and v["x_stride"] == 2 * layer.w for v in loads)
    assert run_vita(layer, 0, target, tiling=tiling).validated


@pytest.mark.parametrize("vthreads, axis, oc_block, loads", [
    (0, "oc", 2, 2),   # one load per channel block
    (2, "oc", 2, 2),   # each thread its own blocks
    (2, "h", 2, 4),    # each thread over rows loads each block
    (2, "h", 4, 1),    # threads over rows of one block share one copy
])
def test_weights_tiled_in_one_chunk_are_loaded_once_per_channel_block(vthreads, axis, oc_block, loads):
    """With every input channel in one chunk, a channel block's weights do not change from one row tile to
    the next: they are loaded once per block (and thread, unless the threads share the block), not once
    per tile, and the result is bit-exact."""
    from compiler.ops.nn import ConvShape
    from tandem.flows.targets import load_target
    from tandem.flows.vita import compile_layer, run_vita
    target, layer = load_target("vita", "tvm-paper"), ConvShape(8, 8, 32, 64, 3, 1, 1)
    tiling = vita.Tiling(rows=2, oc_block=oc_block, ic_block=2, vthreads=vthreads, vthread_axis=axis)
    _, kernel = compile_layer(layer, tiling, target)
    weights = [i for i in kernel.program.insns if i.name == "LOAD_WGT" and i.values["x_size"]]
    assert len(weights) == loads
    assert vita.shared_weights(layer, tiling, target.spec) == (loads == 1)
    assert run_vita(layer, vthreads, target, tiling=tiling).validated


def test_the_units_of_two_virtual_threads_overlap_across_tiles() -> None:
    """Each virtual thread's GEMMs push their "done" token right after them (lift_alloc puts a tile's loads,
    GEMMs and store in one list), so one thread's store and next load overlap the other's GEMMs: a 1 x 1
    conv whose DRAM traffic and GEMMs take about as long reaches at least 80% GEMM utilization."""
    from compiler.ops.nn import ConvShape
    from tandem.flows.targets import load_target
    from tandem.flows.vita import run_vita
    spec = "tests/extensions/vita_pipelined_fused_ends.toml"
    target, layer = load_target("vita", "tvm-paper", spec), ConvShape(28, 28, 64, 64, 1, 1, 0)
    tiling = vita.Tiling(rows=1, oc_block=4, ic_block=4, vthreads=2, vthread_axis="h")
    report = run_vita(layer, 2, target, tiling=tiling)
    assert report.validated and report.utilization["gemm"] >= 0.8


def test_a_token_carried_by_an_inner_loop_goes_around_its_perfect_nest() -> None:
    """Row tiles outside output-channel blocks (several input-channel chunks): the store -> compute token
    that frees a thread's accumulator for its next tile is popped before that tile's reset in every
    iteration of the nest but the first, the first block of the next row tile included, and drained once
    after the nest, not after each row tile's blocks (where the compute unit would wait for every
    thread's last store before resetting any accumulator)."""
    from compiler.ops.nn import ConvShape
    layer = ConvShape(16, 8, 64, 128, 1, 2, 0)
    vs = vconv2d(layer, tiling=vita.Tiling(rows=2, oc_block=4, ic_block=2, vthreads=2, vthread_axis="h"))
    func = compile_func(lower(vs.schedule, vs.args), TARGET)
    lines = [line.strip() for line in str(func).splitlines() if "pop_dep(store -> compute" in line]
    assert len(lines) == 4   # per thread: one guarded pop in the nest, one drain after it
    text = str(func)
    assert text.count("if 0 < co.o + y.o.t*2:") == 2
    assert all("[0, 4])" in line or "[1, 4])" in line for line in lines if "y.o.t" not in line)
