"""Loading machine configs from TOML: one validating reader shared by every simulator's config dataclass.

A config file has ``name`` and ``summary`` strings, an ``[isa_params]`` table (parameter overrides the
machine applies to its ISA spec), optionally ``spec``, the path of the spec file the machine uses (relative to
the config file; without it the driver uses the built-in spec of the simulator's family), and positive
numbers for every other field of the dataclass (float where the field's default is a float, integer
otherwise). Errors are ``SimConfigError`` naming the file and the key.

A config never loads a spec itself: the edge (``tandem.flows.targets``) resolves the spec value and applies
the
config's parameters with ``spec_for``, so the compiler and the simulator receive the same spec object.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import MISSING, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import isa
from sim.core.errors import SimConfigError

FIXED_KEYS = ("name", "summary", "isa_params", "spec", "energy_table", "source")


class TomlConfig:
    """Base of the simulators' config dataclasses: loading and validation from TOML, and applying the
    machine's ``isa_params`` to a spec value (subclasses set ``FAMILY``, the ISA family their machine
    runs)."""

    __slots__ = ()
    FAMILY = ""

    @classmethod
    def from_file(cls, path: str | Path):
        """Load and validate the config at ``path``; ``SimConfigError`` names the file and key."""
        return cls.from_text(read_config_text(path), str(path))

    @classmethod
    def from_text(cls, text: str, file: str = "<config>"):
        """Load and validate a config held in ``text`` (``file`` is the name errors use)."""
        return parse_config(cls, text, file)

    def spec_for(self, base: isa.ISA) -> isa.ISA:
        """``base`` (a spec of this machine's ISA family) with this machine's ``isa_params`` applied;
        ``SimConfigError`` naming the key when the spec is of another family or the parameters break it."""
        if base.name != self.FAMILY:
            raise SimConfigError(f"the machine runs the '{self.FAMILY}' ISA, but the spec {base.source} is "
                                 f"'{base.name}'", file=self.source, key="spec")
        try:
            return base.with_params(dict(self.isa_params))
        except isa.ISASpecError as e:
            raise SimConfigError(f"the ISA parameters do not give a valid {self.FAMILY} ISA: {e}",
                                 file=self.source, key="isa_params") from None

    def check_spec(self, spec: isa.ISA, what: str = "the program") -> str | None:
        """Why ``spec`` (the spec ``what`` was built for) cannot run on this machine, or None: it must be of
        the machine's family and agree with every one of the machine's ``isa_params``."""
        if spec.name != self.FAMILY:
            return f"{what} is for ISA '{spec.name}', not '{self.FAMILY}'"
        differ = {k: (spec.params.get(k), v) for k, v in self.isa_params.items() if spec.params.get(k) != v}
        if differ:
            shown = ", ".join(f"{k} = {a} in the spec, {b} in the config" for k, (a, b) in differ.items())
            return f"{what}'s ISA parameters differ from config '{self.name}': {shown}"
        return None

    @property
    def energy_table_path(self) -> str | Path:
        """The energy table the config names (``energy_table = "..."``: a built-in name, or a file resolved
        against the config's folder), or the default table's name."""
        from sim.core.energy import DEFAULT_TABLE

        if not self.energy_table:
            return DEFAULT_TABLE
        p = Path(self.energy_table)
        if not p.suffix:
            return self.energy_table
        return p if p.is_absolute() else Path(self.source).parent / p

    @property
    def spec_path(self) -> Path | None:
        """The spec file the config names (``spec = "..."``), resolved against the config's folder."""
        if not self.spec:
            return None
        p = Path(self.spec)
        return p if p.is_absolute() else Path(self.source).parent / p


def spec_difference(program: isa.ISA, machine: isa.ISA) -> str | None:
    """Why a program built for the spec ``program`` cannot run on a machine of spec ``machine``, or None."""
    if program is machine or program == machine:
        return None
    if program.name != machine.name:
        return f"the program is for ISA '{program.name}', not '{machine.name}'"
    differ = sorted(k for k in set(program.params) | set(machine.params)
                    if program.params.get(k) != machine.params.get(k))
    if differ:
        shown = ", ".join(f"{k} = {program.params.get(k)} in the program, {machine.params.get(k)} on the "
                          "machine" for k in differ[:4])
        return f"the program's ISA parameters differ from the machine's: {shown}"
    return (f"the program was built for the spec {program.source}, but the machine runs {machine.source} "
            "(same parameters, other instructions)")


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
        if key in getattr(cls, "MOVED", {}):
            raise SimConfigError(f"this value now lives in the spec: set {cls.MOVED[key]} instead", file=file,
                                 key=key)
        if key not in known:
            raise SimConfigError(f"unknown key; keys are {', '.join(sorted(known))}", file=file, key=key)
    for key in ("name", "summary"):
        if not isinstance(doc.get(key), str):
            raise SimConfigError("a string is required", file=file, key=key)
    params = doc.get("isa_params", {})
    if not isinstance(params, dict):
        raise SimConfigError("must be a table of ISA parameter = integer", file=file, key="isa_params")
    for key, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise SimConfigError(f"expected an integer, but got {v!r}", file=file, key=f"isa_params.{key}")
    spec = doc.get("spec", "")
    if not isinstance(spec, str) or ("spec" in doc and not spec):
        raise SimConfigError("expected the path of a spec file", file=file, key="spec")
    table = doc.get("energy_table", "")
    if not isinstance(table, str) or ("energy_table" in doc and not table):
        raise SimConfigError("expected the name of a built-in energy table or the path of one", file=file,
                             key="energy_table")
    values = {}
    for f in fields(cls):
        if f.name in FIXED_KEYS or f.name not in doc:
            continue
        v = doc[f.name]
        if isinstance(f.default, tuple):   # a list of names
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise SimConfigError(f"expected a list of names, but got {v!r}", file=file, key=f.name)
            values[f.name] = tuple(v)
            continue
        want = float if f.default is not MISSING and isinstance(f.default, float) else int
        if isinstance(v, bool) or not isinstance(v, want | int):
            kind = "a number" if want is float else "an integer"
            raise SimConfigError(f"expected {kind}, but got {v!r}", file=file, key=f.name)
        if not math.isfinite(v) or v <= 0:
            raise SimConfigError(f"must be a finite positive number, but got {v!r}", file=file, key=f.name)
        values[f.name] = want(v)
    return cls(doc["name"], doc["summary"], MappingProxyType(dict(params)), spec=spec, energy_table=table,
               source=file, **values)


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
