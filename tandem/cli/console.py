"""What every ``tandem`` command shares: how it reports an error (``error: ...`` lines on stderr, then an exit
status) and the version it records (``tandem version``, sweep results, regression baselines)."""

from __future__ import annotations

from importlib import metadata

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
