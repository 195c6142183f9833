"""``tandem compile gemm|conv2d --target arm`` (tandem/flows/cross.py, tandem/cli/app.py): the AArch64
assembly,
the tensor instructions issued, the checks, and clean errors (exit 2)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import isa
import tandem.flows.cross
from compiler.backend.llvm_qemu import unavailable
from tandem.cli.app import app
from tandem.flows.cross import compile_arm, emulated, interpreted
from tandem.flows.flow import RunError
from tandem.flows.targets import load_target

runner = CliRunner()
GEMM = ["compile", "gemm", "--target", "arm", "-p", "M=16", "-p", "N=32", "-p", "K=64"]
MISSING = unavailable("aarch64-unknown-linux-gnu")


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_gemm_prints_the_tensorized_ir_the_assembly_and_the_counts() -> None:
    result = invoke(*GEMM)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("def gemm_arm(A: i8[16, 64], B: i8[8, 16, 4, 4], gemm: i32[16, 8, 4]):")
    assert "arm.sdot_v4i32(a=A[" in out
    assert "── assembly (aarch64-unknown-linux-gnu, generic, features dotprod) ──" in out
    assert re.search(r"^\s*sdot\s+v\d+\.4s, v\d+\.16b, v\d+\.16b$", out, re.MULTILINE)
    # 16 rows x 8 blocks of 4 columns x 16 groups of 4 products
    assert re.search(r"^tensor instructions: sdot_v4i32 x 2,048 issued per call, \d+ sdot in the assembly$",
                     out, re.MULTILINE)
    assert "match" not in out   # no --run, no checks


def test_asm_writes_the_file_and_run_checks_in_the_interpreter_and_qemu(tmp_path) -> None:
    path = tmp_path / "gemm.s"
    result = invoke(*GEMM, "--asm", str(path), "--run")
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert "sdot\tv" in text and ".globl\tgemm_arm_0" in text and "sdot\tv" not in result.output
    assert f"assembly (aarch64-unknown-linux-gnu, generic, features dotprod): {path} (" in result.output
    lines = result.output.splitlines()
    assert "interpreter: match: bit-exact with numpy (int32, 512 elements)" in lines
    qemu = "qemu (aarch64-unknown-linux-gnu): "
    assert (qemu + "match: bit-exact with numpy (int32, 512 elements)" if MISSING is None else
            f"{qemu}not run: {MISSING}") in lines


def test_without_qemu_the_run_says_why_it_did_not_emulate(monkeypatch) -> None:
    monkeypatch.setattr(tandem.flows.cross, "unavailable", lambda triple: "no qemu-aarch64 on PATH")
    result = invoke("compile", "gemm", "--target", "arm", "--run", "--asm", "/dev/null")
    assert result.exit_code == 0, result.output
    last = result.output.splitlines()[-1]
    assert last == "qemu (aarch64-unknown-linux-gnu): not run: no qemu-aarch64 on PATH"


def test_conv2d_with_a_tuning_and_dump_passes() -> None:
    result = invoke("compile", "conv2d", "--target", "arm", "-p", "H=6", "-p", "W=6", "-p", "IC=8", "-p",
                    "OC=8", "-p", "unroll_oc=1", "-p", "unroll_x=3", "--dump-passes", "--run", "--asm",
                    "/dev/null")
    assert result.exit_code == 0, result.output
    headers = re.findall(r"^── after (\w+) ──$", result.output, flags=re.M)
    assert headers == ["lower", "simplify", "loop_partition", "simplify_partitioned", "tensorize",
                       "simplify_tensorized"]
    # 2 oc blocks x 6 x 6 pixels x (2 channel groups x 3 x 3)
    assert "tensor instructions: sdot_v4i32 x 1,296 issued per call" in result.output
    assert "interpreter: match: bit-exact with numpy (int32, 288 elements)" in result.output


def test_a_mismatch_exits_1(monkeypatch) -> None:
    from tandem.flows.check import Check

    monkeypatch.setattr(tandem.flows.cross, "interpreted", lambda build: Check(False, 1.0, "1 of 4 differ"))
    result = invoke("compile", "gemm", "--target", "arm", "--run", "--asm", "/dev/null")
    assert result.exit_code == 1 and "interpreter: MISMATCH: 1 of 4 differ" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["add"], "arm: no schedule for operator 'add'; the arm target compiles gemm, conv2d"),
    (["gemm", "-p", "Q=1"], "arm gemm: unknown parameter 'Q'"),
    (["gemm", "-p", "M=0"], "arm gemm: M must be an integer >= 1, but got 0"),
    (["gemm", "-p", "M=x"], "-p M: expected an integer, but got 'x'"),
    (["gemm", "-p", "unroll_x=0"], "arm gemm: unroll_x must be an integer >= 1"),
    (["gemm", "--shape", "4x4x4"], "--shape: target 'arm' takes the layer as -p"),
    (["gemm", "--dtype", "u8"], "has no instruction that sums uint8 x int8 products"),
    (["gemm", "--dtype", "zz"], "--dtype: expected int8, uint8 or int16, but got 'zz'"),
    (["gemm", "--config", "default"], "target 'arm' is compiled for aarch64-unknown-linux-gnu and takes no"),
    (["gemm", "--spec", "isa/specs/x86.toml"], "target 'arm' needs a spec of the 'arm' ISA family"),
    (["gemm", "--asm", "/nonexistent/dir/x.s"], "--asm: cannot write /nonexistent/dir/x.s"),
])
def test_bad_input_exits_2_naming_the_problem(args, message) -> None:
    result = invoke("compile", *args[:1], "--target", "arm", *args[1:])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_asm_on_another_target_is_refused() -> None:
    result = invoke("compile", "gemm", "--asm", "x.s")
    assert result.exit_code == 2 and "--asm: target 'reference' emits no assembly here" in result.output


def test_compile_arm_from_python_takes_a_spec_value() -> None:
    """The API the command uses: the target is a value (here the built-in spec, passed in)."""
    target = load_target("arm", spec=isa.load_isa("arm"))
    build = compile_arm("gemm", {"M": 5, "N": 6, "K": 9, "seed": 4}, target)
    assert build.issued == {"sdot_v4i32": 5 * 2 * 3} and build.seed == 4
    assert build.mnemonic_counts()["sdot_v4i32"] >= 1
    assert interpreted(build).validated
    check = emulated(build)
    assert check == MISSING if MISSING is not None else check.validated
    with pytest.raises(RunError, match="compiles for the arm target, not 'cpu'"):
        compile_arm("gemm", {}, load_target("cpu"))
