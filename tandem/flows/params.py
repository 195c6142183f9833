"""Parsing the command line's workload text: shapes (``256x56x56``), ``-p KEY=VALUE`` parameters and
integers, each bad one a ``WorkloadError`` naming the option. Its own module, free of the compiler, so that
a command parses its options before anything heavy is imported."""

from __future__ import annotations

import re
from collections.abc import Sequence


class WorkloadError(ValueError):
    """A bad operator name, shape, dtype or param: ``hint`` names the option (``--shape``, ``-p k``, ``OP``);
    ``str()`` is ``"<option>: <message>"``."""

    def __init__(self, hint: str, message: str) -> None:
        super().__init__(hint, message)
        self.hint = hint
        self.message = message

    def __str__(self) -> str:
        return f"{self.hint}: {self.message}"


def parse_shape(text: str) -> tuple[int, ...]:
    """``"14x14"`` -> ``(14, 14)``; raises ``WorkloadError`` for anything but positive ints joined by x."""
    parts = text.strip().lower().split("x")
    try:
        dims = tuple(int(p) for p in parts) if all(re.fullmatch(r"[0-9]+", p) for p in parts) else ()
    except ValueError:   # more digits than int() reads
        dims = ()
    if not dims or min(dims) < 1:
        shown = text if len(text) <= 40 else f"{text[:36]}... ({len(text)} characters)"
        raise WorkloadError(
            "--shape", f"expected positive integers joined by 'x', like 256x56x56, but got {shown!r}"
        )
    return dims


def parse_params(items: Sequence[str]) -> dict[str, str]:
    """``["split=0:4", "k=16"]`` -> ``{"split": "0:4", "k": "16"}``; a key may appear once."""
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise WorkloadError("-p", f"expected KEY=VALUE, but got {item!r}")
        if key in params:
            raise WorkloadError(f"-p {key}", f"given twice ({params[key]!r} and {value!r})")
        params[key] = value
    return params


def int_param(key: str, value: str, minimum: int | None) -> int:
    """``value`` as an integer (at least ``minimum`` unless None), else WorkloadError naming ``-p key``."""
    try:
        number = int(value)
    except ValueError:
        raise WorkloadError(f"-p {key}", f"expected an integer, but got {value!r}") from None
    if minimum is not None and number < minimum:
        raise WorkloadError(f"-p {key}", f"expected an integer >= {minimum}, but got {number}")
    return number
