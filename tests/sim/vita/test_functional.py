"""VITA's fast paths equal the spec's semantics run micro-op by micro-op by the generic executor."""

from __future__ import annotations

import numpy as np
import pytest

import isa
from sim.vita import functional
from sim.vita.functional import FAST_PATHS, VitaExecError, VitaState, execute_generic, fast_path

SPEC = isa.load_isa("vita")
ALU_OPS = ("MIN", "MAX", "ADD", "SHR", "MUL")


def fresh(seed: int, dram_bytes: int = 1 << 16) -> tuple[VitaState, np.random.Generator]:
    rng = np.random.default_rng(seed)
    state = VitaState(SPEC, rng.integers(0, 256, dram_bytes, dtype=np.uint8))
    for name, buf in state.buffers.items():
        if name != "UOP":
            info = np.iinfo(buf.dtype)
            buf[...] = rng.integers(info.min, info.max, buf.shape, endpoint=True, dtype=buf.dtype)
    return state, rng


def write_uops(state: VitaState, rng: np.random.Generator, n: int, dst_hi: int, src_hi: int, wgt_hi: int):
    """n random micro-ops (with repeats) at the start of the uop buffer; returns their (dst, src, wgt)."""
    uops = [(int(rng.integers(0, dst_hi)), int(rng.integers(0, src_hi)), int(rng.integers(0, wgt_hi)))
            for _ in range(n)]
    for k, (d, s, w) in enumerate(uops):
        state.buffers["UOP"][k, 0] = isa.binary.encode_record(SPEC, SPEC.insn("uop", dst_idx=d, src_idx=s,
                                                                                 wgt_idx=w))
    return uops


def loop(insn: isa.Insn, uops):
    """The (dst, src, wgt) tile indices VTA's two-level micro-op loop visits, in order (hw_spec.h)."""
    f = insn.values
    for i in range(f["iter_out"]):
        for j in range(f["iter_in"]):
            for d, s, w in uops[f["uop_bgn"]:f["uop_end"]]:
                yield (d + i * f["dst_factor_out"] + j * f["dst_factor_in"],
                       s + i * f["src_factor_out"] + j * f["src_factor_in"],
                       w + i * f.get("wgt_factor_out", 0) + j * f.get("wgt_factor_in", 0))


@pytest.mark.parametrize("seed", range(4))
def test_gemm_batches_its_micro_ops_exactly_like_running_them_in_sequence(seed):
    state, rng = fresh(seed)
    uops = write_uops(state, rng, 6, dst_hi=4, src_hi=8, wgt_hi=8)  # few destinations: many repeats
    insn = SPEC.insn("GEMM", uop_bgn=1, uop_end=6, iter_out=3, iter_in=2, dst_factor_out=1, dst_factor_in=2,
                     src_factor_out=5, src_factor_in=1, wgt_factor_out=2, wgt_factor_in=3)
    want = state.buffers["ACC"].copy()
    for d, s, w in loop(insn, uops):
        tiles = {"acc": want[d].reshape(1, 16), "inp": state.buffers["INP"][s].reshape(1, 16),
                 "wgt": state.buffers["WGT"][w].reshape(16, 16)}
        want[d] = isa.execute(SPEC, insn, tiles)["acc"].reshape(-1)
    state.gemm(insn)
    assert np.array_equal(state.buffers["ACC"], want)


def test_gemm_reset_zeroes_every_addressed_tile_and_nothing_else():
    state, rng = fresh(7)
    uops = write_uops(state, rng, 3, dst_hi=50, src_hi=1, wgt_hi=1)
    insn = SPEC.insn("GEMM_RESET", uop_bgn=0, uop_end=3, iter_out=2, iter_in=2, dst_factor_out=100,
                     dst_factor_in=7)
    before = state.buffers["ACC"].copy()
    state.gemm_reset(insn)
    hit = sorted({d for d, _, _ in loop(insn, uops)})
    assert not state.buffers["ACC"][hit].any()
    untouched = np.setdiff1d(np.arange(before.shape[0]), hit)
    assert np.array_equal(state.buffers["ACC"][untouched], before[untouched])


