# Every target sets itself up: a fresh clone needs only python3 (3.11+), go and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Steps `make test` runs at once (make -j), and pytest-xdist workers per test run; TEST_WORKERS=1 runs
# each suite in one process, in order (pytest's own output, no workers).
TEST_JOBS ?= 8
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST := python -m pytest -q
PYTEST_PARALLEL := $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope)

comma := ,
empty :=
space := $(empty) $(empty)
# $(call timed,STEP,COMMAND): COMMAND, then one line saying how long STEP took and how it ended
# (`make test 2>&1 | grep '^\[step\]'` lists the step timings; docs/benchmarks.md has them).
timed = start=$$(date +%s); $(2); status=$$?; \
	echo "[step] $(1): $$(( $$(date +%s) - start )) s, exit $$status"; exit $$status
# $(call new-venv,DIR,CONSTRAINTS,EXTRAS): a virtual environment with this project installed editable
# with EXTRAS (space-separated), every package pinned by CONSTRAINTS; DIR/.installed marks it done.
define new-venv
	@echo "$(PYTHON) -m venv $(1) && pip install -c $(2) -e '.[$(subst $(space),$(comma),$(strip $(3)))]'"
	@$(call timed,environment $(1),$(PYTHON) -m venv $(1) \
		&& $(1)/bin/python -m pip install --quiet --upgrade pip \
		&& $(1)/bin/python -m pip install --quiet -c $(2) -e '.[$(subst $(space),$(comma),$(strip $(3)))]' \
		&& touch $(1)/.installed)
endef

$(STAMP): pyproject.toml setup.py constraints.txt otel_blame/processor/_wire.c
	$(call new-venv,$(VENV),constraints.txt,dev otlp processor autogen ag2 openai-agents langgraph thirdparty-tests agentchat ui postgres)

demo: $(STAMP)
	$(VENV)/bin/otel-blame demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The real OpenTelemetry Collector, Jaeger and Grafana Tempo for the end-to-end tests (tests/e2e), built
# from pinned Go modules and cached under ~/.cache/otel-blame-e2e; a no-op when the pins have not changed.
# Go's default install location counts too, for shells whose PATH lacks it.
e2e-components:
	@PATH="$$PATH:/usr/local/go/bin"; command -v go >/dev/null 2>&1 || { echo "ERROR: Go is required to build the end-to-end components (deploy/build_components.sh)" >&2; exit 1; }
	@$(call timed,e2e-components (Go builds),PATH="$$PATH:/usr/local/go/bin" deploy/build_components.sh)

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
	status=0; start=$$(date +%s); \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		prometheus prometheus-alertmanager chromium chromium-driver postgresql || status=$$?; \
	if [ -n "$$policy" ]; then $$SUDO rm -f /usr/sbin/policy-rc.d; fi; \
	echo "[step] system-packages: $$(( $$(date +%s) - start )) s, exit $$status"; \
	exit $$status

# --- Environments of their own --------------------------------------------------------------------
# Packages whose pins cannot join constraints.txt get an environment of their own, and its tests run
# there. Adding one is ONE block like each below, nothing else in this file changes:
#
#   NAME_VENV := .venv-NAME
#   $(NAME_VENV)/.installed: pyproject.toml constraints-NAME.txt
#   	$(call new-venv,$(NAME_VENV),constraints-NAME.txt,dev processor EXTRA)
#   NAME_TESTS := tests/...                       (files or directories; kept out of the main run)
#   test-NAME: $(NAME_VENV)/.installed
#   	@$(call timed,test-NAME,$(NAME_VENV)/bin/$(PYTEST) $(NAME_TESTS))
#   ENV_TEST_TARGETS += test-NAME
#   ENV_TESTS += $(NAME_TESTS)
#   ENV_VENVS += $(NAME_VENV)
#
# `make test` builds every environment and runs its tests beside the other steps (see test-steps);
# their paths also belong on tests/allowed_skips.toml, since the main environment cannot import them.
ENV_TEST_TARGETS :=
ENV_TESTS :=
ENV_VENVS :=

# CrewAI cannot share .venv (constraints-crewai.txt says why).
CREWAI_VENV ?= .venv-crewai
$(CREWAI_VENV)/.installed: pyproject.toml constraints-crewai.txt
	$(call new-venv,$(CREWAI_VENV),constraints-crewai.txt,dev processor crewai crewai-tests)
CREWAI_TESTS := tests/instrument/test_crewai.py tests/inject/zoo/test_crew.py tests/conventions/real/crewai_env
test-crewai: $(CREWAI_VENV)/.installed
	@$(call timed,test-crewai,$(CREWAI_VENV)/bin/$(PYTEST) $(CREWAI_TESTS))
