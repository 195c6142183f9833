"""User operators (``tandem run FILE.py:NAME``) and the DianNao vaddrelu extension: an add+relu written in a
file of one's own compiles to the fused instruction when the spec has it, and to scalar code when it has not,
bit-exact either way; on VITA an element-wise int32 -> int8 operator runs on the ALU, one instruction per
operation, ALU_CLIP where the spec has it; shifts run as numpy's on each target (ALU_SHR for a constant
amount on VITA); mistakes in the user's file are named with the file and line, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import load_target
from tandem.flows.user_ops import UserOpError, load_user_op

HERE = Path(__file__).parent
OPS, VADDRELU = HERE / "my_ops.py", HERE / "diannao_vaddrelu.toml"
ALU_CLIP = HERE / "vita_alu_clip.toml"
RUNNER = CliRunner()


def run_json(*args: str) -> dict:
    result = RUNNER.invoke(app, ["run", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_add_relu_selects_the_fused_instruction_only_where_the_spec_has_it() -> None:
    args = (f"{OPS}:add_relu", "--target", "diannao", "-p", "n=4096", "-p", "rows=2", "-p", "cores=4")
    plain, fused = run_json(*args), run_json(*args, "--spec", str(VADDRELU))
    assert plain["validated"] and fused["validated"] and fused["max_abs_err"] == 0
    assert fused["instructions"]["vaddrelu"] >= 1
    assert fused["scalar_fallback"] == 0 and fused["unmatched"] == []
    assert "vaddrelu" not in plain["instructions"] and plain["scalar_fallback"] == 0   # covered: vadd, relu
    assert plain["instructions"]["vadd"] == plain["instructions"]["relu"] == fused["instructions"]["vaddrelu"]
    assert fused["cycles"] <= plain["cycles"]
    assert fused["params"]["operator"] == {"n": 4096, "rows": 2}


def test_vaddrelu_is_chosen_by_its_own_spec_timing(tmp_path: Path) -> None:
    """Fused, add_relu takes fewer cycles on one core; 8x slower than vadd and relu, it is not selected."""
    slow = tmp_path / "slow.toml"
    slow.write_text(f'[isa]\nname = "diannao"\nsummary = "vaddrelu 8x slower"\nextends = "{VADDRELU}"\n'
                    f'[instructions.vaddrelu]\n'
                    f'timing = {{ cycles = "8 * ceil_div(n * bytes(T), VFU_BYTES_PER_CYCLE)" }}\n')
    params = {"n": 8192, "cores": 1}
    fast = run(f"{OPS}:add_relu", load_target("diannao", None, VADDRELU), params)
    slower = run(f"{OPS}:add_relu", load_target("diannao", None, slow), params)
    plain = run(f"{OPS}:add_relu", load_target("diannao"), params)
    assert fast.validated and slower.validated and "vaddrelu" in fast.instructions
    assert "vaddrelu" not in slower.instructions and slower.instructions == plain.instructions
    assert fast.cycles < slower.cycles == plain.cycles


def test_without_a_reference_the_interpreter_is_the_oracle() -> None:
    report = run(f"{OPS}:scaled_sum", load_target("diannao"), {"n": 1000, "cores": 2, "seed": 4})
    assert report.validated and report.detail.startswith("bit-exact")
    op = load_user_op(f"{OPS}:scaled_sum", {"n": 1000})
    a, b = (x.astype(np.int64) for x in op.random_inputs(np.random.default_rng(4)))   # the same seed
    np.testing.assert_array_equal(report.reference, ((2 * a + b + 2**31) % 2**32 - 2**31).astype(np.int32))


def test_given_inputs_of_the_users_shapes() -> None:
    a = np.arange(12, dtype=np.float32).reshape(1, 12) - 6
    b = np.ones((1, 12), np.float32)
    report = run(f"{OPS}:add_relu", load_target("diannao"), {"n": 12, "cores": 1}, inputs=[a, b])
    np.testing.assert_array_equal(report.output, np.maximum(a + b, 0))
    with pytest.raises(RunError, match="expected inputs"):
        run(f"{OPS}:add_relu", load_target("diannao"), {"n": 12}, inputs=[a])


BAD = {
    "raises.py": ("def op(n=4):\n    x = 1\n    raise ValueError('no good')\n",
                  "raises.py:3: op raised ValueError: no good"),
    "syntax.py": ("def op(:\n    pass\n", "syntax.py:1: not valid Python"),
    "returns.py": ("def op(n=4):\n    return 3\n", "returns.py:1: op must return (inputs, output)"),
    "noname.py": ("def other():\n    pass\n", "defines no function 'op' (its functions: other)"),
    "params.py": ("def op(m=4):\n    return None\n", "params.py:1: op() cannot take n=4"),
    "imports.py": ("import nonesuch_module\n", "imports.py:1: importing it raised ModuleNotFoundError"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_mistakes_in_the_users_file_name_the_file_and_line(tmp_path: Path, name: str) -> None:
    text, message = BAD[name]
    (tmp_path / name).write_text(text)
    result = RUNNER.invoke(app, ["run", f"{tmp_path / name}:op", "--target", "diannao", "-p", "n=4"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_missing_file_and_another_target_are_refused() -> None:
    result = RUNNER.invoke(app, ["run", "nonesuch.py:op", "--target", "diannao"])
    assert result.exit_code == 2 and "nonesuch.py: no such operator file" in result.output
    result = RUNNER.invoke(app, ["run", f"{OPS}:add_relu", "--target", "vita"])   # float32: not on the ALU
    assert result.exit_code == 2 and "VITA's store writes int8" in result.output
    assert "not float32" in result.output
    with pytest.raises(UserOpError, match="must return a list of placeholder tensors"):
        load_user_op(f"{HERE / 'bad_ops.py'}:not_placeholders", {})


@pytest.mark.parametrize("name", ["add_relu", "scaled_sum"])
def test_user_operators_run_for_real_on_this_cpu(name: str) -> None:
    result = RUNNER.invoke(app, ["run", f"{OPS}:{name}", "--target", "cpu", "-p", "n=300", "--threads", "2"])
    assert result.exit_code == 0, result.output
    assert "validated" in result.output and "bit-exact" in result.output
    report = run(f"{OPS}:{name}", load_target("cpu"), {"n": 300, "threads": 1, "min_time": 0.01})
    assert report.validated and report.measured["seconds"] > 0 and report.cycles > 0


def test_an_int32_to_int8_operator_runs_on_vitas_alu_one_instruction_per_operation() -> None:
    report = run_json(f"{OPS}:requantize", "--target", "vita", "-p", "C=5", "-p", "H=7", "-p", "W=9")
    assert report["validated"] is True and report["detail"].startswith("bit-exact")
    alu = {name: count for name, count in report["instructions"].items() if name.startswith("ALU")}
    assert alu == {"ALU_ADD": 1, "ALU_SHR": 1, "ALU_MAX": 1, "ALU_MIN": 1}
    assert report["instructions"]["LOAD_ACC"] == 2 and report["instructions"]["STORE_OUT"] == 1


def test_a_spec_with_alu_clip_clips_a_users_operator_in_one_instruction() -> None:
    plain = run_json(f"{OPS}:requantize", "--target", "vita")
    clip = run_json(f"{OPS}:requantize", "--target", "vita", "--spec", str(ALU_CLIP))
    assert clip["validated"] is True and clip["instructions"]["ALU_CLIP"] == 1
    assert "ALU_MAX" not in clip["instructions"] and clip["cycles"] < plain["cycles"]


def test_a_subtraction_vitas_alu_lacks_is_covered_by_a_multiply_and_an_add() -> None:
    report = run_json(f"{OPS}:difference", "--target", "vita")
    assert report["validated"] is True
    assert report["instructions"]["ALU_MUL"] == 1 and report["instructions"]["ALU_ADD"] == 1


def test_vita_refuses_what_its_alu_cannot_compute_saying_why() -> None:
    result = RUNNER.invoke(app, ["run", f"{OPS}:quotient", "--target", "vita"])
    assert result.exit_code == 2 and "no instruction computes a floor division (//)" in result.output
    result = RUNNER.invoke(app, ["run", f"{OPS}:scaled_sum", "--target", "vita"])   # an int32 output
    assert result.exit_code == 2 and "VITA's store writes int8" in result.output


@settings(max_examples=6, deadline=None, derandomize=True)
@given(c=st.integers(1, 40), h=st.integers(1, 30), w=st.integers(1, 30), lo=st.integers(-128, 0),
       hi=st.integers(0, 127), seed=st.integers(0, 99))
def test_random_shapes_of_a_users_operator_validate_on_vita(c, h, w, lo, hi, seed) -> None:
    report = run(f"{OPS}:requantize", load_target("vita"),
                 {"C": c, "H": h, "W": w, "LO": lo, "HI": hi, "seed": seed})
    assert report.validated and report.max_abs_err == 0


SHRV = HERE / "vita_alu_shrv.toml"


@pytest.mark.parametrize("shift", [3, 31])
def test_a_shift_by_a_constant_runs_on_vitas_alu_shr(shift: int) -> None:
    """``a >> 3`` is a floor division by 8, ``a >> 31`` (2**31 is no int32) a Shr node: ALU_SHR either way."""
    report = run_json(f"{OPS}:shift_clip", "--target", "vita", "-p", f"SHIFT={shift}", "-p", "n=200")
    assert report["validated"] is True and report["detail"].startswith("bit-exact")
    alu = {name: count for name, count in report["instructions"].items() if name.startswith("ALU")}
    assert alu == {"ALU_SHR": 1, "ALU_MAX": 1, "ALU_MIN": 1}


def test_shifts_by_a_tensors_amounts_run_on_this_cpu_and_on_diannao_as_numpys() -> None:
    result = RUNNER.invoke(app, ["run", f"{OPS}:shifts", "--target", "cpu", "-p", "n=300", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "validated" in result.output and "bit-exact" in result.output
    for bits in (8, 32):   # amounts over [-4, bits + 8): in range, past the width, negative
        dt = np.dtype(f"int{bits}")
        a = np.random.default_rng(bits).integers(np.iinfo(dt).min, np.iinfo(dt).max, 300, dtype=dt)
        b = (np.arange(300) % (bits + 12) - 4).astype(dt)
        cpu = run(f"{OPS}:shifts", load_target("cpu"), {"n": 300, "BITS": bits, "threads": 1,
                                                        "min_time": 0.001}, inputs=[a, b])
        card = run(f"{OPS}:shifts", load_target("diannao"), {"n": 300, "BITS": bits, "cores": 2},
                   inputs=[a, b])
        want = (np.right_shift(a, b) + np.left_shift(a, b)).astype(dt)
        for report in (cpu, card):
            assert report.validated
            np.testing.assert_array_equal(report.output.reshape(300), want)
        assert card.instructions["sra"] >= 1 and card.instructions["sll"] >= 1


def test_a_shift_by_a_tensors_amounts_selects_an_instruction_whose_semantics_shift_by_an_operand() -> None:
    result = RUNNER.invoke(app, ["run", f"{OPS}:shift_by", "--target", "vita"])
    assert result.exit_code == 2 and "no instruction computes a right shift by a tensor (>>)" in result.output
    report = run_json(f"{OPS}:shift_by", "--target", "vita", "--spec", str(SHRV))
    assert report["validated"] is True and report["detail"].startswith("bit-exact")
    assert report["instructions"]["ALU_SHRV"] == 1 and "ALU_SHR" not in report["instructions"]


def test_an_input_read_twice_on_vita_is_loaded_again_for_the_instruction_that_overwrites_it(tmp_path) -> None:
    """VITA's ALU computes in place: max(a, 0) overwrites a's tile, which a + max(a, 0) still reads, so that
    instruction gets its own LOAD_ACC of a; a computed value read after being overwritten is refused."""
    ops = tmp_path / "shared_ops.py"
    ops.write_text("from compiler import te\nfrom compiler.ir import nodes as ir\n\n\n"
                   "def twice(n: int = 512):\n    a = te.placeholder((n,), 'int32', name='a')\n"
                   "    return [a], te.compute((n,), lambda i: ir.cast(a[i] + ir.max_(a[i], 0), 'int8'), "
                   "name='op')\n"
                   "\n\ndef product_twice(n: int = 512):\n"
                   "    a, b = (te.placeholder((n,), 'int32', name=x) for x in 'ab')\n"
                   "    p = lambda i: a[i] * b[i]\n"
                   "    return [a, b], te.compute((n,), lambda i: ir.cast(p(i) + ir.max_(p(i), 0), 'int8'), "
                   "name='op')\n")
    report = run_json(f"{ops}:twice", "--target", "vita")
    assert report["validated"] is True and report["instructions"]["LOAD_ACC"] == 2
    result = RUNNER.invoke(app, ["run", f"{ops}:product_twice", "--target", "vita"])
    assert result.exit_code == 2 and "which a later instruction still reads" in result.output
