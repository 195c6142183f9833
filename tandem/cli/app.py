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
"""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

import tandem
from tandem.cli.console import fail
from tandem.cli.isa import isa_app
from tandem.cli.model import model_command
from tandem.cli.regress import regress_command
from tandem.cli.run import run_command
from tandem.cli.sim import sim_app
from tandem.cli.sweep import report_command, sweep_command

app = typer.Typer(
    name="tandem",
    help="Tandem: a compiler plus cycle-approximate simulators for deep-learning accelerators, "
    "sharing one ISA spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(isa_app, name="isa")
app.add_typer(sim_app, name="sim")
app.command("run")(run_command)
app.command("model")(model_command)
app.command("sweep")(sweep_command)
app.command("report")(report_command)
app.command("regress")(regress_command)

RUNTIME_PACKAGES = ("numpy", "simpy", "llvmlite")


def _version_of(dist: str) -> str:
    """Installed version of distribution ``dist``, or ``"not installed"``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def tandem_version() -> str:
    """Tandem's version from the installed metadata, falling back to ``tandem.__version__``."""
    try:
        return metadata.version("tandem")
    except metadata.PackageNotFoundError:
        return tandem.__version__


@app.command()
def version() -> None:
    """Print Tandem's version and the versions of python, numpy, simpy and llvmlite."""
    console = Console(highlight=False)
    console.print(f"tandem {tandem_version()}")
    console.print(f"python {platform.python_version()}")
    for dist in RUNTIME_PACKAGES:
        console.print(f"{dist} {_version_of(dist)}")


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
    """Compile one operator and print its loop IR (exit 2 on a bad input or a compiler error).

    With --target arm, also the AArch64 assembly and the tensor instructions issued; with --target cuda, the
    PTX, its instruction counts and whether ptxas assembles it. With --run, exits
    with status 1 if the result does not match numpy.
    """
    import isa
    from compiler.errors import TandemError
    from sim.core.errors import SimError
    from tandem.flows.catalogue import WorkloadError
    from tandem.flows.compile import check_on_random_inputs, compile_op
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


def _compile_cross(console: Console, op: str, shape: str | None, dtype: str | None, params: list[str],
                   target, dump_passes: bool, run: bool, asm: Path | None) -> None:
    """``tandem compile --target arm``: the loop IR, the assembly, the instruction counts, the checks."""
    from compiler.errors import IRTypeError, TandemError
    from compiler.ir import dtypes
    from tandem.flows.catalogue import WorkloadError, int_param, parse_params
    from tandem.flows.cross import compile_arm, emulated, interpreted
    from tandem.flows.flow import RunError

    try:
        if shape is not None:
            raise WorkloadError("--shape", f"target {target.kind!r} takes the layer as -p (gemm: M, N, K; "
                                           "conv2d: H, W, IC, OC, K, S, P)")
        try:
            element = dtypes.dtype(dtype or "int8").name
        except IRTypeError:
            raise WorkloadError("--dtype", f"expected int8, uint8 or int16, but got {dtype!r}") from None
        values = {k: int_param(k, v, None) for k, v in parse_params(params).items()}
        build = compile_arm(op, values, target, element)
        for name, text in build.stages if dump_passes else build.stages[-1:]:
            if dump_passes:
                console.print(Text(f"── after {name} ──", style="bold"))
            console.print(text, markup=False, soft_wrap=True)
        where = f"{build.obj.triple}, {build.obj.cpu}, features {','.join(build.obj.features) or 'none'}"
        if asm is not None:
            try:
                asm.write_text(build.obj.assembly)
            except OSError as exc:
                raise WorkloadError("--asm", f"cannot write {asm}: {exc.strerror}") from None
            console.print(f"assembly ({where}): {asm} ({build.obj.assembly.count(chr(10))} lines)",
                          markup=False, soft_wrap=True)
        else:
            console.print(Text(f"── assembly ({where}) ──", style="bold"))
            console.print(build.obj.assembly, markup=False, soft_wrap=True)
        static = build.mnemonic_counts()
        for name, count in build.issued.items():
            console.print(f"tensor instructions: {name} x {count:,} issued per call, {static[name]} "
                          f"{name.split('_')[0]} in the assembly", markup=False, soft_wrap=True)
        checks = [("interpreter", interpreted(build))] if run else []
        if run:
            checks.append((f"qemu ({build.obj.triple})", emulated(build)))
    except (WorkloadError, RunError, TandemError, OSError) as exc:
        raise fail(str(exc), 2) from None
    failed = False
    for name, check in checks:
        if isinstance(check, str):
            console.print(Text(f"{name}: not run: {check}", style="yellow"), soft_wrap=True)
            continue
        failed |= not check.validated
        style = "green" if check.validated else "bold red"
        verdict = "match" if check.validated else "MISMATCH"
        console.print(Text(f"{name}: {verdict}: {check.detail}", style=style), soft_wrap=True)
    if failed:
        raise typer.Exit(code=1)


