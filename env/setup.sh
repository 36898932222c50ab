#!/usr/bin/env bash
# Create or update the course venv: torch (CPU or CUDA build), the pins in env/,
# this repo's package (editable), the `hpcdl` Jupyter kernel and the learner lab's
# settings (env/learner-lab.sh). Prints one line per step; works as root.
#
#   PYTHON=python3        interpreter the venv is made from (3.11.5 or newer)
#   VENV=.venv            where the venv lives
#   GPU=1 / GPU=0         force the CUDA / CPU build; unset: CUDA when nvidia-smi sees a GPU
#   TORCH_INDEX_URL=...   extra index for torch only; unset: the PyTorch CPU index in
#                         CPU mode, PyPI in GPU mode; empty: pip's own configuration.
#                         An index that does not answer within 5 s is dropped for pip's
#                         own configuration (what CI uses), with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
STAMP=$VENV/.hpcdl-stamp
STEPS=6
step=0

die() { echo "env/setup.sh: $*" >&2; exit 1; }
warn() { echo "env/setup.sh: warning: $*" >&2; }
say() { step=$((step + 1)); echo "env: [$step/$STEPS] $*"; }

# Prints why URL (an index) does not answer within 5 s; prints nothing if it does.
# An HTTP error status is an answer: pip reports those itself.
unreachable() {
  "$1" - "$2" <<'EOF' || true
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1].rstrip("/") + "/torch/", method="HEAD"), timeout=5)
except urllib.error.HTTPError:
    pass
except Exception as e:
    print(getattr(e, "reason", None) or e)
EOF
}

# Check the venv's own interpreter when there is one: PYTHON only matters when creating it.
py=$PYTHON
[ -x "$VENV/bin/python" ] && py=$VENV/bin/python
ver=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) \
  || die "cannot run Python interpreter '$py'; set PYTHON=/path/to/python3.11 (or remove a broken $VENV)"
minor=${ver%.*}
# 3.11.5: the oldest Python that every pin in env/constraints.txt supports (soupsieve).
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11, 5))' \
  || die "$py is Python $ver; the course needs Python 3.11.5 or newer; set PYTHON=/path/to/python3.11"
# Triton builds a C launcher, and a later notebook builds a C++ extension.
command -v cc >/dev/null || command -v gcc >/dev/null \
  || die "no C compiler (cc or gcc) found; install one (Debian/Ubuntu: apt install build-essential)"
command -v c++ >/dev/null || command -v g++ >/dev/null \
  || warn "no C++ compiler (c++ or g++); the C++ extension notebook will fail"

case "${GPU:-}" in
  1) mode=gpu ;;
  0) mode=cpu ;;
  *) if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
       mode=gpu
     else
       mode=cpu
     fi ;;
esac

# Triton compiles its GPU launcher against Python.h; the C++ extension notebook needs it anywhere.
include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if [ ! -f "$include/Python.h" ]; then
  [ "$mode" = gpu ] && die "no Python.h in $include: Triton needs it to launch GPU kernels" \
                           "(Debian/Ubuntu: apt install python$minor-dev)"
  warn "no Python.h in $include (Debian/Ubuntu: apt install python$minor-dev); the C++ extension notebook will fail"
fi

# Unset means the default; set but empty means pip's own configuration (CI).
if [ "$mode" = cpu ]; then
  TORCH_INDEX_URL=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
else
  TORCH_INDEX_URL=${TORCH_INDEX_URL-}
fi

