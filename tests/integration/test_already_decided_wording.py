"""A request decided already is said in one wording, whichever check finds it (stop 50).

The engine reads the request before deciding and says "run R: request X was already denied by
bob"; when another person's decision commits between that read and the write, the store's own
check found it and said "approval X was already denied by bob": one situation, two messages for
a person to read and a script to parse. The race is placed, not timed: the first decision is
made through a second ``Runtime`` (its own store object) inside the first's call, just before
the store is asked to write; the engine's check is then reached by asking again.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_people import FOUR_EYES, make_loop, people, task

import loopwright as lw


def _first_inside(rt: lw.Runtime, method: str, first: Any) -> None:
    """Run ``first()`` inside ``rt.store.<method>``, just before the store writes."""
    store: Any = rt.store
    real = getattr(store, method)

    def placed(*args: Any, **kw: Any) -> Any:
        delattr(store, method)
        first()  # committed by the other store object
        return real(*args, **kw)

    setattr(store, method, placed)


def test_a_decision_after_anothers_is_said_as_the_engine_says_it(url: str) -> None:
    with lw.Runtime(url) as rt, lw.Runtime(url) as other:
        people(rt)
        loop = make_loop((lw.PolicyRule(kind="spend", action="require"),))
        r = rt.run_sync(loop, task("INV-5", 500), task_key="r", by="rita")
        aid = rt.pending_approval(r.run_id).approval_id
        _first_inside(rt, "decide_approval", lambda: other.deny(r.run_id, by="cat"))
        with pytest.raises(lw.ApprovalError) as raced:  # the store's check
            rt.approve(r.run_id, by="ben")
        with pytest.raises(lw.ApprovalError) as read:  # the engine's check
            rt.approve(r.run_id, by="ben", approval_id=aid)
        said = f"run {r.run_id}: request {aid} was already denied by cat"
        assert str(raced.value) == str(read.value) == said


def test_a_vote_after_a_denial_is_said_as_the_engine_says_it(url: str) -> None:
    with lw.Runtime(url) as rt, lw.Runtime(url) as other:
        people(rt)
        big = rt.run_sync(make_loop(FOUR_EYES), task("INV-8", 50000), task_key="b", by="rita")
        aid = rt.pending_approval(big.run_id).approval_id
        _first_inside(rt, "add_vote", lambda: other.deny(big.run_id, by="ben", note="no"))
        with pytest.raises(lw.ApprovalError) as raced:  # the store's check, in add_vote
            rt.approve(big.run_id, by="cat")
        with pytest.raises(lw.ApprovalError) as read:
            rt.approve(big.run_id, by="cat")
        said = f"run {big.run_id}: request {aid} was already denied by ben"
        assert str(raced.value) == str(read.value) == said
        assert rt.store.votes(aid) == []
