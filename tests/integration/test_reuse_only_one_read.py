"""An effect approved only as a reuse of another run's payment is that reuse or nothing, even
when the payment is refunded in the moment between the reuse check and the intent's key
(review49a), on SQLite and PostgreSQL.

``perform_effect`` asked the claim whether the reuse still stood, then read the claim again
to pick the key it hands the effect (``_call_key``). A refund landing between the two reads
made the second one see the key free (compensated: its next generation), the intent took it
and the invoice was paid again: the person had approved a reuse. Now the key of a reuse-only
call is the generation of the claim that check read (``reuse_standing``): refunded since, the
intent's claim write refuses it (``EffectKeyMoved``) and nothing is paid.

The refund is placed at a fixed point: right after the effect's first read of the claim (no
timing).
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any

import pytest
from test_approval_card_done_already import _loop
from test_approved_reuse_at_effect import _b_approved_as_reuse, _not_paid_again, _refund

import loopwright as lw
from loopwright import _effect_run


def test_a_reuse_refunded_right_after_its_check_is_not_paid(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    paid: list[str] = []
    loop = _loop(paid)
    with lw.Runtime(url) as rt:
        a, b = _b_approved_as_reuse(rt, loop, paid)
        inside: list[bool] = []  # the effect's perform_effect is running
        read: list[Any] = []  # what its first read of the claim found
        real_perform, real_claim = _effect_run.perform_effect, rt.store.effect_claim

        async def performing(*args: Any, **kw: Any) -> Any:
            inside.append(True)
            try:
                return await real_perform(*args, **kw)
            finally:
                inside.clear()

        def claim_then_refund(kind: str, key: str) -> Any:
            claim = real_claim(kind, key)
            if inside and not read:
                read.append(claim)
                # another process refunds A now (a thread: its own event loop)
                with cf.ThreadPoolExecutor(1) as pool:
                    pool.submit(_refund, url, a, loop).result()
            return claim

        monkeypatch.setattr(
            _effect_run, "perform_effect", performing
        )  # (_conclude imports it when used)
        monkeypatch.setattr(rt.store, "effect_claim", claim_then_refund)
        rt.resume_sync(b, loop)
        [claim] = read
        assert (claim.run_id, claim.status) == (a, "done")  # the reuse stood when checked
        _not_paid_again(rt, b, paid)
