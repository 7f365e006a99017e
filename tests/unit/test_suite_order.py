"""The order ``make test`` hands files to its xdist workers: the heaviest first
(``tests/conftest.py``, ``HEAVY_FIRST``), so that no worker is left running a long file alone
at the end while the other has finished (xdist's own order put the long files with few tests
last)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


@pytest.fixture
def top_conftest(pytestconfig: pytest.Config) -> ModuleType:
    """tests/conftest.py as pytest loaded it (not imported again)."""
    [mod] = [
        m
        for m in pytestconfig.pluginmanager.get_plugins()
        if isinstance(m, ModuleType) and getattr(m, "__file__", None) == str(TESTS / "conftest.py")
    ]
    return mod


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_every_heavy_file_is_a_test_file_of_the_suite(top_conftest: ModuleType) -> None:
    heavy: dict[str, float] = top_conftest.HEAVY_FIRST
    assert len(heavy) >= 10
    missing = [f for f in heavy if not (ROOT / f).is_file() or not Path(f).name.startswith("test_")]
    assert not missing, f"renamed or removed: {missing}"


def test_a_worker_takes_the_heaviest_files_first_each_file_whole_and_in_order(
    top_conftest: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        top_conftest, "HEAVY_FIRST", {"tests/b/test_long.py": 90.0, "tests/a/test_mid.py": 40.0}
    )
    items = _items(
        "tests/a/test_many.py::t1",
        "tests/a/test_many.py::t2[x::y]",
        "tests/a/test_many.py::t3",
        "tests/a/test_mid.py::t1",
        "tests/a/test_one.py::t1",
        "tests/a/test_two.py::t1",
        "tests/a/test_two.py::t2",
        "tests/b/test_long.py::t2",
        "tests/b/test_long.py::t1",
    )
    collected = [i.nodeid for i in items]
    worker = SimpleNamespace(workerinput={"workerid": "gw0"})
    top_conftest.pytest_collection_modifyitems(worker, items)
    assert [i.nodeid for i in items] == [
        "tests/b/test_long.py::t2",  # the heaviest, its tests as collected
        "tests/b/test_long.py::t1",
        "tests/a/test_mid.py::t1",
        "tests/a/test_many.py::t1",  # then the others, most tests first (xdist's order)
        "tests/a/test_many.py::t2[x::y]",
        "tests/a/test_many.py::t3",
        "tests/a/test_two.py::t1",
        "tests/a/test_two.py::t2",
        "tests/a/test_one.py::t1",
    ]
    # a run without -n (no worker) keeps the order collected
    again = _items(*collected)
    top_conftest.pytest_collection_modifyitems(SimpleNamespace(), again)
    assert [i.nodeid for i in again] == collected


def test_make_test_keeps_the_order_the_workers_collect() -> None:
    """xdist reorders files by their number of tests unless told not to: that would undo
    ``HEAVY_FIRST``."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    [line] = [x for x in makefile.splitlines() if re.search(r"-m pytest .*-n ", x)]
    assert "--dist loadfile" in line and "--no-loadscope-reorder" in line, line
