#!/usr/bin/env bash
# Creates .venv with feedline installed. Usage: .ci/setup.sh [EXTRAS], e.g. "dali,test".
# Installs the system library libturbojpeg0 (and python3-venv) when missing and
# running as root; otherwise prints the exact command to run.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
venv="${VENV:-.venv}"
# The dev and CI torch: a CPU wheel here. The package itself asks only for a range.
torch_pin="${TORCH_PIN:-torch==2.13.0}"

need_apt=()
ldconfig -p 2>/dev/null | grep -q 'libturbojpeg\.so' || need_apt+=(libturbojpeg0)
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
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
