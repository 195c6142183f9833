"""VTA++ on VITA: ResNet-18's C2-C12 on the tvm-paper machine, extended step by step from spec files alone.

VTA++ (Intel Labs, TVMCon 2021) extended VTA with fully pipelined ALU and GEMM units, a clip opcode for the
shift-clip epilogue, wider memory and a relaxed encoding for larger scratchpads, and reports about 4.9x fewer
cycles on ResNet-18 from the pipelined ALU/GEMM alone. This experiment applies the same changes to VITA,
cumulatively, each as a spec file or a parameter (no Python change between steps):

1. ``baseline``: tvm-paper with the built-in spec (isa/specs/vita.toml);
2. ``+pipelined``: tests/extensions/vita_pipelined.toml (ALU at one micro-op per cycle, one-cycle issue);
3. ``+clip``: tests/extensions/vita_alu_clip.toml on top (the epilogue's max and min in one ALU_CLIP);
   ``+fused ends``: instead, the pipelined machine with tests/extensions/vita_gemm_first.toml and
   vita_gemm_last_shrclip.toml (a GEMM that overwrites its accumulators for a reduction's first step, one
   that also shifts and clips for its last: no reset, and no ALU work per output vector;
   compiler/passes/fuse_reduction_ends.py);
4. ``+dram16``, ``+dram32``, ``+dram64``: DRAM_BYTES_PER_CYCLE = 16, 32, 64 (8 on tvm-paper);
5. ``+2x buffers``: experiments/specs/vita_relaxed_encoding.toml on top (256-bit instructions) with every
   buffer twice tvm-paper's (input and weights 64 KiB, accumulators 256 KiB, micro-ops 64 KiB).

Each step's spec is written to ``<out>/specs/<step>.toml`` (an ``extends`` list of the files above) so that
it can be rerun with ``tandem run --spec``. Every layer is compiled with ``--vthreads`` virtual threads (2)
and the best of ``--tune`` tilings (2), simulated, and compared with numpy bit for bit. Recorded per layer and
step: cycles, GEMM utilization, and the three bounds of the simulated machine: the GEMM core's peak, the
compulsory DRAM traffic at the DRAM bandwidth, and the compute unit's own work (GEMM micro-ops, plus per
output vector the accumulator reset and the epilogue's ALU micro-ops at their spec timing: GEMM and ALU share
VITA's compute unit, as in VTA);
``limit`` names the largest, ``limit_pct`` is that bound over the cycles.

Writes ``<out>/vta_plus.csv`` (one row per step and layer), ``<out>/summary.json`` (per step: total cycles,
speedup over the baseline and the previous step; the comparison with VTA++) and ``<out>/vta_plus.png``.

    python experiments/vta_plus.py [--quick] [--vthreads 2] [--tune 2] [--out experiments/out/vta_plus]

``--quick`` runs three small stand-in layers (not ResNet's) on the first three steps; the tests run it.
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

import isa
from compiler.ops import vita
from compiler.ops.nn import ConvShape
from compiler.passes.fuse_reduction_ends import fusable_ends
from compiler.target import Target
from sim.vita.config import peak_macs_per_cycle
from tandem.flows import vita_layers
from tandem.flows.layer_tables import resnet18_layers
from tandem.flows.targets import load_target
from tandem.flows.vita import dram_bytes_per_cycle, one_uop_timing, run_vita

ROOT = Path(__file__).resolve().parent.parent
PIPELINED = ROOT / "tests/extensions/vita_pipelined.toml"
CLIP = ROOT / "tests/extensions/vita_alu_clip.toml"
FIRST = ROOT / "tests/extensions/vita_gemm_first.toml"
LAST = ROOT / "tests/extensions/vita_gemm_last_shrclip.toml"
RELAXED = ROOT / "experiments/specs/vita_relaxed_encoding.toml"
BUFFERS = ("LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE", "LOG_ACC_BUFF_SIZE", "LOG_UOP_BUFF_SIZE")
VTA_PLUS = 4.9   # VTA++: ResNet-18 cycles, baseline over pipelined ALU/GEMM
SEED = 0
COLUMNS = ("step", "layer", "H", "IC", "OC", "K", "S", "cycles", "gemm_util", "gemm_bound", "dram_bound",
           "compute_unit_bound", "limit", "limit_pct", "tiling", "validated")




def layers(quick: bool = False) -> dict[str, ConvShape]:
    """ResNet-18's C2-C12, or the ``--quick`` stand-ins (tandem/flows/layer_tables.py), by name."""
    return resnet18_layers(quick)


