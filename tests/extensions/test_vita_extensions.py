"""VITA extensions from spec files alone (tests/extensions/*.toml), run through ``tandem run --spec``: each is
bit-exact, its new instruction is selected where its semantics match, and it is timed by its own timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import isa
from compiler.ops.nn import ConvShape
from compiler.ops.vita import Tiling
from tandem.cli.app import app
from tandem.flows.targets import load_target
from tandem.flows.vita import run_vita

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CLIP, PIPELINED = HERE / "vita_alu_clip.toml", HERE / "vita_pipelined.toml"
RUNNER = CliRunner()
LAYERS = {
    "conv2d": ["-p", "H=14", "-p", "W=14", "-p", "IC=64", "-p", "OC=64"],
    "gemm": ["-p", "M=64", "-p", "N=128", "-p", "K=256"],
}


def run(op: str, *args: str) -> dict:
    result = RUNNER.invoke(app, ["run", op, *LAYERS[op], "--target", "vita", "--config", "tvm-paper", *args,
                                 "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["validated"] is True and report["max_abs_err"] == 0, report
    return report


@pytest.mark.parametrize("op", list(LAYERS))
@pytest.mark.parametrize("relu", [[], ["--relu"]], ids=["clip", "relu"])
def test_alu_clip_replaces_the_epilogues_max_and_min(op: str, relu: list[str]) -> None:
    base, clip = run(op, *relu), run(op, *relu, "--spec", str(CLIP))
    counts, before = clip["instructions"], base["instructions"]
    assert before["ALU_SHR"] == before["ALU_MAX"] == before["ALU_MIN"] and "ALU_CLIP" not in before
    assert counts["ALU_CLIP"] == counts["ALU_SHR"] and "ALU_MAX" not in counts and "ALU_MIN" not in counts
    assert clip["cycles"] < base["cycles"]


def test_alu_clip_is_chosen_by_its_own_spec_timing(tmp_path: Path) -> None:
    """A clip slower than the max and min it replaces is not selected: the cover takes the max and min."""
    slow = tmp_path / "slow_clip.toml"
    slow.write_text(f'[isa]\nname = "vita"\nsummary = "ALU_CLIP at 16 cycles per micro-op"\n'
                    f'extends = "{CLIP}"\n[instructions.ALU_CLIP]\n'
                    f'timing = {{ cycles = "16 * iter_out * iter_in * max(uop_end - uop_bgn, 0)" }}\n')
    fast = run("conv2d", "--spec", str(CLIP))
    tiling = Tiling(**fast["params"]["tiling"])
    layer = ConvShape(14, 14, 64, 64)
    same = run_vita(layer, 0, load_target("vita", "tvm-paper", CLIP), tiling=tiling)
    slower = run_vita(layer, 0, load_target("vita", "tvm-paper", slow), tiling=tiling)
    plain = run_vita(layer, 0, load_target("vita", "tvm-paper"), tiling=tiling)
    assert same.cycles == fast["cycles"] and slower.validated and "ALU_CLIP" not in slower.instructions
    assert slower.instructions == plain.instructions and slower.cycles == plain.cycles > same.cycles


def test_a_pipelined_alu_and_gemm_by_spec_timing_alone() -> None:
    for op in LAYERS:
        base, fast = run(op, "--vthreads", "2"), run(op, "--vthreads", "2", "--spec", str(PIPELINED))
        assert fast["cycles"] < base["cycles"]
        assert fast["instructions"].keys() == base["instructions"].keys()   # the same instructions, faster


@pytest.mark.parametrize("spec_file", [CLIP, ROOT / "experiments/specs/vita_relaxed_encoding.toml"])
def test_alu_clip_encodes_and_decodes_beside_the_other_alu_instructions(spec_file: Path) -> None:
    doubled = {"LOG_INP_BUFF_SIZE": 16, "LOG_WGT_BUFF_SIZE": 16, "LOG_ACC_BUFF_SIZE": 18,
               "LOG_UOP_BUFF_SIZE": 16}   # every buffer twice tvm-paper's: only the wider encoding fits
    text = f'[isa]\nname = "vita"\nsummary = "both"\nextends = ["{spec_file}", "{CLIP}"]\n'
    spec = isa.load_spec_file(CLIP) if spec_file == CLIP else isa.load_spec_text(text, "x.toml", doubled)
    clip = spec.insn("ALU_CLIP", uop_bgn=0, uop_end=1, iter_out=3, iter_in=1, dst_factor_out=1, lo=-128,
                     hi=127)
    maximum = spec.insn("ALU_MAX", uop_bgn=0, uop_end=1, iter_out=3, iter_in=1, dst_factor_out=1, use_imm=1,
                        imm=-128)
    for insn in (clip, maximum):
        assert isa.binary.decode_insn(spec, isa.binary.encode_insn(spec, insn)) == insn
