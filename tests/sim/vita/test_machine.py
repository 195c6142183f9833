"""The VITA timing simulator: hand-assembled programs run bit-exact, timing follows hand-derived formulas,
deadlocks are named, and results are deterministic."""

from __future__ import annotations

import numpy as np
import pytest

import isa
from sim.core import errors as core_errors
from sim.core.errors import ConstraintError
from sim.vita.config import load_config
from sim.vita.machine import DeadlockError, simulate

SPEC = isa.load_isa("vita")
CFG = load_config("vta-default")
P = SPEC.params
GEMM_FILL, DRAM_BW = P["GEMM_PIPELINE_CYCLES"], P["DRAM_BYTES_PER_CYCLE"]   # the spec's timing parameters

SINGLE_GEMM = """
.isa vita
.text
    LOAD_UOP sram_base=0x0, dram_base=0x0, y_size=1, x_size=1, x_stride=1
    LOAD_INP sram_base=0x0, dram_base=0x40, y_size=1, x_size=16, x_stride=16
    LOAD_WGT sram_base=0x0, dram_base=0x10, y_size=1, x_size=1, x_stride=1, push_next_dep=1
    GEMM_RESET uop_bgn=0, uop_end=1, iter_out=16, iter_in=1, dst_factor_out=1
    GEMM pop_prev_dep=1, uop_bgn=0, uop_end=1, iter_out=16, iter_in=1, dst_factor_out=1, src_factor_out=1
    ALU_SHR uop_bgn=0, uop_end=1, iter_out=16, iter_in=1, dst_factor_out=1, use_imm=1, imm=3
    ALU_MIN uop_bgn=0, uop_end=1, iter_out=16, iter_in=1, dst_factor_out=1, use_imm=1, imm=127
    ALU_MAX uop_end=1, iter_out=16, iter_in=1, dst_factor_out=1, use_imm=1, imm=-128, push_next_dep=1
    STORE_OUT pop_prev_dep=1, push_prev_dep=1, dram_base=0x200, y_size=1, x_size=16, x_stride=16
    FINISH pop_next_dep=1
"""


