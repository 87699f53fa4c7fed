#!/usr/bin/env bash
# Creates .venv with feedline installed. Usage: .ci/setup.sh [EXTRAS], e.g. "dali,test,turbojpeg".
# The default decoder comes from a pip wheel; only the optional "turbojpeg" extra needs a
# system library (libturbojpeg0), installed with apt when missing and running as root,
# otherwise the exact command to run is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
venv="${VENV:-.venv}"
# The dev and CI torch: a CPU wheel here. The package itself asks only for a range.
torch_pin="${TORCH_PIN:-torch==2.13.0}"

# True when the dynamic linker knows libturbojpeg. The listing goes to a variable first:
# `ldconfig -p | grep -q` under pipefail fails at random (grep exits at its first match,
# ldconfig dies of SIGPIPE, the pipeline reports 141).
have_libturbojpeg() {
  local listing
  listing=$(ldconfig -p 2>/dev/null || true)
  [[ "$listing" == *libturbojpeg.so* ]]
}

need_apt=()
if [[ ",$extras," == *,turbojpeg,* ]] && ! have_libturbojpeg; then
  need_apt+=(libturbojpeg0)
fi
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null 2>&1 || {
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    }
  else
    echo "setup: missing system packages. Run:  sudo apt-get install -y ${need_apt[*]}" >&2
    exit 1
  fi
fi

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "$torch_pin"
spec="."
[ -n "$extras" ] && spec=".[$extras]"
"$venv/bin/python" -m pip install -q -e "$spec" "$torch_pin"
echo "setup: $venv ready (extras: ${extras:-none})"
