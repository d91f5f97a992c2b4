# The two commands: `make run` (the service on its embedded default) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench fuzz clean

# The product and, beside it, the simulated clouds (a distribution of their own: fakeclouds/pyproject.toml).
$(STAMP): pyproject.toml fakeclouds/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -e ./fakeclouds
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpuprov dev

test: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy providers messages activities workflows api store fakeclouds cli bench worker.py settings.py logsafe.py

bench: $(STAMP)
	$(BIN)/python -m bench

# schemathesis against a running `make run` (README, Testing).
FUZZ_ARGS ?= --max-examples 300
fuzz: $(STAMP)
	$(BIN)/python -m bench.fuzz $(FUZZ_ARGS)

clean:
	rm -rf $(VENV)
