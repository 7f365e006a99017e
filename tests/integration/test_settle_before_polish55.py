"""review55a: a run escalated before polish55, its effect left in doubt, settled after it.

polish55 reworded the settle hint at the end of the cause (`--done --result JSON` became
`--done` if it happened) and the advice's first words. The settling finds those words in the
stored packet by the hint as the running release words it, to put who settled it in their
place: a packet written by an earlier release kept saying "once checked, settle it" (its
cause, its stop cause in `runs`, the dashboard and the webhooks) and "settle the effect in
doubt first" (its advice) after the effect was settled. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from doc_loop import TASK
from test_keyless_effect_failures import _paying

import loopwright as lw
from loopwright._stored_run_words import run_stop_cause


def _as_before_polish55(packet: dict[str, Any], run: str, key: str) -> dict[str, Any]:
    """``packet`` as a release before polish55 wrote it: its hint and advice in those words."""
    hint_now = (
        f"; once checked, settle it: `loopwright settle {run} {key} --done` if it happened "
        "(or `--not-done`), then roll the run back and resume it"
    )
    hint_then = (
        f"; once checked, settle it: `loopwright settle {run} {key} --done --result JSON` "
        "(or `--not-done`), then roll the run back and resume it"
    )
    first_now = (
        "A person must check the outside world and settle the effect in doubt first: "
        f"`loopwright settle {run} {key} --done` if it happened (`--result` and what it "
        "returned, as JSON, for a redo to reuse), "
    )
    first_then = (
        "A person must check the outside world and settle the effect in doubt first: "
        f"`loopwright settle {run} {key} --done --result JSON` if it happened, "
    )
    old = dict(packet)
    for field in ("cause", "summary"):
        if isinstance(old.get(field), str):
            old[field] = old[field].replace(hint_now, hint_then)
    assert hint_then in old["cause"], old["cause"]
    assert first_now in old["recommended_action"], old["recommended_action"]
    old["recommended_action"] = old["recommended_action"].replace(first_now, first_then)
    return old


def test_a_packet_of_an_earlier_release_is_settled_in_its_own_words(url: str) -> None:
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying([], lw.TransientError), TASK)
        assert a.status == "escalated" and a.packet is not None
        old = _as_before_polish55(a.packet, a.run_id[:12], "pay:I6")
        rec = rt.store.get_run(a.run_id)
        old["stop_cause"] = run_stop_cause(rec, {k: v for k, v in old.items() if k != "stop_cause"})
        assert "--result JSON" in old["stop_cause"]
        store: Any = rt.store
        with store._tx() as conn:
            conn.execute(
                f"UPDATE runs SET packet = {store._MARK} WHERE run_id = {store._MARK}",
                (json.dumps(old), a.run_id),
            )
        rt.settle_effect(a.run_id, "pay:I6", done=False, by="ops")
        now = rt.store.get_run(a.run_id).packet
    assert now is not None
    said = "pay (pay:I6) was settled not done by ops"
    for field in ("cause", "stop_cause"):
        assert "settle it" not in now[field] and said in now[field], (field, now[field])
    advice = now["recommended_action"]
    assert advice.startswith(f"{said} (its cycle: 1); now "), advice
    assert "settle the effect in doubt first" not in advice, advice
