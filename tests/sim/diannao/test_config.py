"""DianNao machine configs: the shipped one loads with its documented values, bad ones name file and key."""

from __future__ import annotations

import pytest

import isa
from sim.core.config import uncommented_values
from sim.core.errors import SimConfigError
from sim.diannao.config import CONFIGS_DIR, DiannaoConfig, builtin_configs, card_cores, load_config

DIANNAO = isa.load_isa("diannao")


def test_the_default_card_is_seed_001s_4x4_card():
    c = load_config("default")
    assert builtin_configs() == ["default"]
    assert (c.clock_mhz, c.gmem_bytes_per_cycle, c.smem_bytes_per_cycle) == (1000.0, 64, 128)
    spec = c.spec_for(DIANNAO)
    assert card_cores(spec) == 16
    assert spec.spaces["SMEM"].bytes == 2 << 20 and spec.spaces["NMEM"].bytes == 512 << 10
    assert spec.spaces["WMEM"].bytes == 1 << 20


def test_every_shipped_value_states_its_source_or_reasoning_in_a_comment():
    assert uncommented_values(CONFIGS_DIR / "default.toml") == []


def test_isa_params_override_the_card_and_bad_ones_name_the_key():
    text = 'name = "big"\nsummary = "8 clusters"\n[isa_params]\nCLUSTERS = 8\n'
    assert card_cores(DiannaoConfig.from_text(text, "big.toml").spec_for(DIANNAO)) == 32
    with pytest.raises(SimConfigError, match="cannot override unknown parameter") as err:
        DiannaoConfig.from_text(text.replace("CLUSTERS", "CLUSTER"), "big.toml").spec_for(DIANNAO)
    assert (err.value.file, err.value.key) == ("big.toml", "isa_params")


@pytest.mark.parametrize(("line", "key", "message"), [
    ("gmem_bytes_per_cycle = 0", "gmem_bytes_per_cycle", "must be a finite positive number"),
    ("instruction_budget = 1.5", "instruction_budget", "expected an integer"),
    ("clock_mhz = \"fast\"", "clock_mhz", "expected a number"),
    ("gmem_gbps = 64", "gmem_gbps", "unknown key"),
])
def test_a_bad_value_names_the_file_and_key(line, key, message):
    with pytest.raises(SimConfigError, match=message) as err:
        DiannaoConfig.from_text(f'name = "x"\nsummary = "y"\n{line}\n', "x.toml")
    assert (err.value.file, err.value.key) == ("x.toml", key)


def test_a_value_without_a_comment_in_its_block_is_reported(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "c"\n# source: the seed\nclock_mhz = 1000.0\n\ngmem_bytes_per_cycle = 64\n'
                    "smem_bytes_per_cycle = 128  # assumption\n")
    assert uncommented_values(path) == ["gmem_bytes_per_cycle = 64"]
