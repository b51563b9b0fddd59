# Two commands: `make lab` (open the course) and `make test` (run every test).
# Both create .venv on first use and reinstall only when a requirements file changed.
# The learner works in my-chapters/ (git does not track it); `make update` brings a course update in.

PYTHON ?= python3
# Some images set PYTHONDONTWRITEBYTECODE=1: then every process (each pytest worker, each kernel) compiles
# the package from source and pytest rewrites every test module again. Keep Python's bytecode cache.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
BIN := $(VENV)/bin
GRADER := .venv-grader
LOCAL := $(CURDIR)/.jupyter-local
SETTINGS := $(VENV)/share/jupyter/lab/settings

.PHONY: lab lab-zh update workspace check test release execute clean help compat site
help:
	@echo "make lab      open JupyterLab on your copy of the chapters, my-chapters/00_welcome.ipynb"
	@echo "make update   git pull the course, then copy new chapters into my-chapters/ (yours are never overwritten)"
	@echo "make lab-zh   the Chinese edition: JupyterLab on my-chapters-zh/00_welcome.ipynb, the package speaking Chinese"
	@echo "make check    the fast tier: lint, format check, unit tests and doctests (about 1.5 minutes)"
	@echo "make test     run all tests (unit, nbval, release --check, nbgrader, browser)"
	@echo "make release  regenerate chapters/ from solutions/"
	@echo "make execute  re-execute solutions/ in place (authors; NB=path for one), then release"
	@echo "make compat   build .venv-compat: the package's lower bounds (ipywidgets 7.7.1, ipykernel 6), package as a wheel"
	@echo "make site     build the static website of the course into build/site (no execution, works offline)"

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

# torch first, the build that fits the machine (tools/install_torch.py): on Linux x86-64 without an
# NVIDIA GPU the CPU build (183 MiB) from PyTorch's CPU index, else PyPI's (the CUDA build on Linux,
# 2.55 GiB); TORCH=cpu or TORCH=cuda forces one. Then the pinned rest, which keeps that torch.
TORCH ?= auto
$(VENV)/.installed-runtime: requirements.txt widgets/pyproject.toml | $(BIN)/python
	$(BIN)/python tools/install_torch.py $(TORCH)
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

# The compatibility environment: the lower bounds of widgets/pyproject.toml (what Colab and Kaggle
# get), with the package installed as a built wheel, not editable (tests/test_compat.py uses it).
# The wheel is built from a copy of widgets/ so setuptools leaves no build/ inside the checkout.
COMPAT := .venv-compat
PACKAGE_FILES := widgets/pyproject.toml $(shell find widgets/autogradlab -name '*.py' -o -path '*/data/*' -type f 2>/dev/null)
# Two stamps: a change to the package rebuilds only the wheel, not the whole environment.
$(COMPAT)/.installed-requirements: requirements-compat.txt
	test -x $(COMPAT)/bin/python || $(PYTHON) -m venv $(COMPAT)
	$(COMPAT)/bin/python tools/install_torch.py $(TORCH)
	$(COMPAT)/bin/python -m pip install --quiet -r requirements-compat.txt
	touch $@
$(COMPAT)/.installed: $(COMPAT)/.installed-requirements $(PACKAGE_FILES)
	rm -rf build/compat-wheel && src="$$(mktemp -d)" && cp -r widgets/pyproject.toml widgets/README.md widgets/LICENSE widgets/autogradlab "$$src" \
	  && $(COMPAT)/bin/python -m pip wheel --quiet --no-deps --wheel-dir build/compat-wheel "$$src" && rm -rf "$$src"
	$(COMPAT)/bin/python -m pip install --quiet --no-deps --force-reinstall build/compat-wheel/autogradlab-*.whl
	touch $@
compat: $(COMPAT)/.installed

# The static website: nbconvert (its own venv, exact pins) + MathJax, RequireJS and the widgets'
# HTML manager copied next to the pages, so it renders offline (site/build.py).
SITE_VENV := .venv-site
SITE_OUT ?= build/site
$(SITE_VENV)/.installed: requirements-site.txt site/package.json site/package-lock.json
	test -x $(SITE_VENV)/bin/python || $(PYTHON) -m venv $(SITE_VENV)
	$(SITE_VENV)/bin/python -m pip install --quiet -r requirements-site.txt
	@command -v npm >/dev/null || { echo "make site needs npm (Node.js): apt-get install nodejs npm"; exit 1; }
	mkdir -p build/site-node && cp site/package.json site/package-lock.json build/site-node/
	cd build/site-node && npm ci --no-audit --no-fund --loglevel=error
	touch $@
