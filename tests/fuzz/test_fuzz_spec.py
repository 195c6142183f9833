"""Fuzz the spec loader (isa/loader.py) and the expression language (isa/lang): only typed errors come out.

Run the full fuzzers with ``pytest -m fuzz tests/fuzz`` (2,000 examples each, random); the default run takes a
small derandomized slice of the same tests (tests/fuzz/conftest.py). A loaded spec either loads or raises
``ISASpecError`` naming the file; an expression either parses or raises ``ParseError``, type checks or raises
``ParseError``, and evaluates or raises ``ExecError``.
"""

from __future__ import annotations

import copy
import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

import isa
from isa.errors import ExecError, ISASpecError, ParseError
from isa.lang.parser import parse_expr, parse_statements
from isa.lang.scalar import ScalarEnv, compile_scalar, evaluate
from isa.lang.tree import Num
from isa.lang.typecheck import TensorSig, check_scalar, typecheck
from isa.loader import SPECS_DIR

VALID_MINIMAL = Path(__file__).resolve().parents[1] / "isa" / "valid_minimal.toml"
BASES = {p.stem: tomllib.loads(p.read_text()) for p in [*sorted(SPECS_DIR.glob("*.toml")), VALID_MINIMAL]}
BASE_TEXTS = {p.stem: p.read_text() for p in [*sorted(SPECS_DIR.glob("*.toml")), VALID_MINIMAL]}

# ------------------------------------------------------------------------------------------ expressions
NAMES = ["i", "j", "k", "n", "N", "LOG", "x", "y", "T", "a", "r", "dst", "ENUMV", "f32", "i8", "u8", "bool",
         "undefined", "_", "and", "or", "not"]
FUNCS = ["min", "max", "abs", "ceil_div", "log2", "bytes", "capacity", "select", "sum", "exp", "tanh", "sqrt",
         "log", "i8", "i32", "u8", "f16", "f32", "bool", "clamp", "nope"]
BINOPS = ["+", "-", "*", "/", "//", "%", "<<", ">>", "&", "|", "^", "==", "!=", "<", "<=", ">", ">=", "and",
          "or", "=", "+=", ","]
