"""``[isa] extends``: a spec file that names the spec it extends and says only what is new or changed."""

from __future__ import annotations

from pathlib import Path

import pytest

import isa
from isa.errors import ISASpecError

HEAD = '[isa]\nname = "vita"\nsummary = "an extension"\n'


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_extension_adds_and_overrides_and_keeps_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, "x.toml", HEAD + 'extends = "vita"\n[params]\nDRAM_BYTES_PER_CYCLE = 32\n'
                 '[enums.alu_op]\nvalues = { CLIP = 5 }\n'
                 '[instructions.ALU_MAX]\ntiming = { cycles = "iter_out * iter_in" }\n')
    spec, base = isa.load_spec_file(path), isa.load_isa("vita")
    assert spec.params["DRAM_BYTES_PER_CYCLE"] == 32 and base.params["DRAM_BYTES_PER_CYCLE"] == 8
    assert spec.enums["alu_op"].values["CLIP"] == 5 and spec.enums["alu_op"].values["MAX"] == 1
    timing, before = spec.instruction("ALU_MAX").timing, base.instruction("ALU_MAX").timing
    assert str(timing.cycles) == "iter_out * iter_in"      # the table merged: unit and latency kept
    assert (timing.unit, timing.latency) == (before.unit, before.latency)
    assert set(spec.instructions) == set(base.instructions) and spec.summary == "an extension"


def test_an_extension_of_an_extension_by_relative_path_and_with_params(tmp_path: Path) -> None:
    write(tmp_path, "a.toml", HEAD + 'extends = "vita"\n[params]\nDRAM_BYTES_PER_CYCLE = 16\n')
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", "b.toml",
                 HEAD + 'extends = "../a.toml"\n[params]\nGEMM_PIPELINE_CYCLES = 1\n')
    spec = isa.load_spec_file(path)
    assert (spec.params["DRAM_BYTES_PER_CYCLE"], spec.params["GEMM_PIPELINE_CYCLES"]) == (16, 1)
    wider = spec.with_params({"LOG_BLOCK": 5})   # reloads from the file's text, resolving extends again
    assert wider.params["BLOCK_OUT"] == 32 and wider.params["DRAM_BYTES_PER_CYCLE"] == 16


@pytest.mark.parametrize(("extends", "message"), [
    ('"nonesuch"', "neither a built-in spec"),
    ('"missing.toml"', "cannot be read"),
    ("3", "'extends' must name a built-in spec or a spec file"),
    ("[]", "'extends' must name a built-in spec or a spec file"),
    ('"loop.toml"', "loops or goes deeper"),
])
def test_a_bad_extends_names_the_file_and_the_field(tmp_path: Path, extends: str, message: str) -> None:
    path = write(tmp_path, "loop.toml", HEAD + f"extends = {extends}\n")
    with pytest.raises(ISASpecError, match=message) as err:
        isa.load_spec_file(path)
    assert "loop.toml" in str(err.value) and "extends" in str(err.value)


def test_a_list_of_bases_is_laid_one_over_the_other(tmp_path: Path) -> None:
    write(tmp_path, "fast.toml", HEAD + 'extends = "vita"\n[params]\nDRAM_BYTES_PER_CYCLE = 16\n'
          'GEMM_PIPELINE_CYCLES = 2\n')
    write(tmp_path, "faster.toml", HEAD + 'extends = "vita"\n[params]\nDRAM_BYTES_PER_CYCLE = 32\n')
    path = write(tmp_path, "both.toml", HEAD + 'extends = ["fast.toml", "faster.toml"]\n')
    spec = isa.load_spec_file(path)
    assert (spec.params["DRAM_BYTES_PER_CYCLE"], spec.params["GEMM_PIPELINE_CYCLES"]) == (32, 2)


X86 = '[isa]\nname = "x86"\nsummary = "x86 variant"\nextends = "x86"\n[instructions.vpdpbusd_512]\n'


def test_the_intrinsics_arguments_and_cpu_features_come_from_the_spec() -> None:
    x86 = isa.load_isa("x86")
    vnni = x86.instruction("vpdpbusd_512")
    assert vnni.intrinsic_args == ("c", "a", "b") and vnni.features == (("avx512vnni",),)
    assert x86.instruction("vpdpbusd_256").features == (("avxvnni",), ("avx512vnni", "avx512vl"))


def test_declared_lists_the_instructions_the_file_itself_declares(tmp_path: Path) -> None:
    """What selection tries first (``compiler.ops.cpu.packing``): an extension's own instructions."""
    x86 = isa.load_isa("x86")
    assert x86.declared == tuple(x86.instructions)
    path = write(tmp_path, "x.toml", X86 + 'summary = "changed"\n[instructions.vpdpbusd_256]\ngroup = "g"\n')
    spec = isa.load_spec_file(path)
    assert spec.declared == ("vpdpbusd_512", "vpdpbusd_256")
    assert list(spec.instructions) == list(x86.instructions)


@pytest.mark.parametrize(("line", "message"), [
    ('intrinsic_args = ["c", "z"]', "'intrinsic_args' names 'z', which is not an operand"),
    ("intrinsic_args = 3", "'intrinsic_args' must be a list of operand names"),
    ("features = [3]", "'features' must be a list of feature names or a list of such lists"),
    ('intrinsic_accumulator = "c"', "'intrinsic_accumulator' names 'c', which the intrinsic takes already"),
    ('intrinsic_args = ["a", "b"]\nintrinsic_accumulator = "z"',
     "'intrinsic_accumulator' names 'z', which is not an operand"),
    ('intrinsic_args = ["a", "b"]\nintrinsic_accumulator = "a"',
     "'intrinsic_accumulator' names 'a', which the intrinsic takes already"),
    ('intrinsic_args = ["c", "b"]\nintrinsic_accumulator = "a"',
     r"'a' \(u8, shape \[64\]\) must have the dtype and shape of 'd' \(i32, shape \[16\]\)"),
    ("intrinsic_accumulator = 3", "'intrinsic_accumulator' must be an operand name"),
])
def test_bad_intrinsic_args_or_features_are_named(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, "x.toml", X86 + line + "\n")
    with pytest.raises(ISASpecError, match=message):
        isa.load_spec_file(path)


@pytest.mark.parametrize(("value", "message"), [
    ("99999999999", r"'LOG_BLOCK' = 99999999999 is outside its range: it must be at least 0 and at most 8"),
    ("99999999999999999999", r"'LOG_BLOCK' = 99999999999999999999 leaves the 64-bit range"),
])
def test_a_parameter_too_large_for_the_spec_is_refused_at_once(tmp_path: Path, value: str, message: str):
    path = write(tmp_path, "big.toml", HEAD + f'extends = "vita"\n[params]\nLOG_BLOCK = {value}\n')
    with pytest.raises(ISASpecError, match=message):
        isa.load_spec_file(path)


def test_two_enum_values_with_one_code_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "x.toml", HEAD + 'extends = "vita"\n[enums.alu_op]\nvalues = { CLIP = 1 }\n')
    with pytest.raises(ISASpecError, match="'MAX' and 'CLIP' have the same code 1"):
        isa.load_spec_file(path)
