"""``vreq``: an int8 network's requantization on the vector unit (i32 codes shifted right, saturated to
[lo, hi], narrowed to i8), run by the spec's generic executor and timed at the VFU's rate over its input."""

from __future__ import annotations

import numpy as np
import pytest

import isa
from sim.diannao.config import load_config
from sim.diannao.machine import Card

CONFIG = load_config("default")
SPEC = CONFIG.spec_for(isa.load_isa("diannao"))
P = SPEC.params


@pytest.mark.parametrize(("s", "lo", "hi"), [(8, -128, 127), (0, 0, 127), (31, -5, 5), (3, 0, 0)])
def test_vreq_shifts_saturates_and_narrows_like_numpy(s, lo, hi):
    n = 2 * P["VECTOR_ELEMS"]
    rng = np.random.default_rng(s)
    x = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    card = Card(CONFIG, spec=SPEC)
    buf = card.to_gmem(x)
    out = card.alloc(n)
    copy = "memcpy dst_space={}, src_space={}, dst={}, src={}, len={}, count=1, dst_stride=0, src_stride=0"
    lines = [".isa diannao", ".text", copy.format("NMEM", "GMEM", 4096, buf.addr, 4 * n),
             f"vreq dst=0, a=4096, n={n}, s={s}, lo={lo}, hi={hi}", copy.format("GMEM", "NMEM", out, 0, n),
             "halt"]
    program = isa.assemble("\n".join(lines) + "\n")
    result = card.launch(program, cores=1)
    got = card.memory.gmem[out:out + n].view(np.int8)
    assert np.array_equal(got, np.clip(x >> s, lo, hi).astype(np.int8))
    vfu = P["VFU_LATENCY"] + -(-4 * n // P["VFU_BYTES_PER_CYCLE"]) - 1
    assert result.cores[0].unit_cycles["vfu"] == -(-4 * n // P["VFU_BYTES_PER_CYCLE"]) and vfu > 0
