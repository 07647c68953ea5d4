# normlab — the two commands a learner needs are `make lab` and `make test`.
# Everything else is here for authors and instructors. Run `make help` for the list.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8888
# Your copies of the labs: `make lab` fills it with the labs you have no copy of yet, and no
# command ever overwrites a file in it. labs/ holds the generated originals.
WORK ?= work
# JupyterLab settings shipped with the course: chapters (.md) open rendered, not as source.
LAB_SETTINGS := $(CURDIR)/jupyterlab-settings
# PyPI's Linux torch wheels bundle CUDA (several GB). Install the CPU build first from
# PyTorch's CPU index; pip then finds torch already satisfied when it installs the course.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# The torch requirement, as pyproject.toml (its one owner) states it.
TORCH_REQUIREMENT := $(shell sed -n 's/^ *"\(torch[<>=!~][^"]*\)",.*/\1/p' pyproject.toml)
# Open a browser only where there is a screen to show it on.
BROWSER_FLAG := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser)
# Jupyter refuses to run as root unless told to (containers, Binder-like images run as root).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help kernels lab test test-fast bench labs oracles grade lint format clean-venv site gpu-check

help:
	@echo "make lab    - set up .venv (first time) and open JupyterLab on the course start page (PORT=$(PORT)); Spanish: es/START_HERE.md"
	@echo "make test   - set up .venv (first time) and run the whole suite"
	@echo "make test-fast - the package, checks, probes and build tests only (edit loop)"
	@echo "make kernels - install Triton (optional, about 1 GB, Linux x86-64) for lab 11's GPU kernels"
	@echo "make bench  - time every notebook and grading; report in benchmarks/results/"
	@echo "make gpu-check - on a CUDA GPU: lab 11's checks on the compiled kernels and their timings, in benchmarks/results/"
	@echo "make grade  - your progress: a line per lab you started in $(WORK)/, graded"
	@echo "make labs   - regenerate labs/ and es/labs/ from solutions/ and es/catalog/ (authors; never touches $(WORK)/)"
	@echo "make oracles - rewrite the oracle's memo from the NumPy labs' solutions (authors: after changing an oracle or a check's inputs)"
	@echo "make lint   - ruff over the package, tests and notebooks"
	@echo "make site   - build the course website into _site/ (offline; open _site/index.html)"

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "normlab needs Python >= 3.10; set PYTHON=python3.x")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c 'import torch' 2>/dev/null || \
	  $(PY) -m pip install --retries 1 --timeout 20 '$(TORCH_REQUIREMENT)' --index-url $(TORCH_INDEX) || \
	  { echo "CPU index unreachable; installing torch from the default index"; $(PY) -m pip install '$(TORCH_REQUIREMENT)'; }
	$(PY) -m pip install -e .
	@touch $@

# Lab 11's kernels: the optional extra (Triton, about 1 GB, Linux x86-64 only). Without it the
# Triton lab and its tests say so and skip; everything else runs.
kernels: $(VENV)/.installed
	$(PY) -m pip install -e '.[kernels]'
	@$(PY) -c 'import triton; print("triton", triton.__version__, "installed: lab 11 can run")'

# JupyterLab serves on PORT or not at all (port_retries=0): left to itself it moves to the next
# free port, and the address printed above it (the Spanish start page) would be wrong.
lab: $(VENV)/.installed
	$(VENV)/bin/normlab work --folder $(WORK)
	@$(PY) -c 'import socket, sys; busy = not socket.socket().connect_ex(("127.0.0.1", $(PORT))); sys.exit(busy and "make lab: port $(PORT) is in use; choose another: make lab PORT=9000\nmake lab: el puerto $(PORT) está ocupado; elige otro: make lab PORT=9000")'
	@test ! -f es/START_HERE.md || echo "Español: la página de inicio en español es http://localhost:$(PORT)/lab/tree/es/START_HERE.md (ábrela en el navegador de JupyterLab; si pide un token, usa el de la URL de abajo)"
	$(VENV)/bin/jupyter lab --port=$(PORT) --ServerApp.port_retries=0 $(BROWSER_FLAG) $(ROOT_FLAG) \
	  --LabApp.default_url=/lab/tree/START_HERE.md --LabApp.app_settings_dir=$(LAB_SETTINGS)

