# Conveyor: every target installs what it needs from the project's own files.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
LOCAL_STAMP := $(VENV)/.local-installed
BENCH_STAMP := $(VENV)/.bench-installed
NODE_STAMP := node_modules/.installed
# The worker requirements' wheels for the Lambda function's platform (infra/worker_package.py: WHEELHOUSE).
WHEELHOUSE := .cache/worker-wheels
WHEELS_STAMP := $(WHEELHOUSE)/.downloaded
CDK := node_modules/.bin/cdk
CDK_OUT := cdk.out
# The committed JSON Schema of the envelope and every payload (`conveyor schema`): the build writes it, lint checks it.
SCHEMA := docs/schema/envelope.schema.json

# Offline, quiet CDK: no telemetry, no version check, no instance-metadata lookups, no
# Node end-of-life banner; caches stay inside the checkout.
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := 1
export AWS_EC2_METADATA_DISABLED := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_RUNTIME_PACKAGE_CACHE_ROOT := $(CURDIR)/.cache/jsii
export CDK_HOME := $(CURDIR)/.cache/cdk
# A deprecated CDK API fails the synth instead of printing a warning nobody reads.
export JSII_DEPRECATED := fail
# Synth needs no account: give the SDK a region and never let it look for credentials.
SYNTH_ENV := AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1

.PHONY: help setup lint typecheck unit synth cfn-lint test demo chaos bench diff deploy schema api-docs dist clean

help:
	@echo "make demo    - the whole platform on this machine, a scenario run end to end and checked"
	@echo "make test    - lint, type-check, tests, cdk synth with cdk-nag, cfn-lint"
	@echo "make synth   - cdk synth into $(CDK_OUT)/, offline, no credentials"
	@echo "make diff    - cdk diff against your AWS account (needs credentials)"
	@echo "make deploy  - cdk deploy to your AWS account (needs credentials)"
	@echo "make chaos   - 10,000 jobs under crashes, kills, throttles and bad input; writes docs/reliability.md"
	@echo "make bench   - benchmarks against anchors run beside them; writes docs/benchmarks.md and bench/results.json"
	@echo "make dist    - the conveyor wheel and sdist into dist/"
	@echo "make api-docs - regenerate docs/api.md, the public API, from the code"

# docs/api.md from the packages' __all__; tests/unit/test_api_reference.py fails when it is stale.
api-docs: $(PY_STAMP)
	$(BIN)/python scripts/api_reference.py --output docs/api.md

# `make demo` needs only the runtime and the `local` extra (moto's server, click): about a third of
# what `make test` installs on top (the CDK, linters, stubs), in the same venv.
$(LOCAL_STAMP): pyproject.toml
	test -x $(BIN)/python || { $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --quiet --upgrade pip; }
	$(BIN)/python -m pip install --quiet -e '.[local]'
	touch $@

# requirements-dev.txt is `-e .[dev]`: the project with every extra, the pins all in pyproject.toml.
$(PY_STAMP): $(LOCAL_STAMP) requirements.txt requirements-dev.txt
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

# The wheel and the sdist into dist/ (the wheel built from the sdist, so the sdist is complete), the schema refreshed.
dist: $(PY_STAMP) schema
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Downloaded at install time, so synth and the tests bundle the worker requirements offline.
$(WHEELS_STAMP): $(PY_STAMP) pyproject.toml
	$(BIN)/python -m scripts.worker_wheels
	touch $@

setup: $(PY_STAMP) $(NODE_STAMP) $(WHEELS_STAMP)

lint: $(PY_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/conveyor schema --check $(SCHEMA)

typecheck: $(PY_STAMP)
	$(BIN)/mypy

# pytest-xdist workers: two per core, as most tests wait (on long polls, workers' threads, child
# processes) rather than compute. `make unit PYTEST_WORKERS=auto` for one per core.
PYTEST_WORKERS ?= $(shell echo $$(( $$(getconf _NPROCESSORS_ONLN) * 2 )))

# The tests of one session synth share a worker (tests/infra/conftest.py), and that synth is written
# to $(CDK_OUT) for `make test`'s cfn-lint.
unit: $(PY_STAMP) $(WHEELS_STAMP)
	rm -rf $(CDK_OUT)
	$(SYNTH_ENV) CONVEYOR_CDK_OUT=$(CURDIR)/$(CDK_OUT) $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

synth: setup schema
	rm -rf $(CDK_OUT)
	$(SYNTH_ENV) $(CDK) synth --quiet --no-notices --output $(CDK_OUT)

cfn-lint: synth
	$(BIN)/cfn-lint $(CDK_OUT)/*.template.json

# cfn-lint lints the template the tests synthesized (the same app and topology `make synth` builds)
# rather than synthesizing it a second time through the CDK CLI.
test: lint typecheck unit
	$(BIN)/cfn-lint $(CDK_OUT)/*.template.json

schema: $(PY_STAMP)
	$(BIN)/conveyor schema --output $(SCHEMA)

# CHAOS_ARGS="--seed 2 --quick" to replay a seed or run the short mix; python -m chaos --help lists them.
chaos: $(PY_STAMP)
	$(BIN)/python -m chaos $(CHAOS_ARGS)

# The `bench` extra (Celery on kombu's SQS transport, the Celery row) on top of everything `make test` has.
$(BENCH_STAMP): $(PY_STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $@

# BENCH_ARGS="--quick" for tiny sizes; python -m bench --help lists them.
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

demo: $(LOCAL_STAMP)
	$(BIN)/conveyor local demo

diff: setup
	$(CDK) diff

deploy: setup
	$(CDK) deploy --require-approval broadening

clean:
	rm -rf $(VENV) node_modules $(CDK_OUT) .cache .mypy_cache .pytest_cache .ruff_cache
