"""Reading the values of a spec's TOML with checks: every problem an ``ISASpecError`` naming the file, the
instruction (or table) and the field.

``SpecReader`` holds what the loader knows while it reads (the file, the parameter overrides, the constants
seen so far) and the checked reads every part of the loader uses: a table with known keys, a value of a
type, an identifier, a scalar expression, a constant expression over the parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from isa.errors import ExecError, ISASpecError, ParseError
from isa.lang.parser import parse_expr
from isa.lang.scalar import ScalarEnv, evaluate
from isa.lang.tree import Expr, Num
from isa.lang.typecheck import TensorSig, check_scalar

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


class SpecReader:
    """The state of one load and the checked reads of its values (every loader part derives from it)."""

    def __init__(self, text: str, file: str, params: Mapping[str, int] | None) -> None:
        self.text = text
        self.file = file
        self.overrides = dict(params or {})
        self.where: str | None = None  # the instruction (or "table X") being loaded

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
            raise self.error(f"{what} must be a table, but got {type_name(table)}", field)
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
            raise self.error(f"'{key}' must be {_describe_types(types)}, but got {type_name(value)}",
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
            raise self.error(f"expected an integer or an expression string, but got {type_name(value)}",
                             field)
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


    def constant_value(self, e: Expr | None) -> int | float | None:
        """``e``'s value where it depends on parameters only (None where it reads fields or operands)."""
        if e is None:
            return None
        try:
            return evaluate(e, ScalarEnv({**self.enum_codes, **self.params}))
        except (ExecError, KeyError, TypeError):
            return None


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _describe_types(types) -> str:
    names = {int: "an integer", str: "a string", list: "a list", dict: "a table", bool: "true or false"}
    return " or ".join(names.get(t, t.__name__) for t in _tuple(types))


def type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)
