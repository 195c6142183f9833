"""Typed simulator errors: each names where (file and key, or cycle, module and instruction) and the rule."""

from __future__ import annotations


class SimError(Exception):
    """Base class of every error a simulator raises on bad input or a bad program."""


class SimConfigError(SimError):
    """A simulator config is malformed: names the file, the key and the broken rule."""

    def __init__(self, message: str, *, file: str = "<config>", key: str | None = None) -> None:
        self.file = file
        self.key = key
        self.detail = message
        where = f"{file}: key '{key}'" if key else file
        super().__init__(f"{where}: {message}")
