#!/usr/bin/env bash
# Creates .venv with feedline installed. Usage: .ci/setup.sh [EXTRAS], e.g. "dali,test,turbojpeg".
# torch: the one already in .venv, else (a new .venv) the system Python's, else what TORCH says
# (pip arguments, e.g. TORCH='torch --index-url https://download.pytorch.org/whl/cpu'; by
# default TORCH_PIN), after printing what that downloads and with pip's progress shown.
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

torch_version() {  # the version of torch that Python $1 imports, or nothing
  "$1" -c 'import torch; print(torch.__version__)' 2>/dev/null || true
}

if [ ! -x "$venv/bin/python" ]; then
  system_torch=""
  [ -z "${TORCH:-}" ] && system_torch=$(torch_version python3)
  if [ -n "$system_torch" ]; then
    echo "setup: reusing torch $system_torch from $(command -v python3) (the new $venv sees its packages)"
    python3 -m venv --system-site-packages "$venv"
  else
    python3 -m venv "$venv"
  fi
fi
"$venv/bin/python" -m pip install -q --upgrade pip
installed=$(torch_version "$venv/bin/python")
if [ -n "$installed" ]; then
  echo "setup: using torch $installed, already installed"
else
  read -r -a torch_args <<< "${TORCH:-$torch_pin}"
  echo "setup: torch is not installed; pip install ${torch_args[*]} will fetch:"
  report=$(mktemp)
  "$venv/bin/python" -m pip install -q --dry-run --report "$report" "${torch_args[@]}" 2>/dev/null &&
    "$venv/bin/python" .ci/torch_plan.py "$report" || echo "setup:   (pip could not say in advance)"
  rm -f "$report"
  "$venv/bin/python" -m pip install --progress-bar on "${torch_args[@]}"
  installed=$(torch_version "$venv/bin/python")
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
# The torch chosen above stays: extras that depend on torch (lightning, kornia) must not replace it.
pin=$(mktemp)
echo "torch==${installed%%+*}" > "$pin"
"$venv/bin/python" -m pip install -q -e "$spec" -c "$pin"
rm -f "$pin"
echo "setup: $venv ready (extras: ${extras:-none}; torch $installed)"
