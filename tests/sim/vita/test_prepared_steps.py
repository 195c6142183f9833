"""A prepared step (``VitaState.prepare``) does its instruction's work every time it is called, on the buffers
as they are then: the machine prepares each distinct instruction of a program once and runs it as often as
the program does. Each shape of step (buffer slices, gathered tiles, micro-ops in sequence, padded and strided
transfers) is compared with the spec's semantics run micro-op by micro-op (``execute_generic``), twice, with
the buffers changed in between; a load into the uop buffer makes a micro-op step plan its loop again."""

from __future__ import annotations

import numpy as np
import pytest

import isa
from sim.vita.functional import VitaState, execute_generic
from sim.vita.plan import plan_spec

SPEC = isa.load_isa("vita")
PLANS = plan_spec(SPEC)


def scramble(state: VitaState, rng: np.random.Generator) -> None:
    """New random contents in DRAM and every tile buffer but the uop buffer."""
    state.dram[...] = rng.integers(0, 256, state.dram.size, dtype=np.uint8)
    for name, buf in state.buffers.items():
        if name != "UOP":
            info = np.iinfo(buf.dtype)
            buf[...] = rng.integers(info.min, info.max, buf.shape, endpoint=True, dtype=buf.dtype)


def write_uops(state: VitaState, uops: list[tuple[int, int, int]]) -> None:
    for k, (d, s, w) in enumerate(uops):
        state.buffers["UOP"][k, 0] = isa.binary.encode_record(SPEC, SPEC.insn("uop", dst_idx=d, src_idx=s,
                                                                                 wgt_idx=w))


def copy_of(state: VitaState) -> VitaState:
    twin = VitaState(SPEC, state.dram.copy())
    twin.buffers = {name: buf.copy() for name, buf in state.buffers.items()}
    return twin


def prepared(state: VitaState, insn: isa.Insn):
    plan = PLANS[insn.name]
    return state.prepare(insn, plan.action, plan.arg, insn.values)


