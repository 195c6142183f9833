#!/usr/bin/env bash
# Tandem's checks on a GPU machine, run from a checkout (no install, nothing from the network):
#   bash gpu/run_device_checks.sh [RESULTS_DIR]        (default gpu/build/results)
# 1. the device and the probes: llvmlite's NVPTX output (a vector add; wmma f16 and s8 GEMMs) loaded by the
#    CUDA driver and compared with numpy;
# 2. the GPU test suite (tests/gpu: PTX structure and ptxas everywhere, execution here; TESTS=none skips
#    the probes and the tests, for a second call that only runs the sweep or the experiment; TEST_WORKERS=N
#    runs them in N processes with pytest-xdist);
# 3. the GEMM sweep gpu/sweep_gemm.py (block shapes x pipeline depths at SWEEP's sizes, default
#    2048,4096,8192; SWEEP=none skips it), each kernel checked against the exact product, with cuBLAS;
# 4. the experiment experiments/unit_gpu.py (UNIT's Table I, ResNet-18 C2-C12 at batch 1 and 16, GEMMs
#    1024^3-8192^3: Tandem vs cuDNN / cuBLAS through PyTorch), TUNE tunings measured per workload (default
#    6), EXP_GROUPS to run only some of its groups, in the order named (table1,resnet18_b1,resnet18_b16,
#    gemm; none skips it).
# Times on an H200 (2026-11-27, TEST_WORKERS=4, TUNE=6): the probes and the tests 45 s, the experiment about
# 5.5 s per workload (gemm, table1 and resnet18_b1 together: 175 s; table1, resnet18_b1 and resnet18_b16:
# 174 s); on an H100 the sweep at SWEEP=4096,8192 took under a minute. So one call of under 4 minutes runs
# the tests and any three groups.
# Needs python3 with numpy, llvmlite 0.50, CuPy, pytest, typer and rich (PyTorch for the peers). Writes at
# most nine files to RESULTS_DIR: device.txt, nvptx_probe.json, wmma_probe.jsonl, gpu_tests.log,
# sweep_gemm.jsonl, unit_gpu.log, unit_gpu.csv, summary.json, unit_gpu.png. Exits non-zero when a step
# fails (after running the others).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
results="${1:-gpu/build/results}"
mkdir -p "$results" gpu/build
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import llvmlite, cupy; print('llvmlite', llvmlite.__version__, 'cupy', cupy.__version__)"
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())" \
      || echo "no PyTorch: the experiment runs without its peers"
} 2>&1 | tee "$results/device.txt"

if [[ "${TESTS:-}" != none ]]; then
    if [[ ! -f gpu/build/vadd.ptx ]]; then python3 gpu/probe_nvptx.py --emit gpu/build/vadd.ptx; fi
    if [[ ! -f gpu/build/wmma_f16.ptx ]]; then python3 gpu/probe_wmma.py --emit gpu/build; fi
    python3 gpu/probe_nvptx.py --run gpu/build/vadd.ptx | tee "$results/nvptx_probe.json" || status=1
    python3 gpu/probe_wmma.py --run gpu/build | tee "$results/wmma_probe.jsonl" || status=1

    echo "== tests/gpu"
    python3 -m pytest -q -p no:cacheprovider -rs ${TEST_WORKERS:+-n "$TEST_WORKERS"} tests/gpu \
        tests/test_gpu_probe.py 2>&1 \
        | tee "$results/gpu_tests.log" || status=1
fi

echo "== gpu/sweep_gemm.py"
if [[ "${SWEEP:-}" != none ]]; then
    python3 gpu/sweep_gemm.py --sizes "${SWEEP:-2048,4096,8192}" 2>&1 | tee "$results/sweep_gemm.jsonl" \
        || status=1
fi

echo "== experiments/unit_gpu.py"
if [[ "${EXP_GROUPS:-}" != none ]]; then
    python3 experiments/unit_gpu.py --out "$results" --tune "${TUNE:-6}" \
        ${EXP_GROUPS:+--groups "$EXP_GROUPS"} 2>&1 | tee "$results/unit_gpu.log" || status=1
fi
exit "$status"
