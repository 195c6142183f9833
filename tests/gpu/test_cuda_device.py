"""The GPU flow on a GPU: PTX from the NVPTX backend loaded by the CUDA driver, run, and compared with numpy's
exact result of the same fp16 inputs within the fp32 accumulation bound (tandem/flows/cuda.py). Skipped, with
the reason, where there is no GPU (CuPy, a driver and a device): gpu/run_device_checks.sh runs these on a
lent GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from compiler.backend import cuda_runtime, nvptx
from compiler.backend.cuda_runtime import KernelFault
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ops import cuda
from tandem.flows.run import run
from tandem.flows.targets import load_target

REASON = cuda_runtime.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no GPU here: {REASON}")

GEMMS = [
    ({"M": 256, "N": 256, "K": 256}, cuda.GpuTuning(2, 2, 2, 2, 32, 1)),
    ({"M": 100, "N": 72, "K": 200}, cuda.GpuTuning(1, 2, 2, 1, 32, 1)),      # padded in every dimension
    ({"M": 64, "N": 64, "K": 1024}, cuda.GpuTuning(1, 1, 2, 2, 64, 4)),      # split-K
    ({"M": 512, "N": 384, "K": 320}, cuda.GpuTuning(2, 2, 4, 2, 32, 1)),
    ({"M": 200, "N": 136, "K": 328}, cuda.GpuTuning(1, 2, 2, 2, 32, 1, 3)),   # cp.async, padded
    ({"M": 512, "N": 512, "K": 1024}, cuda.GpuTuning(2, 2, 4, 4, 32, 1, 4)),  # 75776 B of dynamic shared
    ({"M": 256, "N": 256, "K": 2048}, cuda.GpuTuning(1, 2, 2, 2, 64, 2, 3)),  # ... with split-K
]


@pytest.mark.parametrize(("layer", "tuning"), GEMMS, ids=[f"{p['M']}x{p['N']}x{p['K']}" for p, _ in GEMMS])
def test_gemm_on_the_gpu_is_within_the_bound_of_numpy(layer, tuning):
    report = run("gemm", load_target("cuda"), {**layer, "tuning": tuning})
    assert report.validated, report.detail
    assert report.tensor_instructions > 0 and report.scalar_fallback == 0
    assert report.measured["tflops"] > 0 and report.instructions["wmma.mma"] > 0


CONVS = [
    ({"H": 14, "W": 14, "IC": 256, "OC": 256, "K": 3, "S": 1, "P": 1}, cuda.GpuTuning(2, 2, 1, 1, 64, 2)),
    ({"H": 56, "W": 56, "IC": 64, "OC": 128, "K": 1, "S": 2, "P": 0, "N": 4}, cuda.GpuTuning()),
    ({"H": 32, "W": 32, "IC": 3, "OC": 64, "K": 7, "S": 2, "P": 3}, cuda.GpuTuning(2, 1, 2, 2, 32, 1)),
    ({"H": 7, "W": 7, "IC": 512, "OC": 512, "K": 3, "S": 1, "P": 1}, cuda.GpuTuning(2, 2, 1, 1, 64, 4)),
    ({"H": 28, "W": 28, "IC": 128, "OC": 128, "K": 3, "S": 1, "P": 1, "N": 4},
     cuda.GpuTuning(2, 2, 2, 2, 32, 1, 4)),                                   # the kernel's tiles async
]


W128, W256 = "wgmma_m64n128k16_f16_f32", "wgmma_m64n256k16_f16_f32"
WGMMA = [   # Hopper's warpgroup instruction: a and b from swizzled shared memory, b MN-major (transposed)
    ("gemm", {"M": 256, "N": 256, "K": 256}, cuda.GpuTuning(2, 1, 1, 1, 64, 1, 1, W128)),
    ("gemm", {"M": 200, "N": 300, "K": 328}, cuda.GpuTuning(1, 1, 1, 1, 64, 1, 3, W256)),   # padded
    ("gemm", {"M": 512, "N": 512, "K": 1024}, cuda.GpuTuning(2, 1, 1, 1, 64, 1, 4, W256)),  # 192 KB shared
    ("gemm", {"M": 256, "N": 512, "K": 512}, cuda.GpuTuning(1, 2, 2, 1, 128, 1, 2, W128)),  # two panels of K
    ("gemm", {"M": 128, "N": 512, "K": 256}, cuda.GpuTuning(2, 1, 1, 2, 64, 1, 3, W128)),   # q = 2
    ("conv2d", {"H": 14, "W": 14, "IC": 256, "OC": 256, "K": 3, "S": 1, "P": 1},
     cuda.GpuTuning(2, 1, 1, 1, 64, 1, 3, W128)),
    ("conv2d", {"H": 28, "W": 28, "IC": 128, "OC": 128, "K": 3, "S": 1, "P": 1, "N": 4},
     cuda.GpuTuning(2, 1, 1, 1, 64, 1, 4, W256)),
]


@pytest.mark.parametrize(("op", "layer", "tuning"), WGMMA,
                         ids=[f"{op}-{'x'.join(str(v) for v in p.values())}-{t.stages}"
                              for op, p, t in WGMMA])
def test_warpgroup_kernels_on_the_gpu_are_within_the_bound_of_numpy(op, layer, tuning):
    report = run(op, load_target("cuda"), {**layer, "tuning": tuning})
    assert report.validated, report.detail
    assert report.scalar_fallback == 0 and report.instructions["wgmma"] > 0
    assert report.measured["ptx_arch"] == "sm_90a"


@pytest.mark.parametrize(("layer", "tuning"), CONVS, ids=[f"{p['H']}x{p['IC']}x{p['OC']}k{p['K']}s{p['S']}"
                                                          for p, _ in CONVS])
def test_conv2d_on_the_gpu_is_within_the_bound_of_numpy(layer, tuning):
    report = run("conv2d", load_target("cuda"), {**layer, "tuning": tuning})
    assert report.validated, report.detail
    assert report.scalar_fallback == 0


def test_ptx_for_sm80_runs_on_a_newer_gpu_and_tuning_keeps_the_fastest():
    report = run("gemm", load_target("cuda", "sm80"), {"M": 512, "N": 512, "K": 512, "tune": 4})
    assert report.validated, report.detail
    assert report.params["arch"] == "sm_80"
    assert len(report.params["tuned"]) == 4
    best = min(report.params["tuned"], key=lambda t: t["seconds"])
    assert report.params["tuning"] == best["candidate"]


def test_tandem_run_prints_the_json_contract_with_the_measured_peak():
    done = subprocess.run([sys.executable, "-m", "tandem", "run", "conv2d", "--target", "cuda", "-p", "H=28",
                           "-p", "W=28", "-p", "IC=128", "-p", "OC=128", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["validated"] is True and report["target"] == "cuda"
    for key in ("tflops", "peak_tflops", "pct_of_peak", "seconds", "device", "cycles", "roofline_cycles"):
        assert key in report
    assert 0 < report["pct_of_peak"] < 150


def test_a_kernel_that_faults_reports_the_access():
    x = ir.Buffer("x", (64,), dtypes.float32)
    i = ir.Buffer("i", (64,), dtypes.int32)
    t = ir.Var("t")
    body = ir.For(t, ir.const(0), ir.const(64), ir.Store(x, (i[t],), ir.const(1.0, dtypes.float32)),
                  ir.ForKind.THREAD_BINDING, "threadIdx.x")
    kernel = nvptx.build(ir.PrimFunc("scatter", (x, i), body))
    index = np.arange(64, dtype=np.int32)
    x_out, _ = cuda_runtime.run(kernel, [np.zeros(64, np.float32), index])
    assert (x_out == 1).all()
    index[5] = 64
    with pytest.raises(KernelFault, match="out-of-bounds access in 'x\\[i\\[t\\]\\] = "):
        cuda_runtime.run(kernel, [np.zeros(64, np.float32), index])
