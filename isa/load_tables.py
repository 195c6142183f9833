"""Loading the tables of a spec other than its instructions: [params], [derived], [enums], [spaces],
[formats] with their fields, and [data]."""

from __future__ import annotations

from types import MappingProxyType

from isa.dtypes import canonical
from isa.encoding import LayoutError, place_fields
from isa.lang.tree import Name, walk
from isa.load_values import SpecReader, type_name
from isa.spec import FIELD_KINDS, DataKind, Enum, Field, Format, Space

_ENUM_KEYS = {"values", "summary"}
_SPACE_KEYS = {"bytes", "id", "unit_bytes", "summary"}
_FORMAT_KEYS = {"bits", "unit_bits", "fields", "summary"}
_FIELD_KEYS = {"name", "bits", "lsb", "signed", "kind", "enum", "default", "max", "doc"}
_DATA_KEYS = {"format", "summary"}


class TableLoader(SpecReader):
    """The loaders of the tables besides [instructions]; each returns the table's spec objects."""

    def load_params(self, raw: object, ranges: object = None) -> dict[str, int]:
        """The parameters (``[params]``) with their overrides applied; each value, the spec's own and an
        override alike, checked against the parameter's ``[param_ranges]`` entry (``{ min = .., max = .. }``,
        either bound optional), which says what values mean something to the machine."""
        self.where = "table [params]"
        if not isinstance(raw, dict):
            raise self.error("[params] must be a table of integers", "params")
        bounds = self.load_param_ranges({} if ranges is None else ranges, raw)
        self.where = "table [params]"
        for key, value in raw.items():
            self.name_ok(key, "a parameter name", key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"parameter '{key}' must be an integer, but got {type_name(value)}", key)
            self.in_range(key, value)
            self.within(key, value, bounds, "")
        for key, value in self.overrides.items():
            if key not in raw:
                raise self.error(f"cannot override unknown parameter '{key}'; parameters are "
                                 f"{', '.join(raw) or 'none'}", key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"override of '{key}' must be an integer, but got {type_name(value)}", key)
            self.in_range(key, value)
            self.within(key, value, bounds, "override of ")
        self.params.update(raw)
        self.params.update(self.overrides)
        self.defaults = dict(raw)
        self.roots: dict[str, frozenset[str]] = {k: frozenset({k}) for k in raw}
        self.const_names.update({k: "param" for k in raw})
        return dict(raw)

    def load_param_ranges(self, raw: object, params: dict) -> dict[str, tuple[int | None, int | None]]:
        """``[param_ranges]``: per parameter, the least and greatest values it may take."""
        self.where = "table [param_ranges]"
        if not isinstance(raw, dict):
            raise self.error("[param_ranges] must be a table of { min = .., max = .. } tables",
                             "param_ranges")
        out = {}
        for key, body in raw.items():
            if key not in params:
                raise self.error(f"range of unknown parameter '{key}'; parameters are "
                                 f"{', '.join(params) or 'none'}", key)
            table = self.keys(body, {"min", "max"}, f"the range of '{key}'", key)
            lo, hi = (table.get(b) for b in ("min", "max"))
            for bound in (lo, hi):
                if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
                    raise self.error(f"the range of '{key}' must have integer bounds, but got "
                                     f"{type_name(bound)}", key)
            if lo is not None and hi is not None and lo > hi:
                raise self.error(f"the range of '{key}' is empty: min {lo} > max {hi}", key)
            out[key] = (lo, hi)
        return out

    def within(self, key: str, value: int, bounds: dict, what: str) -> None:
        """ISASpecError when ``value`` of parameter ``key`` is outside its declared range."""
        lo, hi = bounds.get(key, (None, None))
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            shown = " and ".join(f"{w} {b}" for w, b in (("at least", lo), ("at most", hi)) if b is not None)
            raise self.error(f"{what}'{key}' = {value} is outside its range: it must be {shown} "
                             f"([param_ranges])", key)

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
            self.roots[key] = self.param_roots(value, key)

    def param_roots(self, value: object, field: str) -> frozenset[str]:
        """The ``[params]`` an integer or expression over parameters depends on, through derived ones."""
        if not isinstance(value, str):
            return frozenset()
        names = {n.id for n in walk(self.expr(value, field, scalars=self.const_names)) if isinstance(n, Name)}
        roots: set[str] = set()
        for name in names:
            roots |= self.roots.get(name, {name} if name in self.defaults else set())
        return frozenset(roots)

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

    def layout_hint(self, specs: list) -> str:
        """Where overridden parameters set field widths: which fields and which parameters to change with
        them (or a spec whose formats have more bits)."""
        changed = {k for k, v in self.overrides.items() if self.defaults.get(k) != v}
        grown = [(name, self.param_roots(item["bits"], name)) for name, _, _, item in specs]
        grown = [(name, roots) for name, roots in grown if roots & changed]
        if not grown:
            return ""
        roots = set().union(*(r for _, r in grown))
        together = sorted(roots - changed)
        shown = ", ".join(f"{k} = {self.overrides[k]}" for k in sorted(roots & changed))
        return (f" (the widths of fields {', '.join(n for n, _ in grown)} follow {shown}, and no longer "
                f"fit: set {' or '.join(together) if together else 'other values'} with it (smaller buffers, "
                f"say), or use a spec whose formats have more bits)")

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
            raise self.error(str(e) + self.layout_hint(specs), e.field) from None
        fields = []
        for (fname, bits, _, item), lsb in zip(specs, lsbs, strict=True):
            kind = item.get("kind", "int")
            if kind not in FIELD_KINDS:
                raise self.error(f"unknown field kind {kind!r}; kinds are {', '.join(FIELD_KINDS)}", fname)
            signed = item.get("signed", False)
            if not isinstance(signed, bool):
                raise self.error(f"'signed' must be true or false, but got {type_name(signed)}", fname)
            enum = item.get("enum")
            if kind in ("enum", "type") and enum is None:
                raise self.error(f"a field of kind '{kind}' needs 'enum'", fname)
            if enum is not None:
                if not isinstance(enum, str):
                    raise self.error(f"'enum' must be the name of an enum, but got {type_name(enum)}", fname)
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
