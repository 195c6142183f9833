"""VITA extensions from spec files alone (tests/extensions/*.toml), run through ``tandem run --spec``: each is
bit-exact, its new instruction is selected where its semantics match, and it is timed by its own timing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import isa
from compiler.ops.nn import ConvShape
from compiler.ops.vita import Tiling
from sim.vita.machine import simulate
from tandem.cli.app import app
from tandem.flows.targets import load_target
from tandem.flows.vita import compile_layer, run_vita
from tandem.flows.vita_layers import Epilogue

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


# ---------------------------------------------------------------------------- ALU_CLIP in a format of its own
OWN = HERE / "vita_alu_clip_own_format.toml"
SMALL = {"gemm": ["-p", "M=32", "-p", "N=32", "-p", "K=32"],
         "conv2d": [*LAYERS["conv2d"], "--config", "tvm-paper", "--relu"]}


def run_small(op: str, spec: Path) -> dict:
    result = RUNNER.invoke(app, ["run", op, *SMALL[op], "--target", "vita", "--spec", str(spec), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["validated"] is True and report["max_abs_err"] == 0, report
    return report


@pytest.mark.parametrize("op", list(SMALL))
def test_alu_clip_in_its_own_format_is_selected_and_runs_as_in_the_built_in_one(op: str) -> None:
    """Regression test for issue 46: an ALU_CLIP format with `lo` where src_factor_in is (and no such field)
    crashed the simulator with KeyError: 'src_factor_in'. It runs, selected as in vita_alu_clip.toml, in the
    same cycles."""
    own, clip = run_small(op, OWN), run_small(op, CLIP)
    counts = own["instructions"]
    assert counts["ALU_CLIP"] == counts["ALU_SHR"] > 0 and "ALU_MAX" not in counts and "ALU_MIN" not in counts
    assert counts == clip["instructions"] and own["cycles"] == clip["cycles"]


def test_the_same_program_in_either_clip_format_gives_the_same_result() -> None:
    """The conv2d compiled for each spec is the same program (the own format's ALU_CLIP words also carry
    src_factor_out = 0) and simulates to the same DRAM, cycles and trace; only the ALU_CLIP words differ."""
    layer = ConvShape(14, 14, 64, 64)
    targets = [load_target("vita", "tvm-paper", spec) for spec in (CLIP, OWN)]
    tiling = Tiling(**run_vita(layer, 0, targets[0], relu=True).params["tiling"])
    epilogue = Epilogue(relu=True)
    (vs, clip), (_, own) = (compile_layer(layer, tiling, t, epilogue) for t in targets)
    assert [i.name for i in own.program.insns] == [i.name for i in clip.program.insns]
    for mine, theirs in zip(own.program.insns, clip.program.insns, strict=True):
        extra = {k: v for k, v in mine.values.items() if k not in theirs.values}
        assert {k: mine.values[k] for k in theirs.values} == theirs.values
        assert extra == ({"src_factor_out": 0} if mine.name == "ALU_CLIP" else {})
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-128, 128, b.shape, dtype=np.int8) for b in vs.args[:-1]]   # data, weights
    results = [simulate(k.program, k.dram_image(inputs), t.config) for k, t in zip((clip, own), targets,
                                                                                     strict=True)]
    assert results[0] == results[1] and results[0].counters["alu_counter"] > 0
    words = [isa.encode_program(k.program) for k in (clip, own)]
    assert words[0] != words[1] and isa.decode_program(words[1], spec=targets[1].spec) == own.program


NO_DST_FACTOR_IN = """
constraints = [
  { kind = "range", rule = "uop_bgn < uop_end", message = "the micro-op range must not be empty" },
  { kind = "other", rule = "lo <= hi", message = "the clip bounds must satisfy lo <= hi" },
]
"""


def without_dst_factor_in(tmp_path: Path) -> Path:
    """The own-format spec with dst_factor_in's bits named `spare` (and its rule dropped): a format whose
    ALU_CLIP lacks a factor its dst's address needs."""
    text = OWN.read_text().replace('name = "dst_factor_in"', 'name = "spare"')
    spec = tmp_path / "no_dst_factor_in.toml"
    spec.write_text(text.replace('extends = "vita_alu_clip.toml"', f'extends = "{CLIP}"') + NO_DST_FACTOR_IN)
    return spec


def test_a_clip_format_without_a_factor_its_address_needs_is_refused_naming_it(tmp_path: Path) -> None:
    """ALU_CLIP's dst is at dst_idx + i * dst_factor_out + j * dst_factor_in: a format without dst_factor_in
    gets no factor of 0 but an error from the compiler naming the instruction and the field (no traceback)."""
    result = RUNNER.invoke(app, ["run", "gemm", *SMALL["gemm"], "--target", "vita", "--spec",
                                 str(without_dst_factor_in(tmp_path))])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("error: VITA backend: cannot emit ALU_CLIP as a micro-op loop: "), \
        result.output
    assert "the format has no field 'dst_factor_in'" in result.output
