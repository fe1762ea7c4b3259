# Every target sets itself up: a fresh clone needs only python3 (3.11+), go and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-crewai test-frameworks test-openai-agents-v2 lint unit e2e-components system-packages bench clean

$(STAMP): pyproject.toml setup.py constraints.txt otel_blame/processor/_wire.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,otlp,processor,autogen,ag2,openai-agents,langgraph,thirdparty-tests,agentchat,ui,postgres]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/otel-blame demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The real OpenTelemetry Collector and Jaeger for the end-to-end tests (tests/e2e), built from pinned
# Go modules and cached under ~/.cache/otel-blame-e2e; a no-op when the pins have not changed.
# Go's default install location counts too, for shells whose PATH lacks it.
e2e-components:
	@PATH="$$PATH:/usr/local/go/bin"; command -v go >/dev/null 2>&1 || { echo "ERROR: Go is required to build the end-to-end components (deploy/build_components.sh)" >&2; exit 1; }
	PATH="$$PATH:/usr/local/go/bin" deploy/build_components.sh

# Prometheus, promtool and Alertmanager for the alerting end-to-end test (tests/e2e/test_alerting_e2e.py),
# from the Debian packages; a no-op when the binaries are there. Runs as root, or through sudo when that
# exists; otherwise it says so and the tests that need them skip, except in CI (.ci/run sets
# OTEL_BLAME_STRICT_SKIPS=1), where a package that cannot be installed fails `make test` instead of
# hiding tests. Services are never started: a policy-rc.d that forbids it is put in place for the
# install when the system has none.
# Also Chromium + chromedriver for the web UI's browser tests (tests/ui) and the PostgreSQL server for the
# shared blame store tests (tests/store), both from Debian.
SYSTEM_BINARIES := /usr/bin/promtool /usr/bin/prometheus /usr/bin/prometheus-alertmanager \
	/usr/bin/chromium /usr/bin/chromedriver /usr/bin/pg_ctlcluster
system-packages:
	@missing=""; for bin in $(SYSTEM_BINARIES); do [ -x "$$bin" ] || missing="$$missing $$bin"; done; \
	if [ -z "$$missing" ]; then echo "system packages: prometheus, alertmanager, chromium, chromedriver, postgresql present"; exit 0; fi; \
	echo "system packages: missing$$missing; installing prometheus prometheus-alertmanager chromium chromium-driver postgresql"; \
	cannot() { case "$${OTEL_BLAME_STRICT_SKIPS:-}" in 1|true|yes|on) \
		echo "ERROR: $$1; the alerting end-to-end tests cannot run (CI does not allow them to skip)" >&2; exit 1;; \
		*) echo "WARNING: $$1; the alerting end-to-end tests will skip" >&2; exit 0;; esac; }; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; \
	elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; \
	else cannot "not root and no sudo: cannot install them"; fi; \
	command -v apt-get >/dev/null 2>&1 || cannot "no apt-get here; install Prometheus and Alertmanager yourself"; \
	policy=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
		printf '#!/bin/sh\nexit 101\n' | $$SUDO tee /usr/sbin/policy-rc.d >/dev/null && $$SUDO chmod 755 /usr/sbin/policy-rc.d && policy=1; fi; \
	status=0; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		prometheus prometheus-alertmanager chromium chromium-driver postgresql || status=$$?; \
	if [ -n "$$policy" ]; then $$SUDO rm -f /usr/sbin/policy-rc.d; fi; \
	exit $$status

# CrewAI cannot share .venv (constraints-crewai.txt says why): its tests run in an environment of their
# own, with the same opentelemetry, pydantic and protobuf pins.
CREWAI_VENV ?= .venv-crewai
CREWAI_STAMP := $(CREWAI_VENV)/.installed

$(CREWAI_STAMP): pyproject.toml constraints-crewai.txt
	$(PYTHON) -m venv $(CREWAI_VENV)
	$(CREWAI_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CREWAI_VENV)/bin/python -m pip install --quiet -c constraints-crewai.txt -e '.[dev,processor,crewai,crewai-tests]'
	touch $(CREWAI_STAMP)

CREWAI_CONVENTIONS_TESTS := tests/conventions/real/crewai_env

test-crewai: $(CREWAI_STAMP)
	$(CREWAI_VENV)/bin/python -m pytest -q tests/instrument/test_crewai.py tests/inject/zoo/test_crew.py \
		$(CREWAI_CONVENTIONS_TESTS)

# Strands, Google ADK, LlamaIndex and Semantic Kernel cannot share .venv either (constraints-frameworks.txt says
# why): their real-package tests (tests/conventions/real/frameworks_env) run in one environment of their own.
FRAMEWORKS_VENV ?= .venv-frameworks
FRAMEWORKS_STAMP := $(FRAMEWORKS_VENV)/.installed
FRAMEWORKS_TESTS := tests/conventions/real/frameworks_env

$(FRAMEWORKS_STAMP): pyproject.toml constraints-frameworks.txt
	$(PYTHON) -m venv $(FRAMEWORKS_VENV)
	$(FRAMEWORKS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FRAMEWORKS_VENV)/bin/python -m pip install --quiet -c constraints-frameworks.txt -e '.[dev,processor,frameworks-tests]'
	touch $(FRAMEWORKS_STAMP)

test-frameworks: $(FRAMEWORKS_STAMP)
	$(FRAMEWORKS_VENV)/bin/python -m pytest -q $(FRAMEWORKS_TESTS)

# contrib's opentelemetry-instrumentation-openai-agents-v2 installs the same module as OpenLLMetry's
# opentelemetry-instrumentation-openai-agents (opentelemetry.instrumentation.openai_agents), which .venv has:
# it is installed alone (its dependencies are .venv's, pinned in constraints.txt) into a directory put first
# on PYTHONPATH for its tests.
OPENAI_AGENTS_V2_DIR ?= .venv-openai-agents-v2
OPENAI_AGENTS_V2_STAMP := $(OPENAI_AGENTS_V2_DIR)/.installed
OPENAI_AGENTS_V2_TESTS := tests/conventions/real/openai_agents_v2_env

$(OPENAI_AGENTS_V2_STAMP): $(STAMP) constraints.txt
	rm -rf $(OPENAI_AGENTS_V2_DIR)
	$(PY) -m pip install --quiet --no-deps --target $(OPENAI_AGENTS_V2_DIR) \
		"opentelemetry-instrumentation-openai-agents-v2==$$(sed -n 's/^opentelemetry-instrumentation-openai-agents-v2==//p' constraints.txt)"
	touch $(OPENAI_AGENTS_V2_STAMP)

test-openai-agents-v2: $(OPENAI_AGENTS_V2_STAMP)
	PYTHONPATH=$(OPENAI_AGENTS_V2_DIR) $(PY) -m pytest -q $(OPENAI_AGENTS_V2_TESTS)

test: $(STAMP) lint e2e-components system-packages test-crewai test-frameworks test-openai-agents-v2
	$(PY) -m pytest -q --ignore=tests/instrument/test_crewai.py --ignore=tests/inject/zoo/test_crew.py \
		$(addprefix --ignore=,$(FRAMEWORKS_TESTS) $(OPENAI_AGENTS_V2_TESTS) $(CREWAI_CONVENTIONS_TESTS))

clean:
	rm -rf $(VENV) $(CREWAI_VENV) $(FRAMEWORKS_VENV) $(OPENAI_AGENTS_V2_DIR) .pytest_cache .ruff_cache *.egg-info
