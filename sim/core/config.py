"""Loading machine configs from TOML: one validating reader shared by every simulator's config dataclass.

A config file has ``name`` and ``summary`` strings, an ``[isa_params]`` table (overrides passed to
``isa.load_isa``), and positive numbers for every other field of the dataclass (float where the field's
default is a float, integer otherwise). Errors are ``SimConfigError`` naming the file and the key.
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import isa
from sim.core.errors import SimConfigError

FIXED_KEYS = ("name", "summary", "isa_params", "source")


class TomlConfig:
    """Base of the simulators' config dataclasses: loading and validation from TOML (subclasses define
    ``spec()``, the ISA their ``isa_params`` give, which loading checks)."""

    __slots__ = ()

    @classmethod
    def from_file(cls, path: str | Path):
        """Load and validate the config at ``path``; ``SimConfigError`` names the file and key."""
        return cls.from_text(read_config_text(path), str(path))

    @classmethod
    def from_text(cls, text: str, file: str = "<config>"):
        """Load and validate a config held in ``text`` (``file`` is the name errors use)."""
        config = parse_config(cls, text, file)
        config.spec()  # the ISA parameters must give a loadable ISA
        return config


def read_config_text(path: str | Path) -> str:
    """The text of the config file at ``path`` (SimConfigError if it cannot be read)."""
    try:
        return Path(path).read_text()
    except OSError as e:
        raise SimConfigError(f"cannot read the config: {e.strerror}", file=str(path)) from None


def parse_config(cls: type, text: str, file: str) -> Any:
    """An instance of the config dataclass ``cls`` from TOML ``text``, every key validated."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SimConfigError(f"not valid TOML: {e}", file=file) from None
    known = {f.name for f in fields(cls)} - {"source"}
    for key in doc:
        if key not in known:
            raise SimConfigError(f"unknown key; keys are {', '.join(sorted(known))}", file=file, key=key)
    for key in ("name", "summary"):
        if not isinstance(doc.get(key), str):
            raise SimConfigError("a string is required", file=file, key=key)
    params = doc.get("isa_params", {})
    if not isinstance(params, dict):
        raise SimConfigError("must be a table of ISA parameter = integer", file=file, key="isa_params")
    values = {}
    for f in fields(cls):
        if f.name in FIXED_KEYS or f.name not in doc:
            continue
        v = doc[f.name]
        want = float if f.default is not MISSING and isinstance(f.default, float) else int
        if isinstance(v, bool) or not isinstance(v, want | int):
            kind = "a number" if want is float else "an integer"
            raise SimConfigError(f"expected {kind}, but got {v!r}", file=file, key=f.name)
        if v <= 0:
            raise SimConfigError(f"must be positive, but got {v!r}", file=file, key=f.name)
        values[f.name] = want(v)
    return cls(doc["name"], doc["summary"], MappingProxyType(dict(params)), source=file, **values)


def isa_for(isa_name: str, params, source: str) -> isa.ISA:
    """The built-in ISA ``isa_name`` with a config's ``isa_params``; SimConfigError naming the key if bad."""
    try:
        return isa.load_isa(isa_name, params=dict(params))
    except isa.ISASpecError as e:
        raise SimConfigError(f"the ISA parameters do not give a valid {isa_name} ISA: {e}", file=source,
                             key="isa_params") from None


def config_names(directory: Path) -> list[str]:
    """Names of the configs shipped in ``directory``."""
    return sorted(p.stem for p in directory.glob("*.toml"))


def load_named(cls: type, directory: Path, name_or_path: str | Path) -> Any:
    """The config ``cls.from_file`` loads: a built-in name from ``directory``, or the file at a path."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return cls.from_file(p)
    if str(name_or_path) in config_names(directory):
        return cls.from_file(directory / f"{name_or_path}.toml")
    raise SimConfigError(f"no built-in config '{name_or_path}' and no such file; built-in configs are "
                         f"{', '.join(config_names(directory))}", file=str(name_or_path))


def uncommented_values(path: Path) -> list[str]:
    """The value lines of the config at ``path`` that state no source or assumption: neither a comment of
    their own nor one in the block of lines (up to a blank line) above them. ``name`` and ``summary`` need
    none. Every shipped config must give an empty list."""
    missing, block_has_comment = [], False
    for line in Path(path).read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            block_has_comment = False
        elif stripped.startswith("#"):
            block_has_comment = True
        elif "=" in stripped and stripped.split("=")[0].strip() not in ("name", "summary"):
            if not (block_has_comment or "#" in stripped):
                missing.append(stripped)
    return missing
