"""The DianNao machine's timing, contention, barriers, results and errors, on small hand-written kernels.

Expected cycle counts are computed in each test from the spec's parameters and the config (the timing model
of sim/diannao/machine.py: an instruction takes latency + cycles - 1; shared ports serve first come, first
served), never copied from a run.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import isa
from sim.core import errors as core_errors
from sim.diannao.config import load_config
from sim.diannao.errors import (
    BarrierDeadlockError,
    ConstraintError,
    ControlError,
    ElementCountError,
    LaunchError,
    MemorySpaceError,
    MisalignedError,
    OutOfBoundsError,
    RunawayLoopError,
    ScratchpadOverflowError,
)
from sim.diannao.machine import Card

CONFIG = load_config("default")
SPEC = CONFIG.spec_for(isa.load_isa("diannao"))
P = SPEC.params


def new_card(config=CONFIG) -> Card:
    """A fresh card of ``config`` running the built-in spec with the config's parameters."""
    return Card(config, spec=config.spec_for(SPEC))


def kernel(*lines: str) -> isa.Program:
    return isa.assemble(".isa diannao\n.text\n" + "\n".join(lines) + "\n")


def cycles(*lines: str, cores: int = 1, args=(), config=CONFIG) -> int:
    return new_card(config).launch(kernel(*lines), cores=cores, args=args).cycles


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


GLOBAL_ID = ["rdid r3, CORE_ID", "rdid r4, CLUSTER_ID", "rdid r5, CORE_DIM", "mul r6, r4, r5",
             "add r6, r6, r3"]


# ------------------------------------------------------------------------------------------------- timing
def test_scalar_instructions_take_their_latency_one_after_another():
    base = cycles("halt")
    assert base == 1
    assert cycles("li r1, 5", "addi r1, r1, 1", "halt") - base == 2 * P["SCALAR_LATENCY"]
    assert cycles("mul r1, r1, r1", "halt") - base == P["MUL_LATENCY"]
    assert cycles("ld r1, r0, NMEM, 0", "halt") - base == P["LOCAL_LATENCY"]
    assert cycles("ld r1, r0, SMEM, 0", "halt") - base == P["SMEM_LATENCY"]
    assert cycles("ld r1, r0, GMEM, 0", "halt") - base == P["GMEM_LATENCY"]


def test_a_loop_costs_its_body_times_its_trip_count():
    body = P["SCALAR_LATENCY"] + P["BRANCH_LATENCY"]  # addi + blt
    for trips in (1, 7, 100):
        loop = cycles(f"li r2, {trips}", "top:", "addi r1, r1, 1", "blt r1, r2, top", "halt")
        assert loop == P["SCALAR_LATENCY"] + trips * body + 1


@pytest.mark.parametrize(("src", "dst", "latency", "rate", "port"), [
    ("GMEM", "NMEM", "GMEM_LATENCY", "DMA_GMEM_BYTES_PER_CYCLE", "gmem"),
    ("NMEM", "GMEM", "GMEM_LATENCY", "DMA_GMEM_BYTES_PER_CYCLE", "gmem"),
    ("SMEM", "WMEM", "SMEM_LATENCY", "DMA_SMEM_BYTES_PER_CYCLE", "smem"),
    ("GMEM", "SMEM", "GMEM_LATENCY", "DMA_GMEM_BYTES_PER_CYCLE", "both"),
    ("NMEM", "WMEM", "LOCAL_LATENCY", "DMA_LOCAL_BYTES_PER_CYCLE", None),
])
@pytest.mark.parametrize(("length", "count"), [(64, 1), (4096, 1), (1000, 7), (65535, 3)])
def test_a_dma_copy_takes_its_level_latency_plus_bytes_over_bandwidth(src, dst, latency, rate, port, length,
                                                                      count):
    copy = (f"memcpy dst_space={dst}, src_space={src}, dst=0, src=0, len={length}, count={count}, "
            f"dst_stride={length}, src_stride={length}")
    own = count * ceil_div(length, P[rate])  # the core's DMA engine moves whole rows at its rate
    ports = {"gmem": [CONFIG.gmem_bytes_per_cycle], "smem": [CONFIG.smem_bytes_per_cycle],
             "both": [CONFIG.gmem_bytes_per_cycle, CONFIG.smem_bytes_per_cycle], None: []}[port]
    transfer = max([own] + [ceil_div(length * count, bw) for bw in ports])
    assert cycles(copy, "halt") - cycles("halt") == P[latency] + transfer - 1


def test_a_vector_op_follows_the_vfu_throughput():
    for n in (64, 1024, 8192):
        for dt, size in (("f16", 2), ("f32", 4), ("i8", 1)):
            op = f"vadd.{dt} dst=0, a={n * size}, b={2 * n * size}, n={n}"
            expected = P["VFU_LATENCY"] + ceil_div(n * size, P["VFU_BYTES_PER_CYCLE"]) - 1
            assert cycles(op, "halt") - 1 == expected, (n, dt)


