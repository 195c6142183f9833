"""cpu_peers: specs validate, references are exact, every exact peer is bit-exact with them, timing works.

Peers whose package is missing (onnxruntime, tvm are optional) are skipped with ``available()``'s reason, and
so is ``tvm-vnni`` where its probe (a subprocess: ``Schedule.tensorize`` may crash it) finds TVM's VNNI path
broken.
"""

from __future__ import annotations

import os
import re
import sys
import time

import numpy as np
import pytest

from baselines.cpu_layers import (
    ConvSpec,
    GemmSpec,
    conv_inputs,
    conv_reference,
    gemm_inputs,
    gemm_reference,
    qlinear_shift,
    requantize,
)
from baselines.cpu_peers import ALL_PEERS, FP32_PEER, PEERS, QLINEAR_PEER
from baselines.onnxruntime_peer import OnnxRuntimePeer
from baselines.peer import Peer, time_callable
from baselines.tvm_peer import TvmPeer
from baselines.tvm_vnni_peer import (
    TVM_VNNI_PEER,
    VNNI_INTRIN,
    VNNI_INTRIN_I8,
    TvmVnniPeer,
    VnniProbe,
    _first_line,
    _run_tvm_vnni_probe,
    tvm_vnni_probe,
)
from compiler.backend.llvm import host_cpu
from compiler.ops import reference
from tandem.flows.check import within_bound

CONVS = [
    ConvSpec(c=3, h=9, w=9, k=5, r=3, stride=2, pad=1),    # channels not a multiple of 4 or 16
    ConvSpec(c=16, h=6, w=8, k=32, r=3, stride=1, pad=1),
    ConvSpec(c=8, h=7, w=7, k=4, r=1),                     # 1x1, no padding
]
GEMMS = [GemmSpec(m=7, n=11, k=19), GemmSpec(m=32, n=48, k=64)]
EXACT = [p for p in ALL_PEERS if p.exact]
TWO = min(2, os.cpu_count() or 1)     # "two threads", where there are two cpus
#: onnxruntime's u8 x s8 matrix kernels on a CPU without VNNI (AVX2's vpmaddubsw) saturate each pair's sum
#: of products at int16 (checked: that model reproduces their output exactly); its ConvInteger does not
ORT_SATURATES = not (host_cpu()["avx512vnni"] or host_cpu()["avxvnni"])
SATURATES = "onnxruntime's u8 x s8 GEMM saturates pair sums at int16 on a CPU without VNNI"


def ready(peer: Peer) -> Peer:
    reason = peer.available()
    if reason is not None:
        pytest.skip(reason)
    return peer


def direct_conv(data: np.ndarray, kernel: np.ndarray, spec: ConvSpec) -> np.ndarray:
    """The convolution by its definition, one output pixel at a time (an oracle independent of im2col)."""
    p, s, r = spec.pad, spec.stride, spec.r
    x = np.pad(data[0].astype(np.int64), ((0, 0), (p, p), (p, p)))
    w = kernel.astype(np.int64)
    out = np.zeros((1, spec.k, spec.oh, spec.ow), np.int64)
    for i in range(spec.oh):
        for j in range(spec.ow):
            out[0, :, i, j] = np.tensordot(w, x[:, i * s:i * s + r, j * s:j * s + r], axes=3)
    return out.astype(np.int32)


def test_conv_spec_derives_output_size_and_op_count() -> None:
    spec = ConvSpec(c=64, h=56, w=56, k=64, r=3, stride=1, pad=1)
    assert (spec.oh, spec.ow) == (56, 56)
    assert spec.macs == 64 * 64 * 9 * 56 * 56 and spec.ops == 2 * spec.macs
    strided = ConvSpec(c=3, h=10, w=9, k=5, r=3, stride=2, pad=1)
    assert (strided.oh, strided.ow) == (5, 5)
    assert GemmSpec(m=2, n=3, k=4).ops == 48


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(c=0), "c"), (dict(h=-1), "h"), (dict(w=0), "w"), (dict(k=0), "k"), (dict(r=0), "r"),
    (dict(stride=0), "stride"), (dict(pad=-1), "pad"), (dict(r=5, h=2, pad=1), "r"),
])
def test_conv_spec_rejects_bad_sizes_naming_the_field(kwargs: dict[str, int], field: str) -> None:
    base = dict(c=4, h=8, w=8, k=4, r=3, stride=1, pad=0)
    with pytest.raises(ValueError, match=f"argument '{field}' to ConvSpec: expected"):
        ConvSpec(**{**base, **kwargs})


