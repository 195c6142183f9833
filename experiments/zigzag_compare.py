"""Tandem and ZigZag side by side: the same VITA-like machine, ResNet-18's conv layers C2-C12, latency and
energy per layer.

ZigZag (KU Leuven, ``pip install zigzag-dse``) estimates a layer's latency and energy analytically: it
searches the loop orders and tilings of a described memory hierarchy (LOMA) and counts accesses per level.
Tandem compiles the layer to a real VITA program (the cost model's tiling, two virtual threads), simulates
it cycle by cycle (token queues, the shared DRAM port, the epilogue on the ALU) and prices the actions it
executed. Both price with the same table (sim/core/tables/horowitz-45nm.toml), so the gap is the model of
the machine, not the prices.

The ZigZag machine is written from the VITA spec and config (``vita_accelerator``): a BLOCK_OUT x BLOCK_IN
array of int8 MACs (K on D1, C on D2), the input buffer (one BATCH x BLOCK_IN vector a cycle), the weight
buffer (a BLOCK_OUT x BLOCK_IN tile a cycle), the accumulator buffer (a BATCH x BLOCK_OUT int32 vector in
and out a cycle) and DRAM (DRAM_BYTES_PER_CYCLE a cycle), each SRAM access priced at its capacity.

Writes ``<out>/zigzag_compare.csv`` (per layer: Tandem's and ZigZag's cycles and energy and their ratios),
``<out>/summary.json`` (geometric means, the layers furthest apart) and ``<out>/zigzag_compare.png``.

    python experiments/zigzag_compare.py [--quick] [--out DIR]

``--quick`` runs the three small stand-in layers. Needs ``pip install zigzag-dse`` (an experiment-only
dependency; the script says so when it is missing).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from compiler.ops.nn import ConvShape
from sim.core.energy import load_table
from tandem.flows.layer_tables import resnet18_layers
from tandem.flows.targets import load_target
from tandem.flows.vita import run_vita

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("layer", "H", "IC", "OC", "K", "S", "macs", "tandem_cycles", "zigzag_cycles", "cycles_ratio",
           "zigzag_ideal_cycles", "zigzag_load_cycles", "tandem_energy_uj", "zigzag_energy_uj",
           "energy_ratio",
           "tandem_wgt_uj", "zigzag_wgt_uj", "tandem_acc_uj", "zigzag_acc_uj", "tandem_dram_uj",
           "zigzag_dram_uj", "tandem_dram_bytes", "gemm_util")


def vita_accelerator(target: Any, table: Any) -> dict[str, Any]:
    """ZigZag's description of the VITA machine ``target`` (its spec's buffers and GEMM, its DRAM width),
    priced by ``table``."""
    p = target.spec.params
    dram_bits = 8 * p["DRAM_BYTES_PER_CYCLE"]
    mac = table.op("mul", "i8").pj + table.op("add", "i32").pj

    def port(name: str, kind: str, bits: int, allocation: list[str]) -> dict:
        return {"name": name, "type": kind, "bandwidth_min": bits, "bandwidth_max": bits,
                "allocation": allocation}

    def sram(capacity: int, operands: list[str], read_bits: int, write_bits: int) -> dict:
        out = ["O, th"] if "O" in operands else []   # the outputs also go up (to DRAM) and come from below
        ports = [port("r_port_1", "read", read_bits, [f"{o}, tl" for o in operands] + out),
                 port("w_port_1", "write", write_bits,
                      [f"{o}, fh" for o in operands] + (["O, fl"] if out else []))]
        return {"size": capacity * 8, "r_cost": table.sram_access_pj(capacity, read_bits // 8),
                "w_cost": table.sram_access_pj(capacity, write_bits // 8, write=True), "area": 0,
                "latency": 1, "auto_cost_extraction": False, "operands": operands, "ports": ports,
                "served_dimensions": ["D1", "D2"]}

    inp_vector, wgt_tile, acc_vector = (8 * p["BATCH"] * p["BLOCK_IN"], 8 * p["BLOCK_OUT"] * p["BLOCK_IN"],
                                        32 * p["BATCH"] * p["BLOCK_OUT"])
    return {
        "name": "vita_like",
        "memories": {
            "acc": sram(1 << p["LOG_ACC_BUFF_SIZE"], ["O"], acc_vector, acc_vector),
            "inp": sram(1 << p["LOG_INP_BUFF_SIZE"], ["I1"], inp_vector, dram_bits),
            "wgt": sram(1 << p["LOG_WGT_BUFF_SIZE"], ["I2"], wgt_tile, dram_bits),
            "dram": {"size": 1 << 40, "r_cost": table.dram_pj(dram_bits // 8),
                     "w_cost": table.dram_pj(dram_bits // 8), "area": 0, "latency": 1,
                     "auto_cost_extraction": False, "operands": ["I1", "I2", "O"],
                     "ports": [port("rw_port_1", "read_write", dram_bits,
                                    [f"{o}, {d}" for o in ("I1", "I2") for d in ("fh", "tl")]
                                    + [f"O, {d}" for d in ("fh", "tl", "fl", "th")])],
                     "served_dimensions": ["D1", "D2"]},
        },
        "operational_array": {"input_precision": [8, 8], "unit_energy": mac, "unit_area": 1,
                              "dimensions": ["D1", "D2"], "sizes": [p["BLOCK_OUT"], p["BLOCK_IN"]]},
    }


def zigzag_layer(name: str, layer: ConvShape, k: int) -> dict[str, Any]:
    """The square layer in ZigZag's workload form (batch 1, padded as ResNet-18 pads)."""
    out, pad = layer.oh, layer.p
    return {"id": k, "name": name, "operator_type": "Conv",
            "equation": "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]",
            "dimension_relations": [f"ix={layer.s}*ox+1*fx", f"iy={layer.s}*oy+1*fy"],
            "loop_dims": ["B", "K", "C", "OY", "OX", "FY", "FX"],
            "loop_sizes": [1, layer.oc, layer.ic, out, out, layer.k, layer.k],
            "operand_precision": {"W": 8, "I": 8, "O": 32, "O_final": 8},
            "operand_source": {"I": k}, "pr_loop_dims": ["IX", "IY"],
            "pr_loop_sizes": [layer.h + 2 * pad, layer.h + 2 * pad], "padding": [[pad, pad], [pad, pad]]}


