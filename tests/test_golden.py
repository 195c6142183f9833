"""Tests of the ``golden`` fixture itself (tests/conftest.py): it must never pass silently."""

from __future__ import annotations

import pytest


def _make(golden, path, update=False):
    return type(golden)(path, update=update)


def test_path_is_test_file_and_sanitized_test_name(golden) -> None:
    assert golden.path.parent.name == "test_golden"
    assert golden.path.parent.parent.name == "golden"
    assert golden.path.name == "test_path_is_test_file_and_sanitized_test_name.txt"


@pytest.mark.parametrize("shape", ["1x2 / 3", "a[b]"])
def test_parametrized_ids_are_sanitized(golden, shape: str) -> None:
    stem = golden.path.stem
    assert stem.startswith("test_parametrized_ids_are_sanitized_")
    assert all(c.isalnum() or c in "_.-" for c in stem)


def test_missing_golden_is_written_and_fails(golden, tmp_path) -> None:
    path = tmp_path / "sub" / "case.txt"
    with pytest.raises(pytest.fail.Exception, match="pytest --update-golden"):
        _make(golden, path).check("hello")
    assert path.read_text() == "hello\n"
    _make(golden, path).check("hello")  # now present and equal: passes


def test_mismatch_fails_with_unified_diff(golden, tmp_path) -> None:
    path = tmp_path / "case.txt"
    path.write_text("line 1\nline 2\n")
    with pytest.raises(AssertionError) as info:
        _make(golden, path).check("line 1\nline two\n")
    message = str(info.value)
    assert "--update-golden" in message
    assert "-line 2" in message and "+line two" in message
    assert path.read_text() == "line 1\nline 2\n"  # never rewritten without the option


def test_update_rewrites_and_passes(golden, tmp_path) -> None:
    path = tmp_path / "case.txt"
    path.write_text("old\n")
    _make(golden, path, update=True).check("new")
    assert path.read_text() == "new\n"
    missing = tmp_path / "missing.txt"
    _make(golden, missing, update=True).check("made")
    assert missing.read_text() == "made\n"
