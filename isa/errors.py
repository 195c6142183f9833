"""Errors raised by isa/: every one names where the problem is (file, instruction, field, column or index)."""

from __future__ import annotations

import re

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


class ISAError(Exception):
    """Base class of every error isa/ raises on bad input."""


class ISASpecError(ISAError):
    """A spec (TOML file or dataclasses) is malformed: names file, instruction and field, and the broken rule.

    ``instruction`` is an instruction's name, or for a problem outside instructions the place, like
    "format 'vec'" or "table [params]"; ``errors`` lists every error found when there were several.
    """

    def __init__(self, message: str, *, file: str = "<spec>", instruction: str | None = None,
                 field: str | None = None, col: int | None = None, line: int | None = None,
                 expr_line: int | None = None) -> None:
        self.file = file
        self.instruction = instruction  # an instruction name, or the place outside one: "format 'vec'"
        self.field = field
        self.col = col
        self.line = line  # the line in the file, where known (TOML syntax errors)
        self.expr_line = expr_line  # the line of a multi-line expression text (semantics) that ``col`` is in
        self.detail = message
        where = [file if line is None else f"{file}:{line}"]
        if instruction is not None:
            # places outside instructions ("format 'vec'", "table [params]") are printed as they are
            where.append(f"instruction '{instruction}'" if _IDENT.match(instruction) else instruction)
        if field is not None:
            where.append(f"field '{field}'")
        if col is not None:
            where.append(f"line {expr_line}, col {col}" if expr_line is not None else f"col {col}")
        self.errors: list[ISASpecError] = [self]
        super().__init__(f"{': '.join(where)}: {message}")

    @classmethod
    def collect(cls, errors: list[ISASpecError]) -> ISASpecError:
        """One error standing for several: its message lists them all, ``errors`` holds each one."""
        if len(errors) == 1:
            return errors[0]
        first = errors[0]
        combined = cls(first.detail, file=first.file, instruction=first.instruction, field=first.field,
                       col=first.col, line=first.line, expr_line=first.expr_line)
        combined.errors = list(errors)
        combined.args = (f"{len(errors)} errors in the spec:\n" + "\n".join(str(e) for e in errors),)
        return combined


class ParseError(ISAError):
    """The expression language could not parse a text; ``col`` is 1-based."""

    def __init__(self, message: str, text: str, col: int, line: int = 1) -> None:
        self.detail = message
        self.text = text
        self.col = col
        self.line = line
        where = f"line {line}, col {col}" if line > 1 else f"col {col}"
        super().__init__(f"{where}: {message}")

    def pointer(self) -> str:
        """The offending text with a caret under the column (for multi-line error output)."""
        return f"{self.text}\n{' ' * (self.col - 1)}^"


class ExecError(ISAError):
    """Executing semantics failed on the given operands (out-of-range index, bad shape, division by zero)."""


class EncodingError(ISAError):
    """A field value does not fit its bit field, or a word decodes to no instruction."""


class AsmError(ISAError):
    """Assembly text is malformed; names the line number and the problem."""

    def __init__(self, message: str, *, line: int | None = None, source: str = "<asm>") -> None:
        self.detail = message
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")