def gemm_dram(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dram = np.zeros(1 << 14, np.uint8)
    a = rng.integers(-128, 128, (16, 16), dtype=np.int8)   # 16 input rows, one INP tile each
    w = rng.integers(-128, 128, (16, 16), dtype=np.int8)   # one WGT tile, [out, in]
    dram[0:4] = np.frombuffer(np.uint32(0).tobytes(), np.uint8)  # one micro-op: dst 0, src 0, wgt 0
    dram[0x40 * 16:0x40 * 16 + 256] = a.view(np.uint8).reshape(-1)
    dram[0x10 * 256:0x10 * 256 + 256] = w.view(np.uint8).reshape(-1)
    return dram, a, w


def test_a_single_16x16_gemm_with_shift_and_clip_is_bit_exact():
    dram, a, w = gemm_dram(0)
    result = simulate(isa.assemble(SINGLE_GEMM), dram, CFG)
    got = result.dram[0x200 * 16:0x200 * 16 + 256].view(np.int8).reshape(16, 16)
    want = np.clip((a.astype(np.int32) @ w.astype(np.int32).T) >> 3, -128, 127).astype(np.int8)
    assert np.array_equal(got, want)
    assert result.counters == {"inp_load_nbytes": 256, "wgt_load_nbytes": 256, "acc_load_nbytes": 0,
                               "uop_load_nbytes": 4, "out_store_nbytes": 256, "gemm_counter": 16,
                               "alu_counter": 48}


def test_the_same_program_twice_gives_identical_results():
    dram, _, _ = gemm_dram(1)
    program = isa.assemble(SINGLE_GEMM)
    assert simulate(program, dram, CFG) == simulate(program, dram, CFG)


def test_a_gemm_only_program_takes_fetch_plus_pipeline_plus_one_cycle_per_micro_op():
    n = 100
    program = isa.Program(SPEC, [SPEC.insn("GEMM", uop_end=1, iter_out=n, iter_in=1), SPEC.insn("FINISH")])
    result = simulate(program, np.zeros(1024, np.uint8), CFG)
    # GEMM fetched at cycle 1, runs fill + n cycles; FINISH (fetched meanwhile) then takes one cycle
    # the spec's GEMM timing: latency GEMM_PIPELINE_CYCLES, then one cycle per micro-op
    assert result.cycles == CFG.fetch_cycles_per_insn + GEMM_FILL + n + 1
    assert result.gemm_busy_cycles == n


def test_a_load_only_program_takes_latency_plus_bytes_over_bandwidth():
    program = isa.Program(SPEC, [
        SPEC.insn("LOAD_INP", y_size=4, x_size=16, x_stride=16, push_next_dep=1),
        SPEC.insn("FINISH", pop_prev_dep=1),
    ])
    result = simulate(program, np.zeros(4096, np.uint8), CFG)
    nbytes = 4 * 16 * 16
    transfer = -(-nbytes // DRAM_BW)
    assert result.cycles == CFG.fetch_cycles_per_insn + transfer + CFG.dram_latency_cycles + 1
    assert result.units["load"].busy == transfer
    assert result.units["compute"].stalled_on_dependency == transfer + CFG.dram_latency_cycles - 1


def test_an_empty_transfer_carrying_a_token_neither_waits_for_the_dram_port_nor_its_latency():
    """A zero-sized LOAD_UOP (VTA's runtime emits them to carry a dependency flag) moves nothing: while the
    load unit holds the DRAM port for a long transfer, the compute unit's empty LOAD_UOP passes its token
    to the store unit at once, and only the load takes the DRAM latency."""
    big = 64   # rows of 16 tiles: 16 KiB, 2,048 cycles of the port at 8 bytes per cycle
    program = isa.Program(SPEC, [
        SPEC.insn("LOAD_INP", y_size=big, x_size=16, x_stride=16),
        SPEC.insn("LOAD_UOP", push_next_dep=1),
        SPEC.insn("STORE_OUT", pop_prev_dep=1, push_prev_dep=1),
        SPEC.insn("FINISH", pop_next_dep=1),
    ])
    result = simulate(program, np.zeros(1 << 15, np.uint8), CFG)
    stores = [t for t in result.trace if t[0] == "store" and t[1].endswith("STORE_OUT")]
    uops = [t for t in result.trace if t[0] == "compute" and t[1].endswith("LOAD_UOP")]
    assert uops[0][3] - uops[0][2] == 0 and stores[0][3] - stores[0][2] == 0
    assert stores[0][2] < big * 16 * 16 // DRAM_BW   # long before the load has the port back
    assert result.units["compute"].stalled_on_memory == 0


def test_a_pop_nobody_pushes_is_a_deadlock_naming_the_unit_and_the_queue():
    program = isa.Program(SPEC, [SPEC.insn("GEMM", pop_prev_dep=1, uop_end=1, iter_out=1, iter_in=1),
                                 SPEC.insn("FINISH")])
    want = r"compute waits at instruction 0 \(GEMM\) to pop a token from l2g \(load->compute\)"
    with pytest.raises(DeadlockError, match=want) as info:
        simulate(program, np.zeros(1024, np.uint8), CFG)
    assert isinstance(info.value, core_errors.DeadlockError)   # the deadlock both simulators report
    assert list(info.value.waiting) == ["compute"] and info.value.cycle is not None


def test_a_unit_left_waiting_when_finish_runs_is_a_deadlock_not_a_success():
    # the load unit pops a token nobody pushes while the compute unit runs FINISH: VTA would hang
    program = isa.Program(SPEC, [SPEC.insn("LOAD_INP", pop_next_dep=1, y_size=1, x_size=1, x_stride=1),
                                 SPEC.insn("FINISH")])
    want = (r"FINISH ran at cycle \d+ with units left waiting; deadlock at cycle \d+: load waits at "
            r"instruction 0 \(LOAD_INP\) to pop a token from g2l")
    with pytest.raises(DeadlockError, match=want) as info:
        simulate(program, np.zeros(1024, np.uint8), CFG)
    assert list(info.value.waiting) == ["load"]


def test_pushing_more_tokens_than_the_queue_holds_is_a_deadlock():
    push = SPEC.insn("LOAD_UOP", push_next_dep=1, y_size=1, x_size=1, x_stride=1)
    program = isa.Program(SPEC, [push] * (CFG.dep_queue_depth + 2) + [SPEC.insn("FINISH")])
    with pytest.raises(DeadlockError, match=r"compute waits at instruction \d+ \(LOAD_UOP\) to push a token "
                                            r"to g2s \(compute->store\), which is full"):
        simulate(program, np.zeros(1 << 16, np.uint8), CFG)


def test_a_program_without_finish_is_an_error():
    from sim.vita.functional import VitaExecError

    program = isa.Program(SPEC, [SPEC.insn("GEMM", uop_end=1, iter_out=1, iter_in=1)])
    with pytest.raises(VitaExecError, match="ended without FINISH"):
        simulate(program, np.zeros(1024, np.uint8), CFG)


def test_an_instruction_after_finish_is_an_error_before_cycle_0():
    """A load after FINISH would run on after the program said it ended (the cycles would omit it)."""
    from sim.vita.functional import VitaExecError

    load = SPEC.insn("LOAD_INP", y_size=1, x_size=1, x_stride=1)
    program = isa.Program(SPEC, [SPEC.insn("FINISH"), load])
    with pytest.raises(VitaExecError, match=r"instruction 0 \(FINISH\) is not the last instruction \(2 "
                                            r"instructions\): FINISH must end the program, but instruction 1 "
                                            r"\(LOAD_INP\) follows it"):
        simulate(program, np.zeros(1024, np.uint8), CFG)


def test_the_trace_shows_each_instruction_and_each_stall_on_its_unit_track():
    from sim.vita.trace import chrome_trace

    program = isa.Program(SPEC, [
        SPEC.insn("LOAD_INP", y_size=4, x_size=16, x_stride=16, push_next_dep=1),
        SPEC.insn("FINISH", pop_prev_dep=1),
    ])
    result = simulate(program, np.zeros(4096, np.uint8), CFG)
    loaded = 1 + 1024 // DRAM_BW + CFG.dram_latency_cycles
    assert result.trace == [
        ("fetch", "0: LOAD_INP", 0, 1, "instruction"),
        ("fetch", "1: FINISH", 1, 2, "instruction"),
        ("load", "0: LOAD_INP", 1, loaded, "instruction"),
        ("compute", "wait for a token on l2g", 2, loaded, "stall"),
        ("compute", "1: FINISH", loaded, loaded + 1, "instruction"),
    ]
    trace = chrome_trace(result, CFG.clock_mhz)
    tracks = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert tracks == {"fetch": 0, "load": 1, "compute": 2, "store": 3}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["tid"], e["ts"], e["dur"]) for e in slices][2:] == [
        ("0: LOAD_INP", 1, 1 / 100, (loaded - 1) / 100),
        ("wait for a token on l2g", 2, 2 / 100, (loaded - 2) / 100),
        ("1: FINISH", 2, loaded / 100, 1 / 100),
    ]


