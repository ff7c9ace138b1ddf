# Two entry points, both safe on a fresh machine: `make demo` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
SC := $(VENV)/bin/servecheck

.PHONY: setup demo test check test-deps lint bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

# The optional Ray extra (--ray), which the tests exercise on a local cluster; `make demo` does without it.
$(VENV)/.ray-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[ray]'
	touch $@

demo: setup
	$(SC) demo

# System packages the tests need (headless chromium for the HTML report test).
test-deps:
	bash scripts/install-test-deps.sh

# The habits: the import layers, ruff over src, tests, benchmarks and scripts, mypy over src, tests and scripts
# (pyproject.toml).
lint: setup
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/mypy

# `make test` runs the tests that need no real engine the way `make check` does (below: three pytest
# runs, about 5 min), then the real engines one test at a time, with the machine to themselves. The
# earlier first phase, all of them on two workers, took 601-656 s and put the fresh clone over the
# 25-minute budget (1753 s at 0cfbcee, benchmarks/results/suite_times.jsonl). docs/testing.md
ENGINES := -m "engine or vllm or mlx or alone"

# `make check` (everything but the real engines) splits them to fit 5 minutes on 2 cores. Most of their
# time is the simulator's sleeps: the `timing` tests (149 of them, 640 test-seconds, a tenth of it CPU)
# run on four workers in a phase of their own, longest first (tests/conftest.py), collected from their
# files only (more workers collecting the whole tree cost 20 s); the CPU-heavy rest on two. Eight timing
# workers left the client late beyond what its own lateness judge allows on the simulator's short
# requests (docs/client.md), and those tests undecided, once every command consulted it. Four
# workers over everything took 4.6 min, but 2 of 5 runs went red on a timing test that a CPU-heavy
# neighbour shook (benchmarks/results/check_times.jsonl).
CHECK_WORKERS := -n 2
TIMING_WORKERS := -n 4 --maxschedchunk 1 --longest-first
TIMING_FILES = $(shell grep -l 'pytest.mark.timing' tests/test_*.py)

check: setup lint
	$(PY) -m pytest -q -ra $(CHECK_WORKERS) -m "not engine and not vllm and not mlx and not alone and not timing"; first=$$?; \
	$(PY) -m pytest -q -ra $(TIMING_WORKERS) -m "timing and not engine and not vllm and not mlx and not alone" $(TIMING_FILES); second=$$?; \
	$(PY) -m pytest -q -ra -m "alone and not engine and not vllm and not mlx"; third=$$?; \
	test $$first -eq 0 && test $$second -eq 0 && test $$third -eq 0

# Everything, real engines included; every skip must be a platform fact (tests/conftest.py).
test: setup $(VENV)/.ray-installed test-deps lint
	$(SC) cache build --vllm
	$(SC) cache build --engines mlx
	# both runs always run (a failure in the first must not hide the engines'); either failing fails the target
	export SERVECHECK_STRICT_SKIPS=1; \
	$(PY) -m pytest -q -ra $(CHECK_WORKERS) -m "not engine and not vllm and not mlx and not alone and not timing" --durations=10; first=$$?; \
	$(PY) -m pytest -q -ra $(TIMING_WORKERS) -m "timing and not engine and not vllm and not mlx and not alone" --durations=10 $(TIMING_FILES); second=$$?; \
	$(PY) -m pytest -q -ra $(ENGINES) --durations=25; third=$$?; \
	test $$first -eq 0 && test $$second -eq 0 && test $$third -eq 0

bench: setup
	$(PY) benchmarks/run_all.py
