# Two commands do everything on a fresh machine (Python 3.11 with pip and venv):
#   make run   - the offline end-to-end demo (embedded SQLite store, scripted model)
#   make test  - lint (ruff), format check, type check (mypy strict), the whole pytest suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The AWS SAM CLI in an environment of its own: it pins an exact boto3 (older than the project's),
# which would hold the project's environment back. tests/test_sam_local.py asks its providers
# what `sam local start-api` / `sam local invoke` do; `.venv-sam/bin/sam local ...` needs Docker.
SAM_VENV  ?= .venv-sam
SAM_CLI   ?= aws-sam-cli>=1.120,<2
SAM_STAMP := $(SAM_VENV)/.installed

.PHONY: run test lint typecheck pytest bench dev clean requirements

$(STAMP): pyproject.toml | $(SAM_STAMP)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(SAM_STAMP):
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet '$(SAM_CLI)'
	touch $(SAM_STAMP)

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
	rm -rf $(VENV) $(SAM_VENV) .loopengine .mypy_cache .pytest_cache .ruff_cache
