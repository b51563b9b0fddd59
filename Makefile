# Two commands: `make lab` (open the course) and `make test` (run every test).
# Both create .venv on first use and reinstall only when a requirements file changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
GRADER := .venv-grader
LOCAL := $(CURDIR)/.jupyter-local
SETTINGS := $(VENV)/share/jupyter/lab/settings

.PHONY: lab check test release execute clean help
help:
	@echo "make lab      open JupyterLab on chapters/00_welcome.ipynb"
	@echo "make check    the fast tier: lint, format check, unit tests and doctests (about a minute)"
	@echo "make test     run all tests (unit, nbval, release --check, nbgrader, browser)"
	@echo "make release  regenerate chapters/ from solutions/"
	@echo "make execute  re-execute solutions/ in place (authors; NB=path for one), then release"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV) || $(MAKE) --no-print-directory venv-without-ensurepip

# Debian's python3 without the python3-venv package has no ensurepip: make the venv
# without pip, then install pip into it from a wheel fetched by the system pip.
.PHONY: venv-without-ensurepip
venv-without-ensurepip:
	rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip download --quiet --no-deps --dest $(VENV)/bootstrap pip==26.3
	$(BIN)/python "$$(ls $(VENV)/bootstrap/pip-*.whl)/pip" install --quiet --no-index "$$(ls $(VENV)/bootstrap/pip-*.whl)"

$(VENV)/.installed-runtime: requirements.txt widgets/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	mkdir -p $(SETTINGS) && cp binder/overrides.json $(SETTINGS)/overrides.json
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-runtime requirements-test.txt
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	touch $@

# nbgrader lives in its own venv; a .pth line lets it import torch and autogradlab from .venv.
$(GRADER)/.installed: requirements-grader.txt $(VENV)/.installed-runtime
	test -x $(GRADER)/bin/python || $(PYTHON) -m venv $(GRADER)
	$(GRADER)/bin/python -m pip install --quiet -r requirements-grader.txt
	echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
	  > "$$($(GRADER)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/autogradlab-course.pth"
	touch $@

# LAB_ARGS passes options through, e.g. make lab LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
lab: $(VENV)/.installed-runtime
	$(BIN)/jupyter lab --LabApp.default_url=/lab/tree/chapters/00_welcome.ipynb $(LAB_ARGS)

# One pytest worker per core, at most 4 (beyond that the nbgrader module alone sets the pace, and each
# worker holds its own torch and kernels in memory). --dist loadfile keeps each notebook (and each test
# module) on one worker: nbval runs a notebook's cells in order in one kernel.
# PYTEST_PARALLEL= runs everything in one process.
PYTEST_PARALLEL ?= -n auto --maxprocesses 4 --dist loadfile

# Tests keep Jupyter, IPython and matplotlib state inside the checkout, never in $HOME.
test: export JUPYTER_CONFIG_DIR := $(LOCAL)/config
test: export JUPYTER_DATA_DIR := $(LOCAL)/data
test: export JUPYTER_RUNTIME_DIR := $(LOCAL)/runtime
test: export IPYTHONDIR := $(LOCAL)/ipython
test: export MPLCONFIGDIR := $(LOCAL)/matplotlib
test: export PYDEVD_DISABLE_FILE_VALIDATION := 1
test: $(VENV)/.installed-test $(GRADER)/.installed
	$(BIN)/python -m autogradlab.release --check
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) --durations=15

# The loop an author runs after every change: no notebooks, no JupyterLab, no nbgrader.
check: export MPLCONFIGDIR := $(LOCAL)/matplotlib
check: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m autogradlab.release --check
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not slow" tests widgets/autogradlab

release: $(VENV)/.installed-runtime
	$(BIN)/python -m autogradlab.release

# `make execute NB=solutions/01_graph.ipynb` re-executes one notebook; default: all of them.
NB ?= solutions/[0-9][0-9]_*.ipynb
execute: $(VENV)/.installed-runtime
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=300 $(NB)
	$(BIN)/python -m autogradlab.release

clean:
	rm -rf $(VENV) $(GRADER) $(LOCAL) test-artifacts
