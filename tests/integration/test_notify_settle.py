"""polish55: a person's settling of an effect left in doubt reached no webhook: the notifier
posted requests and run ends, and a settling changes neither (the run stays escalated; its
cause, advice and journal change). Each settling writes one ``effect_settled`` event, whatever
settled it (`loopwright settle` in another process, the API, the dashboard, a refund's
settling); the feed reads those written since its previous look, and each is posted once per
URL, with who settled which effect of which run and what is left. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from doc_loop import TASK
from test_keyless_effect_failures import _paying
from test_live import Listener

import loopwright as lw
from loopwright.cli import main
from loopwright.store import open_store
from loopwright.web._feed import Feed
from loopwright.web._notify import Notifier, NotifyConfig


@pytest.fixture
def hook() -> Iterator[Listener]:
    lst = Listener([])
    try:
        yield lst
    finally:
        lst.close()


def _escalated(url: str) -> str:
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying([], lw.TransientError), TASK)
    assert a.status == "escalated"
    return a.run_id


def test_a_settling_is_posted_once_with_who_settled_what(url: str, hook: Listener) -> None:
    first = _escalated(url)
    st = open_store(url)
    try:
        feed = Feed(st)
        notifier = Notifier(st, NotifyConfig.of([hook.url], link_base="http://dash.example"))
        feed.listen(notifier)
        feed.poll()  # (where things stand: nothing settled yet)
        assert main(["settle", first[:12], "pay:I6", "--not-done", "--by", "ops", "--note",
                     "nothing charged", "--store", url]) == 0  # fmt: skip
        feed.poll()
        notifier.drain()
        feed.poll()  # (once: a later look finds nothing new)
        notifier.drain()
        # a restarted notifier (a new feed over the same store) posts neither again
        again = Notifier(st, NotifyConfig.of([hook.url]))
        later = Feed(st)
        later.listen(again)
        later.poll()
        later.poll()
        again.drain()
    finally:
        st.close()
    posts = [(h["X-Loopwright-Event"], json.loads(body)) for _, h, body in hook.got]
    assert [(e, b["run_id"], b["by"], b["done"]) for e, b in posts] == [
        ("effect_settled", first, "ops", False)
    ], posts
    body = posts[0][1]
    assert (body["key"], body["effect"], body["note"]) == ("pay:I6", "pay", "nothing charged")
    assert body["next"] == "roll the run back to before cycle 1 and resume it"
    assert body["url"] == f"http://dash.example/runs/{first}" and body["url"] in body["text"]
    assert "settled not done by ops" in body["text"], body["text"]
