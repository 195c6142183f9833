"""TensorIR's single-operator suite (seed 004 Sec. 5.1, Fig. 9-10) on VITA, DianNao and this CPU.

The eight kinds -- C1D, C2D, C3D, DEP (depthwise), DIL (dilated), GMM, GRP (grouped), T2D (transposed 2-D
convolution) -- at batch 1 and 16, each mapped onto the target's tensor instruction and run through the one
flow (``tandem.flows.run.run``): simulated on VITA (GEMM) and DianNao (qconv, the card's GEMM being a 1 x 1
conv),
mapped by characteristic vectors (``compiler/passes/reindex.py``) onto GEMMs of reindexed operands; run for
real on this CPU (vpdpbusd, one thread), where the convolutions run directly, the window read in the kernel
(UNIT's schedule in 1 to 3 dimensions, with stride, dilation and groups; depthwise with its channels on the
lanes), so the time measured is the whole operator's but for a layout transform that moves each byte once,
and GMM on UNIT's GEMM. Every run is validated bit for bit against compiler/ops/reference.

Shapes: TensorIR gives none (papers/tensorir.md: "Shapes are not given anywhere in the paper"); its suite
is Ansor's single-operator suite, so the shapes are Ansor's artifact's (``shape_configs.py`` of the Ansor
evaluation scripts, four per kind: ResNet-18's conv layers for C1D/C2D/C3D/GRP/DIL with depth 16, groups 4 and
dilation 2 where they apply, MobileNet's depthwise layers, DCGAN's transposed convolutions, four matmuls).
C2D runs as ``group_conv`` with G = 1 so that every kind, batches included, goes through the same mapping;
GMM at batch 16 is a batch matmul of 16 independent GEMMs. ``--shape K`` picks Ansor's K-th shape of every
kind (default 3: the 7 x 7 x 512 convolutions, the 1024^3 matmul); ``--quick`` runs scaled-down stand-ins.

Recorded per run: validated, what ran (the GEMMs of the mapping, count x M x N x K; or the CPU's direct
convolutions, ``window``/``depthwise``, one per group), whether every multiply-add ran
on the tensor instruction (no scalar fallback, nothing left unmatched), cycles (simulated) or seconds and
GOPS (CPU), and the percentage of the target's bound: the roofline (tensor units at peak, compulsory traffic
at the memory's bandwidth) on the simulators, the measured vpdpbusd peak on the CPU; on the CPU also its
peers on the same inputs, one thread (onnxruntime's exact and requantizing operators, TVM 0.27), each exact
one checked bit for bit against ours, and ``peer_ratio``, our GOPS over the fastest peer's.

Writes ``<out>/tensorir_suite.csv``, ``<out>/summary.json`` (per target: runs, validated, tensorized, the
geometric mean of % of bound; the CPU's peer ratio overall and per kind) and ``<out>/tensorir_suite.png``.

    python experiments/tensorir_suite.py [--quick] [--shape 3] [--batches 1,16] [--targets vita,diannao,cpu]
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

from baselines.onnxruntime_peer import OnnxRuntimePeer, prepare_contraction
from baselines.peer import time_callable
from baselines.tvm_contractions import prepare_contraction_tvm
from compiler.errors import TandemError
from compiler.ops import contractions
from sim.core.errors import SimError
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import load_target

SEED = 0
SOURCE = "Ansor artifact, shape_configs.py (single_op_shape_dict); TensorIR gives no shapes"

#: Ansor's shapes, as our parameters (batch apart): kind -> (operator, [params of each shape])
SUITE: dict[str, tuple[str, list[dict[str, int]]]] = {
    "C1D": ("conv1d", [dict(W=256, IC=64, OC=128, K=3, S=2, P=1), dict(W=128, IC=128, OC=256, K=1, S=2, P=0),
                       dict(W=64, IC=256, OC=256, K=5, S=1, P=2), dict(W=32, IC=512, OC=512, K=3, S=1, P=1)]),
    "C2D": ("group_conv", [dict(H=224, W=224, IC=3, OC=64, K=7, S=2, P=3, G=1),
                           dict(H=56, W=56, IC=64, OC=64, K=1, S=1, P=0, G=1),
                           dict(H=14, W=14, IC=256, OC=256, K=3, S=1, P=1, G=1),
                           dict(H=7, W=7, IC=512, OC=512, K=3, S=1, P=1, G=1)]),
    "C3D": ("conv3d", [dict(D=16, H=224, W=224, IC=3, OC=64, K=7, S=2, P=3),
                       dict(D=16, H=56, W=56, IC=64, OC=64, K=1, S=1, P=0),
                       dict(D=16, H=14, W=14, IC=256, OC=256, K=3, S=1, P=1),
                       dict(D=16, H=7, W=7, IC=512, OC=512, K=3, S=1, P=1)]),
    "GMM": ("batch_matmul", [dict(M=128, N=128, K=128), dict(M=512, N=32, K=512), dict(M=512, N=512, K=512),
                             dict(M=1024, N=1024, K=1024)]),
    "GRP": ("group_conv", [dict(H=56, W=56, IC=64, OC=128, K=3, S=2, P=1, G=4),
                           dict(H=56, W=56, IC=64, OC=64, K=1, S=1, P=0, G=4),
                           dict(H=14, W=14, IC=256, OC=256, K=3, S=1, P=1, G=4),
                           dict(H=7, W=7, IC=512, OC=512, K=3, S=1, P=1, G=4)]),
    "DIL": ("dilated_conv", [dict(H=224, W=224, IC=3, OC=64, K=7, S=2, P=3, DIL=2),
                             dict(H=56, W=56, IC=64, OC=64, K=1, S=1, P=0, DIL=2),
                             dict(H=14, W=14, IC=256, OC=256, K=3, S=1, P=1, DIL=2),
                             dict(H=7, W=7, IC=512, OC=512, K=3, S=1, P=1, DIL=2)]),
    "DEP": ("depthwise", [dict(H=112, W=112, C=32, K=3, S=1, P=1), dict(H=112, W=112, C=64, K=3, S=2, P=1),
                          dict(H=14, W=14, C=512, K=3, S=2, P=1), dict(H=7, W=7, C=1024, K=3, S=1, P=1)]),
    "T2D": ("conv_transpose", [dict(H=4, W=4, IC=512, OC=256, K=4, S=2, P=1),
                               dict(H=8, W=8, IC=256, OC=128, K=4, S=2, P=1),
                               dict(H=16, W=16, IC=128, OC=64, K=4, S=2, P=1),
                               dict(H=32, W=32, IC=64, OC=3, K=4, S=2, P=1)]),
}

#: scaled-down stand-ins of each kind for --quick (NOT Ansor's shapes)
QUICK: dict[str, dict[str, int]] = {
    "C1D": dict(W=16, IC=16, OC=32, K=3, S=2, P=1), "C2D": dict(H=8, W=8, IC=3, OC=16, K=3, S=2, P=1, G=1),
    "C3D": dict(D=3, H=6, W=6, IC=8, OC=16, K=3, S=1, P=1), "GMM": dict(M=16, N=32, K=32),
    "GRP": dict(H=6, W=6, IC=16, OC=32, K=3, S=1, P=1, G=4), "DIL": dict(H=9, W=9, IC=8, OC=16, K=3, S=1, P=2,
                                                                          DIL=2),
    "DEP": dict(H=8, W=8, C=4, K=3, S=1, P=1), "T2D": dict(H=4, W=4, IC=16, OC=8, K=4, S=2, P=1),
}

#: each target's options: VITA with its cost model's tiling and no virtual threads, DianNao in int8 on all
#: its cores, the CPU on one thread
OPTIONS = {"vita": {}, "diannao": {"dtype": "int8"}, "cpu": {"threads": 1, "min_time": 0.1}}
COLUMNS = ("kind", "op", "batch", "target", "params", "validated", "macs", "kernel", "gemms", "gemm_m",
           "gemm_n", "gemm_k", "tensorized", "cycles", "seconds", "gops", "peak_gops", "bound_pct",
           "peer_gops", "peer_qlinear_gops", "peer_exact", "peer_error", "tvm_gops", "tvm_exact", "tvm_error",
           "peer_ratio", "wall_s", "error")


def cases(shape: int, batches: list[int], quick: bool) -> list[tuple[str, str, int, dict[str, int]]]:
    """(kind, operator, batch, parameters) of each run."""
    out = []
    for kind, (op, shapes) in SUITE.items():
        params = QUICK[kind] if quick else shapes[shape]
        for batch in batches:
            out.append((kind, op, batch, {**params, ("B" if op == "batch_matmul" else "N"): batch}))
    return out


def run_case(kind: str, op: str, batch: int, params: dict[str, int], target_kind: str) -> dict:
    """One run's CSV row (an ``error`` and no measures when the target refuses it); on the CPU also
    its peers on the same inputs (onnxruntime ``peer_*``, TVM ``tvm_*``)."""
    start = time.perf_counter()
    row = {"kind": kind, "op": op, "batch": batch, "target": target_kind,
           "params": " ".join(f"{k}={v}" for k, v in params.items())}
    inputs = None
    if target_kind == "cpu":   # the CPU's types (u8 data, s8 weights), drawn here to give the peer the same
        shapes = contractions.contraction(op, params).plain[:2]
        rng = np.random.default_rng(SEED)
        inputs = [rng.integers(0, 256, shapes[0]).astype(np.uint8),
                  rng.integers(-128, 128, shapes[1]).astype(np.int8)]
    try:
        report = run(op, load_target(target_kind), {**params, **OPTIONS[target_kind], "seed": SEED},
                     inputs=inputs)
    except (RunError, TandemError, SimError) as exc:   # refused, or stopped by the simulator: recorded
        return {**row, "validated": False, "error": f"{type(exc).__name__}: {exc}",
                "wall_s": round(time.perf_counter() - start, 2)}
    measured = report.measured or {}
    macs = contractions.contraction(op, params).macs
    bound = report.roofline_pct
    if target_kind == "cpu" and measured.get("peak_gops"):
        bound = round(100 * measured["gops"] / measured["peak_gops"], 2)
    row = {**row, "validated": report.validated, "macs": macs, **_kernel(report),
           "tensorized": report.scalar_fallback == 0 and not report.unmatched,
           "cycles": report.cycles if target_kind != "cpu" else None,
           "seconds": measured.get("seconds"), "gops": measured.get("gops"),
           "peak_gops": measured.get("peak_gops"), "bound_pct": bound, "error": ""}
    if inputs is not None:
        row.update(peer_columns(op, params, inputs, report, macs))
    return {**row, "wall_s": round(time.perf_counter() - start, 2)}


def peer_columns(op: str, params: dict[str, int], inputs: list[np.ndarray], report, macs: int) -> dict:
    """The CPU's peers on the same inputs, one thread: onnxruntime's exact integer operator
    (ConvInteger/MatMulInteger) and its fast requantizing one (QLinearConv/QLinearMatMul, timing only), and
    TVM 0.27 (``prepare_contraction_tvm``: tensorized with vpdpbusd where its intrinsic maps, exact); each
    exact one checked bit for bit against ours. ``peer_ratio`` is our GOPS over the fastest peer's. Why not,
    where a peer cannot run."""
    operator = contractions.contraction(op, params)
    gops, row = {}, {}
    why = OnnxRuntimePeer().available()
    exact = None if why else prepare_contraction(operator, *inputs, threads=1)
    if exact is None:
        row["peer_error"] = why or "ONNX has no integer operator for it"
    else:
        fast = prepare_contraction(operator, *inputs, threads=1, qlinear=True)
        gops["ort"], gops["qlinear"] = (_gops(runner, macs) for runner in (exact, fast))
        row.update(peer_gops=round(gops["ort"], 2), peer_qlinear_gops=round(gops["qlinear"], 2),
                   peer_exact=bool(np.array_equal(exact(), report.output)), peer_error="")
    tvm = prepare_contraction_tvm(operator, *inputs, threads=1)
    if isinstance(tvm, str):
        row["tvm_error"] = tvm
    else:
        gops["tvm"] = _gops(tvm, macs)
        row.update(tvm_gops=round(gops["tvm"], 2), tvm_exact=bool(np.array_equal(tvm(), report.output)),
                   tvm_error="")
    if gops:
        row["peer_ratio"] = round(report.measured["gops"] / max(gops.values()), 3)
    return row


def _gops(runner, macs: int) -> float:
    return 2 * macs / time_callable(runner, min_time=OPTIONS["cpu"]["min_time"] / 5) / 1e9


def _kernel(report) -> dict:
    """What ran: the GEMMs of the mapping (count x M x N x K: the operator's multiply-adds, a T2D's zeros of
    the spread input included), or on the CPU the direct convolutions (``window``, ``depthwise``)."""
    if "window" in report.params:
        window = report.params["window"]
        return {"kernel": "depthwise" if window["depthwise"] else "window", "gemms": window["count"]}
    g = report.params["gemm"]
    return {"kernel": g.get("kernel", "gemm"), "gemms": g["count"], "gemm_m": g["M"], "gemm_n": g["N"],
            "gemm_k": g["K"]}


def summarize(rows: list[dict]) -> dict:
    out = {"source": SOURCE, "targets": {}}
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == target]
        ran = [r for r in mine if not r["error"]]
        pcts = [r["bound_pct"] for r in ran if r["bound_pct"]]
        out["targets"][target] = {
            "runs": len(mine), "refused": len(mine) - len(ran),
            "validated": sum(bool(r["validated"]) for r in ran),
            "tensorized": sum(bool(r["tensorized"]) for r in ran),
            "geomean_bound_pct": _geomean(pcts),
        }
        ratios = [r["peer_ratio"] for r in ran if r.get("peer_ratio")]
        if ratios:   # ours over the fastest peer's GOPS, where a peer has the operator
            peers = [r for r in ran if r.get("peer_ratio")]
            out["targets"][target]["peers"] = {
                "runs": len(ratios), "geomean_ratio": _ratio(ratios),
                "onnxruntime_exact": all(r.get("peer_exact") is not False for r in peers),
                "tvm_exact": all(r.get("tvm_exact") is not False for r in peers),
                "geomean_ratio_per_kind": {
                    kind: _ratio([r["peer_ratio"] for r in peers if r["kind"] == kind])
                    for kind in dict.fromkeys(r["kind"] for r in peers)}}
    out["validated"] = all(r["validated"] for r in rows if not r["error"])
    return out


def _ratio(values: list[float]) -> float:
    return round(math.exp(sum(math.log(x) for x in values) / len(values)), 3)


def _geomean(values: list[float]) -> float | None:
    return round(math.exp(sum(math.log(v) for v in values) / len(values)), 2) if values else None


def write_outputs(rows: list[dict], summary: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "tensorir_suite.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot(rows, out / "tensorir_suite.png")


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(dict.fromkeys(r["target"] for r in rows))
    batches = sorted({r["batch"] for r in rows})
    kinds = list(SUITE)
    fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 4), squeeze=False)
    width = 0.8 / len(targets)
    for ax, batch in zip(axes[0], batches, strict=True):
        for t, target in enumerate(targets):
            values = []
            for kind in kinds:
                hit = [r for r in rows if (r["kind"], r["target"], r["batch"]) == (kind, target, batch)]
                values.append(hit[0]["bound_pct"] or 0 if hit and not hit[0]["error"] else 0)
            ax.bar([k + t * width for k in range(len(kinds))], values, width, label=target)
        ax.set_xticks([k + width * (len(targets) - 1) / 2 for k in range(len(kinds))], kinds)
        ax.set_ylabel("% of the target's bound")
        ax.set_title(f"batch {batch}")
        ax.legend(fontsize=8)
    fig.suptitle("TensorIR's suite mapped onto each target's tensor instruction")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pct(bound_pct: float | None) -> str:
    """A run's share of its bound, or why there is none (a CPU without the instruction whose peak bounds
    it)."""
    return "no bound" if bound_pct is None else f"{bound_pct:.1f}%"


def print_summary(rows: list[dict], summary: dict, console: Console) -> None:
    table = Table(title="TensorIR's suite: % of each target's bound (validated, tensorized)")
    for col in ("kind", "batch", *summary["targets"]):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for kind in SUITE:
        for batch in sorted({r["batch"] for r in rows}):
            cells = []
            for target in summary["targets"]:
                hit = [r for r in rows if (r["kind"], r["target"], r["batch"]) == (kind, target, batch)]
                r = hit[0] if hit else None
                cells.append("-" if r is None else "refused" if r["error"] else
                             _pct(r["bound_pct"]) + ("" if r["validated"] else " NOT VALID"))
            table.add_row(kind, str(batch), *cells)
    console.print(table)
    for target, s in summary["targets"].items():
        console.print(f"{target}: {s['validated']}/{s['runs'] - s['refused']} validated, {s['tensorized']} "
                      f"tensorized, geomean {s['geomean_bound_pct']}% of bound", markup=False)
        if "peers" in s:
            console.print(f"{target} over the fastest peer (onnxruntime, TVM): geomean "
                          f"{s['peers']['geomean_ratio']}x over {s['peers']['runs']} runs; per kind "
                          f"{s['peers']['geomean_ratio_per_kind']}", markup=False)


DEFAULT_OUT = Path("experiments/out/tensorir_suite")


def main(out: Annotated[Path, typer.Option(help="Output folder.")] = DEFAULT_OUT,
         quick: Annotated[bool, typer.Option("--quick", help="Small stand-ins of each kind.")] = False,
         shape: Annotated[int, typer.Option(min=0, max=3, help="Which of Ansor's four shapes per kind.")] = 3,
         batches: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,16",
         targets: Annotated[str, typer.Option(help="Comma-separated targets.")] = "vita,diannao,cpu",
         ) -> None:
    """Run TensorIR's suite on each target; write CSV, JSON and a PNG."""
    console = Console(highlight=False, soft_wrap=True)
    chosen = [t.strip() for t in targets.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in OPTIONS]
    if unknown or not chosen:
        raise typer.BadParameter(f"unknown target(s) {unknown}; expected some of {', '.join(OPTIONS)}",
                                 param_hint="--targets")
    try:
        sizes = [int(b) for b in batches.split(",")]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {batches!r}",
                                 param_hint="--batches") from None
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter("batch sizes must be at least 1", param_hint="--batches")
    start = time.perf_counter()
    runs = [(case, t) for case in cases(shape, sizes, quick) for t in chosen]
    rows = []
    for k, ((kind, op, batch, params), target) in enumerate(runs, 1):
        rows.append(run_case(kind, op, batch, params, target))
        r = rows[-1]
        console.print(f"[{k}/{len(runs)}] {kind} batch {batch} on {target}: "
                      + (f"refused: {r['error']}" if r["error"] else
                         f"{'validated' if r['validated'] else 'NOT VALIDATED'}, {_pct(r['bound_pct'])} "
                         "of bound")
                      + f" ({r['wall_s']} s)", markup=False)
    summary = summarize(rows)
    write_outputs(rows, summary, out)
    print_summary(rows, summary, console)
    console.print(f"{len(rows)} runs in {time.perf_counter() - start:.1f} s; shapes from {SOURCE}; "
                  f"wrote {out}", markup=False)
    if not summary["validated"]:
        raise typer.Exit(code=1)


if __name__ == "__main__":
    typer.run(main)
