"""Instruction selection by covering (compiler/passes/cover.py), from spec files alone: each instruction
shape of tests/extensions/isel/ (a fused multiply-add, a three-input max, an absolute difference on DianNao;
a shift-and-clip, an add-then-shift, a multiply-add on VITA's ALU) is selected for an expression it computes
where its cycles are lower, validates bit for bit and takes fewer cycles than the built-in spec's sequence of
instructions; the same instruction made slower than that sequence is not selected, and the sequence runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.flows.run import run
from tandem.flows.targets import load_target

HERE = Path(__file__).parent / "isel"
OPS = HERE / "isel_ops.py"
SLOWER = {"diannao": "16 * ceil_div(n * bytes(T), VFU_BYTES_PER_CYCLE)",
          "vita": "16 * iter_out * iter_in * max(uop_end - uop_bgn, 0)"}

#: (spec file, operator, target, parameters, the instruction that spec adds)
CASES = [
    ("diannao_vfma.toml", f"{OPS}:fma", "diannao", {"cores": 1}, "vfma"),
    ("diannao_vmax3.toml", f"{OPS}:max3", "diannao", {"cores": 1}, "vmax3"),
    ("diannao_vabsdiff.toml", f"{OPS}:absdiff", "diannao", {"cores": 1}, "vabsdiff"),
    ("vita_alu_shrclip.toml", f"{OPS}:shift_clip", "vita", {}, "ALU_SHRCLIP"),
    ("vita_alu_shrclip.toml", "conv2d", "vita", {"H": 14, "W": 14, "IC": 64, "OC": 64}, "ALU_SHRCLIP"),
    ("vita_alu_addshr.toml", f"{OPS}:add_shift", "vita", {}, "ALU_ADDSHR"),
    ("vita_alu_muladd.toml", f"{OPS}:mul_add", "vita", {}, "ALU_MULADD"),
]
IDS = [f"{instruction}-{Path(op).name}" for _, op, _, _, instruction in CASES]


def _run(op: str, target: str, params: dict, spec: Path | None = None):
    config = "tvm-paper" if target == "vita" else None
    return run(op, load_target(target, config, spec), dict(params))


@pytest.mark.parametrize(("spec", "op", "target", "params", "instruction"), CASES, ids=IDS)
def test_an_instruction_a_spec_adds_is_selected_where_it_is_cheaper(spec, op, target, params, instruction):
    plain, extended = _run(op, target, params), _run(op, target, params, HERE / spec)
    assert plain.validated and extended.validated
    assert instruction not in plain.instructions and extended.instructions.get(instruction, 0) >= 1
    assert extended.cycles < plain.cycles


@pytest.mark.parametrize(("spec", "op", "target", "params", "instruction"), CASES, ids=IDS)
def test_the_same_instruction_slower_than_its_decomposition_is_not(tmp_path, spec, op, target, params,
                                                                    instruction):
    slow = tmp_path / "slow.toml"
    slow.write_text(f'[isa]\nname = "{target}"\nsummary = "{instruction}, 16x slower"\n'
                    f'extends = "{HERE / spec}"\n[instructions.{instruction}]\n'
                    f'timing = {{ cycles = "{SLOWER[target]}" }}\n')
    plain, slower = _run(op, target, params), _run(op, target, params, slow)
    assert slower.validated and instruction not in slower.instructions
    assert slower.instructions == plain.instructions and slower.cycles == plain.cycles
