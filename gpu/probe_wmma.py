"""Device probe for Tensor Cores through LLVM's NVPTX backend (issue 25): llvmlite emits PTX for a GEMM whose
inner step is one warp-wide ``wmma`` (m16n16k16) per 16 x 16 output tile -- f16 x f16 -> f32 (cuda.toml's
wmma_m16n16k16_f16_f32) and s8 x s8 -> s32 -- the CUDA driver loads it (CuPy's RawModule), and the result is
compared with numpy: exact for int8, and for f16 within the rounding of an f32 sum of exact f16 products.

    python gpu/probe_wmma.py --emit DIR   # with llvmlite, any machine: DIR/wmma_f16.ptx, DIR/wmma_s8.ptx
    python gpu/probe_wmma.py --run DIR    # a GPU machine: load, run, compare, time (and PyTorch's peer)

The schedule is the simplest one that exercises the instruction (one warp per output tile, fragments loaded
straight from global memory, no shared-memory staging): a correctness probe, not UNIT's GPU schedule.
Prints one JSON line per kernel.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ARCH = "sm_90"
TILE = 16

# (fragment element type, fragments per operand) of one m16n16k16 wmma per input type, from LLVM's NVVM
# intrinsics: f16 operands are 8 registers of <2 x half>, s8 operands 2 registers of i32 (4 bytes each);
# the accumulator is 8 floats or 8 i32.
_KINDS = {
    "f16": {"a": ("<2 x half>", 8), "acc": ("float", 8), "mma": "f32.f32", "in": "f16", "acc_name": "f32"},
    "s8": {"a": ("i32", 2), "acc": ("i32", 8), "mma": "s8", "in": "s8", "acc_name": "s32"},
}


def _struct(ty: str, n: int) -> str:
    return "{" + ", ".join([ty] * n) + "}"


def kernel_ir(kind: str) -> str:
    """LLVM IR of ``gemm_<kind>(A, B, C, M, N, K)``: C[M,N] = A[M,K] x B[K,N], all row-major, M, N, K
    multiples of 16; block (x, y) is one warp computing the output tile at row 16y, column 16x."""
    k = _KINDS[kind]
    frag_ty, nfrag = k["a"]
    acc_ty, nacc = k["acc"]
    elem = "half" if kind == "f16" else "i8"
    out = "float" if kind == "f16" else "i32"
    frag, acc = _struct(frag_ty, nfrag), _struct(acc_ty, nacc)
    ld_a = f"llvm.nvvm.wmma.m16n16k16.load.a.row.stride.{k['in']}.p1"
    ld_b = f"llvm.nvvm.wmma.m16n16k16.load.b.row.stride.{k['in']}.p1"
    mma = f"llvm.nvvm.wmma.m16n16k16.mma.row.row.{k['mma']}"
    st = f"llvm.nvvm.wmma.m16n16k16.store.d.row.stride.{k['acc_name']}.p1"

    def unpack(name: str, ty: str, n: int) -> tuple[list[str], list[str]]:
        lines = [f"  %{name}{i} = extractvalue {_struct(ty, n)} %{name}, {i}" for i in range(n)]
        return lines, [f"{ty} %{name}{i}" for i in range(n)]

    a_lines, a_args = unpack("fa", frag_ty, nfrag)
    b_lines, b_args = unpack("fb", frag_ty, nfrag)
    c_lines = [f"  %c{i} = phi {acc_ty} [ zeroinitializer, %entry ], [ %n{i}, %body ]" for i in range(nacc)]
    n_lines, _ = unpack("d", acc_ty, nacc)
    n_lines = [ln.replace(f"%d{i} =", f"%n{i} =") for i, ln in enumerate(n_lines)]
    c_args = [f"{acc_ty} %c{i}" for i in range(nacc)]
    n_args = [f"{acc_ty} %n{i}" for i in range(nacc)]
    body = "\n".join([
        'target triple = "nvptx64-nvidia-cuda"',
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()",
        f"declare {frag} @{ld_a}(ptr addrspace(1), i32)",
        f"declare {frag} @{ld_b}(ptr addrspace(1), i32)",
        f"declare {acc} @{mma}({', '.join([frag_ty] * (2 * nfrag) + [acc_ty] * nacc)})",
        f"declare void @{st}(ptr addrspace(1), {', '.join([acc_ty] * nacc)}, i32)",
        f"define void @gemm_{kind}(ptr addrspace(1) %A, ptr addrspace(1) %B, ptr addrspace(1) %C,"
        " i32 %M, i32 %N, i32 %K) {",
        "entry:",
        "  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()",
        f"  %row = mul i32 %by, {TILE}",
        f"  %col = mul i32 %bx, {TILE}",
        "  %arow = mul i32 %row, %K",
        "  br label %body",
        "body:",
        "  %k = phi i32 [ 0, %entry ], [ %k.next, %body ]",
        *c_lines,
        "  %aoff = add i32 %arow, %k",
        f"  %pa = getelementptr {elem}, ptr addrspace(1) %A, i32 %aoff",
        "  %brow = mul i32 %k, %N",
        "  %boff = add i32 %brow, %col",
        f"  %pb = getelementptr {elem}, ptr addrspace(1) %B, i32 %boff",
        f"  %fa = call {frag} @{ld_a}(ptr addrspace(1) %pa, i32 %K)",
        f"  %fb = call {frag} @{ld_b}(ptr addrspace(1) %pb, i32 %N)",
        *a_lines, *b_lines,
        f"  %d = call {acc} @{mma}({', '.join(a_args + b_args + c_args)})",
        *n_lines,
        f"  %k.next = add i32 %k, {TILE}",
        "  %more = icmp slt i32 %k.next, %K",
        "  br i1 %more, label %body, label %done",
        "done:",
        "  %crow = mul i32 %row, %N",
        "  %coff = add i32 %crow, %col",
        f"  %pc = getelementptr {out}, ptr addrspace(1) %C, i32 %coff",
        f"  call void @{st}(ptr addrspace(1) %pc, {', '.join(n_args)}, i32 %N)",
        "  ret void",
        "}",
        "!nvvm.annotations = !{!0}",
        f"!0 = !{{ptr @gemm_{kind}, !\"kernel\", i32 1}}",
    ])
    return body + "\n"


def emit_ptx(kind: str) -> str:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    mod = llvm.parse_assembly(kernel_ir(kind))
    mod.verify()
    tm = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(cpu=ARCH, features="+ptx80")
    return tm.emit_assembly(mod)


def run_ptx(directory: Path, kind: str, m: int = 1024, n: int = 1024, k: int = 1024) -> dict:
    """Run gemm_<kind> from DIRECTORY on the GPU, compare with numpy and time it against PyTorch's matmul."""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(0)
    if kind == "f16":
        a = rng.standard_normal((m, k)).astype(np.float16)
        b = rng.standard_normal((k, n)).astype(np.float16)
        want = a.astype(np.float64) @ b.astype(np.float64)   # products of f16 are exact in f64
        out = cp.zeros((m, n), cp.float32)
    else:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        want = a.astype(np.int64) @ b.astype(np.int64)
        out = cp.zeros((m, n), cp.int32)
    ptx = directory / f"wmma_{kind}.ptx"
    text = ptx.read_text()
    fn = cp.RawModule(path=str(ptx)).get_function(f"gemm_{kind}")
    da, db = cp.asarray(a), cp.asarray(b)
    grid, block = (n // TILE, m // TILE), (32,)
    args = (da, db, out, np.int32(m), np.int32(n), np.int32(k))
    fn(grid, block, args)
    cp.cuda.Device().synchronize()
    got = cp.asnumpy(out)
    if kind == "f16":
        # an f32 sum of K exact products: each addition rounds by at most 2^-24 of the running magnitude
        bound = k * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        err = np.abs(got.astype(np.float64) - want)
        ok, worst = bool(np.all(err <= bound)), float(err.max())
    else:
        ok, worst = bool(np.array_equal(got.astype(np.int64), want)), float(np.abs(got - want).max())
    us = _time(lambda: fn(grid, block, args))
    peer = _torch_peer(a, b, kind)
    tops = 2 * m * n * k / (us * 1e-6) / 1e12
    return {"kernel": f"gemm_{kind}", "m": m, "n": n, "k": k, "wmma_in_ptx": text.count("wmma.mma"),
            "validated": ok, "max_abs_err": worst, "us": round(us, 1), "tops": round(tops, 2), **peer}


def _time(launch, reps: int = 50) -> float:
    import cupy as cp

    launch()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        launch()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e3 / reps


def _torch_peer(a, b, kind: str) -> dict:
    """PyTorch's matmul on the same inputs (cuBLAS; f16 with Tensor Cores, int8 through torch._int_mm)."""
    try:
        import torch
    except ImportError as exc:
        return {"peer": f"none ({exc})"}
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    if kind == "f16":
        def call():
            return ta @ tb
        name = "torch f16 matmul (cuBLAS)"
    else:
        def call():
            return torch._int_mm(ta, tb)
        name = "torch._int_mm (cuBLAS int8)"
    try:
        call()
    except RuntimeError as exc:
        return {"peer": f"{name}: {exc}".splitlines()[0]}
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        call()
    end.record()
    torch.cuda.synchronize()
    us = start.elapsed_time(end) * 1e3 / 50
    m, k = a.shape
    tops = 2 * m * b.shape[1] * k / (us * 1e-6) / 1e12
    return {"peer": name, "peer_us": round(us, 1), "peer_tops": round(tops, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", metavar="DIR", help="write wmma_f16.ptx and wmma_s8.ptx here")
    parser.add_argument("--run", metavar="DIR", help="load, run and check the PTX in DIR on the GPU")
    args = parser.parse_args()
    if args.emit:
        Path(args.emit).mkdir(parents=True, exist_ok=True)
        for kind in _KINDS:
            Path(args.emit, f"wmma_{kind}.ptx").write_text(emit_ptx(kind))
        print(json.dumps({"emitted": args.emit, "arch": ARCH, "kernels": [f"gemm_{k}" for k in _KINDS]}))
    if args.run:
        for kind in _KINDS:
            try:
                print(json.dumps(run_ptx(Path(args.run), kind)), flush=True)
            except Exception as exc:   # a device check reports every kernel's outcome, never stops at one
                error = f"{type(exc).__name__}: {exc}"
                print(json.dumps({"kernel": f"gemm_{kind}", "error": error}), flush=True)
    if not (args.emit or args.run):
        parser.print_help()
        sys.exit(2)


if __name__ == "__main__":
    main()
