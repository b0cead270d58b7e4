# Every target installs what it needs into .venv first (idempotent; reruns when pyproject changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo up test bench lint typecheck clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The tested set (constraints.txt), the one the erasure image installs too.
	$(BIN)/pip install --quiet -c constraints.txt -e '.[airflow,dev]'
	# setuptools leaves a copy of the metadata in the checkout; from here (on sys.path under
	# `python -m`) Airflow would read the plugin's entry point twice ("already registered").
	rm -rf erasure.egg-info
	touch $(STAMP)

# The dbt CLI the dbt project's tests build and rebuild with, in a virtualenv of its own.
DBT_VENV  := .venv-dbt
DBT_STAMP := $(DBT_VENV)/.installed

$(DBT_STAMP): local/dbt-constraints.txt
	test -x $(DBT_VENV)/bin/python || $(PYTHON) -m venv $(DBT_VENV)
	$(DBT_VENV)/bin/pip install --quiet -r local/dbt-constraints.txt
	touch $(DBT_STAMP)

demo: $(STAMP)
	$(BIN)/python -m local.demo

# Airflow standalone with this repo's DAGs and plugin, OpenBao and the demo estate, in var/;
# runs until Ctrl-C. `make up UP_ARGS=--fresh` starts over, `UP_ARGS="--port 8090"` moves it,
# `UP_ARGS="--executor celery"` runs the chart's CeleryExecutor (two workers, the local Redis).
up: $(STAMP)
	$(BIN)/python -m local.up $(UP_ARGS)

# The suite but the end-to-end tests on two workers (tests/conftest.py says which tests stay
# together; TEST_WORKERS=0 runs them in one process), then the end-to-end tests alone: their
# stack's timing bounds (a prompt resumed within 30 s of its answer under twenty requests) are
# about Airflow on a machine of its own, not beside another test run.
TEST_WORKERS ?= 2

test: $(STAMP) $(DBT_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(TEST_WORKERS) --ignore=tests/e2e
	$(BIN)/pytest -q tests/e2e

bench: $(STAMP)
	$(BIN)/python -m local.bench

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(DBT_VENV) var .pytest_cache .mypy_cache .ruff_cache
