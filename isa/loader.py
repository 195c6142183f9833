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

from isa.dtypes import canonical
from isa.encoding import LayoutError, fixed_pattern, place_fields
from isa.errors import ExecError, ISASpecError, ParseError
from isa.lang.parser import parse_expr, parse_statements
from isa.lang.scalar import ScalarEnv, evaluate
from isa.lang.tree import Expr, Num
from isa.lang.typecheck import TensorSig, check_scalar, typecheck
from isa.spec import (
    CONSTRAINT_KINDS,
    FIELD_KINDS,
    ISA,
    OPERAND_KINDS,
    Constraint,
    DataKind,
    Enum,
    Field,
    Format,
    Instruction,
    Operand,
    Space,
    Timing,
    type_bindings,
)

SPECS_DIR = Path(__file__).parent / "specs"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")
_TABLE_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY_AT = re.compile(r"^\s*([A-Za-z0-9_\-.\" ']+?)\s*=")

_TOP_KEYS = {"isa", "params", "derived", "enums", "spaces", "formats", "instructions", "data"}
_ISA_KEYS = {"name", "summary", "insn_bits", "description", "extends"}
_MAX_EXTENDS = 8   # how deep a chain of `extends` may go
_ENUM_KEYS = {"values", "summary"}
_SPACE_KEYS = {"bytes", "id", "unit_bytes", "summary"}
_FORMAT_KEYS = {"bits", "unit_bits", "fields", "summary"}
_FIELD_KEYS = {"name", "bits", "lsb", "signed", "kind", "enum", "default", "max", "doc"}
_INSN_KEYS = {"summary", "format", "fixed", "types", "operands", "indices", "semantics", "constraints",
              "timing", "intrinsic", "group", "doc", "intrinsic_args", "features", "threads"}
_OPERAND_KEYS = {"name", "kind", "space", "dtype", "shape", "strides", "addr", "doc"}
_CONSTRAINT_KEYS = {"kind", "rule", "message"}
_TIMING_KEYS = {"unit", "latency", "cycles", "doc"}
_DATA_KEYS = {"format", "summary"}


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