@pytest.mark.parametrize("action", ["gemm", "reset", "ALU_ADD", "ALU_MAX", "generic"])
def test_a_loop_longer_than_a_batch_runs_in_order_batch_after_batch(action, monkeypatch):
    """Micro-op loops longer than BATCH_UOPS run as consecutive batches (bounded memory, whatever the loop):
    the same result as one batch, dependent micro-ops included (a destination read by a later batch)."""
    state, rng = fresh(21)
    write_uops(state, rng, 5, dst_hi=9, src_hi=9, wgt_hi=8)   # few tiles: repeats across batches
    name = {"gemm": "GEMM", "reset": "GEMM_RESET", "generic": "ALU_MIN"}.get(action, action)
    loop_fields = dict(uop_bgn=0, uop_end=5, iter_out=4, iter_in=3, dst_factor_out=1, dst_factor_in=2,
                       src_factor_out=2, src_factor_in=1)
    insn = SPEC.insn(name, **loop_fields, **({"wgt_factor_out": 1, "wgt_factor_in": 1} if name == "GEMM" else
                                             {"use_imm": 0} if name.startswith("ALU") else {}))
    run = {"gemm": lambda st: st.gemm(insn), "reset": lambda st: st.gemm_reset(insn),
           "generic": lambda st: execute_generic(st, insn)}.get(action, lambda st: st.alu(insn, action[4:]))
    whole = VitaState(SPEC, state.dram.copy())
    whole.buffers = {k: v.copy() for k, v in state.buffers.items()}
    run(whole)
    monkeypatch.setattr(functional, "BATCH_UOPS", 7)   # 60 micro-ops in 9 batches
    run(state)
    assert np.array_equal(state.buffers["ACC"], whole.buffers["ACC"])


@pytest.mark.parametrize("op", ALU_OPS)
@pytest.mark.parametrize("use_imm", [0, 1])
@pytest.mark.parametrize("dependent", [False, True])
def test_alu_equals_the_spec_micro_op_by_micro_op(op, use_imm, dependent):
    state, rng = fresh(ALU_OPS.index(op) * 4 + use_imm * 2 + dependent)
    if op == "SHR":  # shift amounts in a useful range, both signs, plus the clamped extremes
        state.buffers["ACC"][:64] = rng.integers(-40, 40, (64, 16))
        state.buffers["ACC"][0, :2] = (2**31 - 1, -(2**31))
    hi = 6 if dependent else 64
    uops = write_uops(state, rng, 8, dst_hi=hi, src_hi=hi, wgt_hi=1)
    if not dependent:  # distinct destinations, sources disjoint from them
        uops = [(k, 32 + k, 0) for k in range(8)]
        for k, (d, s, _) in enumerate(uops):
            word = isa.binary.encode_record(SPEC, SPEC.insn("uop", dst_idx=d, src_idx=s))
            state.buffers["UOP"][k, 0] = word
    imm = int(rng.integers(-(2**15), 2**15)) if op != "SHR" else -5
    insn = SPEC.insn(f"ALU_{op}", uop_bgn=0, uop_end=8, iter_out=2, iter_in=1, dst_factor_out=1,
                     src_factor_out=1, use_imm=use_imm, imm=imm)
    want = state.buffers["ACC"].copy()
    for d, s, _ in loop(insn, uops):
        tiles = {"dst": want[d].reshape(1, 16), "src": want[s].reshape(1, 16)}
        want[d] = isa.execute(SPEC, insn, tiles)["dst"].reshape(-1)
    generic = VitaState(SPEC, state.dram.copy())
    generic.buffers = {name: buf.copy() for name, buf in state.buffers.items()}
    state.alu(insn, op)
    assert np.array_equal(state.buffers["ACC"], want)
    execute_generic(generic, insn)   # what the machine runs for an ALU instruction no fast path implements
    assert np.array_equal(generic.buffers["ACC"], want)


def test_each_built_in_instruction_has_the_fast_path_its_contract_names():
    """Fast paths are chosen by contract (semantics and operands), not by name: the built-in spec's loads,
    store, GEMMs and ALU operations each find theirs; FINISH has none (it ends the program)."""
    found = {name: fast_path(instr) for name, instr in SPEC.instructions.items()}
    assert found == {
        "LOAD_INP": ("load", "INP"), "LOAD_WGT": ("load", "WGT"), "LOAD_ACC": ("load", "ACC"),
        "LOAD_UOP": ("load", "UOP"), "STORE_OUT": ("store", None), "GEMM": ("gemm", None),
        "GEMM_RESET": ("reset", None), **{f"ALU_{op}": ("alu", op) for op in ALU_OPS}, "FINISH": None}
    assert len(FAST_PATHS) == len(found) - 1


