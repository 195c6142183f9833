"""``tandem sim``: run a saved or hand-written program on a simulator and report what it measured.

    tandem sim vita PROGRAM [--dram IMAGE] [--dram-base ADDR] [--config NAME|FILE] [--spec FILE]
                            [--trace out.json] [--json] [--dram-out FILE]
    tandem sim diannao PROGRAM [--gmem IMAGE] [--gmem-size N] [--cores N] [--arg INT]... [--config NAME|FILE]
                               [--spec FILE] [--trace out.json] [--json] [--gmem-out FILE]

``--spec FILE`` runs the machine with a spec of your own (a copy of the built-in one with an instruction
added or a timing changed) in place of the built-in spec or the one the config names; the config's
``isa_params`` still apply to it.

PROGRAM is assembly text (``isa.assemble``) or a program file (``isa.encode_program``, starting with b"TNDM").

vita: IMAGE is the raw DRAM contents; without it DRAM starts as ``--dram-size`` zero bytes. Programs address
DRAM relative to the image, which lies at the physical address ``--dram-base`` (a page boundary, never page 0;
default 0x1000). Exit status: 0 on success, 1 when the simulation fails (deadlock, out-of-bounds access, no
FINISH), 2 on bad arguments.

diannao: IMAGE is placed at GMEM address 0 (the rest of GMEM is zero); ``--gmem-out`` writes GMEM[0:N)
back, N being ``--gmem-size`` or the image's size. Each ``--arg`` preloads the next register R0, R1, ... of
every core (decimal or 0x hex: usually GMEM addresses). Exit status: 0 on success, 1 when the simulation fails
(a broken instruction rule, an out-of-bounds access, a barrier deadlock, a launch on more cores than the card
has), 2 on bad arguments (an unreadable file, a bad program, option or config), each reported as one
``error: ...`` line.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

import isa
from sim.core.errors import SimError
from sim.vita.config import DEFAULT_DRAM_BASE, check_dram_base
from tandem.cli.console import fail
from tandem.cli.paths import OutputPathError, check_output, write_atomically
from tandem.flows.targets import TargetError, load_target

# the simulators and numpy are imported by the command that runs one: ``tandem --help`` and the other
# commands start without them
if TYPE_CHECKING:
    import numpy as np

    from sim.diannao.config import DiannaoConfig
    from sim.diannao.machine import DiannaoResult

SPEC_HELP = "A spec file of the same ISA family to use instead of the built-in one."
MAX_DRAM_BYTES = 1 << 32   # VITA's DRAM addresses are 32-bit

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
    dram_size: Annotated[int, typer.Option(
        min=1, max=MAX_DRAM_BYTES, help="DRAM bytes when no image is given (at most 4 GiB).")] = 1 << 20,
    config: Annotated[str, typer.Option(help="vta-default, tvm-paper, or a config file.")] = "vta-default",
    spec: Annotated[Path | None, typer.Option(help=SPEC_HELP)] = None,
    trace: Annotated[Path | None, typer.Option(help="Write a Chrome/Perfetto trace here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    dram_out: Annotated[Path | None, typer.Option(help="Write the final DRAM image here.")] = None,
    dram_base: Annotated[str, typer.Option(
        help="Physical address of the DRAM image, decimal or 0x hex: a 4 KiB page boundary other than 0 "
             "(programs address DRAM relative to it).")] = hex(DEFAULT_DRAM_BASE),
) -> None:
    """Simulate a VITA program: cycles, per-unit busy and stall cycles, GEMM utilization, bytes, counters."""
    import numpy as np

    from sim.core.energy import table_for
    from sim.vita import energy as vita_energy
    from sim.vita.machine import simulate
    from sim.vita.trace import write_trace

    try:
        base = parse_int("--dram-base", dram_base)
        check_output("--trace", trace)
        check_output("--dram-out", dram_out)
        target = load_target("vita", config, spec)
        cfg = target.config
        prog = read_program(program, target.spec)
        image = np.fromfile(dram, dtype=np.uint8) if dram is not None else np.zeros(dram_size, np.uint8)
        problem = check_dram_base(base, image.size, target.spec)
        if problem is not None:
            raise OptionError(f"--dram-base: {problem}")
    except (OSError, SimError, isa.ISAError, TargetError, OutputPathError, OptionError) as e:
        raise fail(str(e), 2) from None
    try:
        result = simulate(prog, image, cfg, dram_base=base)
    except (SimError, isa.ISAError) as e:
        raise fail(str(e), 1) from None
    try:
        if trace is not None:
            write_trace(result, cfg.clock_mhz, trace)
        if dram_out is not None:
            write_atomically(dram_out, result.dram.tobytes())
    except OSError as e:
        raise fail(f"{e.filename or 'output'}: {e.strerror}", 1) from None
    summary = {
        "config": cfg.name, "dram_base": base, "instructions": len(prog), "cycles": result.cycles,
        "microseconds": result.cycles / cfg.clock_mhz, "gemm_utilization": result.gemm_utilization,
        "units": {u: vars(s) for u, s in result.units.items()}, "bytes_moved": result.bytes_moved,
        "counters": result.counters, **vita_energy.costs(prog, table_for(cfg)).to_json(),
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
    out.print(energy_line(summary), soft_wrap=True)


def energy_line(summary: dict) -> str:
    """The human report's line of energy (by component) and area (sim/core/energy.py)."""
    parts = ", ".join(f"{k} {v:.3g}" for k, v in summary["energy_breakdown_uj"].items())
    return (f"energy {summary['energy_uj']:.4g} uJ ({parts}); area {summary['area_mm2']:.4g} mm2 at "
            f"{summary['technology_nm']:g} nm ({summary['energy_table']})")


