"""Tests of ``tandem isa list|show|check`` (tandem/cli/isa.py).

Most tests use tests/isa/valid_minimal.toml (two instructions, vrelu and vsum), installed as the only built-in
spec "mini" by the ``builtins`` fixture, so they do not depend on the contents of isa/specs/. A few tests run
over the real built-in specs and check only what holds for any spec.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import isa
import isa.loader
import tandem.cli.isa
from tandem.cli.app import app

VALID = Path(__file__).resolve().parents[1] / "isa" / "valid_minimal.toml"
WIDE = {"COLUMNS": "250"}
NARROW = {"COLUMNS": "80"}

runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env or WIDE)


@pytest.fixture
def builtins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """isa/specs/ replaced by a folder holding only mini.toml (a copy of valid_minimal.toml)."""
    folder = tmp_path / "specs"
    folder.mkdir()
    shutil.copy(VALID, folder / "mini.toml")
    monkeypatch.setattr(isa.loader, "SPECS_DIR", folder)
    return folder


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if not line.startswith(" ")]


def assert_clean_error(result, code: int, *pieces: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    heads = error_lines(result.output)
    assert heads and all(line.startswith("error: ") for line in heads), result.output
    for piece in pieces:
        assert piece in result.output, result.output


def test_isa_help_lists_the_three_commands() -> None:
    result = invoke("isa", "--help")
    assert result.exit_code == 0, result.output
    for command in ("list", "show", "check"):
        assert re.search(rf"^\W*{command}\b", result.output, flags=re.M), result.output
    assert "isa" in invoke("--help").output


# ---------------------------------------------------------------------------------------------- list


def test_list_shows_name_summary_and_counts(builtins: Path) -> None:
    result = invoke("isa", "list")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if " mini " in line)
    cells = [c.strip() for c in re.split(r"[│|]", row) if c.strip()]
    # name, summary, 2 instructions, 2 parameters (NMEM_BYTES, VECTOR_ELEMS), 64-bit encodings
    assert cells == ["mini", "a minimal vector ISA for loader and CLI tests", "2", "2", "64-bit"]


def test_list_says_no_for_a_spec_without_encodings(builtins: Path) -> None:
    (builtins / "regs.toml").write_text(
        '[isa]\nname = "regs"\nsummary = "register-only"\n'
        "[instructions.vneg]\nsummary = \"negate\"\n"
        'operands = [ { name = "d", kind = "register", dtype = "i32", shape = [4] },\n'
        '             { name = "a", kind = "register", dtype = "i32", shape = [4] } ]\n'
        'indices = { i = "spatial" }\nsemantics = "d[i] = -a[i]"\n'
    )
    result = invoke("isa", "list")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if " regs " in line)
    cells = [c.strip() for c in re.split(r"[│|]", row) if c.strip()]
    assert cells == ["regs", "register-only", "1", "0", "no"]


def test_list_exits_1_and_prints_the_errors_of_a_builtin_that_does_not_load(builtins: Path) -> None:
    (builtins / "broken.toml").write_text('[isa]\nname = "broken"\n')
    result = invoke("isa", "list")
    assert result.exit_code == 1, result.output
    assert "mini" in result.output and "broken" in result.output
    assert "error: isa/specs/broken.toml: table [isa]: field 'summary': [isa] needs 'summary'" \
        in result.output
    assert "Traceback" not in result.output


def test_list_with_no_builtin_specs(builtins: Path) -> None:
    (builtins / "mini.toml").unlink()
    result = invoke("isa", "list")
    assert result.exit_code == 0, result.output
    assert "no built-in ISA specs" in result.output


def test_list_of_the_real_builtin_specs_has_a_row_for_each() -> None:
    result = invoke("isa", "list")
    assert result.exit_code == 0, result.output
    for name in isa.builtin_specs():
        assert re.search(rf"[│|] {re.escape(name)} +[│|]", result.output), (name, result.output)


# ---------------------------------------------------------------------------------------------- show


def test_show_prints_the_header_with_parameters_and_derived_values(builtins: Path) -> None:
    result = invoke("isa", "show", "mini")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:5] == [
        "ISA mini: a minimal vector ISA for loader and CLI tests",
        "source: isa/specs/mini.toml",
        "instruction width: 64 bits",
        "parameters: NMEM_BYTES = 4096, VECTOR_ELEMS = 64",
        "derived: NMEM_WORDS = 64",
    ]


def test_show_param_overrides_values_and_recomputes_derived_ones(builtins: Path) -> None:
    result = invoke("isa", "show", "mini", "--param", "NMEM_BYTES=8192", "-p", "VECTOR_ELEMS=0x20")
    assert result.exit_code == 0, result.output
    assert "parameters: NMEM_BYTES = 8192 (default 4096), VECTOR_ELEMS = 32 (default 64)" in result.output
    assert "derived: NMEM_WORDS = 128" in result.output  # 8192 // 64


def test_show_table_has_every_column_of_every_instruction(builtins: Path) -> None:
    result = invoke("isa", "show", "mini")
    assert result.exit_code == 0, result.output
    out = result.output
    header = next(line for line in out.splitlines() if "instruction" in line and "operands" in line)
    assert [c.strip() for c in re.split(r"[┃|]", header) if c.strip()] == [
        "instruction", "operands", "semantics", "constraints", "timing", "intrinsic"]
    for text in [
        "vrelu", "T: i8, f32", "vsum", "T: i32",                       # names and type variables
        "dst: T[n] @NMEM", "a: T[n] @NMEM", "dst: T[1] @NMEM",        # operands
        "dst[i] = max(a[i], 0)", "dst[0] += a[k]",                     # semantics as written
        "align: dst % 64 == 0 — aligned", "divisible: n % VECTOR_ELEMS == 0 — multiple",
        "unit vfu", "latency 4", "cycles ceil_div(n * bytes(T), 128)", "latency 6", "cycles ceil_div(n, 16)",
        "mini.vsum",                                                    # intrinsic
    ]:
        assert text in out, (text, out)


def test_show_instruction_option_shows_only_that_instruction(builtins: Path) -> None:
    result = invoke("isa", "show", "mini", "-i", "vsum")
    assert result.exit_code == 0, result.output
    assert "dst[0] += a[k]" in result.output
    assert "vrelu" not in result.output and "max(a[i], 0)" not in result.output
    long = invoke("isa", "show", "mini", "--instruction", "vrelu")
    assert long.exit_code == 0 and "vsum" not in long.output and "max(a[i], 0)" in long.output


def test_show_on_a_narrow_console_prints_one_table_per_instruction(builtins: Path) -> None:
    result = invoke("isa", "show", "mini", env=NARROW)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "vrelu: element-wise max(x, 0)" in result.output   # the instruction's title with its summary
    assert "vsum: sum of a vector into dst[0]" in result.output
    for text in ["dst: T[n] @NMEM", "dst[i] = max(a[i], 0)", "align: dst % 64 == 0 — aligned",
                 "cycles ceil_div(n * bytes(T), 128)", "mini.vsum"]:
        assert text in result.output, (text, result.output)


def test_show_prints_canonical_timing_one_line_rules_and_brackets_literally(tmp_path: Path) -> None:
    text = VALID.read_text()
    text = text.replace('cycles = "ceil_div(n * bytes(T), 128)"', 'cycles = "ceil_div( n*bytes(T),128 )"')
    text = text.replace('rule = "dst % 64 == 0"', 'rule = """(dst % 64\n        == 0)"""')
    text = text.replace('summary = "sum of a vector into dst[0]"', 'summary = "sum into [bold]dst[/bold]"')
    path = tmp_path / "spaced.toml"
    path.write_text(text)
    result = invoke("isa", "show", str(path))
    assert result.exit_code == 0, result.output
    assert "cycles ceil_div(n * bytes(T), 128)" in result.output
    assert "align: (dst % 64 == 0) — aligned" in result.output
    assert f"source: {path}" in result.output
    narrow = invoke("isa", "show", str(path), "-i", "vsum", env=NARROW)
    assert "vsum: sum into [bold]dst[/bold]" in narrow.output


def test_show_accepts_a_path_to_a_spec_file() -> None:
    result = invoke("isa", "show", str(VALID), "-i", "vrelu")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ISA mini: ")
    assert f"source: {VALID}" in result.output


def test_show_prints_an_operands_cluster_and_an_async_instructions_engine() -> None:
    """What the simulator runs them by: the cluster whose SMEM ``memcpyc`` writes, the DMA engine a copy
    takes, whether it is issued asynchronously."""
    copy = invoke("isa", "show", "diannao", "-i", "memcpyc")
    assert copy.exit_code == 0, copy.output
    assert "dst: u8[count, len] @SMEM of cluster R[rc]" in copy.output and "engine 1" in copy.output
    queued = invoke("isa", "show", "diannao", "-i", "memcpyr_async")
    assert "unit dma (async)" in queued.output
    assert "engine select(dst_space == GMEM or src_space == GMEM, 0, 1)" in queued.output


@pytest.mark.parametrize("name", isa.builtin_specs())
def test_show_each_real_builtin_spec_lists_all_its_instructions(name: str) -> None:
    spec = isa.load_isa(name)
    result = invoke("isa", "show", name)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"ISA {spec.name}: ")
    for insn in spec.instructions:
        assert insn in result.output


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["nosuch"], "unknown ISA 'nosuch'; built-in ones are mini (or give the path of a .toml spec file)"),
        (["missing.toml"], "missing.toml: no such file"),
        (["mini", "-p", "NMEM_BYTES"], "--param: expected KEY=VALUE, but got 'NMEM_BYTES'"),
        (["mini", "-p", "=4"], "--param: expected KEY=VALUE, but got '=4'"),
        (["mini", "-p", "NMEM_BYTES=big"], "--param NMEM_BYTES: expected an integer, but got 'big'"),
        (["mini", "-p", "NMEM_BYTES=1", "-p", "NMEM_BYTES=2"], "--param NMEM_BYTES: given twice"),
        (["mini", "-p", "LANES=8"],
         "--param LANES: cannot override unknown parameter 'LANES'; parameters are NMEM_BYTES, VECTOR_ELEMS"),
        (["mini", "-i", "vadd"], "--instruction: ISA 'mini' has no instruction 'vadd'; it has vrelu, vsum"),
        # an override that breaks the spec: dst (16 bits) cannot hold max = NMEM_BYTES - 1 = 131071
        (["mini", "-p", "NMEM_BYTES=131072"], "format 'vec': field 'dst':"),
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) else "",
)
def test_show_bad_argument_exits_2_with_an_error_line(builtins: Path, args: list[str], culprit: str) -> None:
    result = invoke("isa", "show", *args)
    assert_clean_error(result, 2, culprit)
    assert len(error_lines(result.output)) == 1


def test_show_of_a_malformed_file_prints_every_error_and_exits_2() -> None:
    path = VALID.parent / "malformed" / "two_broken_instructions.toml"
    result = invoke("isa", "show", str(path))
    assert_clean_error(result, 2, "instruction 'vrelu'", "instruction 'vsum'")
    assert len(error_lines(result.output)) == 2


# ---------------------------------------------------------------------------------------------- check


def test_check_a_valid_file_prints_ok_with_the_instruction_count() -> None:
    result = invoke("isa", "check", str(VALID))
    assert result.exit_code == 0, result.output
    assert result.output == "ok: 2 instructions\n"


def test_check_accepts_a_builtin_name(builtins: Path) -> None:
    result = invoke("isa", "check", "mini")
    assert result.exit_code == 0, result.output
    assert result.output == "ok: 2 instructions\n"


def test_check_prints_each_error_with_its_caret_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(VALID.read_text().replace('"dst[i] = max(a[i], 0)"', '"dst[i] = max(a[i] 0)"'))
    result = invoke("isa", "check", str(path))
    assert_clean_error(result, 1)
    assert result.output.splitlines() == [
        f"error: {path}: instruction 'vrelu': field 'semantics': col 19: expected ',' or ')', but got '0'",
        "    dst[i] = max(a[i] 0)",
        "                      ^",
    ]


def test_check_of_a_missing_file_or_a_directory_exits_2(tmp_path: Path) -> None:
    missing = invoke("isa", "check", str(tmp_path / "nope.toml"))
    assert_clean_error(missing, 2, f"error: {tmp_path / 'nope.toml'}: no such file")
    folder = invoke("isa", "check", str(tmp_path))
    assert_clean_error(folder, 2, "is a directory, not a spec file")


def test_check_of_a_file_that_is_not_toml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.toml"
    path.write_text("[isa]\nname = mini\n")
    result = invoke("isa", "check", str(path))
    assert_clean_error(result, 1, f"error: {path}:2: table [isa]: field 'name': not valid TOML")


def test_check_turns_an_unexpected_exception_into_an_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise ValueError("invalid literal for int() with base 0: '01'")

    monkeypatch.setattr(tandem.cli.isa.isa, "load_spec_file", broken)
    result = invoke("isa", "check", str(VALID))
    assert_clean_error(result, 1, "internal error while loading the spec (ValueError: invalid literal")
