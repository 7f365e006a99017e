"""``loopwright show`` names a fork's whole lineage (tidy49): a fork of a fork said only the run
it was forked from, not that run's origin. The walk is bounded (``MAX_LINKS`` origins, then
"…") and stops at a run already named (a chain the store's records could only hold if they
were altered); ``show --json`` gives it as ``lineage``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support.printed import shown_text
from test_show_ended_inside import _json
from test_show_parked_cost import TASK, _loop

import loopwright as lw

MAX_LINKS = 10  # (``_lineage.MAX_LINKS``: checked below)


def _chain(url: str, n: int) -> list[str]:
    """A run accepted at cycle 1, then ``n`` forks each of the one before, at cycle 1."""
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop("allow"), TASK, task_key="origin")
        assert (r.status, r.cycles) == ("accepted", 1)
        ids = [r.run_id]
        for _ in range(n):
            ids.append(rt.fork(ids[-1], at_cycle=1).run_id)
    return ids


def _header(url: str, run_id: str) -> str:
    """The Run panel's words, its borders left out (a long row wraps inside the panel)."""
    head = shown_text(url, run_id)[0].split("Timeline", 1)[0]
    return " ".join(head.replace("│", " ").split())


def test_a_fork_of_a_fork_names_its_origins_nearest_first(url: str) -> None:
    a, b, c = _chain(url, 2)
    said = (
        f"forked from run {b} at cycle 1 (cycle 1 is listed there), "
        f"which is a fork of run {a} at cycle 1 status"
    )
    assert said in _header(url, c), _header(url, c)
    assert f"forked from run {a} at cycle 1 (cycle 1 is listed there) status" in _header(url, b)
    doc = _json(url, c)
    assert doc["lineage"] == {
        "forks": [{"run_id": b, "forked_at": 1}, {"run_id": a, "forked_at": 1}],
        "more": False,
        "missing": False,
    }
    assert _json(url, a)["lineage"] == {"forks": [], "more": False, "missing": False}


def test_a_long_lineage_is_cut_after_max_links(tmp_path: Path) -> None:
    from loopwright import _lineage

    assert _lineage.MAX_LINKS == MAX_LINKS
    url = f"sqlite:///{tmp_path / 's.db'}"
    ids = _chain(url, MAX_LINKS + 2)
    head = _header(url, ids[-1])
    assert f"which is a fork of run {ids[-MAX_LINKS - 1]} at cycle 1, … status" in head, head
    assert ids[0] not in head and ids[1] not in head
    doc = _json(url, ids[-1])["lineage"]
    assert [f["run_id"] for f in doc["forks"]] == ids[-2 : -MAX_LINKS - 2 : -1]
    assert doc["more"] is True


def test_a_lineage_that_comes_back_to_a_run_already_named_stops_there(tmp_path: Path) -> None:
    """Records altered so that the origin names its fork's fork as its own origin: the walk
    names each run once and says "…" (it would otherwise name them until the cap)."""
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    a, b, c = _chain(url, 2)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET forked_from = ?, forked_at = 1 WHERE run_id = ?", (c, a))
    head = _header(url, c)
    said = (
        f"forked from run {b} at cycle 1 (cycle 1 is listed there), "
        f"which is a fork of run {a} at cycle 1, … status"
    )
    assert said in head, head
    doc = _json(url, c)["lineage"]
    assert ([f["run_id"] for f in doc["forks"]], doc["more"]) == ([b, a], True)
