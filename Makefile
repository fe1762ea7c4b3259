# Every target sets itself up: a fresh clone needs only python3 (3.11+), go and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit e2e-components bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,autogen,ag2]'
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

test: $(STAMP) lint e2e-components
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
