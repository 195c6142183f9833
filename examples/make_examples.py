"""The example programs and memory images the README's commands run: python examples/make_examples.py.

- ``vita/gemm.s`` and ``vita/gemm_dram.bin``: an int8 GEMM (16 x 64 data, 32 x 64 weights) compiled for the
  tvm-paper VITA, and its DRAM image (micro-ops, then seeded data and weights at the addresses the program
  uses): ``tandem sim vita examples/vita/gemm.s --dram examples/vita/gemm_dram.bin --config tvm-paper``;
- ``diannao/add.s``, ``diannao/add.bin`` (the same program as a binary program file) and ``diannao/in.bin``:
  an f32 add of two 4 x 64 x 64 tensors on 16 cores of the DianNao card, and GMEM holding the seeded inputs at
  0 and 0x10000 (the output goes to 0x20000): ``tandem sim diannao examples/diannao/add.s --gmem
  examples/diannao/in.bin --cores 16 --arg 0 --arg 0x10000 --arg 0x20000``.

tests/test_readme_commands.py checks that the shipped files are what this script makes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import isa  # noqa: E402
from compiler.backend.diannao import codegen  # noqa: E402
from compiler.lower import lower  # noqa: E402
from compiler.ops import diannao as dops  # noqa: E402
from compiler.ops import vita  # noqa: E402
from compiler.ops.nn import GemmShape  # noqa: E402
from compiler.pipeline import compile_func  # noqa: E402
from tandem.flows.targets import load_target  # noqa: E402
from tandem.flows.vita import compile_layer, machine_costs  # noqa: E402
from tandem.flows.vita_layers import tiled  # noqa: E402

SEED = 0
DIANNAO_SHAPE, DIANNAO_STRIDE = (4, 64, 64), 0x10000   # 16,384 f32 = 64 KiB per array


def vita_files() -> dict[str, bytes]:
    target = load_target("vita", "tvm-paper")
    layer = GemmShape(16, 32, 64)
    tiling = vita.choose_tiling(tiled(layer, target.spec), 0, spec=target.spec, costs=machine_costs(target))
    vs, kernel = compile_layer(layer, tiling, target)
    rng = np.random.default_rng(SEED)
    inputs = [rng.integers(-128, 128, a.shape, dtype=np.int8) for a in vs.args[:2]]
    return {"vita/gemm.s": str(kernel.program).encode(),
            "vita/gemm_dram.bin": kernel.dram_image(inputs).tobytes()}


def diannao_files() -> dict[str, bytes]:
    target = load_target("diannao")
    sched = dops.elementwise("add", DIANNAO_SHAPE, "float32", 16, spec=target.spec)
    kernel = codegen(compile_func(lower(sched.schedule, list(sched.args), "add"), target), target.spec)
    n = int(np.prod(DIANNAO_SHAPE))
    rng = np.random.default_rng(SEED)
    gmem = np.zeros(2 * DIANNAO_STRIDE, np.uint8)
    for k in range(2):
        values = rng.standard_normal(n).astype(np.float32)
        gmem[k * DIANNAO_STRIDE:k * DIANNAO_STRIDE + 4 * n] = values.view(np.uint8)
    return {"diannao/add.s": str(kernel.program).encode(),
            "diannao/add.bin": isa.encode_program(kernel.program), "diannao/in.bin": gmem.tobytes()}


def files() -> dict[str, bytes]:
    """Every example file, by path under examples/, as bytes."""
    return {**vita_files(), **diannao_files()}


if __name__ == "__main__":
    for name, data in files().items():
        (HERE / name).write_bytes(data)
        print(f"wrote examples/{name} ({len(data):,} bytes)")
