"""UNIT on a GPU (Weng et al., CGO 2021, Sec. V.E, Fig. 9, 11): fp16 convolutions and GEMMs on Tensor Cores.

Tandem's kernels (``tandem.flows.run`` on the ``cuda`` target: UNIT's Inspector maps cuda.toml's
wmma_m16n16k16_f16_f32 onto the contraction, the schedule of compiler/ops/cuda.py (H x W fusion, p x q
accumulator tiles per warp, split-K with a shared-memory reduction), LLVM's NVPTX backend, the CUDA driver),
each tuned over the first ``--tune`` tunings of the model's ranking (measured on the device), against
PyTorch's fp16 kernels on the same inputs: ``torch.nn.functional.conv2d`` (cuDNN, NCHW, Tensor Cores on,
``cudnn.benchmark`` so cuDNN picks its fastest algorithm) and ``torch.matmul`` (cuBLAS). Workloads:

- ``table1``: UNIT's 16 ablation layers (Table I; inputs already padded), batch 1;
- ``resnet18_b1`` and ``resnet18_b16``: ResNet-18's C2-C12 (3x3 kernels padded by 1), batch 1 and 16;
- ``gemm``: square fp16 GEMMs 1024^3 to 8192^3.

Every Tandem result is checked against numpy's exact result of the same fp16 inputs (each output within
K * 2^-23 * sum|a*b|, tandem/flows/cuda.py). Times are GPU times, the same way for both: 20 calls captured in
a CUDA graph, the graph replayed between CUDA events (no host launch overhead between kernels);
TFLOP/s count the layer's MACs, not the padding. Writes ``<out>/unit_gpu.csv``, ``<out>/summary.json``
(geomean of cuDNN time / Tandem time per group, Tandem's share of cuBLAS on the GEMMs, the measured Tensor
Core peak, the device) and ``<out>/unit_gpu.png`` (each workload's ratio), and prints the table.

    python experiments/unit_gpu.py [--quick] [--tune 10] [--groups gemm,table1] [--out DIR]

Without a GPU it stops with the reason (``--quick`` with ``--compile-only`` compiles the quick workloads'
PTX instead, which the tests run).
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from compiler.backend import cuda_runtime
from tandem.flows.layer_tables import RESNET18, UNIT_TABLE1, padding
from tandem.flows.targets import load_target

GEMMS = (1024, 2048, 4096, 8192)
QUICK = [("table1", "#5", "conv2d", {"H": 16, "W": 16, "IC": 128, "OC": 128, "K": 3, "S": 1, "P": 0,
                                     "N": 1}),
         ("gemm", "512", "gemm", {"M": 512, "N": 512, "K": 512})]
LAYER_KEYS = ("M", "N", "K", "H", "IC", "OC", "S", "P")


def workloads() -> list[tuple[str, str, str, dict]]:
    """(group, name, operator, tandem run parameters) of every workload."""
    found = []
    for name, (c, ihw, k, r, s) in UNIT_TABLE1.items():
        layer = {"H": ihw, "W": ihw, "IC": c, "OC": k, "K": r, "S": s, "P": 0, "N": 1}
        found.append(("table1", name, "conv2d", layer))
    for batch in (1, 16):
        for name, (hw, ic, oc, k, s) in RESNET18.items():
            layer = {"H": hw, "W": hw, "IC": ic, "OC": oc, "K": k, "S": s, "P": padding(k), "N": batch}
            found.append((f"resnet18_b{batch}", name, "conv2d", layer))
    for size in GEMMS:
        found.append(("gemm", str(size), "gemm", {"M": size, "N": size, "K": size}))
    return found


def torch_seconds(op: str, p: dict, inputs: list[np.ndarray], min_time: float, per_graph: int = 20
                  ) -> float | None:
    """PyTorch's fp16 GPU time on ``inputs`` (cuDNN conv2d with cudnn.benchmark, cuBLAS matmul), timed as
    Tandem's kernels are (compiler/backend/cuda_runtime.py): ``per_graph`` calls captured in one CUDA graph
    after warm-up, the graph replayed between CUDA events. None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cudnn.benchmark = True
    a, b = (torch.from_numpy(x).cuda() for x in inputs)
    if op == "gemm":
        def call():
            return a @ b
    else:
        def call():
            return torch.nn.functional.conv2d(a, b, stride=p["S"], padding=p["P"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(5):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            call()
    graph.replay()
    torch.cuda.synchronize()
    reps = 1
    while True:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3
        if seconds >= min_time or reps >= 1 << 14:
            return seconds / (reps * per_graph)
        reps *= 2


def plot(rows: list[dict], path: Path, device: str) -> None:
    """One bar per workload: the peer's time over Tandem's (above 1: Tandem is faster), by group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["speedup"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(shown)), 3.6))
    colors = {"table1": "tab:blue", "resnet18_b1": "tab:green", "resnet18_b16": "tab:olive",
              "gemm": "tab:red"}
    ax.bar(range(len(shown)), [r["speedup"] for r in shown],
           color=[colors.get(r["group"], "gray") for r in shown])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shown)), [f"{r['group'].replace('resnet18_', '')} {r['name']}" for r in shown],
                  rotation=90, fontsize=7)
    ax.set_ylabel("cuDNN or cuBLAS time / Tandem time")
    ax.set_title(f"UNIT's GPU flow in Tandem on {device} (fp16, Tensor Cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(
    out: Annotated[Path, typer.Option(help="Folder for unit_gpu.csv and summary.json.")] = Path(
        "experiments/out/unit_gpu"),
    tune: Annotated[int, typer.Option(
        min=1, help="Tunings measured per workload (the model's first N).")] = 10,
    quick: Annotated[bool, typer.Option("--quick", help="Two small workloads, short timings.")] = False,
    compile_only: Annotated[bool, typer.Option(
        "--compile-only", help="Compile the workloads' candidates to PTX (no GPU needed); run nothing.")
    ] = False,
    min_time: Annotated[float, typer.Option(help="Seconds of timing per measurement.")] = 0.03,
    groups: Annotated[str | None, typer.Option(
        help="Only these groups, comma-separated, run in that order: table1, resnet18_b1, "
             "resnet18_b16, gemm.")] = None,
) -> None:
    """Run UNIT's GPU experiment on this machine's GPU: Tandem vs cuDNN / cuBLAS (PyTorch)."""
    from tandem.flows import cuda as cuda_run
    from tandem.flows.run import run

    console = Console(highlight=False)
    todo = QUICK if quick else workloads()
    if groups is not None:
        wanted = list(dict.fromkeys(g.strip() for g in groups.split(",") if g.strip()))
        known = {w[0] for w in workloads()}
        if not wanted or set(wanted) - known:
            console.print(f"[red]--groups[/red]: expected some of {', '.join(sorted(known))}, but got "
                          f"{groups!r}")
            raise typer.Exit(code=2)
        # in the order named: a run stopped by a time limit has the groups named first
        todo = [w for g in wanted for w in todo if w[0] == g]
    target = load_target("cuda")
    if compile_only:
        for group, name, op, params in todo:
            job = cuda_run.FLOW.plan(op, {**params, "tune": tune}, target)
            for tuning in job.candidates:
                kernel = cuda_run.compile_gpu(job, tuning, target).kernel
                counts = kernel.instructions()
                console.print(f"{group} {name}: {tuning}: {len(kernel.ptx.splitlines())} lines of PTX, "
                              f"{counts.get('wmma.mma', 0)} wmma.mma, {counts.get('wgmma', 0)} wgmma")
        return
    reason = cuda_runtime.unavailable()
    if reason:
        console.print(f"[red]no GPU here[/red]: {reason}")
        raise typer.Exit(code=2)
    out.mkdir(parents=True, exist_ok=True)
    dev = cuda_runtime.device()
    peak = cuda_runtime.tensor_core_peak_tflops()
    console.print(f"{dev['name']} ({dev['arch']}, {dev['sm_count']} SMs): measured fp16 Tensor Core peak "
                  f"(cuBLAS 8192^3) {peak:.0f} TFLOP/s")
    rows = []
    start = time.perf_counter()
    for group, name, op, params in todo:
        t0 = time.perf_counter()
        report = run(op, target, {**params, "tune": tune, "min_time": min_time})
        job = cuda_run.FLOW.plan(op, dict(params), target)
        inputs = cuda_run.FLOW.inputs(job, np.random.default_rng(0))
        peer = torch_seconds(op, params, inputs, min_time)
        seconds = report.measured["seconds"]
        flops = 2 * job.macs
        row = {"group": group, "name": name, "op": op, **{k: params.get(k) for k in LAYER_KEYS},
               "batch": params.get("N") if op == "conv2d" else 1,
               "validated": report.validated, "max_abs_err": report.max_abs_err,
               "tuning": report.params["tuning"], "tandem_us": round(seconds * 1e6, 2),
               "tandem_tflops": round(flops / seconds / 1e12, 2),
               "peer": "cuBLAS" if op == "gemm" else "cuDNN",
               "peer_us": round(peer * 1e6, 2) if peer else None,
               "peer_tflops": round(flops / peer / 1e12, 2) if peer else None,
               "speedup": round(peer / seconds, 3) if peer else None,
               "pct_of_peak": round(100 * flops / seconds / 1e12 / peak, 2),
               "wall_s": round(time.perf_counter() - t0, 1),
               # every measured candidate's time: which instruction and shape won by how much
               "tuned": json.dumps([[t["candidate"], round(t["seconds"] * 1e6, 2)]
                                    for t in report.params["tuned"]])}
        rows.append(row)
        print(json.dumps(row), flush=True)
        _write_csv(rows, out / "unit_gpu.csv")   # after every workload: a run stopped early keeps them
    groups = sorted({r["group"] for r in rows})
    summary = {"device": dev, "peak_tflops": round(peak, 1), "tune": tune,
               "wall_s": round(time.perf_counter() - start, 1),
               "all_validated": all(r["validated"] for r in rows),
               "geomean_speedup_vs_peer": {g: geomean([r["speedup"] for r in rows if r["group"] == g])
                                           for g in groups},
               "batch1_convs_geomean_vs_cudnn": geomean([r["speedup"] for r in rows if r["op"] == "conv2d"
                                                         and r["batch"] == 1]),
               "large_gemms_pct_of_cublas": {r["name"]: round(100 * r["speedup"], 1) for r in rows
                                             if r["op"] == "gemm" and r["speedup"]},
               "targets": {"batch-1 convs vs cuDNN (geomean)": ">= 1.0x (UNIT: 1.75x on V100)",
                           "large GEMMs vs cuBLAS": ">= 60%"}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(rows, out / "unit_gpu.png", dev["name"])
    table = Table(title=f"UNIT on {dev['name']}: Tandem vs PyTorch (fp16 in, fp32 accumulation)")
    for col in ("group", "layer", "valid", "Tandem TFLOP/s", "peer TFLOP/s", "peer / Tandem time", "% peak"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["group"], r["name"], "yes" if r["validated"] else "NO", f"{r['tandem_tflops']:.1f}",
                      f"{r['peer_tflops']:.1f}" if r["peer_tflops"] else "-",
                      f"{r['speedup']:.2f}x" if r["speedup"] else "-", f"{r['pct_of_peak']:.1f}")
    console.print(table)
    console.print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    typer.run(main)
