"""A run ended by its crash bound in a cycle's effects leaves each effect whose outcome is unknown
for a person to settle, on SQLite and PostgreSQL (crash55b).

The bound (crash55) ends such a run without calling the effects or their reconcile hooks (either
may be what kills), naming those started and not known to have finished. Their journal entries
stayed ``intent``, which ``settle`` refuses ("a crash left it started: resume the run first"),
and resuming an ended run does nothing: the person told to check them had no way to record
what they found. They are now marked in doubt as the run ends, and its packet says how to
settle each. Each process is killed (a simulated kill, no word said) after the effect's intent
is journaled, before its call."""

from __future__ import annotations

from typing import Any

import pytest
from support.crash import Crash, phase_hook
from support.crash_bound import notify_loop

import loopwright as lw

TASK: dict[str, Any] = {"artifacts": {"doc": {"n": 0}}}


def _loop(called: list[str]) -> lw.Loop:
    def not_yet(key: str) -> None:
        called.append(f"asked:{key}")  # (it never acted: asked again, it is called again)

    def send(key: str) -> dict[str, str]:
        called.append(key)
        return {"sent": key}

    return notify_loop("unknown-settle", send, not_yet, max_crashes=1)


def _ended_by_the_bound(url: str, key: str) -> tuple[str, lw.RunResult]:
    called: list[str] = []
    loop = _loop(called)
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("after_effect_intent", 1))
        with pytest.raises(Crash):
            rt.run_sync(loop, TASK, task_key=key)
        run_id = rt.store.get_run(key).run_id
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("after_effect_intent", 1))
        with pytest.raises(Crash):
            rt.resume_sync(run_id, loop)  # (its hook asked: not done, a new intent, killed)
    with lw.Runtime(url) as rt:
        r = rt.resume_sync(run_id, loop)
    assert called == ["asked:notify:n:1"]  # (the run ended by the bound asks nothing)
    assert (r.status, r.stop_reason) == ("escalated", "escalated"), r.packet
    assert r.packet["evidence"]["effects"] == {"done": [], "unknown": ["notify:n:1"]}
    return run_id, r


def test_an_unknown_effect_of_a_run_ended_by_its_crash_bound_is_settled_by_the_api(
    url: str,
) -> None:
    run_id, r = _ended_by_the_bound(url, "api")
    cause = str(r.packet["cause"])
    assert f"loopwright settle {run_id[:12]} notify:n:1 --done" in cause, cause
    with lw.Runtime(url) as rt:
        [entry] = rt.store.journal(run_id, key="effect:notify:n:1")
        assert entry.status == "in_doubt", entry  # (before: ``intent``, refused below)
        got = rt.settle_effect(run_id, "notify:n:1", done=False, by="ops")
        assert got.status == "failed"


def test_an_unknown_effect_of_a_run_ended_by_its_crash_bound_is_settled_by_the_cli(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwright.cli import main

    run_id, _r = _ended_by_the_bound(url, "cli")
    code = main(["settle", run_id, "notify:n:1", "--done", "--by", "ops", "--store", url])
    out = capsys.readouterr()
    assert code == 0, out.err
    with lw.Runtime(url) as rt:
        [entry] = rt.store.journal(run_id, key="effect:notify:n:1")
        assert entry.status == "done" and entry.data["settled"]["by"] == "ops"


def test_the_packet_of_a_run_ended_by_its_crash_bound_once_settled_says_what_is_left(
    url: str,
) -> None:
    run_id, _r = _ended_by_the_bound(url, "packet")
    with lw.Runtime(url) as rt:
        rt.settle_effect(run_id, "notify:n:1", done=False, by="ops")
        packet = rt.store.get_run(run_id).packet or {}
    cause = str(packet["cause"])
    # (before: it still said "check them, then settle each", naming the one just settled)
    assert "check them" not in cause and "loopwright settle" not in cause, cause
    assert cause.endswith("done none; notify (notify:n:1) was settled not done by ops"), cause
    assert str(packet["summary"]).endswith(cause), packet["summary"]
    assert packet["evidence"]["effects"] == {
        "done": [],
        "unknown": [],
        "settled": {"notify:n:1": "not done"},
    }


@pytest.mark.postgres
def test_the_in_doubt_mark_is_written_off_the_event_loop(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the crash bound's mark of an unknown effect in doubt is a write fenced on
    the run's row, so it is made in a store thread (``written``), as the cycle's other writes
    are: made on the event loop, it held every run of the process while another session held
    the run's row (fenced56)."""
    import asyncio

    from loopwright.store.postgres import PostgresStore

    put = PostgresStore.journal_put
    where: list[bool] = []

    def watched(self: Any, run_id: str, token: int, **kw: Any) -> Any:
        if kw.get("status") == "in_doubt":
            try:
                asyncio.get_running_loop()
                where.append(True)  # on an event loop
            except RuntimeError:
                where.append(False)  # in a store thread
        return put(self, run_id, token, **kw)

    monkeypatch.setattr(PostgresStore, "journal_put", watched)
    _ended_by_the_bound(pg_url, "off-loop")
    assert where == [False]  # (before: [True])
