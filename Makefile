# Two commands do everything on a fresh machine (Python 3.11 with pip and venv):
#   make run   - the offline end-to-end demo (embedded SQLite store, scripted model); installs only the
#                runtime dependencies into .venv
#   make test  - lint (ruff), format check, type check (mypy strict), the whole pytest suite in parallel
#                (pytest-xdist); adds the dev tools to .venv
# Daily loop: make dev [PORT=8787] serves the HTTP API on the same SQLite store the demo writes
# ($LOOPENGINE_DB, default .loopengine/loopengine.db).
PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
STAMP   := $(VENV)/.installed
PORT    ?= 8787
# pytest-xdist workers, one per CPU: on 2 cores, 2 workers measured no slower than 3 or 4
JOBS    ?= auto
STORE   := $${LOOPENGINE_DB:-.loopengine/loopengine.db}

.PHONY: run test lint typecheck pytest bench dev clean requirements openapi

# stamp 1: the package and its runtime dependencies, all that `make run` and `make dev` need
$(RUNTIME): pyproject.toml
	@echo "== installing loopengine and its runtime dependencies into $(VENV)"
	@echo "   (boto3, aws-lambda-powertools, pydantic, anthropic, httpx, jsonschema, pyyaml: about 35"
	@echo "   packages, 130 MB; under a minute the first time, seconds after that)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar off -e .
	touch $@

# stamp 2: plus the dev tools, added on top of stamp 1 the first time `make test` runs
$(STAMP): $(RUNTIME) pyproject.toml
	@echo "== adding the dev tools to $(VENV)"
	@echo "   (pytest + xdist, hypothesis, schemathesis, moto, ruff, mypy, boto3-stubs, cfn-lint, selenium: about 80"
	@echo "   more packages, 400 MB; a minute or two the first time)"
	$(BIN)/python -m pip install --progress-bar off -e '.[dev]'
	touch $@

run: $(RUNTIME)
	LOOPENGINE_DB=$(STORE) $(BIN)/loopengine demo

dev: $(RUNTIME)
	LOOPENGINE_DB=$(STORE) $(BIN)/loopengine dev --port $(PORT)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	scripts/ensure_chromium.sh
	$(BIN)/pytest -n $(JOBS)

test: lint typecheck pytest

# docs/openapi.json: the OpenAPI document generated from the routes' models (a test checks it is current)
openapi: $(RUNTIME)
	$(BIN)/python -m handlers.openapi > docs/openapi.json

bench: $(STAMP)
	$(BIN)/python bench/run.py

requirements:
	$(PYTHON) scripts/gen_requirements.py

clean:
	rm -rf $(VENV) .loopengine .mypy_cache .pytest_cache .ruff_cache