NUMBERS = st.one_of(
    st.integers(-20, 70).map(str),
    st.sampled_from(["0", "1", "64", "65", "0x40", "0b101", "1_000", "0x_", "007", "9" * 30, "9" * 5000,
                     str(2**63), str(2**64), "1.5", ".5", "1e308", "1e309", "2.", "1e-400", "0.0"]),
)
ATOMS = st.one_of(NUMBERS, st.sampled_from(NAMES),
                  st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True))


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, st.sampled_from(BINOPS), inner).map(" ".join),
        st.tuples(st.sampled_from(["-", "~", "not ", "+", "--"]), inner).map("".join),
        inner.map(lambda s: f"({s})"),
        st.tuples(st.sampled_from(FUNCS), st.lists(inner, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(st.sampled_from(["a", "r", "dst", "x", "zz"]), st.lists(inner, max_size=3)).map(
            lambda t: f"{t[0]}[{', '.join(t[1])}]"),
    )


GRAMMAR = st.recursive(ATOMS, _compound, max_leaves=12)
EXPR_TEXT = st.one_of(
    GRAMMAR,
    GRAMMAR.map(lambda s: s + ";" + s),
    GRAMMAR.map(lambda s: f"dst[i] = {s}"),
    GRAMMAR.map(lambda s: f"dst[i] += {s}\ndst[i] = {s}"),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
    st.text(alphabet="()[]+-*/%<>=!&|^~,.;#\n \t0123456789xabijkN_", max_size=40),
    st.integers(1, 3000).map(lambda n: "(" * n + "1" + ")" * n),
    st.integers(1, 3000).map(lambda n: "-" * n + "1"),
    st.integers(1, 3000).map(lambda n: "a[" * n + "0" + "]" * n),
)

SCALARS = {"N": "param", "LOG": "param", "x": "field", "y": "field", "ENUMV": "enum"}
TYPES = {"T": "i8"}
TENSORS = {"a": TensorSig("i32", (Num(4),)), "r": TensorSig("i64", (Num(32),)),
           "dst": TensorSig("i32", (Num(4),))}
ENV = ScalarEnv({"N": 16, "LOG": 3, "x": 5, "y": -2, "ENUMV": 1}, TYPES,
                {"a": np.arange(4, dtype=np.int32), "r": np.arange(32, dtype=np.int64)},
                capacity=lambda code: 1024)


def check_expression(text: str) -> None:
    """Parse, type check and evaluate ``text``; only ParseError and ExecError may come out."""
    try:
        statements = parse_statements(text)
    except ParseError:
        statements = None
    if statements is not None:
        try:
            typecheck(text, statements, tensors=dict(TENSORS), indices={"i": ("spatial", None)},
                      scalars=dict(SCALARS), types=dict(TYPES))
        except ParseError:
            pass
    try:
        tree = check_scalar(text, parse_expr(text), scalars=dict(SCALARS), types=dict(TYPES),
                            tensors=dict(TENSORS))
    except ParseError:
        return
    outcomes = []
    for run in (lambda: evaluate(tree, ENV), lambda: compile_scalar(tree, ENV)(ENV.tensors)):
        try:
            outcomes.append(("value", run()))
        except ExecError:
            outcomes.append(("error", None))
    (kind_a, a), (kind_b, b) = outcomes
    same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    assert kind_a == kind_b and same, f"evaluate gives {outcomes[0]}, compile_scalar {outcomes[1]}"


def test_expressions_parse_check_and_evaluate_or_raise_typed_errors(fuzz) -> None:
    fuzz.check(EXPR_TEXT, check_expression, ci_examples=300)


# ------------------------------------------------------------------------------------------ spec files
def to_toml(doc: dict) -> str:
    """``doc`` as TOML text: one ``"key" = value`` line per top-level key, tables inline."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in doc.items())


def _key(k: str) -> str:
    return _string(str(k))


def _string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"


KEYS = st.one_of(
    st.sampled_from(["name", "summary", "bits", "lsb", "kind", "enum", "default", "max", "semantics", "rule",
                     "format", "fixed", "types", "operands", "shape", "strides", "addr", "space", "dtype",
                     "timing", "latency", "cycles", "unit", "constraints", "indices", "extent", "values",
                     "bytes", "id", "unit_bytes", "fields", "signed", "insn_bits", "extends", "params",
                     "derived", "isa", "data", "instructions", "intrinsic", "intrinsic_args", "features",
                     "x"]),
    st.text(max_size=8),
)
LEAVES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 8, 64, 128, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30, 10**200]),
    st.floats(),
    st.booleans(),
    st.text(max_size=12),
    EXPR_TEXT,
    st.sampled_from(["i8", "f32", "T", "int", "addr", "flag", "reg", "target", "enum", "type", "tensor",
                     "register", "spatial", "reduce", "vita", "diannao", "x86.toml", "../nope.toml", "dtypes",
                     "range", "align", "other"]),
)
def _containers(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4))


VALUES = st.recursive(LEAVES, _containers, max_leaves=8)


def _children(node) -> list:
    if isinstance(node, dict):
        return list(node)
    if isinstance(node, list):
        return list(range(len(node)))
    return []


def mutate(data: st.DataObject, doc: dict) -> None:
    """One random edit of ``doc`` in place: a key dropped, a value replaced, a key or element added."""
    parent, key, node = None, None, doc
    while _children(node) and (parent is None or data.draw(st.integers(0, 3)) > 0):
        parent, key = node, data.draw(st.sampled_from(_children(node)))
        node = parent[key]
    op = data.draw(st.sampled_from(["drop", "replace", "replace", "add", "expr"]))
    if op == "drop" and parent is not None:
        del parent[key]
    elif op == "add" and isinstance(node, dict):
        node[data.draw(KEYS)] = data.draw(VALUES)
    elif op == "add" and isinstance(node, list):
        node.insert(data.draw(st.integers(0, len(node))), data.draw(VALUES))
    elif parent is not None:
        parent[key] = data.draw(EXPR_TEXT if op == "expr" else VALUES)


def mutate_expression_field(data: st.DataObject, doc: dict) -> None:
    """An expression of a random instruction (semantics, rule, timing, shape, address) made random."""
    insns = doc.get("instructions")
    if not isinstance(insns, dict) or not insns:
        return
    body = insns[data.draw(st.sampled_from(sorted(insns)))]
    if not isinstance(body, dict):
        return
    text = data.draw(EXPR_TEXT)
    where = data.draw(st.sampled_from(["semantics", "rule", "latency", "cycles", "shape", "addr"]))
    if where == "semantics":
        body["semantics"] = text
    elif where == "rule" and isinstance(body.get("constraints"), list) and body["constraints"]:
        item = data.draw(st.sampled_from(body["constraints"]))
        if isinstance(item, dict):
            item["rule"] = text
    elif where in ("latency", "cycles"):
        timing = body.setdefault("timing", {})
        if isinstance(timing, dict):
            timing[where] = text
    elif isinstance(body.get("operands"), list) and body["operands"]:
        op = data.draw(st.sampled_from(body["operands"]))
        if isinstance(op, dict) and where == "shape" and isinstance(op.get("shape"), list) and op["shape"]:
            op["shape"][data.draw(st.integers(0, len(op["shape"]) - 1))] = text
        elif isinstance(op, dict):
            op["addr"] = text


SNIPPETS = st.one_of(
    st.sampled_from(["x = " + "9" * 5000, "x = " + "[" * 2000 + "]" * 2000, "x = " + "{a = " * 500 + "1" +
                     "}" * 500, "[isa]", "[[instructions]]", "x = 1\nx = 2", "\x00", "x = 1e999",
                     "x = 0x" + "f" * 5000, "x = \"\\ud800\"", "[params]\nLOG_BLOCK = " + "9" * 30]),
    st.text(max_size=30),
)


def load_checked(text: str, path: Path, params: dict | None, from_file: bool) -> None:
    """Load ``text`` (from ``path`` or as a string): an ISA, or an ISASpecError naming the file."""
    name = str(path) if from_file else "fuzzed.toml"
    try:
        if from_file:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
            isa.load_spec_file(path, params)
        else:
            isa.load_spec_text(text, name, params)
    except ISASpecError as e:
        assert e.file is not None and "Traceback" not in str(e), str(e)


PARAMS = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["LOG_BLOCK", "LOG_BATCH", "GMEM_BYTES", "NOPE", "VEC", ""]),
                    st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 3, 2**63, 10**30]),
                              st.text(max_size=3), st.lists(st.integers(), max_size=2)), max_size=2),
)


def test_mutated_spec_trees_load_or_raise_isaspecerror(fuzz, tmp_path: Path) -> None:
    path = tmp_path / "fuzzed.toml"

    def prop(data: st.DataObject) -> None:
        base = data.draw(st.sampled_from(sorted(BASES)))
        doc = copy.deepcopy(BASES[base])
        for _ in range(data.draw(st.integers(1, 4))):
            if data.draw(st.booleans()):
                mutate(data, doc)
            else:
                mutate_expression_field(data, doc)
        load_checked(to_toml(doc), path, data.draw(PARAMS), data.draw(st.booleans()))

    fuzz.check(st.data(), prop, ci_examples=150)


def test_edited_spec_texts_load_or_raise_isaspecerror(fuzz, tmp_path: Path) -> None:
    """Text-level edits the tree mutations cannot make: TOML the reader refuses or barely accepts."""
    path = tmp_path / "fuzzed.toml"

    def prop(data: st.DataObject) -> None:
        text = BASE_TEXTS[data.draw(st.sampled_from(sorted(BASE_TEXTS)))]
        lines = text.splitlines()
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(lines)))
            if data.draw(st.booleans()) and at < len(lines):
                del lines[at]
            else:
                lines.insert(at, data.draw(SNIPPETS))
        load_checked("\n".join(lines), path, data.draw(PARAMS), data.draw(st.booleans()))

    fuzz.check(st.data(), prop, ci_examples=100)


def test_toml_that_tomllib_rejects_without_a_decode_error_is_an_isaspecerror(tmp_path: Path) -> None:
    """Found by the fuzzers: tomllib raises ValueError for an integer of more than 4300 digits and
    RecursionError for deep nesting, which escaped the loader (text, file and ``extends`` alike)."""
    for text, piece in (("x = " + "9" * 5000, "more than 4300 digits"),
                        ("x = " + "[" * 3000 + "]" * 3000, "nested too deeply"),
                        ("x = " + "{a = " * 1000 + "1" + "}" * 1000, "nested too deeply")):
        with pytest.raises(ISASpecError, match=piece) as info:
            isa.load_spec_text(text, "deep.toml")
        assert info.value.file == "deep.toml"
        (tmp_path / "base.toml").write_text(text)
        with pytest.raises(ISASpecError, match=piece) as info:
            isa.load_spec_text('[isa]\nextends = "base.toml"\n', str(tmp_path / "top.toml"))
        assert info.value.field == "extends"
    (tmp_path / "latin1.toml").write_bytes(b"x = '\xe9'")
    with pytest.raises(ISASpecError, match="not UTF-8") as info:
        isa.load_spec_text('[isa]\nextends = "latin1.toml"\n', str(tmp_path / "top.toml"))
    assert info.value.field == "extends"


@pytest.mark.parametrize("name", ["../specs/vita", "../../tests/isa/valid_minimal", "vita/", ""])
def test_load_isa_takes_names_not_paths(name: str) -> None:
    """``load_isa`` (and so ``.isa NAME`` and a program file's ISA name) reads only isa/specs/NAME.toml."""
    with pytest.raises(ISASpecError, match="no built-in ISA"):
        isa.load_isa(name)
