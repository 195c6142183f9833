"""Device probe for the NVPTX path (issue 25): llvmlite's nvptx64 target emits PTX for a small kernel here,
the CUDA driver loads it on the GPU (through CuPy's RawModule), and the result equals numpy's.

    python gpu/probe_nvptx.py --emit kernel.ptx      # on any machine: write the PTX
    python gpu/probe_nvptx.py --run kernel.ptx       # on a GPU machine: load, run, compare, time

It prints one JSON line with what it found (GPU name, driver, PTX target, max |err|, microseconds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ARCH = "sm_90"   # Hopper (H100/H200); PTX for it JIT-compiles on the device


def emit_ptx() -> str:
    """PTX of ``vadd(a, b, c, n)``: c[i] = a[i] + b[i] for i = blockIdx.x * blockDim.x + threadIdx.x < n."""
    import llvmlite.binding as llvm
    from llvmlite import ir as ll

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    m = ll.Module("tandem_probe")
    m.triple = "nvptx64-nvidia-cuda"
    f32, i32 = ll.FloatType(), ll.IntType(32)
    ptr = ll.PointerType(f32, 1)   # global memory
    fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [ptr, ptr, ptr, i32]), "vadd")
    b = ll.IRBuilder(fn.append_basic_block())

    def sreg(name: str):
        return b.call(ll.Function(m, ll.FunctionType(i32, []), f"llvm.nvvm.read.ptx.sreg.{name}"), [])

    i = b.add(b.mul(sreg("ctaid.x"), sreg("ntid.x")), sreg("tid.x"))
    with b.if_then(b.icmp_signed("<", i, fn.args[3])):
        x = b.load(b.gep(fn.args[0], [i]))
        y = b.load(b.gep(fn.args[1], [i]))
        b.store(b.fadd(x, y), b.gep(fn.args[2], [i]))
    b.ret_void()
    m.add_named_metadata("nvvm.annotations", m.add_metadata([fn, ll.MetaDataString(m, "kernel"),
                                                             ll.Constant(i32, 1)]))
    tm = llvm.Target.from_triple(m.triple).create_target_machine(cpu=ARCH)
    mod = llvm.parse_assembly(str(m))
    mod.verify()
    return tm.emit_assembly(mod)


def run_ptx(path: str) -> dict:
    """Load the PTX with the CUDA driver (CuPy), run vadd on 2^20 floats, compare with numpy, time it."""
    import cupy as cp
    import numpy as np

    n = 1 << 20
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, n)).astype(np.float32)
    module = cp.RawModule(path=path)
    kernel = module.get_function("vadd")
    da, db, dc = cp.asarray(a), cp.asarray(b), cp.zeros(n, cp.float32)
    threads = 256
    args = (da, db, dc, np.int32(n))
    kernel(((n + threads - 1) // threads,), (threads,), args)
    cp.cuda.Device().synchronize()
    err = float(np.max(np.abs(cp.asnumpy(dc) - (a + b))))
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(100):
        kernel(((n + threads - 1) // threads,), (threads,), args)
    end.record()
    end.synchronize()
    us = cp.cuda.get_elapsed_time(start, end) * 1e3 / 100
    props = cp.cuda.runtime.getDeviceProperties(0)
    return {"gpu": props["name"].decode(), "driver": cp.cuda.runtime.driverGetVersion(), "arch": ARCH,
            "elements": n, "max_abs_err": err, "us_per_launch": round(us, 2),
            "gb_per_s": round(3 * 4 * n / (us * 1e-6) / 1e9, 1), "bit_exact": err == 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", metavar="PTX", help="write the PTX here")
    parser.add_argument("--run", metavar="PTX", help="load, run and check this PTX on the GPU")
    args = parser.parse_args()
    if args.emit:
        Path(args.emit).parent.mkdir(parents=True, exist_ok=True)
        Path(args.emit).write_text(emit_ptx())
        print(json.dumps({"emitted": args.emit, "arch": ARCH}))
    if args.run:
        print(json.dumps(run_ptx(args.run)))
    if not (args.emit or args.run):
        parser.print_help()
        sys.exit(2)


if __name__ == "__main__":
    main()