DIANNAO_UNITS = ("vfu", "tfu", "dma")
TOP_INSTRUCTIONS = 8  # instruction names the human report lists, most executed first


class OptionError(Exception):
    """A command-line value that is wrong on its own (before any file is read or anything runs)."""


def parse_int(option: str, value: str) -> int:
    """The integer ``value`` of ``option``, decimal or 0x hex (addresses and sizes read better in hex)."""
    try:
        return int(value, 0)
    except ValueError:
        raise OptionError(f"{option}: expected an integer (decimal or 0x hex), but got {value!r}") from None


def gmem_out_size(gmem_size: int | None, image: np.ndarray | None, cfg: DiannaoConfig, spec: isa.ISA) -> int:
    """Bytes of GMEM that ``--gmem-out`` writes: ``--gmem-size``, else the size of the ``--gmem`` image."""
    capacity = spec.spaces["GMEM"].bytes
    if gmem_size is None:
        if image is None:
            raise OptionError("--gmem-out needs --gmem-size or a --gmem image to know how many bytes to "
                              "write")
        return image.size
    if not 0 < gmem_size <= capacity:
        raise OptionError(f"--gmem-size: expected 1 to {capacity} bytes (GMEM of '{cfg.name}'), but got "
                          f"{gmem_size}")
    return gmem_size


def diannao_summary(result: DiannaoResult, cfg: DiannaoConfig, program: isa.Program) -> dict:
    """What ``tandem sim diannao --json`` prints: the result of a launch as plain JSON values, with its
    energy and the card's area."""
    from sim.core.energy import table_for
    from sim.diannao import energy as diannao_energy

    return {
        "config": cfg.name, "program_instructions": len(program), "cycles": result.cycles,
        "microseconds": result.microseconds, "clock_mhz": result.clock_mhz,
        "cores": [asdict(c) for c in result.cores], "instructions": result.instructions,
        "tensor_instructions": result.tensor_instructions, "scalar_instructions": result.scalar_instructions,
        "bytes_moved": result.bytes_moved, "utilization": {u: result.utilization(u) for u in DIANNAO_UNITS},
        **diannao_energy.costs(program, result.executed, table_for(cfg)).to_json(),
    }


