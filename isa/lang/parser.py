"""Tokenizer and recursive-descent parser of the ISA expression language: text in, tree out, nothing run.

    parse_expr("4*i + j")                                  -> Expr
    parse_statements("d[i] = c[i] + sum(j, a[4*i+j])")     -> tuple[Assign, ...]

Errors are ``ParseError`` with a 1-based column (and the line, for multi-line text) and what was expected.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from isa.errors import ParseError
from isa.lang.tree import Access, Assign, Binary, Call, Expr, Name, Num, Unary

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+|\#[^\n]*)
  | (?P<nl>\n|;)
  | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>//|<<|>>|<=|>=|==|!=|\+=|[-+*/%&|^~<>=()\[\],.])
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "int", "float", "name", "op", "kw", "nl", "end"
    text: str
    pos: int


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens; newlines inside brackets are dropped."""
    tokens: list[Token] = []
    depth = 0
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _error(text, pos, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup
        tok = m.group()
        if kind == "name" and tok in _KEYWORDS:
            kind = "kw"
        if kind == "op" and tok in "([":
            depth += 1
        elif kind == "op" and tok in ")]":
            depth -= 1
        if kind == "nl" and depth > 0:
            if tok == ";":
                raise _error(text, pos, "';' inside brackets")
            kind = "ws"
        if kind != "ws":
            tokens.append(Token(kind, tok, pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def _error(text: str, pos: int, message: str) -> ParseError:
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    line_text = text[line_start:] if line_end < 0 else text[line_start:line_end]
    line_no = text.count("\n", 0, pos) + 1
    return ParseError(message, line_text, pos - line_start + 1, line_no)


def _describe(tok: Token) -> str:
    if tok.kind == "end":
        return "the end of the text"
    if tok.kind == "nl":
        return "a new statement" if tok.text == ";" else "the end of the line"
    return f"'{tok.text}'"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    # -- token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, *texts: str) -> bool:
        return self.tok.kind in ("op", "kw") and self.tok.text in texts

    def expect(self, text: str, what: str | None = None) -> Token:
        if not self.at(text):
            raise self.error(f"expected {what or repr(text)}, but got {_describe(self.tok)}")
        return self.advance()

    def error(self, message: str, pos: int | None = None) -> ParseError:
        return _error(self.text, self.tok.pos if pos is None else pos, message)

    def guarded(self, parse):
        """``parse()``, with Python's recursion limit (deeply nested text) reported as a ParseError."""
        try:
            return parse()
        except RecursionError:
            raise self.error("the expression is nested too deeply") from None

    # -- statements
    def statements(self) -> tuple[Assign, ...]:
        out = []
        while True:
            while self.tok.kind == "nl":
                self.advance()
            if self.tok.kind == "end":
                return tuple(out)
            out.append(self.statement())
            if self.tok.kind not in ("nl", "end"):
                raise self.error(f"expected the end of the statement, but got {_describe(self.tok)}")

    def statement(self) -> Assign:
        start = self.tok.pos
        target = self.expr()
        if not isinstance(target, Access):
            raise self.error("the left side of an assignment must be a tensor element like 'd[i]'", start)
        if not self.at("=", "+="):
            raise self.error(f"expected '=' or '+=', but got {_describe(self.tok)}")
        op = self.advance().text
        return Assign(target, op, self.expr(), pos=start)

    # -- expressions, lowest precedence first
    def expr(self) -> Expr:
        return self.or_()

    def or_(self) -> Expr:
        lhs = self.and_()
        while self.at("or"):
            tok = self.advance()
            lhs = Binary("or", lhs, self.and_(), pos=tok.pos)
        return lhs

    def and_(self) -> Expr:
        lhs = self.not_()
        while self.at("and"):
            tok = self.advance()
            lhs = Binary("and", lhs, self.not_(), pos=tok.pos)
        return lhs

    def not_(self) -> Expr:
        if self.at("not"):
            tok = self.advance()
            return Unary("not", self.not_(), pos=tok.pos)
        return self.comparison()

    def comparison(self) -> Expr:
        lhs = self.binary(0)
        if self.at("==", "!=", "<", "<=", ">", ">="):
            tok = self.advance()
            lhs = Binary(tok.text, lhs, self.binary(0), pos=tok.pos)
            if self.at("==", "!=", "<", "<=", ">", ">="):
                raise self.error("comparisons do not chain; write 'a < b and b < c'")
        return lhs

    _LEVELS = (("|",), ("^",), ("&",), ("<<", ">>"), ("+", "-"), ("*", "/", "//", "%"))

    def binary(self, level: int) -> Expr:
        if level == len(self._LEVELS):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.at(*self._LEVELS[level]):
            tok = self.advance()
            lhs = Binary(tok.text, lhs, self.binary(level + 1), pos=tok.pos)
        return lhs

    def unary(self) -> Expr:
        if self.at("-", "~", "+"):
            tok = self.advance()
            operand = self.unary()
            if tok.text == "+":
                return operand
            if tok.text == "-" and isinstance(operand, Num):
                return Num(-operand.value, pos=tok.pos)
            return Unary(tok.text, operand, pos=tok.pos)
        return self.postfix()

    def postfix(self) -> Expr:
        tok = self.tok
        if tok.kind == "int":
            self.advance()
            try:
                value = int(tok.text.replace("_", ""), 0)
            except ValueError:  # '0x_', '0b_', '007' (a leading zero would read as octal in C)
                raise self.error(f"invalid integer literal '{tok.text}'", tok.pos) from None
            return Num(value, pos=tok.pos)
        if tok.kind == "float":
            self.advance()
            value = float(tok.text)
            if value == math.inf:
                raise self.error(f"float literal '{tok.text}' is too large", tok.pos)
            return Num(value, pos=tok.pos)
        if self.at("("):
            self.advance()
            inner = self.expr()
            self.expect(")", "')'")
            return inner
        if tok.kind != "name":
            raise self.error(f"expected a number, a name or '(', but got {_describe(tok)}")
        self.advance()
        if self.at("("):
            self.advance()
            args = self.arguments(")")
            return Call(tok.text, args, pos=tok.pos)
        if self.at("["):
            self.advance()
            indices = self.arguments("]")
            if not indices:
                raise self.error(f"tensor '{tok.text}' needs at least one index", tok.pos)
            return Access(tok.text, indices, pos=tok.pos)
        return Name(tok.text, pos=tok.pos)

    def arguments(self, close: str) -> tuple[Expr, ...]:
        args: list[Expr] = []
        if self.at(close):
            self.advance()
            return ()
        while True:
            args.append(self.expr())
            if self.at(","):
                self.advance()
                continue
            self.expect(close, f"',' or '{close}'")
            return tuple(args)


def parse_expr(text: str) -> Expr:
    """Parse one expression (the whole text)."""
    if not isinstance(text, str):
        raise TypeError(f"parse_expr: expected a string, but got {type(text).__name__}")
    p = _Parser(text)
    while p.tok.kind == "nl" and p.tok.text == "\n":
        p.advance()
    if p.tok.kind == "end":
        raise p.error("expected an expression, but the text is empty")
    e = p.guarded(p.expr)
    while p.tok.kind == "nl" and p.tok.text == "\n":
        p.advance()
    if p.tok.kind != "end":
        raise p.error(f"expected the end of the expression, but got {_describe(p.tok)}")
    return e


def parse_statements(text: str) -> tuple[Assign, ...]:
    """Parse semantics: assignments separated by ';' or new lines (an empty text has no statements)."""
    if not isinstance(text, str):
        raise TypeError(f"parse_statements: expected a string, but got {type(text).__name__}")
    p = _Parser(text)
    return p.guarded(p.statements)