class _Loader:
    def __init__(self, text: str, file: str, params: Mapping[str, int] | None) -> None:
        self.text = text
        self.file = file
        self.overrides = dict(params or {})
        self.where: str | None = None  # the instruction (or "table X") being loaded

    # ------------------------------------------------------------------ error helpers
    def error(self, message: str, field: str | None = None, col: int | None = None,
              where: str | None = None) -> ISASpecError:
        return ISASpecError(message, file=self.file, instruction=where or self.where, field=field, col=col)

    def parse_error(self, e: ParseError, field: str, suffix: str = "") -> ISASpecError:
        """An ISASpecError for a parse or type error, quoting the line with a caret under the column."""
        pointer = e.pointer().replace("\n", "\n    ")
        return ISASpecError(f"{e.detail}{suffix}\n    {pointer}", file=self.file, instruction=self.where,
                            field=field, col=e.col, expr_line=e.line if e.line > 1 else None)

    def keys(self, table: object, allowed: set[str], what: str, field: str | None = None) -> dict:
        if not isinstance(table, dict):
            raise self.error(f"{what} must be a table, but got {_tname(table)}", field)
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise self.error(f"unknown key '{unknown[0]}' in {what}; allowed keys are "
                             f"{', '.join(sorted(allowed))}", field if field else unknown[0])
        return table

    def need(self, table: dict, key: str, types: type | tuple, what: str, field: str | None = None):
        if key not in table:
            raise self.error(f"{what} needs '{key}'", field or key)
        value = table[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
            raise self.error(f"'{key}' must be {_describe_types(types)}, but got {_tname(value)}",
                             field or key)
        return value

    def name_ok(self, name: object, what: str, field: str | None = None) -> str:
        if not isinstance(name, str) or not _IDENT.match(name):
            raise self.error(f"{what} must be an identifier (letters, digits, '_'), but got {name!r}", field)
        return name

    def expr(self, value: object, field: str, *, scalars: Mapping[str, str],
             types: Mapping[str, str] | None = None, tensors: Mapping[str, TensorSig] | None = None) -> Expr:
        """Parse and check a scalar expression given as an integer or a string."""
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self.error(f"expected an integer or an expression string, but got {_tname(value)}", field)
        if isinstance(value, int):
            return Num(value, dtype="int")
        try:
            return check_scalar(value, parse_expr(value), scalars=dict(scalars), types=dict(types or {}),
                                tensors=dict(tensors or {}))
        except ParseError as e:
            raise self.parse_error(e, field) from None

    def const(self, value: object, field: str) -> int:
        """An expression over parameters only, evaluated now."""
        e = self.expr(value, field, scalars=self.const_names)
        try:
            v = evaluate(e, ScalarEnv({**self.enum_codes, **self.params}))
        except ExecError as err:
            raise self.error(str(err), field) from None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(f"expected an integer value, but {value!r} is {v!r}", field)
        return v

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
        defaults = self.load_params(doc.get("params", {}))
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
                   MappingProxyType(data), self.file, MappingProxyType(defaults), self.text)

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

    def load_params(self, raw: object) -> dict[str, int]:
        self.where = "table [params]"
        if not isinstance(raw, dict):
            raise self.error("[params] must be a table of integers", "params")
        for key, value in raw.items():
            self.name_ok(key, "a parameter name", key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"parameter '{key}' must be an integer, but got {_tname(value)}", key)
            self.in_range(key, value)
        for key, value in self.overrides.items():
            if key not in raw:
                raise self.error(f"cannot override unknown parameter '{key}'; parameters are "
                                 f"{', '.join(raw) or 'none'}", key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"override of '{key}' must be an integer, but got {_tname(value)}", key)
            self.in_range(key, value)
        self.params.update(raw)
        self.params.update(self.overrides)
        self.const_names.update({k: "param" for k in raw})
        return dict(raw)

    def load_derived(self, raw: object) -> None:
        self.where = "table [derived]"
        if not isinstance(raw, dict):
            raise self.error("[derived] must be a table of expressions", "derived")
        for key, value in raw.items():
            self.name_ok(key, "a derived constant's name", key)
            if key in self.params:
                raise self.error(f"'{key}' is already a parameter", key)
            self.params[key] = self.in_range(key, self.const(value, key))
            self.const_names[key] = "param"

    def in_range(self, key: str, value: int) -> int:
        """``value``, unless it leaves the 64-bit range every spec value lives in (ISASpecError naming it)."""
        if not -(2**63) <= value < 2**63:
            shown = str(value) if value.bit_length() < 200 else f"a {value.bit_length()}-bit number"
            raise self.error(f"'{key}' = {shown} leaves the 64-bit range of spec values", key)
        return value

    def load_enums(self, raw: object) -> dict[str, Enum]:
        self.where = "table [enums]"
        if not isinstance(raw, dict):
            raise self.error("[enums] must be a table", "enums")
        enums = {}
        for ename, body in raw.items():
            self.where = f"enum '{ename}'"
            self.name_ok(ename, "an enum name")
            body = self.keys(body, _ENUM_KEYS, f"enum '{ename}'")
            values = body.get("values")
            if isinstance(values, list):
                named = all(isinstance(v, str) for v in values)
                values = {v: k for k, v in enumerate(values)} if named else None
            if not isinstance(values, dict) or not values:
                raise self.error("'values' must be a non-empty list of names or a table of name = code",
                                 "values")
            for member, code in values.items():
                if canonical(member) is None:  # dtype names (a type field's enum) stay casts, not values
                    self.declare_enum_member(member, code)
            seen: dict[object, str] = {}
            for member, code in values.items():
                if code in seen:
                    raise self.error(f"'{seen[code]}' and '{member}' have the same code {code}; each value "
                                     f"needs its own", "values")
                seen[code] = member
            enums[ename] = Enum(ename, MappingProxyType(dict(values)))
        return enums

    def declare_enum_member(self, member: str, code: object) -> None:
        self.name_ok(member, "an enum value name", "values")
        if isinstance(code, bool) or not isinstance(code, int) or code < 0:
            raise self.error(f"enum value '{member}' must have a non-negative integer code, but got {code!r}",
                             "values")
        if member in self.enum_codes or member in self.params:
            raise self.error(f"duplicate name '{member}': already an enum value or a parameter", "values")
        self.enum_codes[member] = code
        self.const_names[member] = "enum"

    def load_spaces(self, raw: object, enums: dict[str, Enum]) -> dict[str, Space]:
        if not isinstance(raw, dict):
            raise self.error("[spaces] must be a table", "spaces", where="table [spaces]")
        spaces = {}
        for k, (sname, body) in enumerate(raw.items()):
            self.where = f"space '{sname}'"
            self.name_ok(sname, "a space name")
            body = self.keys(body, _SPACE_KEYS, f"space '{sname}'")
            size = self.const(self.need(body, "bytes", (int, str), f"space '{sname}'"), "bytes")
            code = body.get("id", k)
            if isinstance(code, bool) or not isinstance(code, int) or code < 0:
                raise self.error(f"'id' must be a non-negative integer, but got {code!r}", "id")
            if any(s.id == code for s in spaces.values()):
                raise self.error(f"space id {code} is used twice", "id")
            unit = self.const(body.get("unit_bytes", 1), "unit_bytes")
            if size < 0 or unit <= 0:
                raise self.error(f"sizes must be positive: bytes = {size}, unit_bytes = {unit}", "bytes")
            self.declare_enum_member(sname, code)
            spaces[sname] = Space(sname, code, size, unit, body.get("summary", ""))
        if spaces:
            if "space" in enums:
                raise self.error("the enum 'space' is made from [spaces]; do not declare it",
                                 where="enum 'space'")
            enums["space"] = Enum("space", MappingProxyType({s.name: s.id for s in spaces.values()}))
        return spaces

    def load_formats(self, raw: object, enums: dict[str, Enum], insn_bits: int | None) -> dict[str, Format]:
        if not isinstance(raw, dict):
            raise self.error("[formats] must be a table", "formats", where="table [formats]")
        formats = {}
        for fname, body in raw.items():
            self.where = f"format '{fname}'"
            self.name_ok(fname, "a format name")
            body = self.keys(body, _FORMAT_KEYS, f"format '{fname}'")
            total = body.get("bits", insn_bits)
            if total is None:
                raise self.error("needs 'bits' (or [isa] insn_bits)", "bits")
            total = self.const(total, "bits")
            unit = self.const(body["unit_bits"], "unit_bits") if "unit_bits" in body else None
            items = body.get("fields")
            if not isinstance(items, list) or not items:
                raise self.error("'fields' must be a non-empty list of tables", "fields")
            fields = self.load_fields(items, enums, total, unit)
            formats[fname] = Format(fname, total, tuple(fields))
        return formats

    def load_fields(self, items: list, enums: dict[str, Enum], total: int, unit: int | None) -> list[Field]:
        specs = []
        names = set()
        for item in items:
            item = self.keys(item, _FIELD_KEYS, "a field", "fields")
            fname = self.name_ok(self.need(item, "name", str, "a field", "fields"), "a field name", "fields")
            if fname in names:
                raise self.error(f"duplicate field name '{fname}'", fname)
            if fname in self.const_names:
                raise self.error(f"field '{fname}' has the name of a parameter or enum value", fname)
            names.add(fname)
            bits = self.const(self.need(item, "bits", (int, str), "a field", fname), fname)
            lsb = self.const(item["lsb"], fname) if "lsb" in item else None
            specs.append((fname, bits, lsb, item))
        try:
            lsbs = place_fields([(n, b, lsb) for n, b, lsb, _ in specs], total, unit)
        except LayoutError as e:
            raise self.error(str(e), e.field) from None
        fields = []
        for (fname, bits, _, item), lsb in zip(specs, lsbs, strict=True):
            kind = item.get("kind", "int")
            if kind not in FIELD_KINDS:
                raise self.error(f"unknown field kind {kind!r}; kinds are {', '.join(FIELD_KINDS)}", fname)
            signed = item.get("signed", False)
            if not isinstance(signed, bool):
                raise self.error(f"'signed' must be true or false, but got {_tname(signed)}", fname)
            enum = item.get("enum")
            if kind in ("enum", "type") and enum is None:
                raise self.error(f"a field of kind '{kind}' needs 'enum'", fname)
            if enum is not None:
                if not isinstance(enum, str):
                    raise self.error(f"'enum' must be the name of an enum, but got {_tname(enum)}", fname)
                if enum not in enums:
                    raise self.error(f"unknown enum '{enum}'; enums are {', '.join(enums) or 'none'}", fname)
                top = max(enums[enum].values.values())
                if top >= 1 << bits:
                    raise self.error(f"field '{fname}' has {bits} bits, too narrow for enum '{enum}' whose "
                                     f"largest code is {top}", fname)
                if kind == "type":
                    bad = [n for n in enums[enum].values if canonical(n) is None]
                    if bad:
                        raise self.error(f"a type field's enum must name dtypes, but '{bad[0]}' is not one",
                                         fname)
            if kind == "flag" and bits != 1:
                raise self.error(f"a flag is 1 bit wide, but '{fname}' has {bits}", fname)
            fld = Field(fname, bits, lsb, signed, kind, enum, None, None, item.get("doc", ""))
            default = item.get("default")
            if default is not None and (isinstance(default, bool) or not isinstance(default, int)
                                        or not fld.lo <= default <= fld.hi):
                raise self.error(f"default {default!r} does not fit the field ({fld.lo}..{fld.hi})", fname)
            top = self.const(item["max"], fname) if "max" in item else None
            if top is not None and top > fld.hi:
                raise self.error(f"field '{fname}' has {bits} bits (at most {fld.hi}), too narrow for its "
                                 f"largest value {top} (max = {item['max']!r})", fname)
            fields.append(Field(fname, bits, lsb, signed, kind, enum, default, top, item.get("doc", "")))
        return fields

    # ------------------------------------------------------------------ one instruction
    def load_instruction(self, iname: str, body: object, formats: dict[str, Format], enums: dict[str, Enum],
                         spaces: dict[str, Space]) -> Instruction:
        body = self.keys(body, _INSN_KEYS, f"instruction '{iname}'")
        summary = self.need(body, "summary", str, f"instruction '{iname}'")
        fmt = None
        if "format" in body:
            fname = self.need(body, "format", str, "an instruction")
            if fname not in formats:
                raise self.error(f"unknown format '{fname}'; formats are {', '.join(formats) or 'none'}",
                                 "format")
            fmt = formats[fname]
        fixed = self.load_fixed(body.get("fixed", {}), fmt, enums)
        types = self.load_types(body.get("types", {}), fmt, enums)
        fields = {f.name: f for f in fmt.fields if f.name not in fixed} if fmt else {}
        scalars = {**self.const_names, **{n: "field" for n in fields}}
        for tv in types:
            if tv in self.const_names:
                raise self.error(f"type variable '{tv}' has the name of a parameter or enum value", "types")
        operands = self.load_operands(body.get("operands", []), scalars, types, fields, spaces)
        sigs_any = {op.name: TensorSig(types.get(op.dtype, ("i32",))[0] if op.dtype in types else op.dtype,
                                       op.shape) for op in operands}
        # addresses may read operand tensors (a register file): check them once the operands exist
        operands = tuple(self.check_addr(op, scalars, types, sigs_any) for op in operands)
        indices = self.load_indices(body.get("indices", {}), scalars, types, operands, fields)
        text = body.get("semantics", "")
        if not isinstance(text, str):
            raise self.error(f"'semantics' must be a string, but got {_tname(text)}", "semantics")
        statements, typed = self.load_semantics(text, operands, indices, scalars, types)
        constraints = self.load_constraints(body.get("constraints", []), scalars, types, operands)
        timing = self.load_timing(body.get("timing", {}), scalars, types, operands)
        for key in ("intrinsic", "group", "doc"):
            if key in body and not isinstance(body[key], str):
                raise self.error(f"'{key}' must be a string, but got {_tname(body[key])}", key)
        args = self.load_intrinsic_args(body.get("intrinsic_args", []), operands, "intrinsic" in body)
        features = self.load_features(body.get("features", []))
        threads = body.get("threads", 1)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise self.error(f"'threads' must be a positive integer (the threads that execute one instance "
                             f"together), but got {threads!r}", "threads")
        return Instruction(iname, summary, fmt, MappingProxyType(fixed), MappingProxyType(types), operands,
                           text, statements, MappingProxyType(typed), constraints, timing,
                           body.get("intrinsic"), body.get("group"), body.get("doc", ""), args, features,
                           threads)

    def load_intrinsic_args(self, raw: object, operands, has_intrinsic: bool) -> tuple[str, ...]:
        """The operands an intrinsic takes, in its order: a list of operand names."""
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise self.error(f"'intrinsic_args' must be a list of operand names, but got {raw!r}",
                             "intrinsic_args")
        names = {op.name for op in operands}
        for name in raw:
            if name not in names:
                raise self.error(f"'intrinsic_args' names '{name}', which is not an operand (operands: "
                                 f"{', '.join(sorted(names))})", "intrinsic_args")
        if raw and not has_intrinsic:
            raise self.error("'intrinsic_args' needs an 'intrinsic'", "intrinsic_args")
        return tuple(raw)

    def load_features(self, raw: object) -> tuple[tuple[str, ...], ...]:
        """CPU features: a list of names (all needed), or a list of such lists (any one set suffices)."""
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            return (tuple(raw),) if raw else ()
        if isinstance(raw, list) and all(isinstance(x, list) and x and all(isinstance(y, str) for y in x)
                                         for x in raw):
            return tuple(tuple(x) for x in raw)
        raise self.error(f"'features' must be a list of feature names or a list of such lists, but got "
                         f"{raw!r}", "features")

    def load_fixed(self, raw: object, fmt: Format | None, enums: dict[str, Enum]) -> dict[str, int]:
        if not isinstance(raw, dict):
            raise self.error(f"'fixed' must be a table of field = value, but got {_tname(raw)}", "fixed")
        if raw and fmt is None:
            raise self.error("'fixed' needs a 'format'", "fixed")
        fixed = {}
        for name, value in raw.items():
            try:
                f = fmt.field(name)
            except KeyError:
                raise self.error(f"format '{fmt.name}' has no field '{name}'", "fixed") from None
            if isinstance(value, str):
                code = enums[f.enum].values.get(value) if f.enum else None
                if code is None:
                    raise self.error(f"'{value}' is not a value of the enum of field '{name}'", "fixed")
                value = code
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"fixed value of '{name}' must be an integer or enum name, but got "
                                 f"{_tname(value)}", "fixed")
            if not f.lo <= value <= f.hi:
                raise self.error(f"fixed value {value} of '{name}' does not fit its {f.bits} bits "
                                 f"({f.lo}..{f.hi})", "fixed")
            fixed[name] = value
        return fixed

    def load_types(self, raw: object, fmt: Format | None,
                   enums: dict[str, Enum]) -> dict[str, tuple[str, ...]]:
        if not isinstance(raw, dict):
            raise self.error(f"'types' must be a table of T = [dtypes], but got {_tname(raw)}", "types")
        types = {}
        if raw and fmt is None:
            raise self.error("type variables need a 'format' with a field of kind 'type' that binds them",
                             "types")
        for tv, values in raw.items():
            self.name_ok(tv, "a type variable", "types")
            if canonical(tv):
                raise self.error(f"type variable '{tv}' has the name of a dtype", "types")
            if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
                raise self.error(f"type variable '{tv}' needs a non-empty list of dtype names", "types")
            names = []
            for v in values:
                c = canonical(v)
                if c is None:
                    raise self.error(f"unknown dtype '{v}' for type variable '{tv}'", "types")
                names.append(c)
            if fmt is not None:
                try:
                    f = fmt.field(tv)
                except KeyError:
                    raise self.error(f"type variable '{tv}' needs a field '{tv}' of kind 'type' in format "
                                     f"'{fmt.name}'", "types") from None
                if f.kind != "type":
                    raise self.error(f"field '{tv}' binds a type variable, so its kind must be 'type'",
                                     "types")
                members = {canonical(n) for n in enums[f.enum].values}
                missing = [n for n in names if n not in members]
                if missing:
                    raise self.error(f"dtype '{missing[0]}' of '{tv}' has no code in enum '{f.enum}'",
                                     "types")
            types[tv] = tuple(names)
        return types

    def load_operands(self, raw: object, scalars: dict[str, str], types: dict[str, tuple[str, ...]],
                      fields: dict[str, Field], spaces: dict[str, Space]) -> tuple[Operand, ...]:
        if not isinstance(raw, list):
            raise self.error(f"'operands' must be a list of tables, but got {_tname(raw)}", "operands")
        out = []
        seen = set()
        for item in raw:
            item = self.keys(item, _OPERAND_KEYS, "an operand", "operands")
            name = self.name_ok(self.need(item, "name", str, "an operand", "operands"), "an operand name",
                                "operands")
            where = f"operands.{name}"
            if name in seen:
                raise self.error(f"duplicate operand name '{name}'", where)
            if name in self.const_names or name in types:
                raise self.error(f"operand '{name}' has the name of a parameter, enum value or type variable",
                                 where)
            seen.add(name)
            kind = item.get("kind", "tensor")
            if kind not in OPERAND_KINDS:
                raise self.error(f"unknown operand kind {kind!r}; kinds are {', '.join(OPERAND_KINDS)}",
                                 f"{where}.kind")
            dt = self.need(item, "dtype", str, "an operand", f"{where}.dtype")
            if dt not in types:
                if canonical(dt) is None:
                    raise self.error(f"unknown dtype '{dt}'; dtypes are i8 i16 i32 i64 u8 u16 u32 u64 f16 "
                                     "bf16 f32 f64 bool, or a type variable of 'types'", f"{where}.dtype")
                dt = canonical(dt)
            space = item.get("space")
            space_is_field = False
            if space is not None and not isinstance(space, str):
                raise self.error(f"'space' must be the name of a memory space (or of a field whose enum is "
                                 f"'space'), but got {_tname(space)}", f"{where}.space")
            if space is not None:
                if space in fields and fields[space].enum == "space":
                    space_is_field = True
                elif space not in spaces:
                    raise self.error(f"unknown memory space '{space}'; spaces are "
                                     f"{', '.join(spaces) or 'none'}", f"{where}.space")
            elif kind == "tensor" and spaces:
                raise self.error("a tensor operand needs a 'space'", f"{where}.space")
            shape_raw = self.need(item, "shape", list, "an operand", f"{where}.shape")
            shape = tuple(self.expr(v, f"{where}.shape", scalars=scalars) for v in shape_raw)
            for k, dim in enumerate(shape):
                value = self.constant_value(dim)
                if value is not None and value < 1:
                    raise self.error(f"dimension {k} of the shape is {value}; dimensions must be at least 1",
                                     f"{where}.shape")
            strides = None
            if "strides" in item:
                sr = item["strides"]
                if not isinstance(sr, list) or len(sr) != len(shape):
                    raise self.error(f"'strides' must be a list of {len(shape)} expressions",
                                     f"{where}.strides")
                strides = tuple(self.expr(v, f"{where}.strides", scalars=scalars) for v in sr)
            addr = item.get("addr")
            out.append(Operand(name, kind, dt, shape, space, space_is_field, strides, addr,
                               item.get("doc", "")))
        return tuple(out)

    def check_addr(self, op: Operand, scalars, types, sigs) -> Operand:
        if op.addr is None:
            return op
        addr = self.expr(op.addr, f"operands.{op.name}.addr", scalars=scalars,
                         types={t: v[0] for t, v in types.items()}, tensors=sigs)
        return Operand(op.name, op.kind, op.dtype, op.shape, op.space, op.space_is_field, op.strides, addr,
                       op.doc)

    def load_indices(self, raw: object, scalars, types, operands,
                     fields) -> dict[str, tuple[str, Expr | None]]:
        if not isinstance(raw, dict):
            raise self.error(f"'indices' must be a table of name = kind, but got {_tname(raw)}", "indices")
        out = {}
        for name, spec in raw.items():
            self.name_ok(name, "an index name", "indices")
            if name in scalars or name in types:
                raise self.error(f"index '{name}' has the name of a field, parameter, enum value or type "
                                 "variable", f"indices.{name}")
            extent = None
            if isinstance(spec, dict):
                self.keys(spec, {"kind", "extent"}, f"index '{name}'", f"indices.{name}")
                kind = spec.get("kind")
                if "extent" in spec:
                    extent = self.expr(spec["extent"], f"indices.{name}.extent", scalars=scalars)
            else:
                kind = spec
            if kind not in ("spatial", "reduce"):
                raise self.error(f"index '{name}' must be \"spatial\" or \"reduce\", but got {kind!r}",
                                 f"indices.{name}")
            out[name] = (kind, extent)
        return out

    def load_semantics(self, text: str, operands, indices, scalars, types):
        try:
            statements = parse_statements(text)
        except ParseError as e:
            raise self.parse_error(e, "semantics") from None
        typed = {}
        for binding in type_bindings(types):
            sigs = {op.name: TensorSig(binding.get(op.dtype, op.dtype), op.shape) for op in operands}
            try:
                sem = typecheck(text, statements, tensors=sigs, indices=indices, scalars=scalars,
                                types=binding)
            except ParseError as e:
                suffix = f" (with {', '.join(f'{k} = {v}' for k, v in binding.items())})" if binding else ""
                raise self.parse_error(e, "semantics", suffix) from None
            typed[tuple(sorted(binding.items()))] = sem
        return statements, typed

    def load_constraints(self, raw: object, scalars, types, operands) -> tuple[Constraint, ...]:
        if not isinstance(raw, list):
            raise self.error(f"'constraints' must be a list of tables, but got {_tname(raw)}", "constraints")
        out = []
        sigs = {op.name: TensorSig(types[op.dtype][0] if op.dtype in types else op.dtype, op.shape)
                for op in operands}
        for k, item in enumerate(raw):
            field = f"constraints[{k}]"
            item = self.keys(item, _CONSTRAINT_KEYS, "a constraint", field)
            kind = item.get("kind", "other")
            if kind not in CONSTRAINT_KINDS:
                raise self.error(f"unknown constraint kind {kind!r}; kinds are {', '.join(CONSTRAINT_KINDS)}",
                                 f"{field}.kind")
            rule_text = self.need(item, "rule", str, "a constraint", f"{field}.rule")
            rule = self.expr(rule_text, f"{field}.rule", scalars=scalars,
                             types={t: v[0] for t, v in types.items()}, tensors=sigs)
            if getattr(rule, "dtype", "bool") != "bool":
                raise self.error(f"a rule must be a condition (a comparison or a logical combination), but "
                                 f"{rule_text!r} is {rule.dtype}", f"{field}.rule")
            message = item.get("message", rule_text)
            if not isinstance(message, str):
                raise self.error("'message' must be a string", f"{field}.message")
            out.append(Constraint(kind, rule, rule_text, message))
        return tuple(out)

    def load_timing(self, raw: object, scalars, types, operands) -> Timing:
        raw = self.keys(raw, _TIMING_KEYS, "'timing'", "timing")
        tv = {t: v[0] for t, v in types.items()}
        latency = self.expr(raw["latency"], "timing.latency", scalars=scalars, types=tv) if "latency" in raw \
            else None
        cycles = self.expr(raw["cycles"], "timing.cycles", scalars=scalars, types=tv) if "cycles" in raw \
            else None
        for name, e in (("latency", latency), ("cycles", cycles)):
            value = self.constant_value(e)
            if value is not None and value < 0:
                raise self.error(f"'{name}' must not be negative, but it is {value}", f"timing.{name}")
        unit = raw.get("unit")
        if unit is not None and not isinstance(unit, str):
            raise self.error("'unit' must be a string", "timing.unit")
        return Timing(unit, latency, cycles, raw.get("doc", ""))

    def constant_value(self, e: Expr | None) -> int | float | None:
        """``e``'s value where it depends on parameters only (None where it reads fields or operands)."""
        if e is None:
            return None
        try:
            return evaluate(e, ScalarEnv({**self.enum_codes, **self.params}))
        except (ExecError, KeyError, TypeError):
            return None

    def check_decodable(self, instructions: dict[str, Instruction], insn_bits: int | None) -> None:
        """Two encodable instructions must differ in some fixed bit, or a word could decode to both."""
        coded = [(i, fixed_pattern(i.format, i.fixed)) for i in instructions.values() if i.format is not None]
        for insn, _ in coded:
            if insn_bits is not None and insn.format.bits > insn_bits:
                raise self.error(f"format '{insn.format.name}' is {insn.format.bits} bits, wider than "
                                 f"insn_bits = {insn_bits}", "format", where=insn.name)
            if not insn.fixed:
                raise self.error("an encodable instruction needs 'fixed' field values that identify it",
                                 "fixed", where=insn.name)
        for k, (a, (ma, va)) in enumerate(coded):
            for b, (mb, vb) in coded[k + 1:]:
                if not (va ^ vb) & ma & mb:
                    raise self.error(f"instructions '{a.name}' and '{b.name}' cannot be told apart: their "
                                     "fixed fields agree on every shared bit", "fixed", where=b.name)

    def load_data(self, raw: object, formats: dict[str, Format]) -> dict[str, DataKind]:
        if not isinstance(raw, dict):
            raise self.error("[data] must be a table", "data", where="table [data]")
        out = {}
        for dname, body in raw.items():
            self.where = f"data '{dname}'"
            self.name_ok(dname, "a data kind name")
            body = self.keys(body, _DATA_KEYS, f"data '{dname}'")
            fname = self.need(body, "format", str, f"data '{dname}'")
            if fname not in formats:
                raise self.error(f"unknown format '{fname}'", "format")
            out[dname] = DataKind(dname, body.get("summary", ""), formats[fname])
        return out


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _describe_types(types) -> str:
    names = {int: "an integer", str: "a string", list: "a list", dict: "a table", bool: "true or false"}
    return " or ".join(names.get(t, t.__name__) for t in _tuple(types))


def _tname(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)
