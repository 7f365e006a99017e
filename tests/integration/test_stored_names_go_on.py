"""A run an earlier release started under a verifier, effect and risk-rule name that tidy49's
rule now refuses (an invisible character) is resumed, continued and forked with the loop that
declares it (review49c), SQLite and PostgreSQL.

tidy49 refused such names where a ``Check``, an effect or a ``Loop`` is built, so the loop a
stored run needs could not be written any more: a run parked on an approved payment of
``pay\\u200b`` stayed parked for good (renamed, the resume refused: "must finish effects
['pay\\u200b'], which this loop does not declare"). The rule now holds where a new run is made.
The earlier release is played by switching the check off while the run is created.
"""

from __future__ import annotations

from typing import Any

import pytest

import loopwright as lw
from loopwright import _run_create

Z = "\u200b"  # a zero-width space
TASK = {"artifacts": {"doc": {"a": 0, "b": 0}}}


def _loop(paid: list[str]) -> lw.Loop:
    @lw.effect("spend", name=f"pay{Z}", idempotent=True)
    def pay(invoice: str) -> dict[str, Any]:
        paid.append(invoice)
        return {"ok": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "b", 1),), effects=[pay.call(invoice="A-1")])

    return lw.Loop(
        name="names",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name=f"c{Z}")],
        effects=[pay],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            success=lw.Success(required=(f"c{Z}",)),
            risk=(lw.RiskRule(name=f"r{Z}", touches=("doc/b",)),),
        ),
    )


def test_a_stored_run_under_a_name_refused_since_goes_on(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    paid: list[str] = []
    loop = _loop(paid)  # before: ConfigError here, at the effect's declaration
    with lw.Runtime(url) as rt:
        with monkeypatch.context() as earlier:  # the earlier release: no such check
            earlier.setattr(_run_create, "check_declared_names", lambda loop: None)
            parked = rt.run_sync(loop, TASK, task_key="t")
        assert parked.status == "awaiting_approval" and paid == []
        # a new run of it is refused, saying why
        with pytest.raises(lw.ConfigError) as info:
            rt.create(loop, TASK, task_key="another")
        assert "U+200B" in str(info.value)
        # the stored one goes on: approved, resumed, paid once, accepted
        rt.approve(parked.run_id, by="me")
        done = rt.resume_sync(parked.run_id, loop)
        assert done.status == "accepted" and paid == ["A-1"]
        # continued by its key (an existing run: not a new one)
        assert rt.run_sync(loop, TASK, task_key="t").run_id == parked.run_id
        # and forked, the fork run with the same loop
        fork = rt.fork(parked.run_id, 0, loop=loop, task_key="t-fork")
        assert fork.forked_from == parked.run_id
        assert rt.resume_sync(fork.run_id, loop).status == "awaiting_approval"
        stored = rt.store.get_run(parked.run_id).contract
        assert stored["risk"][0]["name"] == f"r{Z}"