def _compile_cuda(console: Console, op: str, shape: str | None, dtype: str | None, params: list[str],
                  target, dump_passes: bool, run: bool, ptx: Path | None) -> None:
    """``tandem compile --target cuda``: the loop IR, the PTX, its instruction counts, ptxas, the checks."""
    import numpy as np

    from compiler.backend import cuda_runtime, nvptx
    from compiler.errors import TandemError
    from tandem.flows.catalogue import WorkloadError, int_param, parse_params
    from tandem.flows.cuda import FLOW, compile_gpu, interpreted
    from tandem.flows.flow import RunError
    from tandem.flows.run import run as run_flow

    try:
        if shape is not None:
            raise WorkloadError("--shape", "target 'cuda' takes the layer as -p (gemm: M, N, K; conv2d: H, "
                                           "W, IC, OC, K, S, P, N)")
        values = {k: int_param(k, v, 0 if k in ("seed", "P") else 1) for k, v in parse_params(params).items()}
        if dtype is not None:
            values["dtype"] = {"f16": "float16"}.get(dtype, dtype)
        seed = values.pop("seed", 0)
        job = FLOW.plan(op, dict(values), target)
        build = compile_gpu(job, job.candidates[0], target)
        stages = [("schedule (compiler/ops/gpu.py)", str(build.schedule.source)),
                  ("tensorize", str(build.schedule.func))]
        for name, text in stages if dump_passes else stages[-1:]:
            if dump_passes:
                console.print(Text(f"── after {name} ──", style="bold"))
            console.print(text, markup=False, soft_wrap=True)
        kernel = build.kernel
        where = f"{kernel.arch}, {job.candidates[0]}, grid {kernel.launch.grid}, block {kernel.launch.block}"
        if ptx is not None:
            try:
                ptx.write_text(kernel.ptx)
            except OSError as exc:
                raise WorkloadError("--asm", f"cannot write {ptx}: {exc.strerror}") from None
            console.print(f"PTX ({where}): {ptx} ({kernel.ptx.count(chr(10))} lines)", markup=False,
                          soft_wrap=True)
        else:
            console.print(Text(f"── PTX ({where}) ──", style="bold"))
            console.print(kernel.ptx, markup=False, soft_wrap=True)
        console.print("PTX instructions: " + ", ".join(f"{k} {v}" for k, v in kernel.instructions().items()),
                      markup=False, soft_wrap=True)
        checks: list[tuple[str, object]] = []
        tool = nvptx.ptxas()
        checks.append((f"ptxas ({kernel.arch})", "ptxas is not installed (pip install -e \".[ptxas]\")"
                       if tool is None else nvptx.assemble(kernel, tool)))
        if run:
            inputs = FLOW.inputs(job, np.random.default_rng(seed))
            checks.append(("interpreter", interpreted(job, build.schedule.func, build.schedule, inputs)
                           if job.macs <= 1 << 22 else f"{job.macs:,} MACs: too many to interpret (at most "
                           f"{1 << 22:,})"))
            reason = cuda_runtime.unavailable()
            checks.append(("GPU", reason if reason else run_flow(op, target, {**values, "seed": seed,
                                                                             "tuning": job.candidates[0]})))
    except (WorkloadError, RunError, TandemError, OSError) as exc:
        raise fail(str(exc), 2) from None
    failed = False
    for name, check in checks:
        if name.startswith("ptxas"):
            ok = check is None
            text = f"{name}: assembles" if ok else f"{name}: does not assemble: {check}"
            if isinstance(check, str) and check.startswith("ptxas is not installed"):
                console.print(Text(f"{name}: not run: {check}", style="yellow"), soft_wrap=True)
                continue
        elif isinstance(check, str):
            console.print(Text(f"{name}: not run: {check}", style="yellow"), soft_wrap=True)
            continue
        else:
            ok = check.validated
            text = f"{name}: {'match' if ok else 'MISMATCH'}: {check.detail}"
        failed |= not ok
        console.print(Text(text, style="green" if ok else "bold red"), soft_wrap=True)
    if failed:
        raise typer.Exit(code=1)


def main() -> None:
    """Entry point of the ``tandem`` console script."""
    app()


if __name__ == "__main__":
    main()
