#!/usr/bin/env bash
# Tandem's checks on a GPU machine, run from the repository root: bash gpu/run_device_checks.sh [RESULTS_DIR]
# Each check prints one JSON line (and, with RESULTS_DIR, writes it there). The PTX is emitted with llvmlite
# where it is installed; otherwise pre-emit it on any machine: python gpu/probe_nvptx.py --emit gpu/build/vadd.ptx
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
results="${1:-}"
mkdir -p gpu/build
if python3 -c "import llvmlite" 2>/dev/null; then
    python3 gpu/probe_nvptx.py --emit gpu/build/vadd.ptx
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
line="$(python3 gpu/probe_nvptx.py --run gpu/build/vadd.ptx)"
echo "$line"
if [[ -n "$results" ]]; then
    mkdir -p "$results"
    echo "$line" > "$results/nvptx_probe.json"
fi
