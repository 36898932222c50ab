# HPC-DL course. Every target but help and clean-work first runs env/setup.sh,
# which returns at once when $(VENV) is already up to date.

PYTHON ?= python3
VENV ?= .venv
GPU ?=
PYTEST_ARGS ?=
NB ?=
JOBS ?= auto
SUBMISSIONS ?=
CONFIRM ?=
DIST ?= dist/learner
SHARDS ?=
PARTITION ?=
GPUS_PER_TASK ?= 1
TIME_LIMIT ?= 04:00:00
CPUS_PER_TASK ?= 4
SBATCH_ARGS ?=

PY := $(VENV)/bin/python
WORK := autograder/work
# make test's pytest-xdist workers: one more than cores unless JOBS says. A grading waits at times (an MPI
# deadline, a browser, the package index); on 2 cores a third worker took the suite from 33.5 to 31.9 minutes.
TEST_WORKERS := $(if $(filter auto,$(JOBS)),$(shell echo $$(( $$(nproc) + 1 ))),$(JOBS))

.DEFAULT_GOAL := help
.PHONY: help setup lab test grade release notebooks clean-work learner-dist

help:
	@echo "make lab          set up $(VENV) if needed, then start JupyterLab on course/"
	@echo "make test         run the autograder's tests (NB=01_vector_add,...: of the per-notebook tests, those notebooks';"
	@echo "                  JOBS=N pytest-xdist workers, default cores + 1; PYTEST_ARGS=... passed to pytest)"
	@echo "make check-notebook NB=01_vector_add   only that notebook's tests: build, release, its fixtures graded"
	@echo "make grade        grade SUBMISSIONS=... (empty: the demo submissions); JOBS=N at once (default: a core"
	@echo "                  or a GPU each); RESUME=1: not again what an earlier run graded to its end"
	@echo "make grade-slurm  SUBMISSIONS=... SHARDS=N: a Slurm job array, one shard per task, into GRADEBOOK_URL's"
	@echo "                  server (PARTITION, GPUS_PER_TASK=1, TIME_LIMIT=04:00:00); make grade-collect: the CSVs"
	@echo "make release      build the student release of the assignments"
	@echo "make notebooks    build the course notebooks"
	@echo "make new-notebook NAME=05_int4_packing   start solutions/05_int4_packing/ from the standard arc"
	@echo "make setup        only create or update $(VENV)"
	@echo "make learner-dist write what learners get, no solutions, into DIST=$(DIST)"
	@echo "make demo         the capstone pipeline from the solutions: train, compress to INT4, infer (DEMO_ARGS=--help)"
	@echo "make clean-work   remove $(WORK)/ (holds the gradebook; needs CONFIRM=1)"
	@echo
	@echo "Variables: PYTHON=$(PYTHON) VENV=$(VENV) GPU=1|0 (default: CUDA build if nvidia-smi sees a GPU);"
	@echo "TORCH_INDEX_URL in the environment picks where torch comes from (see env/setup.sh)."

setup:
	@PYTHON="$(PYTHON)" VENV="$(VENV)" GPU="$(GPU)" bash env/setup.sh

# LAB_ARGS: more options for jupyter lab, e.g. LAB_ARGS="--no-browser --port=8888" on a remote
# machine (README: Remote machines). As root (containers, cloud VMs) --allow-root is added.
lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=course $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# Tests that share a grading run carry one xdist_group, so --dist loadgroup grades each once; groups are handed
# out longest first (conftest.py's LONGEST_FIRST), not by their number of tests.
test: test-tools setup
	$(PY) -m pytest autograder/tests -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --nb="$(NB)" $(PYTEST_ARGS)

# One notebook's tests only (mark `notebook`, autograder/tests/conftest.py): its build and release checks,
# its solution, release and answers.toml fixtures graded, and the same fixtures run as a learner runs them.
# One process: the grading is one run anyway, and its lines say how many are graded and the time left.
.PHONY: check-notebook
check-notebook: grade-tools setup
	@if [ -z "$(NB)" ]; then echo "usage: make check-notebook NB=01_vector_add"; exit 2; fi
	$(PY) -m pytest autograder/tests -p no:xdist -v -m "notebook and not browser" --nb="$(NB)" --selfcheck-all $(PYTEST_ARGS)

