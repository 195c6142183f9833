"""Malformed spec files: each one gives an ISASpecError naming the file, the instruction and the field.

Every file in tests/isa/malformed/ is tests/isa/valid_minimal.toml with exactly one defect (its first line
says which). The table below is the specification of the error each must give: the instruction (or, for a
defect in a bit layout, the format), the field, a piece of the message and, for expression errors, the 1-based
column in the expression text. None may escape as anything but an ISASpecError, and ``tandem isa check``
must print ``error:`` lines for it and exit with status 1, never a traceback.
"""

from __future__ import annotations

import copy
import difflib
import json
import random
import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import isa
from isa.errors import ISASpecError
from tandem.cli.app import app

HERE = Path(__file__).resolve().parent
MALFORMED = HERE / "malformed"
VALID = HERE / "valid_minimal.toml"

runner = CliRunner()

# file -> (instruction or place, field, message piece, column in the expression or None)
EXPECTED: dict[str, tuple[str, str, str, int | None]] = {
    "unknown_instruction_key": ("vrelu", "semantic", "unknown key 'semantic' in instruction 'vrelu'", None),
    "bad_operand_dtype": ("vrelu", "operands.a.dtype", "unknown dtype 'i12'", None),
    "bad_type_variable_dtype": ("vrelu", "types", "unknown dtype 'f31' for type variable 'T'", None),
    # "dst[i] = max(a[i] 0)": the '0' is character 19
    "semantics_parse_error": ("vrelu", "semantics", "expected ',' or ')', but got '0'", 19),
    # line 2 is "dst[0] += a[k] *" (16 characters): the expression is missing at column 17
    "semantics_error_on_second_line": ("vsum", "semantics",
                                       "line 2, col 17: expected a number, a name or '('", 17),
    "undefined_index": ("vrelu", "semantics", "undefined name 'j'", 16),
    "undefined_tensor": ("vrelu", "semantics", "undefined tensor 'b'", 14),
    "reduce_index_on_left": ("vrelu", "semantics", "reduce index 'i' appears on the left side", 5),
    "spatial_index_not_on_left": ("vrelu", "semantics",
                                  "spatial index 'j' is used on the right but not on the left", 16),
    # "dst[i] = max(a[i], 0) + i32(a[i])": the '+' is character 23; T = i8 is the first binding tried
    "type_mismatch_without_cast": ("vrelu", "semantics", "operands have different types i8 and i32", 23),
    "overlapping_bit_fields": ("format 'vec'", "n",
                               "field 'n' (bits 40..55) overlaps field 'a' (bits 27..42)", None),
    "field_too_narrow_for_enum": ("format 'vec'", "T",
                                  "too narrow for enum 'dtype' whose largest code is 4", None),
    "field_too_narrow_for_max": ("format 'vec'", "dst",
                                 "at most 2047), too narrow for its largest value 4095", None),
    "fixed_value_too_wide": ("vsum", "fixed",
                             "fixed value 256 of 'opcode' does not fit its 8 bits (0..255)", None),
    "duplicate_operand_names": ("vsum", "operands.a", "duplicate operand name 'a'", None),
    "duplicate_field_names": ("format 'vec'", "a", "duplicate field name 'a'", None),
    "duplicate_toml_key": ("vsum", "format", "'format' is set twice", None),
    "unknown_memory_space": ("vsum", "operands.a.space",
                             "unknown memory space 'SMEM'; spaces are GMEM, NMEM", None),
    "unknown_format": ("vsum", "format", "unknown format 'vector'; formats are vec", None),
    "cluster_undefined_name": ("vrelu", "operands.dst.cluster", "undefined name 'q'", 1),
    "indistinguishable_instructions": ("vsum", "fixed",
                                       "instructions 'vrelu' and 'vsum' cannot be told apart", None),
    "constraint_undefined_name": ("vrelu", "constraints[0].rule", "undefined name 'ALIGN'", 7),
    "timing_undefined_name": ("vsum", "timing.cycles", "undefined name 'LANES'", 13),
    "missing_summary": ("vsum", "summary", "instruction 'vsum' needs 'summary'", None),
    "constraint_not_a_condition": ("vrelu", "constraints[0].rule", "a rule must be a condition", None),
    "negative_timing": ("vrelu", "timing.latency", "'latency' must not be negative, but it is -4", None),
    "async_without_unit": ("vrelu", "timing.async", "an 'async' instruction needs the 'unit'", None),
    "async_not_a_boolean": ("vrelu", "timing.async", "'async' must be true or false, but it is 'yes'", None),
    "engine_without_unit": ("vrelu", "timing.engine",
                            "an 'engine' is one of a unit's engines: it needs the 'unit'", None),
    "engine_negative": ("vrelu", "timing.engine", "'engine' must not be negative, but it is -1", None),
    "negative_shape": ("vsum", "operands.dst.shape", "dimension 0 of the shape is -1", None),
    "index_extent_too_large": ("vsum", "indices.k.extent",
                               "index 'k' has extent 4611686018427387904; an index counts 1 to", None),
    "index_extent_negative": ("vsum", "indices.k.extent", "index 'k' has extent -3", None),
    "parameter_outside_its_range": ("table [params]", "NMEM_BYTES",
                                    "'NMEM_BYTES' = 4096 is outside its range: it must be at least 8192",
                                    None),
}
# files with several errors, each (instruction, field, message piece), in file order
EXPECTED_SEVERAL = {
    "two_broken_instructions": [("vrelu", "semantics", "undefined name 'j'"),
                                ("vsum", "operands.dst.space", "unknown memory space 'SMEM'")],
}