# One pytest run: tests/ and nbval over solutions/ and notebooks/ (each notebook executes once),
# in TEST_JOBS processes (pytest-xdist; 0 for one), a file at a time: a notebook's cells share
# one kernel and a test file's fixtures are built once (test_adversarial.py goes as four units:
# per mode, the tests that mostly wait on a CPU quota or beside spinners, handed out first, and
# the rest; each builds its own mode's fixtures: tests/conftest.py, SPLIT_BY_MODE, WAITING).
# Files are handed out longest first
# (tests/conftest.py, LONGEST_FIRST), so that the run does not end on one long file alone.
# Two workers more than the machine has cores (at most 8): many tests wait on a process they
# started (a grader, a browser, a server, a submission held to a CPU quota), and the extra
# workers compute meanwhile. test_adversarial.py's two waiting units hold two workers for their
# first three minutes or so; with one extra worker, one core then sat idle: on 2 cores, 3
# workers took 12 min 5 s and 4 took 10 min 29 s, the same CPU time (775 s user), the machine
# 96% busy.
TEST_JOBS ?= $(shell $(PYTHON) -c 'import os; print(min((os.cpu_count() or 1) + 2, 8))')
# Bytecode is written (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE is set:
# the run starts hundreds of interpreters (workers, kernels, graders, course copies), and each
# would otherwise compile the course's modules, and rewrite the tests' asserts, from source.
test: $(VENV)/.installed $(VENV)/.site-installed $(VENV)/.browser-installed
	$(VENV)/bin/ruff check src tests solutions notebooks benchmarks
	$(VENV)/bin/ruff format --check src tests solutions notebooks benchmarks
	$(VENV)/bin/normlab labs --check
	env PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder --nbval --nbval-current-env -p no:cacheprovider \
	  notebooks tests solutions

# The edit loop: no notebooks, no process per submission, no JupyterLab (markers in pyproject.toml).
test-fast: $(VENV)/.installed
	$(PY) -m pytest -m "not (notebooks or isolation or slow)" tests

bench: $(VENV)/.installed
	$(PY) benchmarks/bench.py

gpu-check: $(VENV)/.installed
	@$(PY) -c 'import triton' 2>/dev/null || $(MAKE) kernels
	$(PY) benchmarks/gpu_check.py $(GPU_CHECK_FLAGS)

labs: $(VENV)/.installed
	$(VENV)/bin/normlab labs

# The oracle's answers for a right answer's checks, shipped so that a NumPy lab is graded
# without PyTorch (src/normlab/grader/memo.py); tests/test_oracle_memo.py says when it is due.
oracles: $(VENV)/.installed
	$(PY) -m normlab.oracles

grade: $(VENV)/.installed
	@$(VENV)/bin/normlab work --folder $(WORK) --quiet
	$(VENV)/bin/normlab progress --folder $(WORK)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests solutions notebooks benchmarks

format: $(VENV)/.installed
	$(VENV)/bin/ruff format src tests solutions notebooks benchmarks

# The website's builder (the `site` extra): all that `make site` installs.
$(VENV)/.site-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -e '.[site]'
	@touch $@

# The browser tests' driver (the `browser` extra, Playwright), for `make test` only; Chromium
# itself comes from the system (Debian: apt-get install chromium), the browser tests skip
# without it.
$(VENV)/.browser-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -e '.[browser]'
	@touch $@

site: $(VENV)/.site-installed
	$(PY) site/build.py _site

clean-venv:
	rm -rf $(VENV)
