"""Area and energy (sim/core/energy.py): the table, actions counted from the spec's semantics, and the
energy of real runs checked against a hand computation from the simulators' own counters and the table's
numbers (read from its TOML here, so a changed number changes both sides)."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import isa
from sim.core.energy import (
    TABLES,
    EnergyTableError,
    area_mm2,
    instruction_activity,
    load_table,
)
from sim.diannao import energy as diannao_energy
from sim.vita import energy as vita_energy
from sim.vita.functional import uop_count
from sim.vita.machine import simulate
from tandem.cli.app import app
from tandem.flows.targets import load_target

ROOT = Path(__file__).resolve().parents[2]
RAW = tomllib.loads((TABLES / "horowitz-45nm.toml").read_text())
RUNNER = CliRunner()


def price(op: str, key: str) -> float:
    return RAW["ops"][op][key]["pj"]


def sram_pj_per_byte(capacity: int) -> float:
    """The table's SRAM line by hand: log-log between its two points around ``capacity``."""
    points = RAW["sram"]["read_pj"]
    k = next((k for k in range(len(points) - 2) if capacity <= points[k + 1][0]), len(points) - 2)
    (c0, e0), (c1, e1) = points[k], points[k + 1]
    per_word = e0 * (capacity / c0) ** (math.log(e1 / e0) / math.log(c1 / c0))
    return per_word / (RAW["sram"]["word_bits"] / 8)


def test_every_price_names_its_source() -> None:
    table = load_table()
    assert set(table.sources) == {f"ops.{op}.{k}" for op in ("add", "mul") for k in RAW["ops"][op]}
    assert all(len(source) > 10 for source in table.sources.values())


def test_technology_scaling_scales_logic_and_sram_but_not_dram() -> None:
    at45, at22 = load_table(), load_table(technology_nm=22.5)
    assert at22.op("mul", "i8").pj == pytest.approx(at45.op("mul", "i8").pj / 2)
    assert at22.op("mul", "i8").um2 == pytest.approx(at45.op("mul", "i8").um2 / 4)
    assert at22.sram_access_pj(32768, 8) == pytest.approx(at45.sram_access_pj(32768, 8) / 2)
    assert at22.sram_um2(32768) == pytest.approx(at45.sram_um2(32768) / 4)
    assert at22.dram_pj(100) == at45.dram_pj(100) == 100 * RAW["dram"]["pj_per_byte"]


def test_widths_between_and_beyond_the_table() -> None:
    table = load_table()
    assert table.op("add", "u8").pj == price("add", "int8")
    assert table.op("mul", "i16").pj == price("mul", "int16")
    assert table.op("add", "bf16").pj == price("add", "fp16")
    assert table.op("mul", "i64").pj == pytest.approx(4 * price("mul", "int32"))   # quadratic past int32
    assert table.op("add", "i64").pj == pytest.approx(2 * price("add", "int32"))   # linear


def test_sram_energy_follows_the_table_points() -> None:
    table = load_table()
    for capacity, pj in RAW["sram"]["read_pj"]:
        assert table.sram_access_pj(capacity, 8) == pytest.approx(pj)
    assert table.sram_access_pj(16384, 8) == pytest.approx(sram_pj_per_byte(16384) * 8)


@pytest.mark.parametrize("text,key", [
    ('name = "t"\ntechnology_nm = 45\n', "[ops.add]"),
    (TABLES.joinpath("horowitz-45nm.toml").read_text().replace('pj = 0.2,', 'pj = -1,'), "ops.mul.int8.pj"),
    (TABLES.joinpath("horowitz-45nm.toml").read_text().replace("read_pj = [[8192, 10.0], ",
                                                              "read_pj = [[1e9, 10.0], "), "sram.read_pj"),
    (TABLES.joinpath("horowitz-45nm.toml").read_text().replace("pj_per_byte = 244.0", ""),
     "dram.pj_per_byte"),
])
def test_a_bad_table_is_refused_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(EnergyTableError, match=key.replace("[", r"\[").replace(".", r"\.")) as info:
        load_table(path)
    assert str(path) in str(info.value)


def test_an_unknown_table_name_lists_the_built_in_ones() -> None:
    with pytest.raises(EnergyTableError, match="horowitz-45nm"):
        load_table("no-such-table")


@pytest.mark.parametrize("log_block", [4, 5])
def test_a_gemm_micro_op_is_the_spec_s_block_of_8_bit_macs(log_block: int) -> None:
    spec = isa.load_isa("vita").with_params({"LOG_BLOCK": log_block, "LOG_WGT_BUFF_SIZE": 15})
    block = 1 << log_block
    fields = dict.fromkeys((f.name for f in spec.instruction("GEMM").fields), 0)
    activity = instruction_activity(spec, spec.insn("GEMM", **{**fields, "uop_end": 1}))
    assert activity.ops == {("mul", "i8"): block * block, ("add", "i32"): block * block}
    assert activity.reads == {"INP": block, "WGT": block * block, "ACC": 4 * block}
    assert activity.writes == {"ACC": 4 * block}


