"""TVM tensorized with vpdpbusd as a CPU peer (``tvm-vnni``), where TVM's VNNI path works here, and the
subprocess probe that finds out whether it does.

VNNI in apache-tvm 0.27: TVM reaches ``vpdpbusd`` only by ``Schedule.tensorize`` with the ``dot_16x4_vnni``
intrinsic of ``tvm.s_tir.tensor_intrin.x86`` (desc: C[16] i32 += A[4] u8 x B[16, 4] s8); 0.27 has no
``tvm.topi.x86`` int8 NCHWc schedules. Observed with apache-tvm 0.27.0.post1 (its LLVM is 22.1):

- with apache-tvm-ffi 0.1.15.post2 (what pip resolves for apache-tvm's ``apache-tvm-ffi>=0.1.14.post0``),
  ``Schedule.tensorize`` crashes the process with SIGSEGV (signal 11) inside ``tvm::s_tir::Tensorize``
  (an atomic reference-count decrement on a bad pointer in libtvm_ffi), whatever the intrinsic:
  ``dot_16x4_vnni``, ``dot_16x4_avx512`` and a trivial 4-lane copy intrinsic all crash, even when the
  tensorized block is the intrinsic's own desc;
- with apache-tvm-ffi 0.1.14.post0, ``tensorize`` works, but ``tvm.compile`` then fails: "LLVM module
  verification failed ... Call parameter type does not match function signature!", as TVM's impl passes
  ``<16 x i32>`` operands to ``llvm.x86.avx512.vpdpbusd.512``, which takes ``<64 x i8>`` since LLVM 21.
  ``VNNI_INTRIN_I8`` (the same desc; the impl passes the operands as ``uint8x64`` / ``int8x64``) builds,
  is bit-exact and runs ``vpdpbusd``.

So ``tvm-vnni`` checks the whole path in a subprocess (``tvm_vnni_probe``: tensorize ``dot_16x4_vnni``,
compile, else ``VNNI_INTRIN_I8``, then run a tiny conv and GEMM against the references), once per
process, and is unavailable with the crash or error as the reason otherwise. The ``tvm`` peer is TVM's
non-tensorized int8 schedule: LLVM turns its widened int32 multiply-adds into AVX-512 ``vpdpwssd``
(16-bit VNNI, one product per 32-bit lane, on a zen4 host), never the 4-products-per-lane ``vpdpbusd``.
On a 2-core zen4 host, ResNet-18's C2 (64 -> 64 channels, 56 x 56, 3 x 3), 1 thread: ``tvm`` 46 GOPS,
``tvm-vnni`` 347 GOPS, ``onnxruntime-qlinear`` 397 GOPS (Tandem's VNNI flow: 448).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from baselines.cpu_layers import ConvSpec, GemmSpec, conv_inputs, conv_reference, gemm_inputs, gemm_reference
from baselines.peer import Runner
from baselines.tvm_peer import TvmPeer, import_tvm, largest_divisor
from compiler.ops import cpu as cpu_ops

#: TVM's VNNI intrinsic (desc: 16 int32 lanes += 4 u8 x 16x4 s8 products) and our variant of it: the same
#: desc, with an impl that calls vpdpbusd with LLVM >= 21's operand types (<64 x i8>, not <16 x i32>).
VNNI_INTRIN = "dot_16x4_vnni"
VNNI_INTRIN_I8 = "tandem_dot_16x4_vnni_i8"
_PROBE_TIMEOUT = 120.0
_PROBE_CODE = "from baselines.tvm_vnni_peer import _tvm_vnni_probe; _tvm_vnni_probe()"


@cache
def x86_intrinsics() -> Any:
    """``tvm.s_tir.tensor_intrin.x86``, which registers ``VNNI_INTRIN``, imported without its package.

    Importing the package ``tvm.s_tir.tensor_intrin`` parses every target's TVMScript intrinsics (about 18 s,
    13 of them cuda's), so the x86 file is loaded on its own under its own name; a later import of the
    package then finds it in ``sys.modules`` and does not register it twice (but ``import
    tvm.s_tir.tensor_intrin.x86 as m`` before any import of the package fails: import the package first).
    """
    tvm = import_tvm()
    name = "tvm.s_tir.tensor_intrin.x86"
    if name not in sys.modules:
        import importlib.util

        import tvm.s_tir

        path = os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin", "x86.py")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {name} from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


@cache
def _register_vnni_i8() -> str:
    """Register ``VNNI_INTRIN_I8`` (once per process) and return its name."""
    x86 = x86_intrinsics()
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (4,), "uint8", offset_factor=1)
        B = T.match_buffer(b, (16, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (16,), "int32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a_u8x64 = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "uint8x4"), dtype="int32"), 16),
                                    dtype="uint8x64")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), C.vload([0], dtype="int32x16"),
                a_u8x64, B.vload([0, 0], dtype="int8x64"), dtype="int32x16")

    TensorIntrin.register(VNNI_INTRIN_I8, x86.dot_product_16x4_u8i8i32_desc, impl)
    return VNNI_INTRIN_I8


def _first_line(e: BaseException) -> str:
    """``Type: first line`` of an exception (two lines where the first ends with ':', as TVM's do)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _tvm_vnni_probe() -> None:
    """Try the whole tensorized path on a tiny conv and GEMM; print its progress as tab-separated lines.

    Runs in the subprocess of ``_run_tvm_vnni_probe`` (``Schedule.tensorize`` may crash the process):
    ``version`` (tvm, tvm-ffi), then ``stage`` before each step, ``stock-error`` when TVM's own impl fails
    to compile, and last ``ok`` with the intrinsic that works or ``error`` with the exception.
    """
    def say(*parts: str) -> None:
        print(*parts, sep="\t", flush=True)

    tvm = import_tvm()
    try:
        import tvm_ffi

        ffi = getattr(tvm_ffi, "__version__", "?")
    except ImportError:
        ffi = "?"
    say("version", tvm.__version__, ffi)
    spec, gemm = ConvSpec(c=16, h=8, w=8, k=16, r=3), GemmSpec(m=8, n=16, k=16)
    data, kernel = conv_inputs(spec)
    packed = cpu_ops.pack_conv(data, kernel, spec.shape, blocked=cpu_ops.U8.group)
    try:
        for intrinsic in (VNNI_INTRIN, VNNI_INTRIN_I8):
            if intrinsic == VNNI_INTRIN_I8:
                say("stage", f"registering {intrinsic}")
                _register_vnni_i8()
            say("stage", f"Schedule.tensorize with {intrinsic}")
            sch = _vnni_conv_schedule(spec, packed[0].shape, packed[1].shape, intrinsic)
            say("stage", f"tvm.compile of the conv tensorized with {intrinsic}")
            try:
                tvm.compile(sch.mod, target=TvmPeer()._target())
                break
            except Exception as e:
                if intrinsic == VNNI_INTRIN_I8:
                    raise
                say("stock-error", _first_line(e))
        say("stage", f"running the conv and GEMM tensorized with {intrinsic}")
        peer = TvmVnniPeer(intrinsic)
        if not np.array_equal(peer.prepare_conv(spec, data, kernel, 1)(), conv_reference(data, kernel, spec)):
            raise ValueError(f"the conv tensorized with {intrinsic} differs from conv_reference")
        a, b = gemm_inputs(gemm)
        if not np.array_equal(peer.prepare_gemm(gemm, a, b, 1)(), gemm_reference(a, b)):
            raise ValueError(f"the GEMM tensorized with {intrinsic} differs from gemm_reference")
    except Exception as e:
        say("error", _first_line(e))
        return
    say("ok", intrinsic)


@dataclass(frozen=True)
class VnniProbe:
    """What the TVM VNNI probe found: ``reason`` is None where the tensorized path works (``intrinsic``)."""

    reason: str | None
    intrinsic: str | None = None
    #: Why TVM's own ``dot_16x4_vnni`` impl failed, where ``intrinsic`` is our ``VNNI_INTRIN_I8`` instead.
    stock_error: str | None = None


def _run_tvm_vnni_probe(code: str = _PROBE_CODE, timeout: float = _PROBE_TIMEOUT) -> VnniProbe:
    """Run ``code`` (``_tvm_vnni_probe``) in a fresh python and read its report; a crash is a reason."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return VnniProbe(f"TVM's VNNI probe did not finish in {timeout:g} s")
    report: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, *rest = line.split("\t")
        report[key] = rest
    version = report.get("version", [None, None])
    tvm = f"TVM {version[0]}'s" if version[0] else "TVM's"
    stage = report.get("stage", ["VNNI probe"])[0]
    stock = report.get("stock-error", [None])[0]
    if "ok" in report and done.returncode == 0:
        return VnniProbe(None, report["ok"][0], stock)
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = "unknown signal"
        crash = f"{tvm} {stage} crashed (signal {-done.returncode}, {name})"
        return VnniProbe(crash + (f" with apache-tvm-ffi {version[1]}" if version[1] else ""))
    if "error" in report:
        return VnniProbe(f"{tvm} {stage} raised {report['error'][0]}"
                         + (f"; TVM's own impl: {stock}" if stock else ""))
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return VnniProbe(f"{tvm} {stage} failed (exit status {done.returncode}): {last}")


@cache
def tvm_vnni_probe() -> VnniProbe:
    """The TVM VNNI probe's result, run once per process (a few seconds: a fresh python imports tvm)."""
    reason = TvmPeer().available()
    if reason is not None:
        return VnniProbe(reason)
    from compiler.backend.llvm import host_cpu

    if not host_cpu()["avx512vnni"]:
        return VnniProbe(f"this CPU ({host_cpu()['cpu']}) has no AVX-512 VNNI")
    return _run_tvm_vnni_probe()


def _vnni_conv_schedule(spec: ConvSpec, data_shape: tuple[int, ...], kernel_shape: tuple[int, ...],
                        intrinsic: str) -> Any:
    """The conv on packed data [1, C/4, H+2p, W+2p, 4] and kernel [K/16, C/4, R, S, 16, 4], tensorized."""
    tvm = import_tvm()
    x86_intrinsics()
    from tvm import te

    k16, c4, r = kernel_shape[0], kernel_shape[1], spec.r
    x = te.placeholder(data_shape, "uint8", name="data")
    w = te.placeholder(kernel_shape, "int8", name="kernel")
    rc, ry, rx = (te.reduce_axis((0, c4), "rc"), te.reduce_axis((0, r), "ry"), te.reduce_axis((0, r), "rx"))
    ri, s = te.reduce_axis((0, 4), "ri"), spec.stride
    y = te.compute((1, k16, spec.oh, spec.ow, 16), lambda n, ko, i, j, ki: te.sum(
        x[n, rc, i * s + ry, j * s + rx, ri].astype("int32") * w[ko, rc, ry, rx, ki, ri].astype("int32"),
        axis=[rc, ry, rx, ri]), name="conv")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    conv = sch.get_sblock("conv")
    n, ko, i, j, ki, lrc, lry, lrx, lri = sch.get_loops(conv)
    jo, ji = sch.split(j, [None, largest_divisor(spec.ow, TvmVnniPeer.ROW_TILE)])
    sch.reorder(n, ko, i, jo, lrc, lry, lrx, ji, ki, lri)
    sch.reverse_compute_at(sch.cache_write(conv, 0, "global"), jo)
    sch.parallel(sch.fuse(n, ko, i))
    sch.unroll(ji)
    sch.decompose_reduction(conv, lrc)
    sch.tensorize(ki, intrinsic)
    return sch


def _vnni_gemm_schedule(m: int, k4: int, n16: int, intrinsic: str) -> Any:
    """The GEMM of A [M, K/4, 4] and B packed [N/16, K/4, 16, 4] into [M, N/16, 16], tensorized."""
    tvm = import_tvm()
    x86_intrinsics()
    from tvm import te

    x = te.placeholder((m, k4, 4), "uint8", name="a")
    w = te.placeholder((n16, k4, 16, 4), "int8", name="b")
    rk, ri = te.reduce_axis((0, k4), "rk"), te.reduce_axis((0, 4), "ri")
    y = te.compute((m, n16, 16), lambda i, jo, ji: te.sum(
        x[i, rk, ri].astype("int32") * w[jo, rk, ji, ri].astype("int32"), axis=[rk, ri]), name="gemm")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    gemm = sch.get_sblock("gemm")
    i, jo, ji, lrk, lri = sch.get_loops(gemm)
    io, ii = sch.split(i, [None, largest_divisor(m, TvmVnniPeer.ROW_TILE)])
    sch.reorder(jo, io, lrk, ii, ji, lri)
    sch.reverse_compute_at(sch.cache_write(gemm, 0, "global"), io)
    sch.parallel(sch.fuse(jo, io))
    sch.unroll(ii)
    sch.decompose_reduction(gemm, lrk)
    sch.tensorize(ji, intrinsic)
    return sch


class TvmVnniPeer(TvmPeer):
    """TVM's int8 conv / GEMM tensorized with vpdpbusd by ``Schedule.tensorize``, where that works here.

    ``available()`` runs ``tvm_vnni_probe`` (a subprocess, once per process), as ``tensorize`` may crash.
    Inputs are packed like Tandem's (``compiler.ops.cpu.pack_conv`` / ``pack_gemm``: zero padding and channel
    blocks, outside the timed call); the timed callable runs the kernel and unpacks its blocked output
    (``unpack_conv`` / ``unpack_gemm``, a transposing copy) to NCHW / [m, n].
    """

    name = "tvm-vnni"
    #: Output pixels (conv) or rows (GEMM) whose 16-lane accumulators are updated back to back (unrolled).
    ROW_TILE = 8

    def __init__(self, intrinsic: str | None = None) -> None:
        self._intrinsic = intrinsic

    def available(self) -> str | None:
        return None if self._intrinsic else tvm_vnni_probe().reason

    @property
    def intrinsic(self) -> str | None:
        """The intrinsic used: ``VNNI_INTRIN``, or ``VNNI_INTRIN_I8`` where TVM's own impl fails to build."""
        found = self._intrinsic or tvm_vnni_probe().intrinsic
        if found == VNNI_INTRIN_I8:
            _register_vnni_i8()
        return found

    def _ready_intrinsic(self) -> str:
        intrinsic = self.intrinsic
        if intrinsic is None:
            raise RuntimeError(f"{self.name} is not available: {self.available()}")
        return intrinsic

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        intrinsic = self._ready_intrinsic()
        layer = spec.shape
        packed_data, packed_kernel = cpu_ops.pack_conv(data, kernel, layer, blocked=cpu_ops.U8.group)
        sch = _vnni_conv_schedule(spec, packed_data.shape, packed_kernel.shape, intrinsic)
        shape = (1, packed_kernel.shape[0], spec.oh, spec.ow, 16)
        run = self._runner(sch, [packed_data, packed_kernel], shape, threads)
        return lambda: cpu_ops.unpack_conv(run(), layer)

    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        intrinsic = self._ready_intrinsic()
        packed_a, packed_b = cpu_ops.pack_gemm(a, b)
        n16, k4 = packed_b.shape[:2]
        sch = _vnni_gemm_schedule(spec.m, k4, n16, intrinsic)
        run = self._runner(sch, [packed_a.reshape(spec.m, k4, 4), packed_b], (spec.m, n16, 16), threads)
        return lambda: cpu_ops.unpack_gemm(run(), spec.n)


#: TVM tensorized with vpdpbusd: in ``cpu_peers.ALL_PEERS``, and only available where the probe succeeds.
TVM_VNNI_PEER: TvmVnniPeer = TvmVnniPeer()