def test_gemm_spec_rejects_non_positive_sizes() -> None:
    with pytest.raises(ValueError, match="argument 'n' to GemmSpec: expected a positive integer, but got 0"):
        GemmSpec(m=1, n=0, k=1)


def test_inputs_are_seeded_and_span_the_int8_ranges() -> None:
    spec = ConvSpec(c=16, h=16, w=16, k=16, r=3)
    data, kernel = conv_inputs(spec, seed=3)
    assert data.dtype == np.uint8 and data.shape == (1, 16, 16, 16)
    assert kernel.dtype == np.int8 and kernel.shape == (16, 16, 3, 3)
    assert data.min() == 0 and data.max() == 255 and kernel.min() == -128 and kernel.max() == 127
    assert np.array_equal(conv_inputs(spec, seed=3)[0], data)
    assert not np.array_equal(conv_inputs(spec, seed=4)[0], data)
    a, b = gemm_inputs(GemmSpec(m=3, n=5, k=7))
    assert (a.dtype, a.shape, b.dtype, b.shape) == (np.uint8, (3, 7), np.int8, (5, 7))


@pytest.mark.parametrize("spec", CONVS, ids=str)
def test_conv_reference_matches_the_definition(spec: ConvSpec) -> None:
    data, kernel = conv_inputs(spec)
    got = conv_reference(data, kernel, spec)
    assert got.dtype == np.int32 and np.array_equal(got, direct_conv(data, kernel, spec))


def test_gemm_reference_is_exact() -> None:
    a, b = gemm_inputs(GemmSpec(m=4, n=3, k=300))
    want = [[sum(int(x) * int(y) for x, y in zip(row, col, strict=True)) for col in b] for row in a]
    got = gemm_reference(a, b)
    assert got.dtype == np.int32 and got.tolist() == want


def test_peers_are_numpy_onnxruntime_tvm_then_tvm_vnni_and_the_timing_only_qlinear_peer() -> None:
    assert [p.name for p in PEERS] == ["numpy", "onnxruntime", "tvm"]
    assert all(p.exact for p in PEERS) and not QLINEAR_PEER.exact
    assert ALL_PEERS == (*PEERS, TVM_VNNI_PEER, QLINEAR_PEER) and QLINEAR_PEER.name == "onnxruntime-qlinear"
    assert isinstance(TVM_VNNI_PEER, TvmVnniPeer) and TVM_VNNI_PEER.name == "tvm-vnni" and TVM_VNNI_PEER.exact


@pytest.mark.parametrize("peer", EXACT, ids=lambda p: p.name)
@pytest.mark.parametrize("spec", CONVS, ids=str)
def test_exact_peers_conv_is_bit_exact(peer: Peer, spec: ConvSpec) -> None:
    data, kernel = conv_inputs(spec, seed=1)
    got = ready(peer).prepare_conv(spec, data, kernel, threads=1)()
    assert got.dtype == np.int32 and np.array_equal(got, conv_reference(data, kernel, spec)), (peer, spec)


@pytest.mark.parametrize("peer", EXACT, ids=lambda p: p.name)
@pytest.mark.parametrize("spec", GEMMS, ids=str)
def test_exact_peers_gemm_is_bit_exact(peer: Peer, spec: GemmSpec) -> None:
    if peer.name == "onnxruntime" and ORT_SATURATES:
        pytest.skip(SATURATES)
    a, b = gemm_inputs(spec, seed=2)
    got = ready(peer).prepare_gemm(spec, a, b, threads=TWO)()
    assert got.dtype == np.int32 and np.array_equal(got, gemm_reference(a, b)), (peer, spec)


@pytest.mark.parametrize("peer", EXACT, ids=lambda p: p.name)
def test_exact_peers_are_bit_exact_on_two_threads_and_repeat_calls(peer: Peer) -> None:
    spec = CONVS[1]
    data, kernel = conv_inputs(spec, seed=5)
    run = ready(peer).prepare_conv(spec, data, kernel, threads=TWO)
    want = conv_reference(data, kernel, spec)
    assert np.array_equal(run(), want) and np.array_equal(run(), want)


