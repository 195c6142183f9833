"""Arrays for compiled CPU kernels (compiler/backend/aligned.py) start on a cache line, whatever numpy's
allocator gives."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backend import aligned


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32, np.int64])
@pytest.mark.parametrize("shape", [(1,), (3, 5), (2, 7, 9, 16), 1000])
def test_empty_and_zeros_start_on_a_line(shape, dtype) -> None:
    for make in (aligned.empty, aligned.zeros):
        a = make(shape, dtype)
        assert a.ctypes.data % aligned.LINE == 0
        assert a.shape == np.empty(shape).shape and a.dtype == dtype and a.flags.c_contiguous
        assert a.flags.writeable
    assert not aligned.zeros(shape, dtype).any()


def test_aligned_copies_only_what_is_off_a_line() -> None:
    raw = np.arange(200, dtype=np.uint8)
    off = raw[(-raw.ctypes.data % aligned.LINE) + 16:][:64]   # 16 bytes past a line
    copy = aligned.aligned(off)
    assert copy is not off and copy.ctypes.data % aligned.LINE == 0 and np.array_equal(copy, off)
    assert aligned.aligned(copy) is copy
    strided = aligned.zeros((8, 8), np.int32)[:, ::2]          # on a line, not contiguous
    moved = aligned.aligned(strided)
    assert moved is not strided and moved.flags.c_contiguous and moved.ctypes.data % aligned.LINE == 0