def run_zigzag(name: str, layer: ConvShape, accelerator: dict, out: Path) -> dict[str, float]:
    """ZigZag's estimate of ``layer`` on ``accelerator`` (its latency-optimal mapping): cycles (and the
    ideal ones, without loading), energy in pJ, and the energy of the weight and accumulator buffers and of
    DRAM."""
    import yaml
    from zigzag.api import get_hardware_performance_zigzag

    folder = out / "zigzag" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "accelerator.yaml").write_text(yaml.safe_dump(accelerator, sort_keys=False))
    (folder / "workload.yaml").write_text(yaml.safe_dump([zigzag_layer(name, layer, 0)], sort_keys=False))
    p = accelerator["operational_array"]["sizes"]
    mapping = [{"name": "default", "spatial_mapping": {"D1": [f"K, {p[0]}"], "D2": [f"C, {p[1]}"]},
                "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}}]
    (folder / "mapping.yaml").write_text(yaml.safe_dump(mapping, sort_keys=False))
    energy, latency, cmes = get_hardware_performance_zigzag(
        str(folder / "workload.yaml"), str(folder / "accelerator.yaml"), str(folder / "mapping.yaml"),
        opt="latency", dump_folder=str(folder / "dump"), loma_show_progress_bar=False)
    cme = cmes[0][1][0][0]
    levels = {str(k): v for k, v in cme.mem_energy_breakdown.items()}   # operand -> [buffer, DRAM]
    return {"cycles": float(latency), "ideal": float(cme.ideal_cycle), "pj": float(energy),
            "wgt_pj": levels["W"][0], "acc_pj": levels["O"][0],
            "dram_pj": sum(v[-1] for v in levels.values())}


def main(
    quick: Annotated[bool, typer.Option("--quick", help="Three small stand-in layers.")] = False,
    config: Annotated[str, typer.Option(help="The VITA machine config.")] = "vta-default",
    out: Annotated[Path, typer.Option(help="Output folder.")] = ROOT / "experiments/out/zigzag_compare",
) -> None:
    console = Console(highlight=False)
    try:
        import zigzag  # noqa: F401
    except ImportError:
        console.print("error: this experiment needs ZigZag: pip install zigzag-dse")
        raise typer.Exit(2) from None
    logging.disable(logging.CRITICAL)   # ZigZag logs every mapping it tries
    out.mkdir(parents=True, exist_ok=True)
    target = load_target("vita", config)
    table = load_table(target.config.energy_table_path, target.config.technology_nm)
    accelerator = vita_accelerator(target, table)
    rows = []
    for name, layer in resnet18_layers(quick).items():
        report = run_vita(layer, 2, target)
        zz = run_zigzag(name, layer, accelerator, out)
        zz_cycles, zz_pj = zz["cycles"], zz["pj"]
        mine = report.costs.energy_pj
        rows.append({"layer": name, "H": layer.h, "IC": layer.ic, "OC": layer.oc, "K": layer.k,
                     "S": layer.s, "macs": layer.macs, "tandem_cycles": report.cycles,
                     "zigzag_cycles": round(zz_cycles), "cycles_ratio": round(report.cycles / zz_cycles, 3),
                     "zigzag_ideal_cycles": round(zz["ideal"]),
                     "zigzag_load_cycles": round(zz_cycles - zz["ideal"]),
                     "tandem_energy_uj": round(report.costs.energy_uj, 2),
                     "zigzag_energy_uj": round(zz_pj / 1e6, 2),
                     "energy_ratio": round(report.costs.energy_uj / (zz_pj / 1e6), 3),
                     "tandem_wgt_uj": round(mine["WGT"] / 1e6, 2),
                     "zigzag_wgt_uj": round(zz["wgt_pj"] / 1e6, 2),
                     "tandem_acc_uj": round(mine["ACC"] / 1e6, 2),
                     "zigzag_acc_uj": round(zz["acc_pj"] / 1e6, 2),
                     "tandem_dram_uj": round(mine["DRAM"] / 1e6, 2),
                     "zigzag_dram_uj": round(zz["dram_pj"] / 1e6, 2),
                     "tandem_dram_bytes": report.measured["dram_bytes"],
                     "gemm_util": report.utilization["gemm"]})
        r = rows[-1]
        console.print(f"  {name:4} Tandem {r['tandem_cycles']:>10,} cycles "
                      f"{r['tandem_energy_uj']:>9} uJ | ZigZag {r['zigzag_cycles']:>10,} cycles "
                      f"{r['zigzag_energy_uj']:>9} uJ | x{r['cycles_ratio']} cycles, "
                      f"x{r['energy_ratio']} energy")
        if not report.validated:
            raise typer.Exit(f"{name}: Tandem's output differs from numpy ({report.detail})")
    with open(out / "zigzag_compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)

    def geomean(key: str) -> float:
        return round(math.exp(sum(math.log(r[key]) for r in rows) / len(rows)), 3)

    summary = {"config": config, "layers": len(rows), "geomean_cycles_ratio": geomean("cycles_ratio"),
               "geomean_energy_ratio": geomean("energy_ratio"),
               "furthest_cycles": max(rows, key=lambda r: abs(math.log(r["cycles_ratio"])))["layer"],
               "furthest_energy": max(rows, key=lambda r: abs(math.log(r["energy_ratio"])))["layer"]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(rows, out / "zigzag_compare.png")
    console.print(f"Tandem / ZigZag, geometric mean over {len(rows)} layers: cycles x"
                  f"{summary['geomean_cycles_ratio']}, energy x{summary['geomean_energy_ratio']}")
    console.print(f"wrote {out / 'zigzag_compare.csv'}, {out / 'summary.json'}, {out / 'zigzag_compare.png'}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    x = range(len(rows))
    for ax, key, unit in ((axes[0], "cycles", "cycles"), (axes[1], "energy_uj", "energy (µJ)")):
        tandem = [r[f"tandem_{key}"] for r in rows]
        zz = [r[f"zigzag_{key}"] for r in rows]
        ax.bar([i - 0.2 for i in x], tandem, 0.4, label="Tandem (compiled + simulated)")
        ax.bar([i + 0.2 for i in x], zz, 0.4, label="ZigZag (analytical)")
        ax.set_xticks(list(x), [r["layer"] for r in rows])
        ax.set(ylabel=unit, title=f"ResNet-18 layers on a VITA-like machine: {unit}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    typer.run(main)
