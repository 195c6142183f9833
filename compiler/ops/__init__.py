"""Operator definitions as tensor expressions (target-independent; schedules live with targets).

- ``elementwise``: add, sub, mul, maximum, relu
- ``nn``: pad, dense / gemm (int8 x int8 -> int32 or float), conv2d_nchw, conv2d_nhwc

Each name is imported from its module when first read (``isa.lazy``).
"""

from isa.lazy import lazy_names

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
__getattr__, __dir__ = lazy_names(__name__, {
    **dict.fromkeys(("add", "maximum", "mul", "relu", "sub"), "elementwise"),
    **dict.fromkeys(("conv2d_nchw", "conv2d_nhwc", "conv2d_output_size", "dense", "gemm", "pad"), "nn")})