def test_a_compute_only_kernel_follows_the_tensor_unit_throughput():
    h, w, cin, cout, k = 12, 12, 32, 64, 3
    conv = f"conv.f16 out=0, inp=65536, wgt=0, h={h}, w={w}, cin={cin}, cout={cout}, kh={k}, kw={k}, s=1"
    macs = (h - k + 1) * (w - k + 1) * cout * k * k * cin
    per_conv = P["TFU_LATENCY"] + ceil_div(macs * 2, 2 * P["TFU_MACS_PER_CYCLE"]) - 1
    reps = 10
    result = new_card().launch(kernel(f"li r2, {reps}", "top:", conv, "addi r1, r1, 1", "blt r1, r2, top",
                                  "halt"))
    overhead = P["SCALAR_LATENCY"] + reps * (P["SCALAR_LATENCY"] + P["BRANCH_LATENCY"]) + 1
    assert result.cycles == reps * per_conv + overhead
    # the TFU did useful work for its throughput cycles: macs / (MACs per cycle) of every conv
    assert result.cores[0].unit_cycles["tfu"] == reps * ceil_div(macs * 2, 2 * P["TFU_MACS_PER_CYCLE"])
    assert result.utilization("tfu") > 0.95


# ----------------------------------------------------------------------------------------------- contention
def stream_from_gmem(nbytes: int) -> list[str]:
    """Every core copies its own nbytes of GMEM into NMEM at the same moment."""
    row = 32768
    return [*GLOBAL_ID, f"li r7, {nbytes}", "mul r8, r6, r7", "li r31, 0",
            f"memcpyr dst_space=NMEM, src_space=GMEM, rd=r31, rs1=r8, len={row}, count={nbytes // row}, "
            f"dst_stride={row}, src_stride={row}", "halt"]


