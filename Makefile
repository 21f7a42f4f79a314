# Two commands do everything on a fresh machine (Python 3.11 with pip and venv):
#   make run   - the offline end-to-end demo (embedded SQLite store, scripted model); installs only the
#                runtime lock (src/requirements.txt) into .venv
#   make test  - lint (ruff), format check, type check (mypy strict), then the pytest suite in parallel
#                (pytest-xdist): the fast tests, then (building the SAM CLI environment once) the slow
#                ones; installs the dev lock (requirements-dev.txt) into .venv
# Daily loop: make dev [PORT=8787] serves the HTTP API on the same SQLite store the demo writes
# ($LOOPENGINE_DB, default .loopengine/loopengine.db).
# Versions come from the hashed locks only (scripts/gen_requirements.py writes them from pyproject.toml:
# `make lock`, `make lock UPGRADE=1`), installed by uv (itself locked in requirements-uv.txt and
# installed with the machine's pip); INSTALLER=pip installs the same locks with pip instead (slower).
PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
STAMP   := $(VENV)/.installed
PORT    ?= 8787
# pytest-xdist workers (`--dist loadgroup`: tests marked with one xdist_group run on one worker, so one
# worker imports what only they use): one per CPU and one more, for the time tests spend waiting on the servers and
# processes they start (measured back to back on 2 cores: 3 workers 212 s, 2 workers 257 s)
JOBS    ?= $(shell $(PYTHON) -c "import os; print((os.cpu_count() or 1) + 1)")
STORE   := $${LOOPENGINE_DB:-.loopengine/loopengine.db}
RUNTIME_LOCK := src/requirements.txt
DEV_LOCK     := requirements-dev.txt
UV_LOCK      := requirements-uv.txt
INSTALLER    ?= uv
# uv lives beside the environment, not in it: `uv pip sync` makes .venv exactly a lock
UV_HOME := $(VENV)/.uv
UV      := $(UV_HOME)/bin/uv
# copies, not hard links into uv's cache (which may be on another file system)
export UV_LINK_MODE ?= copy
# Bytecode is cached (in .venv and the tree's __pycache__, both ignored by git) even where the shell
# sets PYTHONDONTWRITEBYTECODE (container images often do): without the cache every interpreter the
# tests start (xdist workers, loopengine dev and its environments, the CLI, SAM CLI) compiles every
# module it imports from source again; measured: collecting the suite 24.7 s without, 10.7 s with.
unexport PYTHONDONTWRITEBYTECODE
# `sam build` builds the functions with the interpreter of their Runtime (template.yaml) found on PATH
LAMBDA_PYTHON ?= python3.12
LAMBDA_VERSION := $(patsubst python%,%,$(LAMBDA_PYTHON))
# The AWS SAM CLI in an environment of its own: it pins an exact boto3 (older than the project's),
# which would hold the project's environment back. tests/test_sam_local.py asks its providers
# what `sam local start-api` / `sam local invoke` do; `.venv-sam/bin/sam local ...` needs Docker.
SAM_VENV  ?= .venv-sam
SAM_CLI   ?= aws-sam-cli>=1.120,<2
SAM_STAMP := $(SAM_VENV)/.installed

.PHONY: run test lint typecheck pytest bench dev clean lock requirements openapi build check-build-python \
  compile-build

# the installer: uv, from its hashed lock, with the machine's pip (`pip --target`: no pip in .venv needed)
$(UV): $(UV_LOCK)
	@echo "== installing the installer, uv (pinned in $(UV_LOCK)), into $(UV_HOME)"
	rm -rf $(UV_HOME)
	PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install --progress-bar off --disable-pip-version-check \
	  --no-warn-script-location --require-hashes --target $(UV_HOME) -r $(UV_LOCK)
	touch $@

ifeq ($(INSTALLER),pip)
# the same locks, by pip: a venv with pip in it, packages added (pip has no sync)
define install_lock
	test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar off --disable-pip-version-check --require-hashes -r $(1)
	$(BIN)/python -m pip install --progress-bar off --disable-pip-version-check --no-deps -e .
endef
INSTALLER_DEP :=
else
# `uv pip sync`: the environment becomes exactly the lock (hash-checked), then loopengine itself, editable
define install_lock
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	$(UV) pip sync --python $(BIN)/python --require-hashes $(1)
	$(UV) pip install --python $(BIN)/python --no-deps -e .
endef
INSTALLER_DEP := $(UV)
endif

# stamp 1: the package and its runtime lock, all that `make run` and `make dev` need
$(RUNTIME): pyproject.toml $(RUNTIME_LOCK) | $(INSTALLER_DEP)
	@echo "== installing loopengine and its runtime dependencies into $(VENV) with $(INSTALLER), from the lock"
	@echo "   $(RUNTIME_LOCK) (boto3, aws-lambda-powertools, pydantic, anthropic, httpx, jsonschema, pyyaml,"
	@echo "   redis, jinja2, mcp, cryptography: $(shell grep -c '^[A-Za-z0-9].*==' $(RUNTIME_LOCK)) pins, every file hash-checked;"
	@echo "   130 MB; under 10 s with uv on an idle 2-core machine, about a minute with INSTALLER=pip)"
	$(call install_lock,$(RUNTIME_LOCK))
	touch $@

# stamp 2: the dev lock (the runtime pins plus the dev tools), the first time `make test` runs
$(STAMP): $(RUNTIME) $(DEV_LOCK)
	@echo "== installing the dev tools into $(VENV) with $(INSTALLER), from the lock $(DEV_LOCK)"
	@echo "   (pytest + xdist, hypothesis, schemathesis, moto, ruff, mypy, boto3-stubs, cfn-lint, selenium:"
	@echo "   $(shell grep -c '^[A-Za-z0-9].*==' $(DEV_LOCK)) pins with the runtime ones, 400 MB; seconds with uv)"
	$(call install_lock,$(DEV_LOCK))
	touch $@