def test_the_binary_form_of_a_program_simulates_like_the_program():
    dram, _, _ = gemm_dram(2)
    program = isa.assemble(SINGLE_GEMM)
    assert simulate(isa.encode_program(program), dram, CFG, spec=program.isa) == simulate(program, dram, CFG)


@pytest.mark.parametrize(("insn", "message"), [
    (SPEC.insn("LOAD_INP", sram_base=2047, y_size=1, x_size=2, x_stride=2),
     r"instruction 0 \(LOAD_INP sram_base=0x7ff, .*\) on the load unit: the padded block must fit in the "
     r"INP buffer \(INP_BUFF_DEPTH tiles\): violated 'x_size == 0 or sram_base \+ .* <= INP_BUFF_DEPTH' "
     r"\(INP_BUFF_DEPTH = 2048, sram_base = 2047"),
    (SPEC.insn("LOAD_WGT", dram_base=10, y_size=1, x_size=1, x_stride=1),
     r"instruction 0 \(LOAD_WGT\) on the load unit: .* outside DRAM \(1024 bytes at 0x1000\)"),
    (SPEC.insn("GEMM", uop_bgn=8000, uop_end=8193, iter_out=1, iter_in=1),
     r"instruction 0 \(GEMM .*\) on the compute unit: the micro-ops must lie inside the UOP buffer .*: "
     r"violated 'uop_end <= UOP_BUFF_DEPTH' \(UOP_BUFF_DEPTH = 8192, uop_end = 8193\)"),
    (SPEC.insn("STORE_OUT", y_size=1, x_size=1, x_stride=1, y_pad_1=1),
     r"instruction 0 \(STORE_OUT .*\) on the store unit: a store cannot pad .*: violated 'y_pad_0 == 0 and"),
])
def test_a_bad_instruction_is_reported_with_its_index_unit_and_rule(insn, message):
    from sim.vita.functional import VitaExecError

    with pytest.raises(VitaExecError, match=message) as info:
        simulate(isa.Program(SPEC, [insn, SPEC.insn("FINISH")]), np.zeros(1024, np.uint8), CFG)
    if isinstance(info.value, ConstraintError):   # a rule of the spec: the error both simulators share
        assert info.value.pc == 0 and info.value.unit in ("load", "compute", "store") and info.value.rule


def test_a_spec_invalid_instruction_is_rejected_before_the_first_cycle_with_a_typed_error():
    """A GEMM whose loop leaves the accumulator breaks a rule the spec states: refused up front, naming the
    instruction's index, its unit and the rule, even behind other instructions."""
    bad = SPEC.insn("GEMM", uop_bgn=0, uop_end=1, iter_out=3000, iter_in=1, dst_factor_out=1)
    first = SPEC.insn("GEMM", uop_end=1, iter_out=1, iter_in=1)
    program = isa.Program(SPEC, [first, bad, SPEC.insn("FINISH")])
    with pytest.raises(ConstraintError) as info:
        simulate(program, np.zeros(1024, np.uint8), CFG)
    e = info.value
    assert (e.pc, e.unit) == (1, "compute")
    assert e.rule == "(iter_out - 1) * dst_factor_out + (iter_in - 1) * dst_factor_in < ACC_BUFF_DEPTH"
    assert str(e).startswith("instruction 1 (GEMM ")


