"""int8 conv2d and GEMM for the CPU (compiler/ops/cpu.py) through the ``cpu`` pipeline and the LLVM backend.

Every compiled kernel must equal numpy bit for bit, for the three ``isa`` choices, for tilings that do and do
not divide the layer, and for channel counts that are not multiples of the instruction's 4 x 16 (the packing
pads them with zeros). Every pass of the pipeline is checked by running the IR before and after it, in the
interpreter and as compiled code (``compiler.testing.assert_same_results``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from compiler.backend.llvm import build, host_cpu
from compiler.ir import TensorInsn
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import cpu, reference
from compiler.ops.cpu import (
    CpuTuning,
    Window,
    conv,
    conv2d,
    gemm,
    pack_conv,
    pack_gemm,
    unpack_conv,
    unpack_gemm,
)
from compiler.ops.nn import ConvShape
from compiler.passes.tensorize import unmatched
from compiler.pipeline import passes_for
from compiler.target import Target
from compiler.testing import assert_same_results

X86 = isa.load_isa("x86")
TARGET = Target("cpu", X86)

VNNI = host_cpu()["avx512vnni"]
pytestmark = pytest.mark.skipif(not VNNI, reason="this CPU has no AVX-512 VNNI (the tests compile vpdpbusd)")


def compiled(sched):
    func = lower(sched.schedule, sched.args)
    for p in passes_for("cpu"):
        func = p(func, TARGET)
    return func


def instructions(func) -> int:
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, TensorInsn) else None)
    return len(found)


def run_conv(layer: ConvShape, isa: str, tuning: CpuTuning | None = None, seed: int = 0) -> None:
    sched = conv2d(layer, isa, tuning, spec=X86)
    func = compiled(sched)
    if isa == "x86-vnni":
        assert instructions(func) >= 1 and not unmatched(func, X86)
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (1, layer.ic, layer.h, layer.w)).astype(np.uint8)
    kernel = rng.integers(-128, 128, (layer.oc, layer.ic, layer.k, layer.k)).astype(np.int8)
    out = np.zeros(sched.args[2].shape, np.int32)
    build(func)(*pack_conv(data, kernel, layer), out)
    want = reference.conv2d(data, kernel, layer.s, layer.p).astype(np.int32)
    np.testing.assert_array_equal(unpack_conv(out, layer), want)


LAYERS = [
    ConvShape(14, 14, 64, 32, 3, 1, 1),
    ConvShape(9, 9, 16, 16, 3, 2, 0),
    ConvShape(7, 7, 64, 48, 1, 1, 0),
    ConvShape(8, 6, 3, 5, 3, 1, 1),  # channels that are not multiples of 4 and 16
]


@pytest.mark.parametrize("isa", ["x86-vnni", "x86-avx512", "none"])
@pytest.mark.parametrize("layer", LAYERS, ids=str)
def test_conv2d_equals_numpy(layer: ConvShape, isa: str) -> None:
    run_conv(layer, isa)


@pytest.mark.parametrize("tuning", [CpuTuning(1, 1, 1), CpuTuning(2, 2, 5), CpuTuning(4, 3, 4)], ids=str)
def test_conv2d_tilings_that_do_not_divide_the_layer(tuning: CpuTuning) -> None:
    run_conv(ConvShape(11, 13, 20, 40, 3, 1, 1), "x86-vnni", tuning)


@settings(max_examples=25, deadline=None)
@given(
    h=st.integers(3, 12),
    w=st.integers(3, 12),
    ic=st.integers(1, 40),
    oc=st.integers(1, 40),
    k=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    pad=st.integers(0, 1),
    unroll_oc=st.integers(1, 3),
    unroll_x=st.integers(1, 8),
    parallel=st.integers(1, 4),
)
def test_conv2d_property_compiled_equals_numpy(
    h, w, ic, oc, k, stride, pad, unroll_oc, unroll_x, parallel
) -> None:
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    run_conv(ConvShape(h, w, ic, oc, k, stride, pad), "x86-vnni", CpuTuning(parallel, unroll_oc, unroll_x))


@pytest.mark.parametrize(("m", "n", "k"), [(32, 48, 64), (5, 20, 13), (1, 16, 4)])
@pytest.mark.parametrize("isa", ["x86-vnni", "x86-avx512"])
def test_gemm_equals_numpy(m: int, n: int, k: int, isa: str) -> None:
    sched = gemm(m, n, k, isa, CpuTuning(2, 2, 4), spec=X86)
    func = compiled(sched)
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, k)).astype(np.int8)
    out = np.zeros(sched.args[2].shape, np.int32)
    build(func)(*pack_gemm(a, b), out)
    np.testing.assert_array_equal(unpack_gemm(out, n), reference.dense(a, b).astype(np.int32))


def test_every_pass_of_the_cpu_pipeline_keeps_the_result_interpreted_and_compiled() -> None:
    sched = conv2d(ConvShape(6, 7, 8, 32, 3, 1, 1), "x86-vnni", CpuTuning(3, 2, 3), spec=X86)
    func = lower(sched.schedule, sched.args)
    for p in passes_for("cpu"):
        after = p(func, TARGET)
        assert_same_results(func, after, p.name, seeds=2)
        func = after
    # 7 columns in tiles of 3: the loop partitioning splits off the last column, so two instruction
    # statements remain, each in unrolled (oc block, column) loops (2 x 3 and 2 x 1 copies in machine code)
    assert instructions(func) == 2
    assert "if " not in str(func)  # no guard left


def test_small_conv_after_each_pass_of_the_cpu_pipeline(golden) -> None:
    """UNIT's rewrite of a small conv (8 x 8 x 8 -> 32, 3x3, two oc blocks x three columns unrolled):
    printed after lowering and after every pass of the ``cpu`` pipeline; the last shows vpdpbusd with its
    operands' views (a: 4 bytes broadcast to 16 lanes, b: 64 contiguous bytes, c/d: 16 int32 lanes)."""
    from compiler.pipeline import build as build_func

    sched = conv2d(ConvShape(8, 8, 8, 32, 3, 1, 1), "x86-vnni", CpuTuning(3, 2, 3), spec=X86)
    printed: list[str] = []
    build_func(
        sched.schedule,
        sched.args,
        target=TARGET,
        dump=lambda name, f: printed.append(f"# ---- after {name}\n{f}\n"),
    )
    golden.check("".join(printed))


