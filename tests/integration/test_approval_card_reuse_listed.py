"""A pending request whose card says "already done by run A: approved, its result is reused" is
listed with what is true now once A's payment was refunded (advice47): `loopwright approvals`,
`loopwright show`, the dashboard's inbox, run page and API said "reused" until B resumed and
asked again (approving was safe already: the resumed cycle asks again). The claims of the whole
list are read in one query a kind, not one a request. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from forkserver import run_cli
from support.dashboard import dashboard
from test_approval_card_done_already import _loop
from test_approval_card_reuse_gone import TASK, _b_told_reuse_then_refunded, _pending

import loopwright as lw

GONE = "refunded since: approving asks again"
REUSED = "its result is reused"


def _cli(url: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_DEBUG"}
    env["LOOPWRIGHT_STORE"] = url
    exe = Path(sys.executable).with_name("loopwright")
    r = run_cli([str(exe), *args], env, timeout=120)  # (tests/forkserver.py)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _words(text: str) -> str:
    """``text``'s words in one line: rich wraps a block's lines inside its panel's borders."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


def test_a_card_whose_reused_payment_was_refunded_says_so_where_it_is_listed(url: str) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        b = _b_told_reuse_then_refunded(rt, loop, paid)
        [req] = _pending(rt, b)
        a = rt.store.get_run("A").run_id
    was = f"was done by run {a[:12]} under its key; {GONE}"
    # before: each said "already done by run A under its key: approved, its result is reused"
    listed = _words(_cli(url, "approvals"))
    assert was in listed and REUSED not in listed, listed
    shown = _words(_cli(url, "show", b))
    assert was in shown and REUSED not in shown, shown
    c = dashboard(url, token="test-token-0123456789")
    for page in ("/approvals", f"/runs/{b}"):
        text = _words(c.get(page).text)
        assert was in text and REUSED not in text, page
    [api] = [x for x in c.get("/api/approvals").json() if x["approval_id"] == req.approval_id]
    assert was in api["what"], api
    # the request itself is as it was written; approving it asks again (newuser47)
    with lw.Runtime(url) as rt:
        assert REUSED in rt.store.approval(req.approval_id).what  # type: ignore[union-attr]
        rt.approve(b, by="dan")
        rt.resume_sync(b, loop)
        [again] = _pending(rt, b)
        assert "already done" not in again.what and paid == ["I6", "-I6"]


def test_a_card_whose_payment_stands_is_listed_as_it_was_written(url: str) -> None:
    from loopwright._reuse_now import as_now

    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK, task_key="A")
        rt.approve(a.run_id, by="ann")
        assert rt.resume_sync(a.run_id, loop).accepted
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        [req] = _pending(rt, b)
        [now] = as_now(rt.store, [req])
        assert now is req and REUSED in now.what


def test_the_claims_of_a_long_list_are_read_at_once(url: str) -> None:
    from loopwright._reuse_now import as_now

    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        b = _b_told_reuse_then_refunded(rt, loop, paid)
        c = rt.run_sync(loop, TASK, task_key="C").run_id  # pays again, then D is told reuse
        rt.approve(c, by="ann")
        assert rt.resume_sync(c, loop).accepted
        d = rt.run_sync(loop, TASK, task_key="D").run_id
        reqs = [*_pending(rt, b), *_pending(rt, d)]
        reads: list[Any] = []
        store = rt.store
        one, many = store.effect_claim, store.effect_claims
        store.effect_claim = lambda *a: reads.append(("one", a)) or one(*a)  # type: ignore[method-assign]
        store.effect_claims = lambda p: reads.append(("many", p)) or many(p)  # type: ignore[method-assign]
        try:
            shown = as_now(store, reqs * 20)
        finally:
            del store.effect_claim, store.effect_claims
        assert [r[0] for r in reads] == ["many"], reads
        # B was told A's payment is reused: C paid it again since, and approving B runs
        # nothing (it reuses C's); D was told C's, which stands
        assert f"done again by run {c[:12]}: approving does not run it again" in shown[0].what
        assert REUSED in shown[1].what and shown[1] is reqs[1]


PERFORM = "Effect it would perform:"
DONE_BEFORE = "Effect done before under its key (approving this request does not run it):"


def _effect_words(c: TestClient, page: str) -> list[str]:
    return re.findall(r"<p><strong>(Effect [^<]*)</strong>", c.get(page).text)


def test_a_reuse_card_does_not_say_it_would_perform_the_effect(url: str) -> None:
    """A card whose heading says the payment is reused read "Effect it would perform" above
    its arguments (names48); a first payment's card still says it."""
    paid: list[str] = []
    loop = _loop(paid)
    c = dashboard(url, token="test-token-0123456789")
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        assert _effect_words(c, "/approvals") == [PERFORM]  # a first payment: it runs
        assert _effect_words(c, f"/runs/{a}") == [PERFORM]
        rt.approve(a, by="ann")
        assert rt.resume_sync(a, loop).accepted
        b = rt.run_sync(loop, TASK, task_key="B").run_id
        [req] = _pending(rt, b)
        assert REUSED in req.what
        for page in ("/approvals", f"/runs/{b}"):
            assert _effect_words(c, page) == [DONE_BEFORE], page  # before: PERFORM
    with lw.Runtime(url) as rt:  # refunded since: approving asks again, it runs nothing
        rt.rollback(a, to_cycle=0, by="ops", loop=loop)
        [refund] = _pending(rt, a)
        rt.approve(a, by="fin", approval_id=refund.approval_id)
        rt.resume_sync(a, loop)
        assert paid == ["I6", "-I6"]
    assert GONE in c.get(f"/runs/{b}").text
    assert _effect_words(c, f"/runs/{b}") == [DONE_BEFORE]
