"""``tandem run ... --explain`` (issue 46, item 4, "say what was chosen"): per statement a cover chose
instructions for, the chosen cover and its cycles, the best alternatives with theirs, and each instruction
of the spec no statement used with the closest statement and why (compiler/passes/explain.py); the same in
the ``selection`` object of ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tandem.cli.app import app

RUNNER = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
ISEL = ROOT / "tests/extensions/isel"
FMA = f"{ISEL / 'isel_ops.py'}:fma"
CONV = ["conv2d", "--target", "vita", "--config", "tvm-paper", "-p", "H=14", "-p", "W=14", "-p", "IC=64",
        "-p", "OC=64"]


def _run(*args: str) -> str:
    result = RUNNER.invoke(app, ["run", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _selection(*args: str) -> dict:
    return json.loads(_run(*args, "--json"))["selection"]


def _slower(tmp_path: Path, spec: Path, target: str, instruction: str, cycles: str) -> Path:
    """``spec`` with ``instruction`` made slower (as tests/extensions/test_isel_extensions.py writes it)."""
    slow = tmp_path / "slow.toml"
    slow.write_text(f'[isa]\nname = "{target}"\nsummary = "{instruction}, slower"\nextends = "{spec}"\n'
                    f'[instructions.{instruction}]\ntiming = {{ cycles = "{cycles}" }}\n')
    return slow


def test_explain_prints_the_chosen_cover_after_the_table() -> None:
    out = _run(FMA, "--target", "diannao", "-p", "cores=1", "--explain")
    assert out.index("cycles") < out.index("selection:")   # after the usual table
    chosen = next(line for line in out.splitlines() if "chosen" in line)
    assert "vmul ; vadd" in chosen and "cycles" in chosen
    assert "instructions" in out.split("selection:")[0]   # the table names the instructions too
    unused = out.split("unused instructions:")[1]
    assert "vsub" in unused and "opcode mismatch" in unused


def test_a_fused_instruction_is_chosen_and_its_decomposition_listed_as_dearer() -> None:
    (st,) = _selection(FMA, "--target", "diannao", "-p", "cores=1", "--spec", str(ISEL / "diannao_vfma.toml"),
                       "--explain")["statements"]
    assert st["statement"] == "DianNao operator fma" and st["chosen"]["instructions"] == ["vfma"]
    alternative = next(a for a in st["alternatives"] if a["instructions"] == ["vmul", "vadd"])
    assert alternative["cycles"] > st["chosen"]["cycles"]
    assert [s["instruction"] for s in st["chosen"]["steps"]] == ["vfma"]


def test_the_vita_epilogue_with_a_clip_instruction(tmp_path: Path) -> None:
    report = json.loads(_run(*CONV, "--spec", str(ROOT / "tests/extensions/vita_alu_clip.toml"), "--explain",
                             "--json"))
    assert report["validated"] and {"op", "cycles", "instructions", "unmatched"} <= set(report)
    (st,) = report["selection"]["statements"]
    assert st["statement"] == "VITA epilogue"
    assert st["chosen"]["instructions"] == ["ALU_SHR", "ALU_CLIP"]
    assert {"ALU_MAX", "ALU_MIN"} <= set(st["alternatives"][0]["instructions"])
    assert st["alternatives"][0]["cycles"] > st["chosen"]["cycles"]
    unused = {u["instruction"]: u for u in report["selection"]["unused"]}
    assert f"where the chosen cover costs {st['chosen']['cycles']}" in unused["ALU_MIN"]["reason"]


def test_an_unused_instruction_is_listed_with_the_matchers_reason() -> None:
    selection = _selection(*CONV, "--explain")
    unused = {u["instruction"]: u for u in selection["unused"]}
    assert unused["ALU_MUL"]["statement"] == "VITA epilogue"
    assert "opcode mismatch" in unused["ALU_MUL"]["reason"]
    assert not {"ALU_SHR", "ALU_MAX", "ALU_MIN"} & set(unused)   # the chosen ones


def test_without_explain_the_unused_instructions_are_not_searched() -> None:
    selection = _selection(*CONV)
    assert selection["unused"] is None and selection["statements"][0]["chosen"]["instructions"]


def test_a_slower_fused_instruction_is_listed_as_costing_more(tmp_path: Path) -> None:
    slow = _slower(tmp_path, ISEL / "vita_alu_shrclip.toml", "vita", "ALU_SHRCLIP",
                   "16 * iter_out * iter_in * max(uop_end - uop_bgn, 0)")
    op = f"{ISEL / 'isel_ops.py'}:shift_clip"
    selection = _selection(op, "--target", "vita", "--config", "tvm-paper", "--spec", str(slow), "--explain")
    (st,) = selection["statements"]
    assert "ALU_SHRCLIP" not in st["chosen"]["instructions"]
    (fused,) = [u for u in selection["unused"] if u["instruction"] == "ALU_SHRCLIP"]
    dearer = next(a for a in st["alternatives"] if a["instructions"] == ["ALU_SHRCLIP"])
    assert fused["reason"] == (f"costs {dearer['cycles']} cycles where the chosen cover costs "
                               f"{st['chosen']['cycles']}")


def test_a_scalar_step_says_why_under_not_tensorized(tmp_path: Path) -> None:
    ops = tmp_path / "ops.py"
    ops.write_text("from compiler import te\nfrom compiler.ir import nodes as ir\n\n\n"
                   "def rem(n: int = 256):\n"
                   "    a, b = (te.placeholder((n,), 'int32', name=x) for x in 'ab')\n"
                   "    return [a, b], te.compute((n,), lambda i: ir.FloorMod(a[i], ir.const(8)) + b[i], "
                   "name='rem')\n")
    out = _run(f"{ops}:rem", "--target", "diannao", "-p", "cores=1", "--explain")
    table, explained = out.split("selection:")
    assert "not tensorized: scalar: no instruction computes a remainder" in " ".join(table.split())
    assert "scalar step" in explained and "vadd" in explained


def test_the_plain_table_names_every_selected_instruction() -> None:
    spec = str(ISEL / "vita_alu_shrclip.toml")
    shift_clip = [f"{ISEL / 'isel_ops.py'}:shift_clip", "--target", "vita"]
    for args in ([*CONV, "--spec", spec], [*shift_clip, "--spec", spec]):
        table = " ".join(_run(*args).split())
        assert "ALU_SHRCLIP" in table and "ALU_MAX" not in table


def test_an_operator_with_no_cover_says_so() -> None:
    out = _run("conv2d", "--target", "diannao", "-p", "H=8", "-p", "W=8", "-p", "IC=16", "-p", "OC=16",
               "--explain")
    assert "no statement's instructions were chosen by a cover" in " ".join(out.split())
