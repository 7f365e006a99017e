"""Governance doubts a finance team would raise (docs/permissions.md), on SQLite and PostgreSQL:
who asked for a refund, what earned authority may approve, an allowed overwrite of a person's
work, what revokes earned authority, and what the audit log says of a refused fork or rollback.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from support.crash import Crash, phase_hook
from support.printed import shown_text
from test_people import (
    EARNED,
    FOUR_EYES,
    PAID,
    audit_lines,
    make_loop,
    overwriting,
    paid_once,
    people,
    task,
    wirer,
)

import loopwright as lw
from loopwright._earned import authority_status

SEPARATE = (lw.PolicyRule(kind="spend", action="require", separate=True, name="sep"),)


@pytest.mark.parametrize("how", ["rollback", "cancel"])
def test_who_rolled_back_or_cancelled_a_run_cannot_approve_its_refund(url: str, how: str) -> None:
    # rita rolled the run back (or cancelled it): the refund it offered was hers to approve
    # under a rule separating duties, as was the payment its redone cycles made again.
    loop = make_loop(SEPARATE)
    PAID.clear()
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("S-1", 100), task_key="s1", by="root")
        rt.approve(r.run_id, by="ben")
        assert rt.resume_sync(r.run_id, loop).accepted
        if how == "rollback":
            rt.rollback(r.run_id, 0, by="rita", loop=loop)
        else:
            # a parked run can be cancelled: park a second payment first (cycle 2 judges the
            # edit, cycle 3 pays)
            loop = dataclasses.replace(loop, contract=lw.Contract(budget=lw.Budget(max_cycles=3)))
            r = rt.run_sync(loop, task("S-2", 100), task_key="s2", by="root")
            rt.approve(r.run_id, by="ben")
            rt.resume_sync(r.run_id, loop)
            rt.edit(r.run_id, "inv/invoice", "S-2b", by="root")  # reopened: pays S-2b next
            assert rt.resume_sync(r.run_id, loop).status == "awaiting_approval"
            rt.cancel(r.run_id, by="rita", loop=loop)
        offer = rt.pending_approval(r.run_id)
        assert offer.kind == "compensation"
        with pytest.raises(lw.NotPermittedError, match="rita started, edited, rolled back or"):
            rt.approve(r.run_id, by="rita")
        assert ("rita", "approve", "refused") in audit_lines(rt)
        assert rt.approve(r.run_id, by="cat").status == "approved"
        if how == "rollback":
            # the payment redone after the refund is not hers to approve either
            again = rt.resume_sync(r.run_id, loop)
            assert again.status == "awaiting_approval"
            assert rt.pending_approval(r.run_id).kind == "effect"
            with pytest.raises(lw.NotPermittedError, match="separation of duties"):
                rt.approve(r.run_id, by="rita")


def test_a_refused_rollback_does_not_make_its_author_a_requester(url: str) -> None:
    loop = make_loop(SEPARATE)
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("S-3", 100), task_key="s3", by="root")
        with pytest.raises(lw.ConfigError, match="no completed checkpoint for cycle 9"):
            rt.rollback(r.run_id, 9, by="rita", loop=loop)
        assert rt.approve(r.run_id, by="rita").status == "approved"


def test_a_refused_edit_is_audited_refused_and_does_not_make_its_author_a_requester(
    url: str,
) -> None:
    """An edit refused for what it asked (no such part, the value the part holds already, a
    part the parked request would change, a run executing elsewhere) was audited "allowed"
    before it was checked (newuser47): the log said rita edited the run, and separation of
    duties then kept her from approving its payment, though nothing was edited."""
    loop = make_loop(SEPARATE)
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("S-4", 100), task_key="s4", by="root")
        before = len(rt.store.audit())
        with pytest.raises(lw.ConfigError, match="no part 'inv/nope'"):
            rt.edit(r.run_id, "inv/nope", 1, by="rita")
        with pytest.raises(lw.ConfigError, match="current value already"):
            rt.edit(r.run_id, "inv/amount", 100, by="rita")
        with pytest.raises(lw.ConfigError, match="waits for a decision on a change to"):
            rt.edit(r.run_id, "inv/checked", False, by="rita")
        token = rt.store.acquire_lease(r.run_id, "another-host", 3600.0)  # executing elsewhere
        with pytest.raises(lw.ConflictError, match="executing elsewhere"):
            rt.edit(r.run_id, "inv/amount", 90, by="rita")
        rt.store.release_lease(r.run_id, token)
        got = rt.store.audit()[before:]
        assert [(a.actor, a.action, a.outcome) for a in got] == [("rita", "edit", "refused")] * 4
        assert "no part 'inv/nope'" in got[0].detail["reason"]
        assert got[0].detail["part"] == "inv/nope"
        assert rt.approve(r.run_id, by="rita").status == "approved"
        # an edit made is audited allowed, once, as before
        rt.edit(r.run_id, "inv/amount", 90, by="root")
        assert rt.store.audit()[-1].actor == "root"
        assert [(a.action, a.outcome) for a in rt.store.audit()[-1:]] == [("edit", "allowed")]


def test_earned_authority_never_approves_what_its_earners_could_not(url: str) -> None:
    # otto (no finance role) and lim (spend up to 200) earned the loop its authority: it
    # approved a 900 payment whose rule asks for finance, and one above lim's limit.
    plain = make_loop((lw.PolicyRule(kind="spend", action="require", name="any"),), (EARNED,))
    finance = make_loop(
        (lw.PolicyRule(kind="spend", action="require", role="finance", name="fin"),), (EARNED,)
    )
    with lw.Runtime(url) as rt:
        people(rt)
        rt.store.add_user("lim", roles=["approver"], limits={"spend": 200.0}, by="root", now=1.0)
        for i, who in enumerate(["otto", "otto", "lim", "lim", "lim"]):
            r = rt.run_sync(plain, task(f"E-{i}", 100), task_key=f"k{i}", by="root")
            rt.approve(r.run_id, by=who)
            assert rt.resume_sync(r.run_id, plain).accepted
        assert authority_status(rt.store, "payer", "v1", [EARNED])[0].earned
        assert rt.run_sync(plain, task("E-5", 150), task_key="k5", by="root").accepted
        above = rt.run_sync(plain, task("E-6", 900), task_key="k6", by="root")
        assert above.status == "awaiting_approval"  # lim could not approve 900
        req = rt.pending_approval(above.run_id)
        assert "2 of 5 clean approvals by people who could approve this request" in req.why
        role = rt.run_sync(finance, task("E-7", 100), task_key="k7", by="root")
        assert role.status == "awaiting_approval"  # none of them approved under finance
        # a revoked earner's approvals no longer count
        rt.store.revoke_user("lim", now=time.time())
        assert rt.run_sync(plain, task("E-8", 150), task_key="k8", by="root").status == (
            "awaiting_approval"
        )


def test_earned_authority_under_separation_excludes_the_runs_requester(url: str) -> None:
    # rita's own approvals of other runs earned the loop authority; her own run's payment,
    # under a rule separating duties, was then approved on her record alone.
    loop = make_loop(SEPARATE, (lw.EarnedAuthority(kind="spend", after=2, up_to=1000),))
    with lw.Runtime(url) as rt:
        people(rt)
        for i in range(2):
            r = rt.run_sync(loop, task(f"R-{i}", 100), task_key=f"r{i}", by="root")
            rt.approve(r.run_id, by="rita")
            assert rt.resume_sync(r.run_id, loop).accepted
        mine = rt.run_sync(loop, task("R-2", 100), task_key="r2", by="rita")
        assert mine.status == "awaiting_approval"
        theirs = rt.run_sync(loop, task("R-3", 100), task_key="r3", by="root")
        assert theirs.accepted  # earned, for a run rita did not ask for


def test_a_denied_refund_does_not_revoke_earned_authority(url: str) -> None:
    """Denying a refund keeps the payment: a person standing by it is no evidence against
    the approvals that earned the authority (a refund that runs does revoke it)."""
    grant = lw.EarnedAuthority(kind="spend", after=1, up_to=1000)
    loop = make_loop((lw.PolicyRule(kind="spend", action="require"),), (grant,))
    with lw.Runtime(url) as rt:
        r = paid_once(rt, loop, "R-1")
        rt.rollback(r.run_id, 0, by="sam", loop=loop)
        assert rt.pending_approval(r.run_id).kind == "compensation"
        rt.deny(r.run_id, by="ben", note="the payment stands")
        [standing] = authority_status(rt.store, "payer", "v1", [grant])
        assert standing.earned and standing.revoked_by is None
        assert rt.run_sync(loop, task("R-2", 100), task_key="r2").accepted


def test_an_allowed_overwrite_of_a_persons_edit_says_whose_it_was(url: str) -> None:
    loop = overwriting(lw.PolicyRule(kind="overwrite_accepted", action="allow", name="ow-ok"))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "a0"}}}, task_key="w", by="root")
        rt.edit(r.run_id, "doc/a", "rita's", by="rita")
        r = rt.resume_sync(r.run_id, loop)
        assert r.state.values()["doc"]["a"] == "the loop's"  # explicit allow: it is written
        [ev] = [e for e in rt.store.events(r.run_id) if e.kind == "overwrite_allowed"]
        assert ev.data == {
            "rule": "ow-ok",
            "parts": [{"part": "doc/a", "version": 3, "accepted_by": "rita"}],
        }
        [rec] = [a for a in rt.store.audit() if a.action == "allow overwrite"]
        assert (rec.actor, rec.target) == ("policy:ow-ok", f"run {r.run_id}")
        assert rec.detail["parts"][0]["accepted_by"] == "rita"
    text = " ".join(shown_text(url, r.run_id)[0].split())
    assert "write over, no one asked: cycle 3: doc/a v3 (rita's edit), allowed by rule ow-ok" in (
        text
    )


def test_a_refused_fork_or_rollback_is_audited_refused_with_its_reason(url: str) -> None:
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(make_loop(FOUR_EYES), task("F-1", 5), task_key="f", by="rita")
        before = len(rt.store.audit())
        with pytest.raises(lw.ConfigError, match="cycle 7"):
            rt.fork(r.run_id, 7, by="rita")
        with pytest.raises(lw.ConfigError, match="cycle 7"):
            rt.rollback(r.run_id, 7, by="rita")
        with pytest.raises(lw.ConfigError, match="is taken"):
            rt.fork(r.run_id, 0, by="rita", task_key="f")
        got = rt.store.audit()[before:]
        assert [(a.actor, a.action, a.outcome) for a in got] == [
            ("rita", "fork", "refused"),
            ("rita", "rollback", "refused"),
            ("rita", "fork", "refused"),
        ]
        assert "no completed checkpoint for cycle 7" in got[0].detail["reason"]
        new = rt.fork(r.run_id, 0, by="rita")
        [made] = rt.store.audit()[before + 3 :]
        assert (made.action, made.outcome, made.detail["run"]) == ("fork", "allowed", new.run_id)
        assert "contract_changed" not in made.detail  # the origin's contract, unchanged
        token = rt.store.acquire_lease(r.run_id, "another-host", 3600.0)  # executing elsewhere
        with pytest.raises(lw.ConflictError, match="executing elsewhere"):
            rt.rollback(r.run_id, 0, by="rita")
        rt.store.release_lease(r.run_id, token)
        busy = rt.store.audit()[-1]
        assert (busy.action, busy.outcome) == ("rollback", "refused")
        assert "executing elsewhere" in busy.detail["reason"]


def test_one_person_under_two_spellings_is_one_person(url: str) -> None:
    two = make_loop((lw.PolicyRule(kind="spend", action="require", approvers=2),))
    with lw.Runtime(url) as rt:  # an open store takes any spelling: compared as one
        r = rt.run_sync(two, task("N-1", 50000), task_key="n1", by="sam")
        with pytest.raises(lw.NotPermittedError, match="separation of duties"):
            rt.approve(r.run_id, by=" Sam")
        rt.approve(r.run_id, by="ben")
        with pytest.raises(lw.ConflictError, match=r"already approved .* \(as ben\)"):
            rt.approve(r.run_id, by="BEN")
        assert rt.pending_approval(r.run_id).status == "pending"
        assert rt.approve(r.run_id, by="cat").decided_by == "ben, cat"
        people(rt)
        with pytest.raises(lw.ConflictError, match="same name spelled another way"):
            rt.store.add_user("Ben", roles=["approver"], limits={}, by="root", now=1.0)
        # a run started under another spelling of a user's name is still theirs
        big = rt.run_sync(make_loop(FOUR_EYES), task("N-2", 50000), task_key="n2", by="Rita")
        with pytest.raises(lw.NotPermittedError, match="separation of duties"):
            rt.approve(big.run_id, by="rita")


def test_who_started_a_forks_origin_cannot_approve_the_forks_payment(url: str) -> None:
    # rita started the run; root forked it (or reran it from the dashboard, a fork too): the
    # fork's 50,000 payment, of rita's task, took her vote as one of its four eyes.
    loop = make_loop(FOUR_EYES)
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("F-1", 50000), task_key="f1", by="rita")
        fork = rt.fork(r.run_id, 0, by="root")
        again = rt.fork(fork.run_id, 0, by="root")  # a fork of a fork
        for f in (fork, again):
            assert rt.resume_sync(f.run_id, loop).status == "awaiting_approval"
            with pytest.raises(lw.NotPermittedError, match="or a run it was forked from"):
                rt.approve(f.run_id, by="rita")
            assert rt.approve(f.run_id, by="ben").status == "pending"


def test_earned_authority_on_another_field_does_not_cover_what_the_rule_reads(url: str) -> None:
    # The rule reads the total; the grant was written for "amount" (here a line count, 3):
    # a 50,000 total was approved on earned authority "up to 1,000".
    loop = wirer((lw.EarnedAuthority(kind="spend", after=1, up_to=1000),))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, task("W-1", 100.0), task_key="w1")
        rt.approve(r.run_id, by="ana")
        assert rt.resume_sync(r.run_id, loop).accepted
        big = rt.run_sync(loop, task("W-2", 50000.0), task_key="w2")
        assert big.status == "awaiting_approval"
        assert "the rule reads total, which is 50000.0" in rt.pending_approval(big.run_id).why
        assert rt.run_sync(loop, task("W-3", 500), task_key="w3").accepted  # within: earned


def test_a_limit_naming_the_kind_in_another_case_says_so_when_it_refuses(url: str) -> None:
    # `--limit Spend=100`: kinds are exact strings (an effect's is `spend`), so every payment
    # was refused with "may approve only Spend requests; this one is spend", the mismatch
    # left to be spotted. The refusal now names both spellings; the kinds are not folded.
    loop = make_loop((lw.PolicyRule(kind="spend", action="require"),))
    with lw.Runtime(url) as rt:
        people(rt)
        rt.store.add_user("cap", roles=["approver"], limits={"Spend": 100.0}, by="root", now=0.0)
        r = rt.run_sync(loop, task("C-1", 50), task_key="c1", by="root")
        said = r"the limit names 'Spend', the request's kind is 'spend': kinds are matched exactly"
        with pytest.raises(lw.NotPermittedError, match=said):
            rt.approve(r.run_id, by="cap")
        assert rt.pending_approval(r.run_id).status == "pending"  # refused, not folded
        assert rt.approve(r.run_id, by="ben").status == "approved"


def test_an_allowed_overwrite_is_audited_once_when_its_cycle_is_redone_after_a_crash(
    url: str,
) -> None:
    # The record is written when the policy decides, before the cycle commits: a process that
    # died between the two wrote it, and the cycle redone on resume wrote it again.
    loop = overwriting(lw.PolicyRule(kind="overwrite_accepted", action="allow", name="ow-ok"))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "a0"}}}, task_key="w", by="root")
        rt.edit(r.run_id, "doc/a", "rita's", by="rita")
    with lw.Runtime(url) as rt:
        # (cycle 2 judged rita's edit; cycle 3 is the actor's, which writes over it)
        rt._on_phase = phase_hook(("before_checkpoint", 3))  # cycle 3 decided, not committed
        with pytest.raises(Crash):
            rt.resume_sync(r.run_id, loop)
        assert rt.store.latest_checkpoint(r.run_id).cycle == 2
    with lw.Runtime(url) as rt:
        r = rt.resume_sync(r.run_id, loop)
        assert r.state.values()["doc"]["a"] == "the loop's"
        [ev] = [e for e in rt.store.events(r.run_id) if e.kind == "overwrite_allowed"]
        records = [a for a in rt.store.audit() if a.action == "allow overwrite"]
        assert [(a.actor, a.target, a.detail["cycle"]) for a in records] == [
            ("policy:ow-ok", f"run {r.run_id}", 3)
        ]
        assert records[0].detail["parts"] == ev.data["parts"]


def test_a_fork_that_changes_the_contract_says_so_in_the_audit_log(url: str) -> None:
    # Dropping the risk rules that pause a run for a person, or raising a budget, is a change
    # of policy: the audit record of the fork (or the dashboard's rerun) says what changed.
    guarded = lw.Contract(
        budget=lw.Budget(max_cycles=2),
        risk=(lw.RiskRule(name="big", touches=("inv/total",), reason="a person signs"),),
    )
    loop = dataclasses.replace(make_loop(FOUR_EYES), contract=guarded)
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("C-1", 5), task_key="c", by="rita")
        looser = lw.Contract(budget=lw.Budget(max_cycles=99))
        new = rt.fork(r.run_id, 0, by="root", contract=looser)
        made = rt.store.audit()[-1]
        assert (made.actor, made.action, made.detail["run"]) == ("root", "fork", new.run_id)
        changed = made.detail["contract_changed"]
        assert changed["budget.max_cycles"] == {"from": 2, "to": 99}
        assert changed["risk"]["to"] == []
        assert [rule["name"] for rule in changed["risk"]["from"]] == ["big"]


def test_a_vote_racing_its_voters_revocation_does_not_count(url: str) -> None:
    # cat's vote was checked, then cat was revoked (her pending votes withdrawn), then her vote
    # was written: it stood, and with ben's made the four-eyes payment approved by a person
    # no longer allowed to approve anything. The revocation lands in that window here.
    loop = make_loop(FOUR_EYES)
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(loop, task("V-1", 25000), task_key="v1", by="root")
        rt.approve(r.run_id, by="ben")
        add_vote = rt.store.add_vote

        def revoked_first(approval_id: str, by: str, **kw: Any) -> Any:
            rt.store.revoke_user(by, now=time.time())
            return add_vote(approval_id, by, **kw)

        rt.store.add_vote = revoked_first  # type: ignore[method-assign]
        with pytest.raises(lw.ApprovalError, match="cat was revoked"):
            rt.approve(r.run_id, by="cat")
        rt.store.add_vote = add_vote  # type: ignore[method-assign]
        req = rt.pending_approval(r.run_id)
        assert req.status == "pending"
        assert [v.by for v in rt.store.votes(req.approval_id)] == ["ben"]
        assert ("cat", "approve", "refused") in audit_lines(rt)
        assert rt.approve(r.run_id, by="rita").decided_by == "ben, rita"


@pytest.mark.postgres
def test_two_admins_adding_one_person_under_two_spellings_at_once_add_one(pg_url: str) -> None:
    """Each add read the users before the other's insert, so "Ben" and "ben" could both be
    added at once on PostgreSQL (the folded name has no index). A pauses after its read; B
    either finishes (the bug: then both succeed) or waits on A; then A goes on. One of the
    two is added, the other refused."""
    import threading

    import psycopg

    from loopwright.store import _people_sql
    from loopwright.store.postgres import _split_url

    with lw.Runtime(pg_url) as rt:
        rt.store.add_user("zed", roles=["admin"], limits={}, by="setup", now=time.time())
    read, go = threading.Event(), threading.Event()
    real_key = _people_sql.person_key

    def pausing_key(name: str) -> str:
        if threading.current_thread().name == "A" and name == "zed":
            read.set()  # A has read the users and compares them: hold it here
            assert go.wait(120), "the test never let A go on"
        return real_key(name)

    results: dict[str, str] = {}

    def add(who: str, name: str) -> None:
        try:
            store = lw.Runtime(pg_url).store
            try:
                store.add_user(name, roles=["approver"], limits={}, by="root", now=time.time())
                results[who] = "added"
            finally:
                store.close()
        except lw.ConflictError:
            results[who] = "refused"
        except BaseException as exc:  # reported below, not lost in the thread
            results[who] = repr(exc)

    conninfo = _split_url(pg_url)[0]
    _people_sql.person_key = pausing_key  # type: ignore[assignment]
    try:
        a = threading.Thread(target=add, args=("A", "Ben"), name="A")
        a.start()
        assert read.wait(120)
        b = threading.Thread(target=add, args=("B", "ben"), name="B")
        b.start()
        with psycopg.connect(conninfo, autocommit=True) as watch:
            for _ in range(12000):  # B finished, or waits for A's lock (polled, not timed)
                waiting = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'LOCK TABLE users%'"
                ).fetchone()
                if not b.is_alive() or (waiting and waiting[0]):
                    break
                time.sleep(0.01)
            else:
                pytest.fail("B neither finished nor waited for A")
        go.set()
        a.join(120)
        b.join(120)
    finally:
        go.set()
        _people_sql.person_key = real_key  # type: ignore[assignment]
    assert sorted(results.values()) == ["added", "refused"], results
    with lw.Runtime(pg_url) as rt:
        names = {u.name for u in rt.store.list_users()}
    assert len(names & {"Ben", "ben"}) == 1, names
