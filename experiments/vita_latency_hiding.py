"""TVM Sec. 5.3, Fig. 19: latency hiding with virtual threads on VITA, for the ResNet-18 conv layers C2-C12.

Each layer (batch 1, int8, shapes in papers/tvm-vita.md; K = 3 pads by 1, K = 1 by 0) is compiled twice for
the ``tvm-paper`` config (16x16 GEMM at 200 MHz, 32 KiB input / weight buffers, 128 KiB accumulators):

- serial: no virtual threads; a chunk's loads and its GEMMs take turns (one buffer of each);
- threaded: ``--vthreads`` virtual threads (2 by default), interleaved by ``inject_virtual_thread`` so
  that one thread's loads overlap another's GEMMs.

Both run through ``tandem.flows.vita.run_vita`` on the same seeded inputs and are compared with numpy bit for
bit. Each picks its own tiling: with ``--tune K`` (default 4) the best of the cost model's first K tilings by
simulated cycles, with ``--tune 0`` the model's first choice. Recorded per layer: cycles of both, the
latency reduction ``1 - threaded / serial``, GEMM utilization (GEMM busy cycles / cycles), achieved MACs per
cycle against the peak, the layer's arithmetic intensity (MACs per byte of compulsory DRAM traffic) against
the machine's ridge point, the roofline bound, and the compute unit's own bound (GEMM micro-ops plus the
shift/clip epilogue: three ALU operations per output vector at the ALU's initiation interval), which is what
limits the 1x1 layers on this machine.

Writes ``<out>/vita_latency_hiding.csv``, ``<out>/summary.json`` and ``<out>/roofline.png`` (Fig. 19: each
layer's serial and threaded schedule on the machine's roofline).

    python experiments/vita_latency_hiding.py [--quick] [--vthreads 2] [--tune 4] [--config tvm-paper]

``--quick`` runs three small layers (NOT ResNet's: scaled-down ones of the same kinds) in a few seconds; the
tests run it.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from compiler.ops.nn import ConvShape
from compiler.target import Target
from sim.vita.config import peak_macs_per_cycle
from tandem.flows import vita_layers
from tandem.flows.layer_tables import resnet18_layers
from tandem.flows.layers import params as layer_params
from tandem.flows.targets import load_target
from tandem.flows.vita import dram_bytes_per_cycle, machine_costs, run_vita

PAPER = "latency reduction 7%-54% per layer; GEMM utilization at best 52% without, up to 74% with"
SEED = 0

COLUMNS = (
    "layer", "H", "W", "IC", "OC", "K", "S", "P", "macs", "dram_bytes", "intensity", "ridge", "bound",
    "tiling_serial", "tiling_threaded", "cycles_serial", "cycles_threaded", "reduction_pct",
    "gemm_util_serial", "gemm_util_threaded", "macs_per_cycle_serial", "macs_per_cycle_threaded",
    "peak_macs_per_cycle", "roofline_cycles", "roofline_pct_threaded", "compute_unit_cycles",
    "validated_serial", "validated_threaded",
)


def layers(quick: bool = False) -> dict[str, ConvShape]:
    """ResNet-18's C2-C12, or the ``--quick`` stand-ins (tandem/flows/layer_tables.py), by name."""
    return resnet18_layers(quick)


def compute_unit_cycles(layer: ConvShape, target: Target) -> int:
    """What the compute unit must spend at least: every GEMM micro-op at one per cycle and the epilogue's
    ALU operations at the ALU's initiation interval, one per output vector each."""
    vectors = layer.oh * layer.ow * layer.oc // target.spec.params["BLOCK_OUT"]
    costs = machine_costs(target)
    return (math.ceil(layer.macs / peak_macs_per_cycle(target.spec))
            + costs.epilogue_ops * costs.alu_cycles_per_uop * vectors)


