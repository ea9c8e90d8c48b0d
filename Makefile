# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both install what they need first: `make demo` a .venv with the runtime and the local runtime
# only (no browser, no CDK, no npm, no root); `make test` all of it (`make install`: the dev tools,
# from npm the CDK CLI and the Node it runs on, and the browser the browser tests drive).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# node_modules/.bin first: `node` there is package.json's Node 22 (the npm package `node`), so
# the CDK CLI, asl-validator and the jsii runtime of the Python tests all run on it.
export PATH := $(CURDIR)/$(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
# The CDK's Python library runs its Node with two V8 flags that cut a synthesis's CPU by two
# fifths (infra/cdk/jsii-node says why); a JSII_NODE of your own wins.
export JSII_NODE ?= $(CURDIR)/infra/cdk/jsii-node
export CDK_DISABLE_VERSION_CHECK := 1
# Nor its usage telemetry (CDK CLI 2.1100 and later): a process of its own after each command,
# sending to AWS. `make deploy` included: a developer who wants it sends it with `cdk` itself.
export CDK_DISABLE_CLI_TELEMETRY := true
# Python keeps each module's compiled bytecode beside it, for the next process to read. Container
# images often set PYTHONDONTWRITEBYTECODE; then every process the tests start (a server, a CLI
# command, a tool call's host) compiled boto3, moto and toolpipe from source again: importing
# the local runtime took 2.7 s of CPU instead of 0.76 s.
unexport PYTHONDONTWRITEBYTECODE
# The browser the browser tests drive (tests/e2e/test_approval_page_browser.py): Debian's
# Chromium, which `make install` installs when it is missing. Elsewhere, point it at a Chrome or
# Chromium of your own: `make test CHROMIUM=/path/to/chrome`.
CHROMIUM ?= /usr/bin/chromium
export TOOLPIPE_CHROMIUM := $(CHROMIUM)

PROMPT ?= What is the square root of 475695037565?

.PHONY: install browser demo test lint docs docs-check unit reliability openapi synth local-template check-deploy deploy bench clean event-schemas reference light-install lock

install: $(VENV)/.installed node_modules/.installed browser

# With uv, the installer the `lock` extra already uses: downloads in parallel, about a tenth of
# pip's time here (a fresh clone's install: 22 s against 136 s; here it resolved the same
# versions). pip installs uv itself. uv reads none of pip's configuration (pip.conf, PIP_*: an
# index mirror, a certificate, find-links), so where uv cannot install, pip does, as before.
# The example app (pyproject.toml's [tool.toolpipe] app) is resolved with toolpipe, so its
# toolpipe is this checkout.
UV := $(BIN)/uv
DEV_PACKAGES := -e '.[dev]' -e examples/assistant
$(VENV)/.installed: pyproject.toml examples/assistant/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'uv>=0.9'
	$(UV) pip install --quiet --python $(BIN)/python --upgrade pip $(DEV_PACKAGES) \
	  || { echo "make install: uv could not install; pip installs instead (slower)" >&2; \
	       $(BIN)/python -m pip install --quiet --disable-pip-version-check $(DEV_PACKAGES); }
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Once the browser is there, this is one `test -x`. Debian's package, never `playwright
# install` (it downloads a browser of its own, which fails offline). Without the recommends
# (chromium-sandbox): the tests run as root in CI, where Chromium runs --no-sandbox.
# `apt-get update` only when the package lists cannot install it (a fresh machine has none).
browser:
	@test -x "$(CHROMIUM)" && exit 0; \
	if [ "$$(id -u)" = 0 ]; then sudo=; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo=sudo; \
	else echo "make install: $(CHROMIUM) is missing and installing Debian's chromium needs root: run 'sudo apt-get install -y chromium', or make test CHROMIUM=/path/to/chrome" >&2; exit 1; fi; \
	if ! command -v apt-get >/dev/null; then echo "make install: $(CHROMIUM) is missing and there is no apt-get: install Chromium or Chrome, then make test CHROMIUM=/path/to/it" >&2; exit 1; fi; \
	echo "make install: installing Debian's chromium for the browser tests"; \
	install="$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium"; \
	$$install >/dev/null 2>&1 || { $$sudo apt-get update -qq && $$install >/dev/null; } || exit 1; \
	test -x "$(CHROMIUM)" || { echo "make install: installed Debian's chromium, but $(CHROMIUM) is not there: make test CHROMIUM=/path/to/it" >&2; exit 1; }

# What the demo runs on: toolpipe with its `local` extra (moto) and the example app, in the same
# .venv `make install` completes later (a .venv `make install` made has all of it already). One
# pip resolution; --no-compile: the run compiles the modules it imports, not all of moto's.
$(VENV)/.demo-installed: pyproject.toml examples/assistant/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -e '.[local]' -e examples/assistant
	touch $@

demo: $(if $(wildcard $(VENV)/.installed),$(VENV)/.installed,$(VENV)/.demo-installed)
	$(BIN)/toolpipe run "$(PROMPT)"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Test processes in parallel (pytest-xdist): one process keeps 0.7 of a core busy (the tests
# mostly wait on sockets, threads and subprocesses), so three keep two cores busy; more only
# starve the tests that time themselves. `--dist loadgroup` runs each test file on one worker,
# every tests/infra file on one, the longest first (tests/scheduling.py). `make test
# TEST_WORKERS=0` runs in one process.
TEST_WORKERS ?= 3

# GNU make 4 prints each job's output whole when it ends; 3.81 (macOS's) has no --output-sync.
OUTPUT_SYNC := $(if $(filter 3.%,$(MAKE_VERSION)),,--output-sync=target)
# The installs (the .venv with uv, the CDK CLI with npm, the browser) side by side too, then
# the checks before the tests (mypy alone keeps one core busy for ~90 s; the
# deploy checks, the docs build and the checkov venv's install fit beside it), each one's output
# printed whole when it ends. Any one failing stops `make test` before the tests.
test:
	$(MAKE) --no-print-directory -j 3 $(OUTPUT_SYNC) install
	$(MAKE) --no-print-directory -j 3 $(OUTPUT_SYNC) lint check-deploy docs-check
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15

# The docs site (mkdocs.yml), served with live reload on http://127.0.0.1:8000.
docs: install
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# Built with --strict into a throwaway folder: a broken link or anchor fails it
# (never --quiet: it hides the warnings --strict counts).
docs-check: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$(mktemp -d)"

unit: install
	$(BIN)/python -m pytest tests/unit

# A scaffolded project installed for real, toolpipe's wheel then its `test` extra from pip's index
# (network, so not in `make test`): its tests pass with no CDK installed.
light-install: install
	$(BIN)/python -m pytest -m index tests/e2e/test_light_install.py

# The reliability scenarios only (they also run in `make test`); rewrites docs/RELIABILITY.md.
reliability: install
	TOOLPIPE_RELIABILITY_REPORT=docs/RELIABILITY.md $(BIN)/python -m pytest -m reliability tests/reliability

# Rewrites docs/events/*.json, the run events' JSON Schemas, from the models in shared/runs/events.py.
event-schemas: install
	$(BIN)/python -m toolpipe.infra.reference.event_schemas

# docs/openapi.json, generated from the API handler's routes (a test fails when it is stale).
openapi: install
	$(BIN)/python -m toolpipe.infra.reference.openapi

# The docs site's generated pages, docs/reference/{cli,rest-api,events}.md, from the parser and the
# two documents above (a test fails when they are stale).
reference: openapi event-schemas
	$(BIN)/python -m toolpipe.infra.reference.docs

# The template only, offline (no layers built): for review and checks.
synth: install
	TOOLPIPE_BUNDLE=0 cdk synth --quiet

# The synthesized templates the local runtime is built from: toolpipe's own stack
# (infra/local/stack.template.json) and the example project's CDK app
# (examples/assistant/assistant.template.json). tests/infra/test_local_template.py fails when
# either is stale.
local-template: install
	$(BIN)/python -m toolpipe.infra.local.template
	$(BIN)/python -m toolpipe.infra.local.template examples/assistant

# What AWS checks when it creates the stack, offline, on the template `make synth` makes: cdk-nag,
# our state machine rules, asl-validator, cfn-lint and checkov (infra/cdk/deploy_checks.py). checkov
# has a venv of its own: it pins boto3==1.35.49 and packaging<24, below this project's (README
# "Dependencies").
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := checkov>=3.3.30,<4

$(CHECKOV_VENV)/.installed: $(VENV)/.installed
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(UV) pip install --quiet --python $(CHECKOV_VENV)/bin/python '$(CHECKOV_VERSION)' \
	  || $(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check '$(CHECKOV_VERSION)'
	touch $@

check-deploy: install $(CHECKOV_VENV)/.installed
	$(BIN)/python -m toolpipe.infra.cdk.deploy_checks

# Rewrites the layers' locks (infra/cdk/layers/*.lock: pins and file hashes, for Lambda's Python and
# platform) from infra/cdk/bundling.py's requirements, with uv (the `lock` extra); needs PyPI. Pins
# that still satisfy the ranges stay; `make lock UPGRADE=1` moves each to the newest allowed.
lock: install
	$(UV) pip install --quiet --python $(BIN)/python -e '.[lock]'
	$(BIN)/python -m toolpipe.infra.cdk.bundling $(if $(UPGRADE),--upgrade)

# Builds the layers with pip (needs PyPI), then deploys with your AWS credentials.
deploy: install
	cdk deploy

# Cold starts and bundle sizes (pip builds the layers once, into build/), then figures against
# peers on one scripted server, then a reference run's cost, then the model's rate governor under
# 20 concurrent runs (benchmarks/governor.py); installs the `bench` extra (the
# OpenAI Agents SDK and Pydantic AI) first. `make test` runs each benchmark's --quick mode and
# the start-up guard (tests/e2e/test_benchmarks.py).
bench: install
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[bench]'
	$(BIN)/python -m benchmarks.pipeline
	$(BIN)/python -m benchmarks.calls
	$(BIN)/python -m benchmarks.governor

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) node_modules cdk.out .toolpipe .pytest_cache .mypy_cache .ruff_cache *.egg-info
