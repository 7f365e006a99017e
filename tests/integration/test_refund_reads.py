"""What a refund reads of the store: a payment's reuses before its claim, its entry once.

Before (money46): offering a refund read the payment's claim and then its reuses, for every
payment (most have no reuse, and then the claim is not needed); running it read the payment's
journal entry twice (the check for reuses no person was told of, then the refund itself).
The answers are the same (test_reused_refunds.py, test_fork_reuses.py); this counts the reads.
SQLite and PostgreSQL."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from doc_loop import TASK
from test_redo_keys import Provider, paying
from test_reused_refunds import compensation_requests

import loopwright as lw


def counting(rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The store's claim and reuse reads, and its reads of the payment's entry, counted."""
    seen: Counter[str] = Counter()
    store: Any = rt.store
    for name in ("effect_claim", "effect_reuses"):
        real = getattr(store, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            seen[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(store, name, counted)
    journal = store.journal

    def read(*a: Any, **k: Any) -> Any:
        if k.get("key") == "effect:pay:I6":
            seen["payment entry"] += 1
        return journal(*a, **k)

    monkeypatch.setattr(store, "journal", read)
    return seen


def test_a_refund_nobody_reused_reads_no_claim(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        seen = counting(rt, monkeypatch)
        rt.cancel(a, by="ops", loop=loop)
        assert seen == Counter({"effect_reuses": 1})
        seen.clear()
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0
        assert seen["effect_claim"] == 0 and seen["effect_reuses"] == 1
        assert seen["payment entry"] == 1


def test_a_reused_refund_reads_its_claim_and_its_entry_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = Provider()
    with lw.Runtime(url) as rt:
        loop = paying(provider)
        a = rt.run_sync(loop, TASK, task_key="A").run_id
        rt.run_sync(loop, TASK, task_key="B")
        rt.cancel(a, by="ops", loop=loop)
        [req] = compensation_requests(rt, a)
        rt.approve(a, by="fin", approval_id=req.approval_id)
        seen = counting(rt, monkeypatch)
        assert rt.resume_sync(a, loop).status == "cancelled"
        assert provider.collected() == 0
        assert seen == Counter({"effect_claim": 1, "effect_reuses": 1, "payment entry": 1})
