# Two commands do everything on a fresh machine (Python 3.11 with pip and venv):
#   make run   - the offline end-to-end demo (embedded SQLite store, scripted model)
#   make test  - lint (ruff), format check, type check (mypy strict), the whole pytest suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck pytest bench dev clean requirements

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	LOOPENGINE_DB=$${LOOPENGINE_DB:-.loopengine/demo.db} $(BIN)/loopengine demo --fresh

dev: $(STAMP)
	$(BIN)/loopengine dev

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	scripts/ensure_chromium.sh
	$(BIN)/pytest

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .loopengine .mypy_cache .pytest_cache .ruff_cache
