"""``tandem sim diannao``: runs assembly or program files on the DianNao card, reports what a direct launch
reports, round-trips GMEM, writes traces, and fails with one clear error line (exit 1) on every bad input."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
from typer.testing import CliRunner

import isa
from baselines.diannao_kernels import elementwise_program
from sim.diannao.machine import Card
from tandem.cli.app import app

RUNNER = CliRunner()
CORES = 4
PER_CORE = 256  # f32 elements per core
TILE = 128  # elements per tile: two tiles per core
N = CORES * PER_CORE
A_ADDR, B_ADDR, C_ADDR = 0, 4 * N, 8 * N  # the GMEM image holds A and B; C follows them
ARGS = ["--arg", str(A_ADDR), "--arg", hex(B_ADDR), "--arg", str(C_ADDR)]


def vadd_program() -> isa.Program:
    """C = A + B over N f32 elements on CORES cores (baselines/diannao_kernels.py)."""
    return elementwise_program("vadd", "f32", PER_CORE, TILE)


def inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B and the GMEM image that holds them at A_ADDR and B_ADDR, zeros for C after them."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, N)).astype(np.float32)
    image = np.concatenate([a.view(np.uint8), b.view(np.uint8), np.zeros(4 * N, np.uint8)])
    return a, b, image


def write_kernel(tmp_path, binary: bool):
    """The vadd kernel as assembly text (k.s) or as a program file (k.bin), and the GMEM image (gmem.bin)."""
    program = vadd_program()
    path = tmp_path / ("k.bin" if binary else "k.s")
    if binary:
        path.write_bytes(isa.encode_program(program))
    else:
        path.write_text(isa.disassemble(program))
    inputs()[2].tofile(tmp_path / "gmem.bin")
    return path, tmp_path / "gmem.bin"


def sim(*args: str):
    return RUNNER.invoke(app, ["sim", "diannao", *map(str, args)])


@pytest.mark.parametrize("binary", [False, True], ids=["assembly", "program file"])
def test_json_reports_what_a_direct_launch_of_the_same_program_measures(tmp_path, binary):
    kernel, gmem = write_kernel(tmp_path, binary)
    result = sim(kernel, "--gmem", gmem, "--cores", CORES, *ARGS, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)

    want = Card("default", inputs()[2], spec=isa.load_isa("diannao")).launch(
        vadd_program(), cores=CORES, args=[A_ADDR, B_ADDR, C_ADDR])
    assert report["cycles"] == want.cycles
    assert report["microseconds"] == pytest.approx(want.cycles / want.clock_mhz)
    assert report["cores"] == [asdict(c) for c in want.cores]
    assert [c["core"] for c in report["cores"]] == list(range(CORES))
    assert report["instructions"] == want.instructions
    assert (report["tensor_instructions"], report["scalar_instructions"]) == (
        want.tensor_instructions, want.scalar_instructions)
    assert report["bytes_moved"] == {"GMEM->NMEM": 2 * 4 * N, "NMEM->GMEM": 4 * N}
    assert report["utilization"] == pytest.approx({u: want.utilization(u) for u in ("vfu", "tfu", "dma")})
    assert report["program_instructions"] == len(vadd_program())


def test_gmem_in_and_out_round_trip_through_the_kernel(tmp_path):
    kernel, gmem = write_kernel(tmp_path, binary=True)
    out = tmp_path / "out.bin"
    result = sim(kernel, "--gmem", gmem, "--cores", CORES, *ARGS, "--gmem-out", out)
    assert result.exit_code == 0, result.output
    a, b, image = inputs()
    final = np.fromfile(out, np.uint8)
    assert final.size == image.size
    assert np.array_equal(final[:C_ADDR], image[:C_ADDR])
    np.testing.assert_array_equal(final[C_ADDR:].view(np.float32), a + b)

    head = hex(B_ADDR)  # --gmem-size writes only GMEM[0:head), and takes hex like --arg
    result = sim(kernel, "--gmem", gmem, "--cores", CORES, *ARGS, "--gmem-out", out, "--gmem-size", head)
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.fromfile(out, np.uint8), image[:B_ADDR])


def test_the_human_report_gives_cycles_cores_instruction_mix_bytes_and_utilization(tmp_path):
    kernel, gmem = write_kernel(tmp_path, binary=False)
    result = sim(kernel, "--gmem", gmem, "--cores", CORES, *ARGS)
    assert result.exit_code == 0, result.output
    want = Card("default", inputs()[2], spec=isa.load_isa("diannao")).launch(
        vadd_program(), cores=CORES, args=[A_ADDR, B_ADDR, C_ADDR])
    text = result.output
    assert (f"{len(vadd_program())} instructions on {CORES} cores of default: {want.cycles} cycles "
            f"({want.cycles / 1000:.1f} us at 1000 MHz)") in text
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()
            if line.startswith("│")]
    assert rows == [[str(v) for v in (c.core, c.cluster, c.busy, c.stalled, c.idle, c.tensor_instructions,
                                      c.scalar_instructions)] for c in want.cores]
    assert (f"executed {want.tensor_instructions + want.scalar_instructions} instructions: "
            f"{want.tensor_instructions} tensor, {want.scalar_instructions} scalar") in text
    assert f"memcpyr {3 * 2 * CORES}" in text  # two tiles per core, two copies in and one out per tile
    assert f"bytes moved: GMEM->NMEM {8 * N}, NMEM->GMEM {4 * N}" in text
    assert f"DMA {want.utilization('dma'):.1%}" in text and "VFU " in text and "TFU 0.0%" in text


def test_trace_writes_a_chrome_trace_with_a_track_per_core_and_dma_engine(tmp_path):
    kernel, gmem = write_kernel(tmp_path, binary=False)
    result = sim(kernel, "--gmem", gmem, "--cores", CORES, *ARGS, "--trace", tmp_path / "t.json", "--json")
    assert result.exit_code == 0, result.output
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {f"core {c}" for c in range(CORES)} | {f"core {c} DMA" for c in range(CORES)}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert slices and all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    assert trace["otherData"]["cycles"] == json.loads(result.output)["cycles"]


MISALIGNED = ".isa diannao\n.text\n    vadd.f32 dst=4, a=0, b=512, n=64\n    halt\n"
# core 0 of the cluster skips the barrier the other three wait at
DEADLOCK = (".isa diannao\n.text\n    rdid r3, CORE_ID\n    beq r3, r31, done\n    barrier scope=CLUSTER\n"
            "done:\n    halt\n")
HALT = ".isa diannao\n.text\n    halt\n"


@pytest.mark.parametrize(("program", "options", "message"), [
    (None, [], "nope.s: No such file or directory"),
    (".isa diannao\n.text\n    frob r1\n", [], "k.s:3: unknown instruction 'frob'"),
    (MISALIGNED, ["--cores", "1"],
     "core 0 (cluster 0, core 0), pc 0 (vadd.f32 dst=0x4, a=0x0, b=0x200, n=64): dst must be "
     "VECTOR_ALIGN-byte aligned"),
    (DEADLOCK, ["--cores", "4"],
     "barrier deadlock at cycle 4: cores 1-3 wait at the barrier of cluster 0 (pc 2), but core 0 halted at "
     "pc 3"),
    (HALT, ["--cores", "5"], "cannot launch on 5 cores"),
    (HALT, ["--cores", "0"], "cannot launch on 0 cores"),
    (HALT, ["--arg", "ten"], "--arg number 1: expected an integer (decimal or 0x hex), but got 'ten'"),
    (HALT, ["--gmem-out", "out.bin"], "--gmem-out needs --gmem-size or a --gmem image"),
    (HALT, ["--gmem-out", "out.bin", "--gmem-size", "0"], "--gmem-size: expected 1 to"),
    (HALT, ["--gmem", "missing.bin"], "missing.bin: No such file or directory"),
    (HALT, ["--config", "huge"], "huge: no built-in config 'huge'"),
    (".isa vita\n.text\n    FINISH\n", [], "k.s: the text is for ISA 'vita', but ISA 'diannao' was given"),
    (".isa diannao\n.text\n    li r1, 1\n", [],
     "core 0 (cluster 0, core 0), pc 1: ran past the last instruction (0) without halt"),
], ids=["missing file", "bad assembly", "misaligned vadd", "barrier deadlock", "5 cores", "0 cores",
        "bad arg", "gmem-out without size", "gmem-size 0", "missing gmem image", "unknown config",
        "vita program", "no halt"])
def test_every_bad_input_or_failing_run_exits_with_one_error_line_naming_the_problem(
        tmp_path, monkeypatch, program, options, message):
    """Status 2 for input refused before the simulation (a file, the assembly, an option, the config), 1 for a
    simulation that fails (a broken instruction rule, a deadlock, a launch the card cannot make)."""
    monkeypatch.chdir(tmp_path)
    if program is not None:
        (tmp_path / "k.s").write_text(program)
    result = sim("k.s" if program is not None else "nope.s", *options)
    runtime = message.startswith(("core ", "barrier deadlock", "cannot launch"))
    assert result.exit_code == (1 if runtime else 2), result.output
    assert result.output.startswith(f"error: {message}")
    assert result.output.count("\n") == 1, "one error line, no traceback"
    assert isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out.bin").exists()


def test_a_program_file_for_another_isa_exits_2(tmp_path):
    vita = isa.assemble(".isa vita\n.text\n    FINISH\n")
    (tmp_path / "v.bin").write_bytes(isa.encode_program(vita))
    result = sim(tmp_path / "v.bin")
    assert result.exit_code == 2
    assert result.output.startswith("error: program file is for ISA 'vita'")
    assert result.output.count("\n") == 1
