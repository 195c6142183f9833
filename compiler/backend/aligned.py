"""Arrays for compiled CPU kernels that start on a cache line.

numpy aligns an array's data to 16 bytes (a large one lies 16 bytes into a page glibc maps), so a kernel's
64-byte vector loads and stores (one zmm register: 16 int32 lanes, 64 packed bytes) straddle two cache lines
in all but one of four arrays. Measured on this project's Zen 5 guest (ResNet-18's C5, a 1x1 conv, every
operand at each offset, the same run): 6.7 us per call on 2 threads with every operand on a line against
7.0 with the output 32 bytes off, 12.6 against 13.8 on 1 thread with the weights 32 bytes off. The arrays a
kernel is handed by Tandem's flows and inferences (packed operands, outputs, workspaces, the arrays kept
between steps) come from here.
"""

from __future__ import annotations

import numpy as np

LINE = 64   # bytes: a cache line of the x86-64 CPUs this backend targets, and a zmm register


def empty(shape: int | tuple[int, ...], dtype: np.dtype | type | str) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on a cache line (a view of a slightly larger
    allocation, which it holds alive as its ``base``)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + LINE, np.uint8)
    start = -raw.ctypes.data % LINE
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


def zeros(shape: int | tuple[int, ...], dtype: np.dtype | type | str) -> np.ndarray:
    """``empty``, filled with zeros."""
    array = empty(shape, dtype)
    array.fill(0)
    return array


def aligned(array: np.ndarray) -> np.ndarray:
    """``array`` itself where it is C-contiguous and starts on a cache line, else such a copy of it."""
    if array.flags.c_contiguous and array.ctypes.data % LINE == 0:
        return array
    copy = empty(array.shape, array.dtype)
    copy[...] = array
    return copy

