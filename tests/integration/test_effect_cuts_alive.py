"""An effect's call cut by a stop alive (Ctrl-C, the store failing under the run), its reconcile
hook then saying it never acted, is neither an attempt of its retry bound nor an uncharged kill
of the crash bound's, on SQLite and PostgreSQL (crash55b).

The uncharged kills an intent may have (``_effect_run``) are capped at ``max_crashes`` so that a
process dying at an effect's call every time ends; they counted every cut whose hook said "not
done", a person's Ctrl-C too: past the cap, each Ctrl-C spent an attempt, and 5 + 3 of them
ended the effect "gave up after 3 attempt(s)" (the run escalated) though no attempt had
failed. Only an execution that died counts there now, as the crash bound counts
(``_crash_bound``): a cut whose execution said it stopped alive, by its lease, does not."""

from __future__ import annotations

from typing import Any

import pytest
from support.crash_bound import notify_loop

import loopwright as lw

CUTS = 8  # the default bound (5) + the default attempts (3)


def _loop(cuts: list[int], sent: list[str]) -> lw.Loop:
    def done_already(key: str) -> dict[str, str] | None:
        return {"sent": key} if key in sent else None

    def send(key: str) -> dict[str, str]:
        if cuts[0] < CUTS:
            cuts[0] += 1
            raise KeyboardInterrupt  # (a person's Ctrl-C, in the effect's call)
        sent.append(key)
        return {"sent": key}

    return notify_loop("cut-alive", send, done_already)


def test_ctrl_c_at_an_effects_call_spends_no_attempt(url: str) -> None:
    cuts, sent = [0], []
    loop = _loop(cuts, sent)
    task: dict[str, Any] = {"artifacts": {"doc": {"n": 0}}}
    with lw.Runtime(url) as rt:
        with pytest.raises(KeyboardInterrupt):
            rt.run_sync(loop, task, task_key="cuts")
        run_id = rt.store.get_run("cuts").run_id
        for _ in range(CUTS - 1):
            with pytest.raises(KeyboardInterrupt):
                rt.resume_sync(run_id, loop)
        # (before: "effect notify gave up after 3 attempt(s)", the run escalated)
        r = rt.resume_sync(run_id, loop)
        assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 1), r.packet
        [entry] = rt.store.journal(run_id, key="effect:notify:n:1")
        assert (entry.status, entry.attempts) == ("done", 1)
    assert cuts == [CUTS] and sent == ["notify:n:1"]  # called once, to its end
