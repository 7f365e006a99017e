"""A person's edit accepted by a check-only cycle runs no effect again, and says which ran
with the value it replaced (polish52): a publish of "X fast safe cheap" stood beside the
accepted "Hand made …" and nothing said so. Running it again is not the engine's to do: an
effect runs at most once per key, and a new one is an action of its own, proposed and
governed by the approval policy (invariants 2 and 6). The check-only cycle's record, an
event, the actor's notes, ``show``, the run page and (ended short of success) the packet say
it: which effect, its key and cycle, the part's version it ran with and the current one."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from support.modules import load_sibling
from support.printed import shown_text

import loopwright as lw
from loopwright.web import create_app

WEB = load_sibling(__file__, "test_web.py", "_effects_not_rerun_web_helpers")
TASK = {"artifacts": {"doc": {"body": ""}}}
# What the edit of doc/body to a hand-made text names: cycle 1's publish ran with version 2.
BEHIND = [
    {
        "effect": "publish",
        "key": "publish:pub:X fast safe cheap",
        "cycle": 1,
        "part": "doc/body",
        "ran_with": 2,
        "now": 3,
    }
]


def _publish(published: list[str], *, requires_success: bool = True) -> Any:
    """The ``publish`` effect, keyed by its text, recording what it published."""

    @lw.effect(
        "publish",
        name="publish",
        key=lambda a: f"pub:{a['text']}",
        requires_success=requires_success,
    )
    def publish(text: str) -> dict[str, Any]:
        published.append(text)
        return {"published": text}

    return publish


def _loop(published: list[str], cycles: int = 3) -> lw.Loop:
    publish = _publish(published)

    def actor(ctx: lw.Context) -> lw.Proposal:
        text = "X fast safe cheap"
        edits = lw.Proposal.edit("doc", {"body": text}).edits
        return lw.Proposal(edits=edits, effects=(publish.call(text=text),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        body = state.artifacts["doc"].values()["body"]
        return lw.Verdict(passed=bool(body) and "draft" not in body, score=1.0)

    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="publish", action="allow"),))
    return lw.Loop(
        name="pub",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        effects=[publish],
        approvals=allow,
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _edited(url: str, value: str, cycles: int = 3) -> tuple[lw.RunResult, list[str]]:
    published: list[str] = []
    with lw.Runtime(url) as rt:
        first = rt.run_sync(_loop(published, cycles), TASK, task_key="e")
        assert first.status == "accepted" and published == ["X fast safe cheap"]
        rt.edit(first.run_id, "doc/body", value, by="ann")
        return rt.resume_sync(first.run_id, _loop(published, cycles)), published


def test_an_accepted_edit_says_which_effects_ran_with_what_it_replaced(url: str) -> None:
    done, published = _edited(url, "Hand made, slow")
    assert done.status == "accepted" and published == ["X fast safe cheap"]  # not run again
    behind = BEHIND
    with lw.Runtime(url) as rt:
        record = rt.store.latest_checkpoint(done.run_id).record or {}
        assert record.get("check_only") and record.get("effects_not_rerun") == behind
        [event] = rt.store.events_of_kinds(done.run_id, ("effects_not_rerun",))
        assert event.data["effects"] == behind and event.cycle == 2
    assert {"kind": "effects_not_rerun", "effects": behind} in done.state.notes
    said = " ".join(shown_text(url, done.run_id)[0].split())
    assert (
        "effects not run again for the person's edit: publish (key publish:pub:X fast safe "
        "cheap, cycle 1) ran while doc/body was version 2, not 3" in said
    ), said
    c = TestClient(create_app(url, token=WEB.TOKEN), base_url=WEB.LOCAL)
    auth = {"Authorization": f"Bearer {WEB.TOKEN}"}
    rows = c.get(f"/api/runs/{done.run_id}", headers=auth).json()["timeline"]
    [row] = [r for r in rows if r.get("check_only")]
    assert row["effects_not_rerun"].startswith("effects not run again for the person's edit")
    page = " ".join(c.get(f"/runs/{done.run_id}", headers=auth).text.split())
    assert "publish (key publish:pub:X fast safe cheap, cycle 1) ran while doc/body" in page


def test_an_edit_judged_short_of_success_puts_it_in_the_packet(url: str) -> None:
    done, published = _edited(url, "Hand made draft", cycles=1)  # fails the check; cap spent
    assert done.status == "stopped" and published == ["X fast safe cheap"]
    assert done.packet is not None
    assert [b["effect"] for b in done.packet["effects_not_rerun"]] == ["publish"]


def test_an_edit_back_to_what_the_effect_ran_with_says_nothing(url: str) -> None:
    published: list[str] = []
    with lw.Runtime(url) as rt:
        first = rt.run_sync(_loop(published), TASK, task_key="e")
        rt.edit(first.run_id, "doc/body", "Hand made", by="ann")
        rt.resume_sync(first.run_id, _loop(published))
        rt.edit(first.run_id, "doc/body", "X fast safe cheap", by="ann")  # its value again
        done = rt.resume_sync(first.run_id, _loop(published))
        assert done.status == "accepted"
        record = rt.store.latest_checkpoint(done.run_id).record or {}
        assert record.get("check_only") and "effects_not_rerun" not in record


def _asks_later(published: list[str]) -> lw.Loop:
    """Cycle 1 publishes the body (allowed), short of the score (no title); cycle 2 sets the
    title with an ``announce`` a person must approve: it parks."""

    publish = _publish(published, requires_success=False)

    @lw.effect("announce", name="announce", key=lambda a: "ann")
    def announce() -> dict[str, Any]:
        return {"announced": True}

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            edits = lw.Proposal.edit("doc", {"body": "X fast safe cheap"}).edits
            return lw.Proposal(edits=edits, effects=(publish.call(text="X fast safe cheap"),))
        edits = lw.Proposal.edit("doc", {"title": "T"}).edits
        return lw.Proposal(edits=edits, effects=(announce.call(),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=True, score=1.0 if state.artifacts["doc"].values()["title"] else 0.5
        )

    rules = (
        lw.PolicyRule(kind="publish", action="allow"),
        lw.PolicyRule(kind="announce", action="require"),
    )
    return lw.Loop(
        name="pub2",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        effects=[publish, announce],
        approvals=lw.ApprovalPolicy(rules),
        contract=lw.Contract(
            success=lw.Success(accept_parts="on_success"), budget=lw.Budget(max_cycles=4)
        ),
    )


def test_an_edit_beside_a_request_says_which_effects_ran_with_what_it_replaced(
    url: str,
) -> None:
    """polish52b: an edit made while a request waits is judged again with the approved
    proposal (``Parking._judge_again``), not by a check-only cycle: that path said nothing of
    the effects earlier cycles ran with the value it replaced."""
    published: list[str] = []
    task = {"artifacts": {"doc": {"body": "", "title": ""}}}
    with lw.Runtime(url) as rt:
        parked = rt.run_sync(_asks_later(published), task, task_key="b")
        assert parked.status == "awaiting_approval" and published == ["X fast safe cheap"]
        rt.edit(parked.run_id, "doc/body", "Hand made, slow", by="ann")
        rt.approve(parked.run_id, by="bea")
        done = rt.resume_sync(parked.run_id, _asks_later(published))
        assert done.status == "accepted" and published == ["X fast safe cheap"]
        behind = BEHIND
        record = rt.store.latest_checkpoint(done.run_id).record or {}
        assert record.get("effects_not_rerun") == behind
        [event] = rt.store.events_of_kinds(done.run_id, ("effects_not_rerun",))
        assert event.data["effects"] == behind and event.cycle == 2
    said = " ".join(shown_text(url, done.run_id)[0].split())
    assert "publish (key publish:pub:X fast safe cheap, cycle 1) ran while doc/body" in said


def test_only_the_effects_that_ran_with_the_replaced_version_are_named(url: str) -> None:
    """An effect that ran with a value the actor replaced since was made stale by that
    change, not by the person's edit: the edit names those run with the version it replaced
    (read from that version's cycle on: the journal's index, not the whole journal)."""
    published: list[str] = []

    publish = _publish(published, requires_success=False)

    def actor(ctx: lw.Context) -> lw.Proposal:
        text = f"v{ctx.cycle}"
        edits = lw.Proposal.edit("doc", {"body": text}).edits
        return lw.Proposal(edits=edits, effects=(publish.call(text=text),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        body = state.artifacts["doc"].values()["body"]
        score = {"v1": 0.3, "v2": 0.6}.get(body, 1.0)  # accepted at v3, and the person's
        return lw.Verdict(passed=True, score=score)

    loop = lw.Loop(
        name="pub3",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        effects=[publish],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="publish", action="allow"),)),
        contract=lw.Contract(
            success=lw.Success(accept_parts="on_success"), budget=lw.Budget(max_cycles=5)
        ),
    )
    with lw.Runtime(url) as rt:
        first = rt.run_sync(loop, TASK, task_key="w")
        assert first.status == "accepted" and published == ["v1", "v2", "v3"]
        rt.edit(first.run_id, "doc/body", "Hand made", by="ann")
        done = rt.resume_sync(first.run_id, loop)
        assert done.status == "accepted"
        record = rt.store.latest_checkpoint(done.run_id).record or {}
        said = [(b["key"], b["ran_with"], b["now"]) for b in record["effects_not_rerun"]]
        assert said == [("publish:pub:v3", 4, 5)]


def test_an_edit_beside_a_question_names_them_in_the_check_only_cycle_after_it(url: str) -> None:
    """An edit made while a question waits owes a check-only cycle once it is answered
    (``owed_after``): the version the edit replaced is carried into it."""
    published: list[str] = []
    publish = _publish(published, requires_success=False)

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            return lw.Proposal(question=lw.Question("which tone?"))
        edits = lw.Proposal.edit("doc", {"body": "X fast safe cheap"}).edits
        return lw.Proposal(edits=edits, effects=(publish.call(text="X fast safe cheap"),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        hand = state.artifacts["doc"].values()["body"].startswith("Hand")
        return lw.Verdict(passed=True, score=1.0 if hand else 0.5)

    loop = lw.Loop(
        name="pub4",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        effects=[publish],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="publish", action="allow"),)),
        contract=lw.Contract(
            success=lw.Success(accept_parts="on_success"), budget=lw.Budget(max_cycles=4)
        ),
    )
    with lw.Runtime(url) as rt:
        parked = rt.run_sync(loop, TASK, task_key="q")
        assert parked.status == "awaiting_approval" and published == ["X fast safe cheap"]
        rt.edit(parked.run_id, "doc/body", "Hand made, slow", by="ann")
        rt.answer(parked.run_id, "calm", by="bea")
        done = rt.resume_sync(parked.run_id, loop)
        assert done.status == "accepted" and published == ["X fast safe cheap"]
        record = rt.store.latest_checkpoint(done.run_id).record or {}
        assert record.get("check_only") and record.get("effects_not_rerun") == BEHIND
