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


def _loop(published: list[str], cycles: int = 3) -> lw.Loop:
    @lw.effect("publish", name="publish", key=lambda a: f"pub:{a['text']}")
    def publish(text: str) -> dict[str, Any]:
        published.append(text)
        return {"published": text}

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
    behind = [
        {
            "effect": "publish",
            "key": "publish:pub:X fast safe cheap",
            "cycle": 1,
            "part": "doc/body",
            "ran_with": 2,
            "now": 3,
        }
    ]
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
