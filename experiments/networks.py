"""The five builtin networks (tandem/network/models.py) in int8 on VITA (the TVM paper's configuration),
DianNao and this CPU: every step compiled, run and checked bit for bit against the integer graph
(tandem/network/run.py).

Recorded per model and target: validated, total cycles (simulated) or seconds (the CPU's kernels, timed for
real on 1 thread), the share of the multiply-adds on tensor instructions, the GEMM core's utilization over
the whole network (VITA), DRAM bytes, what ran on the host, and the per-operator breakdown (cycles or
seconds by the steps' operators). On the CPU, Tandem against onnxruntime end to end on the same int8
network: ONNX Runtime's own static quantization of the float model (QDQ, per-tensor, calibrated on the same
seeded inputs; its MLAS int8 kernels), timed on 1 and 2 threads (the median of 20 runs), against the sum of
Tandem's kernels on 1 and 2 threads (each kernel's best of ``CPU_RUNS`` network runs, each of those the
median of 5 timings: this 2-core guest's second core is shared, and a single timing can be 5-10x off), and
against one whole inference end to end (``inference_s``: the input quantized, every kernel and every layout
move between them, as onnxruntime's figure has them; tandem/network/inference.py).

Writes ``<out>/networks.csv`` (one row per model and target), ``<out>/layers.csv`` (every step),
``<out>/summary.json`` and ``<out>/networks.png`` (the per-operator breakdown).

    python experiments/networks.py [--models resnet18,...] [--targets vita,diannao,cpu] [--quick] [--jobs N]
                                   [--out DIR]
"""

from __future__ import annotations

import csv
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from tandem.flows.targets import load_target
from tandem.network import models
from tandem.network.load import load_network
from tandem.network.run import NetworkReport, run_network

CONFIGS = {"vita": "tvm-paper", "diannao": None, "cpu": None}
SEED = 0
CPU_RUNS = 3


def run_model(name: str, kind: str, threads: int = 1, input_size: int | None = None, jobs: int = 0
              ) -> NetworkReport:
    """``name`` quantized (seed 0) and run on ``kind`` (the CPU's kernels on ``threads``; a simulated
    target's kernels by ``jobs`` worker processes, 0: one per CPU)."""
    shapes = {"input": (1, 3, input_size, input_size)} if input_size and name not in ("bert_encoder",
                                                                                      "vit_block") else None
    q = load_network(builtin=name, seed=SEED, input_shapes=shapes).quantized
    options = {"threads": threads, "min_time": 0.05} if kind == "cpu" else None
    return run_network(q, load_target(kind, CONFIGS[kind]), seed=SEED + 1, options=options, jobs=jobs)


def best_seconds(reports: list[NetworkReport]) -> float:
    """The network's seconds from several runs of it: each step's best, summed."""
    return sum(min(r.seconds for r in rows) for rows in zip(*(x.rows for x in reports), strict=True)
               if rows[0].seconds is not None)


def breakdown(report: NetworkReport) -> dict[str, float]:
    """Cycles (or, on the CPU, seconds) by the steps' first operator."""
    out: dict[str, float] = defaultdict(float)
    for r in report.rows:
        value = r.seconds if report.target == "cpu" else r.cycles
        if value:
            out[r.op.split("+")[0]] += value
    return dict(out)


