"""``tandem sim vita``: runs assembly or program files, reports results, and fails with clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import isa
from sim.vita.functional import VitaExecError
from sim.vita.machine import simulate
from tandem.cli.app import app

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
    monkeypatch.setattr("sim.vita.machine.simulate", lambda *a, **k: ran.append(1))
    cases = [
        (["--trace", str(tmp_path)], f"--trace: {tmp_path} is a directory"),
        (["--trace", str(tmp_path / "no" / "t.json")], f"--trace: the folder {tmp_path / 'no'} of"),
        (["--dram-out", str(tmp_path)], "--dram-out: "),
        (["--dram-size", "-1"], "--dram-size"),
        (["--dram-size", str(1 << 40)], "--dram-size"),
        (["--dram-base", "0"], "--dram-base: the DRAM base must be a multiple of the 4096-byte page other "
                               "than 0"),
        (["--dram-base", "0x1004"], "--dram-base: the DRAM base must be a multiple of the 4096-byte page"),
        (["--dram-base", "0xfffff000"], "--dram-base: a DRAM image of 1,048,576 bytes at 0xfffff000 ends "
                                        "at 0x1000ff000, past the 0x100000000 bytes of the physical address"),
        (["--dram-base", "page2"], "--dram-base: expected an integer (decimal or 0x hex), but got 'page2'"),
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


def test_programs_are_relocatable_wherever_the_dram_image_lies(tmp_path):
    """DRAM addresses count from the image, which lies at --dram-base (by default page 1: VTA's runtime never
    hands out physical page 0): the same program and image give the same results at any base."""
    program = isa.assemble(".isa vita\n.text\n LOAD_INP y_size=1, x_size=2, x_stride=2, push_next_dep=1\n"
                           " FINISH pop_prev_dep=1\n")
    (tmp_path / "p.bin").write_bytes(isa.encode_program(program))
    np.arange(64, dtype=np.uint8).tofile(tmp_path / "dram.bin")
    reports = []
    for base in ([], ["--dram-base", "0x1000"], ["--dram-base", "0x80000000"], ["--dram-base", "8192"]):
        result = RUNNER.invoke(app, ["sim", "vita", str(tmp_path / "p.bin"), "--dram",
                                     str(tmp_path / "dram.bin"), "--json", *base])
        assert result.exit_code == 0, result.output
        reports.append(json.loads(result.output))
    assert [r.pop("dram_base") for r in reports] == [0x1000, 0x1000, 0x80000000, 8192]
    assert all(r == reports[0] for r in reports)
    # an access past the image names its physical addresses at that base
    far = isa.assemble(".isa vita\n.text\n LOAD_INP dram_base=4, y_size=1, x_size=1, x_stride=1\n FINISH\n")
    with pytest.raises(VitaExecError, match=r"DRAM bytes 64\.\.79 \(physical 0x80000040\.\.0x8000004f\) are "
                       r"outside DRAM \(64 bytes at 0x80000000\)"):
        simulate(far, np.zeros(64, np.uint8), dram_base=0x80000000)
    with pytest.raises(VitaExecError, match="other than 0"):
        simulate(far, np.zeros(64, np.uint8), dram_base=0)
