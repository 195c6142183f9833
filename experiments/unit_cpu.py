"""UNIT on a real CPU (Weng et al., CGO 2021, Sec. VI.B and Fig. 10): int8 convolutions with AVX-512 VNNI.

Every layer of UNIT's Table I (16 layers, inputs already padded) and of ResNet-18 (C2-C12, a 3x3 kernel
padded by 1) runs, batch 1, u8 x s8 -> s32, on the same seeded inputs, as:

- ``tandem_vnni``: Tandem's UNIT flow (the Inspector maps vpdpbusd onto the packed channel loops, the rewriter
  tiles and marks them, LLVM compiles), tuned over the first ``--tune`` candidates of UNIT's two breaking
  points, on 1 thread and, tuned again, on 2 (``tandem_vnni_2t``);
- ``tandem_avx512``: the same schedule without the tensorized instruction (16 int32 lanes vectorized);
- ``tvm``: apache-tvm 0.27's int8 conv2d, not tensorized; ``tvm_vnni``: the same tensorized with vpdpbusd by
  ``Schedule.tensorize``, only where a subprocess probe finds that path working (with apache-tvm-ffi
  0.1.15.post2 ``tensorize`` segfaults); ``onnxruntime`` (``ConvInteger``, exact) and ``onnxruntime_qlinear``
  (``QLinearConv``, the requantizing kernel, for time only), ``numpy`` (im2col + matmul): see
  baselines/cpu_peers.py. A peer that is not installed or not available is left out (its column empty) and
  said so.

Tandem's results and every exact peer's are compared with numpy bit for bit. Times are medians; inputs are
in each implementation's own layout (packing is not timed), as UNIT's graph-level layout leaves them.

Writes ``<out>/unit_cpu.csv`` (GOPS per implementation and Tandem's ratio to each), ``<out>/summary.json``
(geometric means over ResNet-18 C2-C12 and over Table I, ratios, the measured vpdpbusd peak and the issue's
targets) and ``<out>/unit_cpu.png``.

    python experiments/unit_cpu.py [--quick] [--tune 6] [--out DIR]

``--quick`` runs two small layers with short timings (the tests run it).
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

from baselines.cpu_layers import ConvSpec
from baselines.cpu_peers import ALL_PEERS
from baselines.peer import time_callable
from compiler.backend.llvm import host_cpu
from compiler.backend.llvm_probe import measure_peak
from compiler.ops.nn import ConvShape
from tandem.flows import cpu_layers
from tandem.flows.cpu import run_cpu
from tandem.flows.layer_tables import RESNET18, UNIT_TABLE1, padding

QUICK = {"q1": ("resnet18", (14, 32, 32, 3, 1)), "q2": ("table1", (16, 20, 24, 3, 2))}
IMPLEMENTATIONS = (
    "tandem_vnni",
    "tandem_vnni_2t",
    "tandem_avx512",
    "tvm",
    "tvm_vnni",
    "onnxruntime",
    "onnxruntime_qlinear",
    "numpy",
)
PEERS = ("tvm", "tvm_vnni", "onnxruntime", "onnxruntime_qlinear", "numpy")
SEED = 0


def layers(quick: bool = False) -> list[tuple[str, str, ConvShape]]:
    """(name, source, layer): ResNet-18 C2-C12 then Table I #1-#16, or the ``--quick`` stand-ins."""
    if quick:
        out = []
        for name, (source, shape) in QUICK.items():
            hw, c, k, r, s = shape
            out.append(
                (name, source, ConvShape(hw, hw, c, k, r, s, padding(r) if source == "resnet18" else 0))
            )
        return out
    found = [
        (name, "resnet18", ConvShape(hw, hw, ic, oc, k, s, padding(k)))
        for name, (hw, ic, oc, k, s) in RESNET18.items()
    ]
    found += [
        (name, "table1", ConvShape(ihw, ihw, c, k, r, s, 0))
        for name, (c, ihw, k, r, s) in UNIT_TABLE1.items()
    ]
    return found


