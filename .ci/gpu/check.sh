#!/usr/bin/env bash
# `make gpu-check`: on the GPU machine, from the repository root, after the wheels were
# carried over (.ci/gpu/README.md). Installs them, runs the whole test suite and the GPU
# benchmarks, writes bench/results/gpu/<h100|h200>/summary.json. Without CUDA it stops
# after the wheels and the install, with exit code 3. Options: see `check.py --help`.
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
exec "$py" .ci/gpu/check.py "$@"
