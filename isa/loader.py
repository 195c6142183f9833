"""Load an ISA spec from TOML, validating it completely; loading never executes code.

    load_isa("vita", params={"LOG_BLOCK": 3})   # a built-in spec from isa/specs/
    load_spec_file(path, params=None)           # any spec file
    load_spec_text(text, file="<text>")         # a spec held in a string

Every problem is an ``ISASpecError`` naming the file, the instruction (or table) and the field, with the
column for expression errors. The layout of a spec file is documented in isa/README.md.
"""


from __future__ import annotations

import functools
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from isa.errors import ISASpecError
from isa.load_instructions import InstructionLoader
from isa.load_tables import TableLoader
from isa.spec import ISA

SPECS_DIR = Path(__file__).parent / "specs"
_TABLE_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY_AT = re.compile(r"^\s*([A-Za-z0-9_\-.\" ']+?)\s*=")

_TOP_KEYS = {"isa", "params", "param_ranges", "derived", "enums", "spaces", "formats", "instructions", "data"}
_ISA_KEYS = {"name", "summary", "insn_bits", "description", "extends"}
_MAX_EXTENDS = 8   # how deep a chain of `extends` may go


def builtin_specs() -> list[str]:
    """Names of the specs shipped in isa/specs/."""
    return sorted(p.stem for p in SPECS_DIR.glob("*.toml"))


def load_isa(name: str, params: Mapping[str, int] | None = None) -> ISA:
    """The built-in spec ``name`` (see ``builtin_specs()``), with parameter overrides.

    ISAs are immutable, so each (name, parameters) pair is loaded once per process and then shared.
    """
    if name not in builtin_specs():   # a name, never a path: '../x' must not reach files outside isa/specs
        raise ISASpecError(f"no built-in ISA '{name}'; built-in ones are {', '.join(builtin_specs())}",
                           file=f"{name}.toml")
    return load_spec_text(_builtin_text(name), f"isa/specs/{name}.toml", params)


@functools.cache
def _builtin_text(name: str) -> str:
    return (SPECS_DIR / f"{name}.toml").read_text()


def load_spec_file(path: str | Path, params: Mapping[str, int] | None = None) -> ISA:
    """The spec in the TOML file at ``path``."""
    p = Path(path)
    try:
        text = p.read_bytes().decode()
    except OSError as e:
        raise ISASpecError(f"cannot read the spec file: {e.strerror}", file=str(path)) from None
    except UnicodeDecodeError as e:
        raise ISASpecError(f"not a spec: the file is not UTF-8 text (byte {e.start} is "
                           f"{e.object[e.start]:#04x}); a spec is a TOML file", file=str(path)) from None
    return load_spec_text(text, str(path), params)


def load_spec_text(text: str, file: str = "<text>", params: Mapping[str, int] | None = None) -> ISA:
    """The spec in the TOML ``text`` (``file`` is the name errors use). ISAs are immutable, so each distinct
    (text, file, parameters) is loaded once per process and then shared, whether it came from a built-in
    name, a file or a string."""
    items = tuple(sorted((params or {}).items()))
    try:
        hash(items)
    except TypeError:  # an unhashable override value: let the loader report it
        return _Loader(text, file, params).load()
    return _load_text(text, file, items)


@functools.lru_cache(maxsize=64)
def _load_text(text: str, file: str, params: tuple[tuple[str, int], ...]) -> ISA:
    return _Loader(text, file, dict(params)).load()


def _toml(text: str) -> dict:
    """``tomllib.loads(text)``, whose every failure is a ValueError: a TOMLDecodeError, or for what tomllib
    does not report as one, an integer too long for ``int()`` or arrays nested past the recursion limit."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except ValueError:
        raise ValueError(f"an integer has more than {sys.get_int_max_str_digits()} digits") from None
    except RecursionError:
        raise ValueError("arrays or inline tables are nested too deeply") from None


def _overlay(base: dict, top: dict) -> dict:
    """``top`` over ``base``: tables merge key by key; any other value of ``top`` replaces ``base``'s."""
    out = dict(base)
    for key, value in top.items():
        out[key] = (_overlay(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict)
                    else value)
    return out




