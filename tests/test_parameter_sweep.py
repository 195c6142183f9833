"""Change the hardware, and the compiler and the simulator follow (issue 19's parameter sweep).

At every point of a sweep over machine parameters, a conv and a GEMM (VITA) or add, relu and a conv
(DianNao) compile for that machine, simulate on it and match numpy bit for bit; and the cycles move the way
the hardware change says: more DRAM bandwidth is never slower, a bigger GEMM core is faster on a
compute-bound layer. A point whose parameters give no valid spec (VITA's 128-bit encoding caps the buffer
depths a small GEMM core allows) is skipped, and each sweep checks that most of its points ran.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

import isa
from compiler.ops.nn import ConvShape, GemmShape
from compiler.ops.vita import Tiling
from sim.core.errors import SimConfigError
from sim.diannao.config import DiannaoConfig
from sim.vita.config import load_config
from tandem.flows.diannao import run_diannao
from tandem.flows.targets import load_target
from tandem.flows.vita import run_vita

KIB = 1024
BANDWIDTHS = (4, 8, 16, 32, 64)


def vita_layers(batch: int) -> dict[str, ConvShape | GemmShape]:
    """A conv of a batch of BATCH images (the GEMM core multiplies BATCH rows at once) and a GEMM."""
    return {"conv": ConvShape(6, 6, 64, 64, 3, 1, 1, n=batch), "gemm": GemmShape(16, 64, 128)}


def vita_target(log_block: int, buffer_kib: int, bandwidth: int = 8, log_batch: int = 0):
    """tvm-paper with a 2^log_batch x 2^log_block x 2^log_block GEMM core, every buffer of ``buffer_kib``
    KiB and the DRAM bandwidth."""
    log = (buffer_kib * KIB).bit_length() - 1
    params = {"LOG_BATCH": log_batch, "LOG_BLOCK": log_block, "LOG_INP_BUFF_SIZE": log,
              "LOG_WGT_BUFF_SIZE": log, "LOG_ACC_BUFF_SIZE": log, "DRAM_BYTES_PER_CYCLE": bandwidth}
    config = load_config("tvm-paper")
    return load_target("vita", dataclasses.replace(config, isa_params={**config.isa_params, **params}))


def test_vita_sweep_compiles_simulates_and_validates_at_every_point_and_bandwidth_only_helps():
    ran = skipped = 0
    for log_block, log_batch, buffer_kib in itertools.product((3, 4, 5), (0, 1), (16, 64, 256)):
        try:
            targets = [vita_target(log_block, buffer_kib, bw, log_batch) for bw in BANDWIDTHS]
        except SimConfigError as e:   # the encoding cannot address these buffers with this core
            assert "beyond the 128-bit word" in str(e) or "does not fit" in str(e), str(e)
            skipped += 1
            continue
        for name, layer in vita_layers(1 << log_batch).items():
            first = run_vita(layer, 0, targets[0])
            tiling = Tiling(**first.params["tiling"])
            cycles = [first.cycles] + [run_vita(layer, 0, t, tiling=tiling).cycles for t in targets[1:]]
            where = f"{name} LOG_BLOCK={log_block} LOG_BATCH={log_batch} buffers={buffer_kib} KiB"
            assert first.validated, where
            assert cycles == sorted(cycles, reverse=True), f"{where}: more bandwidth was slower: {cycles}"
            assert cycles[0] > cycles[-1], f"{where}: bandwidth changed nothing: {cycles}"
            ran += 1
    assert ran >= 20 and skipped <= 6, (ran, skipped)


def test_a_bigger_gemm_core_is_faster_on_a_compute_bound_layer():
    layer = GemmShape(64, 128, 256)
    cycles = {}
    for log_batch, log_block in ((0, 3), (0, 4), (0, 5), (1, 4)):
        target = vita_target(log_block, 64 if log_block > 3 else 16, bandwidth=64, log_batch=log_batch)
        report = run_vita(layer, 0, target)
        assert report.validated
        cycles[log_batch, log_block] = report.cycles
    assert cycles[0, 3] > cycles[0, 4] > cycles[0, 5], cycles
    assert cycles[0, 4] > cycles[1, 4], cycles      # two rows per GEMM micro-op


DIANNAO_OPS = {"add": ((8, 64, 64), None), "relu": ((8, 64, 64), None),
               "conv2d": ((10, 10, 16), ConvShape(10, 10, 16, 16, 3, 1, 1))}


@pytest.mark.parametrize("vector_elems", [32, 64, 128])
def test_diannao_sweep_compiles_simulates_and_validates_at_every_point(vector_elems):
    for nmem_kib, cores in itertools.product((64, 128, 256, 512), (1, 4, 16)):
        config = DiannaoConfig("sweep", "a sweep point", isa_params={"VECTOR_ELEMS": vector_elems,
                                                                    "NMEM_BYTES": nmem_kib * KIB})
        target = load_target("diannao", config)
        assert target.spec.params["VECTOR_ELEMS"] == vector_elems
        for op, (shape, conv) in DIANNAO_OPS.items():
            dtype = "int8" if op == "conv2d" else "float32"
            report = run_diannao(op, shape, dtype, cores=cores, config=target, conv=conv)
            assert report.validated, (op, vector_elems, nmem_kib, cores, report.detail)
            assert report.scalar_fallback == 0, (op, vector_elems, nmem_kib, cores, report.unmatched)


def test_the_diannao_vector_width_reaches_the_compiled_program():
    """The tile the schedule picks and the vector instructions' element counts follow VECTOR_ELEMS."""
    tiles = {}
    for elems in (32, 128):   # 6500 elements in two tiles of a 64 KiB NMEM, rounded up to whole vectors
        params = {"VECTOR_ELEMS": elems, "NMEM_BYTES": 64 * KIB}
        target = load_target("diannao", DiannaoConfig("w", "", isa_params=params))
        report = run_diannao("add", (65, 100), "float32", cores=1, config=target)
        assert report.validated
        tiles[elems] = report.params["tile"]
    assert tiles == {v: -(-6500 // 2 // v) * v for v in (32, 128)}    # half the elements, whole vectors
    assert isa.load_isa("diannao").params["VECTOR_ELEMS"] not in (32, 128)
