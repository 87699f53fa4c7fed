#!/usr/bin/env bash
# On the GPU machine: check the wheel parts this device call carried (.whl/gpu/bundle-N)
# and link them into a store outside the repository, where they stay while the machine
# stays warm (30 s idle), so the next call can carry the next bundle. Prints which
# bundles are still to come; exits 1 when a part is damaged. Follow it with `;`, not `&&`:
# check.sh then reports what is missing and runs what it can. .ci/gpu/README.md has the recipe.
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-python3}"
work="${FEEDLINE_GPU_WORK:-/var/tmp/feedline-gpu}"
shopt -s nullglob
bundles=("${GPU_WHEELS_OUT:-.whl/gpu}"/bundle-*)
exec "$py" .ci/gpu/transport.py receive "${bundles[@]}" --store "$work/parts"
