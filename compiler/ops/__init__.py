"""Operator definitions as tensor expressions (target-independent; schedules live with targets).

- ``elementwise``: add, sub, mul, maximum, relu
- ``nn``: pad, dense / gemm (int8 x int8 -> int32 or float), conv2d_nchw, conv2d_nhwc
"""

from compiler.ops.elementwise import add, maximum, mul, relu, sub
from compiler.ops.nn import conv2d_nchw, conv2d_nhwc, conv2d_output_size, dense, gemm, pad

__all__ = [
    "add",
    "conv2d_nchw",
    "conv2d_nhwc",
    "conv2d_output_size",
    "dense",
    "gemm",
    "maximum",
    "mul",
    "pad",
    "relu",
    "sub",
]