@pytest.mark.skipif(ORT_SATURATES, reason=SATURATES)
def test_qlinear_peer_requantizes_the_reference() -> None:
    """QLinearConv / QLinearMatMul: clip(round-half-even(acc / 2**shift), 0, 255), within 1."""
    ready(QLINEAR_PEER)
    spec = CONVS[0]
    data, kernel = conv_inputs(spec)
    got = QLINEAR_PEER.prepare_conv(spec, data, kernel, threads=1)()
    want = requantize(conv_reference(data, kernel, spec), qlinear_shift(spec.c * spec.r * spec.r))
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert np.abs(got.astype(np.int32) - want).max() <= 1 and 0 < np.count_nonzero(want) < want.size
    gemm = GEMMS[1]
    a, b = gemm_inputs(gemm)
    got = QLINEAR_PEER.prepare_gemm(gemm, a, b, threads=1)()
    want = requantize(gemm_reference(a, b), qlinear_shift(gemm.k))
    assert got.dtype == np.uint8 and np.abs(got.astype(np.int32) - want).max() <= 1


def test_fp32_peer_is_onnxruntimes_float_conv_and_matmul_within_rounding() -> None:
    """Conv / MatMul on f32 operands: within K * 2^-23 * sum|a*b| of the exact result; u8 inputs refused."""
    ready(FP32_PEER)
    assert FP32_PEER.name == "onnxruntime-fp32" and not FP32_PEER.exact
    rng = np.random.default_rng(0)
    spec = CONVS[0]
    data = rng.uniform(-1, 1, (1, spec.c, spec.h, spec.w)).astype(np.float32)
    kernel = rng.uniform(-1, 1, (spec.k, spec.c, spec.r, spec.r)).astype(np.float32)
    got = FP32_PEER.prepare_conv(spec, data, kernel, threads=1)()
    want = reference.conv2d(data, kernel, spec.stride, spec.pad)
    magnitude = reference.conv2d(np.abs(data), np.abs(kernel), spec.stride, spec.pad)
    assert got.dtype == np.float32 and within_bound(got, want, magnitude, spec.c * spec.r * spec.r).validated
    gemm = GEMMS[1]
    a = rng.uniform(-1, 1, (gemm.m, gemm.k)).astype(np.float32)
    b = rng.uniform(-1, 1, (gemm.n, gemm.k)).astype(np.float32)
    got = FP32_PEER.prepare_gemm(gemm, a, b, threads=1)()
    assert within_bound(got, reference.dense(a, b), reference.dense(np.abs(a), np.abs(b)), gemm.k).validated
    with pytest.raises(ValueError, match="expected float32"):
        FP32_PEER.prepare_conv(spec, *conv_inputs(spec), threads=1)


def test_requantize_rounds_half_to_even_and_saturates() -> None:
    acc = np.array([-300, 24, 40, 56, 16 * 255 + 8, 10**6], np.int32)
    assert requantize(acc, 4).tolist() == [0, 2, 2, 4, 255, 255]


def test_tvm_peer_honours_the_thread_count() -> None:
    ready(PEERS[2])
    if int(os.environ["TVM_NUM_THREADS"]) < 2:
        pytest.skip(f"needs two tvm threads, but TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}")
    import tvm

    spec = GemmSpec(m=16, n=16, k=16)
    a, b = gemm_inputs(spec)
    num_threads = tvm.get_global_func("runtime.NumThreads")
    for threads in (2, 1, 2):
        PEERS[2].prepare_gemm(spec, a, b, threads)()
        assert num_threads() == threads


@pytest.mark.parametrize(("arg", "bad", "message"), [
    ("data", "dtype", "expected uint8 (1, 3, 9, 9), but got int8 (1, 3, 9, 9)"),
    ("kernel", "shape", "expected int8 (5, 3, 3, 3), but got int8 (5, 2, 3, 3)"),
    ("threads", "zero", "expected a positive integer, but got 0"),
])
def test_prepare_checks_inputs_against_the_spec(arg: str, bad: str, message: str) -> None:
    spec = CONVS[0]
    data, kernel = conv_inputs(spec)
    args = dict(data=data, kernel=kernel, threads=1)
    args[arg] = {"dtype": data.view(np.int8), "shape": kernel[:, :2], "zero": 0}[bad]
    with pytest.raises(ValueError, match=re.escape(f"argument '{arg}' to numpy.prepare_conv: {message}")):
        PEERS[0].prepare_conv(spec, **args)


