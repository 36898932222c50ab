#!/usr/bin/env bash
# Everything the course claims about a GPU, checked and measured in one call on a CUDA machine:
#   bash autograder/benchmarks/gpu_run.sh OUT_DIR [PYTEST_ARGS...]
# Needs torch, triton and matplotlib. nbgrader and Jupyter come either from the environment or from
# wheels in WHEELS (a folder, for a machine without internet), installed into a throw-away folder.
set -uo pipefail
out=${1:?usage: gpu_run.sh OUT_DIR [PYTEST_ARGS...]}; shift
mkdir -p "$out"
if [ -n "${WHEELS:-}" ]; then
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl || exit 1
  # --target puts data files (nbconvert's HTML templates, used for feedback) under share/jupyter.
  export PYTHONPATH="$site" PATH="$site/bin:$PATH" JUPYTER_PATH="$site/share/jupyter"
fi
export PYTHONPATH="$PWD/autograder${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/nvidia-smi.csv"
python3 -m ipykernel install --user --name hpcdl --display-name "HPC-DL (Python 3)" >/dev/null
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 -m benchmarks.vector_add "$out/vector_add.json" 2>&1 | tee "$out/bench.log"
fi
python3 -m pytest -p no:cacheprovider -v --durations=20 "$@" 2>&1 | tee "$out/pytest.log" | grep -vE " PASSED| SKIPPED"