ENV_TEST_TARGETS += test-crewai
ENV_TESTS += $(CREWAI_TESTS)
ENV_VENVS += $(CREWAI_VENV)

# Strands, Google ADK, LlamaIndex and Semantic Kernel cannot share .venv either (constraints-frameworks.txt
# says why).
FRAMEWORKS_VENV ?= .venv-frameworks
$(FRAMEWORKS_VENV)/.installed: pyproject.toml constraints-frameworks.txt
	$(call new-venv,$(FRAMEWORKS_VENV),constraints-frameworks.txt,dev processor frameworks-tests)
FRAMEWORKS_TESTS := tests/conventions/real/frameworks_env
test-frameworks: $(FRAMEWORKS_VENV)/.installed
	@$(call timed,test-frameworks,$(FRAMEWORKS_VENV)/bin/$(PYTEST) $(FRAMEWORKS_TESTS))
ENV_TEST_TARGETS += test-frameworks
ENV_TESTS += $(FRAMEWORKS_TESTS)
ENV_VENVS += $(FRAMEWORKS_VENV)

# contrib's opentelemetry-instrumentation-openai-agents-v2 installs the same module as OpenLLMetry's
# opentelemetry-instrumentation-openai-agents (opentelemetry.instrumentation.openai_agents), which .venv has:
# it is installed alone (its dependencies are .venv's, pinned in constraints.txt) into a directory put first
# on PYTHONPATH for its tests.
OPENAI_AGENTS_V2_DIR ?= .venv-openai-agents-v2
$(OPENAI_AGENTS_V2_DIR)/.installed: $(STAMP) constraints.txt
	rm -rf $(OPENAI_AGENTS_V2_DIR)
	@$(call timed,environment $(OPENAI_AGENTS_V2_DIR),$(PY) -m pip install --quiet --no-deps --target $(OPENAI_AGENTS_V2_DIR) \
		"opentelemetry-instrumentation-openai-agents-v2==$$(sed -n 's/^opentelemetry-instrumentation-openai-agents-v2==//p' constraints.txt)" \
		&& touch $(OPENAI_AGENTS_V2_DIR)/.installed)
OPENAI_AGENTS_V2_TESTS := tests/conventions/real/openai_agents_v2_env
test-openai-agents-v2: $(OPENAI_AGENTS_V2_DIR)/.installed
	@$(call timed,test-openai-agents-v2,PYTHONPATH=$(OPENAI_AGENTS_V2_DIR) $(VENV)/bin/$(PYTEST) $(OPENAI_AGENTS_V2_TESTS))
ENV_TEST_TARGETS += test-openai-agents-v2
ENV_TESTS += $(OPENAI_AGENTS_V2_TESTS)
ENV_VENVS += $(OPENAI_AGENTS_V2_DIR)

# --- The suite ------------------------------------------------------------------------------------
# `make test` (what .ci/run calls) runs independent steps at once, on two cores:
#   at once:  lint | the Go builds (e2e-components) | the Debian packages | every environment of its own
#             and its tests | the main environment's tests but tests/e2e (test-main)
#   then:     tests/e2e (test-e2e), once the Go builds, the Debian packages and test-main are done
# pytest spreads each run over TEST_WORKERS processes (pytest-xdist), a module's (or class's) tests on
# one worker (--dist loadscope), so a module-scoped fixture (a Chromium, a fault-injection campaign) is
# made once; session fixtures (the PostgreSQL cluster) once per worker, each on its own reserved port.
# (Not --dist loadgroup: pytest 9.2 ignores the group suffix xdist 3.8 writes into node ids, so
# xdist_group marks group nothing.) -k: a failed step does not stop the independent ones, and
# `make test` fails when any step failed. Each step's output is printed whole when it ends.
test:
	@$(call timed,make test,$(MAKE) --no-print-directory -k -j$(TEST_JOBS) --output-sync=target test-steps)

test-steps: lint test-main test-e2e $(ENV_TEST_TARGETS)

test-main: $(STAMP) system-packages
	@$(call timed,test-main,$(VENV)/bin/$(PYTEST) $(PYTEST_PARALLEL) --ignore=tests/e2e \
		$(addprefix --ignore=,$(ENV_TESTS)))

test-e2e: $(STAMP) e2e-components system-packages test-main
	@$(call timed,test-e2e,$(VENV)/bin/$(PYTEST) $(PYTEST_PARALLEL) tests/e2e)

clean:
	rm -rf $(VENV) $(ENV_VENVS) .pytest_cache .ruff_cache *.egg-info

.PHONY: demo test test-steps test-main test-e2e lint e2e-components system-packages clean $(ENV_TEST_TARGETS)