@pytest.mark.parametrize(("peer", "module", "package"), [
    (OnnxRuntimePeer(), "onnxruntime", "onnxruntime"), (TvmPeer(), "tvm", "apache-tvm"),
])
def test_available_names_the_missing_package(peer: Peer, module: str, package: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)     # makes `import module` raise ImportError
    reason = peer.available()
    assert reason is not None and reason.startswith(f"{package} is not installed")


def test_time_callable_reports_the_median_seconds_per_call() -> None:
    calls = []

    def nap() -> None:
        calls.append(1)
        time.sleep(0.002)

    seconds = time_callable(nap, repeats=3, min_time=0.01)
    assert 0.002 <= seconds < 0.05
    assert len(calls) >= 1 + 3 * 2                        # warm-up, then >= 10 ms of 2 ms naps per sample
    with pytest.raises(ValueError, match="argument 'repeats' to time_callable"):
        time_callable(nap, repeats=0)


def test_tvm_vnni_probe_finds_a_working_intrinsic_or_a_reason_without_crashing_pytest() -> None:
    """The probe runs once per process, in a subprocess: a tensorize crash there is a reason, not a crash."""
    probe = tvm_vnni_probe()
    assert tvm_vnni_probe() is probe and TVM_VNNI_PEER.available() == probe.reason
    if probe.reason is None:
        assert probe.intrinsic in (VNNI_INTRIN, VNNI_INTRIN_I8) and TVM_VNNI_PEER.intrinsic == probe.intrinsic
    else:
        assert isinstance(probe.reason, str) and probe.reason.strip() and probe.intrinsic is None


def test_tvm_vnni_peer_is_bit_exact_with_vpdpbusd_where_available() -> None:
    peer = ready(TVM_VNNI_PEER)
    spec = ConvSpec(c=8, h=10, w=12, k=20, r=3, stride=1, pad=1)     # channels padded to 4s and 16s
    data, kernel = conv_inputs(spec, seed=7)
    got = peer.prepare_conv(spec, data, kernel, threads=1)()
    assert got.dtype == np.int32 and np.array_equal(got, conv_reference(data, kernel, spec))


SAY = "import os, signal, sys; say = lambda *p: print(*p, sep='\\t', flush=True); "
STAGE = "say('version', '9.9', '1.2'); say('stage', 'Schedule.tensorize with dot_16x4_vnni'); "


@pytest.mark.parametrize(("code", "want"), [
    (STAGE + "os.kill(os.getpid(), signal.SIGSEGV)",
     VnniProbe("TVM 9.9's Schedule.tensorize with dot_16x4_vnni crashed (signal 11, SIGSEGV) "
               "with apache-tvm-ffi 1.2")),
    (STAGE + "say('stage', 'tvm.compile of it'); say('stock-error', 'InternalError: bad call'); "
             "say('error', 'TVMError: boom')",
     VnniProbe("TVM 9.9's tvm.compile of it raised TVMError: boom; TVM's own impl: InternalError: bad call")),
    (STAGE + "say('stock-error', 'InternalError: bad call'); say('ok', 'tandem_dot_16x4_vnni_i8')",
     VnniProbe(None, "tandem_dot_16x4_vnni_i8", "InternalError: bad call")),
    ("import sys; sys.exit('no tvm')", VnniProbe("TVM's VNNI probe failed (exit status 1): no tvm")),
    ("import time; time.sleep(30)", VnniProbe("TVM's VNNI probe did not finish in 0.5 s")),
], ids=["segfault", "exception", "fallback-intrinsic", "exit", "timeout"])
@pytest.mark.skipif(sys.platform == "win32", reason="signals are POSIX")
def test_tvm_vnni_probe_turns_crashes_errors_and_timeouts_into_reasons(code: str, want: VnniProbe) -> None:
    assert _run_tvm_vnni_probe(SAY + code, timeout=0.5 if "sleep" in code else 30) == want


