"""What every ``tandem`` command shares: how it reports an error (``error: ...`` lines on stderr, then an exit
status) and the version it records (``tandem version``, sweep results, regression baselines)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

import tandem


def fail(lines: str | list[str], code: int) -> typer.Exit:
    """Print each line as ``error: ...`` on stderr (literal, no rich markup); return the Exit to raise."""
    err = Console(stderr=True, highlight=False)
    for line in [lines] if isinstance(lines, str) else lines:
        err.print(Text(f"error: {line}", style="bold red"), soft_wrap=True)
    return typer.Exit(code=code)


def tandem_version() -> str:
    """Tandem's version from the installed metadata, falling back to ``tandem.__version__``."""
    try:
        return metadata.version("tandem")
    except metadata.PackageNotFoundError:
        return tandem.__version__


def resolve_target(kind: str, config: str | None, spec: Path | None):
    """The target of ``--target``/``--config``/``--spec`` (tandem/flows/targets.py), or the Exit (status 2)
    naming what is wrong: a kind no flow runs, or a config or spec that does not load."""
    from compiler.errors import TandemError
    from isa.errors import ISAError
    from sim.core.errors import SimError
    from tandem.flows.run import FLOWS
    from tandem.flows.targets import TargetError, load_target

    if kind not in FLOWS:
        raise fail(f"unknown target {kind!r}; expected one of {', '.join(FLOWS)}", 2)
    try:
        return load_target(kind, config, spec)
    except (TargetError, TandemError, SimError, ISAError) as exc:
        raise fail(str(exc), 2) from None
