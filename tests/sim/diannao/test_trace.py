"""The Chrome/Perfetto trace of a DianNao launch: a track per launched core and per core's DMA engine, slices
that never overlap on a track, every copy on its core's DMA track, times in microseconds at the clock."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from baselines.diannao_kernels import elementwise_program, matmul_program
from compiler.ops.diannao import block_weights
from sim.diannao.config import DiannaoConfig
from sim.diannao.machine import Card, DiannaoResult
from sim.diannao.trace import chrome_trace, write_trace

# A card like the default one at another clock, so that "cycles / clock_mhz" is not "cycles / 1000".
SLOW = DiannaoConfig.from_text('name = "slow"\nsummary = "the default card at 800 MHz"\nclock_mhz = 800.0\n')
VECTOR = 64  # elements of one vector instruction's granule (the kernels split work in whole vectors)

# Every core of each cluster loads a word from GMEM, adds 1 and stores it into the cluster's SMEM; after a
# cluster barrier, the cluster's core 0 copies the four words to GMEM 4096 and to its NMEM; a card barrier
# ends the kernel.
BARRIER_KERNEL = """.isa diannao
.text
    rdid r3, CORE_ID
    li r4, 4
    mul r5, r3, r4
    add r6, r0, r5
    ld rd=r7, rs1=r6, space=GMEM, imm=0
    addi r7, r7, 1
    st rs1=r5, rs2=r7, space=SMEM, imm=0
    barrier scope=CLUSTER
    bne r3, r31, done
    memcpy dst_space=GMEM, src_space=SMEM, dst=4096, src=0, len=16, count=1, dst_stride=16, src_stride=16
    memcpy dst_space=NMEM, src_space=SMEM, dst=0, src=0, len=16, count=1, dst_stride=16, src_stride=16
done:
    barrier scope=ALL
    halt
"""


def launch_elementwise(cores: int, vectors_per_core: int, tile_vectors: int, trace: bool = True
                       ) -> tuple[DiannaoResult, dict[int, int]]:
    """C = A + B (f32) on ``cores`` cores of the 800 MHz card; also the memcpys each core must run: two in and
    one out per tile (the last tile may be short)."""
    card = Card(SLOW, spec=isa.load_isa("diannao"))
    per_core, tile = vectors_per_core * VECTOR, tile_vectors * VECTOR
    total = cores * per_core
    rng = np.random.default_rng(cores * 1000 + per_core + tile)
    a, b = rng.standard_normal((2, total)).astype(np.float32)
    bufs = [card.to_gmem(a), card.to_gmem(b), card.to_gmem(np.zeros(total, np.float32))]
    program = elementwise_program("vadd", "f32", per_core, tile)
    result = card.launch(program, cores=cores, args=[buf.addr for buf in bufs], trace=trace)
    np.testing.assert_array_equal(card.from_gmem(bufs[2]), a + b)
    tiles = -(-per_core // tile)
    return result, {c: 3 * tiles for c in range(cores)}


def launch_barrier_kernel() -> tuple[DiannaoResult, dict[int, int]]:
    """BARRIER_KERNEL on two clusters (8 cores); core 0 of each cluster runs two memcpys, the others none."""
    card = Card(SLOW, spec=isa.load_isa("diannao"))
    card.to_gmem(np.arange(4, dtype=np.int32) * 10, addr=0)
    result = card.launch(isa.assemble(BARRIER_KERNEL), cores=8, args=[0], trace=True)
    np.testing.assert_array_equal(card.memory.gmem[4096:4112].view(np.int32), np.arange(4) * 10 + 1)
    return result, {c: 2 if c % 4 == 0 else 0 for c in range(8)}


def launch_matmul() -> tuple[DiannaoResult, dict[int, int]]:
    """out = a @ b (f16, 64x32x32) with the rows split over 4 cores: three copies per core."""
    card = Card(SLOW, spec=isa.load_isa("diannao"))
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((64, 32)).astype(np.float16), rng.standard_normal((32, 32)).astype(np.float16)
    bufs = [card.to_gmem(a), card.to_gmem(block_weights(b)), card.to_gmem(np.zeros((64, 32), np.float16))]
    result = card.launch(matmul_program(16, 32, 32, "f16"), cores=4, args=[buf.addr for buf in bufs],
                         trace=True)
    return result, dict.fromkeys(range(4), 3)


LAUNCHES = {
    "vadd, 1 core, 3 tiles": lambda: launch_elementwise(1, 5, 2),
    "vadd, 4 cores, 1 tile": lambda: launch_elementwise(4, 2, 2),
    "vadd, 16 cores, 2 tiles": lambda: launch_elementwise(16, 3, 2),
    "barriers, GMEM and SMEM, 8 cores": launch_barrier_kernel,
    "matmul, 4 cores": launch_matmul,
}


@pytest.fixture(params=list(LAUNCHES), scope="module")
def launch(request) -> tuple[DiannaoResult, dict[int, int]]:
    return LAUNCHES[request.param]()


def slices_by_track(trace: dict) -> dict[str, list[dict]]:
    """The complete ("X") events of a Chrome trace, by track name, each track in time order."""
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    tracks: dict[str, list[dict]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            tracks[names[e["tid"]]].append(e)
    for slices in tracks.values():
        slices.sort(key=lambda e: (e["args"]["first_cycle"], e["args"]["cycles"]))
    return tracks


def cycle_spans(slices: list[dict]) -> list[tuple[int, int]]:
    """(first cycle, end cycle) of each slice."""
    return [(e["args"]["first_cycle"], e["args"]["first_cycle"] + e["args"]["cycles"]) for e in slices]


def overlapping(spans: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Neighbouring spans (in time order) of which the second begins before the first ends."""
    return [(a, b) for a, b in pairwise(spans) if b[0] < a[1]]


