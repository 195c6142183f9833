"""compiler/ops/network.py's operators (residual add, ReLU, clip, concat, max/avg/global-average pooling,
softmax, layer norm, GELU) on this CPU (written as operators of our own, compiled by LLVM) and on the DianNao
card (element-wise ones as a user's operator, the others by compiler/ops/diannao_network.py's schedules in
the card's layouts), validated against compiler/ops/reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from compiler.backend.llvm import host_cpu
from compiler.ops import network
from tandem.cli.app import app
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import load_target

RUNNER = CliRunner()
CPU = load_target("cpu")
DIANNAO = load_target("diannao")
ROWS = ("softmax", "layer_norm", "gelu")   # the transformer operators: [R, D] rows
INT_ROWS = ("softmax_int8", "layer_norm_int8")   # the power-of-two graph's: [R, D] int8 rows
PARAMS = {"residual_add": {}, "relu": {}, "clip": {"LO": -7, "HI": 20}, "concat": {"C2": 3},
          "max_pool": {"K": 3, "S": 2},
          "avg_pool": {"K": 3, "S": 3}, "global_avg_pool": {}}


@pytest.mark.parametrize("op", [op for op in network.OPERATORS if op not in (*ROWS, *INT_ROWS)])
def test_each_network_operator_runs_on_the_cpu_and_validates(op):
    report = run(op, CPU, {"C": 8, "H": 9, "W": 9, **PARAMS[op], "min_time": 0.01})
    assert report.validated, report.detail
    assert report.params["operator"] == {"C": 8, "H": 9, "W": 9, **PARAMS[op]}


@pytest.mark.parametrize("mask", [0, 1])
@pytest.mark.parametrize("shape", [(4, 100), (24, 128)])
def test_the_integer_softmax_runs_on_the_cpu_bit_exact(shape, mask):
    """``softmax_int8`` (the power-of-two graph's softmax) compiled: bit for bit ``reference.softmax_int8``
    on random rows and random tables (a mask's -128 looking up the table's first value)."""
    report = run("softmax_int8", CPU, {"R": shape[0], "D": shape[1], "E": 7, "MASK": mask, "min_time": 0.01})
    assert report.validated and report.detail.startswith("bit-exact"), report.detail
    assert report.output.dtype.name == "int8" and report.output.shape == shape


@pytest.mark.parametrize("shape", [(4, 100), (16, 768)])
def test_the_integer_layer_norm_runs_on_the_cpu_bit_exact(shape):
    """``layer_norm_int8`` (the power-of-two graph's layer norm) compiled: bit for bit
    ``reference.layer_norm_int8`` (its float32 steps unfused) on random rows, scales and shifts."""
    report = run("layer_norm_int8", CPU, {"R": shape[0], "D": shape[1], "min_time": 0.01})
    assert report.validated and report.detail.startswith("bit-exact"), report.detail
    assert report.output.dtype.name == "int8" and report.output.shape == shape


@pytest.mark.parametrize("op", ROWS)
@pytest.mark.parametrize("shape", [(4, 100), (3, 768)])
def test_softmax_layer_norm_and_gelu_run_in_f32_on_the_cpu(op, shape):
    report = run(op, CPU, {"R": shape[0], "D": shape[1], "min_time": 0.01})
    assert report.validated, report.detail
    assert report.output.dtype.name == "float32" and report.output.shape == shape
    if op == "softmax":
        assert abs(float(report.output.sum()) - shape[0]) < 1e-4   # every row sums to one


# on the card: the vector instructions each operator's computation takes (every one but the scalar fills of
# constant vectors and of max's -inf start, which no instruction computes)
CARD = {
    "residual_add": ({"C": 4, "H": 16, "W": 16}, {"vadd"}),
    "relu": ({"C": 4, "H": 16, "W": 16}, {"relu"}),
    "clip": ({"C": 2, "H": 8, "W": 8, "LO": -5, "HI": 7}, {"vmax", "vmin"}),
    "concat": ({"C": 5, "H": 6, "W": 7, "C2": 3}, set()),
    "max_pool": ({"C": 16, "H": 9, "W": 9, "K": 3, "S": 2}, {"vmax"}),
    "avg_pool": ({"C": 16, "H": 8, "W": 8, "K": 2, "S": 2}, {"vadd", "vmul"}),
    "global_avg_pool": ({"C": 70, "H": 5, "W": 3}, {"vzero", "vadd", "vmul"}),
    "softmax": ({"R": 70, "D": 20}, {"vmax", "vsub", "vexp", "vadd", "vrecip", "vmul"}),
    "layer_norm": ({"R": 5, "D": 48}, {"vadd", "vmul", "vsub", "vrsqrt"}),
    "gelu": ({"R": 3, "D": 50}, {"vmul", "vadd", "tanh"}),
}


@pytest.mark.parametrize("op", list(CARD))
def test_each_network_operator_runs_on_the_card_on_its_vector_instructions(op):
    params, vector = CARD[op]
    report = run(op, DIANNAO, dict(params))
    assert report.validated, report.detail
    if report.output.dtype.kind == "i":
        assert report.max_abs_err == 0
    assert vector <= set(report.instructions), report.instructions
    assert report.instructions.get("memcpyr", 0) >= 2   # staged in NMEM, copied out
    fills = [u for u in report.unmatched if "expected a load for operand src, found" in u]
    assert len(fills) == len(report.unmatched), report.unmatched   # only constants stay scalar


def test_a_max_pool_gathers_each_tap_with_one_strided_copy_per_output_row():
    report = run("max_pool", DIANNAO, {"C": 64, "H": 9, "W": 9, "K": 3, "S": 2, "cores": 1})
    assert report.validated and report.scalar_fallback == 0
    assert report.instructions["vmax"] == 4 * 8   # 4 output rows, 9 taps combined pairwise
    assert report.instructions["memcpyr"] == 4 * (9 + 1)   # each tap in, the row out


def test_row_wise_operators_put_the_rows_on_the_lanes():
    """softmax of 64 rows of D: one tile, D vmax, D vsub + vexp, D vadd, one vrecip, D vmul."""
    d = 12
    report = run("softmax", DIANNAO, {"R": 64, "D": d, "cores": 1})
    assert report.validated
    assert report.instructions["vmax"] == report.instructions["vexp"] == report.instructions["vmul"] == d
    assert report.instructions["vrecip"] == 1


@settings(max_examples=4, deadline=None, derandomize=True)
@given(op=st.sampled_from(["clip", "concat", "max_pool", "avg_pool", "global_avg_pool"]),
       c=st.integers(1, 150), h=st.integers(2, 9), w=st.integers(2, 9), k=st.integers(1, 3),
       s=st.integers(1, 3), cores=st.sampled_from([1, 3, 16]), seed=st.integers(0, 99))
def test_random_images_validate_on_the_card(op, c, h, w, k, s, cores, seed):
    extra = {"max_pool": {"K": min(k, h, w), "S": s}, "avg_pool": {"K": min(k, h, w), "S": s},
             "concat": {"C2": (c * 7) % 11 + 1}, "clip": {"LO": -seed, "HI": seed}}.get(op, {})
    report = run(op, DIANNAO, {"C": c, "H": h, "W": w, **extra, "cores": cores, "seed": seed})
    assert report.validated, report.detail


@settings(max_examples=4, deadline=None, derandomize=True)
@given(op=st.sampled_from(ROWS), r=st.integers(1, 130), d=st.integers(1, 70),
       cores=st.sampled_from([1, 2, 16]), seed=st.integers(0, 99))
def test_random_rows_validate_on_the_card(op, r, d, cores, seed):
    report = run(op, DIANNAO, {"R": r, "D": d, "cores": cores, "seed": seed})
    assert report.validated, report.detail


def test_the_card_refuses_a_row_too_long_for_its_neuron_memory_and_a_window_of_too_many_taps():
    with pytest.raises(RunError, match="DianNao softmax: a core's buffers need .* bytes of NMEM"):
        run("softmax", DIANNAO, {"R": 64, "D": 1000})
    with pytest.raises(RunError, match="a 9 x 9 window has 81 taps; .* at most 64"):
        run("max_pool", DIANNAO, {"C": 4, "H": 10, "W": 10, "K": 9, "S": 1})


def test_the_reference_sees_the_parameters_it_names():
    """clip's reference takes LO and HI: with the defaults instead, -7 and 20 would not validate."""
    report = run("clip", CPU, {"C": 2, "H": 4, "W": 4, "LO": -7, "HI": 20, "min_time": 0.01})
    assert report.validated and report.output.min() >= -7 and report.output.max() <= 20
    assert report.output.min() == -7 and report.output.max() == 20   # the random int32 data reach both


def test_the_cli_takes_negative_clip_bounds_and_names_impossible_windows():
    ok = RUNNER.invoke(app, ["run", "clip", "--target", "cpu", "-p", "C=2", "-p", "H=4", "-p", "W=4", "-p",
                             "LO=-3", "-p", "HI=3", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)["validated"] is True
    bad = RUNNER.invoke(app, ["run", "max_pool", "--target", "cpu", "-p", "C=2", "-p", "H=2", "-p", "W=2",
                              "-p", "K=3"])
    assert bad.exit_code == 2 and "a window of K = 3 is larger than the 2 x 2 input" in bad.output
    with pytest.raises(RunError, match="LO = 5 must not exceed HI = 1"):
        run("clip", CPU, {"C": 1, "H": 1, "W": 1, "LO": 5, "HI": 1})


@pytest.mark.parametrize(("h", "w", "k", "s", "p"), [(9, 7, 3, 2, 1), (8, 8, 2, 2, 0), (5, 6, 3, 1, 1)])
def test_a_blocked_max_pool_equals_numpys_on_the_padded_planes(h, w, k, s, p):
    """max_pool_blocked on [B, H, W, L] (a CPU kernel's blocked output): its clamped taps give the maximum
    over each window's taps inside, as ONNX's padding does; seeded inputs over int32's whole range."""
    r = run(network.user_op("max_pool_blocked"), load_target("cpu"),
            {"B": 2, "H": h, "W": w, "L": 16, "K": k, "S": s, "P": p, "threads": 1, "min_time": 0.001})
    assert r.validated and r.output.shape == (2, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, 16)


@pytest.mark.parametrize(("t", "to", "threads"), [("uint8", "uint8", 1), ("int8", "int8", 2),
                                                  ("int8", "uint8", 2)])
def test_a_table_per_channel_is_looked_up_on_a_blocked_array(t, to, threads):
    """lookup_blocked: each value of [B, H, W, L] (8 bits, as a kernel's requantized output) picks its
    channel's row of the table; numpy's on seeded values and tables, on 1 and 2 threads, 8-bit types both
    ways (a power-of-two graph's int8, a QDQ model's uint8)."""
    import numpy as np

    from compiler.ops.network import lookup_blocked_reference

    rng = np.random.default_rng(5)
    x = rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, (3, 5, 7, 16)).astype(t)
    table = rng.integers(np.iinfo(to).min, np.iinfo(to).max + 1, (48, 256)).astype(to)
    r = run(network.user_op("lookup_blocked"), load_target("cpu"),
            {"B": 3, "H": 5, "W": 7, "L": 16, "T": t, "TO": to, "threads": threads, "min_time": 0.001},
            inputs=[x, table])
    assert r.validated and r.output.dtype == np.dtype(to)
    want = np.array([[table[b * 16 + lane, int(v) - np.iinfo(t).min] for lane, v in enumerate(px)]
                     for b, plane in enumerate(x) for row in plane for px in row]).reshape(x.shape)
    assert np.array_equal(r.output, want)
    assert np.array_equal(lookup_blocked_reference(x, table, T=t, TO=to), want)


def test_a_blocked_max_pool_refuses_padding_a_window_could_hold_alone():
    with pytest.raises(RunError, match="the padding P = 3 must be >= 0 and below the window K = 3"):
        run(network.user_op("max_pool_blocked"), load_target("cpu"),
            {"B": 1, "H": 8, "W": 8, "L": 16, "K": 3, "S": 1, "P": 3})


def test_a_blocked_scaled_mean_is_each_channels_mean_in_channel_order():
    """scaled_mean_blocked on [B, H, W, L] (8-bit values, as a kernel's requantized output holds): channel
    b * L + l's sum less Z, requantized by its scale; numpy's on the channels in the graph's layout."""
    import numpy as np

    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (3, 7, 5, 16)).astype(np.int32)
    scale = rng.uniform(0.001, 0.01, (3, 16)).astype(np.float32)
    r = run(network.user_op("scaled_mean_blocked"), load_target("cpu"),
            {"B": 3, "H": 7, "W": 5, "L": 16, "Z": 35 * 5, "ZP": 7, "threads": 1, "min_time": 0.001},
            inputs=[x, scale])
    plain = x.transpose(0, 3, 1, 2).reshape(48, 7, 5)   # channel b * 16 + l
    want = network.scaled_mean_reference(plain, scale.reshape(48), Z=35 * 5, ZP=7)
    assert r.validated and np.array_equal(r.output.reshape(48), want)


def test_a_blocked_rounded_mean_is_each_channels_mean_in_channel_order():
    """rounded_mean_blocked on [B, H, W, L]: channel b * L + l's sum over H x W, divided with rounding."""
    import numpy as np

    x = np.random.default_rng(7).integers(-128, 128, (2, 7, 7, 16)).astype(np.int32)
    r = run(network.user_op("rounded_mean_blocked"), load_target("cpu"),
            {"B": 2, "H": 7, "W": 7, "L": 16, "threads": 1, "min_time": 0.001}, inputs=[x])
    want = network.rounded_mean_reference(x.transpose(0, 3, 1, 2).reshape(32, 7, 7))
    assert r.validated and np.array_equal(r.output.reshape(32), want)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_a_table_of_256_results_is_looked_up_by_dword_gathers(dtype):
    """``network.lookup`` (a power-of-two graph's GELU or Mul by a constant on a tensor in the graph's
    layout): bit for bit the table at each value less its type's least, its int32 table's lookups
    vectorized as AVX-512 dword gathers."""
    from tandem.flows.run import prepare

    report = run(network.user_op("lookup"), CPU, {"N": 4096, "T": dtype, "TO": "int8", "min_time": 0.01})
    assert report.validated and report.detail.startswith("bit-exact"), report.detail
    rng = np.random.default_rng(0)
    x, table = rng.integers(0, 256, 4096).astype(np.uint8).view(dtype), np.arange(256, dtype=np.int32) - 128
    kernel = prepare(network.user_op("lookup"), CPU, {"N": 4096, "T": dtype, "threads": 1}, inputs=[x, table])
    if host_cpu()["avx512vnni"]:   # (an AVX-512 CPU)
        assert "vpgatherdd" in kernel.compiled[1].assembly()


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_bytes_are_looked_up_a_pair_at_a_time_in_the_table_of_pairs(dtype):
    """``network.lookup`` on int16 (an 8-bit array viewed as pairs of bytes) in ``pair_table``'s 65536
    pairs of results: each byte's result of the 256-entry table, bit for bit; a type it does not look up
    is refused by name."""
    rng = np.random.default_rng(5)
    x, table = rng.integers(0, 256, 4096).astype(np.uint8).view(dtype), rng.integers(-128, 128, 256)
    r = run(network.user_op("lookup"), CPU, {"N": 2048, "T": "int16", "TO": "int16", "threads": 2,
                                             "min_time": 0.001},
            inputs=[x.view(np.int16), network.pair_table(table, dtype)])
    assert r.validated
    np.testing.assert_array_equal(r.output.view(np.int8), table[x.astype(np.int64) - np.iinfo(dtype).min])
    with pytest.raises(RunError, match="lookup: T = 'int32' is not one of int8, uint8, int16"):
        run(network.user_op("lookup"), CPU, {"N": 16, "T": "int32", "threads": 1})


def test_the_integer_softmaxs_exponentials_are_looked_up_by_dword_gathers():
    """softmax_int8's lookups of each value's difference from its row's maximum are proved in bounds (the
    index clamped to the table), so that LLVM vectorizes them as AVX-512 dword gathers."""
    from tandem.flows.run import prepare

    rng = np.random.default_rng(0)
    x, table = rng.integers(-128, 128, (16, 64)).astype(np.int8), np.arange(257, dtype=np.int32)
    kernel = prepare(network.user_op("softmax_int8"), CPU, {"R": 16, "D": 64, "threads": 1},
                     inputs=[x, table])
    if host_cpu()["avx512vnni"]:   # (an AVX-512 CPU)
        assert "vpgatherdd" in kernel.compiled[1].assembly()


def test_a_row_wise_operators_stages_run_per_row_in_the_parallel_loop():
    """softmax_int8's maximum, lookups, sum and reciprocal are computed per row inside the one parallel loop
    over the rows (each thread's rows whole), not as serial passes over the whole tensor before it."""
    from compiler.ir import nodes as ir
    from tandem.flows.run import prepare

    rng = np.random.default_rng(0)
    x, table = rng.integers(-128, 128, (64, 128)).astype(np.int8), np.arange(257, dtype=np.int32)
    kernel = prepare(network.user_op("softmax_int8"), CPU, {"R": 64, "D": 128, "threads": 2},
                     inputs=[x, table])
    body = kernel.compiled[0].body
    while isinstance(body, ir.Allocate | ir.Attr):
        body = body.body
    assert isinstance(body, ir.For) and body.kind is ir.ForKind.PARALLEL, body


@pytest.mark.parametrize(("zp", "lo", "hi", "offset", "to"), [(114, 0, 255, 0, "uint8"),
                                                               (0, -128, 127, 128, "uint8"),
                                                               (-3, -128, 127, 0, "int8")])
def test_an_input_is_quantized_into_blocks_as_onnxruntime_quantizes_it(zp, lo, hi, offset, to):
    """quantize_blocked: float32 [C, H, W] divided by the scale, clamped (a nan to the least), rounded half to
    even, plus the zero point, moved by OFFSET, in blocks [C/G, H, W, G]: onnxruntime's QuantizeLinear on
    values that probe each rule (ties, the clamps, infinities, a nan), and the channel layout numpy's."""
    scale = np.float32(0.5)
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((3, 6, 20)) * 40).astype(np.float32)
    x[0, 0, :8] = [0.25, 0.75, -0.25, -1.25, np.inf, -np.inf, np.nan, 1e30]   # ties at x / scale = k + 0.5
    r = run(network.user_op("quantize_blocked"), CPU,
            {"C": 3, "H": 6, "W": 20, "G": 4, "ZP": zp, "LO": lo, "HI": hi, "OFFSET": offset, "TO": to,
             "threads": 2, "min_time": 0.001}, inputs=[x, np.array([scale])])
    assert r.validated and r.output.dtype == np.dtype(to) and r.output.shape == (1, 6, 20, 4)
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    kind = TensorProto.UINT8 if lo == 0 else TensorProto.INT8
    model = helper.make_model(helper.make_graph(
        [node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", kind, x.shape)],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [float(scale)]),
         helper.make_tensor("z", kind, [], [zp])]),
        opset_imports=[helper.make_opsetid("", 13)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0].astype(np.int64) + offset
    blocks = np.stack([want[0], want[1], want[2], want[2]], axis=-1)   # lane 3 repeats channel 2
    np.testing.assert_array_equal(r.output[0].astype(np.int64), blocks)


@pytest.mark.parametrize(("t", "to", "offset"), [("int8", "uint8", 128), ("uint8", "uint8", 0),
                                                 ("int8", "int8", -3)])
def test_bytes_are_moved_by_an_offset_modulo_256(t, to, offset):
    """moved_bytes (a GEMM's data in its multiplier's type): each 8-bit value plus the offset, modulo 256; an
    int8 moved to uint8 by 128 is its bits with the top one flipped."""
    x = np.arange(-128, 128).astype(np.int64).astype(t) if t == "int8" else np.arange(256, dtype=np.uint8)
    r = run(network.user_op("moved_bytes"), CPU, {"N": 256, "OFFSET": offset, "T": t, "TO": to, "threads": 2,
                                                  "min_time": 0.001}, inputs=[x])
    assert r.validated and r.output.dtype == np.dtype(to)
    np.testing.assert_array_equal(r.output.astype(np.int64) % 256, (x.astype(np.int64) + offset) % 256)
    if (t, to, offset) == ("int8", "uint8", 128):
        np.testing.assert_array_equal(r.output, x.view(np.uint8) ^ 0x80)


#: attention's operands as the MatMul holds them, views of a [tokens, 2 heads x 8] projection: the keys as
#: columns ([H, D, T]: K contiguous), the values ([H, T, D]: N contiguous); 10 tokens fill no block of 16 or 4
VIEWS = {"keys": dict(K=8, N=10, SH=8, SK=1, SN=16), "values": dict(K=10, N=8, SH=8, SK=16, SN=1)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("view", list(VIEWS))
def test_attentions_second_operand_is_packed_and_summed_from_its_strided_view(view, threads):
    """pack_columns: ``b[h, k, n]``, a strided view of a flat array, as each head's GEMM weights
    ``[H, N/16, K/4, 16, 4]`` (zeros past K and N: ``compiler.ops.cpu.pack_columns`` of the zero-padded
    operand); column_sums: ``base[n] + MOVED * sum(k, b[h, k, n])``."""
    x = np.random.default_rng(3).integers(-128, 128, 10 * 16).astype(np.int8)
    layout = {"H": 2, "SIZE": x.size, **VIEWS[view], "threads": threads, "min_time": 0.001}
    b = np.lib.stride_tricks.as_strided(x, (2, layout["K"], layout["N"]),
                                        (layout["SH"], layout["SK"], layout["SN"]))
    r = run(network.user_op("pack_columns"), CPU, {**layout, "Y": 16, "X": 4}, inputs=[x])
    kp = -(-layout["K"] // 4)
    padded = np.zeros((2, kp * 4, 16), np.int8)
    padded[:, :layout["K"], :layout["N"]] = b
    assert r.validated
    np.testing.assert_array_equal(r.output, padded.reshape(2, kp, 4, 1, 16).transpose(0, 3, 1, 4, 2))
    base = np.arange(layout["N"], dtype=np.int32) * 1000
    r = run(network.user_op("column_sums"), CPU, {**layout, "MOVED": 128}, inputs=[x, base])
    assert r.validated
    np.testing.assert_array_equal(r.output, base + 128 * b.astype(np.int64).sum(axis=1))


def test_a_transposed_view_is_moved_into_contiguous_data():
    """moved_view: ``moved_bytes`` of ``a[h, m, k]`` read through its strides (attention's queries, a
    transposed view of their projection), written contiguous; a view past the array is refused by name."""
    x = np.random.default_rng(4).integers(-128, 128, 6 * 16).astype(np.int8)
    layout = {"H": 2, "M": 6, "K": 8, "SIZE": x.size, "SH": 8, "SM": 16, "SK": 1}
    r = run(network.user_op("moved_view"), CPU, {**layout, "threads": 2, "min_time": 0.001}, inputs=[x])
    assert r.validated
    np.testing.assert_array_equal(r.output, x.reshape(6, 2, 8).transpose(1, 0, 2).view(np.uint8) ^ 0x80)
    with pytest.raises(RunError, match=r"moved_view: the view \[2, 6, 8\] with strides \[8, 17, 1\] "
                                       r".* x\[96\]"):
        run(network.user_op("moved_view"), CPU, {**layout, "SM": 17, "threads": 1}, inputs=[x])