def malformed_files() -> list[Path]:
    return sorted(MALFORMED.glob("*.toml"))


def load_error(path: Path, **kwargs) -> ISASpecError:
    with pytest.raises(ISASpecError) as info:
        isa.load_spec_file(path, **kwargs)
    return info.value


def test_the_valid_spec_loads() -> None:
    spec = isa.load_spec_file(VALID)
    assert list(spec.instructions) == ["vrelu", "vsum"]


def test_every_malformed_file_has_an_expectation_and_there_are_enough() -> None:
    names = {p.stem for p in malformed_files()}
    assert names == set(EXPECTED) | set(EXPECTED_SEVERAL)
    assert len(names) >= 14


@pytest.mark.parametrize("path", malformed_files(), ids=lambda p: p.stem)
def test_each_malformed_file_is_the_valid_spec_with_one_small_edit(path: Path) -> None:
    valid = VALID.read_text().splitlines()[1:]  # both start with a comment line
    bad = path.read_text().splitlines()
    assert bad[0].startswith("# defect: ")
    diff = [d for d in difflib.unified_diff(valid, bad[1:], lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("+++", "---"))]
    assert 1 <= len(diff) <= 6, "\n".join(diff)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_spec_error_names_file_instruction_field_and_column(name: str) -> None:
    instruction, field, message, col = EXPECTED[name]
    e = load_error(MALFORMED / f"{name}.toml")
    assert isinstance(e, ISASpecError)
    assert len(e.errors) == 1, str(e)
    assert e.file.endswith(f"malformed/{name}.toml")
    assert e.instruction == instruction, str(e)
    assert e.field == field, str(e)
    assert message in str(e), str(e)
    assert e.col == col, str(e)
    text = str(e)
    assert "Traceback" not in text
    assert text.startswith(e.file)
    where = f"instruction '{instruction}'" if re.fullmatch(r"\w+", instruction) else instruction
    assert f"{where}: field '{field}': " in text
    assert e.expr_line == (2 if name == "semantics_error_on_second_line" else None)
    if col is not None:  # the message quotes the expression's line with a caret under the column
        quoted, caret = text.splitlines()[-2:]
        assert caret.strip() == "^"
        assert caret.index("^") - _indent(quoted) == col - 1, text


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def test_a_toml_syntax_error_names_the_line_the_instruction_and_the_key() -> None:
    path = MALFORMED / "duplicate_toml_key.toml"
    lines = path.read_text().splitlines()
    second = [k + 1 for k, line in enumerate(lines) if line == 'format = "vec"'][-1]  # 1-based
    e = load_error(path)
    assert e.line == second
    assert str(e).startswith(f"{path}:{second}: instruction 'vsum': field 'format': not valid TOML")


