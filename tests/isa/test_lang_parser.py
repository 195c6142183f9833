"""The parser of the ISA expression language: text in, tree out, and every malformed text reported by column.

Expected trees are written by hand with the node constructors (``pos`` takes no part in equality), so these
tests say what the grammar is without golden files.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.errors import ParseError
from isa.lang.parser import parse_expr, parse_statements
from isa.lang.tree import Access, Assign, Binary, Call, Expr, Name, Num, Unary, to_text

x, y, z = Name("x"), Name("y"), Name("z")
i, j, k = Name("i"), Name("j"), Name("k")


def B(op: str, lhs: Expr, rhs: Expr) -> Binary:
    return Binary(op, lhs, rhs)


def A(tensor: str, *indices: Expr) -> Access:
    return Access(tensor, tuple(indices))


def kinds(e: Expr) -> str:
    """The tree and the Python type of each literal (Num(1) == Num(1.0), but they are different literals)."""
    return repr(e) + repr([type(n.value).__name__ for n in _nums(e)])


def _nums(e: Expr):
    from isa.lang.tree import walk

    return [n for n in walk(e) if isinstance(n, Num)]


# ------------------------------------------------------------------------------------------ precedence

@pytest.mark.parametrize(("text", "tree"), [
    ("x + y * z", B("+", x, B("*", y, z))),
    ("x * y + z", B("+", B("*", x, y), z)),
    ("x - y // z", B("-", x, B("//", y, z))),
    ("x << y + z", B("<<", x, B("+", y, z))),
    ("x + y >> z", B(">>", B("+", x, y), z)),
    ("x & y << z", B("&", x, B("<<", y, z))),
    ("x ^ y & z", B("^", x, B("&", y, z))),
    ("x | y ^ z", B("|", x, B("^", y, z))),
    ("x & y | z", B("|", B("&", x, y), z)),
    ("x < y | z", B("<", x, B("|", y, z))),
    ("x + 1 == y * 2", B("==", B("+", x, Num(1)), B("*", y, Num(2)))),
    ("not x < y", Unary("not", B("<", x, y))),
    ("not x and y", B("and", Unary("not", x), y)),
    ("x or y and z", B("or", x, B("and", y, z))),
    ("x and y or z", B("or", B("and", x, y), z)),
    ("x < y and y >= z", B("and", B("<", x, y), B(">=", y, z))),
    ("not not x", Unary("not", Unary("not", x))),
    ("-x * y", B("*", Unary("-", x), y)),
    ("~x + y", B("+", Unary("~", x), y)),
    ("-(x + y)", Unary("-", B("+", x, y))),
    ("(x + y) * z", B("*", B("+", x, y), z)),
    ("x - -y", B("-", x, Unary("-", y))),
    ("--x", Unary("-", Unary("-", x))),
    ("+x", x),
    ("x == (y < z)", B("==", x, B("<", y, z))),
    ("((x))", x),
])
def test_precedence_follows_the_readme_table(text, tree):
    assert parse_expr(text) == tree


@pytest.mark.parametrize("level", [("+", "-"), ("*", "/", "//", "%"), ("<<", ">>"), ("&",), ("|",), ("^",),
                                   ("and",), ("or",)])
def test_binary_operators_of_one_level_associate_to_the_left(level):
    for op1 in level:
        for op2 in level:
            assert parse_expr(f"x {op1} y {op2} z") == B(op2, B(op1, x, y), z), (op1, op2)


@pytest.mark.parametrize(("text", "tree"), [
    ("a[4*i + j, k]", A("a", B("+", B("*", Num(4), i), j), k)),
    ("a[b[i]]", A("a", A("b", i))),
    ("max(x, y + 1)", Call("max", (x, B("+", y, Num(1))))),
    ("select(x < 0, 0, x)", Call("select", (B("<", x, Num(0)), Num(0), x))),
    ("sum(j, k, a[j, k])", Call("sum", (j, k, A("a", j, k)))),
    ("f32(a[i]) * 2", B("*", Call("f32", (A("a", i),)), Num(2))),
    ("f()", Call("f", ())),
    ("-a[i]", Unary("-", A("a", i))),
])
def test_accesses_and_calls(text, tree):
    assert parse_expr(text) == tree


def test_positions_are_zero_based_offsets_of_the_operator_or_name():
    e = parse_expr("x + max(a[i], 3)")
    assert e.pos == 2
    assert e.rhs.pos == 4
    assert e.rhs.args[0].pos == 8
    assert e.rhs.args[1].pos == 14
    assert parse_expr("  -5").pos == 2  # a folded minus keeps the minus sign's position


# ------------------------------------------------------------------------------------------ literals

@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("42", 42), ("1_000", 1000), ("0x40", 64), ("0XfF", 255), ("0x_ff", 255),
    ("0xFFFF_FFFF", 2**32 - 1), ("0b1010", 10), ("0B1_0000_0000", 256), ("00", 0),
])
def test_integer_literals(text, value):
    e = parse_expr(text)
    assert e == Num(value)
    assert type(e.value) is int


@pytest.mark.parametrize(("text", "value"), [
    ("1.5", 1.5), (".5", 0.5), ("2.", 2.0), ("1e3", 1000.0), ("2.5e-3", 0.0025), ("1E+2", 100.0),
    ("0.0", 0.0),
])
def test_float_literals(text, value):
    e = parse_expr(text)
    assert e == Num(value)
    assert type(e.value) is float


@pytest.mark.parametrize(("text", "tree"), [
    ("-3", Num(-3)),
    ("- 3", Num(-3)),
    ("-0x10", Num(-16)),
    ("-1.5", Num(-1.5)),
    ("-(3)", Num(-3)),
    ("--3", Num(3)),
    ("-3 * x", B("*", Num(-3), x)),
    ("x - 3", B("-", x, Num(3))),     # a binary minus is not a literal's sign
    ("2 - -3", B("-", Num(2), Num(-3))),
    ("~3", Unary("~", Num(3))),       # only '-' folds
    ("-x", Unary("-", x)),
])
def test_unary_minus_folds_into_literals(text, tree):
    assert kinds(parse_expr(text)) == kinds(tree)


# ------------------------------------------------------------------------------------------ statements

def test_statements_are_separated_by_semicolons_and_new_lines():
    sts = parse_statements("d[i] = a[i]; e[i] += b[i]\nf[i] = 1")
    assert sts == (
        Assign(A("d", i), "=", A("a", i)),
        Assign(A("e", i), "+=", A("b", i)),
        Assign(A("f", i), "=", Num(1)),
    )


def test_empty_statements_blank_lines_and_comments_are_ignored():
    text = """
    # the accumulation of a matrix product
    ;; acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])   # k is summed; ';' in a comment is text

    ;
    """
    sts = parse_statements(text)
    assert len(sts) == 1
    assert sts[0].op == "+="
    assert sts[0].target == A("acc", Name("b"), Name("o"))
    assert parse_statements("") == ()
    assert parse_statements("# only a comment\n\n") == ()


def test_text_inside_brackets_may_span_lines():
    sts = parse_statements("d[i] = max(\n    a[i],   # first\n    b[i]\n)\ne[\n i\n] = (a[i]\n + b[i])")
    assert sts == (
        Assign(A("d", i), "=", Call("max", (A("a", i), A("b", i)))),
        Assign(A("e", i), "=", B("+", A("a", i), A("b", i))),
    )


def test_parse_expr_accepts_surrounding_new_lines():
    assert parse_expr("\n  x + 1  \n") == B("+", x, Num(1))


def test_assign_prints_as_it_parses():
    (s,) = parse_statements("acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])")
    assert str(s) == "acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])"
    assert parse_statements(str(s)) == (s,)


# ------------------------------------------------------------------------------------------ errors

@pytest.mark.parametrize(("text", "col", "message"), [
    ("x + ", 5, "expected a number, a name or '(', but got the end of the text"),
    ("x + * y", 5, "expected a number, a name or '(', but got '*'"),
    ("(x + y", 7, "expected ')', but got the end of the text"),
    ("a[]", 1, "tensor 'a' needs at least one index"),
    ("x < y < z", 7, "comparisons do not chain"),
    ("x $ y", 3, "unexpected character '$'"),
    ("max(x y)", 7, "expected ',' or ')', but got 'y'"),
    ("a[i, j", 7, "expected ',' or ']', but got the end of the text"),
    ("x y", 3, "expected the end of the expression, but got 'y'"),
    ("x; y", 2, "expected the end of the expression, but got a new statement"),
    ("", 1, "expected an expression, but the text is empty"),
    ("max(x; y)", 6, "';' inside brackets"),
    ("x + 0x_", 5, "invalid integer literal '0x_'"),
    ("007", 1, "invalid integer literal '007'"),
    ("2 * 1e999", 5, "float literal '1e999' is too large"),
    ("a.b", 2, "expected the end of the expression, but got '.'"),
])
def test_expression_errors_name_the_column(text, col, message):
    with pytest.raises(ParseError) as info:
        parse_expr(text)
    err = info.value
    assert (err.line, err.col) == (1, col)
    assert message in err.detail
    assert str(err).startswith(f"col {col}: ")


@pytest.mark.parametrize(("text", "line", "col", "message"), [
    ("d[i] a[i]", 1, 6, "expected '=' or '+=', but got 'a'"),
    ("x = 1", 1, 1, "the left side of an assignment must be a tensor element like 'd[i]'"),
    ("d[i] = 1 2", 1, 10, "expected the end of the statement, but got '2'"),
    ("d[i] = a[i]\ne[i] = b[i] +\nf[i] = 0", 2, 14,
     "expected a number, a name or '(', but got the end of the line"),
    ("d[i] = a[i]\n  e[i] == 2", 2, 3, "the left side of an assignment must be a tensor element"),
    ("d[i] = a[i]\n  e[i] -= 2", 2, 9, "expected a number, a name or '(', but got '='"),
    ("d[i] = a[i]\n+ b[i]", 2, 7, "expected '=' or '+=', but got the end of the text"),
    ("d[i] = 1\n\n   e[i] = (1 +\n 2;)", 4, 3, "';' inside brackets"),
    ("d[i] = 1\ne[i] = @", 2, 8, "unexpected character '@'"),
])
def test_statement_errors_name_the_line_and_column(text, line, col, message):
    with pytest.raises(ParseError) as info:
        parse_statements(text)
    err = info.value
    assert (err.line, err.col) == (line, col)
    assert message in err.detail
    where = f"line {line}, col {col}" if line > 1 else f"col {col}"
    assert str(err).startswith(where + ": ")
    assert err.text == text.split("\n")[line - 1]
    assert err.pointer() == err.text + "\n" + " " * (col - 1) + "^"


def test_deep_nesting_is_a_parse_error_not_a_recursion_error():
    with pytest.raises(ParseError, match="nested too deeply"):
        parse_expr("(" * 2000 + "1" + ")" * 2000)
    with pytest.raises(ParseError, match="nested too deeply"):
        parse_statements("d[i] = " + "-" * 5000 + "x")


def test_non_text_is_a_type_error():
    with pytest.raises(TypeError, match="expected a string"):
        parse_expr(3)
    with pytest.raises(TypeError, match="expected a string"):
        parse_statements(None)


_FUZZ_ALPHABET = "xyad01_.9eE[](),;+-*/%<>=!&|^~ \n#\t"


@settings(max_examples=300)
@given(st.text(alphabet=_FUZZ_ALPHABET, max_size=30)
       | st.lists(st.sampled_from(["x", "a[", "]", "(", ")", ",", "+", "-", "*", "//", "<<", "==", "not ",
                                   " and ", "0x1", "1.5", "max(", "sum(", ";", "\n", "=", "+=", "# c\n"]),
                  max_size=15).map("".join))
def test_any_text_parses_or_raises_parse_error(text):
    for parse in (parse_expr, parse_statements):
        try:
            parse(text)
        except ParseError as e:
            assert 1 <= e.col <= len(e.text) + 1
            assert 1 <= e.line <= text.count("\n") + 1


# ------------------------------------------------------------------------------------------ round trip

_NAMES = st.sampled_from(["x", "y", "n", "i", "k_2", "T", "NMEM"])
_LEAVES = st.one_of(
    _NAMES.map(Name),
    st.integers(min_value=-(2**40), max_value=2**70).map(Num),
    st.floats(min_value=-1e12, max_value=1e30, allow_nan=False, allow_infinity=False).map(Num),
)
_BINOPS = ["or", "and", "==", "!=", "<", "<=", ">", ">=", "|", "^", "&", "<<", ">>", "+", "-", "*", "/",
           "//", "%"]


def _unary(args):
    op, operand = args
    if op == "-" and isinstance(operand, Num):  # the parser folds this into the literal
        return Num(-operand.value)
    return Unary(op, operand)


def _extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(["-", "~", "not"]), children).map(_unary),
        st.builds(Binary, st.sampled_from(_BINOPS), children, children),
        st.builds(Call, st.sampled_from(["max", "select", "f32", "sum", "T"]),
                  st.lists(children, max_size=3).map(tuple)),
        st.builds(Access, st.sampled_from(["a", "acc"]),
                  st.lists(children, min_size=1, max_size=3).map(tuple)),
    )


EXPRS = st.recursive(_LEAVES, _extend, max_leaves=12)


@settings(max_examples=300)
@given(EXPRS)
def test_to_text_then_parse_gives_an_equal_tree(tree):
    text = to_text(tree)
    back = parse_expr(text)
    assert back == tree, text
    assert kinds(back) == kinds(tree)
    assert to_text(back) == text


@settings(max_examples=100)
@given(st.lists(st.tuples(st.builds(Access, st.just("d"), st.lists(EXPRS, min_size=1, max_size=2).map(tuple)),
                          st.sampled_from(["=", "+="]), EXPRS), min_size=1, max_size=3),
       st.sampled_from(["; ", "\n", " ;\n# note\n"]))
def test_statements_print_and_parse_back(parts, sep):
    sts = tuple(Assign(t, op, v) for t, op, v in parts)
    assert parse_statements(sep.join(str(s) for s in sts)) == sts