def test_cores_streaming_from_gmem_at_once_share_its_bandwidth():
    nbytes = 256 * 1024
    port = nbytes // CONFIG.gmem_bytes_per_cycle
    own = (nbytes // 32768) * ceil_div(32768, P["DMA_GMEM_BYTES_PER_CYCLE"])
    alone = new_card().launch(kernel(*stream_from_gmem(nbytes)), cores=1)
    card16 = new_card().launch(kernel(*stream_from_gmem(nbytes)), cores=16)
    prologue = alone.cycles - (P["GMEM_LATENCY"] + max(own, port) - 1) - 1
    # first come, first served: the k-th core's transfer starts when the k - 1 before it left the port
    assert card16.cycles == prologue + 15 * port + P["GMEM_LATENCY"] + max(own, port) - 1 + 1
    assert card16.cycles > 10 * alone.cycles
    stalls = sorted(c.stalled for c in card16.cores)
    assert stalls == [k * port for k in range(16)]
    assert card16.bytes_moved == {"GMEM->NMEM": 16 * nbytes}


def test_smem_bandwidth_is_shared_per_cluster_not_across_clusters():
    nbytes = 128 * 1024
    copy = [*GLOBAL_ID, "li r31, 0", "li r8, 0",
            f"memcpyr dst_space=NMEM, src_space=SMEM, rd=r31, rs1=r8, len=32768, count={nbytes // 32768}, "
            "dst_stride=32768, src_stride=32768", "halt"]
    one_cluster = new_card().launch(kernel(*copy), cores=P["CORES_PER_CLUSTER"]).cycles
    four_clusters = new_card().launch(kernel(*copy), cores=16).cycles
    alone = new_card().launch(kernel(*copy), cores=1).cycles
    assert four_clusters == one_cluster > alone
    port = nbytes // CONFIG.smem_bytes_per_cycle
    assert one_cluster - alone == (P["CORES_PER_CLUSTER"] - 1) * port


# ---------------------------------------------------------------------------------------------- barriers
def producer_consumer(scope: str, with_barrier: bool) -> list[str]:
    """Core 0 of each cluster (or of the card) writes 42 to SMEM/GMEM after a long delay; everyone then reads
    it and stores what they saw to GMEM word 1024 + index."""
    space = "SMEM" if scope == "CLUSTER" else "GMEM"
    lines = [*GLOBAL_ID,
             "li r20, 42", "li r21, 1000",
             "bne r3, r0, wait" if scope == "CLUSTER" else "bne r6, r0, wait",
             "delay:", "addi r22, r22, 1", "blt r22, r21, delay",
             f"st r0, r20, {space}, 0",
             "wait:"]
    if with_barrier:
        lines.append(f"barrier {scope}")
    lines += [f"ld r23, r0, {space}, 0", "li r24, 4", "mul r25, r6, r24", "st r25, r23, GMEM, 4096", "halt"]
    return lines


@pytest.mark.parametrize("scope", ["CLUSTER", "ALL"])
def test_a_barrier_orders_a_write_before_the_reads_of_every_core_of_its_scope(scope):
    card = new_card()
    result = card.launch(kernel(*producer_consumer(scope, True)), cores=16)
    seen = card.memory.gmem[4096:4096 + 64].view(np.int32)
    assert seen.tolist() == [42] * 16
    # everyone waited for the writer: stalled at the barrier for about the delay loop
    waited = [c.stalled for c in result.cores if c.core % 4 != 0 or scope == "ALL" and c.core != 0]
    assert min(waited) > 1000 * (P["SCALAR_LATENCY"] + P["BRANCH_LATENCY"]) - 100


def test_without_the_barrier_the_readers_run_ahead_and_see_the_old_value():
    card = new_card()
    card.launch(kernel(*producer_consumer("CLUSTER", False)), cores=16)
    seen = card.memory.gmem[4096:4096 + 64].view(np.int32).reshape(4, 4)
    assert (seen[:, 1:] == 0).all() and (seen[:, 0] == 42).all()


def test_barriers_can_be_passed_many_times():
    lines = ["li r2, 50", "top:", "barrier ALL", "addi r1, r1, 1", "blt r1, r2, top", "halt"]
    result = new_card().launch(kernel(*lines), cores=16)
    assert result.instructions["barrier"] == 16 * 50
    assert result.cycles == (P["SCALAR_LATENCY"] + 50 * (P["BARRIER_LATENCY"] + P["SCALAR_LATENCY"]
                                                         + P["BRANCH_LATENCY"]) + 1)


# ------------------------------------------------------------------------------------------------- results
def test_results_count_instructions_bytes_and_core_time():
    card = new_card()
    program = kernel(*GLOBAL_ID, "li r7, 4096", "mul r8, r6, r7", "li r31, 0",
                     "memcpyr dst_space=NMEM, src_space=GMEM, rd=r31, rs1=r8, len=4096, count=1",
                     "vadd.f32 dst=0, a=0, b=0, n=1024",
                     "memcpyr dst_space=GMEM, src_space=NMEM, rd=r8, rs1=r31, len=4096, count=1", "halt")
    result = card.launch(program, cores=4)
    assert result.instructions == {"add": 4, "halt": 4, "li": 8, "memcpyr": 8, "mul": 8, "rdid": 12,
                                   "vadd": 4}
    assert (result.tensor_instructions, result.scalar_instructions) == (12, 36)
    assert result.bytes_moved == {"GMEM->NMEM": 4 * 4096, "NMEM->GMEM": 4 * 4096}
    for c in result.cores:
        assert c.busy + c.stalled + c.idle == result.cycles
        assert c.instructions == 12
    assert max(c.halted_at for c in result.cores) == result.cycles
    assert 0 < result.utilization("vfu") < result.utilization("dma") < 1
    assert result.microseconds == result.cycles / CONFIG.clock_mhz


def test_the_same_launch_gives_the_same_result_every_time():
    from baselines.diannao_kernels import run_elementwise

    first = run_elementwise("vadd", (64, 32, 32), "f16", cores=16)
    for _ in range(2):
        again = run_elementwise("vadd", (64, 32, 32), "f16", cores=16)
        assert again.result == first.result
        assert np.array_equal(again.output, first.output)
    traced = [new_card().launch(first.program, cores=16, args=[0, 0, 0], trace=True) for _ in range(2)]
    assert traced[0] == traced[1] and traced[0].trace


# -------------------------------------------------------------------------------------------------- errors
def error_of(*lines: str, cores: int = 1, config=CONFIG, args=()) -> Exception:
    with pytest.raises(Exception) as info:
        new_card(config).launch(kernel(*lines), cores=cores, args=args)
    return info.value


def test_a_misaligned_vector_address_names_core_pc_instruction_and_rule():
    e = error_of("li r1, 0", "vadd.f32 dst=0, a=32, b=128, n=64", "halt")
    assert isinstance(e, MisalignedError)
    assert (e.core, e.pc) == (0, 1) and e.insn == "vadd.f32 dst=0x0, a=0x20, b=0x80, n=64"
    assert str(e).startswith("core 0 (cluster 0, core 0), pc 1 (vadd.f32 dst=0x0, a=0x20, b=0x80, n=64): ")
    assert "a % VECTOR_ALIGN == 0" in str(e) and "a = 32" in str(e)


def test_a_bad_element_count_is_an_element_count_error():
    e = error_of("relu.f16 dst=0, n=100", "halt")
    assert isinstance(e, ElementCountError) and "n % VECTOR_ELEMS == 0" in str(e) and "n = 100" in str(e)


def test_a_copy_between_forbidden_spaces_is_a_memory_space_error():
    e = error_of("memcpy dst_space=WMEM, src_space=WMEM, dst=0, src=4096, len=64, count=1", "halt")
    assert isinstance(e, MemorySpaceError) and "WMEM and WMEM" in str(e)
    e = error_of("vzero dst_space=GMEM, dst=0, n=64", "halt")
    assert isinstance(e, MemorySpaceError)


def test_an_operand_past_the_end_of_a_scratchpad_is_an_overflow():
    nmem = P["NMEM_BYTES"]
    e = error_of(f"vadd.f32 dst=0, a=0, b={nmem - 128}, n=64", "halt")
    assert isinstance(e, ScratchpadOverflowError) and "b must lie inside NMEM" in str(e)
    # a register-addressed copy is checked on the address it has when it runs
    e = error_of(f"li r1, {nmem - 64}",
                 "memcpyr dst_space=NMEM, src_space=GMEM, rd=r1, rs1=r0, len=128, count=1", "halt")
    assert isinstance(e, ScratchpadOverflowError)
    assert f"R[rd] = {nmem - 64}" in str(e) and "destination rows must lie inside dst_space" in str(e)


def test_other_broken_rules_are_constraint_errors():
    e = error_of("memcpy dst_space=NMEM, src_space=GMEM, dst=0, src=0, len=64, count=2, dst_stride=32, "
                 "src_stride=64", "halt")
    assert type(e) is ConstraintError and "must not overlap" in str(e)


@pytest.mark.parametrize(("address", "space"), [(-4, "NMEM"), (P["NMEM_BYTES"] - 2, "NMEM"),
                                                (P["GMEM_BYTES"], "GMEM"), (P["SMEM_BYTES"], "SMEM")])
def test_a_scalar_access_outside_its_space_is_out_of_bounds(address, space):
    e = error_of(f"li r1, {address}", f"ld r2, r1, {space}, 0", "halt")
    assert isinstance(e, OutOfBoundsError) and (e.core, e.pc) == (0, 1)
    assert f"address {address}" in str(e) and f"outside {space}" in str(e)
    e = error_of(f"li r1, {address}", f"st r1, r2, {space}, 0", "halt")
    assert isinstance(e, OutOfBoundsError)


def test_a_barrier_some_core_never_reaches_is_a_deadlock_naming_the_missing_core():
    e = error_of(*GLOBAL_ID, "li r7, 5", "beq r6, r7, out", "barrier ALL", "out:", "halt", cores=16)
    assert isinstance(e, BarrierDeadlockError)
    assert "cores 0-4, 6-15 wait at the barrier of every core (pc 7)" in str(e)
    assert "core 5 halted at pc 8" in str(e)
    assert isinstance(e, core_errors.DeadlockError) and list(e.waiting) == ["cores 0-4, 6-15"]


def test_cores_waiting_at_different_barriers_deadlock():
    e = error_of(*GLOBAL_ID, "beq r6, r0, other", "barrier ALL", "halt", "other:", "barrier CLUSTER", "halt",
                 cores=4)
    assert isinstance(e, BarrierDeadlockError)
    assert "core 0 waits at cluster 0's barrier" in str(e)


def test_a_runaway_loop_stops_at_the_instruction_budget():
    small = dataclasses.replace(CONFIG, instruction_budget=10_000)
    e = error_of("top:", "addi r1, r1, 1", "jmp top", config=small)
    assert isinstance(e, RunawayLoopError) and "instruction budget of 10000" in str(e)


def test_running_off_the_end_of_the_program_is_a_control_error():
    e = error_of("li r1, 1")
    assert isinstance(e, ControlError) and "without halt" in str(e) and e.pc == 1


@pytest.mark.parametrize("count", [0, 5, 6, 17])
def test_a_launch_on_a_core_count_the_card_cannot_run_is_refused(count):
    with pytest.raises(LaunchError, match=f"cannot launch on {count} cores"):
        new_card().launch(kernel("halt"), cores=count)


def test_a_program_for_other_parameters_is_refused():
    other = isa.assemble(".isa diannao\n.param NUM_REGS = 16\n.text\nhalt\n")
    with pytest.raises(LaunchError, match="parameters differ"):
        new_card().launch(other)


def test_launch_arguments_preload_registers():
    card = new_card()
    card.launch(kernel("st r0, r1, GMEM, 0", "halt"), args=[64, -7])
    assert card.memory.gmem[64:68].view(np.int32)[0] == -7
    with pytest.raises(LaunchError, match="does not fit in a 32-bit register"):
        card.launch(kernel("halt"), args=[2**31])
