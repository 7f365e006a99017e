"""The learning exports read a cycle's attempt by the one rule (``_decide.no_attempt``), not by
its raw ``check_only`` flag (tidy49). The cycle of a request denied after an edit beside it is
flagged ``check_only`` in its record (it judged the edit check-only) though the actor was
called and paid in it: an eval case called it check-only ("no actor call") when the parked
proposal was not found beside it, and preference pairs must not rank it — neither the actor's
proposal (parked and denied, never concluded) nor the person's edit judged (no actor's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_replay_edit_escalations import TASK, _loop, denied_beside_an_edit

import loopwright as lw
from loopwright import trace
from loopwright.store import open_store
from loopwright.trace._eval_cases import _case_cycle
from loopwright.trace._run_cycles import list_cycles


def test_a_denied_requests_cycle_without_its_parked_record_is_not_called_check_only(
    tmp_path: Path,
) -> None:
    """Its parked checkpoint not read beside it (``parked`` unknown), the case still has the
    actor's call: ``check_only`` (documented "no actor call") would say no actor was called."""
    path = tmp_path / "s.db"
    r = denied_beside_an_edit(path)
    with open_store(str(path)) as st:
        rec = st.get_run(r.run_id)
        [cyc] = list_cycles(st.iter_checkpoints(r.run_id), rec.loop_name, keep=None)
        assert cyc.parked is not None and cyc.record["check_only"]  # (the scenario's)
        whole = trace.eval_case(st, r.run_id)["cycles"][0]
    assert "check_only" not in whole and whole["edit_judged"]["check_only"] is True
    alone = _case_cycle(replace(cyc, parked=None))
    assert alone["calls"][0]["who"] == "actor"
    assert "check_only" not in alone, alone


def test_preference_pairs_rank_neither_half_of_a_denied_requests_cycle(tmp_path: Path) -> None:
    """Run ``a`` revises at cycle 1 (rank 1); run ``b``, from the very same context, parks on
    a request, a person edits a and b to good and denies it: the cycle concludes accepted on
    the person's version. Ranked by the rule alone (the actor was called: an attempt) it would
    be a chosen side of rank 2 whose proposal is the edit's judgement, no actor's."""
    path = tmp_path / "s.db"
    with lw.Runtime(str(path)) as rt:
        a = rt.run_sync(_loop(1), TASK, task_key="a")
        assert (a.stop_reason, a.cycles) == ("budget_cycles", 1)
        loop = _loop(1, risky_from=1)
        b = rt.run_sync(loop, TASK, task_key="b")
        assert b.status == "awaiting_approval"
        rt.edit(b.run_id, "doc/a", "good", by="ana")
        rt.edit(b.run_id, "doc/b", "good", by="ana")
        rt.deny(b.run_id, by="bo")
        b = rt.resume_sync(b.run_id, loop)
        assert (b.status, b.cycles) == ("accepted", 1)
        [cyc] = list_cycles(rt.store.iter_checkpoints(b.run_id), "edit-escalations", keep=None)
        assert cyc.decision == "accepted" and cyc.record["check_only"]
        [first] = list_cycles(rt.store.iter_checkpoints(a.run_id), "edit-escalations", keep=None)
        assert first.context_id == cyc.context_id  # (a pair could be formed from them)
        pairs = trace.preference_pairs(rt.store)
    assert not [
        p for p in pairs for side in ("chosen", "rejected") if p[side]["run_id"] == b.run_id
    ]
