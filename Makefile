# make demo  — set up .venv and run the demo on built-in sample data
# make test  — set up .venv and run the whole test suite
# make notebooks — execute notebooks/ in place (outputs committed) and refresh docs/images/
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
READY  := $(VENV)/.zagg-installed

.PHONY: demo test lint bench notebooks images clean

$(READY): pyproject.toml
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

clean:
	rm -rf $(VENV) demo-store .pytest_cache
