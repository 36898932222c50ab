#!/usr/bin/env bash
# The folder that gpu_run.sh's WHEELS= installs from, for a GPU machine that cannot reach a package index:
#   bash autograder/benchmarks/gpu_wheels.sh [DIR=.whl] [PYTHON_VERSION=3.12]
# It holds nbgrader, jupytext, pytest and ipywidgets with everything they need, at the versions
# env/constraints.txt pins, built for Linux x86-64 and that Python; and bubblewrap's Debian package in DIR/debs
# (where apt-get can download it). The machine's own torch, triton, numpy, matplotlib, safetensors and mpi4py
# are used: their wheels are left out, so that nothing here shadows the CUDA build. Carry DIR with the run
# (the device tool's carry=[".whl"]; .whl is git-ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.whl}
version=${2:-3.12}
mkdir -p "$dir"
# Only the lines of the lock that are pins; torch is not in it (its CPU build's label differs from CUDA's).
pins=$(mktemp)
grep -E '^[A-Za-z0-9_.-]+==' env/constraints.txt > "$pins"
python3 -m pip download -q -d "$dir" --only-binary=:all: --python-version "$version" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --platform any -c "$pins" nbgrader jupytext pytest pytest-xdist ipywidgets tqdm nbclient nbformat
rm -f "$pins"
for machine_own in torch triton numpy matplotlib safetensors mpi4py mpich pillow contourpy fonttools kiwisolver \
                   cycler pyparsing sympy mpmath networkx filelock fsspec jinja2 markupsafe typing_extensions \
                   packaging setuptools nvidia_; do
  rm -f "$dir"/${machine_own}-*.whl "$dir"/${machine_own}*.whl
done
# What grading never imports (the lab's front end, translations, the debugger, completion), left out so that
# the folder fits the device tool's carry (64 MiB with the tree).
for lab_only in jupyterlab babel debugpy jedi widgetsnbextension jupyter_builder; do
  rm -f "$dir"/${lab_only}-*.whl
done
if command -v apt-get >/dev/null; then
  mkdir -p "$dir/debs"
  (cd "$dir/debs" && apt-get download bubblewrap 2>/dev/null) \
    || echo "gpu_wheels: no bubblewrap .deb (apt-get download failed): the run grades unsandboxed where bwrap is missing"
fi
echo "gpu_wheels: $(ls "$dir"/*.whl | wc -l) wheels in $dir"