def run_layer(name: str, layer: ConvShape, vthreads: int, tune: int, target: Target) -> dict:
    """Both schedules of ``layer`` on the same inputs; its CSV row plus ``wall_s``."""
    start = time.perf_counter()
    macs, dram_bytes = layer.macs, vita_layers.dram_bytes(layer)
    serial = run_vita(layer, 0, target, tune=tune, seed=SEED)   # one seed: both see the same inputs
    threaded = run_vita(layer, vthreads, target, tune=tune, seed=SEED)
    peak = peak_macs_per_cycle(target.spec)
    intensity = macs / dram_bytes
    ridge = peak / dram_bytes_per_cycle(target)
    row = {
        "layer": name, **layer_params(layer), "macs": macs, "dram_bytes": dram_bytes,
        "intensity": round(intensity, 2), "ridge": ridge,
        "bound": "compute" if intensity >= ridge else "memory",
        "tiling_serial": _tiling(serial.params["tiling"]),
        "tiling_threaded": _tiling(threaded.params["tiling"]),
        "cycles_serial": serial.cycles, "cycles_threaded": threaded.cycles,
        "reduction_pct": round(100.0 * (1 - threaded.cycles / serial.cycles), 2),
        "gemm_util_serial": serial.utilization["gemm"], "gemm_util_threaded": threaded.utilization["gemm"],
        "macs_per_cycle_serial": round(macs / serial.cycles, 2),
        "macs_per_cycle_threaded": round(macs / threaded.cycles, 2),
        "peak_macs_per_cycle": peak, "roofline_cycles": threaded.roofline_cycles,
        "roofline_pct_threaded": threaded.roofline_pct,
        "compute_unit_cycles": compute_unit_cycles(layer, target),
        "validated_serial": serial.validated, "validated_threaded": threaded.validated,
    }
    row["wall_s"] = time.perf_counter() - start
    return row


def table_row(name: str, layer: ConvShape) -> dict:
    """``layer`` as its row of the layer table (tandem/flows/layer_tables.py): name, input size, channels,
    kernel and stride."""
    return {"name": name, "hw": layer.h, "ic": layer.ic, "oc": layer.oc, "k": layer.k, "s": layer.s}


def _tiling(t: dict) -> str:
    threads = f" vt{t['vthreads']}/{t['vthread_axis']}" if t["vthreads"] > 1 else ""
    return f"{t['rows']}r x {t['oc_block']}oc x {t['ic_block']}ic{threads}"


def summarize(rows: Sequence[dict]) -> dict:
    """Range and geometric mean of the reduction, best utilization of each schedule, and the layers that
    miss the targets (>= 80% GEMM utilization when compute-bound, within 10% of the roofline otherwise)."""
    reductions = [r["reduction_pct"] for r in rows]
    speedups = [r["cycles_serial"] / r["cycles_threaded"] for r in rows]
    missed = []
    for r in rows:
        if r["bound"] == "compute" and r["gemm_util_threaded"] < 0.8:
            missed.append(f"{r['layer']}: GEMM utilization {r['gemm_util_threaded']:.0%} < 80%")
        elif r["bound"] == "memory" and r["cycles_threaded"] > 1.1 * r["roofline_cycles"]:
            over = r["cycles_threaded"] / r["roofline_cycles"]
            missed.append(f"{r['layer']}: {over:.2f}x the memory roofline")
    return {
        "layers": len(rows),
        "validated": all(r["validated_serial"] and r["validated_threaded"] for r in rows),
        "reduction_pct_min": min(reductions), "reduction_pct_max": max(reductions),
        "geomean_speedup": math.exp(sum(math.log(s) for s in speedups) / len(speedups)),
        "best_util_serial": max(r["gemm_util_serial"] for r in rows),
        "best_util_threaded": max(r["gemm_util_threaded"] for r in rows),
        "targets_missed": missed, "paper": PAPER,
    }