@pytest.mark.parametrize("source", ["resnet18", "table1"])
def test_every_resnet18_and_unit_table1_layer_is_bit_exact(source: str) -> None:
    """The experiment's 27 layers at full size, UNIT's default tuning, one run each."""
    from tandem.flows.cpu_tuning import tuning_space
    from tandem.flows.layer_tables import RESNET18, UNIT_TABLE1, padding

    if source == "resnet18":
        layers = [ConvShape(hw, hw, ic, oc, k, s, padding(k)) for hw, ic, oc, k, s in RESNET18.values()]
    else:
        layers = [ConvShape(ihw, ihw, c, k, r, s, 0) for c, ihw, k, r, s in UNIT_TABLE1.values()]
    for layer in layers:
        run_conv(layer, "x86-vnni", tuning_space(layer)[0])


@st.composite
def windows(draw) -> Window:
    """A small direct convolution: 1 to 3 spatial dimensions, stride, dilation, batch; depthwise (2-D) or
    with the output pixels on the lanes."""
    kind = draw(st.sampled_from(["channels", "pixels", "depthwise"]))
    dims = 2 if kind == "depthwise" else draw(st.integers(1, 3))
    k, s, dil = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    reach = dil * (k - 1) + 1
    sizes = tuple(draw(st.integers(reach, reach + (5 if dims < 3 else 2))) for _ in range(dims))
    ic = draw(st.integers(1, 9))
    oc = ic if kind == "depthwise" else draw(st.integers(1, 20))
    return Window(sizes, ic, oc, k, s, dil, draw(st.integers(1, 2)), kind == "depthwise", kind == "pixels")


@settings(max_examples=12, deadline=None, derandomize=True)
@given(window=windows(), tuning=st.sampled_from([CpuTuning(), CpuTuning(2, 1, 3), CpuTuning(1, 2, 2)]))
def test_direct_convolutions_equal_numpy_and_put_every_product_on_vpdpbusd(window, tuning) -> None:
    """``cpu.conv`` (the window read in the kernel): random windows of every form compile through the
    pipeline, every product on the instruction, and equal the reference bit for bit."""
    from tandem.flows import cpu_layers

    data, weight = cpu_layers.inputs(window, 0)
    sched = conv(window, "x86-vnni", tuning, spec=X86)
    func = compiled(sched)
    assert unmatched(func, X86) == [] and instructions(func) > 0
    packed = cpu_layers.pack(window, data, weight)
    out = np.zeros(func.params[-1].shape, np.int32)
    build(func, threads=1)(*packed, out)
    np.testing.assert_array_equal(cpu_layers.unpack(window, out), cpu_layers.reference(window, data, weight))


def test_a_window_that_is_no_convolution_is_refused() -> None:
    from compiler.errors import ScheduleError

    with pytest.raises(ScheduleError, match="reaches past the input"):
        conv(Window((3, 3), 4, 4, 3, 1, 2), spec=X86)
    with pytest.raises(ScheduleError, match="a depthwise window has as many outputs as inputs"):
        conv(Window((5, 5), 4, 8, 3, depthwise=True), spec=X86)