@pytest.mark.parametrize("memory", ["INP", "WGT", "ACC", "UOP"])
def test_loads_equal_the_spec_semantics(memory):
    state, rng = fresh(11)
    insn = SPEC.insn(f"LOAD_{memory}", sram_base=5, dram_base=3, y_size=3, x_size=2, x_stride=4, y_pad_0=1,
                     y_pad_1=2, x_pad_0=0, x_pad_1=1)
    kind = state.kinds[memory]
    tiles = state.dram[:(3 + 2 * 4 + 2) * kind.nbytes].view(kind.dtype).reshape(-1, kind.elems)
    src = np.stack([tiles[3 + y * 4: 3 + y * 4 + 2] for y in range(3)])  # rows x_stride tiles apart
    want = isa.execute(SPEC, insn, {"dram": src.copy()})["sram"]
    state.load(insn, memory)
    got = state.buffers[memory][5:5 + 6 * 3].reshape(6, 3, kind.elems)
    assert np.array_equal(got, want.reshape(got.shape))


@pytest.mark.parametrize("memory", ["INP", "WGT", "ACC", "UOP"])
def test_a_load_with_x_size_0_writes_nothing_padding_included(memory):
    """VTA's load module skips a load of zero-tile rows: its padding is not written either (the spec's SRAM
    block is empty), and the spec's rules do not hold it to the buffer."""
    state, _ = fresh(13)
    state.buffers[memory][:] = 7
    insn = SPEC.insn(f"LOAD_{memory}", sram_base=state.kinds[memory].depth - 1, y_size=2, x_size=0,
                     x_stride=1, y_pad_0=1, y_pad_1=1, x_pad_0=2, x_pad_1=1)
    assert isa.check_constraints(SPEC, insn) == []
    kind = state.kinds[memory]
    assert isa.execute(SPEC, insn, {"dram": np.zeros((2, 0, kind.elems), kind.dtype)})["sram"].size == 0
    state.load(insn, memory)
    assert (state.buffers[memory] == 7).all()


def test_store_truncates_accumulators_like_the_spec():
    state, _ = fresh(12)
    insn = SPEC.insn("STORE_OUT", sram_base=9, dram_base=2, y_size=2, x_size=3, x_stride=5)
    want = isa.execute(SPEC, insn, {"sram": state.buffers["ACC"][9:15].reshape(2, 3, 16).copy()})["dram"]
    state.store(insn)
    out = state.dram[:(2 + 5 + 3) * 16].view(np.int8).reshape(-1, 16)
    assert np.array_equal(np.stack([out[2:5], out[7:10]]), want)


@pytest.mark.parametrize(("name", "fields", "call", "message"), [
    ("GEMM", dict(uop_bgn=2, uop_end=9000, iter_out=1, iter_in=1), "gemm",
     r"GEMM: micro-op range 2\.\.9000 is outside the uop buffer \(depth 8192\)"),
    ("GEMM", dict(uop_bgn=0, uop_end=1, iter_out=3, iter_in=1, dst_factor_out=1500), "gemm",
     r"GEMM: micro-op 2 of the loop addresses accumulator tile 3000, outside the ACC buffer \(depth 2048\)"),
    ("LOAD_INP", dict(sram_base=2040, y_size=3, x_size=3, x_stride=3), "load",
     r"LOAD_INP: tiles 2040\.\.2048 are outside the INP buffer \(depth 2048\)"),
    ("LOAD_WGT", dict(dram_base=300, y_size=1, x_size=1, x_stride=1), "load",
     r"LOAD_WGT: DRAM bytes 76800\.\.77055 \(physical 0x12c00\.\.0x12cff\) are outside DRAM \(65536 "
     r"bytes at 0x0\)"),
    ("STORE_OUT", dict(y_size=1, x_size=1, x_stride=1, x_pad_0=1), "store", r"a store cannot pad"),
])
def test_bad_instructions_name_themselves_and_the_rule(name, fields, call, message):
    state, _ = fresh(13)
    insn = SPEC.insn(name, **fields)
    with pytest.raises(VitaExecError, match=message):
        if call == "load":
            state.load(insn, name.split("_")[1])
        else:
            getattr(state, call)(insn)