site: $(SITE_VENV)/.installed
	$(SITE_VENV)/bin/python site/build.py --out $(SITE_OUT)

# The learner's copy (autogradlab/workspace.py): chapters they do not have yet are copied in,
# chapters they changed are never overwritten. JupyterLab opens it, so chapters/ stays clean for git pull.
LEARNER ?= my-chapters
workspace: $(VENV)/.installed-runtime
	$(BIN)/python -m autogradlab.workspace --to $(LEARNER)
	@if [ -d chapters-zh ]; then $(BIN)/python -m autogradlab.workspace --course chapters-zh --to $(LEARNER)-zh; fi
update:
	git pull --ff-only
	$(MAKE) --no-print-directory workspace

# LAB_ARGS passes options through, e.g. make lab LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
lab: workspace
	$(BIN)/jupyter lab --LabApp.default_url=/lab/tree/$(LEARNER)/00_welcome.ipynb $(LAB_ARGS)

# The Chinese edition: its chapters (chapters-zh/, your copy my-chapters-zh/) and the package's messages in Chinese.
lab-zh: workspace
	AUTOGRADLAB_LANG=zh $(BIN)/jupyter lab --LabApp.default_url=/lab/tree/$(LEARNER)-zh/00_welcome.ipynb $(LAB_ARGS)

# One pytest worker more than the cores, at most 4: the slow tests mostly wait (on kernels, JupyterLab,
# Chromium, nbgrader), so a third worker on 2 cores overlaps those waits (measured on 2 cores, second
# run: 5 min 56 s with 2 workers, 5 min 19 s with 3, 5 min 17 s with 4; with one torch thread per
# process and three nbgrader modules, 3 min 55 s with 3, 2026-11-24). --dist loadfile keeps each
# notebook (and each test module) on one worker: nbval runs a notebook's cells in order in one kernel.
# PYTEST_PARALLEL= runs everything in one process.
WORKERS := $(shell $(PYTHON) -c "import os; print(min(4, (os.cpu_count() or 1) + 1))")
PYTEST_PARALLEL ?= -n $(WORKERS) --dist loadfile

# Tests keep Jupyter, IPython and matplotlib state inside the checkout, never in $HOME.
test: export JUPYTER_CONFIG_DIR := $(LOCAL)/config
test: export JUPYTER_DATA_DIR := $(LOCAL)/data
test: export JUPYTER_RUNTIME_DIR := $(LOCAL)/runtime
test: export IPYTHONDIR := $(LOCAL)/ipython
test: export MPLCONFIGDIR := $(LOCAL)/matplotlib
test: export PYDEVD_DISABLE_FILE_VALIDATION := 1
# Workers and the kernels they start share the cores: one torch thread each, or they wait on each other
# (tests/conftest.py does the same for the workers themselves; outputs do not depend on it).
test: export OMP_NUM_THREADS := 1
test: environments
	$(BIN)/python -m autogradlab.release --check
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) --durations=15

# The test environments, side by side (the test packages and the grader's venv wait for .venv's torch, the
# compat and site venvs do not): pip and npm mostly wait on downloads and the disk, so a fresh clone builds
# them in parallel; each is its own stamp, so a second run builds nothing.
ENVIRONMENTS := $(VENV)/.installed-test $(GRADER)/.installed $(COMPAT)/.installed $(SITE_VENV)/.installed
.PHONY: environments
environments:
	@$(MAKE) --no-print-directory -j4 --output-sync=target $(ENVIRONMENTS)

# The loop an author runs after every change: no notebooks, no JupyterLab, no nbgrader. Its tests only
# compute, so one worker per core (at most 4): a third worker on 2 cores only adds its 12 s of collection.
# (`release --check` is tests/test_release.py::test_repository_chapters_are_up_to_date here.)
CHECK_WORKERS := $(shell $(PYTHON) -c "import os; print(min(4, os.cpu_count() or 1))")
check: export MPLCONFIGDIR := $(LOCAL)/matplotlib
check: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n $(CHECK_WORKERS) --dist loadfile -m "not slow" tests widgets/autogradlab

release: $(VENV)/.installed-runtime
	$(BIN)/python -m autogradlab.release

# `make execute NB=solutions/01_graph.ipynb` re-executes one notebook; default: all of them.
NB ?= solutions/[0-9][0-9]_*.ipynb
execute: $(VENV)/.installed-runtime
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=300 $(NB)
	$(BIN)/python -m autogradlab.release

# The environments and build outputs; never the learner's my-chapters/.
clean:
	rm -rf $(VENV) $(GRADER) $(COMPAT) $(SITE_VENV) $(LOCAL) test-artifacts build
