"""Asynchronous instructions on the DianNao machine: ``memcpy_async`` / ``memcpyr_async`` run on the core's
DMA unit while the core goes on, ``wait`` waits for them, and every access the spec's async rule forbids is a
HazardError naming both instructions.

Expected cycles are worked out in each test from the spec's parameters and the config (sim/diannao/machine.py:
issuing takes one cycle; the DMA unit runs its copies one after another, each as long as the synchronous
copy; ``wait`` ends when the unit's last copy does), never copied from a run.
"""

from __future__ import annotations

import numpy as np
import pytest

import isa
from sim.diannao.config import load_config
from sim.diannao.errors import HazardError, LaunchError
from sim.diannao.machine import Card

CONFIG = load_config("default")
SPEC = CONFIG.spec_for(isa.load_isa("diannao"))
P = SPEC.params
ROW = 4096   # bytes of one copy below
CONV = "conv.f16 out=0, inp=65536, wgt=0, h=12, w=12, cin=32, cout=64, kh=3, kw=3, s=1"


def kernel(*lines: str) -> isa.Program:
    return isa.assemble(".isa diannao\n.text\n" + "\n".join(lines) + "\n")


def launch(*lines: str, cores: int = 1, trace: bool = False, card: Card | None = None):
    card = card or Card(CONFIG, spec=SPEC)
    return card.launch(kernel(*lines), cores=cores, trace=trace), card


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def copy(name: str = "memcpy", dst_space: str = "NMEM", src_space: str = "GMEM", dst: int = 0, src: int = 0,
         length: int = ROW, count: int = 1) -> str:
    return (f"{name} dst_space={dst_space}, src_space={src_space}, dst={dst}, src={src}, len={length}, "
            f"count={count}, dst_stride={length}, src_stride={length}")


def gmem_copy_cycles(nbytes: int) -> int:
    """A synchronous GMEM copy of one row of ``nbytes`` on an idle card: latency, then the slower of the
    core's DMA rate and the GMEM port."""
    own = ceil_div(nbytes, P["DMA_GMEM_BYTES_PER_CYCLE"])
    return P["GMEM_LATENCY"] + max(own, ceil_div(nbytes, CONFIG.gmem_bytes_per_cycle)) - 1


def conv_cycles() -> int:
    macs = 10 * 10 * 64 * 9 * 32
    return P["TFU_LATENCY"] + ceil_div(macs * 2, 2 * P["TFU_MACS_PER_CYCLE"]) - 1


# --------------------------------------------------------------------------------------------------- timing
def test_an_async_copy_overlaps_the_conv_that_follows_it():
    sync, _ = launch(copy(dst=131072), CONV, "halt")
    overlapped, _ = launch(copy("memcpy_async", dst=131072), CONV, "wait", "halt")
    assert sync.cycles == gmem_copy_cycles(ROW) + conv_cycles() + 1
    # issue (1), the conv, the wait (1, the copy done long before), halt (1)
    assert conv_cycles() > gmem_copy_cycles(ROW)
    assert overlapped.cycles == 1 + conv_cycles() + 1 + 1
    assert overlapped.cores[0].stalled == 0
    assert overlapped.cores[0].unit_cycles["dma"] == gmem_copy_cycles(ROW)   # the unit's time, not the issue


def test_a_wait_stalls_until_the_copy_ends():
    result, _ = launch(copy("memcpy_async"), "wait", "halt")
    assert result.cycles == gmem_copy_cycles(ROW) + 1 + 1
    assert result.cores[0].stalled == gmem_copy_cycles(ROW) - 1   # from after the issue to the copy's end


def test_the_dma_unit_runs_its_copies_one_after_another():
    two, _ = launch(copy("memcpy_async"), copy("memcpy_async", dst=ROW, src=ROW), "wait", "halt")
    assert two.cycles == 2 * gmem_copy_cycles(ROW) + 1 + 1