@dataclass(frozen=True)
class Step:
    """One machine of the study: spec files laid over the built-in spec, and ISA parameters to set."""

    name: str
    specs: tuple[Path, ...] = ()
    params: dict[str, int] = field(default_factory=dict)
    doubled_buffers: bool = False


STEPS = (
    Step("baseline"),
    Step("+pipelined", (PIPELINED,)),
    Step("+clip", (PIPELINED, CLIP)),
    Step("+fused ends", (PIPELINED, FIRST, LAST)),
    Step("+dram16", (PIPELINED, CLIP), {"DRAM_BYTES_PER_CYCLE": 16}),
    Step("+dram32", (PIPELINED, CLIP), {"DRAM_BYTES_PER_CYCLE": 32}),
    Step("+dram64", (PIPELINED, CLIP), {"DRAM_BYTES_PER_CYCLE": 64}),
    Step("+2x buffers", (PIPELINED, CLIP, RELAXED), {"DRAM_BYTES_PER_CYCLE": 64}, doubled_buffers=True),
)


def step_target(step: Step, config: str, spec_dir: Path) -> Target:
    """The step's target: its spec file (written to ``spec_dir``) on ``config``, with its parameters set in
    the machine config's isa_params, which the spec and the simulator then share."""
    base = load_target("vita", config)
    params = dict(base.config.isa_params)
    if step.doubled_buffers:
        params.update({k: base.spec.params[k] + 1 for k in BUFFERS})
    params.update(step.params)
    spec_dir.mkdir(parents=True, exist_ok=True)
    path = spec_dir / f"{step.name.lstrip('+').replace(' ', '_')}.toml"
    bases = ", ".join(f'"{p}"' for p in step.specs) or '"vita"'
    path.write_text(f'[isa]\nname = "vita"\nsummary = "VTA++ study step {step.name}"\nextends = [{bases}]\n')
    spec = isa.load_spec_file(path)
    cfg = replace(base.config, isa_params=params)
    return Target("vita", spec.with_params(params), cfg)


def bounds(layer: ConvShape, target: Target) -> dict[str, int]:
    """The simulated machine's three lower bounds on the layer's cycles."""
    c = layer
    vectors = c.oh * c.ow * c.oc // target.spec.params["BLOCK_OUT"]
    gemm = math.ceil(c.macs / peak_macs_per_cycle(target.spec))
    first, last = fusable_ends(target.spec)   # the reset and the epilogue ride on the first and last GEMMs
    per_vector_work = (*(() if first else ("GEMM_RESET",)), *(() if last else _epilogue(target.spec)))
    per_vector = sum(one_uop_timing(target.spec, name)[1] for name in per_vector_work)
    dram = math.ceil(vita_layers.dram_bytes(layer) / dram_bytes_per_cycle(target))
    return {"gemm_bound": gemm, "dram_bound": dram, "compute_unit_bound": gemm + per_vector * vectors}


def _epilogue(spec: isa.ISA) -> tuple[str, ...]:
    """The ALU instructions of the epilogue's cover on ``spec`` (the compiler's own choice)."""
    return vita.epilogue_cover(spec).instructions


def run_step(step: Step, chosen: dict[str, ConvShape], vthreads: int, tune: int, config: str, spec_dir: Path,
             console: Console) -> list[dict]:
    target = step_target(step, config, spec_dir)
    rows = []
    for name, layer in chosen.items():
        start = time.perf_counter()
        r = run_vita(layer, vthreads, target, tune=tune, seed=SEED)
        b = bounds(layer, target)
        limit = max(b, key=b.get)
        rows.append({"step": step.name, "layer": name, "H": layer.h, "IC": layer.ic, "OC": layer.oc,
                     "K": layer.k, "S": layer.s, "cycles": r.cycles, "gemm_util": r.utilization["gemm"], **b,
                     "limit": limit.removesuffix("_bound"), "limit_pct": round(100 * b[limit] / r.cycles, 1),
                     "tiling": "{rows}r x {oc_block}oc x {ic_block}ic".format(**r.params["tiling"]),
                     "validated": r.validated})
        row = rows[-1]
        console.print(f"  {step.name:12} {name:4} {r.cycles:>9,} cycles, GEMM {row['gemm_util']:.0%}, "
                      f"{row['limit_pct']:.0f}% of the {row['limit']} bound "
                      f"({time.perf_counter() - start:.1f} s)", markup=False)
    return rows


