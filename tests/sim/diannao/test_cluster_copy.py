"""Copies between clusters on the DianNao machine: ``memcpyc`` (Cambricon's SRAM2SRAM with a destination
cluster) writes rows of the issuing cluster's SMEM into the SMEM of the cluster its register names, holding
both clusters' SMEM ports; a core of that cluster reads them after a barrier of scope ALL.

Expected cycles are worked out from the spec's parameters and the config, never copied from a run.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import isa
from sim.diannao.config import load_config
from sim.diannao.errors import LaunchError
from sim.diannao.machine import Card

CONFIG = load_config("default")
SPEC = CONFIG.spec_for(isa.load_isa("diannao"))
P = SPEC.params
ROW = 4096


def kernel(*lines: str) -> isa.Program:
    return isa.assemble(".isa diannao\n.text\n" + "\n".join(lines) + "\n")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def to_cluster(cluster: int, length: int = ROW, count: int = 1) -> list[str]:
    """Core 0 of cluster 0 copies GMEM[0, length * count) into its SMEM and sends it to ``cluster``'s SMEM at
    byte 8192; after a barrier of every core, core 0 of ``cluster`` copies it out to GMEM[65536...)."""
    return ["rdid r3, CORE_ID", "rdid r4, CLUSTER_ID", "li r5, 0",
            "bne r3, r31, wait", "bne r4, r31, wait",
            f"memcpy dst_space=SMEM, src_space=GMEM, dst=0, src=0, len={length * count}, count=1, "
            f"dst_stride={length * count}, src_stride={length * count}",
            f"li r6, {cluster}",
            f"memcpyc rd=r5, rs1=r5, rc=r6, dst_off=8192, src_off=0, len={length}, count={count}, "
            f"dst_stride={length}, src_stride={length}",
            "wait:", "barrier scope=ALL",
            f"li r6, {cluster}", "bne r3, r31, done", "bne r4, r6, done",
            f"memcpy dst_space=GMEM, src_space=SMEM, dst=65536, src=8192, len={length * count}, count=1, "
            f"dst_stride={length * count}, src_stride={length * count}",
            "done:", "halt"]


def launch(lines: list[str], cores: int = 8, trace: bool = False):
    card = Card(CONFIG, spec=SPEC)
    data = np.arange(ROW * 2, dtype=np.uint8) * 7
    card.memory.gmem[:data.size] = data
    return card.launch(kernel(*lines), cores=cores, trace=trace), card, data


def test_a_copy_to_another_cluster_lands_in_that_clusters_smem_only():
    result, card, data = launch(to_cluster(1))
    np.testing.assert_array_equal(card.memory.smem[1][8192:8192 + ROW], data[:ROW])
    np.testing.assert_array_equal(card.memory.gmem[65536:65536 + ROW], data[:ROW])
    assert not card.memory.smem[0][8192:8192 + ROW].any()   # the sender's own SMEM is not written there
    assert result.instructions["memcpyc"] == 1
    assert result.bytes_moved["SMEM->SMEM"] == ROW


def test_rows_keep_their_strides():
    result, card, data = launch(to_cluster(1, length=512, count=4))
    np.testing.assert_array_equal(card.memory.smem[1][8192:8192 + 2048], data[:2048])


def test_a_copy_to_the_own_cluster_is_a_local_copy():
    _, card, data = launch(to_cluster(0))
    np.testing.assert_array_equal(card.memory.smem[0][8192:8192 + ROW], data[:ROW])


def test_the_copy_takes_the_interconnect_latency_and_rows_at_the_smem_rate():
    lines = ["li r5, 0", "li r6, 1", f"memcpyc rd=r5, rs1=r5, rc=r6, dst_off=0, src_off=0, len={ROW}, "
             f"count=2, dst_stride={ROW}, src_stride={ROW}", "halt"]
    result, _, _ = launch(lines, cores=1)
    rows = 2 * ceil_div(ROW, P["DMA_SMEM_BYTES_PER_CYCLE"])
    port = ceil_div(2 * ROW, CONFIG.smem_bytes_per_cycle)
    assert result.cycles == 2 * P["SCALAR_LATENCY"] + P["CLUSTER_LATENCY"] + max(rows, port) - 1 + 1


def test_the_copy_holds_the_destination_clusters_smem_port():
    """Core 0 of cluster 0 sends to cluster 1 while core 0 of cluster 1 reads its own SMEM: the second to ask
    waits for the port the first holds; a reader in cluster 2 does not."""
    send = f"memcpyc rd=r5, rs1=r5, rc=r6, dst_off=0, src_off=0, len={ROW}, count=1, dst_stride={ROW}, " \
           f"src_stride={ROW}"
    read = f"memcpy dst_space=NMEM, src_space=SMEM, dst=0, src=65536, len={ROW}, count=1, " \
           f"dst_stride={ROW}, src_stride={ROW}"

    def reader_stall(cluster: int) -> int:
        lines = ["rdid r3, CORE_ID", "rdid r4, CLUSTER_ID", "li r5, 0", "li r6, 1", f"li r7, {cluster}",
                 "bne r3, r31, done", "bne r4, r31, other", send, "jmp done",
                 "other:", "bne r4, r7, done", read, "done:", "halt"]
        result, _, _ = launch(lines, cores=12)
        return result.cores[cluster * P["CORES_PER_CLUSTER"]].stalled

    held = ceil_div(ROW, CONFIG.smem_bytes_per_cycle)
    assert reader_stall(2) == 0
    assert 0 < reader_stall(1) <= held


def test_a_cluster_outside_the_card_is_an_error_naming_the_rule():
    lines = ["li r5, 0", f"li r6, {P['CLUSTERS']}", f"memcpyc rd=r5, rs1=r5, rc=r6, dst_off=0, src_off=0, "
             f"len={ROW}, count=1, dst_stride={ROW}, src_stride={ROW}", "halt"]
    with pytest.raises(Exception, match="destination cluster") as e:
        launch(lines, cores=1)
    assert "pc 2" in str(e.value)


def test_a_cluster_on_a_space_without_a_copy_per_cluster_is_refused_by_name():
    instr = SPEC.instruction("memcpyc")
    nmem = dataclasses.replace(instr.operands[1], space="NMEM")
    spec = dataclasses.replace(SPEC, instructions={**SPEC.instructions, "memcpyc": dataclasses.replace(
        instr, operands=(instr.operands[0], nmem, instr.operands[2]))})
    card = Card(CONFIG, spec=spec)
    program = isa.assemble(".isa diannao\n.text\nli r6, 1\nmemcpyc rd=r5, rs1=r5, rc=r6, dst_off=0, "
                           f"src_off=0, len={ROW}, count=1, dst_stride={ROW}, src_stride={ROW}\nhalt\n", spec)
    with pytest.raises(LaunchError, match="names a cluster, but it lies in NMEM"):
        card.launch(program, cores=1)


def test_the_generic_executor_checks_the_cluster_range():
    from sim.diannao.functional import CardMemory, execute_generic
    memory = CardMemory(SPEC)
    insn = SPEC.insn("memcpyc", rd=5, rs1=5, rc=6, dst_off=0, src_off=0, len=16, count=1, dst_stride=16,
                     src_stride=16)
    registers = np.zeros(P["NUM_REGS"], np.int32)
    registers[6] = P["CLUSTERS"] + 3
    with pytest.raises(IndexError, match="cluster"):
        execute_generic(SPEC, insn, memory, 0, {"R": registers})
