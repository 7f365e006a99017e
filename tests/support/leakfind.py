"""A pytest plugin for ``test_no_socket_left``: collects the garbage after every test and
writes, one per line to ``$LEAKFIND_OUT``, each object the collector finalised with an
exception (an unclosed socket's ResourceWarning, with warnings as errors), and the test it
belonged to. Load with ``-p no:unraisableexception -p leakfind``."""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

_now = ["(collection)"]
_found: list[str] = []


def _hook(u: Any) -> None:
    _found.append(f"{_now[0]}: {u.exc_value!r}")


def pytest_configure(config: Any) -> None:
    sys.unraisablehook = _hook


def pytest_collection_finish(session: Any) -> None:
    """What the imports and the collection made, frozen out of the collections after each
    test (a full collection went through every object of every module: ≈ 60 % of this run's
    CPU); what a test makes, and all that becomes garbage of it, is collected as before."""
    gc.collect()
    gc.freeze()


def pytest_runtest_setup(item: Any) -> None:
    _now[0] = item.nodeid


def pytest_runtest_teardown(item: Any, nextitem: Any) -> None:
    gc.collect()


def pytest_sessionfinish(session: Any) -> None:
    gc.collect()
    with open(os.environ["LEAKFIND_OUT"], "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in _found)
