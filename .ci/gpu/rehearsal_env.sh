#!/usr/bin/env bash
# The rehearsal's interpreter: a venv outside the repository with the GPU machine's Python
# (3.12) and packages (requirements-rehearsal.txt), made once (several GB: torch's CUDA
# build) and reused while that file is unchanged. Prints the venv's python on its last line.
#   GPU_REHEARSAL_VENV  where (default ~/.cache/feedline/gpu-rehearsal-venv)
#   GPU_REHEARSAL_PYTHON  the Python 3.12 to make it with (default: python3.12, else pyenv's)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${GPU_REHEARSAL_VENV:-$HOME/.cache/feedline/gpu-rehearsal-venv}"
reqs="$here/requirements-rehearsal.txt"
stamp="$venv/.feedline-requirements.sha256"
want="$(sha256sum "$reqs" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"; exit 0
fi
py="${GPU_REHEARSAL_PYTHON:-}"
if [ -z "$py" ]; then
  for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      py="$candidate"; break
    fi
  done
fi
[ -n "$py" ] || { echo "gpu-rehearsal: no Python 3.12 found (the GPU machine's); set GPU_REHEARSAL_PYTHON" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9   # one maker at a time; a second waits, then finds it made
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"; exit 0
fi
echo "gpu-rehearsal: making $venv with $py and $reqs (several GB the first time)" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
# The constraints file some machines set caps torch; the pins here are the device's.
PIP_CONSTRAINT= "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -r "$reqs" >&2
echo "$want" >"$stamp"
echo "$venv/bin/python"
