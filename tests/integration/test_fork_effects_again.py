"""A fork (and the dashboard's rerun, a fork) says what it does with its origin's effects
(effects53b): those done up to the fork point are inherited, never done again; one done after
it with a run-scoped key (the default: the key names the run) is done AGAIN by the fork if its
cycles ask for it — a second payment, by design, and nothing said so. ``Runtime.fork`` (a
warning on ``loopwright.runs``, as a rollback's), ``loopwright fork`` and the dashboard's
rerun confirmation and message name it, and suggest a business ``key=``. SQLite and
PostgreSQL."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from doc_loop import TASK, fields
from support.dashboard import dashboard

import loopwright as lw
from loopwright.cli import main


def _loop(paid: list[str]) -> lw.Loop:
    """Fixes doc.c in cycle 1, then fixes the rest and pays (run-scoped key) in cycle 2,
    which is accepted."""

    @lw.effect("spend", name="pay")
    def pay(invoice: str, *, key: str) -> str:
        paid.append(key)
        return key

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.artifacts["doc"]["c"] != 3:
            return lw.Proposal(edits=(lw.Edit("doc", "c", 3),))
        fix = (lw.Edit("doc", "a", 1), lw.Edit("doc", "b", 2))
        return lw.Proposal(edits=fix, effects=(pay.call(invoice="I6"),))

    return lw.Loop(
        name="again",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )


def test_a_fork_before_a_run_scoped_payment_warns_that_it_pays_again(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    paid: list[str] = []
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(paid), TASK)
        assert (r.status, r.cycles, len(paid)) == ("accepted", 2, 1)
        with caplog.at_level(logging.WARNING, logger="loopwright.runs"):
            early = rt.fork(r.run_id, 1, loop=_loop(paid))
        assert "pay (cycle 2)" in caplog.text and "AGAIN" in caplog.text
        assert "business key=" in caplog.text
        # what it warned of: the fork's cycle 2 pays a second time, under its own key
        assert rt.resume_sync(early.run_id, _loop(paid)).accepted
        assert len(paid) == 2 and paid[0] != paid[1]
        # a fork after the payment inherits it: nothing to warn of
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="loopwright.runs"):
            late = rt.fork(r.run_id, 2, loop=_loop(paid))
        assert "AGAIN" not in caplog.text
        [kept] = rt.store.journal_where(late.run_id, kind="effect", statuses=("done",))
        assert kept.data.get("inherited_from") == r.run_id


def test_loopwright_fork_names_what_is_inherited_and_what_is_done_again(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    paid: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = rt.run_sync(_loop(paid), TASK).run_id
    capsys.readouterr()
    assert main(["fork", run_id, "--at-cycle", "1", "--store", url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning:" in err and "pay (cycle 2)" in err and "AGAIN" in err, err
    assert main(["fork", run_id, "--at-cycle", "2", "--store", url]) == 0
    got = capsys.readouterr()
    out = " ".join(got.out.split())
    assert "inherited, not done again: pay" in out and "AGAIN" not in got.err, out


def test_the_dashboards_rerun_says_which_effects_it_does_again(tmp_path: Path) -> None:

    url = str(tmp_path / "s.db")
    paid: list[str] = []
    with lw.Runtime(url) as rt:
        origin = rt.run_sync(_loop(paid), TASK).run_id
    token = "server-token-0123456789"
    c = dashboard(url, token=token, identity="oscar")
    c.post("/login", data={"token": token})
    page = c.get(f"/runs/{origin}/confirm", params={"action": "rerun"}).text
    assert 'id="effects-again"' in page and "pay (cycle 2)" in page
    head = {"Authorization": f"Bearer {token}"}
    r = c.post(f"/api/runs/{origin}/rerun", json={"at_cycle": 1, "start": False}, headers=head)
    assert r.status_code == 200, r.text
    assert "pay (cycle 2)" in r.json()["message"] and "AGAIN" in r.json()["message"]


@pytest.mark.parametrize("business_first", [0, 60])
def test_the_rerun_confirm_page_reads_a_bounded_number_of_effects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, business_first: int
) -> None:
    """polish53b: the rerun's confirm page read every effect the run did after cycle 0, on each
        view: a long run's page cost its whole journal (invariant 8). It reads a bounded few, names
        the first and says there are more; when the few read hold none it must name (a business
    ``key=`` each), it says some of those not read may be. Counted in rows the store hands
    back, not timed."""

    from loopwright.store.sqlite import SQLiteStore

    many = 120

    @lw.effect("spend", name="pay")
    def pay(invoice: str, *, key: str) -> str:
        return key

    calls = tuple(
        pay.call(invoice=f"I{i}", key=f"inv-{i}")
        if i < business_first
        else pay.call(invoice=f"I{i}")
        for i in range(many)
    )

    def actor(ctx: lw.Context) -> lw.Proposal:
        fix = (lw.Edit("doc", "a", 1), lw.Edit("doc", "b", 2), lw.Edit("doc", "c", 3))
        return lw.Proposal(edits=fix, effects=calls)

    loop = lw.Loop(name="many", actor=actor, verifiers=[fields], effects=[pay],
                   contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
                   approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)))  # fmt: skip
    url = str(tmp_path / "s.db")
    with lw.Runtime(url) as rt:
        origin = rt.run_sync(loop, TASK).run_id
        assert len(rt.store.journal_where(origin, kind="effect", statuses=("done",))) == many
    rows: list[int] = []
    real = SQLiteStore.journal_where

    def counted(self: SQLiteStore, *a: object, **kw: object) -> object:
        got = real(self, *a, **kw)  # type: ignore[arg-type]
        rows.append(len(got))
        return got

    monkeypatch.setattr(SQLiteStore, "journal_where", counted)
    token = "server-token-0123456789"
    c = dashboard(url, token=token, identity="oscar")
    c.post("/login", data={"token": token})
    page = c.get(f"/runs/{origin}/confirm", params={"action": "rerun"}).text
    assert sum(rows) <= 40, rows  # a few, not the run's 120
    assert 'id="effects-again"' in page, page
    if business_first:
        assert "perhaps some of its more than 32 effects after cycle 0" in page
    else:
        assert "pay (cycle 1)" in page and "and more" in page
