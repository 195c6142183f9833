"""Layer tables the experiments reproduce (batch 1, square inputs and kernels).

- ``RESNET18``: ResNet-18's conv layers C2-C12 (TVM Table 1, papers/tvm-vita.md): name -> (H = W, IC, OC, K,
  S); a 3x3 kernel pads by 1, a 1x1 by 0 (``padding``).
- ``UNIT_TABLE1``: the 16 convolution layers of UNIT's ablation (Table I, papers/unit.md): name -> (C, IHW,
  K, R = S, stride); the input sizes already include the padding, so these layers pad by 0.
- ``POLYDL_RESNET50``, ``POLYDL_FASTRCNN``, ``POLYDL_GEMMS``: PolyDL's convolution layers (name -> (H, W, IC,
  OC, K, S, P)) and GEMMs (name -> (M, N, K)), papers/polydl.md.
- ``SEED001_CONV``: the 16 conv layers of seed 001's Table II (papers/loop-partition-diannao.md), each
  (H = W, IC, OC), 3x3, stride 1, pad 1 (Table II prints 256 as the weights' last dimension even where IC is
  128 or 64; the input's channels are the ones used).
- ``VITA_QUICK``: three small stand-ins for ResNet-18's kinds of layer (3x3, 1x1 stride 2, deep 3x3), which
  the VITA experiments' ``--quick`` modes run; ``resnet18_layers`` gives either table as conv layers
  (``compiler.ops.nn.ConvShape``) by name.
"""

from __future__ import annotations

from compiler.ops.nn import ConvShape

RESNET18 = {
    "C2": (56, 64, 64, 3, 1), "C3": (56, 64, 64, 1, 1), "C4": (56, 64, 128, 3, 2), "C5": (56, 64, 128, 1, 2),
    "C6": (28, 128, 128, 3, 1), "C7": (28, 128, 256, 3, 2), "C8": (28, 128, 256, 1, 2),
    "C9": (14, 256, 256, 3, 1), "C10": (14, 256, 512, 3, 2), "C11": (14, 256, 512, 1, 2),
    "C12": (7, 512, 512, 3, 1),
}

UNIT_TABLE1 = {
    "#1": (288, 35, 384, 3, 2), "#2": (160, 9, 224, 3, 1), "#3": (1056, 7, 192, 1, 1),
    "#4": (80, 73, 192, 3, 1), "#5": (128, 16, 128, 3, 1), "#6": (192, 16, 192, 3, 1),
    "#7": (256, 16, 256, 3, 1), "#8": (1024, 14, 512, 1, 1), "#9": (128, 16, 160, 3, 1),
    "#10": (576, 14, 192, 1, 1), "#11": (96, 16, 128, 3, 1), "#12": (1024, 14, 256, 1, 1),
    "#13": (576, 14, 128, 1, 1), "#14": (64, 29, 96, 3, 1), "#15": (64, 56, 128, 1, 2),
    "#16": (608, 14, 192, 1, 1),
}


