# Every target installs what it needs into a local virtualenv (.venv) first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint simulate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## The embedded default: a local multi-node cluster, then an audit of its histories.
demo: $(STAMP)
	$(BIN)/coordinated demo

## Lint, type-check and run every test (CI runs exactly this).
test: lint
	$(BIN)/pytest

## The quick loop: lint and the tests not marked slow, spark or integration.
test-fast: lint
	$(BIN)/pytest -m "not slow and not spark and not integration and not e2e"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

simulate: $(STAMP)
	$(BIN)/coordinated simulate

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
