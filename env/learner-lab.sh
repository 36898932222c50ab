#!/usr/bin/env bash
# The lab's settings, shared by env/setup.sh and binder/postBuild:
# - no JupyterLab news prompt and no update check, and widget state saved with the notebook (a reopened
#   notebook shows its progress bars, not "model not found"): env/lab-overrides.json becomes the
#   environment's share/jupyter/lab/settings/overrides.json;
# - nbgrader's instructor tools (Formgrader, Create Assignment, Course List): in the learner repository
#   (its root holds .hpcdl-learner-dist, which `make learner-dist` writes) disabled and locked, so that Lab's
#   plugin manager cannot turn them back on; learners keep the Assignment List and Validate. In the
#   instructor's repository (no such file) unlocked and enabled, also where an earlier set-up locked them.
#   nbgrader's command line (make grade) is unaffected either way.
#
#   bash env/learner-lab.sh [PYTHON]     the environment's interpreter (default: python)
set -euo pipefail
cd "$(dirname "$0")/.."

py=$(command -v "${1:-python}") || { echo "env/learner-lab.sh: no interpreter '${1:-python}'" >&2; exit 1; }
jupyter=$(dirname "$py")/jupyter
settings=$("$py" -c 'import sys; print(sys.prefix)')/share/jupyter/lab/settings

mkdir -p "$settings"
cp env/lab-overrides.json "$settings/overrides.json"
tools=(@jupyter/nbgrader:formgrader @jupyter/nbgrader:create-assignment @jupyter/nbgrader:course-list)
# Quiet unless a command fails: then its output explains why.
run() { local out; out=$("$@" 2>&1) || { echo "$out" >&2; echo "env/learner-lab.sh: failed: $*" >&2; exit 1; }; }
if [ -f .hpcdl-learner-dist ]; then
  run "$jupyter" labextension disable --level=sys_prefix "${tools[@]}"
  run "$jupyter" labextension lock --level=sys_prefix "${tools[@]}"
  run "$jupyter" server extension disable --sys-prefix \
    nbgrader.server_extensions.formgrader nbgrader.server_extensions.course_list
  echo "env/learner-lab.sh: wrote $settings/overrides.json; learner lab: disabled and locked ${tools[*]}"
else
  run "$jupyter" labextension unlock --level=sys_prefix "${tools[@]}"
  run "$jupyter" labextension enable --level=sys_prefix "${tools[@]}"
  run "$jupyter" server extension enable --sys-prefix \
    nbgrader.server_extensions.formgrader nbgrader.server_extensions.course_list
  echo "env/learner-lab.sh: wrote $settings/overrides.json; instructor lab: enabled ${tools[*]}"
fi
