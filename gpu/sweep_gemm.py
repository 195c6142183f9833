"""The device check's GEMM sweep: chosen tunings of square fp16 GEMMs measured on this GPU, each one
compiled by the cuda flow, run once and checked against the exact product of its inputs (within
K * 2^-23 * sum|a*b|), then timed as the flow times (tandem/flows/cuda.py); cuBLAS (PyTorch) on the same
inputs
once per size. Where the tuning model's first few candidates miss the fastest block shape or pipeline depth,
this shows by how much.

    python3 gpu/sweep_gemm.py [--sizes 2048,4096,8192] [--tunings "2,2,4,4,32,1,4;2,4,4,4,32,1,3"]

A tuning is ``warps_m,warps_n,p,q,bk,split_k,stages[,instruction]`` (compiler/ops/cuda.py's GpuTuning; the
instruction a name of isa/specs/cuda.toml's, the spec's first when omitted). Prints one JSON
line per measurement (``"tuning"``, ``"tflops"``, ``"validated"``, or ``"error"``) and one per size for
cuBLAS; exits non-zero when a kernel is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from compiler.backend import cuda_runtime
from compiler.ops import cuda
from tandem.flows import cuda as cuda_run
from tandem.flows.check import within_bound
from tandem.flows.flow import RunError
from tandem.flows.targets import load_target

W128, W256 = "wgmma_m64n128k16_f16_f32", "wgmma_m64n256k16_f16_f32"
#: The best wmma tunings of the earlier H100 runs, then Hopper's warpgroup instruction around the first
#: wgmma run's best (256 x 128 blocks: two warpgroups of two 64 x 128 tiles): 128 x 256 (two warpgroups
#: of one 64 x 256 tile, or of two 64 x 128 side by side), 256 x 128 and 128 x 128, 3 and 4 deep.
TUNINGS = ("2,4,4,4,32,1,3 2,2,4,4,64,1,4 "
           f"2,1,2,1,64,1,4,{W128} 2,1,2,1,64,1,3,{W128} 2,1,1,1,64,1,4,{W256} 2,1,1,1,64,1,3,{W256} "
           f"2,1,1,2,64,1,4,{W128} 1,2,2,1,64,1,4,{W128} 2,2,1,1,64,1,4,{W128} 2,1,1,1,64,1,4,{W128}")


def parse(text: str) -> list[cuda.GpuTuning]:
    found = []
    for item in text.replace(";", " ").split():
        parts = item.split(",")
        if len(parts) not in (7, 8) or not all(x.isdigit() for x in parts[:7]):
            raise SystemExit(f"--tunings: {item!r} is not "
                             "warps_m,warps_n,p,q,bk,split_k,stages[,instruction]")
        found.append(cuda.GpuTuning(*(int(x) for x in parts[:7]), *parts[7:]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument("--tunings", default=TUNINGS)
    parser.add_argument("--min-time", type=float, default=0.05)
    args = parser.parse_args()
    reason = cuda_runtime.unavailable()
    if reason:
        print(json.dumps({"error": f"no GPU here: {reason}"}))
        return 2
    from experiments.unit_gpu import torch_seconds

    target, tunings, failed = load_target("cuda"), parse(args.tunings), False
    for size in (int(s) for s in args.sizes.split(",")):
        shape = {"M": size, "N": size, "K": size}
        job = cuda_run.FLOW.plan("gemm", dict(shape), target)   # plan takes its keys out of the dict
        inputs = cuda_run.FLOW.inputs(job, np.random.default_rng(0))
        want = cuda_run.FLOW.reference(job, inputs)   # the flow's exact result, and its error bound's scale
        magnitude = cuda_run.exact(job, [np.abs(x) for x in inputs])
        peer = torch_seconds("gemm", shape, inputs, args.min_time)
        flops = 2 * size ** 3
        print(json.dumps({"size": size, "peer": "cuBLAS", "us": round(peer * 1e6, 2) if peer else None,
                          "tflops": round(flops / peer / 1e12, 1) if peer else None}), flush=True)
        for tuning in tunings:
            row = {"size": size, "tuning": str(tuning)}
            try:
                job = cuda_run.FLOW.plan("gemm", {**shape, "tuning": tuning}, target)
                compiled = cuda_run.FLOW.compile(job, tuning, target)
                arrays = cuda_run.packed(job, compiled.schedule, inputs)
                launcher = cuda_runtime.Launcher(compiled.kernel, arrays)
                launcher.launch()
                check = within_bound(cuda_run.unpacked(job, launcher.results()[2]), want, magnitude,
                                     job.reduction)
                seconds = launcher.seconds(args.min_time)
                row.update(validated=check.validated, us=round(seconds * 1e6, 2),
                           tflops=round(flops / seconds / 1e12, 1), shared=compiled.kernel.shared_bytes,
                           of_cublas=round(peer / seconds, 3) if peer else None)
                failed |= not check.validated
            except (RunError, cuda_runtime.KernelFault) as exc:
                row["error"] = str(exc)
                failed = True
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
