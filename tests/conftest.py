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
# Makefile turns off) is by number of tests, most first, and put the files of one or two long
# tests last (``test_no_socket_left``: one test, 48 s). The figures are the wall seconds of each
# file's tests among the 200 slowest of a full ``-n 2`` run on a loaded VM (stop 52), the three
# SIGKILL files whose children are now forked (``tests/forkserver.py``, stop 54) scaled by the CPU
# each took after / before, measured file by file; the order is all that is read: a stale or
# missing entry costs balance, never a result. Other files keep xdist's order after these.
# tests/e2e's entries marked "CPU" are stop 56's (suite56a): user + sys seconds of
# `pytest -n 0 FILE` and every process it reaped, on the same loaded 2-core VM (bench/RESULTS.md,
# "stop 56: the suite's e2e files"); with one worker a core, a file's wall on CI is about its
# CPU. Stop 52's wall figures for them were 3 to 13 times that.
HEAVY_FIRST: dict[str, float] = {
    "tests/integration/test_fit_replay_stream.py": 121,  # 180 × 15.8 / 23.6 s of CPU (stop 56)
    "tests/integration/test_fit_stop.py": 81,  # 167 × 14.3 / 29.4, smaller grids (stop 56)
    "tests/integration/test_money_kills.py": 144,  # 288 × 26.8 / 53.7 s of CPU, forked
    "tests/integration/test_stop_default_ceiling.py": 118,
    "tests/integration/test_workers.py": 90,  # 105 × 14.6 / 17.0, forked workers (stop 56)
    "tests/integration/test_judged_is_stored.py": 75,
    "tests/integration/test_crash_large_values.py": 73,  # 170 × 28.6 / 66.3, forked
    "tests/integration/test_kills_on_new_paths.py": 69,  # 111 × 36.6 / 58.7, forked
    "tests/integration/test_pg_claim_scale.py": 69,
    "tests/integration/test_ray_executor.py": 67,
    "tests/e2e/test_doc_snippets.py": 66,  # CPU (240 in stop 52): code_repair, fit-stop pages
    "tests/integration/test_long_run_views.py": 62,
    "tests/integration/test_eval_case_memory.py": 36,  # 56 × 6.2 / 9.7 (stop 56)
    "tests/integration/test_ldb_faithfulness.py": 50,
    "tests/e2e/test_browser.py": 49,
    "tests/integration/test_no_socket_left.py": 24,  # 48 × 5.0 / 10.1 (stop 56)
    "tests/integration/test_export_paged_states.py": 42,
    "tests/unit/test_suite_hygiene.py": 42,
    "tests/e2e/test_cli_effects.py": 30,  # wall (161 in stop 52): Ray's processes, not all reaped
    "tests/e2e/test_comic_cli.py": 17,  # CPU (48 in stop 52)
    "tests/e2e/test_cli_manners.py": 10,  # CPU
    "tests/e2e/test_llm_example.py": 8,  # CPU (65 in stop 52)
    "tests/e2e/test_cli_inputs.py": 6,  # CPU (67 in stop 52)
    "tests/e2e/test_cli.py": 5,  # CPU (63 in stop 52)
    "tests/e2e/test_cli_names.py": 5,  # CPU (46 in stop 52)
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

    # the values, the field names and the index of the values' 16-character pieces (emptying
    # the values alone left a former value's pieces masked), and the cache of clean texts
    _redact.reset(_BASELINE.setdefault("redact", _redact.registry_state()))
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
