"""VITA machine configs: the shipped ones load with their documented values, bad ones name file and key."""

from __future__ import annotations

import pytest

import isa
from sim.core.config import uncommented_values
from sim.core.errors import SimConfigError
from sim.vita.config import CONFIGS_DIR, VitaConfig, builtin_configs, load_config, peak_macs_per_cycle

VITA = isa.load_isa("vita")

VALID = """
name = "mine"
summary = "a test machine"
clock_mhz = 150
dram_latency_cycles = 10
[isa_params]
LOG_BLOCK = 3            # 8x8 tiles, with buffers halved so the depths keep VTA's field widths
LOG_INP_BUFF_SIZE = 14
LOG_WGT_BUFF_SIZE = 16
LOG_ACC_BUFF_SIZE = 16
"""


def test_the_shipped_configs_are_vta_default_and_the_tvm_paper_machine():
    assert builtin_configs() == ["tvm-paper", "vta-default"]


def test_vta_default_is_vta_config_json_on_a_100_mhz_pynq():
    c = load_config("vta-default")
    spec = c.spec_for(VITA)
    assert c.clock_mhz == 100.0 and spec.params["DRAM_BYTES_PER_CYCLE"] == 8
    assert (spec.params["BATCH"], spec.params["BLOCK_IN"], spec.params["BLOCK_OUT"]) == (1, 16, 16)
    # depths in tiles: 32 KiB / 16 B inputs, 256 KiB / 256 B weights, 128 KiB / 64 B accumulators,
    # 32 KiB / 4 B micro-ops
    assert (spec.params["INP_BUFF_DEPTH"], spec.params["WGT_BUFF_DEPTH"], spec.params["ACC_BUFF_DEPTH"],
            spec.params["UOP_BUFF_DEPTH"]) == (2048, 1024, 2048, 8192)
    assert peak_macs_per_cycle(spec) == 256


def test_tvm_paper_machine_has_32_kib_buffers_and_a_128_kib_register_file_at_200_mhz():
    c = load_config("tvm-paper")
    spec = c.spec_for(VITA)
    assert c.clock_mhz == 200.0
    assert spec.spaces["INP"].bytes == spec.spaces["WGT"].bytes == spec.spaces["UOP"].bytes == 32 * 1024
    assert spec.spaces["ACC"].bytes == 128 * 1024
    assert spec.params["WGT_BUFF_DEPTH"] == 128
    # peak 16x16 int8 MACs per cycle at 200 MHz = 102.4 GOPS, the paper's figure
    assert 2 * peak_macs_per_cycle(spec) * c.clock_mhz * 1e6 == pytest.approx(102.4e9)


@pytest.mark.parametrize("name", ["tvm-paper", "vta-default"])
def test_every_shipped_value_states_its_source_or_reasoning_in_a_comment(name):
    assert uncommented_values(CONFIGS_DIR / f"{name}.toml") == []


def test_a_config_of_ones_own_loads_from_text_and_file(tmp_path):
    c = VitaConfig.from_text(VALID, "mine.toml")
    assert (c.name, c.clock_mhz, c.dram_latency_cycles, c.dep_queue_depth) == ("mine", 150.0, 10, 8)
    spec = c.spec_for(VITA)
    assert spec.params["BLOCK_IN"] == 8 and peak_macs_per_cycle(spec) == 64
    path = tmp_path / "mine.toml"
    path.write_text(VALID)
    assert load_config(path) == VitaConfig.from_file(path)


@pytest.mark.parametrize(("text", "key", "message"), [
    (VALID + "\n", None, None),
    (VALID.replace("clock_mhz = 150", "clock_mhz = 150\nclock_ghz = 1"), "clock_ghz", "unknown key"),
    (VALID.replace("dram_latency_cycles = 10", "dram_latency_cycles = 10.5"), "dram_latency_cycles",
     "expected an integer, but got 10.5"),
    (VALID.replace("dram_latency_cycles = 10", "dram_latency_cycles = 0"), "dram_latency_cycles",
     "must be a finite positive number"),
    (VALID.replace("clock_mhz = 150", "clock_mhz = nan"), "clock_mhz", "finite positive number, but got nan"),
    (VALID.replace("clock_mhz = 150", "clock_mhz = inf"), "clock_mhz", "finite positive number, but got inf"),
    (VALID.replace("dram_latency_cycles = 10", "dram_latency_cycles = true"), "dram_latency_cycles",
     "expected an integer"),
    (VALID.replace('name = "mine"\n', ""), "name", "a string is required"),
    (VALID.replace("LOG_BLOCK = 3 ", "LOG_BLOCKS = 3 "), "isa_params", "cannot override unknown parameter"),
    (VALID.replace("LOG_ACC_BUFF_SIZE = 16", "LOG_ACC_BUFF_SIZE = 18"), "isa_params",
     "beyond the 128-bit word"),
    (VALID.replace("LOG_BLOCK = 3 ", "DRAM_BYTES_PER_CYCLE = -8\nLOG_BLOCK = 3 "), "isa_params",
     "override of 'DRAM_BYTES_PER_CYCLE' = -8 is outside its range: it must be at least 1"),
    (VALID + "[oops", None, "not valid TOML"),
])
def test_a_bad_config_names_the_file_and_the_key(text, key, message):
    """Keys and values are checked when the config loads, its ISA parameters when it is applied to a spec."""
    if message is None:
        VitaConfig.from_text(text, "mine.toml").spec_for(VITA)
        return
    with pytest.raises(SimConfigError, match=message) as err:
        VitaConfig.from_text(text, "mine.toml").spec_for(VITA)
    assert err.value.file == "mine.toml" and err.value.key == key
    assert str(err.value).startswith("mine.toml")


def test_an_unknown_config_name_lists_the_built_in_ones():
    with pytest.raises(SimConfigError, match="built-in configs are tvm-paper, vta-default"):
        load_config("vta-huge")
