"""The ``tandem`` command line (typer + rich).

Commands:
    version   print Tandem's version and the versions of the runtime it uses
    demo      compile a few small operators, run them in the reference interpreter, compare to numpy
    compile   compile one operator (tandem/flows/catalogue.py) and print its IR, optionally run it; with
              --target arm, UNIT's gemm/conv2d as AArch64 assembly (tandem/flows/cross.py)
    isa       list, show and check ISA specs (tandem/cli/isa.py)
    sim       run a program on a simulator (tandem/cli/sim.py)
    run       compile an operator for a target, simulate it, validate it (tandem/cli/run.py)
    model     import a network, run it in int8 on a target (tandem/cli/model.py)
    sweep     run a design-space sweep into a SQLite results store (tandem/cli/sweep.py)
    report    an HTML report of a results store (tandem/sweep/report.py)
    cache     where compiled kernels are kept between runs, their size; --clear (tandem/flows/kernel_cache.py)
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tandem.cli.console import JsonErrors, fail, tandem_version
from tandem.cli.isa import isa_app
from tandem.cli.model import model_command
from tandem.cli.regress import regress_command
from tandem.cli.run import run_command
from tandem.cli.sim import sim_app
from tandem.cli.sweep import report_command, sweep_command

app = typer.Typer(
    name="tandem",
    help="Tandem: a compiler plus cycle-approximate simulators for deep-learning accelerators, "
    "sharing one ISA spec.\n\nExit status, for every command: 0 success; 1 the work ran and failed (a "
    "mismatch against numpy, a failed check, case or simulation); 2 bad input, refused before any work (an "
    "option, file, spec, config, or an operator the compiler refuses for the target). With --json, a "
    "failure is one JSON object on stdout: {\"error\", \"type\", \"exit\"}.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=JsonErrors,
)
app.add_typer(isa_app, name="isa")
app.add_typer(sim_app, name="sim")
RUN_USAGE = "[--target diannao|vita|cpu|cuda (default diannao)] [OPTIONS]"
app.command("run", options_metavar=RUN_USAGE)(run_command)
app.command("model")(model_command)
app.command("sweep")(sweep_command)
app.command("report")(report_command)
app.command("regress")(regress_command)

RUNTIME_PACKAGES = ("numpy", "simpy", "llvmlite")


def _version_of(dist: str) -> str:
    """Installed version of distribution ``dist``, or ``"not installed"``."""
    from importlib import metadata  # ~20 ms: only where a version is printed or recorded

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


@app.command()
def version() -> None:
    """Print Tandem's version and the versions of python, numpy, simpy and llvmlite."""
    console = Console(highlight=False)
    console.print(f"tandem {tandem_version()}")
    console.print(f"python {platform.python_version()}")
    for dist in RUNTIME_PACKAGES:
        console.print(f"{dist} {_version_of(dist)}")


@app.command()
def cache(
    clear: Annotated[bool, typer.Option("--clear", help="Remove every compiled kernel kept on disk.")
                     ] = False,
) -> None:
    """Show where compiled kernels are kept on disk, and their size.

    tandem run and tandem model reuse them; --clear removes them."""
    from tandem.flows.kernel_cache import ENV, KernelCache

    kept = KernelCache.default()
    console = Console(highlight=False)
    if kept.directory is None:
        console.print(f"the kernel cache is off (${ENV}=off): kernels are compiled in every run",
                      soft_wrap=True)
        return
    if clear:
        console.print(f"removed {kept.clear()} compiled kernels from {kept.directory}", soft_wrap=True)
        return
    kernels, specs, size = kept.size()
    amount = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"
    console.print(f"{kept.directory}: {kernels} compiled kernels and {specs} parsed specs, {amount} (${ENV} "
                  f"sets the folder; `tandem cache --clear` empties it)", soft_wrap=True)


@app.command()
def demo(
    show_ir: bool = typer.Option(False, "--show-ir", help="Also print the lowered loop IR."),
) -> None:
    """Compile small operators, run them in the reference interpreter and compare with numpy.

    Exits with status 1 if any check fails.
    """
    from tandem.cli.demo import run_demo  # late import so tests can monkeypatch tandem.cli.demo.run_demo

    console = Console(highlight=False)
    rows = run_demo()

    table = Table(title="tandem demo")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for row in rows:
        # Text, not markup strings: error messages may contain [brackets]
        verdict = Text("PASS", style="green") if row.check.validated else Text("FAIL", style="bold red")
        table.add_row(Text(row.name), verdict, Text(row.check.detail))
    console.print(table)

    if show_ir:
        for row in rows:
            if row.ir:
                console.rule(row.name)
                console.print(row.ir, markup=False, soft_wrap=True)

    failed = [row for row in rows if not row.check.validated]
    if not rows:
        console.print("[bold red]no checks ran[/bold red]")
        raise typer.Exit(code=1)
    if failed:
        console.print(f"[bold red]{len(failed)} of {len(rows)} checks failed[/bold red]")
        raise typer.Exit(code=1)
    console.print(f"[green]all {len(rows)} checks passed[/green]")


