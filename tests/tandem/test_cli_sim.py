"""``tandem sim vita``: runs assembly or program files, reports results, and fails with clear errors."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

import isa
from sim.vita.machine import simulate
from tandem.cli import app

RUNNER = CliRunner()
GEMM = ".isa vita\n.text\n    GEMM uop_end=1, iter_out=100, iter_in=1\n    FINISH\n"


def test_assembly_runs_and_json_reports_the_simulated_cycles(tmp_path):
    (tmp_path / "g.s").write_text(GEMM)
    result = RUNNER.invoke(app, ["sim", "vita", str(tmp_path / "g.s"), "--json", "--dram-size", "4096"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    want = simulate(isa.assemble(GEMM), np.zeros(4096, np.uint8))
    assert report["cycles"] == want.cycles
    assert report["counters"]["gemm_counter"] == 100
    assert report["units"]["compute"]["instructions"] == 2


def test_program_files_dram_images_traces_and_dram_out(tmp_path):
    program = isa.assemble(".isa vita\n.text\n LOAD_INP y_size=1, x_size=1, x_stride=1, push_next_dep=1\n"
                           " FINISH pop_prev_dep=1\n")
    (tmp_path / "p.bin").write_bytes(isa.encode_program(program))
    np.arange(64, dtype=np.uint8).tofile(tmp_path / "dram.bin")
    args = ["sim", "vita", str(tmp_path / "p.bin"), "--dram", str(tmp_path / "dram.bin"),
            "--trace", str(tmp_path / "t.json"), "--dram-out", str(tmp_path / "out.bin")]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 instructions on vta-default" in result.output
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert [(e["name"], e["tid"]) for e in events if e["ph"] == "X"][:1] == [("0: LOAD_INP", 0)]
    assert np.array_equal(np.fromfile(tmp_path / "out.bin", np.uint8), np.arange(64, dtype=np.uint8))


def test_a_deadlocked_program_exits_1_naming_the_unit_and_queue(tmp_path):
    (tmp_path / "d.s").write_text(".isa vita\n.text\n GEMM pop_prev_dep=1, uop_end=1, iter_out=1, iter_in=1\n"
                                  " FINISH\n")
    result = RUNNER.invoke(app, ["sim", "vita", str(tmp_path / "d.s")])
    assert result.exit_code == 1
    assert "error: deadlock at cycle 1: compute waits at instruction 0 (GEMM)" in result.output
    assert "Traceback" not in result.output


def test_bad_arguments_exit_2(tmp_path):
    (tmp_path / "g.s").write_text(GEMM)
    result = RUNNER.invoke(app, ["sim", "vita", str(tmp_path / "g.s"), "--config", "vta-huge"])
    assert result.exit_code == 2 and "no built-in config 'vta-huge'" in result.output
    (tmp_path / "bad.s").write_text(".isa vita\n.text\n FROB\n")
    result = RUNNER.invoke(app, ["sim", "vita", str(tmp_path / "bad.s")])
    assert result.exit_code == 2 and "unknown instruction 'FROB'" in result.output


def test_output_paths_are_checked_before_simulating_and_sizes_are_bounded(tmp_path, monkeypatch):
    (tmp_path / "g.s").write_text(GEMM)
    ran = []
    monkeypatch.setattr("tandem.sim_commands.simulate", lambda *a, **k: ran.append(1))
    cases = [
        (["--trace", str(tmp_path)], f"--trace: {tmp_path} is a directory"),
        (["--trace", str(tmp_path / "no" / "t.json")], f"--trace: the folder {tmp_path / 'no'} of"),
        (["--dram-out", str(tmp_path)], "--dram-out: "),
        (["--dram-size", "-1"], "--dram-size"),
        (["--dram-size", str(1 << 40)], "--dram-size"),
    ]
    for args, message in cases:
        result = RUNNER.invoke(app, ["sim", "vita", str(tmp_path / "g.s"), *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output
    assert ran == []   # nothing was simulated
    result = RUNNER.invoke(app, ["sim", "diannao", str(tmp_path / "g.s"), "--gmem-out", str(tmp_path)])
    assert result.exit_code == 2 and "--gmem-out: " in result.output


def test_output_files_appear_whole_with_the_usual_permissions(tmp_path):
    from sim.core.output import write_atomically

    write_atomically(tmp_path / "a.bin", b"\x00" * 10)
    assert (tmp_path / "a.bin").read_bytes() == b"\x00" * 10
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]   # no temporary file left
    assert (tmp_path / "a.bin").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_binary_file_given_as_a_spec_is_named_not_an_internal_error(tmp_path):
    (tmp_path / "x.toml").write_bytes(bytes(range(256)))
    result = RUNNER.invoke(app, ["isa", "check", str(tmp_path / "x.toml")])
    assert result.exit_code != 0 and "not UTF-8 text" in result.output
    assert "internal error" not in result.output
