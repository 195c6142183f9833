#!/usr/bin/env bash
# Tandem's checks on a GPU machine, run from the repository root: bash gpu/run_device_checks.sh [RESULTS_DIR]
# Each check prints JSON lines (and, with RESULTS_DIR, writes them there). The PTX is emitted with llvmlite:
# on this machine where gpu/build holds none (the device image's llvmlite may differ from the pinned one),
# so emit it where the project is installed and carry gpu/build:
#   python gpu/probe_nvptx.py --emit gpu/build/vadd.ptx && python gpu/probe_wmma.py --emit gpu/build
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
results="${1:-}"
mkdir -p gpu/build
if [[ ! -f gpu/build/vadd.ptx ]]; then python3 gpu/probe_nvptx.py --emit gpu/build/vadd.ptx; fi
if [[ ! -f gpu/build/wmma_f16.ptx ]]; then python3 gpu/probe_wmma.py --emit gpu/build; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
probe="$(python3 gpu/probe_nvptx.py --run gpu/build/vadd.ptx)"
wmma="$(python3 gpu/probe_wmma.py --run gpu/build)"
echo "$probe"
echo "$wmma"
if [[ -n "$results" ]]; then
    mkdir -p "$results"
    echo "$probe" > "$results/nvptx_probe.json"
    echo "$wmma" > "$results/wmma_probe.jsonl"
fi