# Run before set-up: what test and grade need outside the venv (env/system-tools.sh). test: bubblewrap
# and Chromium, installed as root with apt-get, else named in one line; grade: a sandbox that works.
.PHONY: test-tools grade-tools
test-tools:
	@bash env/system-tools.sh test
grade-tools:
	@bash env/system-tools.sh grade "$(firstword $(wildcard $(PY)) $(PYTHON))"

# ASSIGNMENT=02_roofline grades only that assignment (a comma-separated list: those). JOBS=N submissions at
# once (default auto: one per core, one per GPU on a GPU machine); RESUME=1 leaves alone what an earlier run
# graded to its end.
grade: grade-tools setup
	$(PY) -m hpcdl_course grade $(SUBMISSIONS) $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) --jobs $(JOBS) \
	  $(if $(filter 1,$(RESUME)),--resume)

# A Slurm job array over a cluster (README: Grading on a Slurm cluster): releases into GRADEBOOK_URL's server,
# writes $(WORK)/slurm/grade-<time>.sbatch (task K of SHARDS grades shard K/SHARDS) and submits it; prints the
# job id. PARTITION (default: the cluster's), GPUS_PER_TASK (--gres=gpu:N; 0: none), TIME_LIMIT per task,
# CPUS_PER_TASK, SBATCH_ARGS (more sbatch options, space-separated). grade-collect, once it has run: the CSVs.
.PHONY: grade-slurm grade-collect
grade-slurm: setup
	@if [ -z "$(SUBMISSIONS)" ] || [ -z "$(SHARDS)" ]; then \
	  echo "usage: GRADEBOOK_URL=postgresql://... make grade-slurm SUBMISSIONS=folder SHARDS=N"; exit 2; fi
	$(PY) -m hpcdl_course grade-slurm $(SUBMISSIONS) --shards $(SHARDS) $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) \
	  $(if $(PARTITION),--partition $(PARTITION)) --gpus $(GPUS_PER_TASK) --time $(TIME_LIMIT) \
	  --cpus $(CPUS_PER_TASK) --jobs $(JOBS) $(if $(filter 1,$(RESUME)),--resume) \
	  $(foreach a,$(SBATCH_ARGS),--sbatch-arg=$(a))
grade-collect: setup
	$(PY) -m hpcdl_course grade-collect

# Refuses to replace notebooks in course/ that hold work; FORCE=1 moves them to course.bak-<time>/.
release: setup
	HPCDL_RELEASE_FORCE="$(FORCE)" $(PY) -m hpcdl_course release

notebooks: setup
	$(PY) -m hpcdl_course build

learner-dist: setup
	$(PY) -m hpcdl_course distribute $(DIST)

# The capstone's reference pipeline (hpcdl_course/demo): plots and summary in $(WORK)/demo-pipeline/.
.PHONY: demo
demo: setup
	$(PY) -m hpcdl_course.demo $(DEMO_ARGS)

.PHONY: new-notebook
new-notebook: setup
	@if [ -z "$(NAME)" ]; then echo "usage: make new-notebook NAME=05_int4_packing"; exit 2; fi
	$(PY) -m hpcdl_course new $(NAME)

# autograder/work/ holds the gradebook: never remove it without being asked twice.
clean-work:
	@if [ ! -e $(WORK) ]; then echo "$(WORK)/ does not exist; nothing to remove"; \
	elif [ "$(CONFIRM)" = 1 ]; then rm -rf $(WORK) && echo "removed $(WORK)/"; \
	else echo "would remove $(WORK)/, including its gradebook:"; ls -A $(WORK); \
	     echo "to remove it anyway: make clean-work CONFIRM=1"; exit 1; fi
