"""Run a kernel compiled by the DianNao backend on the simulated card (sim/diannao).

    kernel = compiler.backend.diannao.codegen(func, target.spec)
    result, (a, b, c) = run_kernel(kernel, [a, b, c], target.config)

``run_kernel`` places each parameter's array in GMEM (64-byte aligned, in parameter order), launches the
kernel on ``kernel.cores`` cores with the arrays' addresses as its arguments (R0, R1, ...), and reads every
array back, so outputs come back beside the inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.backend.diannao import DiannaoKernel
from compiler.target import Target
from sim.diannao.config import DiannaoConfig
from sim.diannao.errors import LaunchError
from sim.diannao.machine import Card, DiannaoResult
from tandem.targets import as_target

GMEM_ALIGN = 64  # bytes: each array starts on a GDRAM access granule (isa/specs/diannao.toml, VECTOR_ALIGN)


def check_arrays(kernel: DiannaoKernel, arrays: Sequence[np.ndarray]) -> None:
    """Raise ``LaunchError`` unless ``arrays`` match ``kernel.params``: one numpy array per parameter, of the
    parameter's dtype and shape (or any shape with as many elements, the parameters being flat)."""
    names = ", ".join(p.name for p in kernel.params)
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence):
        raise LaunchError(f"run_kernel: expected a sequence of arrays for ({names}), but got "
                          f"{type(arrays).__name__}")
    if len(arrays) != len(kernel.params):
        raise LaunchError(f"run_kernel: expected {len(kernel.params)} arrays ({names}), but got "
                          f"{len(arrays)}")
    for k, (param, array) in enumerate(zip(kernel.params, arrays, strict=True)):
        what = f"run_kernel: argument {k}, '{param.name}'"
        if not isinstance(array, np.ndarray):
            raise LaunchError(f"{what}: expected a numpy array, but got {type(array).__name__}")
        if array.dtype != param.dtype.numpy:
            raise LaunchError(f"{what}: expected dtype {param.dtype.numpy}, but got {array.dtype}")
        if array.shape != param.shape and array.size != param.size:
            raise LaunchError(f"{what}: expected shape {list(param.shape)} ({param.size} elements), but got "
                              f"{list(array.shape)}")


def run_kernel(kernel: DiannaoKernel, arrays: Sequence[np.ndarray],
               config: Target | DiannaoConfig | str = "default",
               trace: bool = False) -> tuple[DiannaoResult, list[np.ndarray]]:
    """Launch ``kernel`` on a fresh card of ``config`` (a Target, or a machine config with its spec) with
    ``arrays`` in GMEM; return what the launch measured and every array as it is in GMEM afterwards (same
    dtypes and shapes as given). A kernel compiled for another spec is refused."""
    check_arrays(kernel, arrays)
    target = as_target("diannao", config)
    card = Card(target.config, spec=target.spec)
    buffers = [card.to_gmem(a, card.alloc(a.nbytes, GMEM_ALIGN)) for a in arrays]
    result = card.launch(kernel.program, cores=kernel.cores, args=[b.addr for b in buffers], trace=trace)
    return result, [card.from_gmem(b) for b in buffers]