@app.command("compile")
def compile_(
    op: Annotated[str, typer.Argument(help="Operator: add, sub, mul, maximum, relu, dense, gemm, conv2d "
                                           "(arm, cuda: gemm, conv2d).")],
    shape: Annotated[
        str | None, typer.Option(help="Shape like 14x14 (MxNxK for dense/gemm, NxCxHxW for conv2d).")
    ] = None,
    dtype: Annotated[str | None, typer.Option(help="Input dtype (default float32 or int8).")] = None,
    params: Annotated[
        list[str] | None,
        typer.Option(
            "-p",
            "--param",
            help="KEY=VALUE: split=AXIS:FACTOR, nparts=AXIS:N, bind=AXIS:core, conv2d k/r/...; arm: gemm "
                 "M, N, K; conv2d H, W, IC, OC, K, S, P; parallel, unroll_oc, unroll_x (UNIT's tuning); "
                 "seed.",
        ),
    ] = None,
    target: Annotated[str, typer.Option(
        help="Pipeline to run (compiler/pipeline.py): reference, diannao, vita, cpu, arm (AArch64 "
             "sdot, compiled by LLVM) or cuda (PTX with Tensor Core wmma, compiled by LLVM).")] = "reference",
    config: Annotated[str | None, typer.Option(
        help="diannao/vita/cuda: the machine config (built-in name or TOML file) whose ISA parameters the "
             "passes see.")] = None,
    spec: Annotated[Path | None, typer.Option(
        help="A spec file of the target's ISA family to compile for instead of the built-in spec.")] = None,
    dump_passes: Annotated[
        bool, typer.Option("--dump-passes", help="Print the IR after every pass.")
    ] = False,
    run: Annotated[
        bool, typer.Option("--run", help="Interpret on seeded random inputs; compare with numpy (arm: "
                                         "also run the code under qemu-aarch64 where it is installed).")
    ] = False,
    asm: Annotated[Path | None, typer.Option(
        help="arm: write the AArch64 assembly (cuda: the PTX) to this file instead of printing it.")] = None,
) -> None:
    """Compile one operator and print its loop IR.

    With --target arm, also the AArch64 assembly and the tensor instructions issued; with --target cuda, the
    PTX, its instruction counts and whether ptxas assembles it. With --run, also run it and compare with numpy
    (status 1 on a mismatch); an operator the compiler refuses for the target is bad input (status 2).
    """
    import isa
    from compiler.errors import TandemError
    from sim.core.errors import SimError
    from tandem.flows.compile import check_on_random_inputs, compile_op
    from tandem.flows.params import WorkloadError
    from tandem.flows.targets import TargetError, load_target

    console = Console(highlight=False)
    try:
        resolved = load_target(target, config, spec)
    except (TargetError, TandemError, SimError, isa.ISAError) as exc:
        raise fail(str(exc), 2) from None
    if resolved.triple is not None:
        _compile_cross(console, op, shape, dtype, params or [], resolved, dump_passes, run, asm)
        return
    if resolved.kind == "cuda":
        _compile_cuda(console, op, shape, dtype, params or [], resolved, dump_passes, run, asm)
        return
    if asm is not None:
        raise fail(f"--asm: target {target!r} emits no assembly here; it applies to --target arm and cuda", 2)
    try:
        compiled = compile_op(op, shape, dtype, params or (), resolved)
        stages = compiled.stages if dump_passes else compiled.stages[-1:]
        for name, text in stages:
            if dump_passes:
                console.print(Text(f"── after {name} ──", style="bold"))
            console.print(text, markup=False, soft_wrap=True)
        check = check_on_random_inputs(compiled) if run else None
    except (WorkloadError, TandemError) as exc:
        raise fail(str(exc), 2) from None
    if check is not None:
        if not check.validated:
            console.print(Text(f"MISMATCH: {check.detail}", style="bold red"))
            raise typer.Exit(code=1)
        console.print(Text(f"match: {check.detail}", style="green"))