def summarize(rows: list[dict], steps: list[Step]) -> dict:
    totals = {s.name: sum(r["cycles"] for r in rows if r["step"] == s.name) for s in steps}
    names = [s.name for s in steps]
    base = totals[names[0]]
    out = {
        "steps": [{"step": n, "total_cycles": totals[n], "speedup_vs_baseline": round(base / totals[n], 3),
                   "speedup_vs_previous": round(totals[names[max(k - 1, 0)]] / totals[n], 3),
                   "validated": all(r["validated"] for r in rows if r["step"] == n)}
                  for k, n in enumerate(names)],
        "validated": all(r["validated"] for r in rows),
        "vta_plus_pipelined_speedup": VTA_PLUS,
    }
    if "+pipelined" in totals:
        out["pipelined_speedup"] = round(base / totals["+pipelined"], 3)
        baseline = [r for r in rows if r["step"] == names[0]]
        alu = sum(r["compute_unit_bound"] - r["gemm_bound"] for r in baseline)
        out["baseline_alu_share_pct"] = round(100 * alu / base, 1)
    if "+clip" in totals:
        clipped = [r for r in rows if r["step"] == "+clip"]
        out["clip_machine"] = {
            "compute_bound_min_gemm_util": min((r["gemm_util"] for r in clipped if r["limit"] != "dram"),
                                               default=None),
            "layers": {r["layer"]: {"gemm_util": r["gemm_util"], "limit": r["limit"],
                                    "limit_pct": r["limit_pct"],
                                    "dram_bound_pct": round(100 * r["dram_bound"] / r["cycles"], 1),
                                    "gemm_util_ceiling": round(r["gemm_bound"] / r["compute_unit_bound"], 3)}
                       for r in clipped},
        }
    return out


def write_outputs(rows: list[dict], summary: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "vta_plus.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot(rows, summary, out / "vta_plus.png")


def _plot(rows: list[dict], summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s["step"] for s in summary["steps"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax1.bar(steps, [s["total_cycles"] / 1e6 for s in summary["steps"]], color="tab:blue")
    for k, s in enumerate(summary["steps"]):
        ax1.text(k, s["total_cycles"] / 1e6, f"{s['speedup_vs_baseline']:.2f}x", ha="center", va="bottom")
    ax1.set_ylabel("total cycles (millions)")
    ax1.set_title("ResNet-18 C2-C12 on VITA, cumulative changes")
    ax1.tick_params(axis="x", rotation=30)
    for name in steps:
        mine = [r for r in rows if r["step"] == name]
        ax2.plot([r["layer"] for r in mine], [r["gemm_util"] for r in mine], marker="o", label=name)
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("GEMM utilization")
    ax2.set_title("per layer")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_summary(rows: list[dict], summary: dict, console: Console) -> None:
    table = Table(title="VTA++ on VITA: ResNet-18 C2-C12, cumulative")
    for col in ("step", "total cycles", "vs baseline", "vs previous", "validated"):
        table.add_column(col, justify="left" if col == "step" else "right")
    for s in summary["steps"]:
        table.add_row(s["step"], f"{s['total_cycles']:,}", f"{s['speedup_vs_baseline']:.2f}x",
                      f"{s['speedup_vs_previous']:.2f}x", "yes" if s["validated"] else "NO")
    console.print(table)
    if "pipelined_speedup" in summary:
        console.print(f"pipelined ALU/GEMM: {summary['pipelined_speedup']:.2f}x (VTA++: ~{VTA_PLUS}x); the "
                      f"baseline spends {summary['baseline_alu_share_pct']:.0f}% of its cycles' worth in ALU "
                      f"micro-ops, and its GEMM already issues one micro-op per cycle", markup=False)


DEFAULT_OUT = Path("experiments/out/vta_plus")


def main(out: Annotated[Path, typer.Option(help="Output folder.")] = DEFAULT_OUT,
         quick: Annotated[bool, typer.Option("--quick", help="Three small layers, three steps.")] = False,
         vthreads: Annotated[int, typer.Option(min=0, help="Virtual threads.")] = 2,
         tune: Annotated[int, typer.Option(min=0, help="Tilings simulated per layer (0: the model's).")] = 2,
         config: Annotated[str, typer.Option(help="VITA config: built-in name or TOML file.")] = "tvm-paper",
         ) -> None:
    """Run the VTA++ study on the simulated VITA; write CSV, JSON and a PNG."""
    console = Console(highlight=False, soft_wrap=True)
    start = time.perf_counter()
    steps = list(STEPS[:3] if quick else STEPS)
    chosen = layers(quick)
    rows = []
    for step in steps:
        rows += run_step(step, chosen, vthreads, 0 if quick else tune, config, out / "specs", console)
    summary = summarize(rows, steps)
    write_outputs(rows, summary, out)
    print_summary(rows, summary, console)
    console.print(f"{len(rows)} runs in {time.perf_counter() - start:.1f} s; wrote {out}", markup=False)
    if not summary["validated"]:
        raise typer.Exit(code=1)


if __name__ == "__main__":
    typer.run(main)
