#!/usr/bin/env bash
# What `make test` and `make grade` need outside the venv. The Makefile runs this before set-up,
# .ci/run before that; it prints nothing when nothing is missing.
#
#   bash env/system-tools.sh test           bubblewrap (bwrap: grading's sandbox), Debian's Chromium
#                                           at /usr/bin/chromium (the browser test), Debian's
#                                           postgresql (the PostgreSQL gradebook test) and slurm-wlm and
#                                           munge (the Slurm grading test). As root with apt-get
#                                           it installs what is missing; otherwise it stops with one line
#                                           that says what to run. Without Chromium the browser test
#                                           skips, so only CI (CI or HPCDL_REQUIRE_BROWSER=1) stops for it;
#                                           without PostgreSQL or Slurm its test skips, and CI (CI) stops.
#   bash env/system-tools.sh grade [PYTHON] whether grading can sandbox submissions, as
#                                           autograder/hpcdl_course/sandbox.py decides (HPCDL_SANDBOX=none:
#                                           no sandbox); stops with its one line if not.
#
# Either stops where bwrap is installed but cannot make a sandbox (a container without user namespaces).
# Not part of the venv: env/setup.sh leaves this file out of its stamp, and learners do not get it.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-}
CHROMIUM=/usr/bin/chromium  # autograder/tests/capabilities.py's
sudo=
[ "$(id -u)" = 0 ] || sudo="sudo "

stop() { echo "make $what: $*" >&2; exit 1; }

# Stops if bwrap cannot make a sandbox here with the namespaces grading's (sandbox.py) uses.
bwrap_works() {
  local out
  out=$(bwrap --unshare-ipc --unshare-pid --unshare-net --unshare-uts --unshare-cgroup-try --die-with-parent \
        --new-session --ro-bind / / --proc /proc --dev /dev true 2>&1) \
    || stop "bwrap is installed but cannot make a sandbox here (${out%%$'\n'*}); grading needs one"
}

case "$what" in
test)
  ci=${CI:-}
  required=0  # as autograder/tests/test_browser.py: there the browser test fails instead of skipping
  ci_required=0  # CI alone (the PostgreSQL and Slurm tests)
  case "${ci,,}" in ""|0|false) ;; *) required=1; ci_required=1 ;; esac
  [ "${HPCDL_REQUIRE_BROWSER:-}" = 1 ] && required=1
  missing() {
    command -v bwrap >/dev/null || echo bubblewrap
    [ -x "$CHROMIUM" ] || echo chromium
    compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || echo postgresql
    [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null || echo slurm-wlm
    [ -x /usr/sbin/munged ] || echo munge
  }
  need=$(missing | xargs)
  why=  # what apt-get said when it could not install a package
  if [ -n "$need" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "make test: installing $need with apt-get (the sandbox; the browser, PostgreSQL and Slurm tests)"
    log=$(mktemp)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >"$log" 2>&1 || true
    for pkg in $need; do  # one at a time: a package without a candidate must not stop the other
      apt-get install -y -qq "$pkg" >>"$log" 2>&1 \
        || why=${why:-"; apt-get could not install $pkg: $(grep -v '^[[:space:]]*$' "$log" | tail -n 1)"}
    done
    rm -f "$log"
    need=$(missing | xargs)
  fi
  case " $need " in
    *" bubblewrap "*) stop "needs ${need// / and } (grading's sandbox, the browser test)$why:" \
                           "run \`${sudo}apt-get install -y $need\` (or your system's package manager), then make test again" ;;
  esac
  # The PostgreSQL gradebook test (autograder/tests/test_gradebook_postgres.py) starts Debian's server; it
  # skips without one, except in CI (CI set), where it fails.
  case " $need " in
    *" postgresql "*)
      [ "$ci_required" = 1 ] && stop "the PostgreSQL gradebook test must run in CI, but there is no server" \
                                     "(/usr/lib/postgresql/*/bin)$why: run \`${sudo}apt-get install -y postgresql\`"
      echo "make test: no PostgreSQL server, so the PostgreSQL gradebook test will skip$why" \
           "(to run it: ${sudo}apt-get install -y postgresql)"
      need=$(echo "$need" | sed 's/postgresql//' | xargs) ;;
  esac
  # The Slurm grading test (autograder/tests/test_grading_slurm.py) starts munged, slurmctld and slurmd of
  # its own; it skips without them, except in CI.
  slurm=$(printf '%s\n' $need | grep -xE 'slurm-wlm|munge' | xargs || true)
  if [ -n "$slurm" ]; then
    [ "$ci_required" = 1 ] && stop "the Slurm grading test must run in CI, but there is no $slurm$why:" \
                                   "run \`${sudo}apt-get install -y slurm-wlm munge\`"
    echo "make test: no $slurm, so the Slurm grading test will skip$why" \
         "(to run it: ${sudo}apt-get install -y slurm-wlm munge)"
    need=$(echo " $need " | sed -e 's/ slurm-wlm / /' -e 's/ munge / /' | xargs)
  fi
  if [ -n "$need" ]; then
    [ "$required" = 1 ] && stop "the browser test must run here (CI or HPCDL_REQUIRE_BROWSER=1), but there is" \
                                "no $CHROMIUM$why: run \`${sudo}apt-get install -y chromium\`, then make test again"
    echo "make test: no $CHROMIUM, so the browser test will skip$why (to run it: ${sudo}apt-get install -y chromium)"
  fi
  bwrap_works
  ;;
grade)
  # sandbox.py says what grading needs; it imports only the standard library, so any Python 3 runs it.
  out=$("${2:-python3}" - 2>/dev/null <<'EOF'
import sys
sys.path.insert(0, "autograder")
try:
    from hpcdl_course import sandbox
except Exception:
    sys.exit(0)  # no interpreter that can tell yet: grading itself will say
try:
    print(sandbox.mode())
except sandbox.SandboxUnavailable as e:
    print(e)
    sys.exit(3)
EOF
) && rc=0 || rc=$?
  [ "$rc" = 3 ] && stop "$out"
  [ "$out" = bwrap ] && bwrap_works
  ;;
*)
  echo "usage: bash env/system-tools.sh test | grade [PYTHON]" >&2
  exit 2
  ;;
esac
exit 0