def local_copy_cycles(nbytes: int) -> int:
    """A copy between a core's own memories: latency, then its rows at the local DMA rate."""
    return P["LOCAL_LATENCY"] + ceil_div(nbytes, P["DMA_LOCAL_BYTES_PER_CYCLE"]) - 1


def test_a_gmem_copy_and_an_on_chip_copy_run_side_by_side_on_the_two_engines():
    """The spec's ``engine``: a GMEM copy runs on the DMA unit's engine 0 (IO-DMA), an on-chip one on engine
    1 (Move-DMA); each engine runs its own queue, so the second copy does not wait for the first."""
    on_chip = copy("memcpy_async", dst_space="NMEM", src_space="NMEM", dst=2 * ROW, src=3 * ROW)
    both, _ = launch(copy("memcpy_async"), on_chip, "wait", "halt", trace=True)
    assert 1 + local_copy_cycles(ROW) < gmem_copy_cycles(ROW)
    assert both.cycles == gmem_copy_cycles(ROW) + 1 + 1   # the wait ends with the longer copy
    tracks = {track for track, *_ in both.trace}
    assert {"core 0 DMA", "core 0 DMA1"} <= tracks
    sync_behind, _ = launch(copy("memcpy_async"), on_chip.replace("memcpy_async", "memcpy"), "wait", "halt")
    assert sync_behind.cycles == gmem_copy_cycles(ROW) + 1 + 1   # not queued behind the GMEM copy


def test_a_synchronous_copy_waits_for_the_units_queued_copies():
    result, _ = launch(copy("memcpy_async"), copy(dst=ROW, src=ROW), "wait", "halt")
    assert result.cycles == 2 * gmem_copy_cycles(ROW) + 1 + 1
    assert result.cores[0].stalled == gmem_copy_cycles(ROW) - 1


def test_any_tensor_unit_runs_in_the_background_when_its_spec_says_async(tmp_path):
    """The machine runs what the spec says: an extension making vadd asynchronous needs no Python."""
    path = tmp_path / "async_vadd.toml"
    path.write_text('[isa]\nname = "diannao"\nsummary = "vadd on the VFU in the background"\nextends = '
                    '"diannao"\n[instructions.vadd]\ntiming = { async = true }\n')
    spec = CONFIG.spec_for(isa.load_spec_file(path))
    vadd = "vadd.f32 dst=196608, a=212992, b=229376, n=2048"
    vfu = P["VFU_LATENCY"] + ceil_div(2048 * 4, P["VFU_BYTES_PER_CYCLE"]) - 1
    program = isa.assemble(f".isa diannao\n.text\n{vadd}\n{CONV}\nwait\nhalt\n", isa=spec)
    result = Card(CONFIG, spec=spec).launch(program)
    assert result.cycles == 1 + conv_cycles() + 1 + 1 and vfu < conv_cycles()


def test_the_trace_shows_the_copy_on_the_dma_track_and_the_wait_as_a_stall():
    result, _ = launch(copy("memcpy_async"), "wait", "halt", trace=True)
    dma = [e for e in result.trace if e[0] == "core 0 DMA"]
    assert [(e[2], e[3]) for e in dma] == [(0, gmem_copy_cycles(ROW))]
    stall = ("core 0", "wait for the core's asynchronous work", 1, gmem_copy_cycles(ROW), "stall")
    assert stall in result.trace