def test_errors_of_several_instructions_are_all_reported() -> None:
    path = MALFORMED / "two_broken_instructions.toml"
    e = load_error(path)
    got = [(x.instruction, x.field) for x in e.errors]
    want = EXPECTED_SEVERAL["two_broken_instructions"]
    assert got == [(i, f) for i, f, _ in want]
    for x, (_, _, message) in zip(e.errors, want, strict=True):
        assert x.file == str(path)
        assert message in str(x)
        assert str(x) in str(e)  # the combined message lists each one
    assert str(e).startswith("2 errors in the spec:")


def test_overriding_an_unknown_parameter_names_it_and_lists_the_real_ones() -> None:
    e = load_error(VALID, params={"LANES": 8})
    assert (e.instruction, e.field) == ("table [params]", "LANES")
    assert "cannot override unknown parameter 'LANES'; parameters are NMEM_BYTES, VECTOR_ELEMS" in str(e)


def test_an_override_outside_the_parameter_s_declared_range_is_refused() -> None:
    """A built-in spec declares what each parameter may be (``[param_ranges]``): DRAM at -8 bytes a cycle
    would give negative transfer times."""
    with pytest.raises(ISASpecError) as e:
        isa.load_isa("vita", {"DRAM_BYTES_PER_CYCLE": -8})
    says = "override of 'DRAM_BYTES_PER_CYCLE' = -8 is outside its range: it must be at least 1"
    assert says in str(e.value)
    with pytest.raises(ISASpecError, match="'LOG_ACC_BUFF_SIZE' = 60 is outside its range: it must be at "
                                           "least 0 and at most 30"):
        isa.load_isa("vita", {"LOG_ACC_BUFF_SIZE": 60})
    with pytest.raises(ISASpecError, match="'CLUSTERS' = 0 is outside its range"):
        isa.load_isa("diannao", {"CLUSTERS": 0})


def test_an_override_that_widens_fields_past_the_word_names_what_to_change_with_it() -> None:
    """VITA's GEMM fields are as wide as its buffers are deep: LOG_BLOCK = 3 alone deepens them past the
    128-bit word; the error says which fields follow it and which parameters to set with it."""
    with pytest.raises(ISASpecError) as e:
        isa.load_isa("vita", {"LOG_BLOCK": 3})
    text = str(e.value)
    assert "field 'wgt_factor_in' ends at bit 139, beyond the 128-bit word" in text
    fields = "dst_factor_out, dst_factor_in, src_factor_out, src_factor_in, wgt_factor_out, wgt_factor_in"
    assert f"the widths of fields {fields} follow LOG_BLOCK = 3, and no longer fit" in text
    assert "LOG_WGT_BUFF_SIZE" in text and "or use a spec whose formats have more bits" in text


def test_a_range_of_an_unknown_parameter_or_an_empty_range_is_refused(tmp_path: Path) -> None:
    text = VALID.read_text()
    for ranges, says in (("NMEM = { min = 1 }", "range of unknown parameter 'NMEM'"),
                         ("NMEM_BYTES = { min = 9, max = 8 }", "the range of 'NMEM_BYTES' is empty"),
                         ("NMEM_BYTES = { least = 9 }", "unknown key 'least' in the range of 'NMEM_BYTES'")):
        path = tmp_path / "spec.toml"
        path.write_text(text.replace("[derived]", f"[param_ranges]\n{ranges}\n\n[derived]"))
        assert says in str(load_error(path))


def test_overriding_a_parameter_with_a_non_integer_is_an_error() -> None:
    e = load_error(VALID, params={"NMEM_BYTES": "big"})
    assert (e.instruction, e.field) == ("table [params]", "NMEM_BYTES")
    assert "must be an integer" in str(e)


def test_an_override_that_makes_a_max_too_wide_is_caught_at_load() -> None:
    # dst has 16 bits; with NMEM_BYTES = 2**17 its max NMEM_BYTES - 1 no longer fits
    e = load_error(VALID, params={"NMEM_BYTES": 1 << 17})
    assert (e.instruction, e.field) == ("format 'vec'", "dst")
    assert "too narrow for its largest value 131071" in str(e)


