"""Writing a simulator's output files whole or not at all.

``write_atomically(path, data)`` writes through a temporary file in the same folder and renames it into place
(``os.replace``), so a write that fails part-way (a full disk) leaves no half-written trace or memory image.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path: Path | str, data: bytes | str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path``: the file appears complete or not at all."""
    p = Path(path)
    handle, temp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent if str(p.parent) else ".")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(temp, 0o666 & ~_umask())   # as a plain open() would create it, not mkstemp's 0600
        os.replace(temp, p)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
