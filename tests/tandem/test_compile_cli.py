"""Tests of ``tandem compile`` (tandem/cli/app.py, tandem/flows/compile.py): output, --run, and clean
errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from typer.testing import CliRunner

import tandem.flows.compile
from compiler.errors import LoweringError
from tandem.cli.app import app
from tandem.flows.check import Check, compare

runner = CliRunner()

SEED_001 = ["compile", "add", "--shape", "14x14", "-p", "nparts=0:4", "-p", "bind=0:core"]


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_dump_passes_prints_every_pass_in_order_and_the_guard(golden) -> None:
    result = invoke(*SEED_001, "--dump-passes")
    assert result.exit_code == 0, result.output
    headers = re.findall(r"^── after (\w+) ──$", result.output, flags=re.M)
    assert headers == ["lower", "simplify", "flatten"]
    assert "for core in bind(core, 4):" in result.output
    assert "if core*4 + ax0.inner < 14:" in result.output  # 14 rows in 4 parts of 4: a guard
    assert "C[core*56 + ax0.inner*14 + ax1] = " in result.output  # flattened, row-major
    golden.check(result.output)


def test_without_dump_passes_only_the_final_ir_is_printed() -> None:
    result = invoke(*SEED_001)
    assert result.exit_code == 0, result.output
    assert "── after" not in result.output
    assert result.output.startswith("def add(A: f32[196], B: f32[196], C: f32[196]):")
    assert result.output.count("def add(") == 1


def test_run_prints_a_match() -> None:
    result = invoke(*SEED_001, "--run")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "match: bit-exact with numpy (float32, 196 elements)"


@pytest.mark.parametrize(
    "args",
    [
        ["dense"],
        ["gemm", "-p", "split=2:5"],
        ["conv2d", "-p", "split=1:3"],
        ["conv2d", "-p", "layout=nhwc", "-p", "stride=2", "-p", "padding=0", "-p", "k=4"],
        ["relu", "--shape", "20", "-p", "split=0:8"],
        ["maximum", "--dtype", "int8"],
        ["sub", "--dtype", "bfloat16", "--shape", "3x5x7"],
    ],
    ids=lambda a: " ".join(a),
)
def test_run_matches_numpy_for_other_operators(args: list[str]) -> None:
    result = invoke("compile", *args, "--run")
    assert result.exit_code == 0, result.output
    assert "match: bit-exact with numpy" in result.output.splitlines()[-1]


def test_run_exits_1_on_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tandem.flows.compile, "compare",
                        lambda got, want, dt: Check(False, 1.0, "3 of 196 differ"))
    result = invoke(*SEED_001, "--run")
    assert result.exit_code == 1, result.output
    assert "MISMATCH: 3 of 196 differ" in result.output


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["frob"], "OP: expected one of add, conv2d, dense, gemm, maximum, mul, relu, sub, but got 'frob'"),
        (["add", "--shape", "14x"], "--shape: expected positive integers joined by 'x', like 256x56x56"),
        (["add", "--shape", "0x4"], "but got '0x4'"),
        (["dense", "--shape", "4x4"], "--shape: dense expects 3 dims (MxNxK), but got 2 (4x4)"),
        (["conv2d", "--shape", "1x4x8"], "--shape: conv2d expects 4 dims (NxCxHxW)"),
        (["add", "-p", "foo=1"], "-p foo: unknown param for add; valid keys are split, nparts, bind"),
        (["conv2d", "-p", "kk=1"], "valid keys are split, nparts, bind, k, r, stride, padding, layout"),
        (["add", "-p", "split"], "-p: expected KEY=VALUE, but got 'split'"),
        (["add", "-p", "split=0:2", "-p", "split=1:2"], "-p split: given twice"),
        (["add", "-p", "split=0:x"], "-p split: expected an integer, but got 'x'"),
        (["add", "-p", "split=4"], "-p split: expected AXIS:FACTOR"),
        (["add", "-p", "split=0:0"], "-p split: expected an integer >= 1, but got 0"),
        (["add", "-p", "split=9:2"], "-p split: no loop '9' in stage 'C'; its loops are 0:ax0, 1:ax1"),
        (["conv2d", "-p", "k=abc"], "-p k: expected an integer, but got 'abc'"),
        (["conv2d", "-p", "stride=1.5"], "-p stride: expected an integer, but got '1.5'"),
        (["conv2d", "-p", "layout=chwn"], "-p layout: expected nchw or nhwc, but got 'chwn'"),
        (["conv2d", "-p", "r=20"], "-p r: a 20x20 kernel does not fit input H=8 with padding 1"),
        (["add", "--dtype", "f77"], "--dtype: expected one of int8,"),
        (["add", "--dtype", "bool"], "--dtype: expected a numeric dtype, but got bool"),
        (
            ["add", "-p", "bind=0:no-such"],
            "-p bind: expected a hardware axis name like core, but got 'no-such'",
        ),
        # compiler errors (TandemError subclasses), not CLI parsing
        (["dense", "-p", "bind=2:core"], "bind on stage 'dense': cannot bind reduce axis 'k'"),
        (["add", "--target", "gpu"],
         "unknown target 'gpu'; targets are arm, cpu, cuda, diannao, reference, vita"),
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) else "",
)
def test_bad_input_exits_2_with_one_error_line_naming_the_culprit(args: list[str], culprit: str) -> None:
    result = invoke("compile", *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: "), result.output
    assert culprit in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_compiler_error_during_the_pipeline_is_one_clean_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise LoweringError("lower add: something [in brackets] went wrong")

    monkeypatch.setattr(tandem.flows.compile.pipeline, "build", broken)
    result = invoke(*SEED_001)
    assert result.exit_code == 2, result.output
    assert result.output == "error: lower add: something [in brackets] went wrong\n"


def test_compare_is_bit_exact_for_ints_and_tolerant_for_low_precision_floats() -> None:
    from compiler.ir import dtypes

    want = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = want.copy()
    got[1, 2] += 1
    assert compare(want.copy(), want, dtypes.int32).validated
    check = compare(got, want, dtypes.int32)
    assert not check.validated
    assert "1 of 6 elements differ; first at (1, 2): expected 5, but got 6" in check.detail
    assert not compare(want[:1], want, dtypes.int32).validated
    f = np.linspace(1, 2, 6, dtype=np.float32)
    assert compare(f * np.float32(1 + 1e-3), f, dtypes.bfloat16).validated
    assert not compare(f * np.float32(1 + 1e-3), f, dtypes.float32).validated
