"""A reviewer on the actor's own model is refused however it is passed: wrapped in
``functools.partial`` or a ``functools.wraps`` function, as the actor may be too (trust53)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

import loopwright as lw
from loopwright.adapters import ChatActor, ChatReviewer

URL = "http://localhost:11434/v1"


def _passes(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


def _loop(actor: Any, review: Any) -> lw.Loop:
    return lw.Loop(
        name="self53",
        actor=actor,
        verifiers=[lw.Check(fn=_passes), lw.Check(fn=review, held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


def _wraps(fn: Any) -> Any:
    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        return fn(*args)

    return call


@pytest.mark.parametrize("wrap", [functools.partial, _wraps], ids=["partial", "wraps"])
@pytest.mark.parametrize("side", ["reviewer", "actor"])
def test_a_wrapped_self_review_is_refused(wrap: Any, side: str) -> None:
    actor = ChatActor("qwen2.5", base_url=URL)
    review = ChatReviewer("qwen2.5:latest", base_url=URL + "/", rubric="r")
    if side == "reviewer":
        review = wrap(review)
    else:
        actor = wrap(actor)
    with pytest.raises(lw.ConfigError, match="generator's own model"):
        _loop(actor, review)


def test_a_wrapped_reviewer_allowed_on_purpose_is_recorded_as_such() -> None:
    actor = ChatActor("qwen2.5", base_url=URL)
    review = ChatReviewer("qwen2.5", base_url=URL, rubric="r", allow_self_review=True)
    loop = _loop(actor, functools.partial(review))
    assert [c.name for c in loop.checks if loop.self_reviewing(c)] == [loop.checks[1].name]