def onnxruntime_int8(name: str, threads: int) -> float | None:
    """Seconds per run of onnxruntime's statically quantized int8 model (QDQ, per-tensor), median of 20
    (``baselines.onnxruntime_peer.int8_session``)."""
    try:
        from baselines.onnxruntime_peer import int8_session
        session, x = int8_session(models.build(name, SEED), threads, SEED)
    except ImportError:
        return None
    for _ in range(3):
        session.run(None, x)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        session.run(None, x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(
    models_: Annotated[str, typer.Option("--models", help="Comma-separated builtin models.")] =
        ",".join(models.NAMES),
    targets: Annotated[str, typer.Option(help="Comma-separated targets.")] = "vita,diannao,cpu",
    quick: Annotated[bool, typer.Option("--quick", help="CNNs on 64 x 64 images (a smoke run).")] = False,
    jobs: Annotated[int, typer.Option(min=0, help="Worker processes for a simulated target's kernels (0: "
                                                  "one per CPU).")] = 0,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("results/networks"),
) -> None:
    names = [m for m in models_.split(",") if m]
    kinds = [t for t in targets.split(",") if t]
    bad = [m for m in names if m not in models.NAMES] + [t for t in kinds if t not in CONFIGS]
    if bad:
        raise typer.BadParameter(f"unknown model or target {bad[0]!r}; models: {', '.join(models.NAMES)}; "
                                 f"targets: {', '.join(CONFIGS)}")
    out.mkdir(parents=True, exist_ok=True)
    console = Console()
    rows, layers, summary = [], [], {}
    for name in names:
        for kind in kinds:
            t0 = time.perf_counter()
            report = run_model(name, kind, 1, 64 if quick else None, jobs)
            totals = report.totals()
            row = {"model": name, "target": kind, "config": report.config, "validated": report.validated,
                   "cycles": totals["cycles"] if kind != "cpu" else None, "seconds": totals["seconds"],
                   "gmacs": round(report.macs / 1e9, 4),
                   "tensor_macs_share": round(report.tensor_macs_share, 4),
                   "gemm_utilization": _utilization(report), "dram_bytes": totals["dram_bytes"],
                   "on_host": " ".join(sorted({r.op for r in report.rows if r.where == "host"})),
                   "wall_s": round(time.perf_counter() - t0, 1)}
            if kind == "cpu" and not quick:
                again = [run_model(name, kind, 1) for _ in range(CPU_RUNS - 1)]
                two = [run_model(name, kind, 2) for _ in range(CPU_RUNS)]
                row.update(seconds=best_seconds([report, *again]), seconds_2t=best_seconds(two),
                           inference_s=min(r.inference_s for r in [report, *again]),
                           inference_s_2t=min(r.inference_s for r in two),
                           ort_int8_1t=onnxruntime_int8(name, 1), ort_int8_2t=onnxruntime_int8(name, 2))
                for threads, ours, e2e in (("1t", "seconds", "inference_s"),
                                           ("2t", "seconds_2t", "inference_s_2t")):
                    peer = row[f"ort_int8_{threads}"]
                    row[f"speedup_vs_ort_{threads}"] = peer / row[ours] if peer else None
                    row[f"end_to_end_speedup_vs_ort_{threads}"] = peer / row[e2e] if peer else None
            rows.append(row)
            summary[f"{name}/{kind}"] = {**row, "breakdown": breakdown(report)}
            layers += [{"model": name, "target": kind, **r.to_json()} for r in report.rows]
            console.print(f"{name} on {kind}: {'bit-exact' if report.validated else 'NOT bit-exact'}, "
                          f"{row['cycles'] or row['seconds']}, {row['tensor_macs_share']:.1%} of MACs on "
                          f"tensor instructions ({row['wall_s']} s)", markup=False)
    _write_csv(out / "networks.csv", rows)
    _write_csv(out / "layers.csv", layers)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    _figure(summary, out / "networks.png")
    table = Table(title="Whole networks, int8, every step bit-exact against the integer graph")
    for column in ("model", "target", "validated", "cycles / s", "MACs on tensor insns", "GEMM util",
                   "on the host"):
        table.add_column(column)
    for r in rows:
        measured = f"{r['cycles']:,}" if r["cycles"] else f"{r['seconds'] * 1e3:.2f} ms"
        table.add_row(r["model"], r["target"], str(r["validated"]), measured, f"{r['tensor_macs_share']:.1%}",
                      f"{r['gemm_utilization']:.1%}" if r["gemm_utilization"] is not None else "",
                      r["on_host"])
    console.print(table)
    if not all(r["validated"] for r in rows):
        raise typer.Exit(1)


def _utilization(report: NetworkReport) -> float | None:
    """The GEMM core's busy share over the network's simulated cycles (VITA), from each step's."""
    busy = [(r.utilization, r.cycles) for r in report.rows if r.utilization is not None and r.cycles]
    if report.target != "vita" or not busy:
        return None
    return round(sum(u * c for u, c in busy) / report.cycles, 4)


def _write_csv(path: Path, rows: list[dict]) -> None:
    names = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)


def _figure(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(summary)
    ops = sorted({op for s in summary.values() for op in s["breakdown"]})
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(keys)), 4))
    bottom = np.zeros(len(keys))
    for op in ops:
        share = np.array([s["breakdown"].get(op, 0) / max(sum(s["breakdown"].values()), 1e-30)
                          for s in summary.values()])
        ax.bar(keys, share, bottom=bottom, label=op)
        bottom += share
    ax.set_ylabel("share of the network's cycles (CPU: time)")
    ax.set_title("Where each network's time goes, by operator")
    ax.tick_params(axis="x", rotation=60)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    typer.run(main)