def run_layer(name: str, source: str, layer: ConvShape, tune: int, min_time: float) -> dict:
    c = layer
    row = {
        "layer": name,
        "source": source,
        "H": c.h,
        "W": c.w,
        "IC": c.ic,
        "OC": c.oc,
        "K": c.k,
        "S": c.s,
        "P": c.p,
        "ops": 2 * layer.macs,
    }
    validated = True
    one = run_cpu(layer, "x86-vnni", threads=1, tune=tune, seed=SEED, min_time=min_time)
    two = run_cpu(layer, "x86-vnni", threads=2, tune=tune, seed=SEED, min_time=min_time)
    plain = run_cpu(layer, "x86-avx512", threads=1, tune=0, seed=SEED, min_time=min_time)
    for key, r in (("tandem_vnni", one), ("tandem_vnni_2t", two), ("tandem_avx512", plain)):
        row[f"{key}_gops"] = r.measured["gops"]
        validated &= r.validated
    row["tuning"] = one.params["tuning"]
    data, weight = cpu_layers.inputs(layer, SEED)
    want = cpu_layers.reference(layer, data, weight)
    spec = ConvSpec(c=c.ic, h=c.h, w=c.w, k=c.oc, r=c.k, stride=c.s, pad=c.p)
    for peer in ALL_PEERS:
        key = peer.name.replace("-", "_")
        if peer.available() is not None:
            row[f"{key}_gops"] = None
            continue
        run = peer.prepare_conv(spec, data, weight, threads=1)
        out = run()
        if peer.exact:
            validated &= bool(np.array_equal(out, want))
        row[f"{key}_gops"] = 2 * layer.macs / time_callable(run, min_time=min_time / 5) / 1e9
    for key in PEERS + ("tandem_avx512",):
        peer_gops = row.get(f"{key}_gops")
        row[f"vnni_over_{key}"] = row["tandem_vnni_gops"] / peer_gops if peer_gops else None
    row["scaling_2t"] = row["tandem_vnni_2t_gops"] / row["tandem_vnni_gops"]
    row["validated"] = validated
    return row


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows: list[dict], peak_1t: float, peak_2t: float) -> dict:
    summary: dict = {
        "cpu": host_cpu()["cpu"],
        "peak_gops_1t": peak_1t,
        "peak_gops_2t": peak_2t,
        "validated": all(r["validated"] for r in rows),
    }
    for source in ("resnet18", "table1"):
        chosen = [r for r in rows if r["source"] == source]
        if not chosen:
            continue
        part = {f"{key}_gops": geomean(r[f"{key}_gops"] for r in chosen) for key in IMPLEMENTATIONS}
        vnni = part["tandem_vnni_gops"]
        part["vnni_pct_of_peak"] = 100 * vnni / peak_1t
        part["scaling_2t"] = part["tandem_vnni_2t_gops"] / vnni
        for key in PEERS + ("tandem_avx512",):
            other = part[f"{key}_gops"]
            part[f"vnni_over_{key}"] = vnni / other if other else None
        summary[source] = part
    r18 = summary.get("resnet18")
    if r18:
        summary["targets"] = {
            "1 thread >= 80% of the measured vpdpbusd peak": r18["vnni_pct_of_peak"] >= 80,
            "1 thread >= onnxruntime QLinearConv": (r18["vnni_over_onnxruntime_qlinear"] or 0) >= 1,
            "2 threads >= 1.5x 1 thread": r18["scaling_2t"] >= 1.5,
        }
    return summary