def test_a_tuning_that_streams_a_tile_summed_in_place_is_refused() -> None:
    """``stream`` writes a tile's copy-out past the caches; a K-blocked tile has no copy-out: it sums into
    its output, which it reads again, so the two together are refused by name, not half applied."""
    from compiler.errors import ScheduleError

    with pytest.raises(ScheduleError, match="stream stores a tile's copy-out past the caches"):
        gemm(64, 64, 256, "x86-vnni", CpuTuning(1, 2, 8, k_block=16, stream=True), spec=X86)
    assert gemm(64, 64, 256, "x86-vnni", CpuTuning(1, 2, 8, k_block=16), spec=X86).tuning.k_block == 16


@pytest.mark.parametrize(("channels", "source", "data", "group", "offset"), [
    (64, np.int32, np.uint8, 4, 0), (24, np.int32, np.uint8, 4, 0), (40, np.int32, np.uint8, 4, 128),
    (48, np.int32, np.int16, 2, 0), (32, np.int8, np.uint8, 4, 128), (32, np.int32, np.uint8, 16, 0)])
def test_reblock_regroups_a_kernels_output_as_unpacking_and_packing_it_would(channels, source, data, group,
                                                                             offset):
    """A kernel's blocked output [1, C/16, H, W, 16] moved straight into the inside of the next kernel's
    padded [1, C/G, H + 2, W + 2, G] data equals it unpacked to NCHW, moved by the offset and packed; the
    border is left as it was."""
    rng = np.random.default_rng(channels)
    lanes, h, w = 16, 5, 7
    values = rng.integers(-offset, 256 - offset, (1, -(-channels // lanes), h, w, lanes)).astype(source)
    want = np.full((1, -(-channels // group), h + 2, w + 2, group), 99, data)
    plain = cpu.unpack_window(values, channels).astype(np.int32)
    cpu.to_blocks(want[:, :, 1:-1, 1:-1], plain + offset, group)
    got = np.full_like(want, 99)
    cpu.reblock(values, got[:, :, 1:-1, 1:-1], offset)
    real = channels   # lanes past the channels carry the source's (they meet the kernel's zero weights)
    np.testing.assert_array_equal(_channels(got, real), _channels(want, real))
    assert (got[:, :, 0] == 99).all() and (got[:, :, :, -1] == 99).all()


def _channels(blocked: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` channels of blocked [1, C/G, H, W, G] data, as [count, H, W]."""
    return np.moveaxis(blocked[0], -1, 1).reshape(-1, *blocked.shape[2:4])[:count]


def test_reblock_refuses_a_group_that_does_not_divide_the_lanes():
    with pytest.raises(ValueError, match="group must divide the lanes"):
        cpu.reblock(np.zeros((1, 1, 2, 2, 16), np.int32), np.zeros((1, 6, 2, 2, 3), np.uint8))


@pytest.mark.parametrize(("dtype", "lanes", "group"), [(np.int8, 16, 4), (np.int16, 16, 2), (np.int8, 4, 4),
                                                       (np.float32, 16, 1)])
def test_pack_columns_is_pack_gemm_of_each_transposed_operand(dtype, lanes: int, group: int) -> None:
    """A MatMul's second operand [..., K, N] packed as a GEMM's weights (attention's heads, each head's
    keys): the same array as ``pack_gemm`` of its transpose, for every head."""
    rng = np.random.default_rng(0)
    b = rng.integers(-128, 128, (3, 2 * group * 4, 2 * lanes)).astype(dtype)
    pk = cpu.Packing("uint8", np.dtype(dtype).name, lanes, group)
    out = np.empty((3, 2, 8, lanes, group), dtype)
    cpu.pack_columns(b, out)
    for head in range(3):
        _, want = pack_gemm(np.zeros((1, b.shape[1]), np.uint8), np.ascontiguousarray(b[head].T), pk)
        np.testing.assert_array_equal(out[head], want)


def test_pack_columns_reads_a_transposed_view_as_it_is() -> None:
    """Attention's keys as the graph transposes them ([tokens, heads, d] viewed as [heads, d, tokens]): the
    groups of 4 along d are words already, moved as such; the same array as from a contiguous copy."""
    keys = np.random.default_rng(1).integers(-128, 128, (128, 12, 64)).astype(np.int8)
    view = np.transpose(keys, (1, 2, 0))
    out, want = (np.empty((12, 8, 16, 16, 4), np.int8) for _ in range(2))
    cpu.pack_columns(view, out)
    np.testing.assert_array_equal(out, cpu.pack_columns(np.ascontiguousarray(view), want))