def test_probe_errors_keep_the_line_after_a_trailing_colon() -> None:
    e = RuntimeError("LLVM module verification failed with the following errors: \n"
                     "Call parameter type does not match function signature!\n  %68 = shufflevector ...")
    assert _first_line(e) == ("RuntimeError: LLVM module verification failed with the following errors: "
                              "Call parameter type does not match function signature!")
    assert _first_line(ValueError("one\ntwo")) == "ValueError: one" and _first_line(KeyError()) == "KeyError"


@pytest.mark.parametrize(("kind", "params"), [
    ("conv1d", {"W": 9, "IC": 6, "OC": 5, "S": 2}),
    ("conv3d", {"D": 3, "H": 4, "W": 4, "IC": 3, "OC": 4}),
    ("group_conv", {"H": 5, "W": 5, "IC": 8, "OC": 12, "G": 4}),
    ("dilated_conv", {"H": 7, "W": 6, "IC": 4, "OC": 4}),
    ("depthwise", {"H": 6, "W": 6, "C": 5, "S": 2}),
    ("batch_matmul", {"B": 3, "M": 4, "N": 5, "K": 9}),
])
def test_onnxruntime_runs_tensorirs_kinds_exactly(kind: str, params: dict[str, int]) -> None:
    """The suite's CPU peer: ConvInteger / MatMulInteger equal the one reference bit for bit, and the
    requantizing QLinear form runs on the same inputs; a transposed conv has no ONNX integer operator."""
    from baselines.onnxruntime_peer import prepare_contraction
    from compiler.ops import contractions

    ready(OnnxRuntimePeer())
    if kind == "batch_matmul" and ORT_SATURATES:
        pytest.skip(SATURATES)
    op = contractions.contraction(kind, params, ("uint8", "int8"))
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, op.plain[0]).astype(np.uint8)
    weight = rng.integers(-128, 128, op.plain[1]).astype(np.int8)
    got = prepare_contraction(op, data, weight, threads=1)()
    np.testing.assert_array_equal(got, op.reference(data, weight).astype(np.int32))
    fast = prepare_contraction(op, data, weight, threads=1, qlinear=True)()
    assert fast.dtype == np.uint8 and fast.shape == got.shape
    t2d = contractions.contraction("conv_transpose", {"H": 3, "W": 3, "IC": 2, "OC": 2}, ("uint8", "int8"))
    zeros = (np.zeros(t2d.plain[0], np.uint8), np.zeros(t2d.plain[1], np.int8))
    assert prepare_contraction(t2d, *zeros, threads=1) is None


@pytest.mark.parametrize(("kind", "params"), [
    ("conv1d", {"W": 11, "IC": 6, "OC": 20, "S": 2}),
    ("conv3d", {"D": 3, "H": 4, "W": 5, "IC": 5, "OC": 17, "N": 2}),
    ("dilated_conv", {"H": 7, "W": 6, "IC": 8, "OC": 16}),
    ("group_conv", {"H": 5, "W": 5, "IC": 12, "OC": 24, "G": 3}),
    ("depthwise", {"H": 6, "W": 7, "C": 20, "S": 2, "N": 2}),
    ("conv_transpose", {"H": 3, "W": 4, "IC": 6, "OC": 3}),
    ("batch_matmul", {"B": 3, "M": 4, "N": 5, "K": 9}),
])
def test_tvm_runs_tensorirs_kinds_exactly(kind: str, params: dict[str, int]) -> None:
    """The suite's second CPU peer: TVM tensorized with vpdpbusd (a depthwise conv: its vectorized NCHW16c
    schedule) equals the one reference bit for bit on every kind."""
    from baselines.tvm_contractions import prepare_contraction_tvm
    from compiler.ops import contractions

    ready(TVM_VNNI_PEER)
    op = contractions.contraction(kind, params, ("uint8", "int8"))
    rng = np.random.default_rng(6)
    data = rng.integers(0, 256, op.plain[0]).astype(np.uint8)
    weight = rng.integers(-128, 128, op.plain[1]).astype(np.int8)
    run = prepare_contraction_tvm(op, data, weight, threads=1)
    assert not isinstance(run, str), run
    np.testing.assert_array_equal(run(), op.reference(data, weight).astype(np.int32))