#: PolyDL's convolution layers (Tavarageri et al., Sec. 6.3.1; shapes from the authors' repository,
#: papers/polydl.md Appendix A.1): paper ID -> (H, W, IC, OC, K, S, P). ResNet-50 without its 3-channel stem;
#: Fast R-CNN without its stem and its 24-channel layer (the paper keeps channel counts divisible by 16).
#: Inputs listed at 152 x 190 and the like are pre-padded (pad 0, stride 2).
POLYDL_RESNET50 = {
    "1": (56, 56, 64, 256, 1, 1, 0), "2": (56, 56, 64, 64, 1, 1, 0), "3": (56, 56, 64, 64, 3, 1, 1),
    "4": (56, 56, 256, 64, 1, 1, 0), "5": (56, 56, 256, 512, 1, 2, 0), "6": (56, 56, 256, 128, 1, 2, 0),
    "7": (28, 28, 128, 128, 3, 1, 1), "8": (28, 28, 128, 512, 1, 1, 0), "9": (28, 28, 512, 128, 1, 1, 0),
    "10": (28, 28, 512, 1024, 1, 2, 0), "11": (28, 28, 512, 256, 1, 2, 0), "12": (14, 14, 256, 256, 3, 1, 1),
    "13": (14, 14, 256, 1024, 1, 1, 0), "14": (14, 14, 1024, 256, 1, 1, 0),
    "15": (14, 14, 1024, 2048, 1, 2, 0), "16": (14, 14, 1024, 512, 1, 2, 0), "17": (7, 7, 512, 512, 3, 1, 1),
    "18": (7, 7, 512, 2048, 1, 1, 0), "19": (7, 7, 2048, 512, 1, 1, 0),
}
POLYDL_FASTRCNN = {
    "1": (188, 150, 64, 64, 1, 1, 0), "2": (188, 150, 64, 64, 3, 1, 1), "3": (188, 150, 64, 256, 1, 1, 0),
    "4": (188, 150, 256, 64, 1, 1, 0), "5": (190, 152, 64, 64, 3, 2, 0), "6": (94, 75, 64, 256, 1, 1, 0),
    "7": (94, 75, 256, 128, 1, 1, 0), "8": (94, 75, 256, 512, 1, 1, 0), "9": (94, 75, 128, 128, 3, 1, 1),
    "10": (94, 75, 128, 512, 1, 1, 0), "11": (94, 75, 512, 128, 1, 1, 0), "12": (96, 77, 128, 128, 3, 2, 0),
    "13": (47, 38, 128, 512, 1, 1, 0), "14": (47, 38, 512, 256, 1, 1, 0), "15": (47, 38, 256, 256, 3, 1, 1),
    "16": (47, 38, 256, 1024, 1, 1, 0), "17": (47, 38, 512, 1024, 1, 1, 0),
    "18": (47, 38, 1024, 256, 1, 1, 0), "19": (47, 38, 1024, 512, 3, 1, 1), "20": (47, 38, 512, 48, 1, 1, 0),
    "21": (7, 7, 1024, 512, 1, 1, 0), "22": (7, 7, 512, 512, 3, 1, 1), "23": (7, 7, 512, 2048, 1, 1, 0),
    "24": (7, 7, 1024, 2048, 1, 1, 0), "25": (7, 7, 2048, 512, 1, 1, 0),
}
#: PolyDL's GEMMs (Table 1): workload -> (M, N, K), C[M, N] = A[M, K] B[K, N]
POLYDL_GEMMS = {
    "GNMT-1": (128, 2048, 4096), "GNMT-2": (320, 3072, 4096), "GNMT-3": (2048, 4096, 32),
    "DeepBench": (1024, 16, 500000), "square": (4096, 4096, 4096), "long-K": (1024, 1024, 32768),
    "long-N": (1024, 32768, 1024), "long-M": (32768, 1024, 1024),
}

SEED001_CONV = (
    (56, 256, 128), (56, 256, 64), (56, 256, 32), (56, 128, 128), (56, 128, 64), (56, 128, 32),
    (56, 64, 128), (56, 64, 64), (55, 256, 128), (55, 256, 64), (55, 256, 32), (55, 128, 128),
    (55, 128, 64), (55, 128, 32), (55, 64, 128), (55, 64, 64),
)

VITA_QUICK = {"q1": (14, 32, 32, 3, 1), "q2": (14, 32, 64, 1, 2), "q3": (7, 64, 64, 3, 1)}


def padding(kernel: int) -> int:
    """ResNet-18's padding: 1 for a 3x3 kernel, 0 for a 1x1."""
    return kernel // 2


def square_conv(hw: int, ic: int, oc: int, k: int, s: int) -> ConvShape:
    """A row of ``RESNET18`` or ``VITA_QUICK`` as a conv layer of batch 1: ``hw`` x ``hw`` input, ``ic`` ->
    ``oc`` channels, a ``k`` x ``k`` kernel at stride ``s``, padded by ``padding(k)``."""
    return ConvShape(hw, hw, ic, oc, k, s, padding(k))


def resnet18_layers(quick: bool = False) -> dict[str, ConvShape]:
    """ResNet-18's C2-C12, or with ``quick`` the three small stand-ins of ``VITA_QUICK``, by name."""
    return {name: square_conv(*shape) for name, shape in (VITA_QUICK if quick else RESNET18).items()}