files=(env/*.txt env/*.sh env/*.json)
[ -f pyproject.toml ] && files+=(pyproject.toml)
want="$mode $(cat "${files[@]}" | cksum | cut -d' ' -f1,2)"
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" = "$have" ]; then
  echo "env: $VENV is up to date ($mode)"
  exit 0
fi

echo "env: setting up $VENV ($mode build of torch; run as $(id -un))"
if [ -x "$VENV/bin/python" ]; then
  say "using the venv $VENV (Python $ver)"
else
  say "creating the venv $VENV with $PYTHON (Python $ver)"
  existed=0
  [ -e "$VENV" ] && existed=1
  if ! "$PYTHON" -m venv "$VENV"; then
    [ "$existed" = 0 ] && rm -rf "$VENV"
    die "could not create $VENV with $PYTHON (Debian/Ubuntu: apt install python$minor-venv)"
  fi
fi
pip=("$VENV/bin/python" -m pip install -q -c env/constraints.txt)
req=env/requirements-$mode.txt

# pip sees 2.13.0+cpu and 2.13.0 (CUDA) as both satisfying torch==2.13.0, so a
# change of mode has to remove the old build first.
if [ -n "$have" ] && [ "${have%% *}" != "$mode" ]; then
  echo "env: switching torch from the ${have%% *} build to the $mode build"
  "$VENV/bin/python" -m pip uninstall -q -y torch
fi

# pip retries an index that does not answer for minutes without a word: ask first.
if [ -n "$TORCH_INDEX_URL" ]; then
  why=$(unreachable "$VENV/bin/python" "$TORCH_INDEX_URL")
  if [ -n "$why" ]; then
    echo "env: the torch index $TORCH_INDEX_URL did not answer within 5 s ($why):"
    echo "env: taking torch from pip's own configuration instead (PyPI: on Linux x86_64 that is the CUDA"
    echo "env: build, a larger download that runs on a CPU too). To skip this check: TORCH_INDEX_URL= make ..."
    TORCH_INDEX_URL=
  fi
fi
pip_index=$("$VENV/bin/python" -m pip config list 2>/dev/null \
            | sed -n "s/^[^.]*\.index-url='\([^' ]*\).*/\1/p" | tail -n 1)
pip_index=${pip_index:-https://pypi.org/simple}
why=$(unreachable "$VENV/bin/python" "$pip_index")
[ -z "$why" ] || warn "pip's index $pip_index did not answer within 5 s ($why); pip will retry for a while" \
                      "and fail unless its configuration offers the packages elsewhere (find-links)"

torch_pin=$(grep -E '^torch==' "$req")
from="pip's index"
[ -n "$TORCH_INDEX_URL" ] && from=$TORCH_INDEX_URL
if [ "$mode" = gpu ]; then
  say "installing $torch_pin, CUDA build, from $from (about 3 GB the first time)"
elif [ -n "$TORCH_INDEX_URL" ]; then
  say "installing $torch_pin, CPU build, from $from"
else
  say "installing $torch_pin from $from"
fi
"${pip[@]}" ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "$torch_pin" \
  || die "pip could not install $torch_pin (its messages are above)"
say "installing the pins of $req (Jupyter, nbgrader, triton, ...)"
"${pip[@]}" -r "$req" || die "pip could not install $req (its messages are above)"

if [ -f pyproject.toml ]; then
  say "installing this repository's hpcdl package (editable)"
  "${pip[@]}" -e . || die "pip could not install this repository's package (its messages are above)"
else
  say "no pyproject.toml yet: skipping the editable install of this repository"
fi

say "registering the Jupyter kernel HPC-DL (Python 3)"
"$VENV/bin/python" -m ipykernel install --sys-prefix --name hpcdl --display-name "HPC-DL (Python 3)" >/dev/null
say "learner lab settings: no news prompt, no nbgrader instructor tools"
bash env/learner-lab.sh "$VENV/bin/python"

if [ "$mode" = gpu ] && ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  warn "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__, "for CUDA", torch.version.cuda)')" \
       "cannot use a GPU here (no GPU visible, or an NVIDIA driver older than its CUDA needs:" \
       "see nvidia-smi); notebooks will run in Triton's CPU interpreter"
fi
echo "$want" > "$STAMP"
echo "env: $VENV is ready ($mode)"