class _Loader(TableLoader, InstructionLoader):
    """Loads one spec text: the whole file and its ``extends`` here, the tables and the instructions in
    ``TableLoader`` and ``InstructionLoader``, the checked reads in ``isa.load_values.SpecReader``."""

    def toml_error(self, e: ValueError) -> ISASpecError:
        """A TOML syntax error, with its line and, where the text shows them, the table and the key there."""
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        if m is None:
            return ISASpecError(f"not valid TOML: {e}", file=self.file)
        line = int(m.group(1))
        lines = self.text.splitlines()
        where = key = None
        for text in reversed(lines[:line - 1]):  # the table header above the line
            header = _TABLE_HEADER.match(text)
            if header:
                name = header.group(1).strip().replace('"', "").replace("'", "")
                parts = [p.strip() for p in name.split(".")]
                if len(parts) == 2 and parts[0] == "instructions":
                    where = parts[1]
                else:
                    where = f"table [{name}]"
                break
        if 0 < line <= len(lines):
            assignment = _KEY_AT.match(lines[line - 1])
            key = assignment.group(1).strip() if assignment else None
        twice = key and str(e).startswith("Cannot overwrite")
        hint = f"'{key}' is set twice in this table; " if twice else ""
        return ISASpecError(f"not valid TOML: {hint}{e}", file=self.file, instruction=where, field=key,
                            line=line)


    # ------------------------------------------------------------------ the whole file
    def load(self) -> ISA:
        try:
            doc = _toml(self.text)
        except ValueError as e:   # a TOMLDecodeError, or what _toml says instead
            raise self.toml_error(e) from None
        own = doc.get("instructions")
        declared = tuple(own) if isinstance(own, dict) else ()
        doc = self.extend(doc, self.file, ())
        self.keys(doc, _TOP_KEYS, "the spec file", field=None)
        self.where = "table [isa]"
        head = self.keys(doc.get("isa"), _ISA_KEYS, "[isa]") if "isa" in doc else None
        if head is None:
            raise self.error("the spec needs an [isa] table with 'name' and 'summary'", "isa")
        name = self.name_ok(self.need(head, "name", str, "[isa]"), "the ISA name", "name")
        summary = self.need(head, "summary", str, "[isa]")
        insn_bits = head.get("insn_bits")
        if insn_bits is not None and (isinstance(insn_bits, bool) or not isinstance(insn_bits, int)
                                      or insn_bits <= 0 or insn_bits % 8):
            raise self.error(f"'insn_bits' must be a positive multiple of 8, but got {insn_bits!r}",
                             "insn_bits")

        self.enum_codes: dict[str, int] = {}
        self.params: dict[str, int] = {}
        self.const_names: dict[str, str] = {}
        defaults = self.load_params(doc.get("params", {}), doc.get("param_ranges", {}))
        self.load_derived(doc.get("derived", {}))
        enums = self.load_enums(doc.get("enums", {}))
        spaces = self.load_spaces(doc.get("spaces", {}), enums)
        formats = self.load_formats(doc.get("formats", {}), enums, insn_bits)
        instructions = {}
        raw_insns = doc.get("instructions", {})
        if not isinstance(raw_insns, dict):
            raise self.error("[instructions] must be a table of instructions", "instructions",
                             where="table [isa]")
        errors: list[ISASpecError] = []
        for iname, body in raw_insns.items():
            try:
                self.where = self.name_ok(iname, "an instruction name", None)
                instructions[iname] = self.load_instruction(iname, body, formats, enums, spaces)
            except ISASpecError as e:  # keep going: report every broken instruction at once
                errors.append(e)
        if errors:
            raise ISASpecError.collect(errors)
        self.check_decodable(instructions, insn_bits)
        data = self.load_data(doc.get("data", {}), formats)
        return ISA(name, summary, insn_bits, MappingProxyType(dict(self.params)), MappingProxyType(enums),
                   MappingProxyType(spaces), MappingProxyType(formats), MappingProxyType(instructions),
                   MappingProxyType(data), self.file, MappingProxyType(defaults), self.text, declared)

    def extend(self, doc: dict, file: str, chain: tuple[str, ...], merged: dict | None = None,
               included: set[str] | None = None) -> dict:
        """``doc`` laid over the specs its ``[isa] extends`` names (a built-in spec's name or a file path
        relative to ``file``'s folder, or a list of them, laid first to last), recursively: tables merge key
        by key, anything else (a value, an array, an array of tables) replaces the base's. A spec that two
        bases extend is laid once, so ``extends = ["a.toml", "b.toml"]`` composes two extensions of the
        same spec. Without ``extends``, ``doc`` over ``merged``."""
        merged = {} if merged is None else merged
        included = set() if included is None else included
        head = doc.get("isa")
        bases: list = []
        if isinstance(head, dict) and "extends" in head:
            given = head["extends"]
            bases = [given] if isinstance(given, str) else given
            if not isinstance(bases, list) or not bases or not all(isinstance(b, str) and b for b in bases):
                self.where = "table [isa]"
                raise self.error(f"'extends' must name a built-in spec or a spec file (or a list of them), "
                                 f"but got {given!r}", "extends")
        for base in bases:
            self.where = "table [isa]"
            path = self.base_path(base, file)
            key = str(path.resolve())
            if key in chain or len(chain) >= _MAX_EXTENDS:
                raise self.error(f"'extends' of {base!r} loops or goes deeper than {_MAX_EXTENDS} specs: "
                                 f"{' -> '.join([*chain, key])}", "extends")
            if key in included:
                continue
            included.add(key)
            try:
                base_doc = _toml(path.read_text())
            except OSError as e:
                raise self.error(f"'extends' names {str(path)!r}, which cannot be read: {e.strerror}",
                                 "extends") from None
            except UnicodeDecodeError:
                raise self.error(f"'extends' names {str(path)!r}, which is not UTF-8 text",
                                 "extends") from None
            except ValueError as e:   # a TOMLDecodeError, or what _toml says instead
                raise self.error(f"'extends' names {str(path)!r}, which is not valid TOML: {e}",
                                 "extends") from None
            merged = self.extend(base_doc, str(path), (*chain, key), merged, included)
        merged = _overlay(merged, doc)
        if isinstance(merged.get("isa"), dict):
            merged["isa"] = {k: v for k, v in merged["isa"].items() if k != "extends"}
        return merged

    def base_path(self, base: str, file: str) -> Path:
        """Where the spec that ``extends`` names lies: a built-in spec, or a path relative to ``file``."""
        if "/" in base or base.endswith(".toml"):
            return Path(file).parent / base
        if base in builtin_specs():
            return SPECS_DIR / f"{base}.toml"
        raise self.error(f"'extends' names {base!r}, which is neither a built-in spec "
                         f"({', '.join(builtin_specs())}) nor a .toml file", "extends")
