"""How every ``tandem`` command reports an error: ``error: ...`` lines on stderr, then an exit status."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.text import Text


def fail(lines: str | list[str], code: int) -> typer.Exit:
    """Print each line as ``error: ...`` on stderr (literal, no rich markup); return the Exit to raise."""
    err = Console(stderr=True, highlight=False)
    for line in [lines] if isinstance(lines, str) else lines:
        err.print(Text(f"error: {line}", style="bold red"), soft_wrap=True)
    return typer.Exit(code=code)
