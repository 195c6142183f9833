"""Output files of the commands: checked before any work, written whole or not at all.

    check_output("--trace", path)        # before simulating: OutputPathError unless path can be written
    write_atomically(path, data)         # bytes or text, through a temporary file (sim/core/output.py)

A command that names an output file learns of a directory, a missing folder or a read-only folder before it
spends any time; and a write that fails (a full disk) leaves no half-written file behind, because the file
appears only once complete (``os.replace``).
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.core.output import write_atomically

__all__ = ["OutputPathError", "check_output", "write_atomically"]


class OutputPathError(ValueError):
    """An output path that cannot be written: names the option and the path."""


def check_output(option: str, path: Path | str | None) -> None:
    """OutputPathError unless ``path`` (when given) names a file that can be created or replaced."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise OutputPathError(f"{option}: {p} is a directory; give a file name")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise OutputPathError(f"{option}: the folder {folder} of {p} does not exist")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise OutputPathError(f"{option}: {p} cannot be written (permission denied)")
