#!/usr/bin/env bash
# `make gpu-wheels`, run HERE (it needs the package index), from any checkout, a fresh clone
# too: downloads the wheels the GPU check installs that the GPU machine's image lacks
# (requirements-core.txt; Python 3.12, manylinux x86_64; never torch, torchvision or
# lightning, which the image has: provided.txt), proves that nothing feedline needs there is
# missing (closure.py), and packs them into .whl/gpu/bundle-1 (git-ignored), the one bundle
# the core device call carries. Prints what that call carries: the working tree and bundle-1.
#   --dali   also the DALI group, in bundle-2.. (minutes of xz the first time; cached)
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-python3}"
out="${GPU_WHEELS_OUT:-.whl/gpu}"
cache="${GPU_WHEELS_CACHE:-$HOME/.cache/feedline/gpu-wheels}"
limit_mib=64     # what one device call carries: the working tree and the bundle together
margin_mib=2
groups=(core)
[ "${1:-}" = "--dali" ] && groups+=(dali)
if ! "$py" -c 'import packaging.requirements' 2>/dev/null; then
  echo "gpu-wheels: $py lacks the 'packaging' module (closure.py needs it): $py -m pip install packaging" >&2
  exit 1
fi

target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_28_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
        --platform manylinux_2_35_x86_64 --platform linux_x86_64 --platform any)

closure_args=()
extras=gpu,turbojpeg
for group in "${groups[@]}"; do
  rm -rf "$cache/download/$group"
  echo "gpu-wheels: downloading the $group group (.ci/gpu/requirements-$group.txt)"
  "$py" -m pip download -q --disable-pip-version-check "${target[@]}" -d "$cache/download/$group" \
    -r ".ci/gpu/requirements-$group.txt"
  closure_args+=(--group "$group" "$cache/download/$group")
  [ "$group" = dali ] && extras+=,dali
done

# PyTurboJPEG 1.x has no wheel on the index: build its (pure-Python) one here.
"$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$cache/download/core" "PyTurboJPEG>=1.7.5,<2"

"$py" .ci/gpu/closure.py --provided .ci/gpu/provided.txt --pyproject pyproject.toml --extras "$extras" \
  "${closure_args[@]}" --out "$cache/carry"
# libturbojpeg for PyTurboJPEG: the GPU image has no libturbojpeg0. Only its library is used
# there (unpacked with dpkg-deb, found through LD_LIBRARY_PATH); it needs nothing but libc.
if ! (cd "$cache/carry/core" && apt-get download -q libturbojpeg0 >/dev/null 2>&1); then
  echo "gpu-wheels: apt-get download libturbojpeg0 failed; trying again after apt-get update" >&2
  apt-get update -q >/dev/null 2>&1 || true
  (cd "$cache/carry/core" && apt-get download -q libturbojpeg0 >/dev/null) || {
    echo "gpu-wheels: cannot download Debian's libturbojpeg0; the turbojpeg imports of the setup stage" \
         "and test_loader_transforms.py's CUDA tests would fail on the GPU machine" >&2; exit 1; }
fi
for deb in "$cache"/carry/core/*%3a*.deb; do   # "1%3a2.1.5": the epoch; plain names travel safely
  [ -e "$deb" ] && mv "$deb" "$(dirname "$deb")/$(basename "$deb" | sed 's/_[0-9]*%3a/_/')"
done

# The working tree travels with every call: the bundles get what it leaves of the limit.
tree_mib=$(git ls-files -z --cached --others --exclude-standard \
  | "$py" -c 'import os,sys; print(sum(os.path.getsize(p) for p in sys.stdin.read().split("\0") if os.path.isfile(p)) / 2**20)')
bundle_mib=$("$py" -c "print(min(60.0, $limit_mib - $margin_mib - $tree_mib))")
pack_args=()
for group in "${groups[@]}"; do pack_args+=(--group "$group" "$cache/carry/$group"); done
"$py" .ci/gpu/bundle.py "${pack_args[@]}" --out "$out" --cache "$cache/xz" --bundle-mib "$bundle_mib" --part-mib 60

n=$(ls -d "$out"/bundle-* | wc -l)
core_mib=$("$py" -c "print(round($(du -sb "$out/bundle-1" | cut -f1) / 2**20, 1))")
carried=$("$py" -c "print(round($tree_mib + $core_mib, 1))")
echo "gpu-wheels: the core call carries ${carried} MiB: working tree $("$py" -c "print(round($tree_mib, 1))") MiB" \
     "+ bundle-1 ${core_mib} MiB (limit $limit_mib MiB)"
echo "  The procedure: .ci/gpu/README.md (make gpu-rehearsal first, then the device calls)."
if [ "$n" -gt 1 ]; then
  echo "  DALI: bundle-2..bundle-$n, one optional call each, back to back on the warm machine (README)."
fi
