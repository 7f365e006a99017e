"""Paying once and refunding once, checked from outside with real processes killed (SIGKILL)
at deterministic phase boundaries, against a provider that behaves like Stripe and keeps its
own ledger (``moneykill/ledger.py``: charges and refunds by idempotency key in a file of its
own, a declined answer kept by key, a repeated key deduplicated). SQLite and PostgreSQL.

Scenarios (``moneykill/trial.py``): a declined payment, then another run asking for the same
invoice; a payment whose refund (a person's cancel) is killed before or after the provider's
call, then another run asking; the same refund while two or four runs ask at once; a payment
whose own code failed after the provider charged, rolled back and redone; a fork accepted on
the payment it inherited while its origin is cancelled. After each trial
every run is resumed to its end (a parked one cancelled by a person), and the provider's ledger
must show: never two standing charges for one invoice, never two refunds of one charge, never
a declined key asked again, never a run accepted on a payment refunded before its last cycle,
never one accepted on a payment refunded without a person approving the refund told of it.
``bench/money_kills.py`` runs every scenario at every kill point, repeatedly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import loopwright as lw

sys.path.insert(0, str(Path(__file__).resolve().parent / "moneykill"))

from ledger import Ledger
from trial import run_trial

# (scenario, kill point, reconcile hooks, each run's end): each kill at a boundary its
# scenario reaches
TRIALS = [
    # killed right after the provider declined: the resume asks the same key (its hook found
    # no charge), declined again; then the next runs pay under the next key
    (
        "declined_resumed_then_another",
        "provider:pay:declined",
        "both",
        {"A": "escalated", "B": "accepted", "C": "accepted"},
    ),
    # the refund's answer lost: B asks while it is unsettled
    ("refund_then_another", "before_effect_result:1", "both", {"A": "cancelled", "B": "escalated"}),
    # the refund failed after it refunded: in doubt, B must not reuse the payment
    ("refund_bug_then_another", None, "none", {"A": "cancelled", "B": "escalated"}),
    # the payment's code failed after the charge; the rollback's redo killed after its result
    ("redo_after_a_bug", "after_effect_result:1", "both", {"A": "accepted", "B": "escalated"}),
    # B accepted on A's payment; A cancelled: its refund waits for a person (naming B) and
    # the charge stands; nobody approves it here
    ("reused_then_refunded", None, "both", {"A": "cancelled", "B": "accepted"}),
    # ...approved by one, the refund killed before its result: settled on resume, B told
    (
        "reused_then_refund_approved",
        "before_effect_result:1",
        "both",
        {"A": "cancelled", "B": "accepted"},
    ),
    # ...killed once the provider refunded, no hook to ask: in doubt, B told when it started
    ("reused_then_refund_approved", "provider:refund", "none", {"A": "cancelled", "B": "accepted"}),
    # F, a fork of A at its payment, accepted on the payment it inherited; A cancelled: its
    # refund waits for a person naming F (before: it ran, and F was never told)
    ("forked_then_refunded", None, "both", {"A": "cancelled", "F": "accepted"}),
    # ...approved by another person, the refund killed before its result: F told
    (
        "forked_then_refund_approved",
        "before_effect_result:1",
        "both",
        {"A": "cancelled", "F": "accepted"},
    ),
    # B parked on a card promising A's payment reused; A's refund approved and killed once
    # the provider refunded, no hook to ask: B's card approved as it stood pays nothing (the
    # claim is done no more: B is asked again, and a person cancels it) (kill48; on stop 46's
    # code, before newuser47, B escalated here, and with no kill paid under the next key)
    ("reuse_card_refunded", "provider:refund", "none", {"A": "cancelled", "B": "cancelled"}),
    # ...killed before the refund's result, settled by the hook: B asked again, then cancelled
    ("reuse_card_refunded", "before_effect_result:1", "both", {"A": "cancelled", "B": "cancelled"}),
]


@pytest.mark.parametrize(("scenario", "kill", "hooks", "want"), TRIALS)
def test_killed_payments_and_refunds_keep_the_ledger(
    url: str, tmp_path: Path, scenario: str, kill: str | None, hooks: str, want: dict[str, str]
) -> None:
    t, ends, broken = run_trial(tmp_path, url, scenario, kill, hooks)
    assert broken == [], (ends, broken)
    assert t.killed == (kill is not None)  # the kill happened where it was placed
    assert ends == want
    # B (or F) accepted on A's payment is refunded only once a person approved, told of it
    later = {"reused_then_refund_approved": ["B"], "forked_then_refund_approved": ["F"]}
    assert t.refunded_later == later.get(scenario, [])


def test_a_declined_invoice_is_paid_by_the_next_run_under_the_next_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"  # (both stores: the trials above)
    _, ends, broken = run_trial(tmp_path, url, "declined_then_another", None, "none")
    assert broken == [] and ends == {"A": "escalated", "B": "accepted"}
    charges = sorted(Ledger(tmp_path / "provider.db").charges())
    assert charges == [("pay:I6", "I6", "declined", 0), ("pay:I6~2", "I6", "paid", 0)]


@pytest.mark.postgres
def test_four_runs_ask_for_an_invoice_while_its_refund_is_killed(
    pg_url: str, tmp_path: Path
) -> None:
    t, ends, broken = run_trial(
        tmp_path, pg_url, "refund_among_askers", "before_effect_result:1", "both", askers=4
    )
    assert broken == [], (ends, broken)
    assert ends["A"] == "cancelled"
    with lw.Runtime(pg_url) as rt:
        a = rt.store.get_run("A").run_id
        asks = [r for r in rt.store.approvals(run_id=a) if r.kind == "compensation"]
    # the refund ran (killed before its result), or an asker reused the payment first and
    # the refund waits for a person, naming the askers that reused it
    assert t.killed >= 1 or [r.evidence["reused_by"] for r in asks if r.status == "pending"]
