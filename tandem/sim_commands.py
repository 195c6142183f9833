"""``tandem sim``: run a saved or hand-written program on a simulator and report what it measured.

    tandem sim vita PROGRAM [--dram IMAGE] [--config NAME|FILE] [--trace out.json] [--json] [--dram-out FILE]

PROGRAM is assembly text (``isa.assemble``) or a program file (``isa.encode_program``, starting with b"TNDM").
IMAGE is the raw DRAM contents; without it DRAM starts as ``--dram-size`` zero bytes.
Exit status: 0 on success, 1 when the simulation fails (deadlock, out-of-bounds access, no FINISH), 2 on bad
arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

import isa
from sim.core.errors import SimError
from sim.vita.config import load_config
from sim.vita.machine import simulate
from sim.vita.trace import write_trace
from tandem.console import fail

sim_app = typer.Typer(help="Run programs on the simulators.", no_args_is_help=True)


def read_program(path: Path, spec: isa.ISA) -> isa.Program:
    """The program in ``path``: a binary program file or assembly text, for ISA ``spec``."""
    data = path.read_bytes()
    if data.startswith(isa.binary.MAGIC):
        return isa.decode_program(data, spec=spec)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise isa.AsmError("neither a program file (b'TNDM...') nor UTF-8 assembly text", source=str(path)) \
            from None
    return isa.assemble(text, isa=spec, source=str(path))


@sim_app.command()
def vita(
    program: Annotated[Path, typer.Argument(help="Assembly text or a program file.")],
    dram: Annotated[Path | None, typer.Option(help="Raw DRAM image (bytes).")] = None,
    dram_size: Annotated[int, typer.Option(help="DRAM bytes when no image is given.")] = 1 << 20,
    config: Annotated[str, typer.Option(help="vta-default, tvm-paper, or a config file.")] = "vta-default",
    trace: Annotated[Path | None, typer.Option(help="Write a Chrome/Perfetto trace here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    dram_out: Annotated[Path | None, typer.Option(help="Write the final DRAM image here.")] = None,
) -> None:
    """Simulate a VITA program: cycles, per-unit busy and stall cycles, GEMM utilization, bytes, counters."""
    try:
        cfg = load_config(config)
        spec = cfg.spec()
        prog = read_program(program, spec)
        image = np.fromfile(dram, dtype=np.uint8) if dram is not None else np.zeros(dram_size, np.uint8)
    except (OSError, SimError, isa.ISAError) as e:
        raise fail(str(e), 2) from None
    try:
        result = simulate(prog, image, cfg)
    except (SimError, isa.ISAError) as e:
        raise fail(str(e), 1) from None
    if trace is not None:
        write_trace(result, cfg.clock_mhz, trace)
    if dram_out is not None:
        result.dram.tofile(dram_out)
    summary = {
        "config": cfg.name, "instructions": len(prog), "cycles": result.cycles,
        "microseconds": result.cycles / cfg.clock_mhz, "gemm_utilization": result.gemm_utilization,
        "units": {u: vars(s) for u, s in result.units.items()}, "bytes_moved": result.bytes_moved,
        "counters": result.counters,
    }
    out = Console(highlight=False)
    if as_json:
        out.print_json(json.dumps(summary))
        return
    out.print(f"{len(prog)} instructions on {cfg.name}: {result.cycles} cycles "
              f"({result.cycles / cfg.clock_mhz:.1f} us at {cfg.clock_mhz:g} MHz), "
              f"GEMM utilization {result.gemm_utilization:.1%}")
    table = Table("unit", "instructions", "busy", "stalled on tokens", "stalled on memory")
    for unit, s in result.units.items():
        table.add_row(unit, str(s.instructions), str(s.busy), str(s.stalled_on_dependency),
                      str(s.stalled_on_memory))
    out.print(table)
    out.print("bytes moved: " + ", ".join(f"{k} {v}" for k, v in result.bytes_moved.items()))
    out.print("fsim counters: " + ", ".join(f"{k} {v}" for k, v in result.counters.items()))