def plot_roofline(rows: Sequence[dict], target: Target, path: Path) -> None:
    """Fig. 19: achieved MACs per cycle against arithmetic intensity, serial (hollow) and threaded (filled)
    per layer, under the memory and compute roofs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = target.config
    peak, bw = peak_macs_per_cycle(target.spec), dram_bytes_per_cycle(target)
    xs = [r["intensity"] for r in rows]
    lo, hi = min(xs + [peak / bw]) / 2, max(xs + [peak / bw]) * 2
    grid = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.plot(grid, np.minimum(grid * bw, peak), color="black", linewidth=1.2, label="roofline")
    for r in rows:
        x = r["intensity"]
        ys = [r["macs_per_cycle_serial"], r["macs_per_cycle_threaded"]]
        ax.plot([x, x], ys, color="gray", linewidth=0.8)
        ax.scatter([x], [r["macs_per_cycle_serial"]], facecolors="none", edgecolors="tab:blue", zorder=3)
        ax.scatter([x], [r["macs_per_cycle_threaded"]], color="tab:orange", zorder=3)
        ax.scatter([x], [r["macs"] / r["compute_unit_cycles"]], marker="_", color="tab:red", s=150, zorder=2)
        ax.annotate(r["layer"], (x, r["macs_per_cycle_threaded"]), textcoords="offset points", xytext=(4, 4),
                    fontsize=7)
    ax.scatter([], [], facecolors="none", edgecolors="tab:blue", label="without virtual threads")
    ax.scatter([], [], color="tab:orange", label="with virtual threads")
    ax.scatter([], [], marker="_", color="tab:red", s=150, label="compute unit bound (GEMM + ALU epilogue)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel("achieved MACs per cycle")
    ax.set_title(f"VITA ({config.name}): ResNet-18 conv layers, latency hiding")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(rows: Sequence[dict], target: Target, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "vita_latency_hiding.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    summary = summarize(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plot_roofline(rows, target, out / "roofline.png")
    return summary


def print_rows(rows: Sequence[dict], summary: dict, console: Console) -> None:
    table = Table(title="VITA latency hiding (TVM Fig. 19)")
    for name in ("layer", "bound", "cycles w/o", "cycles with", "reduction", "util w/o", "util with",
                 "% roofline"):
        table.add_column(name, justify="left" if name in ("layer", "bound") else "right")
    for r in rows:
        table.add_row(r["layer"], r["bound"], f"{r['cycles_serial']:,}", f"{r['cycles_threaded']:,}",
                      f"{r['reduction_pct']:.1f}%", f"{r['gemm_util_serial']:.0%}",
                      f"{r['gemm_util_threaded']:.0%}", f"{r['roofline_pct_threaded']:.0f}%")
    console.print(table)
    console.print(f"reduction {summary['reduction_pct_min']:.1f}%..{summary['reduction_pct_max']:.1f}%, "
                  f"best utilization {summary['best_util_serial']:.0%} without, "
                  f"{summary['best_util_threaded']:.0%} with (paper: {PAPER})", markup=False)
    for miss in summary["targets_missed"]:
        console.print(f"  target missed: {miss}", style="yellow", markup=False)


DEFAULT_OUT = Path("experiments/out/vita_latency_hiding")


def main(out: Annotated[Path, typer.Option(help="Output folder.")] = DEFAULT_OUT,
         quick: Annotated[bool, typer.Option("--quick", help="Three small layers (not ResNet's).")] = False,
         vthreads: Annotated[int, typer.Option(min=2, help="Virtual threads of the threaded schedule.")] = 2,
         tune: Annotated[int, typer.Option(
             min=0, help="Simulate this many of the cost model's best tilings per schedule (0: its first)."
         )] = 4,
         config: Annotated[str, typer.Option(help="VITA config: built-in name or TOML file.")] = "tvm-paper",
         spec: Annotated[Path | None, typer.Option(
             help="A VITA spec file instead of the built-in one.")] = None,
         ) -> None:
    """Run the latency-hiding experiment on the simulated VITA; write CSV, JSON and the roofline PNG."""
    console = Console(highlight=False, soft_wrap=True)
    cfg = load_target("vita", config, spec)
    start = time.perf_counter()
    rows = []
    chosen = layers(quick)
    for k, (name, layer) in enumerate(chosen.items(), 1):
        row = run_layer(name, layer, vthreads, 0 if quick else tune, cfg)
        rows.append(row)
        console.print(f"[{k}/{len(chosen)}] {name} {table_row(name, layer)}: {row['cycles_serial']:,} -> "
                      f"{row['cycles_threaded']:,} cycles ({row['reduction_pct']:.1f}% less), GEMM "
                      f"{row['gemm_util_serial']:.0%} -> {row['gemm_util_threaded']:.0%} "
                      f"({row['wall_s']:.1f} s)", markup=False)
        if not (row["validated_serial"] and row["validated_threaded"]):
            console.print("  warning: output differs from numpy", style="red", markup=False)
    summary = write_outputs(rows, cfg, out)
    print_rows(rows, summary, console)
    console.print(f"{len(rows)} layers in {time.perf_counter() - start:.1f} s; wrote {out}", markup=False)
    if not summary["validated"]:
        raise typer.Exit(code=1)


if __name__ == "__main__":
    typer.run(main)