def print_diannao_report(out: Console, result: DiannaoResult, cfg: DiannaoConfig,
                         program: isa.Program) -> None:
    """The human report of a launch: totals, a row per core, instruction mix, bytes and unit utilization
    (each line but the table one line of text, however narrow the terminal)."""
    out.print(f"{len(program)} instructions on {len(result.cores)} cores of {cfg.name}: {result.cycles} "
              f"cycles ({result.microseconds:.1f} us at {result.clock_mhz:g} MHz)", soft_wrap=True)
    table = Table("core", "cluster", "busy", "stalled", "idle", "tensor insns", "scalar insns",
                  title="cycles and instructions per core")
    for c in result.cores:
        table.add_row(*map(str, (c.core, c.cluster, c.busy, c.stalled, c.idle, c.tensor_instructions,
                                 c.scalar_instructions)))
    out.print(table)
    executed = result.tensor_instructions + result.scalar_instructions
    top = sorted(result.instructions.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_INSTRUCTIONS]
    for line in (
        f"executed {executed} instructions: {result.tensor_instructions} tensor, "
        f"{result.scalar_instructions} scalar",
        "most executed: " + ", ".join(f"{name} {n}" for name, n in top),
        "bytes moved: " + (", ".join(f"{k} {v}" for k, v in result.bytes_moved.items()) or "none"),
        "utilization: " + ", ".join(f"{u.upper()} {result.utilization(u):.1%}" for u in DIANNAO_UNITS),
        energy_line(diannao_summary(result, cfg, program)),
    ):
        out.print(line, soft_wrap=True)


@sim_app.command()
def diannao(
    program: Annotated[Path, typer.Argument(help="Assembly text or a program file.")],
    gmem: Annotated[Path | None, typer.Option(help="Raw bytes placed at GMEM address 0.")] = None,
    gmem_size: Annotated[str | None, typer.Option(metavar="INT",
        help="Bytes of GMEM that --gmem-out writes (default: the --gmem image's size).")] = None,
    cores: Annotated[int | None, typer.Option(
        help="Cores to launch: 1 to a cluster's cores, or whole clusters (default: every core).")] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="INT", help="Kernel argument for R0, R1, ... (repeatable; 0x hex allowed).")] = None,
    config: Annotated[str, typer.Option(help="default, or a config file.")] = "default",
    spec: Annotated[Path | None, typer.Option(help=SPEC_HELP)] = None,
    trace: Annotated[Path | None, typer.Option(help="Write a Chrome/Perfetto trace here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    gmem_out: Annotated[Path | None, typer.Option(help="Write GMEM[0:size) here after the run.")] = None,
) -> None:
    """Simulate an SPMD kernel on a DianNao card.

    Reports cycles, per-core busy/stalled/idle, the instruction mix, bytes moved and VFU/TFU/DMA
    utilization."""
    import numpy as np

    from sim.diannao.machine import simulate as simulate_diannao
    from sim.diannao.trace import write_trace as write_diannao_trace

    try:
        check_output("--trace", trace)
        check_output("--gmem-out", gmem_out)
        args = [parse_int(f"--arg number {k + 1}", v) for k, v in enumerate(arg or [])]
        size = parse_int("--gmem-size", gmem_size) if gmem_size is not None else None
        target = load_target("diannao", config, spec)
        cfg = target.config
        prog = read_program(program, target.spec)
        image = np.fromfile(gmem, dtype=np.uint8) if gmem is not None else None
        out_size = gmem_out_size(size, image, cfg, target.spec) if gmem_out is not None else 0
    except OSError as e:   # the inputs: bad input (2)
        raise fail(f"{e.filename}: {e.strerror}" if e.filename else str(e), 2) from None
    except (OutputPathError, OptionError, SimError, isa.ISAError, TargetError) as e:
        raise fail(str(e), 2) from None
    try:   # the work: a failure of it (1)
        result, card = simulate_diannao(prog, image, cfg, cores=cores, args=args, trace=trace is not None)
        if trace is not None:
            write_diannao_trace(result, trace)
        if gmem_out is not None:
            write_atomically(gmem_out, card.memory.gmem[:out_size].tobytes())
    except OSError as e:
        raise fail(f"{e.filename}: {e.strerror}" if e.filename else str(e), 1) from None
    except (OptionError, SimError, isa.ISAError) as e:
        raise fail(str(e), 1) from None
    out = Console(highlight=False)
    if as_json:
        out.print_json(json.dumps(diannao_summary(result, cfg, prog)))
    else:
        print_diannao_report(out, result, cfg, prog)