@contextmanager
def _refused() -> Iterator[None]:
    """``tandem compile``'s refusals (a bad option, parameter or layer; a file it cannot write) as exit
    status 2 with the message."""
    from compiler.errors import TandemError
    from tandem.flows.flow import RunError
    from tandem.flows.params import WorkloadError

    try:
        yield
    except (WorkloadError, RunError, TandemError, OSError) as exc:
        raise fail(str(exc), 2) from None


def _compile_cross(console: Console, op: str, shape: str | None, dtype: str | None, params: list[str],
                   target, dump_passes: bool, run: bool, asm: Path | None) -> None:
    """``tandem compile --target arm``: the loop IR, the assembly, the instruction counts, the checks
    (tandem/flows/cross.py)."""
    from tandem.flows import cross

    with _refused():
        build = cross.compile_options(op, shape, dtype, params, target)
        _print_stages(console, build.stages, dump_passes)
        where = f"{build.obj.triple}, {build.obj.cpu}, features {','.join(build.obj.features) or 'none'}"
        _print_code(console, "assembly", where, build.obj.assembly, asm)
        static = build.mnemonic_counts()
        for name, count in build.issued.items():
            console.print(f"tensor instructions: {name} x {count:,} issued per call, {static[name]} "
                          f"{name.split('_')[0]} in the assembly", markup=False, soft_wrap=True)
        checks = cross.run_checks(build) if run else []
    if not _print_checks(console, checks):
        raise typer.Exit(code=1)


def _compile_cuda(console: Console, op: str, shape: str | None, dtype: str | None, params: list[str],
                  target, dump_passes: bool, run: bool, ptx: Path | None) -> None:
    """``tandem compile --target cuda``: the loop IR, the PTX, its instruction counts, ptxas, the checks
    (tandem/flows/cuda.py)."""
    from tandem.flows import cuda

    with _refused():
        build = cuda.compile_options(op, shape, dtype, params, target)
        _print_stages(console, build.stages, dump_passes)
        kernel = build.compiled.kernel
        where = (f"{kernel.arch}, {build.job.candidates[0]}, grid {kernel.launch.grid}, "
                 f"block {kernel.launch.block}")
        _print_code(console, "PTX", where, kernel.ptx, ptx)
        console.print("PTX instructions: " + ", ".join(f"{k} {v}" for k, v in kernel.instructions().items()),
                      markup=False, soft_wrap=True)
        assembles, verdict = cuda.ptxas_check(kernel)
        checks = cuda.run_checks(build, op, target) if run else []
    style = {True: "green", False: "bold red", None: "yellow"}[assembles]
    console.print(Text(f"ptxas ({kernel.arch}): {verdict}", style=style), soft_wrap=True)
    if not _print_checks(console, checks) or assembles is False:
        raise typer.Exit(code=1)


def _print_stages(console: Console, stages, dump_passes: bool) -> None:
    """The printed IR after the last step, or after every step with a header each (--dump-passes)."""
    for name, text in stages if dump_passes else stages[-1:]:
        if dump_passes:
            console.print(Text(f"── after {name} ──", style="bold"))
        console.print(text, markup=False, soft_wrap=True)


def _print_code(console: Console, what: str, where: str, code: str, path: Path | None) -> None:
    """The generated code (``what``: assembly, PTX) printed, or written to ``path`` (--asm) and named."""
    if path is None:
        console.print(Text(f"── {what} ({where}) ──", style="bold"))
        console.print(code, markup=False, soft_wrap=True)
        return
    try:
        path.write_text(code)
    except OSError as exc:
        raise fail(f"--asm: cannot write {path}: {exc.strerror}", 2) from None
    console.print(f"{what} ({where}): {path} ({code.count(chr(10))} lines)", markup=False, soft_wrap=True)


def _print_checks(console: Console, checks) -> bool:
    """One line per check (a ``Check``, or why it did not run); whether none failed."""
    passed = True
    for name, check in checks:
        if isinstance(check, str):
            console.print(Text(f"{name}: not run: {check}", style="yellow"), soft_wrap=True)
            continue
        passed &= check.validated
        verdict, style = ("match", "green") if check.validated else ("MISMATCH", "bold red")
        console.print(Text(f"{name}: {verdict}: {check.detail}", style=style), soft_wrap=True)
    return passed


def main() -> None:
    """Entry point of the ``tandem`` console script."""
    app()


if __name__ == "__main__":
    main()
