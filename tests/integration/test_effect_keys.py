"""Invariant 2 per business action: an effect's idempotency key (``key=`` on the effect or the
call) is the store's, not the run's. A second run of the same store asking for a done key gets
the recorded result and says so; the same key with other arguments, or a key another run holds
with an unknown outcome, is never run again here but goes to a person. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import loopwright as lw
from loopwright import _effect_keys

TASK = {"artifacts": {"inv": {"amount": 0}}}


class Bank:
    """A counting payment receiver (thread-safe): how many times each key was executed."""

    def __init__(self, gate: threading.Barrier | None = None) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.gate = gate

    def pay(self, invoice: str, amount: float, key: str) -> dict[str, Any]:
        with self.lock:
            self.calls.append(key)
        return {"paid": invoice, "amount": amount}


def loop(bank: Bank, amount: float = 40.0, invoice: str = "INV-7") -> lw.Loop:
    pay = lw.effect("spend", name="pay", key=lambda a: a["invoice"])(bank.pay)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"amount": amount}).edits,
            effects=(pay.call(invoice=invoice, amount=amount),),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return lw.Loop(
        name="pay",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )


def _events(rt: lw.Runtime, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == kind]


def test_a_second_run_gets_the_recorded_result_and_says_so(url: str) -> None:
    bank = Bank()
    with lw.Runtime(url) as rt:
        first = rt.run_sync(loop(bank), TASK, task_key="first")
        second = rt.run_sync(loop(bank), TASK, task_key="second")
        assert first.accepted and second.accepted
        assert bank.calls == ["pay:INV-7"]  # executed once in the store
        [reused] = _events(rt, second.run_id, "effect_reused")
        assert reused["from_run"] == first.run_id
        assert _events(rt, second.run_id, "effect_recovered") == []  # not this run's crash
        [outcome] = rt.store.checkpoints(second.run_id)[-1].record["effects"]
        assert (outcome["reused"], outcome["recovered"]) == (True, False)
        [note] = [n for n in second.state.notes if n.get("kind") == "effect"]
        assert note["reused"] is True and note["result"] == {"paid": "INV-7", "amount": 40.0}
        [entry] = rt.store.journal(second.run_id, kind="effect")
        assert entry.status == "done" and entry.data["from_run"] == first.run_id


def test_the_same_key_with_other_arguments_goes_to_a_person(url: str) -> None:
    bank = Bank()
    with lw.Runtime(url) as rt:
        rt.run_sync(loop(bank, 40.0), TASK, task_key="first")
        other = rt.run_sync(loop(bank, 99.0), TASK, task_key="second")
        assert bank.calls == ["pay:INV-7"]
        assert (other.status, other.stop_reason) == ("escalated", "escalated")
        assert other.packet is not None
        assert "other arguments" in other.packet["cause"]


def test_a_key_whose_action_failed_is_free_for_another_run(url: str) -> None:
    bank = Bank()
    failing = Bank()

    def refuse(invoice: str, amount: float, key: str) -> dict[str, Any]:
        failing.calls.append(key)
        raise lw.RefusedError("card declined")

    with lw.Runtime(url) as rt:
        bad = loop(bank)
        bad.effects[0].fn = refuse  # the same declared effect, a receiver that refuses
        r1 = rt.run_sync(bad, TASK, task_key="first")
        assert r1.status == "escalated" and failing.calls == ["pay:INV-7"]
        r2 = rt.run_sync(loop(bank), TASK, task_key="second")
        # a refusal is a finished attempt: the retry is a new one, under the next key (a
        # provider that keeps a declined answer by key would decline the first key again)
        assert r2.accepted and bank.calls == ["pay:INV-7~2"]


def test_racing_runs_execute_a_key_once(url: str) -> None:
    """Four runs in four threads (each its own runtime and connection) ask for the same key at
    once: exactly one executes it; each other run gets its result or goes to a person."""
    bank = Bank()
    barrier = threading.Barrier(4)
    results: list[Any] = [None] * 4

    def one(i: int) -> None:
        with lw.Runtime(url) as rt:
            barrier.wait()
            results[i] = rt.run_sync(loop(bank), TASK, task_key=f"race-{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert bank.calls == ["pay:INV-7"]
    assert all(r is not None for r in results)
    assert all(r.status in ("accepted", "escalated") for r in results)
    assert sum(r.accepted for r in results) >= 1


@pytest.mark.parametrize("invoice", ["INV-7", "INV~2"])  # "~2" is no redo number here
def test_a_key_an_earlier_release_did_is_claimed_by_the_upgrade(
    url: str, invoice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From an outside probe (helper-45): a store written before keys were claimed store-wide
    # (SQLite v3, PostgreSQL v2) was migrated with effect_keys empty, so a run of the new
    # release paid again an invoice the old one had paid. The store is put back as such an
    # upgrade left it: the claim gone, the journal entry without its "action", the schema
    # before the backfill.
    bank = Bank()
    # An earlier release took a key ending as a redo's does ("~2"); this one refuses it
    monkeypatch.setattr(_effect_keys, "_redo_like", lambda key: False)
    with lw.Runtime(url) as rt:
        first = rt.run_sync(loop(bank, invoice=invoice), TASK, task_key="first")
        as_before_claims(rt, url)
        [entry] = rt.store.journal(first.run_id, kind="effect")
        assert "action" not in entry.data
    with lw.Runtime(url) as rt:  # opening it migrates: the backfill
        second = rt.run_sync(loop(bank, invoice=invoice), TASK, task_key="second")
        assert second.accepted
        assert bank.calls == [f"pay:{invoice}"]  # paid once, by the earlier release
        [reused] = _events(rt, second.run_id, "effect_reused")
        assert reused["from_run"] == first.run_id


def as_before_claims(rt: lw.Runtime, url: str) -> None:
    """Put the store back as a release before keys were claimed store-wide left it (SQLite v3,
    PostgreSQL v2): no claims, the journal's entries without what later releases recorded in
    them ("action", "call_key", "generation"), the schema before the backfill."""
    from loopwright.store._pg_schema import PG_MIGRATIONS
    from loopwright.store._schema import BACKFILL_CLAIMS, SQLITE_MIGRATIONS

    pg = url.startswith("postgres")
    before = (PG_MIGRATIONS if pg else SQLITE_MIGRATIONS).index([BACKFILL_CLAIMS])
    strip = (
        "(data::jsonb - 'action' - 'call_key' - 'generation')::json"
        if pg
        else "json_remove(data, '$.action', '$.call_key', '$.generation')"
    )
    with rt.store._tx() as conn:  # type: ignore[attr-defined]
        conn.execute("DELETE FROM effect_keys")
        conn.execute(f"UPDATE journal SET data = {strip} WHERE kind = 'effect'")
        conn.execute(f"UPDATE loopwright_meta SET value = '{before}' WHERE key = 'schema_version'")
        if not pg:  # and the SQLite steps after it undone, as they were not yet there
            for undo in (
                "DROP INDEX runs_claimable",
                "DROP TRIGGER approvals_open_insert",
                "DROP TRIGGER approvals_open_delete",
                "DROP TRIGGER approvals_open_update",
                "ALTER TABLE runs DROP COLUMN open_requests",
                "ALTER TABLE effect_keys DROP COLUMN generation",
            ):
                conn.execute(undo)
