#!/usr/bin/env bash
# `make gpu-wheels`, run HERE (it needs the package index): downloads every wheel the GPU
# check installs (Python 3.12, manylinux x86_64; not torch/torchvision, which the GPU
# image has), checks that nothing is missing, and cuts them into bundles under .whl/gpu/
# (git-ignored), one bundle per device call: bundle-1 holds the core group alone (what the
# one core call needs), the others DALI. .ci/gpu/README.md has the calls to make.
# Takes a few minutes the first time (xz of DALI); the compressed forms are cached.
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
out="${GPU_WHEELS_OUT:-.whl/gpu}"
cache="${GPU_WHEELS_CACHE:-$HOME/.cache/feedline/gpu-wheels}"
limit_mib=64     # what one device call carries: the working tree and the bundle together
margin_mib=2

target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_28_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
        --platform manylinux_2_35_x86_64 --platform linux_x86_64 --platform any)

for group in core dali; do
  rm -rf "$cache/download/$group"
  echo "gpu-wheels: downloading the $group group (.ci/gpu/requirements-$group.txt)"
  "$py" -m pip download -q --disable-pip-version-check "${target[@]}" -d "$cache/download/$group" \
    -r ".ci/gpu/requirements-$group.txt"
done

# PyTurboJPEG 1.x has no wheel on the index: build its (pure-Python) one here.
"$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$cache/download/core" "PyTurboJPEG>=1.7.5,<2"

"$py" .ci/gpu/closure.py --provided .ci/gpu/provided.txt --pyproject pyproject.toml \
  --extras gpu,dali,test,turbojpeg \
  --group core "$cache/download/core" --group dali "$cache/download/dali" --out "$cache/carry"
# libturbojpeg for PyTurboJPEG: the GPU image has no libturbojpeg0. Only its library is used
# there (unpacked with dpkg-deb, found through LD_LIBRARY_PATH); it needs nothing but libc.
if (cd "$cache/carry/core" && apt-get download -q libturbojpeg0 >/dev/null 2>&1); then
  for deb in "$cache"/carry/core/*%3a*.deb; do   # "1%3a2.1.5": the epoch; plain names travel safely
    [ -e "$deb" ] && mv "$deb" "$(dirname "$deb")/$(basename "$deb" | sed 's/_[0-9]*%3a/_/')"
  done
else
  echo "gpu-wheels: WARNING: apt-get download libturbojpeg0 failed (run apt-get update?);" \
       "the turbojpeg tests will fail on the GPU machine" >&2
fi

# The working tree travels with every call: the bundles get what it leaves of the limit.
tree_mib=$(git ls-files -z --cached --others --exclude-standard \
  | "$py" -c 'import os,sys; print(sum(os.path.getsize(p) for p in sys.stdin.read().split("\0") if os.path.isfile(p)) / 2**20)')
bundle_mib=$("$py" -c "print(min(60.0, $limit_mib - $margin_mib - $tree_mib))")
echo "gpu-wheels: working tree ${tree_mib%.*} MiB, so bundles of at most ${bundle_mib%.*} MiB"
"$py" .ci/gpu/bundle.py --group core "$cache/carry/core" --group dali "$cache/carry/dali" \
  --out "$out" --cache "$cache/xz" --bundle-mib "$bundle_mib" --part-mib 60

n=$(ls -d "$out"/bundle-* | wc -l)
tree_and_core=$("$py" -c "print(round($tree_mib + $(du -sb "$out/bundle-1" | cut -f1) / 2**20, 1))")
echo "gpu-wheels: $n bundles in $out; call 1 carries ${tree_and_core} MiB (working tree + bundle-1, limit $limit_mib)."
echo "  The procedure (.ci/gpu/README.md): python3 .ci/gpu/plan.py --device-left-s <status's budget_left_s>, then"
echo "  call 1: carry [\"$out/bundle-1\"]  command: bash .ci/gpu/receive.sh; bash .ci/gpu/check.sh --budget-s <B>"
if [ "$n" -gt 1 ]; then
  echo "  optional DALI calls, back to back on the warm machine:"
  for i in $(seq 2 "$n"); do
    if [ "$i" -lt "$n" ]; then cmd="bash .ci/gpu/receive.sh"
    else cmd="bash .ci/gpu/receive.sh; bash .ci/gpu/check.sh --call dali --budget-s <B>"; fi
    echo "  call $i: carry [\"$out/bundle-$i\"]  command: $cmd"
  done
fi
