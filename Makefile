# Two entry points, both safe on a fresh machine: each creates .venv and installs runner
# (with its dev tools) before doing anything else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint

$(BIN)/runner: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(BIN)/runner

install: $(BIN)/runner

demo: install
	$(BIN)/runner run examples/calculator.py:agent "What is (2 + 3) * 7?"

test: install
	$(BIN)/ruff check .
	$(BIN)/mypy --strict runner
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy --strict runner
