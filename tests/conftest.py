"""Shared fixtures: a fresh store per test, and a runtime over it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import loopwright as lw

# Compiled modules for the suite's child processes (thousands: every SIGKILL trial, every CLI
# subprocess). Where PYTHONDONTWRITEBYTECODE is set (as in some sandboxes and CI images), no
# ``.pyc`` was ever written, so each child compiled every module it imported from source again:
# about 0.3 s of CPU of its 0.45 s (a money-kill trial: 4.1 s of CPU, 2.3 s with the cache). The
# children write and read them under a prefix in .pytest_cache instead (the source tree stays as
# the setting wants it, with no ``__pycache__``; ``make clean`` removes it). The Makefile does
# the same for the test processes themselves.
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    os.environ["PYTHONPYCACHEPREFIX"] = str(
        Path(__file__).resolve().parents[1] / ".pytest_cache" / "pycache"
    )
    del os.environ["PYTHONDONTWRITEBYTECODE"]

# The suite's heaviest files, heaviest first: under ``make test`` (``-n JOBS --dist loadfile``)
# each xdist worker collects them first, so the scheduler hands them out first and the workers
# end on small files together. xdist's own order (``--loadscope-reorder``, its default, which the
# Makefile turns off) is by number of tests, most first: these files have few, long tests
# (whole fits of the LDB recordings, SIGKILL trials on both stores, the docs' snippets, Chromium),
# so they came last and one worker ran them alone for minutes while the other had finished. The
# figures are CPU seconds of ``pytest -n 0 FILE`` with PostgreSQL on (stop 52); the order is all
# that is read: a stale or missing entry costs balance, never a result. Other files keep xdist's
# order after these.
HEAVY_FIRST: dict[str, float] = {
    "tests/integration/test_crash_large_values.py": 51.5,
    "tests/integration/test_money_kills.py": 50.0,
    "tests/e2e/test_doc_snippets.py": 44.1,  # its mypy run with a cold cache
    "tests/integration/test_kills_on_new_paths.py": 43.7,
    "tests/integration/test_fit_stop.py": 34.3,
    "tests/integration/test_crash_points.py": 26.5,
    "tests/e2e/test_browser.py": 23.7,
    "tests/e2e/test_cli_effects.py": 21.3,
    "tests/integration/test_fit_replay_stream.py": 21.0,
    "tests/unit/test_fit.py": 13.6,
    "tests/integration/test_ray_executor.py": 11.4,  # and the Ray cluster's own processes
    "tests/integration/test_crash_resume.py": 11.4,
    "tests/integration/test_ldb_faithfulness.py": 10.8,
    "tests/integration/test_comic_kill.py": 8.0,
    "tests/integration/test_store_conformance.py": 7.3,  # and the PostgreSQL server's work
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the files of ``HEAVY_FIRST`` first (heaviest first), then the others by
    number of tests, most first (what ``--loadscope-reorder`` does); each file's tests keep their
    order. A run without ``-n`` is left in the order collected."""
    if not hasattr(config, "workerinput"):
        return
    count: dict[str, int] = {}
    for item in items:
        count[item.nodeid.split("::", 1)[0]] = count.get(item.nodeid.split("::", 1)[0], 0) + 1

    def key(item: pytest.Item) -> tuple[float, int]:
        path = item.nodeid.split("::", 1)[0]
        return (-HEAVY_FIRST.get(path, 0.0), -count[path])

    items.sort(key=key)  # stable: each file's tests, and files of equal key, keep their order


settings.register_profile(
    "loopwright",
    deadline=None,  # the store fsyncs; a slow disk must not fail a property test
    suppress_health_check=[HealthCheck.too_slow],
    # On CI the examples are the same every run: a property test explores when run by hand
    # (each run new examples: that is how they find bugs), and CI's answer on a commit does
    # not depend on the draw.
    derandomize=os.environ.get("CI") == "true",
)
settings.load_profile("loopwright")


# What the process registered before any test ran (collection imports every test module):
# each test starts from it, whatever the tests before it in the same worker registered.
_BASELINE: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _process_state_as_at_start() -> None:
    """Each test starts with loopwright's process-wide state as no earlier test left it. With
    ``-n``/``--dist loadfile`` the files a worker runs, and their order, vary from run to run,
    so what a test measured or saw depended on what ran before it in its worker:

    * the redaction net's cache of clean texts is emptied: it is bounded (256 texts) and
      cleared when full, so a tracemalloc measurement depended on what earlier tests had left
      in it (a CI run measured 0.25x where the same test alone measured 0.13x);
    * the secret values and field names registered (``register_secret``: every adapter built
      with an API key, every URL with a password; ``register_secret_field``: every spec with
      ``secret_fields``) are back to what the process had registered before the first test:
      they were masked for the rest of the worker's life, so a test asserting that a secret is
      not shown could pass only because another file had registered that same text
      (``s3cret`` is registered by test_openai_adapter and looked for by test_trace_export);
    * the model endpoints' shared limits (``adapters._limits``, keyed by base URL and model;
      a limit once set only tightens) are back to none set, as a fresh process has them.
    """
    from loopwright import _redact

    _redact._clean_texts.clear()
    registered, fields = _BASELINE.setdefault(
        "redact", (frozenset(_redact._registered), frozenset(_redact._registered_fields))
    )
    with _redact._lock:
        _redact._registered.intersection_update(registered)
        _redact._registered.update(registered)
        _redact._registered_fields.intersection_update(fields)
        _redact._registered_fields.update(fields)
    limits = sys.modules.get("loopwright.adapters._limits")  # not imported here if not yet
    gates = _BASELINE.setdefault("gates", {} if limits is None else dict(limits._gates))
    if limits is not None:
        with limits._gates_lock:
            limits._gates.clear()
            limits._gates.update(gates)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def rt(store_path: Path) -> Iterator[lw.Runtime]:
    runtime = lw.Runtime(str(store_path))
    try:
        yield runtime
    finally:
        runtime.close()
