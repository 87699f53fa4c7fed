#!/usr/bin/env bash
# `make gpu-check`: on the GPU machine, from the repository root, in the same device call
# that carried the wheels (.ci/gpu/README.md): `bash .ci/gpu/receive.sh; bash .ci/gpu/check.sh
# --budget-s B`. Installs them, runs the stages of plan.py under hard caps, and writes
# summary.json and gpu-results.tar.gz into $OUT after every stage. Without CUDA it stops
# after the install and the smoke test, with exit code 3. Options: `check.py --help`.
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
exec "$py" .ci/gpu/check.py "$@"
