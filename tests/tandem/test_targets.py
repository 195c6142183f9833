"""The edge resolves a target once: config by name or file, the spec from --spec, the config's own spec file
or the built-in one, the config's ISA parameters applied; ``--spec`` works on run, compile and sim (issue 19).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import isa
from compiler.errors import LoweringError
from compiler.target import Target
from isa.loader import SPECS_DIR
from tandem.cli.app import app
from tandem.flows.targets import TargetError, load_target

runner = CliRunner()


def spec_copy(tmp_path: Path, family: str, *edits: tuple[str, str]) -> Path:
    """The built-in spec ``family`` copied to ``tmp_path`` with each (old, new) text edit applied once."""
    text = (SPECS_DIR / f"{family}.toml").read_text()
    for old, new in edits:
        assert text.count(old) >= 1, old
        text = text.replace(old, new, 1)
    path = tmp_path / f"my_{family}.toml"
    path.write_text(text)
    return path


SLOW_VADD = ('cycles = "ceil_div(n * bytes(T), VFU_BYTES_PER_CYCLE)"',
             'cycles = "8 * ceil_div(n * bytes(T), VFU_BYTES_PER_CYCLE)"')


def test_a_target_carries_the_built_in_spec_with_the_configs_parameters():
    t = load_target("vita", "tvm-paper")
    assert t.kind == "vita" and t.config.name == "tvm-paper"
    assert t.spec.params["LOG_INP_BUFF_SIZE"] == 15 and t.spec.source == "isa/specs/vita.toml"
    assert load_target("vita", "tvm-paper").spec is t.spec   # one value per (spec, parameters)
    assert load_target("cpu").spec.name == "x86" and load_target("cpu").config is None
    assert load_target("reference") == Target("reference")


def test_a_spec_file_replaces_the_built_in_one_and_still_gets_the_configs_parameters(tmp_path):
    path = spec_copy(tmp_path, "vita")
    t = load_target("vita", "tvm-paper", path)
    assert t.spec.source == str(path) and t.spec.params["LOG_INP_BUFF_SIZE"] == 15


def test_a_config_may_name_its_spec_file_relative_to_itself(tmp_path):
    spec_copy(tmp_path, "diannao", SLOW_VADD)
    (tmp_path / "card.toml").write_text('name = "card"\nsummary = "slow vadd"\nspec = "my_diannao.toml"\n'
                                         '[isa_params]\nCLUSTERS = 2\n')
    t = load_target("diannao", tmp_path / "card.toml")
    assert t.spec.source == str(tmp_path / "my_diannao.toml") and t.spec.params["CLUSTERS"] == 2
    assert "8 * ceil_div" in str(t.spec.instruction("vadd").timing.cycles)


def test_a_spec_of_another_family_or_an_unknown_target_is_refused(tmp_path):
    with pytest.raises(TargetError, match="target 'vita' needs a spec of the 'vita' ISA family, but this "
                                          "spec is 'diannao'"):
        load_target("vita", spec=SPECS_DIR / "diannao.toml")
    with pytest.raises(TargetError, match="unknown target 'gpu'"):
        load_target("gpu")
    with pytest.raises(TargetError, match="takes no --config"):
        load_target("cpu", config="default")


def test_the_compiler_refuses_a_target_without_its_spec():
    with pytest.raises(LoweringError, match="target 'vita' needs its ISA spec"):
        Target("vita")
    with pytest.raises(LoweringError, match="compiles for the 'vita' ISA family"):
        Target("vita", isa.load_isa("diannao"))


def test_run_with_a_spec_whose_vadd_is_slower_takes_more_cycles(tmp_path):
    slow = spec_copy(tmp_path, "diannao", SLOW_VADD)
    args = ["run", "add", "--target", "diannao", "--shape", "4x64x64", "-p", "cores=4", "--json"]
    base = runner.invoke(app, args)
    slower = runner.invoke(app, [*args, "--spec", str(slow)])
    assert base.exit_code == 0 and slower.exit_code == 0, slower.output
    a, b = json.loads(base.output), json.loads(slower.output)
    assert a["validated"] and b["validated"]
    assert a["instructions"] == b["instructions"] and b["cycles"] > a["cycles"]


@pytest.mark.parametrize("target", ["vita", "cpu"])
def test_run_takes_a_spec_file_for_vita_and_the_cpu(tmp_path, target):
    from compiler.backend.llvm import host_cpu

    if target == "cpu" and not host_cpu()["avx512vnni"]:
        pytest.skip("this CPU has no AVX-512 VNNI")
    family = "x86" if target == "cpu" else target
    path = spec_copy(tmp_path, family)
    done = runner.invoke(app, ["run", "gemm", "--target", target, "-p", "M=16", "-p", "N=32", "-p", "K=32",
                               "--spec", str(path), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["validated"]
    wrong = runner.invoke(app, ["run", "gemm", "--target", target, "--spec", str(SPECS_DIR / "cuda.toml")])
    assert wrong.exit_code == 2 and "ISA family" in wrong.output and "Traceback" not in wrong.output


def test_compile_takes_a_spec_file_and_a_config(tmp_path):
    path = spec_copy(tmp_path, "diannao")
    done = runner.invoke(app, ["compile", "add", "--shape", "4x64", "--target", "diannao",
                               "--spec", str(path), "--run"])
    assert done.exit_code == 0, done.output
    assert "match" in done.output
    bad = runner.invoke(app, ["compile", "add", "--target", "vita", "--spec", str(path)])
    assert bad.exit_code == 2 and "needs a spec of the 'vita' ISA family" in bad.output


def test_sim_takes_a_spec_file(tmp_path):
    path = spec_copy(tmp_path, "vita")
    prog = tmp_path / "finish.s"
    prog.write_text(".isa vita\n.text\nFINISH\n")
    done = runner.invoke(app, ["sim", "vita", str(prog), "--spec", str(path), "--json"])
    assert done.exit_code == 0, done.output
    slow = spec_copy(tmp_path, "diannao", SLOW_VADD)
    kernel = tmp_path / "add.s"
    kernel.write_text(".isa diannao\n.text\nvadd.f32 dst=0, a=0, b=0, n=4096\nhalt\n")
    fast_run = runner.invoke(app, ["sim", "diannao", str(kernel), "--cores", "1", "--json"])
    slow_run = runner.invoke(app, ["sim", "diannao", str(kernel), "--cores", "1", "--spec", str(slow),
                                   "--json"])
    assert fast_run.exit_code == 0 and slow_run.exit_code == 0, slow_run.output
    assert json.loads(slow_run.output)["cycles"] > json.loads(fast_run.output)["cycles"]


def test_a_config_key_that_moved_into_the_spec_says_where_it_lives_now(tmp_path):
    from sim.core.errors import SimConfigError
    from sim.vita.config import VitaConfig

    text = 'name = "old"\nsummary = "an earlier config"\ndram_bytes_per_cycle = 16\n'
    moved = r"now lives in the spec: set \[isa_params\] DRAM_BYTES_PER_CYCLE"
    with pytest.raises(SimConfigError, match=moved):
        VitaConfig.from_text(text, "old.toml")
    path = tmp_path / "old.toml"
    path.write_text(text)
    done = runner.invoke(app, ["run", "gemm", "--target", "vita", "--config", str(path)])
    assert done.exit_code == 2 and "DRAM_BYTES_PER_CYCLE" in done.output and "Traceback" not in done.output


def test_a_config_naming_a_missing_spec_file_is_one_error_line(tmp_path):
    (tmp_path / "card.toml").write_text('name = "c"\nsummary = "s"\nspec = "nowhere.toml"\n')
    done = runner.invoke(app, ["run", "add", "--target", "diannao", "--config", str(tmp_path / "card.toml")])
    assert done.exit_code == 2 and "nowhere.toml" in done.output and "Traceback" not in done.output
