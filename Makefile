# The two commands of the quick start: `make demo` and `make test`.
# Each creates .venv if missing and installs the project (again only when pyproject.toml changed).

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint typecheck unit clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "loopwright needs Python 3.11 or newer on PATH" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

demo: $(STAMP)
	$(BIN)/loopwright demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict src/loopwright

test: lint typecheck
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .loopwright .mypy_cache .ruff_cache .pytest_cache
