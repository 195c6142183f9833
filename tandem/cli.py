"""The ``tandem`` command line (typer + rich).

Commands:
    version   print Tandem's version and the versions of the runtime it uses
    demo      compile a few small operators, run them in the reference interpreter, compare to numpy
"""

from __future__ import annotations

import platform
from importlib import metadata

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

import tandem

app = typer.Typer(
    name="tandem",
    help="Tandem: a compiler plus cycle-approximate simulators for deep-learning accelerators, "
    "sharing one ISA spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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
    from tandem.demo import run_demo  # late import so tests can monkeypatch tandem.demo.run_demo

    console = Console(highlight=False)
    checks = run_demo()

    table = Table(title="tandem demo")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for check in checks:
        # Text, not markup strings: error messages may contain [brackets]
        verdict = Text("PASS", style="green") if check.passed else Text("FAIL", style="bold red")
        table.add_row(Text(check.name), verdict, Text(check.detail))
    console.print(table)

    if show_ir:
        for check in checks:
            if check.ir:
                console.rule(check.name)
                console.print(check.ir, markup=False, soft_wrap=True)

    failed = [c for c in checks if not c.passed]
    if not checks:
        console.print("[bold red]no checks ran[/bold red]")
        raise typer.Exit(code=1)
    if failed:
        console.print(f"[bold red]{len(failed)} of {len(checks)} checks failed[/bold red]")
        raise typer.Exit(code=1)
    console.print(f"[green]all {len(checks)} checks passed[/green]")


def main() -> None:
    """Entry point of the ``tandem`` console script."""
    app()


if __name__ == "__main__":
    main()