def plot(rows: list[dict], summary: dict, path: Path) -> None:
    """GOPS per layer and implementation (log scale), with this CPU's measured vpdpbusd peaks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [k for k in IMPLEMENTATIONS if any(r.get(f"{k}_gops") for r in rows)]
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(rows)) + 2.5, 4.5))
    width = 0.8 / len(shown)
    x = np.arange(len(rows))
    for i, key in enumerate(shown):
        ax.bar(x + i * width, [r.get(f"{key}_gops") or 0 for r in rows], width, label=key)
    for threads, style in ((1, "--"), (2, ":")):
        ax.axhline(summary[f"peak_gops_{threads}t"], color="black", linestyle=style, linewidth=1,
                   label=f"vpdpbusd peak, {threads} thread{'s' if threads > 1 else ''}")
    ax.set_xticks(x + 0.4 - width / 2, [r["layer"] for r in rows], rotation=45)
    ax.set_ylabel("GOPS (int8, batch 1)")
    ax.set_yscale("log")
    ax.set_title(f"UNIT on {summary['cpu']}: Tandem + VNNI vs. peers (ResNet-18 C2-C12, UNIT Table I)")
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(rows: list[dict], summary: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with (out / "unit_cpu.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plot(rows, summary, out / "unit_cpu.png")


def print_summary(rows: list[dict], summary: dict, console: Console) -> None:
    table = Table(title=f"UNIT int8 conv on {summary['cpu']} (GOPS, 1 thread unless noted)")
    for name in ("layer", "vnni", "vnni 2t", "avx512", "tvm", "tvm vnni", "ort", "ort qlinear", "numpy"):
        table.add_column(name, justify="left" if name == "layer" else "right")
    for r in rows:
        table.add_row(
            r["layer"], *(f"{r[f'{k}_gops']:.1f}" if r.get(f"{k}_gops") else "-" for k in IMPLEMENTATIONS)
        )
    console.print(table)
    for source in ("resnet18", "table1"):
        part = summary.get(source)
        if part:
            ratios = ", ".join(
                f"{k} {part[f'vnni_over_{k}']:.2f}x"
                for k in PEERS + ("tandem_avx512",)
                if part[f"vnni_over_{k}"]
            )
            console.print(
                f"{source}: geomean {part['tandem_vnni_gops']:.1f} GOPS = "
                f"{part['vnni_pct_of_peak']:.1f}% of the measured peak {summary['peak_gops_1t']:.1f}; "
                f"2 threads {part['scaling_2t']:.2f}x; over {ratios}",
                markup=False,
            )
    for target, met in summary.get("targets", {}).items():
        console.print(f"  target {'met' if met else 'MISSED'}: {target}", markup=False)


DEFAULT_OUT = Path("experiments/out/unit_cpu")


def main(
    out: Annotated[Path, typer.Option(help="Output folder.")] = DEFAULT_OUT,
    quick: Annotated[bool, typer.Option("--quick", help="Two small layers, short timings.")] = False,
    tune: Annotated[int, typer.Option(min=0, help="Time this many tuning candidates per layer.")] = 6,
) -> None:
    """Run every layer with Tandem (VNNI, 1 and 2 threads; no VNNI) and the peers; write CSV, JSON, PNG."""
    console = Console(highlight=False, soft_wrap=True)
    if not host_cpu()["avx512vnni"]:
        console.print("this CPU has no AVX-512 VNNI; nothing to measure", markup=False)
        raise typer.Exit(code=2)
    for peer in ALL_PEERS:
        if peer.available() is not None:
            console.print(f"left out: {peer.name}: {peer.available()}", markup=False)
    start = time.perf_counter()
    min_time = 0.02 if quick else 0.3
    rows = []
    chosen = layers(quick)
    for k, (name, source, layer) in enumerate(chosen, 1):
        row = run_layer(name, source, layer, 0 if quick else tune, min_time)
        rows.append(row)
        console.print(
            f"[{k}/{len(chosen)}] {name} ({source}): vnni {row['tandem_vnni_gops']:.1f} GOPS, "
            f"2 threads {row['tandem_vnni_2t_gops']:.1f}, tuning {row['tuning']}"
            + ("" if row["validated"] else " -- OUTPUT DIFFERS FROM NUMPY"),
            markup=False,
        )
    summary = summarize(rows, measure_peak(1), measure_peak(2))
    write_outputs(rows, summary, out)
    print_summary(rows, summary, console)
    console.print(f"{len(rows)} layers in {time.perf_counter() - start:.1f} s; wrote {out}", markup=False)
    if not summary["validated"]:
        raise typer.Exit(code=1)


if __name__ == "__main__":
    typer.run(main)
