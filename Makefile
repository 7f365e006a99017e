# The two commands of the quick start:
#   make demo   the core package only (typer, rich, orjson), then the offline demo;
#   make test   everything the test suite needs (the `dev` extra), then lint, types and tests.
# Each creates .venv if missing and installs again only when pyproject.toml changed. A venv
# made by `make demo` is completed by `make test` (the extras are added to it).

# The newest Python >= 3.11 on PATH. stderr is dropped: pyenv shims of versions that are not
# installed print "pyenv: python3.13: command not found".
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 \
	&& $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
SUM := $(shell cksum < pyproject.toml | cut -d' ' -f1)
CORE := $(VENV)/.core-$(SUM)
FULL := $(VENV)/.test-$(SUM)
# PostgreSQL tests run when LOOPWRIGHT_TEST_PG is set, or when a server answers here.
TEST_PG := postgresql://postgres@127.0.0.1:5432/test
# Test processes: one per core, at most 4 (each may start a Ray cluster); files stay whole, and
# are handed out in the order the workers collect them: tests/conftest.py puts the heaviest
# first (HEAVY_FIRST), which xdist's own reordering by number of tests would undo.
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: demo test lint typecheck clean screenshots

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "loopwright needs Python 3.11 or newer on PATH" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(CORE): pyproject.toml | $(BIN)/python
	@echo "installing loopwright core into $(VENV) (about 40 s)..."
	$(PIP) install -e .
	@rm -f $(VENV)/.core-*
	@touch $@

$(FULL): pyproject.toml | $(BIN)/python
	@echo "installing loopwright and its test extras into $(VENV) (pytest, ruff, mypy, psycopg, Ray, FastAPI, Playwright...; a few minutes)..."
	$(PIP) install -e ".[dev]"
	@rm -f $(VENV)/.core-* $(VENV)/.test-*
	@touch $@ $(CORE)

demo: $(CORE)
	$(BIN)/loopwright demo

# The dashboard screenshots in docs/img/ from fresh demo runs (Playwright, /usr/bin/chromium).
screenshots: $(FULL)
	$(BIN)/python docs/img/take_screenshots.py --out docs/img

lint: $(FULL)
	$(BIN)/ruff check src tests bench examples

typecheck: $(FULL)
	$(BIN)/mypy --strict src/loopwright

test: lint typecheck
	@if [ -z "$$LOOPWRIGHT_TEST_PG" ] && $(BIN)/python -c 'import sys, psycopg; psycopg.connect(sys.argv[1], connect_timeout=3).close()' '$(TEST_PG)' >/dev/null 2>&1; then \
		export LOOPWRIGHT_TEST_PG='$(TEST_PG)'; fi; \
	if [ -n "$$LOOPWRIGHT_TEST_PG" ]; then echo "PostgreSQL tests: on ($$LOOPWRIGHT_TEST_PG)"; \
	else echo "PostgreSQL tests: skipped (no server answers at $(TEST_PG); or set LOOPWRIGHT_TEST_PG)"; fi; \
	test -x /usr/bin/chromium || echo "browser tests: skipped (no /usr/bin/chromium: apt-get install chromium)"; \
	command -v tesseract >/dev/null || echo "comic OCR check: skipped (no tesseract: apt-get install tesseract-ocr)"; \
	if [ -n "$$PYTHONDONTWRITEBYTECODE" ] && [ -z "$$PYTHONPYCACHEPREFIX" ]; then \
		export PYTHONPYCACHEPREFIX='$(CURDIR)/.pytest_cache/pycache'; unset PYTHONDONTWRITEBYTECODE; fi; \
	$(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile --no-loadscope-reorder

clean:
	rm -rf $(VENV) .loopwright .mypy_cache .ruff_cache .pytest_cache
