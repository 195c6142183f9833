"""Tandem against SCALE-Sim 3.0 on ResNet-18's C2-C12, side by side, in one run (issue 49).

SCALE-Sim simulates the layers on a 16x16 weight-stationary systolic array (cycles only: no traces written)
with the SRAMs of VITA's tvm-paper config (ifmap = the INP buffer, filter = WGT, ofmap = ACC); Tandem compiles
each layer for VITA (tvm-paper, two virtual threads: a 1x16x16 GEMM core), runs it in the functional
simulator, checks it bit for bit against numpy and simulates its timing. Measured, each as a user runs it:

- SCALE-Sim: one process over the 11-layer topology (its ``scalesim`` API, as ``scale.py`` does);
- Tandem, a process per layer: ``tandem run conv2d --target vita --config tvm-paper ...`` 11 times;
- Tandem, one process: the 11 layers through ``tandem.flows.run.run``, imports included;

each of Tandem's twice, with its kernel cache (tandem/flows/kernel_cache.py) in a new folder: "cold" (every
kernel compiled, the folder empty) and "warm" (the kernels the cold runs compiled, as a run repeated finds
them).

Each line gives the wall time and the peak memory of the process (the largest one for the 11 processes),
and the ratios. SCALE-Sim comes from the optional extra, ``pip install -e ".[scalesim]"`` (SCALE-Sim 3.0.0
fails under numpy 2.4, which made converting a one-element array to an int an error, so the extra holds
numpy below 2.4), or from another environment: ``--scalesim-python PATH`` runs it with that interpreter.

    python benchmarks/scalesim_side_by_side.py              # C2-C12, SCALE-Sim takes minutes
    python benchmarks/scalesim_side_by_side.py --layers C2,C11 --json out.json
    python benchmarks/scalesim_side_by_side.py --scalesim-python ../scalesim-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tandem.flows.layer_tables import RESNET18, padding
from tandem.flows.targets import load_target

CONFIG = "tvm-paper"   # VITA's config, whose buffer sizes SCALE-Sim's SRAMs take
VTHREADS = 2

SCALESIM_RUN = """
import sys
from scalesim.scale_sim import scalesim
sim = scalesim(save_disk_space=True, verbose=False, config=sys.argv[1], topology=sys.argv[2],
               layout=sys.argv[3])
sim.run_scale(top_path=sys.argv[4])
"""

TANDEM_ONE_PROCESS = """
import json, sys
from tandem.flows.kernel_cache import KernelCache
from tandem.flows.run import run
from tandem.flows.targets import load_target
target = load_target("vita", sys.argv[1])
cache = KernelCache.default()
cycles = {}
for layer in json.loads(sys.argv[2]):
    report = run("conv2d", target, layer["params"], cache=cache)
    assert report.validated, layer["name"]
    cycles[layer["name"]] = report.cycles
print(json.dumps(cycles))
"""


def layer_params(name: str) -> dict[str, int]:
    """``run``'s parameters of ResNet-18's layer ``name`` on VITA with the virtual threads above."""
    hw, ic, oc, k, s = RESNET18[name]
    return {"H": hw, "W": hw, "IC": ic, "OC": oc, "K": k, "S": s, "P": padding(k), "vthreads": VTHREADS}


def timed(argv: list[str], cwd: str | None = None) -> tuple[float, float, str]:
    """Run ``argv``; (wall seconds, peak resident MB of that process, its stdout). A failure raises with its
    stderr's tail."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)   # this child's own peak, not the largest child's so far
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:4])} ... failed (exit {child.returncode}):\n"
                             f"{err.read()[-3000:]}")
        return seconds, usage.ru_maxrss / 1024, out.read()   # ru_maxrss: KB on Linux


