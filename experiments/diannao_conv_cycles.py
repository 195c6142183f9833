"""Where a DianNao convolution's cycles go (issue 50, item 1): seed 001's Table II conv layers as
``diannao_loop_partition.py`` runs them (variant (a): every pass, fp32, 16 cores, the ``default`` config),
each launched once and taken apart from the simulator's own counts (sim/diannao: per core, the cycles each
unit was busy, the cycles waiting for a shared port or a barrier, the cycles after its halt).

Per layer: the cut the schedule chose (``compiler.ops.diannao.ConvPlan``: row groups x channel groups, tile
rows, and in the cluster-shared form sub-rows and SMEM rows), cores used, cycles, the roofline
(``conv2d_roofline``: the MACs shared by every core's tensor unit, or GMEM crossed once) and the schedule's
own estimate; then, as a share of the kernel's cycles averaged over the launched cores, the tensor unit
(tfu), the copies (dma), the vector unit (vfu), scalar code (scalar: address arithmetic, loop control),
ctrl, and the other busy cycles (barriers' release, halt), stalls (a copy waiting for the GMEM or SMEM port,
by the copy's path, and waiting at a barrier) and idle time (a core done before the slowest); and the bytes
each path moved. Cycles of a core add up: busy (its units, one at a time) + stalled + idle = the kernel's
cycles.

Writes ``<out>/diannao_conv_cycles.csv`` and prints the table.

    python experiments/diannao_conv_cycles.py [--quick] [--layers 1,9] [--tune N] [--out DIR]
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from compiler.ops.nn import ConvShape
from tandem.flows.diannao import conv2d_roofline
from tandem.flows.layer_tables import SEED001_CONV
from tandem.flows.run import prepare
from tandem.flows.targets import load_target

LAYERS = tuple(((hw, hw, cin), cout) for hw, cin, cout in SEED001_CONV)   # 3x3, stride 1, pad 1
QUICK_LAYERS = (((14, 14, 32), 32),)
CORES, SEED, DTYPE = 16, 0, "float32"
UNITS = ("tfu", "dma", "vfu", "scalar", "ctrl")
CAUSES = ("barrier", "async wait", "GMEM->WMEM", "GMEM->SMEM", "GMEM->NMEM", "SMEM->NMEM", "SMEM->WMEM",
          "SMEM->SMEM", "NMEM->GMEM", "other")
COPY = re.compile(r"dst_space=(?P<dst>\w+), src_space=(?P<src>\w+)")
COLUMNS = ("layer", "shape", "cout", "plan", "cores", "cycles", "roofline", "roofline_pct", "estimate",
           *(f"{u}_pct" for u in (*UNITS, "other")), "async_dma_pct", "stalled_pct",
           *(f"stalled_{c}_pct" for c in CAUSES), "idle_pct", "bytes")
DEFAULT_OUT = Path("experiments/out/diannao_conv_cycles")


def breakdown(index: int, shape: tuple[int, int, int], cout: int, tune: int = 0) -> dict:
    """One layer compiled as the DianNao flow compiles it (with ``tune``, the fastest of the estimate's first
    ``tune`` cuts, as ``tandem run ... -p tune=N``), launched, and taken apart (module docstring)."""
    target = load_target("diannao")
    h, w, cin = shape
    params = {"H": h, "W": w, "IC": cin, "OC": cout, "K": 3, "S": 1, "P": 1, "cores": CORES, "dtype": DTYPE,
              "tune": tune, "seed": SEED}
    ready = prepare("conv2d", target, params)   # the flow's plan, inputs and (tuned) compile
    plan, routed = ready.winner, ready.job   # the DianNao layer flow's job, as the target's flow routed it
    result, _ = routed.flow.launch(routed.job, ready.compiled, ready.data, target, trace=True)
    cores = result.cores
    total = result.cycles * len(cores)
    # each unit's cycles the core spent on it (its asynchronous work, overlapped, is apart: "async_dma")
    own = [{u: c.unit_cycles.get(u, 0) - c.background.get(u, 0) for u in UNITS} for c in cores]
    share = {u: 100 * sum(o[u] for o in own) / total for u in UNITS}
    # the rest of a core's busy cycles: instructions of no unit (barriers' release, halt)
    share["other"] = 100 * sum(c.busy - sum(o.values()) for c, o in zip(cores, own, strict=True)) / total
    async_dma = 100 * sum(c.background.get("dma", 0) for c in cores) / total
    roof = conv2d_roofline(ConvShape(h, w, cin, cout, 3, 1, 1), DTYPE, CORES, target)
    return {"layer": index, "shape": f"{h}x{w}x{cin}", "cout": cout, "plan": plan.describe(),
            "cores": len(cores), "cycles": result.cycles, "roofline": roof,
            "roofline_pct": round(100 * roof / result.cycles, 1), "estimate": plan.estimate,
            **{f"{u}_pct": round(v, 1) for u, v in share.items()}, "async_dma_pct": round(async_dma, 1),
            "stalled_pct": round(100 * sum(c.stalled for c in cores) / total, 1),
            "idle_pct": round(100 * sum(c.idle for c in cores) / total, 1),
            **{f"stalled_{cause}_pct": round(100 * n / total, 1) for cause, n in stalls(result).items()},
            "bytes": "; ".join(f"{path} {n / 1e6:.2f} MB" for path, n in sorted(result.bytes_moved.items())
                               if n)}


def stalls(result) -> dict[str, int]:
    """The launched cores' stalled cycles by cause, from the trace: waiting at a barrier, or waiting for the
    memory port(s) of the copy that follows (by its path, e.g. GMEM->SMEM)."""
    causes = dict.fromkeys(CAUSES, 0)
    pending: dict[str, int] = {}
    for track, what, begin, end, kind in result.trace:
        if not track.startswith("core ") or track.endswith("DMA"):
            continue
        if kind == "stall" and "barrier" in what:
            causes["barrier"] += end - begin
        elif kind == "stall" and "asynchronous" in what:   # a wait for the core's asynchronous copies
            causes["async wait"] += end - begin
        elif kind == "stall":
            pending[track] = pending.get(track, 0) + end - begin
        elif kind == "instruction" and pending.get(track):
            found = COPY.search(what)
            cause = f"{found['src']}->{found['dst']}" if found else \
                "SMEM->SMEM" if ": memcpyc " in what else "other"   # (memcpyc's spaces are fixed: no fields)
            causes[cause if cause in causes else "other"] += pending.pop(track)
    return causes


def main(out: Annotated[Path, typer.Option(help="folder for the CSV")] = DEFAULT_OUT,
         quick: Annotated[bool, typer.Option(help="one small layer (not Table II's), seconds")] = False,
         layers: Annotated[str, typer.Option(help="Table II conv layers by number (1-16), e.g. 1,9")] = "",
         tune: Annotated[int, typer.Option(min=0, help="simulate the estimate's first N cuts, keep the "
                                           "fastest (0: the estimate's choice)")] = 0
         ) -> None:
    chosen = list(enumerate(QUICK_LAYERS if quick else LAYERS, 1))
    if layers:
        wanted = {int(x) for x in layers.split(",")}
        chosen = [(k, layer) for k, layer in chosen if k in wanted]
    console = Console(width=170)   # the table is wide: as wide in a file as on a terminal
    rows = []
    for k, (shape, cout) in chosen:
        rows.append(breakdown(k, shape, cout, tune))
        r = rows[-1]
        console.print(f"layer {k} {r['shape']} -> {cout}: {r['cycles']:,} cycles, {r['roofline_pct']}% "
                      f"of the roofline; tfu {r['tfu_pct']}%, dma {r['dma_pct']}% (+{r['async_dma_pct']}% "
                      "overlapped), "
                      f"scalar {r['scalar_pct']}%, stalled {r['stalled_pct']}%, idle {r['idle_pct']}%")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "diannao_conv_cycles.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    shown = [c for c in CAUSES if any(r[f"stalled_{c}_pct"] for r in rows)]
    table = Table("layer", "shape", "cout", "plan", "cycles", "% roof", "tfu", "dma", "stalled",
                  *(f"on {c}" for c in shown), "idle")
    for r in rows:
        table.add_row(str(r["layer"]), r["shape"], str(r["cout"]), r["plan"], f"{r['cycles']:,}",
                      str(r["roofline_pct"]), str(r["tfu_pct"]), str(r["dma_pct"]), str(r["stalled_pct"]),
                      *(str(r[f"stalled_{c}_pct"]) for c in shown), str(r["idle_pct"]))
    console.print(table)
    console.print(f"wrote {out / 'diannao_conv_cycles.csv'}")


if __name__ == "__main__":
    typer.run(main)
