# The two commands a new user needs:  `make quickstart`  and  `make test`.
# Each creates .venv (Python 3.11) and installs pinned dependencies on its own.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The product alone (what `make quickstart` needs); the test, TPU and benchmark extras on top of it.
TEST_STAMP := $(VENV)/.installed-test
PYTEST_ARGS ?=
# Test processes (pytest-xdist); each test file runs whole in one of them, so a file's shared
# fixtures are built once. On 2 cores, 2 workers finish the suite in 812-861 s against 1,043-1,115 s
# in one process (docs/benchmarks.md, "Test suite"); the races between tests that the first
# two-worker runs found are fixed. PYTEST_WORKERS=0 runs everything in this process.
PYTEST_WORKERS ?= 2

.PHONY: quickstart test test-fast lint venv test-venv system-deps bench clean

# Pinned installs (requirements/constraints.txt) by uv, with pip's configuration of this machine
# (index, wheel folders), or by pip where uv cannot be had: scripts/install.py. Quiet; errors show.
INSTALL := PYTHONWARNINGS=ignore $(PY) scripts/install.py

$(STAMP): pyproject.toml requirements/constraints.txt scripts/install.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(INSTALL) -e .
	touch $(STAMP)

# The test stamp is newer than the product's: installing the extras never triggers a product reinstall.
$(TEST_STAMP): $(STAMP)
	$(INSTALL) -e '.[test,tpu]'
	touch $(TEST_STAMP)

venv: $(STAMP)

test-venv: $(TEST_STAMP)

# Headless Chromium for the browser tests (Debian's package; Playwright's download does not work offline).
system-deps:
	bash scripts/ensure_system_deps.sh

# The project's own bytecode, written once: where PYTHONDONTWRITEBYTECODE is set, every process
# (each step's worker, each test's subprocess) would compile the modules it imports again.
BYTECODE := $(PY) -m compileall -q -j 0 marin_lab experiments

quickstart: venv
	$(BYTECODE)
	$(PY) experiments/quickstart.py

# Lint findings, unformatted files and type errors fail the build before any test runs (ruff check,
# ruff format --check, then mypy over marin_lab/ and experiments/; pinned and configured in
# pyproject.toml). `.venv/bin/python -m ruff format .` formats the tree. (mypy beside the tests
# instead saved nothing in a fresh clone: 15 min 51 s against 15 min 42 s, benchmarks/results/history.md, "Test suite".)
lint: test-venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The slowest 30 tests close every run's output: where the suite's time goes, run by run.
test: test-venv system-deps lint
	$(BYTECODE) tests
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=30 $(PYTEST_ARGS)

# The inner loop: unit tests that start no Ray, Chromium or GCS emulator and are not marked slow
# (scripts/mark_slow_tests.py marks them from a --durations log). Under 3 minutes on 2 cores.
FAST_MARKERS := not slow and not ray and not browser and not gcs
test-fast: test-venv
	$(PY) -m pytest -q -m "$(FAST_MARKERS)" tests/unit $(PYTEST_ARGS)

bench: test-venv
	$(INSTALL) -e '.[test,tpu,bench]'
	$(PY) benchmarks/executor_overhead.py

clean:
	rm -rf $(VENV) marin_store test-output .pytest_cache
