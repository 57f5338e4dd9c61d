# make demo  — set up .venv and run the demo on built-in sample data
# make test  — set up .venv and run the whole test suite
# make notebooks — execute notebooks/ in place (outputs committed) and refresh docs/images/
# make check-3.11 — a short check on Python 3.11 in .venv-3.11 (install, demo, a few tests)
#
# .venv is made with the newest of Python 3.13 and 3.12 that runs here (found on PATH or in
# pyenv's versions; a pyenv shim that fails does not count), else with Python 3.11.
# PYTHON=... picks another.
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
# the first interpreter of version $(1) that runs: pythonX.Y on PATH, then pyenv's
runs = $(firstword $(foreach p,python$(1) $(sort $(wildcard $(PYENV_VERSIONS)/$(1).*/bin/python$(1))),$(shell $(p) -c 'import sys; print(sys.executable if sys.version_info[:2] == ($(subst .,$(comma),$(1))) else "")' 2>/dev/null)))
comma  := ,
ifeq ($(origin PYTHON),undefined)
PYTHON := $(or $(call runs,3.13),$(call runs,3.12),$(call runs,3.11),python3)
endif
ifeq ($(origin PYTHON311),undefined)
PYTHON311 := $(or $(call runs,3.11),python3.11)
endif
VENV   ?= .venv
PY     := $(VENV)/bin/python
READY  := $(VENV)/.zagg-installed
VENV311 ?= .venv-3.11
PY311   := $(VENV311)/bin/python
# the short 3.11 check's tests: the Icechunk companion on icechunk 1.x (less its longest
# tests: S3 round trips, two processes committing at once, the split's ratchet) and the readers
TESTS311 ?= tests/test_icechunk.py tests/test_read.py -k "not local_s3_server and not ratchets and not at_once"

# a $(VENV) of another Python version than $(PYTHON)'s is made anew
version_of = $(shell $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
STALE := $(if $(wildcard $(PY)),$(filter-out $(call version_of,$(PYTHON)),$(call version_of,$(PY))))

.PHONY: demo test lint bench notebooks images clean check-3.11 FORCE

$(READY): pyproject.toml $(if $(STALE),FORCE)
	@$(PYTHON) -c 'import sys; sys.version_info >= (3, 12) or print("note: no Python 3.13 or 3.12 runs here; $(VENV) gets Python %d.%d, with the releases of icechunk, zarr and numpy that still support it" % sys.version_info[:2])'
	$(if $(STALE),rm -rf $(VENV)  # Python $(STALE): made anew with $(PYTHON))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,dev,plot,xdggs,gateway,dashboard,icechunk,archive]"
	$(PY) -m zagg warm  # compile and cache the numba kernels once, ahead of the first run
	touch $(READY)

demo: $(READY)
	$(PY) -m zagg demo

test: $(READY)
	$(PY) -m ruff check zagg tests benchmarks notebooks
	$(PY) -m pytest -q -n 2 --dist loadfile  # both cores; a file's tests share one worker

lint: $(READY)
	$(PY) -m ruff check zagg tests benchmarks notebooks
	$(PY) -m ruff format --check zagg tests benchmarks

notebooks: $(READY)
	$(PY) notebooks/execute.py

# the README's map of the demo store, drawn as `make demo` draws it
images: $(READY)
	rm -rf build/demo-map
	$(PY) -m zagg demo --store build/demo-map/demo-store --map docs/images/demo-map.png

bench: $(READY)
	$(PY) benchmarks/bench_aggregate.py

check-3.11:
	test -x $(PY311) || $(PYTHON311) -m venv $(VENV311)
	$(PY311) -m pip install --quiet --upgrade pip
	$(PY311) -m pip install --quiet -e ".[test,icechunk,plot]"
	rm -rf build/demo-3.11
	$(PY311) -m zagg demo --store build/demo-3.11/demo-store --points 1000000
	$(PY311) -m pytest -q $(TESTS311)

clean:
	rm -rf $(VENV) $(VENV311) build/demo-3.11 demo-store .pytest_cache
