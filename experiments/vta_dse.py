"""VTA++'s design-space study as a Tandem sweep: VITA configurations on ResNet-18 and MobileNet V2 end to end,
and the Pareto front of cycles vs area.

VTA++ (Intel Labs, TVMCon 2021) explored tens of VTA configurations on an area-performance curve: the GEMM
shape, the scratchpads, the DRAM width, a fully pipelined ALU and a clip opcode. Here the same knobs are
one sweep file (``<out>/vta_dse.toml``, run by ``tandem.sweep.run.sweep`` into ``<out>/vta_dse.sqlite``):

- ``LOG_BLOCK`` 4 or 5: a 16x16 or 32x32 GEMM core (BATCH 1: the networks run one image);
- ``LOG_WGT_BUFF_SIZE`` 17 or 18: 128 or 256 KiB of weights (inputs 32 KiB, accumulators 128 KiB);
- ``DRAM_BYTES_PER_CYCLE`` 8 or 32;
- the spec: the built-in one, + the pipelined ALU/GEMM (tests/extensions/vita_pipelined.toml), + that and
  the ALU_CLIP opcode (tests/extensions/vita_alu_clip.toml). Every spec sits on VTA++'s relaxed 256-bit
  encoding (experiments/specs/vita_relaxed_encoding.toml), so that a 32x32 core's deeper fields fit; the
  spec files composed are written to ``<out>/specs``.

Both networks run in int8 (VTA's quantization rule), every step checked bit for bit against the integer
graph; cycles and energy are summed over the steps VITA runs, area is the machine's (sim/vita/energy.py,
sim/core/tables/horowitz-45nm.toml). A design point is one machine; its cost on the two networks is
reported per network and summed. Writes ``<out>/vta_dse.csv`` (per machine and network: cycles, energy,
area, validated), ``<out>/summary.json`` (each network's Pareto front of cycles vs area and its two ends),
``<out>/vta_dse.png`` (both fronts) and ``<out>/report/`` (``tandem report``'s page of the sweep).

    python experiments/vta_dse.py [--quick] [--input 224] [--jobs 2] [--engine local|ray] [--out DIR]

``--quick`` runs 2 machines (16x16 and 32x32, pipelined + clip) on 32x32 inputs (seconds; the tests run
it). The store is resumable: run it
again after an interruption and only the missing points run (``--fresh`` to start over).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tandem.cli.console import tandem_version
from tandem.sweep.file import read_sweep
from tandem.sweep.report import pareto, write_report
from tandem.sweep.results import ResultStore
from tandem.sweep.run import sweep

ROOT = Path(__file__).resolve().parent.parent
RELAXED = ROOT / "experiments/specs/vita_relaxed_encoding.toml"
PIPELINED = ROOT / "tests/extensions/vita_pipelined.toml"
CLIP = ROOT / "tests/extensions/vita_alu_clip.toml"
SPECS = {"base": (RELAXED,), "pipelined": (RELAXED, PIPELINED), "pipelined_clip": (RELAXED, PIPELINED, CLIP)}
NETWORKS = ("resnet18", "mobilenet_v2")
COLUMNS = ("network", "spec", "LOG_BLOCK", "LOG_WGT_BUFF_SIZE", "DRAM_BYTES_PER_CYCLE", "cycles", "energy_uj",
           "area_mm2", "validated", "status")


def write_specs(out: Path) -> dict[str, Path]:
    """The composed spec files, one per variant (an ``extends`` list over the files above)."""
    folder = out / "specs"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, bases in SPECS.items():
        path = folder / f"{name}.toml"
        listed = ", ".join(f'"{b}"' for b in bases)
        path.write_text(f'[isa]\nname = "vita"\nsummary = "VTA++ DSE: {name}"\nextends = [{listed}]\n')
        paths[name] = path
    return paths


def sweep_file(out: Path, quick: bool, size: int) -> Path:
    specs = write_specs(out)
    chosen = [specs["pipelined_clip"]] if quick else list(specs.values())
    blocks, weights, dram = ([4, 5], [18], [8]) if quick else ([4, 5], [17, 18], [8, 32])
    shape = f"{{ input = [1, 3, {size}, {size}] }}"
    workloads = "".join(f'\n[[workloads]]\nmodel = "{n}"\ninput_shape = {shape}\n' for n in NETWORKS)
    text = f"""# VTA++'s design-space study (experiments/vta_dse.py writes this file)
[sweep]
name = "vta_dse"
target = "vita"
config = "vta-default"