def test_async_copies_move_the_same_bytes_as_synchronous_ones():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, 3 * ROW, dtype=np.uint8)
    program = (copy("memcpy_async", length=ROW, count=2), "wait",
               copy("memcpy_async", dst_space="GMEM", src_space="NMEM", dst=2 * ROW, src=ROW // 2,
                    length=ROW // 2, count=1), "wait", "halt")
    card = Card(CONFIG, image, spec=SPEC)
    launch(*program, card=card)
    assert (card.memory.gmem[2 * ROW:2 * ROW + ROW // 2] == image[ROW // 2:ROW]).all()


# -------------------------------------------------------------------------------------------------- hazards
def hazard(*lines: str, cores: int = 1) -> HazardError:
    with pytest.raises(HazardError) as info:
        launch(*lines, cores=cores)
    return info.value


def test_reading_an_outstanding_copys_destination_is_a_hazard():
    e = hazard(copy("memcpy_async", dst=65536), CONV, "wait", "halt")
    assert (e.core, e.pc) == (0, 1) and e.insn.startswith("conv.f16")
    assert "reads NMEM[65536, " in str(e) and "asynchronous instruction at pc 0 (memcpy_async" in str(e)
    assert "wait for it first" in str(e) and e.rule.startswith("until a wait")


def test_writing_an_outstanding_copys_source_is_a_hazard():
    store = copy("memcpy_async", dst_space="GMEM", src_space="NMEM", dst=0, src=64)
    e = hazard(store, "vzero dst_space=NMEM, dst=0, n=128", "wait", "halt")
    assert e.pc == 1 and "writes NMEM[0, 128)" in str(e) and "still reads NMEM[64, 4160)" in str(e)


def test_two_copies_into_the_same_bytes_are_a_hazard_but_apart_they_are_not():
    e = hazard(copy("memcpy_async"), copy("memcpy_async", dst=ROW - 1, src=ROW), "wait", "halt")
    assert e.pc == 1 and "writes NMEM[4095, 8191)" in str(e)
    launch(copy("memcpy_async"), copy("memcpy_async", dst=ROW, src=ROW), "wait", "halt")


def test_scalar_accesses_are_checked_also_inside_compiled_loops():
    # a loop of loads over NMEM that the machine would run as a compiled block: the 3rd load hits the copy
    loop = ["li r2, 3", "li r3, 0", "top:", "ld r1, r3, NMEM, 2048", "addi r3, r3, 2048", "addi r4, r4, 1",
            "blt r4, r2, top"]
    e = hazard(copy("memcpy_async", dst=6144), *loop, "wait", "halt")
    assert e.insn.startswith("ld") and "reads NMEM[6144, 6148)" in str(e)
    launch(copy("memcpy_async", dst=8192), *loop, "wait", "halt")   # the copy beyond every load
    assert hazard(copy("memcpy_async", src=64, dst_space="GMEM", src_space="NMEM"),
                  "li r1, 7", "st r1, r0, NMEM, 64", "wait", "halt").pc == 2


def test_a_halt_with_outstanding_copies_is_a_hazard():
    assert "halts with asynchronous work outstanding (issued at pc 0)" in str(hazard(copy("memcpy_async"),
                                                                                    "halt"))
    assert "halts with asynchronous work" in str(hazard(copy("memcpy_async"), "barrier CLUSTER", "halt",
                                                        cores=4))


# core 0 of each cluster fills SMEM[0, ROW) asynchronously and meets the others at a barrier without waiting;
# after it, every core runs ``after`` (which may jump to ``tail``), core 0 waits for its copy
def released(*after: str):
    return ["rdid r3, CORE_ID", "bne r3, r0, meet", copy("memcpy_async", dst_space="SMEM"), "meet:",
            "barrier CLUSTER", *after, "tail:", "bne r3, r0, done", "wait", "done:", "halt"]


def test_work_outstanding_at_a_barrier_binds_every_core_until_it_ends():
    """A barrier does not wait for the asynchronous work of the cores that meet there: another core that reads
    what it writes before it ends is an error naming both cores' instructions."""
    read = copy("memcpy", dst_space="NMEM", src_space="SMEM", dst=0, src=ROW - 4, length=4)
    e = hazard(*released("beq r3, r0, tail", read), cores=4)
    assert e.core == 1 and e.insn.startswith("memcpy dst_space=NMEM, src_space=SMEM")
    assert f"reads SMEM of cluster 0[{ROW - 4}, {ROW})" in str(e)
    assert "pc 2 (memcpy_async" in str(e) and "of core 0, outstanding at a barrier" in str(e)
    assert e.rule.startswith("asynchronous work outstanding at a barrier")
    # bytes it does not touch, and its own core's accesses until the wait, are as before
    launch(*released(copy("memcpy", dst_space="NMEM", src_space="SMEM", src=ROW, length=4)), cores=4)
    assert "wait for it first" in str(hazard(*released(read), cores=4))   # core 0 itself is checked first
    e = hazard(*released("beq r3, r0, tail", "ld r1, r0, SMEM, 64"), cores=4)   # a scalar load as well
    assert e.insn.startswith("ld") and "reads SMEM of cluster 0[64, 68)" in str(e) and "of core 0" in str(e)


def test_after_it_ends_or_in_another_clusters_smem_the_bytes_are_free():
    read = copy("memcpy", dst_space="NMEM", src_space="SMEM", dst=0, src=0, length=4)
    # core 1 computes first (longer than the copy runs), then reads: the copy has ended
    assert conv_cycles() > gmem_copy_cycles(ROW)
    result, _ = launch(*released("beq r3, r0, tail", CONV, read), cores=4)
    assert result.cycles > conv_cycles()
    # cluster 1's core 4 reads its own cluster's SMEM at the same address while cluster 0's copy runs
    program = released("rdid r4, CLUSTER_ID", "beq r4, r0, tail", "beq r3, r0, tail", read)
    other = ["rdid r3, CORE_ID", "rdid r4, CLUSTER_ID", "bne r4, r0, meet", "bne r3, r0, meet",
             copy("memcpy_async", dst_space="SMEM"), "meet:", *program[4:]]
    launch(*other, cores=8)


def test_after_a_wait_everything_is_allowed_again():
    result, _ = launch(copy("memcpy_async", dst=65536), "wait", CONV, "barrier CLUSTER", "halt", cores=4)
    assert result.cycles > conv_cycles()


def test_a_scalar_instruction_cannot_be_asynchronous(tmp_path):
    path = tmp_path / "async_add.toml"
    path.write_text('[isa]\nname = "diannao"\nsummary = "x"\nextends = "diannao"\n'
                    '[instructions.add]\ntiming = { async = true }\n')
    spec = CONFIG.spec_for(isa.load_spec_file(path))
    with pytest.raises(LaunchError, match="its timing has 'async', which this machine runs for tensor"):
        Card(CONFIG, spec=spec).launch(isa.assemble(".isa diannao\n.text\nadd r1, r1, r1\nhalt\n", isa=spec))


def test_an_engine_on_a_scalar_instruction_or_one_below_zero_is_refused_by_name(tmp_path):
    """``engine`` picks one of a unit's queues: the scalar unit has none to pick from, and engines count
    from 0 (an expression the loader cannot fold is checked when the instruction is decoded)."""
    path = tmp_path / "engines.toml"
    path.write_text('[isa]\nname = "diannao"\nsummary = "x"\nextends = "diannao"\n'
                    '[instructions.add]\ntiming = { engine = 1 }\n'
                    '[instructions.memcpy.timing]\nengine = "select(len > 8, 0, len - 9)"\n')
    spec = CONFIG.spec_for(isa.load_spec_file(path))
    with pytest.raises(LaunchError, match="pc 0 .*its timing has 'engine', which this machine runs for"):
        Card(CONFIG, spec=spec).launch(isa.assemble(".isa diannao\n.text\nadd r1, r1, r1\nhalt\n", isa=spec))
    with pytest.raises(LaunchError, match="engine is -5; engines are numbered from 0"):
        Card(CONFIG, spec=spec).launch(isa.assemble(".isa diannao\n.text\n" + copy(length=4) + "\nhalt\n",
                                                    isa=spec))
