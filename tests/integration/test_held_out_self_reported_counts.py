"""A held-out pass that rests on tests the candidate's own process decided (stop 54's
``self_reported``) is not an independent pass where runs are counted and listed (stop 55): the
run stores how many such tests its held-out verdict had (``runs.held_out_self_reported``,
SQLite v21 / PostgreSQL v19), ``false_success_rate`` and ``verified_completion_rate`` leave
such a pass out of their basis (``Metrics.held_out_self_reported`` counts it), and the runs
lists (``loopwright runs``, the dashboard's, ``/api/runs``) say so. Before, they read
``held_out_passed`` alone: a pass the candidate could have forged counted as a held-out pass."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.dashboard import dashboard
from support.held_out import held_out_loop, metrics_text, printed, runs_text

import loopwright as lw
from loopwright.cli._diff_cmd import diff
from loopwright.store import open_store
from loopwright.store._pg_schema import PG_MIGRATIONS
from loopwright.store._schema import SQLITE_MIGRATIONS
from loopwright.store.sqlite import SQLiteStore

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"
JUDGED = ["assert add(2, 3) == 5"]
# The second test is not of the judged form (a loop): the candidate's process decides it.
MIXED = [*JUDGED, "for x in range(3):\n    assert add(x, 0) == x"]


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("program", {"code": ctx.task.get("code", RIGHT)})

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return held_out_loop(actor, visible)


def _task(tests: list[str], code: str = RIGHT) -> dict[str, Any]:
    return {
        "artifacts": {"program": {"code": WRONG}},
        "code": code,
        "held_out": {"tests": tests},
    }


def _three_runs(url: str) -> dict[str, str]:
    """An accepted run passing held-out on a self-reported test, one passing on judged tests
    only, one failing held-out (a false success)."""
    out = {}
    with lw.Runtime(url) as rt:
        for key, task in (
            ("self", _task(MIXED)),
            ("judged", _task(JUDGED)),
            ("false", _task(JUDGED, code="def add(a, b):\n    return 4\n")),
        ):
            r = rt.run_sync(_loop(), task, task_key=key)
            assert r.status == "accepted", r.packet
            out[key] = r.run_id
    return out


def test_the_run_stores_how_many_held_out_tests_were_self_reported(url: str) -> None:
    ids = _three_runs(url)
    with lw.Runtime(url) as rt:
        got = {k: rt.store.get_run(v) for k, v in ids.items()}
        assert {k: (r.held_out_passed, r.held_out_self_reported) for k, r in got.items()} == {
            "self": (True, 1),
            "judged": (True, 0),
            "false": (False, 0),
        }
        assert got["self"].held_out_independent is None
        assert got["judged"].held_out_independent is True
        assert got["self"].to_dict()["held_out_self_reported"] == 1  # (the run's API)
        m = lw.compute_metrics(rt.store)
    # the self-reported pass is in neither basis: 1 false success of 2 independent verdicts
    # (it read 1 of 3), 1 verified completion of 2 (it read 2 of 3)
    assert m.basis["false_success_rate"] == (1, 2), m.basis
    assert m.basis["verified_completion_rate"] == (1, 2), m.basis
    assert m.held_out_self_reported == 1
    assert m.to_dict()["held_out_self_reported"] == 1
    per_run = {r.task_key: r.false_success for r in m.per_run}
    assert per_run == {"self": None, "judged": False, "false": True}


def test_the_runs_lists_say_a_pass_rests_on_self_reported_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    url = f"sqlite:///{tmp_path / 's.db'}?durability=process"
    ids = _three_runs(url)
    out = runs_text(url, monkeypatch)
    rows = {k: [x for x in out.splitlines() if v[:12] in x] for k, v in ids.items()}
    assert " pass* " in rows["self"][0], out
    assert " pass " in rows["judged"][0] and "pass*" not in rows["judged"][0], out
    assert "pass*: a held-out pass resting on self-reported tests" in out, out
    token = "test-token-0123456789"
    c = dashboard(url, token=token)
    c.headers["Authorization"] = f"Bearer {token}"
    listed = {r["task_key"]: r for r in c.get("/api/runs").json()}
    assert listed["self"]["held_out_self_reported"] == 1
    assert listed["judged"]["held_out_self_reported"] == 0
    out = metrics_text(url, monkeypatch)
    assert "1 held-out pass(es) resting on self-reported tests" in out, out
    page = c.get("/").text
    assert page.count("pass (self-reported)</span>") == 1, page
    # two runs side by side: `loopwright diff` and the compare page
    out = printed(
        diff, monkeypatch, run_a=ids["self"], run_b=ids["judged"], store=url, as_json=False
    )
    [row] = [x for x in out.splitlines() if x.startswith("held-out")]
    assert row.split()[-2:] == ["pass*", "pass"], row
    assert "pass*: a held-out pass resting on self-reported tests" in out, out  # (stop 56)
    page = c.get("/compare", params={"run": [ids["self"], ids["judged"]]}).text
    assert "<td>pass (self-reported)</td><td>pass</td>" in page, page


def _v(migrations: list[list[str]], step: str) -> int:
    """The version before the step that adds the column."""
    return next(i for i, m in enumerate(migrations) if step in m)


def test_an_sqlite_store_of_an_earlier_release_gains_the_column(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    ids = _three_runs(url)
    from loopwright.store._schema import ADD_HELD_OUT_SELF_REPORTED

    raw = sqlite3.connect(db)  # as v20 left it: no column
    raw.execute("ALTER TABLE runs DROP COLUMN held_out_self_reported")
    raw.execute(
        "UPDATE loopwright_meta SET value = ? WHERE key = 'schema_version'",
        (str(_v(SQLITE_MIGRATIONS, ADD_HELD_OUT_SELF_REPORTED)),),
    )
    raw.commit()
    raw.close()
    with SQLiteStore(db) as s:
        assert s.schema_version == len(SQLITE_MIGRATIONS)
        # an earlier release's runs: unknown, counted as they were
        assert {r.held_out_self_reported for r in s.list_runs()} == {None}
        assert s.get_run(ids["self"]).held_out_independent is True
    # a step run again (a store put back to v20 with the column there) changes nothing
    raw = sqlite3.connect(db)
    raw.execute(
        "UPDATE loopwright_meta SET value = ? WHERE key = 'schema_version'",
        (str(len(SQLITE_MIGRATIONS) - 1),),
    )
    raw.commit()
    raw.close()
    with SQLiteStore(db) as s:
        assert s.schema_version == len(SQLITE_MIGRATIONS)


@pytest.mark.postgres
def test_a_pg_store_of_an_earlier_release_gains_the_column(pg_url: str) -> None:
    from loopwright.store._schema import HELD_OUT_SELF_REPORTED

    ids = _three_runs(pg_url)
    with open_store(pg_url) as s, s._tx() as conn:  # type: ignore[attr-defined]
        conn.execute("ALTER TABLE runs DROP COLUMN held_out_self_reported")
        conn.execute(
            "UPDATE loopwright_meta SET value = %s WHERE key = 'schema_version'",
            (str(_v(PG_MIGRATIONS, HELD_OUT_SELF_REPORTED.format("IF NOT EXISTS"))),),
        )
    with open_store(pg_url) as s:
        assert s.schema_version == len(PG_MIGRATIONS)  # type: ignore[attr-defined]
        assert {r.held_out_self_reported for r in s.list_runs()} == {None}
        assert s.get_run(ids["self"]).held_out_independent is True
