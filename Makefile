# Two entry points, both safe on a fresh machine: each creates .venv and installs runner
# (with its dev tools) before doing anything else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo test unit lint docs

# The benchmarks are scripts that import their neighbours (common, fakes) by name, typed
# against the library they measure so that a change of its API cannot leave them failing
# unseen; with a cache of their own, as runner's check and theirs take different options.
BENCH_MYPY := MYPYPATH=benchmarks:benchmarks/peers $(BIN)/mypy --follow-imports=silent \
	--explicit-package-bases --cache-dir .mypy_cache/benchmarks benchmarks

$(BIN)/runner: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(BIN)/runner

install: $(BIN)/runner

demo: install
	$(BIN)/runner run examples/calculator.py:agent "What is (2 + 3) * 7?"

# The whole suite, spread over every core (pytest-xdist): each worker process gets its own
# PostgreSQL database and its own temporary folders. The layers run fastest first (the
# order of testpaths in pyproject.toml, kept by -n's default --dist load).
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict runner
	$(BENCH_MYPY)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest -n auto

# The fast layer alone: no database, no subprocess; seconds.
unit: install
	$(BIN)/python -m pytest tests/unit -q

# The manual (mkdocs.yml, docs/) as a site in site/; `.venv/bin/mkdocs serve` shows it live.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict runner