def test_a_memcpy_reads_and_writes_the_spaces_its_fields_name() -> None:
    spec = isa.load_isa("diannao")
    insn = isa.assemble("memcpy dst_space=NMEM, src_space=GMEM, dst=0, src=0, len=256, count=3, "
                        "dst_stride=256, src_stride=256", isa=spec).insns[0]
    activity = instruction_activity(spec, insn)
    assert activity.reads == {"GMEM": 768} and activity.writes == {"NMEM": 768} and not activity.ops


def test_vita_run_energy_equals_the_hand_computation_from_fsim_counters() -> None:
    """examples/vita/gemm.s: GEMM micro-ops, ALU micro-ops, loads and the store, from VTA fsim's own
    counters (gemm_counter, alu_counter, *_load_nbytes, out_store_nbytes) and the table."""
    target = load_target("vita", "vta-default", None)
    text = (ROOT / "examples/vita/gemm.s").read_text()
    program = isa.assemble(text, isa=target.spec.with_params({"LOG_WGT_BUFF_SIZE": 15}))
    dram = np.fromfile(ROOT / "examples/vita/gemm_dram.bin", dtype=np.uint8)
    config = load_target("vita", str(ROOT / "examples/vita-32x32.toml"), None).config  # any config: no timing
    config = type(config)("hand", "", program.isa.overrides)
    result = simulate(program, dram, config)
    c = result.counters
    p = program.isa.params
    batch, block = p["BATCH"], p["BLOCK_OUT"]
    resets = sum(uop_count(dict(i.fields)) for i in program.insns if i.name == "GEMM_RESET")
    acc_tile, size = 4 * batch * block, {m: (1 << p[f"LOG_{m}_BUFF_SIZE"]) for m in ("INP", "WGT", "ACC",
                                                                                          "UOP")}
    macs = c["gemm_counter"] * batch * block * block
    want_compute = macs * (price("mul", "int8") + price("add", "int32")) \
        + c["alu_counter"] * batch * block * price("add", "int32")
    want_dram = (c["inp_load_nbytes"] + c["wgt_load_nbytes"] + c["acc_load_nbytes"] + c["uop_load_nbytes"]
                 + c["out_store_nbytes"] + 16 * len(program.insns)) * RAW["dram"]["pj_per_byte"]
    sram = {  # bytes read, bytes written
        "INP": (c["gemm_counter"] * batch * block, c["inp_load_nbytes"]),
        "WGT": (c["gemm_counter"] * block * block, c["wgt_load_nbytes"]),
        "ACC": (c["gemm_counter"] * acc_tile + c["alu_counter"] * 2 * acc_tile + 4 * c["out_store_nbytes"],
                c["gemm_counter"] * acc_tile + c["alu_counter"] * acc_tile + resets * acc_tile
                + c["acc_load_nbytes"]),
        "UOP": (4 * (c["gemm_counter"] + c["alu_counter"] + resets), c["uop_load_nbytes"]),
    }
    got = vita_energy.costs(program, load_table()).energy_pj
    assert got["compute"] == pytest.approx(want_compute)
    assert got["DRAM"] == pytest.approx(want_dram)
    for memory, (reads, writes) in sram.items():
        assert got[memory] == pytest.approx((reads + writes) * sram_pj_per_byte(size[memory])), memory


def test_vita_area_is_its_buffers_and_its_gemm_and_alu_lanes() -> None:
    spec = isa.load_isa("vita")
    p = spec.params
    area = vita_energy.costs(isa.Program(spec, (spec.insn("FINISH"),)), load_table()).area_mm2
    bit_um2 = RAW["sram"]["cell_um2"] / RAW["sram"]["array_efficiency"]
    for memory in ("INP", "WGT", "ACC", "UOP"):
        assert area[memory] == pytest.approx((1 << p[f"LOG_{memory}_BUFF_SIZE"]) * 8 * bit_um2 / 1e6)
    lanes = p["BATCH"] * p["BLOCK_IN"] * p["BLOCK_OUT"]
    assert area["gemm"] == pytest.approx(lanes * (RAW["ops"]["mul"]["int8"]["um2"]
                                                  + RAW["ops"]["add"]["int32"]["um2"]) / 1e6)