def test_each_launched_core_has_a_track_and_its_dma_engine_another(launch):
    result, memcpys = launch
    trace = chrome_trace(result)
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    cores = sorted(memcpys)
    # a core's DMA unit has two engines (GMEM copies, on-chip copies): the second's track where it ran any
    engines = [f"core {c} DMA1" for c in cores if f"core {c} DMA1" in names]
    assert sorted(names) == sorted([f"core {c}" for c in cores] + [f"core {c} DMA" for c in cores] + engines)
    tids = [e["tid"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    assert len(set(tids)) == len(tids)
    assert set(slices_by_track(trace)) <= set(names)


def test_slices_never_overlap_and_a_core_track_covers_the_core_until_its_halt(launch):
    result, _ = launch
    tracks = slices_by_track(chrome_trace(result))
    for name, slices in tracks.items():
        spans = cycle_spans(slices)
        assert all(0 <= begin <= end for begin, end in spans), name
        assert overlapping(spans) == [], name
    for core in result.cores:
        spans = cycle_spans(tracks[f"core {core.core}"])
        gaps = [(a[1], b[0]) for a, b in pairwise(spans) if a[1] != b[0]]
        assert (spans[0][0], gaps, spans[-1][1]) == (0, [], core.halted_at), f"core {core.core}"
    assert max(c.halted_at for c in result.cores) == result.cycles


def test_every_memcpy_a_core_runs_is_on_its_dma_track_as_on_its_core_track(launch):
    result, memcpys = launch
    tracks = slices_by_track(chrome_trace(result))
    def engines(core: int) -> list:   # both engines of the core's DMA unit
        return tracks.get(f"core {core} DMA", []) + tracks.get(f"core {core} DMA1", [])

    assert sum(len(engines(c)) for c in memcpys) == (
        result.instructions.get("memcpy", 0) + result.instructions.get("memcpyr", 0))
    for core, count in memcpys.items():
        dma = sorted((e["ts"], e["name"], e["dur"]) for e in engines(core))
        assert len(dma) == count, f"core {core}"
        assert all(": memcpy" in name for _, name, _ in dma)
        on_core = sorted((e["ts"], e["name"], e["dur"]) for e in tracks[f"core {core}"]
                         if ": memcpy" in e["name"])
        assert dma == on_core


def test_times_are_cycles_over_the_clock_in_mhz(launch):
    result, _ = launch
    trace = chrome_trace(result)
    assert trace["otherData"] == {"cycles": result.cycles, "clock_mhz": SLOW.clock_mhz}
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(result.trace)
    for e, (_, what, begin, end, kind) in zip(events, result.trace, strict=True):
        assert (e["name"], e["cat"], e["args"]) == (what, kind, {"first_cycle": begin, "cycles": end - begin})
        assert e["ts"] == pytest.approx(begin / 800.0) and e["dur"] == pytest.approx((end - begin) / 800.0)
    assert max(e["ts"] + e["dur"] for e in events) == pytest.approx(result.cycles / 800.0)


@settings(max_examples=12, deadline=None)
@given(cores=st.sampled_from([1, 2, 3, 4, 8, 12, 16]), vectors=st.integers(1, 6), tile=st.integers(1, 4))
def test_any_elementwise_launch_gives_a_consistent_trace(cores, vectors, tile):
    result, memcpys = launch_elementwise(cores, vectors, tile)
    tracks = slices_by_track(chrome_trace(result))
    assert {f"core {c}" for c in range(cores)} | {f"core {c} DMA" for c in range(cores)} == set(tracks)
    for name, slices in tracks.items():
        assert overlapping(cycle_spans(slices)) == [], name
    assert {c: len(tracks[f"core {c} DMA"]) for c in range(cores)} == memcpys


def test_write_trace_writes_the_same_dict_as_json(tmp_path):
    result, _ = launch_elementwise(4, 2, 1)
    write_trace(result, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == chrome_trace(result)


def test_a_launch_without_trace_records_no_slices():
    result, _ = launch_elementwise(4, 2, 1, trace=False)
    assert result.trace == []
    events = chrome_trace(result)["traceEvents"]
    assert [e for e in events if e["ph"] != "M"] == []


def test_stall_slices_add_up_to_each_cores_stalled_cycles():
    """Port waits of copies and of scalar GMEM accesses, and barrier waits, each get a stall slice."""
    program = isa.assemble("\n".join([
        ".isa diannao", ".text",
        "rdid r3, CORE_ID", "li r4, 4", "mul r5, r3, r4",
        "ld r6, r5, GMEM, 0", "st r5, r6, GMEM, 256",                       # scalar GMEM traffic contends
        "memcpy dst_space=NMEM, src_space=GMEM, dst=0, src=0, len=4096, count=1",  # so do the copies
        "bne r3, r0, wait", "li r7, 200", "spin:", "addi r8, r8, 1", "blt r8, r7, spin",
        "wait:", "barrier CLUSTER", "halt"]) + "\n")
    result = Card(spec=isa.load_isa("diannao")).launch(program, cores=4, trace=True)
    stalls = defaultdict(int)
    for track, _what, begin, end, kind in result.trace:
        if kind == "stall":
            stalls[track] += end - begin
    assert sum(c.stalled > 0 for c in result.cores) >= 3
    for c in result.cores:
        assert stalls[f"core {c.core}"] == c.stalled, c.core
