"""notify56: each person's settling is posted to each webhook URL once, whenever a notifier
runs. A settling made while no process notified was never posted (a notifier started reading
at the newest event), and on PostgreSQL a settling whose transaction took a lower event id and
committed after more than 1,000 later events was read past for good. Each URL now has a
cursor in the store (``notify_cursors``), and settlings are read in an order no late commit
can get behind (the writing transaction's id, below the oldest one still open). SQLite and
PostgreSQL; the late commit made deterministic with two connections."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from test_live import Listener, park
from test_notify_settle import _escalated

from loopwright.cli import main
from loopwright.store import open_store
from loopwright.web._feed import Feed
from loopwright.web._notify import Notifier, NotifyConfig


def _settle(url: str, run_id: str) -> None:
    assert main(["settle", run_id[:12], "pay:I6", "--not-done", "--by", "ops",
                 "--store", url]) == 0  # fmt: skip


@pytest.fixture
def hook() -> Iterator[Listener]:
    with closing(Listener([])) as lst:
        yield lst


@contextmanager
def _notifying(url: str, hook: Listener) -> Iterator[Feed]:
    """A dashboard's feed and notifier over their own store (a process that starts): its first
    look made; leaving posts what is there and stops."""
    st = open_store(url)
    try:
        feed = Feed(st)
        notifier = Notifier(st, NotifyConfig.of([hook.url]))
        feed.listen(notifier)
        feed.poll()
        notifier.drain()
        yield feed
        feed.poll()
        notifier.drain()
    finally:
        st.close()


def _settled(hook: Listener) -> list[tuple[str, str]]:
    return [
        (json.loads(body)["run_id"], h["X-Loopwright-Delivery"])
        for _, h, body in hook.got
        if h["X-Loopwright-Event"] == "effect_settled"
    ]


def test_a_settling_made_while_no_process_notified_is_posted_once_later(
    url: str, hook: Listener
) -> None:
    run_id = _escalated(url)
    with _notifying(url, hook):
        pass  # the URL was notified once (then the dashboard stopped)
    _settle(url, run_id)  # nobody notifying
    with _notifying(url, hook) as feed:
        feed.poll()
    with _notifying(url, hook) as feed:  # and a restart posts it no more
        feed.poll()
    assert [r for r, _ in _settled(hook)] == [run_id], hook.got


def test_a_url_never_notified_is_not_sent_the_history(url: str, hook: Listener) -> None:
    old = _escalated(url)
    _settle(url, old)  # before this URL was ever given
    with _notifying(url, hook) as feed:
        new = _escalated(url)
        _settle(url, new)
        feed.poll()
    assert [r for r, _ in _settled(hook)] == [new], hook.got


_INSERT = (
    "INSERT INTO events(run_id, cycle, kind, ts, data) VALUES (%s, 1, 'effect_settled', "
    "extract(epoch from now()), %s::json) RETURNING id"
)


def test_a_settling_committed_late_far_behind_is_posted_once(
    pg_url: str, pg_schema: tuple[str, str], hook: Listener
) -> None:
    """PostgreSQL hands out event ids as statements run: a transaction holding a lower id
    may commit after 1,000 later events. Held open with a second connection: the later
    settling is posted while it is open, the earlier one when it commits, each once."""
    base, schema = pg_schema
    run_id = _escalated(pg_url)
    late = psycopg.connect(base)
    try:
        late.execute(f'SET search_path TO "{schema}"')
        with _notifying(pg_url, hook) as feed:
            data = json.dumps({"effect": "pay", "key": "pay:I6", "done": False, "by": "late"})
            row = late.execute(_INSERT, (run_id, data)).fetchone()  # open: the lower id
            assert row is not None
            with psycopg.connect(base, autocommit=True) as other:
                other.execute(f'SET search_path TO "{schema}"')
                other.execute(
                    "INSERT INTO events(run_id, cycle, kind, ts, data) SELECT %s, 1, 'note', "
                    "0, '{}'::json FROM generate_series(1, 1100)",
                    (run_id,),
                )
                data2 = json.dumps({"effect": "pay", "key": "pay:I7", "done": True, "by": "ops"})
                higher = other.execute(_INSERT, (run_id, data2)).fetchone()
            assert higher is not None and higher[0] > row[0] + 1000
            feed.poll()
            feed._listeners[0].drain()  # type: ignore[attr-defined]
            assert _settled(hook) == [(run_id, f"settled:{higher[0]}")]
            late.commit()
            feed.poll()
            feed._listeners[0].drain()  # type: ignore[attr-defined]
        with _notifying(pg_url, hook):
            pass  # a restart posts neither again
    finally:
        late.close()
    assert _settled(hook) == [
        (run_id, f"settled:{higher[0]}"),
        (run_id, f"settled:{row[0]}"),
    ], hook.got


def test_history_is_not_posted_while_an_older_transaction_is_open(
    pg_url: str, pg_schema: tuple[str, str], hook: Listener
) -> None:
    """PostgreSQL's "now" for a new URL is below the oldest transaction open on the server:
    a settling committed before the URL was given, while an older transaction stayed open
    (any client's), lies past it, and was posted as new."""
    base = pg_schema[0]
    old = _escalated(pg_url)
    with psycopg.connect(base) as holder:
        holder.execute("SELECT txid_current()")  # open, holding the horizon back
        _settle(pg_url, old)  # committed before the URL is given
        with _notifying(pg_url, hook) as feed:
            new = _escalated(pg_url)
            _settle(pg_url, new)
            feed.poll()
        holder.rollback()
    with _notifying(pg_url, hook):
        pass  # the horizon past both: the cursor moves on, nothing posted again
    assert [r for r, _ in _settled(hook)] == [new], hook.got


def test_a_dead_endpoint_gives_a_settling_up_after_its_rounds_and_goes_on(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A URL answering 500 to every try held its cursor for ever: the settling was tried
    again every round (about 31 s of back-off, a warning each time), and the ones after it
    were never posted. After ``settled_rounds`` failed rounds (10 by default) it is given up:
    marked failed, audited as not delivered, said once, and the next settling is posted. The
    back-off is 0 here (``first_wait_s``): no sleeps."""
    first = _escalated(url)
    with closing(Listener([500] * 20)) as hook:  # 10 rounds of 2 tries, then 200
        st = open_store(url)
        try:
            feed = Feed(st)
            cfg = replace(NotifyConfig.of([hook.url]), attempts=2, first_wait_s=0.0)
            notifier = Notifier(st, cfg)
            feed.listen(notifier)
            feed.poll()
            notifier.drain()
            _settle(url, first)
            second = _escalated(url)  # (the same key again: the first settled it not done)
            _settle(url, second)
            with caplog.at_level(logging.DEBUG, logger="loopwright.notify"):
                for n in range(1, 10):  # notify56c: one line a failed round (not one a try)
                    caplog.clear()
                    notifier.drain()
                    said = [r for r in caplog.records if r.levelno >= logging.INFO]
                    assert [r.levelno for r in said] == [logging.WARNING], caplog.text
                    assert f"(round {n} of 10)" in said[0].getMessage()
            caplog.clear()
            # 9 rounds of 2 tries, the second settling held behind the first
            assert [r for r, _ in _settled(hook)] == [first] * 18
            with caplog.at_level(logging.ERROR, logger="loopwright.notify"):
                notifier.drain()  # the 10th round: given up, the next one posted
            delivered = [json.loads(body)["run_id"] for s, _, body in hook.got if s == 200]
            assert delivered == [second] and len(hook.got) == 21, hook.got
            gone = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert len(gone) == 1 and "not delivered" in gone[0].getMessage()
            assert "loopwright audit" in gone[0].getMessage()
            audited = st.audit(action="notify")
            assert [(a.target, a.outcome, a.detail["rounds"]) for a in audited] == [
                (f"run {first}", "failed", 10)
            ]
            assert audited[0].detail["error"] == "HTTP 500"
            assert "secretpath" not in json.dumps(audited[0].detail)  # the URL's host only
        finally:
            st.close()
        posts = len(hook.got)
        with _notifying(url, hook) as again:  # a restart posts neither again
            again.poll()
        assert len(hook.got) == posts


def test_a_settling_refused_with_a_4xx_is_audited_not_delivered(url: str) -> None:
    """A 4xx was logged and passed, and nothing in the store said the settling was never
    posted: it is given up at once (no rounds), audited as the dead endpoint's are."""
    run_id = _escalated(url)
    with closing(Listener([404])) as hook:
        with _notifying(url, hook) as feed:
            _settle(url, run_id)
            feed.poll()
        assert [s for s, _, _ in hook.got] == [404]
    with closing(open_store(url)) as st:
        [a] = st.audit(action="notify")
        assert (a.target, a.outcome, a.detail["rounds"], a.detail["error"]) == (
            f"run {run_id}",
            "failed",
            1,
            "HTTP 404",
        )
        [m] = st.events_of_kind(run_id, "notified")
        assert m.data["failed"] is True


def _dead_endpoint_notifier(st: object, url: str, rounds: int, **kw: int) -> Notifier:
    """A notifier whose tries are 3 a round and the back-off 0 (no sleeps)."""
    cfg = replace(NotifyConfig.of([url], settled_rounds=rounds), attempts=3, first_wait_s=0.0)
    return Notifier(st, replace(cfg, **kw))  # type: ignore[arg-type]


def test_an_approval_request_to_a_dead_endpoint_is_given_up_after_its_rounds(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """notify56c: a request whose round failed (every try 500) was dropped for that process
    after one round, with no marker and no audit record, and each round logged a warning a
    try plus "gave up after HTTP 500". It is now tried again a round later, each failed round
    one warning, and after ``--notify-rounds`` rounds given up as a settling is: a failed
    marker, an audit record (the URL's host only), one error line; a restart posts it no
    more, and a later request is posted."""
    run_id = park(tmp_path, url, "dead-hook")
    with closing(Listener([500] * 9)) as hook:  # 3 rounds of 3 tries, then 200
        st = open_store(url)
        try:
            feed = Feed(st)
            notifier = _dead_endpoint_notifier(st, hook.url, 3)
            feed.listen(notifier)
            feed.poll()
            lines = []
            with caplog.at_level(logging.DEBUG, logger="loopwright.notify"):
                for _ in range(3):
                    caplog.clear()
                    notifier.drain()
                    said = [r for r in caplog.records if r.levelno >= logging.INFO]
                    lines.append([(r.levelno, r.getMessage()) for r in said])
            assert len(hook.got) == 9 and {s for s, _, _ in hook.got} == {500}
            assert [[lv for lv, _ in one] for one in lines] == [
                [logging.WARNING],
                [logging.WARNING],
                [logging.ERROR],
            ], lines
            assert "(round 1 of 3)" in lines[0][0][1] and "(round 2 of 3)" in lines[1][0][1]
            assert "not delivered" in lines[2][0][1] and "loopwright audit" in lines[2][0][1]
            [m] = st.events_of_kind(run_id, "notified")
            assert (m.data["failed"], m.data["rounds"], m.data["error"]) == (True, 3, "HTTP 500")
            [a] = st.audit(action="notify")
            assert (a.actor, a.target, a.outcome, a.detail["event"]) == (
                "notifier",
                f"run {run_id}",
                "failed",
                "approval_requested",
            )
            assert a.detail["url"] == hook.url.split("/hooks")[0]
            assert "secretpath" not in json.dumps(a.detail)  # the URL's host only
            notifier.drain()  # given up: not tried again
            assert len(hook.got) == 9
            later = park(tmp_path, url, "after-the-dead-one")
            feed.poll()
            notifier.drain()
            assert [json.loads(b)["run_id"] for s, _, b in hook.got if s == 200] == [later]
        finally:
            st.close()
        with _notifying(url, hook) as again:  # a restart posts neither again
            again.poll()
        assert len(hook.got) == 10
    assert main(["audit", "--target", f"run {run_id}", "--jsonl", "--store", url]) == 0


def test_the_requests_already_waiting_to_a_dead_endpoint_are_given_up_together(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The one message listing the requests already waiting (more than ``baseline_posts``)
    was dropped after a round as a single request was: tried again as one, and given up
    together: each request marked failed, one audit record, one error line."""
    runs = [park(tmp_path, url, f"waiting-{i}") for i in range(2)]
    with closing(Listener([500] * 6)) as hook:
        st = open_store(url)
        try:
            feed = Feed(st)
            notifier = _dead_endpoint_notifier(st, hook.url, 2, baseline_posts=1)
            feed.listen(notifier)
            feed.poll()
            with caplog.at_level(logging.WARNING, logger="loopwright.notify"):
                notifier.drain()
                notifier.drain()
            events = {h["X-Loopwright-Event"] for _, h, _ in hook.got}
            assert len(hook.got) == 6 and events == {"approvals_waiting"}
            levels = [r.levelno for r in caplog.records]
            assert levels == [logging.WARNING, logging.ERROR], caplog.text
            for run_id in runs:
                [m] = st.events_of_kind(run_id, "notified")
                assert m.data["failed"] is True and m.data["summary"] is True
            [a] = st.audit(action="notify")
            assert (a.outcome, a.detail["requests"], a.detail["event"]) == (
                "failed",
                2,
                "approvals_waiting",
            )
        finally:
            st.close()


def test_a_give_up_records_no_part_of_the_urls_path(url: str) -> None:
    """A URL whose path the HTTP client refuses (a space in it: ``InvalidURL``) failed with an
    error quoting the path, not the whole URL: the ``.replace(url, host)`` missed it, and the
    path (a chat webhook's credential) was written to the audit record and the run's failed
    ``notified`` marker (review56b)."""
    run_id = _escalated(url)
    hook = "http://127.0.0.1:9/hooks/T0/S3CRETPATH x"
    with closing(open_store(url)) as st:
        feed = Feed(st)
        notifier = _dead_endpoint_notifier(st, hook, 1)
        feed.listen(notifier)
        feed.poll()
        notifier.drain()
        _settle(url, run_id)
        feed.poll()
        notifier.drain()
        [a] = st.audit(action="notify")
        marks = st.events_of_kind(run_id, "notified")
        assert a.outcome == "failed" and marks, (a, marks)
        said = json.dumps(a.detail) + json.dumps([m.data for m in marks])
        assert "S3CRETPATH" not in said and "/hooks/" not in said, said
        assert "InvalidURL" in a.detail["error"], a.detail


def test_a_held_approval_request_decided_meanwhile_is_not_posted(url: str, tmp_path: Path) -> None:
    """notify56c holds a request whose round failed for the next round; a person who decided
    it meanwhile (in the dashboard, the CLI) still had it posted as waiting a round later, a
    chat asking for a decision already made (review56b). A held request no longer pending is
    let go: not posted, not given up."""
    run_id = park(tmp_path, url, "decided-meanwhile")
    with closing(Listener([500] * 3)) as hook:  # one round of 3 tries, then 200
        st = open_store(url)
        try:
            feed = Feed(st)
            notifier = _dead_endpoint_notifier(st, hook.url, 3)
            feed.listen(notifier)
            feed.poll()
            notifier.drain()  # round 1: failed, held
            assert [s for s, _, _ in hook.got] == [500] * 3
            assert main(["deny", run_id[:12], "--by", "ops", "--store", url]) == 0
            notifier.drain()
            assert [s for s, _, _ in hook.got] == [500] * 3, hook.got  # not posted
            assert st.audit(action="notify") == []  # nor given up
        finally:
            st.close()