def test_diannao_elementwise_energy_by_hand() -> None:
    """An element-wise f32 add of n elements: 3n x 4 bytes over GMEM, n f32 adds plus the address
    arithmetic's scalar adds and multiplies, as the simulator counted them."""
    report = RUNNER.invoke(app, ["run", "add", "--target", "diannao", "--shape", "64x64", "--json"])
    assert report.exit_code == 0, report.output
    got = json.loads(report.output)
    n = 64 * 64
    counts = got["instructions"]
    assert got["energy_breakdown_uj"]["GMEM"] == pytest.approx(3 * n * 4 * RAW["dram"]["pj_per_byte"] / 1e6)
    want = n * price("add", "fp32") + counts["add"] * price("add", "int32") + counts["mul"] * price("mul",
                                                                                                   "int32")
    assert got["energy_breakdown_uj"]["compute"] == pytest.approx(want / 1e6)
    assert got["energy_uj"] == pytest.approx(sum(got["energy_breakdown_uj"].values()))
    assert got["area_mm2"] == pytest.approx(sum(got["area_breakdown_mm2"].values()))
    assert got["area_mm2"] == pytest.approx(sum(diannao_energy.costs(
        isa.Program(isa.load_isa("diannao"), ()), (), load_table()).area_mm2.values()))


@pytest.mark.parametrize("target,args", [("vita", ["gemm", "-p", "M=16", "-p", "N=32", "-p", "K=64"]),
                                         ("diannao", ["conv2d", "--shape", "8x8x16"])])
def test_tandem_run_json_reports_energy_and_area(target: str, args: list[str]) -> None:
    result = RUNNER.invoke(app, ["run", *args, "--target", target, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["energy_uj"] > 0 and report["area_mm2"] > 0
    assert report["energy_uj"] == pytest.approx(sum(report["energy_breakdown_uj"].values()))
    assert report["energy_table"] == "horowitz-45nm" and report["technology_nm"] == 45.0


def test_a_config_scales_its_technology(tmp_path: Path) -> None:
    config = tmp_path / "vita-22nm.toml"
    config.write_text((ROOT / "sim/vita/configs/vta-default.toml").read_text().replace(
        "technology_nm = 45.0", "technology_nm = 22.5"))
    runs = {}
    for name in ("vta-default", str(config)):
        result = RUNNER.invoke(app, ["run", "gemm", "-p", "M=16", "-p", "N=16", "-p", "K=16", "--target",
                                     "vita", "--config", name, "--json"])
        assert result.exit_code == 0, result.output
        runs[name] = json.loads(result.output)
    small, big = runs[str(config)], runs["vta-default"]
    assert small["area_mm2"] == pytest.approx(big["area_mm2"] / 4)
    assert small["energy_breakdown_uj"]["compute"] == pytest.approx(big["energy_breakdown_uj"]["compute"] / 2)
    assert small["energy_breakdown_uj"]["DRAM"] == pytest.approx(big["energy_breakdown_uj"]["DRAM"])


@pytest.mark.parametrize("target", ["vita", "diannao"])
def test_tandem_model_json_reports_the_network_s_energy_and_area(target: str) -> None:
    result = RUNNER.invoke(app, ["model", "--builtin", "resnet18", "--input-shape", "input=1x3x32x32",
                                 "--target", target, "--json"])
    assert result.exit_code == 0, result.output
    network = json.loads(result.output)["network"]
    ran = [layer for layer in network["layers"] if layer["where"] == target]
    assert network["energy_uj"] == pytest.approx(sum(layer["energy_uj"] for layer in ran))
    assert network["energy_uj"] == pytest.approx(sum(network["energy_breakdown_uj"].values()))
    machine = {"vita": vita_energy, "diannao": diannao_energy}[target].architecture(load_target(target).spec)
    assert network["area_mm2"] == pytest.approx(sum(area_mm2(machine, load_table()).values()))


def test_tandem_sim_reports_the_program_s_energy_and_the_machine_s_area() -> None:
    target = load_target("vita", "tvm-paper", None)
    text = (ROOT / "examples/vita/gemm.s").read_text()
    result = RUNNER.invoke(app, ["sim", "vita", str(ROOT / "examples/vita/gemm.s"), "--dram",
                                 str(ROOT / "examples/vita/gemm_dram.bin"), "--config", "tvm-paper",
                                 "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    want = vita_energy.costs(isa.assemble(text, isa=target.spec), load_table())
    assert report["energy_uj"] == pytest.approx(want.energy_uj) and report["energy_uj"] > 0
    assert report["area_mm2"] == pytest.approx(want.total_area_mm2)
    result = RUNNER.invoke(app, ["sim", "diannao", str(ROOT / "examples/diannao/add.s"), "--gmem",
                                 str(ROOT / "examples/diannao/in.bin"), "--arg", "0", "--arg", "0x10000",
                                 "--arg", "0x20000", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    # the example adds 16 cores x 1024 f32 elements: 3 x 64 KiB over GMEM
    gmem = 3 * 65536 * RAW["dram"]["pj_per_byte"]
    assert report["energy_breakdown_uj"]["GMEM"] == pytest.approx(gmem / 1e6)