def test_an_unknown_opcode_in_a_program_file_names_the_instruction():
    words = bytearray(isa.encode_program(isa.Program(SPEC, [SPEC.insn("FINISH")])))
    at = words.index(bytes([3]), 20)  # FINISH's opcode (3) in the first byte of its word: make it 7
    words[at] = 7
    with pytest.raises(isa.EncodingError, match=r"instruction 0: word 0x0+7 decodes to no instruction"):
        simulate(bytes(words), np.zeros(1024, np.uint8), CFG, spec=SPEC)


def test_a_full_command_queue_stalls_fetch_but_not_the_busy_unit():
    from dataclasses import replace

    shallow = replace(CFG, cmd_queue_depth=1)
    gemm = SPEC.insn("GEMM", uop_end=1, iter_out=100, iter_in=1)
    program = isa.Program(SPEC, [gemm, gemm, gemm, SPEC.insn("FINISH")])
    result = simulate(program, np.zeros(1024, np.uint8), shallow)
    per_gemm = GEMM_FILL + 100
    assert result.cycles == 1 + 3 * per_gemm + 1 == simulate(program, np.zeros(1024, np.uint8), CFG).cycles
    stalls = [t for t in result.trace if t[0] == "fetch" and t[4] == "stall"]
    # GEMM 2 waits until compute takes GEMM 1 (when GEMM 0 ends); FINISH until compute takes GEMM 2
    assert stalls == [("fetch", "wait for room in the compute command queue", 3, 1 + per_gemm, "stall"),
                      ("fetch", "wait for room in the compute command queue", 2 + per_gemm, 1 + 2 * per_gemm,
                       "stall")]


def test_a_load_may_read_overlapping_dram_rows_as_vta_does():
    # two rows of 4 tiles, 2 tiles apart: row 1 re-reads tiles 2 and 3 of row 0
    program = isa.Program(SPEC, [SPEC.insn("LOAD_INP", y_size=2, x_size=4, x_stride=2), SPEC.insn("FINISH")])
    dram = np.zeros(1024, np.uint8)
    dram[:6 * 16] = np.repeat(np.arange(6, dtype=np.uint8), 16)   # tile k holds the value k
    result = simulate(program, dram, CFG)
    assert result.counters["inp_load_nbytes"] == 8 * 16
    from sim.vita.functional import VitaState

    state = VitaState(SPEC, dram.copy())
    state.load(program.insns[0], "INP")
    assert state.buffers["INP"][:8, 0].tolist() == [0, 1, 2, 3, 2, 3, 4, 5]


def test_a_program_over_the_micro_op_budget_is_refused_before_cycle_0(monkeypatch):
    """One legal GEMM of 16383 x 16383 iterations would run 268 million micro-ops (minutes and gigabytes):
    the config's uop_budget refuses it before any instruction runs, naming the instruction and the key to
    change; under a raised budget the same kind of program runs."""
    import dataclasses

    from sim.vita.functional import VitaBudgetError, VitaState

    big = SPEC.insn("GEMM", uop_bgn=0, uop_end=1, iter_out=16383, iter_in=16383)
    program = isa.Program(SPEC, [SPEC.insn("GEMM", uop_end=1, iter_out=1, iter_in=1), big,
                                 SPEC.insn("FINISH")])
    message = (r"the program runs 268,402,690 micro-ops, more than the machine config's uop_budget of "
               r"50,000,000 \(instruction 1 \(GEMM .*\) alone runs 268,402,689\); .* raise uop_budget in the "
               r"config")
    # a micro-op loop is planned from the uop buffer when its instruction first runs
    monkeypatch.setattr(VitaState, "_plan_loop", lambda *_: pytest.fail("a GEMM ran before the budget check"))
    with pytest.raises(VitaBudgetError, match=message):
        simulate(program, np.zeros(1024, np.uint8), CFG)
    monkeypatch.undo()
    assert CFG.uop_budget == 50_000_000
    small = SPEC.insn("GEMM", uop_bgn=0, uop_end=1, iter_out=100, iter_in=100)
    program = isa.Program(SPEC, [small, SPEC.insn("FINISH")])
    with pytest.raises(VitaBudgetError):
        simulate(program, np.zeros(1024, np.uint8), dataclasses.replace(CFG, uop_budget=9_999))
    assert simulate(program, np.zeros(1024, np.uint8), dataclasses.replace(CFG, uop_budget=10_000)).cycles > 0