def test_a_missing_file_is_an_isaspecerror_naming_it(tmp_path: Path) -> None:
    e = load_error(tmp_path / "nope.toml")
    assert e.file.endswith("nope.toml")
    assert "cannot read the spec file" in str(e)


# ------------------------------------------------------------------------------------- tandem isa check


@pytest.mark.parametrize("path", malformed_files(), ids=lambda p: p.stem)
def test_isa_check_prints_every_error_and_exits_1(path: Path) -> None:
    result = runner.invoke(app, ["isa", "check", str(path)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    heads = [line for line in lines if not line.startswith(" ")]  # carets and quoted text are indented
    assert heads and all(line.startswith(f"error: {path}") for line in heads), result.output
    assert len(heads) == len(EXPECTED_SEVERAL.get(path.stem, [None]))


def test_isa_check_on_the_valid_spec_prints_ok() -> None:
    result = runner.invoke(app, ["isa", "check", str(VALID)])
    assert result.exit_code == 0, result.output
    assert result.output == "ok: 2 instructions\n"


# ------------------------------------------------------------------------------------- no tracebacks at all


def _toml(value: object) -> str:
    """A TOML value (inline tables only) for ``value``; enough for the documents below."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _document(doc: dict) -> str:
    return "\n".join(f"{_key(k)} = {_toml(v)}" for k, v in doc.items()) + "\n"


def _paths(node: object, prefix: tuple = ()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for k, v in enumerate(node):
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


WRONG_VALUES = [7, -1, "x", "n +", "", True, 1.5, [], {}, ["n"], {"a": 1}, [{}]]


def test_a_value_of_the_wrong_type_or_a_missing_key_anywhere_gives_only_isaspecerror() -> None:
    base = tomllib.loads(VALID.read_text())
    assert isa.load_spec_text(_document(base), "roundtrip.toml").name == "mini"  # the writer is faithful
    problems = []
    tried = 0
    for path in _paths(base):
        variants = [copy.deepcopy(base) for _ in range(len(WRONG_VALUES) + 1)]
        for doc, value in zip(variants, [*WRONG_VALUES, None], strict=True):
            node = doc
            for step in path[:-1]:
                node = node[step]
            if value is None:
                if not isinstance(node, dict):
                    continue
                del node[path[-1]]
            else:
                node[path[-1]] = value
            tried += 1
            try:
                isa.load_spec_text(_document(doc), "fuzz.toml")
            except ISASpecError as e:
                if e.file != "fuzz.toml" or "not valid TOML" in str(e) or "Traceback" in str(e):
                    problems.append((path, value, str(e)))
            except Exception as e:  # noqa: BLE001 - what this test looks for
                problems.append((path, value, f"{type(e).__name__}: {e}"))
    assert tried > 1000
    assert not problems, "\n".join(map(str, problems[:10]))


def test_a_leading_zero_literal_is_a_parse_error_with_its_column() -> None:
    text = VALID.read_text().replace('"dst[i] = max(a[i], 0)"', '"dst[i] = max(a[i], 01)"')
    with pytest.raises(ISASpecError) as info:
        isa.load_spec_text(text, "zero.toml")
    assert (info.value.instruction, info.value.field, info.value.col) == ("vrelu", "semantics", 20)


def test_random_edits_of_the_text_give_only_isaspecerror() -> None:
    """Delete, insert or replace up to three characters, 1500 times (seeded): a load either works or names
    the file; nothing else escapes from the TOML reader, the expression parser or the type checker."""
    text = VALID.read_text()
    rng = random.Random(20240607)
    alphabet = list("[]{}()=,\"'+-*/%<>_ajkn01.#\n ")
    problems = []
    for _ in range(1500):
        chars = list(text)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(chars))
            r = rng.random()
            if r < 0.4:
                del chars[k]
            elif r < 0.7:
                chars.insert(k, rng.choice(alphabet))
            else:
                chars[k] = rng.choice(alphabet)
        try:
            isa.load_spec_text("".join(chars), "edited.toml")
        except ISASpecError as e:
            if e.file != "edited.toml" or "Traceback" in str(e):
                problems.append(str(e))
        except Exception as e:  # noqa: BLE001 - what this test looks for
            problems.append(f"{type(e).__name__}: {e}\n{''.join(chars)}")
    assert not problems, problems[0]