def scalesim_inputs(names: list[str], where: Path) -> tuple[Path, Path, Path]:
    """SCALE-Sim's config, topology and layout files for ``names`` in ``where``."""
    spaces = load_target("vita", CONFIG).spec.spaces
    config = where / "scale.cfg"
    config.write_text(f"""[general]
run_name = tandem_side_by_side

[architecture_presets]
ArrayHeight = 16
ArrayWidth = 16
IfmapSramSzkB = {spaces["INP"].bytes // 1024}
FilterSramSzkB = {spaces["WGT"].bytes // 1024}
OfmapSramSzkB = {spaces["ACC"].bytes // 1024}
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Dataflow = ws
Bandwidth = 10
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40

[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False
""")
    topology = where / "resnet18.csv"
    rows = ["Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
            "Strides,"]
    for name in names:
        hw, ic, oc, k, s = RESNET18[name]
        size = hw + 2 * padding(k)   # SCALE-Sim takes the padded input
        rows.append(f"{name}, {size}, {size}, {k}, {k}, {ic}, {oc}, {s},")
    topology.write_text("\n".join(rows) + "\n")
    layout = where / "layout.csv"
    layout.write_text("Layer name," + ",".join(f"f{i}" for i in range(20)) + ",\n" +
                      "".join(f"{name}," + ",".join(["1"] * 20) + ",\n" for name in names))
    return config, topology, layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default=",".join(RESNET18), help="ResNet-18 layers (default C2-C12)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--scalesim-python", default=sys.executable,
                        help="the Python interpreter that has SCALE-Sim (default: this one)")
    args = parser.parse_args()
    names = [n.strip() for n in args.layers.split(",") if n.strip()]
    unknown = [n for n in names if n not in RESNET18]
    if unknown:
        parser.error(f"--layers: unknown layer(s) {', '.join(unknown)}; known: {', '.join(RESNET18)}")
    found = subprocess.run([args.scalesim_python, "-c", "import scalesim"], capture_output=True)
    if found.returncode != 0:
        parser.error(f'{args.scalesim_python} has no SCALE-Sim: pip install -e ".[scalesim]", or give '
                     f'--scalesim-python the interpreter of an environment that has it')

    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        config, topology, layout = scalesim_inputs(names, Path(tmp))
        out = Path(tmp) / "results"
        out.mkdir()
        print(f"SCALE-Sim 3.0, {len(names)} layers, 16x16 ws ...", flush=True)
        seconds, mb, _ = timed([args.scalesim_python, "-c", SCALESIM_RUN, str(config), str(topology),
                                str(layout), str(out) + "/"], cwd=tmp)
        figures["scalesim"] = {"seconds": seconds, "peak_mb": mb}

    with tempfile.TemporaryDirectory() as cache:
        os.environ["TANDEM_CACHE_DIR"] = cache   # a new folder: the cold runs fill it, the warm ones read it
        for state in ("cold", "warm"):
            figures[f"tandem_processes_{state}"] = _processes(names, state)
        layers = json.dumps([{"name": n, "params": layer_params(n)} for n in names])
        for state in ("cold", "warm"):
            if state == "cold":
                for path in Path(cache).rglob("*.pkl"):
                    path.unlink()
            print(f"Tandem, one process ({state}) ...", flush=True)
            seconds, mb, stdout = timed([sys.executable, "-c", TANDEM_ONE_PROCESS, CONFIG, layers])
            figures[f"tandem_one_process_{state}"] = {"seconds": seconds, "peak_mb": mb,
                                                      "cycles": json.loads(stdout.strip().splitlines()[-1])}

    base = figures["scalesim"]["seconds"]
    print(f"\n{'':34s} {'seconds':>9s} {'peak MB':>9s} {'SCALE-Sim / this':>17s}")
    rows = [("scalesim", "SCALE-Sim 3.0")]
    for state in ("cold", "warm"):
        rows += [(f"tandem_processes_{state}", f"Tandem, {len(names)} processes, {state}"),
                 (f"tandem_one_process_{state}", f"Tandem, one process, {state}")]
    for key, label in rows:
        f = figures[key]
        f["speedup"] = base / f["seconds"]
        print(f"{label:34s} {f['seconds']:9.2f} {f['peak_mb']:9.0f} {f['speedup']:16.1f}x")
    figures["layers"] = names
    figures["cpu"] = _cpu()
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


def _processes(names: list[str], state: str) -> dict[str, float]:
    """A ``tandem run`` process per layer, one after another: their total wall time and largest peak."""
    print(f"Tandem, a process per layer ({len(names)}, {state}) ...", flush=True)
    total, peak = 0.0, 0.0
    for name in names:
        argv = [sys.executable, "-m", "tandem", "run", "conv2d", "--target", "vita", "--config", CONFIG]
        for key, value in layer_params(name).items():
            argv += ["-p", f"{key}={value}"]
        seconds, mb, _ = timed(argv)
        total, peak = total + seconds, max(peak, mb)
    return {"seconds": total, "peak_mb": peak}


def _cpu() -> str:
    """This CPU's model name (Linux), for the record."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return f"unknown ({os.cpu_count()} CPUs)"


if __name__ == "__main__":
    main()
