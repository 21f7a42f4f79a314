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
# The AWS SAM CLI in an environment of its own: it pins an exact boto3 (older than the project's),
# which would hold the project's environment back. tests/test_sam_local.py asks its providers
# what `sam local start-api` / `sam local invoke` do; `.venv-sam/bin/sam local ...` needs Docker.
SAM_VENV  ?= .venv-sam
SAM_CLI   ?= aws-sam-cli>=1.120,<2
SAM_STAMP := $(SAM_VENV)/.installed

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

$(SAM_STAMP):
	@echo "== installing the AWS SAM CLI into $(SAM_VENV) (its own environment: it pins boto3;"
	@echo "   about a minute the first time; used by tests/test_sam_local.py)"
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --progress-bar off '$(SAM_CLI)'
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

# the SAM CLI environment is built only here, after lint and the type check have had their say
pytest: $(STAMP) | $(SAM_STAMP)
	scripts/ensure_chromium.sh
	scripts/ensure_redis.sh
	$(BIN)/pytest -n $(JOBS)

test: lint typecheck pytest

# docs/openapi.json: the OpenAPI document generated from the routes' models (a test checks it is current)
openapi: $(RUNTIME)
	$(BIN)/python -m loopengine.http.openapi > docs/openapi.json

bench: $(STAMP)
	$(BIN)/python bench/run.py

requirements:
	$(PYTHON) scripts/gen_requirements.py

clean:
	rm -rf $(VENV) $(SAM_VENV) .loopengine .mypy_cache .pytest_cache .ruff_cache
