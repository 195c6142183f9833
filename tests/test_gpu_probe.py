"""The GPU checks' CPU half: llvmlite's nvptx64 target emits the probe kernel's PTX on any machine (the GPU
half, loading and running it, runs in gpu/run_device_checks.sh where a GPU is lent)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "gpu" / "probe_nvptx.py"


def test_the_probe_kernel_compiles_to_ptx_for_hopper():
    spec = importlib.util.spec_from_file_location("probe_nvptx", SCRIPT)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    ptx = probe.emit_ptx()
    assert ".target sm_90" in ptx and ".entry vadd(" in ptx
    assert "add.f32" in ptx or "add.rn.f32" in ptx          # the element-wise add, on the GPU's FP32 units
    assert "%ctaid.x" in ptx and "%tid.x" in ptx              # one thread per element
