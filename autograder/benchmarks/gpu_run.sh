#!/usr/bin/env bash
# Everything the course claims about a GPU, checked and measured in one call on a CUDA machine:
#   [NB=01_vector_add] [LIMIT=480] [BENCH="vector_add softmax"] [CLASS=09_zero_copy_loading:2] [WHEELS=.whl] bash autograder/benchmarks/gpu_run.sh OUT_DIR [PYTEST_ARGS...]
# e.g. NB=01_vector_add bash autograder/benchmarks/gpu_run.sh OUT autograder/tests/test_grading.py \
#        --grade-only=zeros_instead_of_empty --cheats=memoised_result
# Needs torch, triton and matplotlib. nbgrader comes from the environment or from the wheels in WHEELS
# (a folder, for a machine without internet), installed into a throw-away folder; bubblewrap from
# WHEELS/debs/*.deb where the machine has no `bwrap`. NB selects the notebooks whose grading the test
# suite runs (one per call fits a call of ten minutes; passed as pytest's --nb); BENCH names the
# benchmarks to run (default none), each NAME or NAME:ARG (ARG: its first argument after OUT.json).
# CLASS="ASSIGNMENT[:STUDENTS] ..." grades, for each, a generated class (the solution, then wrong answers) through
# make grade's own command (benchmarks.class_grading, one job), with OMP_NUM_THREADS as the caller had it; what
# each grading wrote is kept in OUT/class-ASSIGNMENT.
# PYTEST_ARGS go to pytest: test files, -k, and the suite's options (autograder/tests/conftest.py):
# --grade-only=NAMES (answer fixtures), --grade-fixtures-only, --cheats=NAMES.
set -uo pipefail
out=${1:?usage: gpu_run.sh OUT_DIR [PYTEST_ARGS...]}; shift
mkdir -p "$out"
if [ -n "${WHEELS:-}" ]; then
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl || exit 1
  # --target puts data files (nbconvert's HTML templates, used for feedback) under share/jupyter.
  export PYTHONPATH="$site" PATH="$site/bin:$PATH" JUPYTER_PATH="$site/share/jupyter"
  if ! command -v bwrap >/dev/null && ls "$WHEELS"/debs/*.deb >/dev/null 2>&1; then
    for deb in "$WHEELS"/debs/*.deb; do dpkg -x "$deb" "$site/debs"; done
    export PATH="$site/debs/usr/bin:$PATH"
  fi
fi
export PYTHONPATH="$PWD/autograder${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
caller_threads=${OMP_NUM_THREADS-}
# As make grade gives a grading's worker on a machine of one GPU (hpcdl_course.class_run.worker_threads).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/nvidia-smi.csv"
python3 -m hpcdl_course check-sandbox > "$out/sandbox.log" 2>&1
if [ $? = 2 ]; then  # no working bubblewrap here: grade without it, and say so in every result
  echo "SANDBOX UNAVAILABLE: grading with HPCDL_SANDBOX=none" | tee -a "$out/sandbox.log"
  export HPCDL_SANDBOX=none
fi
cat "$out/sandbox.log"
for bench in ${BENCH:-}; do  # NAME, or NAME:ARG (speed_cells:09_zero_copy_loading: another notebook than NB's)
  name=${bench%%:*} arg=${bench#"$name"}; arg=${arg#:}; file=${bench/:/-}
  python3 -m "benchmarks.$name" "$out/$file.json" $arg 2>&1 | tee "$out/bench-$file.log"
done
for class in ${CLASS:-}; do  # ASSIGNMENT[:STUDENTS]
  assignment=${class%%:*} students=${class#"$assignment"}; students=${students#:}
  threads=(-u OMP_NUM_THREADS); [ -n "$caller_threads" ] && threads=("OMP_NUM_THREADS=$caller_threads")
  env "${threads[@]}" python3 -m benchmarks.class_grading --assignment "$assignment" --students "${students:-1}" \
    --jobs 1 --keep "$out/class-$assignment" 2>&1 | tee "$out/class-$assignment.log"
done
[ -n "${CLASS:-}" ] && cp autograder/benchmarks/results/class-grading.md "$out/"
# One process at a time on the card: no pytest-xdist here, so no two gradings share the GPU.
work=$(mktemp -d)/work  # the graded notebooks, read below
# LIMIT (seconds, default none) interrupts pytest in time for the verdicts below to be written: a call
# cut off from outside would lose what every submission graded so far said.
timeout --signal=INT --kill-after=30 "${LIMIT:-0}" \
  python3 -m pytest -p no:cacheprovider -p no:xdist -v --durations=20 --nb="${NB:-}" --work="$work" "$@" 2>&1 \
  | tee "$out/pytest.log" | grep -vE " PASSED| SKIPPED"
# What each graded cell said (the checker's messages) and what the checker flagged, for the record.
python3 - "$work" > "$out/verdicts.txt" <<'EOF'
import json, pathlib, sys
import nbformat
work = pathlib.Path(sys.argv[1])
for path in sorted(work.glob("autograded/*/*/*.ipynb")):
    for cell in nbformat.read(path, as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("grade"):
            said = " | ".join((o.get("text") or o.get("evalue") or "").strip()[:400] for o in cell.get("outputs", []))
            print(f"{path.parent.parent.name}/{path.stem}/{grade_id}: {said}")
for path in sorted(work.glob("reports/*/*/*.json")):
    report = json.loads(path.read_text())
    print(f"{path.parent.parent.name}: flags {report['flags']}; printed {report['printed'][-800:]!r}")
    print(f"{path.parent.parent.name}: seconds {report.get('seconds')}")
EOF