def run_twice(insn: isa.Insn, uops: list[tuple[int, int, int]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    state = VitaState(SPEC, np.zeros(1 << 12, np.uint8))
    write_uops(state, uops)
    step = prepared(state, insn)
    for _ in range(2):
        scramble(state, rng)
        if insn.name == "ALU_SHR":   # shift amounts of both signs, beyond 31 too
            state.buffers["ACC"][...] = rng.integers(-40, 40, state.buffers["ACC"].shape)
        want = copy_of(state)
        execute_generic(want, insn)
        step()
        assert np.array_equal(state.buffers["ACC"], want.buffers["ACC"])


LOOP = dict(uop_bgn=0, uop_end=8, iter_out=2, iter_in=1, dst_factor_out=8, src_factor_out=8)
GEMMS = {
    "consecutive inputs by one weight": [(k, 10 + k, 3) for k in range(8)],
    "one input by consecutive weights": ([(k, 5, 20 + k) for k in range(8)], dict(src_factor_out=0,
                                                                                  wgt_factor_out=8)),
    "gathered tiles, repeated accumulators": [(k % 3, 7 * k % 11, k % 2) for k in range(8)],
    "consecutive accumulators, gathered inputs": [(k, 9 * k % 17, 1) for k in range(8)],
}


@pytest.mark.parametrize("shape", GEMMS)
def test_a_prepared_gemm_runs_again_on_the_buffers_as_they_are(shape):
    uops, extra = GEMMS[shape] if isinstance(GEMMS[shape], tuple) else (GEMMS[shape], {})
    run_twice(SPEC.insn("GEMM", **{**LOOP, **extra}), uops, seed=len(shape))


@pytest.mark.parametrize("op", ["MIN", "MAX", "ADD", "MUL", "SHR"])
@pytest.mark.parametrize("operand", ["immediate", "source tiles", "gathered", "in sequence"])
def test_a_prepared_alu_operation_runs_again_on_the_buffers_as_they_are(op, operand):
    uops = {"immediate": [(k, 0, 0) for k in range(8)], "source tiles": [(k, 40 + k, 0) for k in range(8)],
            "gathered": [(3 * k, 40 + 5 * k, 0) for k in range(8)],
            "in sequence": [(k % 3, (k + 1) % 3, 0) for k in range(8)]}[operand]
    imm = -3 if op == "SHR" else -1234
    insn = SPEC.insn(f"ALU_{op}", **LOOP, use_imm=int(operand == "immediate"), imm=imm)
    run_twice(insn, uops, seed=7)


@pytest.mark.parametrize("uops", [[(k, 0, 0) for k in range(8)], [(5 * k % 13, 0, 0) for k in range(8)]])
def test_a_prepared_reset_zeroes_the_tiles_again(uops):
    run_twice(SPEC.insn("GEMM_RESET", **LOOP), uops, seed=3)


def test_a_load_into_the_uop_buffer_makes_a_prepared_gemm_plan_its_loop_again():
    rng = np.random.default_rng(5)
    state = VitaState(SPEC, np.zeros(1 << 12, np.uint8))
    scramble(state, rng)
    write_uops(state, [(k, k, 0) for k in range(8)])
    gemm = SPEC.insn("GEMM", **LOOP)
    step = prepared(state, gemm)
    step()
    words = [isa.binary.encode_record(SPEC, SPEC.insn("uop", dst_idx=3 * k % 8, src_idx=k + 1, wgt_idx=2))
             for k in range(8)]
    state.dram[:32] = np.array(words, np.uint32).view(np.uint8)
    prepared(state, SPEC.insn("LOAD_UOP", sram_base=0, dram_base=0, y_size=1, x_size=8, x_stride=8))()
    want = copy_of(state)
    execute_generic(want, gemm)
    step()
    assert np.array_equal(state.buffers["ACC"], want.buffers["ACC"])


@pytest.mark.parametrize("fields", [
    dict(sram_base=4, dram_base=2, y_size=1, x_size=6, x_stride=6),
    dict(sram_base=4, dram_base=2, y_size=3, x_size=2, x_stride=5, y_pad_0=1, x_pad_1=2),
])
@pytest.mark.parametrize("memory", ["INP", "WGT", "ACC"])
def test_a_prepared_load_copies_dram_as_it_is_then(memory, fields):
    rng = np.random.default_rng(9)
    state = VitaState(SPEC, np.zeros(1 << 14, np.uint8))
    insn = SPEC.insn(f"LOAD_{memory}", **fields)
    kind, f = state.kinds[memory], insn.values
    rows, cols = f["y_pad_0"] + f["y_size"] + f["y_pad_1"], f["x_pad_0"] + f["x_size"] + f["x_pad_1"]
    step = prepared(state, insn)
    for _ in range(2):
        scramble(state, rng)
        tiles = state.dram.view(kind.dtype).reshape(-1, kind.elems)
        src = np.stack([tiles[f["dram_base"] + y * f["x_stride"]:][:f["x_size"]] for y in range(f["y_size"])])
        want = isa.execute(SPEC, insn, {"dram": src})["sram"]
        step()
        got = state.buffers[memory][4:4 + rows * cols].reshape(rows, cols, kind.elems)
        assert np.array_equal(got, want.reshape(got.shape))


@pytest.mark.parametrize("stride", [3, 5])
def test_a_prepared_store_writes_the_accumulators_as_they_are_then(stride):
    rng = np.random.default_rng(stride)
    state = VitaState(SPEC, np.zeros(1 << 12, np.uint8))
    insn = SPEC.insn("STORE_OUT", sram_base=6, dram_base=1, y_size=2, x_size=3, x_stride=stride)
    step = prepared(state, insn)
    for _ in range(2):
        scramble(state, rng)
        sram = state.buffers["ACC"][6:12].reshape(2, 3, 16).copy()
        step()
        out = state.dram.view(np.int8).reshape(-1, 16)
        got = np.stack([out[1:4], out[1 + stride:4 + stride]])
        assert np.array_equal(got, isa.execute(SPEC, insn, {"sram": sram})["dram"])