$(SAM_STAMP):
	@echo "== installing the AWS SAM CLI into $(SAM_VENV) (its own environment: it pins boto3;"
	@echo "   about a minute the first time; used by tests/test_sam_local.py and make build)"
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --progress-bar off '$(SAM_CLI)'
	touch $@

run: $(RUNTIME)
	LOOPENGINE_DB=$(STORE) $(BIN)/loopengine demo

dev: $(RUNTIME)
	LOOPENGINE_DB=$(STORE) $(BIN)/loopengine dev --port $(PORT)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts examples
	$(BIN)/ruff format --check src tests bench scripts examples

typecheck: $(STAMP)
	$(BIN)/mypy

# The first time (no SAM CLI environment yet): the fast tests, then the SAM CLI environment (about 6
# minutes cold), then the slow tests and SAM CLI's (-m slow / sam: pyproject.toml's markers), so lint,
# types and the fast tests have their say before the long build. Later: the whole suite in one run.
ifeq ($(wildcard $(SAM_STAMP)),)
pytest: $(STAMP)
	scripts/ensure_redis.sh
	scripts/ensure_node.sh
	$(BIN)/pytest -n $(JOBS) --dist loadgroup -m "not slow and not sam"
	@$(MAKE) --no-print-directory $(SAM_STAMP)
	scripts/ensure_chromium.sh
	$(BIN)/pytest -n $(JOBS) --dist loadgroup -m "slow or sam"
else
pytest: $(STAMP)
	scripts/ensure_redis.sh
	scripts/ensure_node.sh
	scripts/ensure_chromium.sh
	$(BIN)/pytest -n $(JOBS) --dist loadgroup
endif

# lint and the type check first: their verdict comes in seconds, before any test runs
test: lint typecheck pytest

# docs/openapi.json: the OpenAPI document generated from the routes' models (a test checks it is current)
openapi: $(RUNTIME)
	$(BIN)/python -m loopengine.http.openapi > docs/openapi.json

# bench/run.py (cold start, per-turn overhead, requests per step), then bench/peers/run.py: loopengine
# against LangGraph's DynamoDB saver on the common scenario, side by side. The latter builds
# .venv-peers (LangGraph, langgraph-checkpoint-aws; never a product dependency) from the hashed lock
# bench/peers/requirements.txt the first time, and writes bench/results/peers.json
bench: $(STAMP)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/peers/run.py

# re-lock from pyproject.toml (keeps every pin it still allows; UPGRADE=1: the newest it allows)
lock: $(UV)
	$(PYTHON) scripts/gen_requirements.py --uv $(UV) $(if $(UPGRADE),--upgrade)

requirements: lock

# `sam build` (CodeUri src/ installs the runtime lock src/requirements.txt) after checking what it needs:
# python3.12 on PATH (with pip) and a current lock. SAM_BUILD_ARGS: e.g. --use-container (needs Docker).
build: $(if $(findstring --use-container,$(SAM_BUILD_ARGS)),,check-build-python) $(STAMP) | $(SAM_STAMP)
	$(BIN)/python scripts/gen_requirements.py --check
	$(SAM_VENV)/bin/sam build $(SAM_BUILD_ARGS)
	$(MAKE) --no-print-directory compile-build

# Bytecode for what sam build made: it unpacks wheels and copies src/ as source, and Lambda cannot
# write a cache into its read-only /var/task, so an uncompiled package compiles every module it
# imports on every cold start without SnapStart (measured: docs/performance.md "Cold start").
# Compiled by the runtime's Python; unchecked-hash: each .pyc is used as it is, whatever times the
# deployment zip gives the sources. No python3.12 here (a container build): said, and skipped.
SAM_BUILD_DIR ?= .aws-sam/build
compile-build:
	@if $(LAMBDA_PYTHON) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(LAMBDA_VERSION)")' 2>/dev/null; \
	then $(LAMBDA_PYTHON) -m compileall -q -j 0 --invalidation-mode unchecked-hash $(SAM_BUILD_DIR); \
	else echo "make build: no $(LAMBDA_PYTHON) here, so $(SAM_BUILD_DIR) ships without bytecode" >&2; fi

check-build-python:
	@$(LAMBDA_PYTHON) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(LAMBDA_VERSION)")' 2>/dev/null || { \
	  echo "make build: sam build needs $(LAMBDA_PYTHON) on PATH (the functions' Runtime in template.yaml)," >&2; \
	  echo "  and '$(LAMBDA_PYTHON)' here is: $$($(LAMBDA_PYTHON) --version 2>&1 | head -1)" >&2; \
	  echo "  Install Python 3.12 (apt-get install python3.12, or pyenv install 3.12 and put it on PATH)," >&2; \
	  echo "  or build in Lambda's image: make build SAM_BUILD_ARGS=--use-container (needs Docker)." >&2; \
	  exit 1; }
	@$(LAMBDA_PYTHON) -m pip --version >/dev/null 2>&1 || { \
	  echo "make build: $(LAMBDA_PYTHON) has no pip, which sam build installs the functions' packages with:" >&2; \
	  echo "  $(LAMBDA_PYTHON) -m ensurepip --upgrade" >&2; exit 1; }

clean:
	rm -rf $(VENV) $(SAM_VENV) .loopengine .mypy_cache .pytest_cache .ruff_cache
