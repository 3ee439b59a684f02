# The two commands a new user needs:  `make quickstart`  and  `make test`.
# Each creates .venv (Python 3.11) and installs pinned dependencies on its own.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Test processes (pytest-xdist); each test file runs whole in one of them, so a file's shared
# fixtures are built once. 0 (the default) runs everything in this process: on 2 cores, 2 workers
# finished the suite only 13% sooner (docs/benchmarks.md, "Test suite"), as the tests are CPU-bound.
PYTEST_WORKERS ?= 0

.PHONY: quickstart test lint venv system-deps bench clean

$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -c requirements/constraints.txt -e '.[test,tpu]'
	touch $(STAMP)

venv: $(STAMP)

# Headless Chromium for the browser tests (Debian's package; Playwright's download does not work offline).
system-deps:
	bash scripts/ensure_system_deps.sh

quickstart: venv
	$(PY) experiments/quickstart.py

# Unsorted imports, unused code and type errors fail the build before any test runs (ruff, then
# mypy over marin_lab; both pinned in pyproject.toml, configured there).
lint: venv
	$(PY) -m ruff check .
	$(PY) -m mypy

test: venv system-deps lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: venv
	$(PY) -m pip install -q -c requirements/constraints.txt -e '.[test,tpu,bench]'
	$(PY) benchmarks/executor_overhead.py

clean:
	rm -rf $(VENV) marin_store test-output .pytest_cache
