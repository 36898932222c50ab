# HPC-DL course. Every target but help and clean-work first runs env/setup.sh,
# which returns at once when $(VENV) is already up to date.

PYTHON ?= python3
VENV ?= .venv
GPU ?=
PYTEST_ARGS ?=
SUBMISSIONS ?=
CONFIRM ?=

PY := $(VENV)/bin/python
WORK := autograder/work

.DEFAULT_GOAL := help
.PHONY: help setup lab test grade release notebooks clean-work

help:
	@echo "make lab          set up $(VENV) if needed, then start JupyterLab on course/"
	@echo "make test         run the autograder's tests (PYTEST_ARGS=... passed to pytest)"
	@echo "make grade        grade SUBMISSIONS=... (empty: the demo submissions)"
	@echo "make release      build the student release of the assignments"
	@echo "make notebooks    build the course notebooks"
	@echo "make setup        only create or update $(VENV)"
	@echo "make clean-work   remove $(WORK)/ (holds the gradebook; needs CONFIRM=1)"
	@echo
	@echo "Variables: PYTHON=$(PYTHON) VENV=$(VENV) GPU=1|0 (default: CUDA build if nvidia-smi sees a GPU);"
	@echo "TORCH_INDEX_URL in the environment picks where torch comes from (see env/setup.sh)."

setup:
	@PYTHON="$(PYTHON)" VENV="$(VENV)" GPU="$(GPU)" bash env/setup.sh

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=course

test: setup
	$(PY) -m pytest autograder/tests $(PYTEST_ARGS)

grade: setup
	$(PY) -m hpcdl_course grade $(SUBMISSIONS)

release: setup
	$(PY) -m hpcdl_course release

notebooks: setup
	$(PY) -m hpcdl_course build

# autograder/work/ holds the gradebook: never remove it without being asked twice.
clean-work:
	@if [ ! -e $(WORK) ]; then echo "$(WORK)/ does not exist; nothing to remove"; \
	elif [ "$(CONFIRM)" = 1 ]; then rm -rf $(WORK) && echo "removed $(WORK)/"; \
	else echo "would remove $(WORK)/, including its gradebook:"; ls -A $(WORK); \
	     echo "to remove it anyway: make clean-work CONFIRM=1"; exit 1; fi
