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
#   SETUP_CHECK=1         install nothing: exit 0 if VENV is up to date, else 1 saying so
#
# $VENV/.hpcdl-stamp records what the venv was built from: the build of torch with env/'s files,
# this folder's pyproject.toml, and this folder. Set-up returns at once when all three match, or
# when a venv set up from another folder has the same pins, satisfies this pyproject.toml and
# imports packages with the same files as this folder's (a learner distribution run with the
# instructor's venv). It never reinstalls a venv set up from another folder that still exists:
# that would replace the other folder's packages in it.
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

# What the venv is built from (env/system-tools.sh checks system packages, not the venv).
files=(env/*.txt env/*.json)
for f in env/*.sh; do [ "$f" = env/system-tools.sh ] || files+=("$f"); done
checksum() { cat "$@" | cksum | cut -d' ' -f1,2; }
here=$(pwd -P)
want_env="env $mode $(checksum "${files[@]}")"
want_project="project none"
[ -f pyproject.toml ] && want_project="project $(checksum pyproject.toml)"
field() { sed -n "s/^$1 //p" "$STAMP" 2>/dev/null | head -n 1 || true; }
have_env="env $(field env)"
have_project="project $(field project)"
have_from=$(field from)
have_mode=$(field env | cut -d' ' -f1)
[ -n "$have_mode" ] || have_mode=$(head -n 1 "$STAMP" 2>/dev/null | cut -d' ' -f1 || true)  # an older stamp
if [ "$have_env" = "$want_env" ] && [ "$have_project" = "$want_project" ] && [ "$have_from" = "$here" ]; then
  echo "env: $VENV is up to date ($mode)"
  exit 0
fi

# Why the venv would need this folder's package installed; prints nothing if it would not: this
# pyproject.toml's Python and dependencies are satisfied, and each of its packages is imported from
# files equal to this folder's (byte for byte, caches aside).
differs() {
  "$VENV/bin/python" -I - "$here" 2>&1 <<'EOF' || true
import importlib.metadata, importlib.util, pathlib, platform, sys, tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

root = pathlib.Path(sys.argv[1])
pyproject = tomllib.loads((root / "pyproject.toml").read_text())
project, tool = pyproject["project"], pyproject.get("tool", {}).get("setuptools", {})
if platform.python_version() not in SpecifierSet(project.get("requires-python", "")):
    sys.exit(f"its Python {platform.python_version()} is not {project['requires-python']}")
for line in project.get("dependencies", []):
    req = Requirement(line)
    if req.marker is None or req.marker.evaluate():
        try:
            version = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            sys.exit(f"it has no {req.name}")
        if not req.specifier.contains(version, prereleases=True):
            sys.exit(f"its {req.name} {version} is not {req.specifier}")


def files(folder):
    def junk(rel):
        return rel.suffix == ".pyc" or any(part in ("__pycache__", ".ipynb_checkpoints") or part.endswith(".egg-info")
                                           for part in rel.parts)
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not junk(p.relative_to(folder))}


for name in tool.get("packages", []):
    top, *inner = name.split(".")  # a subpackage is found through its top package, which is not imported
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"it has no {name} package")
    found = pathlib.Path(spec.submodule_search_locations[0]).joinpath(*inner)
    if not found.is_dir():
        sys.exit(f"it has no {name} package")
    if files(found) != files(root / tool.get("package-dir", {}).get("", "") / name.replace(".", "/")):
        sys.exit(f"its {name} package, {found}, differs from this folder's")
EOF
}

if [ -n "$have_from" ] && [ "$have_from" != "$here" ]; then
  why="its pins or its build of torch differ"
  if [ "$have_env" = "$want_env" ]; then
    why="this folder has no pyproject.toml"
    [ -f pyproject.toml ] && why=$(differs | tail -n 1)
    if [ -z "$why" ]; then
      echo "env: $VENV is up to date ($mode; set up from $have_from, with the same packages as this folder)"
      exit 0
    fi
  fi
  [ -d "$have_from" ] && die "$VENV was set up from $have_from and does not suit this folder ($why);" \
    "setting it up here would replace that folder's packages in it: give this folder a venv of its own (VENV=.venv)"
fi
[ "${SETUP_CHECK:-}" = 1 ] && die "$VENV is not up to date for this folder; SETUP_CHECK=1, so nothing was installed"

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
if [ -n "$have_mode" ] && [ "$have_mode" != "$mode" ]; then
  echo "env: switching torch from the $have_mode build to the $mode build"
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
say "lab settings: no news prompt; nbgrader's instructor tools locked off in the learner repository only"
bash env/learner-lab.sh "$VENV/bin/python"

if [ "$mode" = gpu ] && ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  warn "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__, "for CUDA", torch.version.cuda)')" \
       "cannot use a GPU here (no GPU visible, or an NVIDIA driver older than its CUDA needs:" \
       "see nvidia-smi); notebooks will run in Triton's CPU interpreter"
fi
printf "%s\n" "$want_env" "$want_project" "from $here" > "$STAMP"
echo "env: $VENV is ready ($mode)"
