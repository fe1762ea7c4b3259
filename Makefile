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

test: $(STAMP) lint
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