[parameters]
spec = [{", ".join(f'"{p.name}"' for p in chosen)}]
"isa_params.LOG_BLOCK" = {blocks}
"isa_params.LOG_WGT_BUFF_SIZE" = {weights}
"isa_params.DRAM_BYTES_PER_CYCLE" = {dram}
{workloads}"""
    path = specs["base"].parent / "vta_dse.toml"
    path.write_text(text)
    return path


def table(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        s = r["setting"]
        out.append({"network": r["workload"], "spec": Path(s["spec"]).stem,
                    **{k: s[f"isa_params.{k}"] for k in COLUMNS[2:5]},
                    "cycles": r["cycles"], "energy_uj": r["energy_uj"] and round(r["energy_uj"], 1),
                    "area_mm2": r["area_mm2"] and round(r["area_mm2"], 3), "validated": r["validated"],
                    "status": r["status"] if r["status"] == "ok" else f"{r['status']}: {r['error']}"})
    return out


def fronts(rows: list[dict]) -> dict[str, dict]:
    """Per network: its Pareto front of cycles vs area, the smallest and the fastest machine on it."""
    out = {}
    for network in NETWORKS:
        points = [r for r in rows if r["network"] == network and r["status"] == "ok" and r["validated"]]
        front = pareto(points, "area_mm2", "cycles")
        out[network] = {"machines": len(points), "front": front,
                        "smallest": front[0] if front else None, "fastest": front[-1] if front else None,
                        "speedup_fastest_over_smallest": round(front[0]["cycles"] / front[-1]["cycles"], 2)
                        if front else None,
                        "area_ratio": round(front[-1]["area_mm2"] / front[0]["area_mm2"], 2)
                        if front else None}
    return out


def plot(rows: list[dict], summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(NETWORKS), figsize=(12, 4.6))
    for ax, network in zip(axes, NETWORKS, strict=True):
        ok = [r for r in rows if r["network"] == network and r["status"] == "ok"]
        for spec, marker in zip(SPECS, "os^", strict=True):
            mine = [r for r in ok if r["spec"] == spec]
            ax.scatter([r["area_mm2"] for r in mine], [r["cycles"] for r in mine], marker=marker, s=22,
                       label=spec, alpha=0.7)
        front = summary[network]["front"]
        ax.plot([r["area_mm2"] for r in front], [r["cycles"] for r in front], "-", color="#c0392b",
                label="Pareto front")
        for r in front:
            ax.annotate(f"B{1 << r['LOG_BLOCK']} W{1 << (r['LOG_WGT_BUFF_SIZE'] - 10)}K "
                        f"D{r['DRAM_BYTES_PER_CYCLE']}", (r["area_mm2"], r["cycles"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
        ax.set(title=f"{network}: cycles vs area", xlabel="area (mm², 45 nm)", ylabel="cycles")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(
    quick: Annotated[bool, typer.Option("--quick", help="2 machines on 32x32 inputs (seconds).")] = False,
    size: Annotated[int | None, typer.Option("--input", help="Input height and width (default 224; "
                                                               "--quick: 32).")] = None,
    jobs: Annotated[int | None, typer.Option(help="Workers (default: every core).")] = None,
    engine: Annotated[str, typer.Option(help="local or ray.")] = "local",
    fresh: Annotated[bool, typer.Option("--fresh", help="Start the results store over.")] = False,
    out: Annotated[Path, typer.Option(help="Output folder.")] = ROOT / "experiments/out/vta_dse",
) -> None:
    console = Console(highlight=False)
    out.mkdir(parents=True, exist_ok=True)
    size = size or (32 if quick else 224)
    definition = read_sweep(sweep_file(out, quick, size))
    version = tandem_version()
    with ResultStore(out / "vta_dse.sqlite", version, fresh=fresh) as store:
        summary_run = sweep(definition, store, version, engine, jobs,
                            on_row=lambda row, done, total: console.print(
                                f"  {done:>3}/{total} {row['workload']:13} {row['config']}: "
                                f"{row.get('cycles') or row['status']:>12,}" if row["status"] == "ok" else
                                f"  {done:>3}/{total} {row['workload']} {row['config']}: {row['error']}"))
        rows = store.rows(definition.name)
    results = table(rows)
    with open(out / "vta_dse.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(results)
    summary = fronts(results)
    plot(results, summary, out / "vta_dse.png")
    (out / "report").mkdir(exist_ok=True)
    write_report(rows, out / "report", title="vta_dse")
    (out / "summary.json").write_text(json.dumps({
        "input": size, "machines": len({json.dumps(r["setting"], sort_keys=True) for r in rows}),
        "points": len(rows), "failed": sum(r["status"] != "ok" for r in rows),
        "sweep": summary_run.to_json(), "networks": summary}, indent=1))
    for network, s in summary.items():
        if s["front"]:
            small, fast = s["smallest"], s["fastest"]
            console.print(f"{network}: {len(s['front'])} machines on the front of {s['machines']}; smallest "
                          f"{small['area_mm2']} mm2 at {small['cycles']:,} cycles ({small['spec']}, B"
                          f"{1 << small['LOG_BLOCK']}), fastest {fast['area_mm2']} mm2 at {fast['cycles']:,} "
                          f"({fast['spec']}, B{1 << fast['LOG_BLOCK']}, DRAM {fast['DRAM_BYTES_PER_CYCLE']} "
                          f"B/cycle): {s['speedup_fastest_over_smallest']}x faster for {s['area_ratio']}x "
                          f"the area")
    console.print(f"wrote {out / 'vta_dse.csv'}, {out / 'summary.json'}, {out / 'vta_dse.png'}, "
                  f"{out / 'report' / 'index.html'}")


if __name__ == "__main__":
    typer.run(main)
