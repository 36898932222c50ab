#!/usr/bin/env bash
# Create or update the course venv: torch (CPU or CUDA build), the pins in env/,
# this repo's package (editable) and the `hpcdl` Jupyter kernel.
#
#   PYTHON=python3        interpreter the venv is made from (3.11 or newer)
#   VENV=.venv            where the venv lives
#   GPU=1 / GPU=0         force the CUDA / CPU build; unset: CUDA when nvidia-smi sees a GPU
#   TORCH_INDEX_URL=...   extra index for torch only; unset: the PyTorch CPU index in
#                         CPU mode, PyPI in GPU mode; empty: pip's own configuration
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
STAMP=$VENV/.hpcdl-stamp

die() { echo "env/setup.sh: $*" >&2; exit 1; }

# Check the venv's own interpreter when there is one: PYTHON only matters when creating it.
py=$PYTHON
[ -x "$VENV/bin/python" ] && py=$VENV/bin/python
ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
  || die "cannot run Python interpreter '$py'; set PYTHON=/path/to/python3.11 (or remove a broken $VENV)"
[ "${ver%%.*}" -eq 3 ] && [ "${ver#*.}" -ge 11 ] \
  || die "$py is Python $ver; the course needs Python 3.11 or newer; set PYTHON=/path/to/python3.11"
# Triton builds a C launcher, and a later notebook builds a C++ extension.
command -v cc >/dev/null || command -v gcc >/dev/null \
  || die "no C compiler (cc or gcc) found; install one (Debian/Ubuntu: apt install build-essential)"
command -v c++ >/dev/null || command -v g++ >/dev/null \
  || echo "env/setup.sh: warning: no C++ compiler (c++ or g++); the C++ extension notebook will fail" >&2

case "${GPU:-}" in
  1) mode=gpu ;;
  0) mode=cpu ;;
  *) if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
       mode=gpu
     else
       mode=cpu
     fi ;;
esac
# Unset means the default; set but empty means pip's own configuration (CI).
if [ "$mode" = cpu ]; then
  TORCH_INDEX_URL=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
else
  TORCH_INDEX_URL=${TORCH_INDEX_URL-}
fi

files=(env/*.txt env/setup.sh)
[ -f pyproject.toml ] && files+=(pyproject.toml)
want="$mode $(cat "${files[@]}" | cksum | cut -d' ' -f1,2)"
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" = "$have" ]; then
  echo "env: $VENV is up to date ($mode)"
  exit 0
fi

echo "env: setting up $VENV ($mode build of torch)"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q -c env/constraints.txt)
req=env/requirements-$mode.txt

# pip sees 2.13.0+cpu and 2.13.0 (CUDA) as both satisfying torch==2.13.0, so a
# change of mode has to remove the old build first.
if [ -n "$have" ] && [ "${have%% *}" != "$mode" ]; then
  echo "env: switching torch from the ${have%% *} build to the $mode build"
  "$VENV/bin/python" -m pip uninstall -q -y torch
fi
torch_pin=$(grep -E '^torch==' "$req")
"${pip[@]}" ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "$torch_pin"
"${pip[@]}" -r "$req"

if [ -f pyproject.toml ]; then
  "${pip[@]}" -e .
else
  echo "env: no pyproject.toml yet, skipping the editable install of this repo" >&2
fi

"$VENV/bin/python" -m ipykernel install --sys-prefix --name hpcdl --display-name "HPC-DL (Python 3)" >/dev/null
echo "$want" > "$STAMP"
echo "env: $VENV is ready ($mode)"
