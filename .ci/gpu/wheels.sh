#!/usr/bin/env bash
# `make gpu-wheels`, run HERE (it needs the package index): downloads every wheel the GPU
# check installs (Python 3.12, manylinux x86_64; not torch/torchvision, which the GPU
# image has), checks that nothing is missing, and cuts them into bundles under .whl/gpu/
# (git-ignored), one bundle per device call. .ci/gpu/README.md has the calls to make.
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
first="bash .ci/gpu/receive.sh && bash .ci/gpu/check.sh"
last="bash .ci/gpu/receive.sh && bash .ci/gpu/check.sh --only tests,gpu_decode"
echo "gpu-wheels: $n bundles in $out. The device calls, back to back (a machine idle for 30 s"
echo "  is given back with everything it received; .ci/gpu/README.md says more):"
for i in $(seq 1 "$n"); do
  if [ "$n" -eq 1 ]; then cmd="bash .ci/gpu/receive.sh && bash .ci/gpu/check.sh"
  elif [ "$i" -eq 1 ]; then cmd="$first"
  elif [ "$i" -eq "$n" ]; then cmd="$last"
  else cmd="bash .ci/gpu/receive.sh"; fi
  echo "  call $i: carry [\"$out/bundle-$i\"]  command: $cmd"
done
