"""Where a run's held-out verdict is read, its mark (``runs.held_out_self_reported``: tests
behind it not decided outside the candidate's process) is read with it (stop 55, heldout55b).
Before: the trace's run span and the eval case exported ``held_out_passed`` alone, so a pass
resting on self-reported tests looked independent there; replays of stored runs (``loopwright
replay``, ``fit-stop``) counted it as a held-out pass; an end read from verdict events written
before stop 55 (no count) read 0 rather than unknown; and a failure resting on tests
``judged_only`` refused (nothing decided them) counted as a false success."""

from __future__ import annotations

from typing import Any

from support.held_out import held_out_loop

import loopwright as lw
from loopwright.replay import recorded_outcomes, replay, simulate, trace_of_run
from loopwright.trace import eval_case
from loopwright.trace._spans import run_spans

RIGHT = "def add(a, b):\n    return a + b\n"
JUDGED = ["assert add(2, 3) == 5"]
# The second test is not of the judged form (a loop): self-reported, or refused by judged_only.
MIXED = [*JUDGED, "for x in range(3):\n    assert add(x, 0) == x"]


def _loop(*, judged_only: bool = False) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("program", {"code": ctx.task.get("code", RIGHT)})

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return held_out_loop(actor, visible, judged_only=judged_only)


def _run(url: str, tests: list[str], *, code: str = RIGHT, judged_only: bool = False) -> str:
    task = {"artifacts": {"program": {"code": ""}}, "code": code, "held_out": {"tests": tests}}
    with lw.Runtime(url) as rt:
        r = rt.run_sync(
            _loop(judged_only=judged_only), task, task_key=f"k{len(tests)}{len(code)}{judged_only}"
        )
    assert r.status == "accepted", r.packet
    return r.run_id


def test_the_trace_and_the_eval_case_carry_the_mark(url: str) -> None:
    mine, judged = _run(url, MIXED), _run(url, JUDGED)
    with lw.Runtime(url) as rt:
        for run_id, n in ((mine, 1), (judged, 0)):
            _rec, spans = run_spans(rt.store, run_id)
            [root] = [s for s in spans if s.parent is None]
            assert root.attributes["loopwright.held_out_passed"] is True
            assert root.attributes["loopwright.held_out_self_reported"] == n, root.attributes
            after = eval_case(rt.store, run_id)
            assert (after["held_out_passed"], after["held_out_self_reported"]) == (True, n)


def test_a_replay_of_stored_runs_reads_the_mark_as_metrics_do(url: str) -> None:
    mine, judged = _run(url, MIXED), _run(url, JUDGED)
    with lw.Runtime(url) as rt:
        traces = {k: trace_of_run(rt.store, rt.store.get_run(k)) for k in (mine, judged)}
    t_mine, t_judged = traces[mine], traces[judged]
    assert t_mine is not None and t_judged is not None
    # the cycle's verdict and the recorded one: no independent verdict (it read True)
    assert t_mine.cycles[-1].held_out_passed is None
    assert t_mine.recorded["held_out_passed"] is None
    assert t_judged.cycles[-1].held_out_passed is True
    assert t_judged.recorded["held_out_passed"] is True
    [rec_mine, rec_judged] = recorded_outcomes([t_mine, t_judged])
    assert (rec_mine.held_out_passed, rec_judged.held_out_passed) == (None, True)
    contract = _loop().contract
    assert simulate(t_mine, contract).held_out_passed is None  # (what fit-stop keeps by)
    assert simulate(t_judged, contract).held_out_passed is True
    report = replay([t_mine, t_judged], {"same": contract})
    assert report.recorded.held_out_passed == 1, report.recorded


def test_a_failure_resting_on_refused_tests_is_not_a_false_success(url: str) -> None:
    refused = _run(url, MIXED, judged_only=True)  # test 2 refused, test 1 passed
    failed = _run(url, MIXED, code="def add(a, b):\n    return 4\n", judged_only=True)
    with lw.Runtime(url) as rt:
        got = {k: rt.store.get_run(k) for k in (refused, failed)}
        [ck] = [c for c in rt.store.checkpoints_after(refused, 0) if c.record]
        evidence: dict[str, Any] = ck.record["held_out"]["hidden_tests"]["evidence"]
        m = lw.compute_metrics(rt.store)
    assert evidence["not_judged"] == [1], evidence
    assert (got[refused].held_out_passed, got[refused].held_out_self_reported) == (False, 1)
    assert got[refused].held_out_independent is None
    # a judged test failed too: a failure, whatever the refused one
    assert (got[failed].held_out_passed, got[failed].held_out_self_reported) == (False, 0)
    assert m.basis["false_success_rate"] == (1, 1), m.basis
    assert m.held_out_self_reported == 1
    assert {r.run_id: r.false_success for r in m.per_run} == {refused: None, failed: True}


def test_the_eval_case_says_the_verdict_as_the_api_does(url: str) -> None:
    """Both writers of an eval case (``eval_case`` and the streamed ``write_eval_case``, which
    ``export eval-cases`` uses) carry ``held_out_verdict``, the word ``RunRecord.to_dict`` and
    ``/api/runs`` give (stop 56, heldout56b: a case had the raw fields alone, and a reader had
    to re-derive the rule)."""
    import io
    import json

    from loopwright.trace import write_eval_case
    from loopwright.web._views import run_summary

    runs = {
        _run(url, JUDGED): "pass",
        _run(url, MIXED): "pass_self_reported",
        _run(url, MIXED, judged_only=True): "fail_not_judged",
        _run(url, JUDGED, code="def add(a, b):\n    return 4\n"): "fail",
    }
    with lw.Runtime(url) as rt:
        for run_id, word in runs.items():
            rec = rt.store.get_run(run_id)
            case = eval_case(rt.store, run_id)
            out = io.StringIO()
            write_eval_case(rt.store, run_id, out)
            streamed = json.loads(out.getvalue())
            assert case["held_out_verdict"] == streamed["held_out_verdict"] == word, case
            assert rec.to_dict()["held_out_verdict"] == word
            assert run_summary(rec)["held_out_verdict"] == word
            assert streamed == json.loads(json.dumps(case, default=str))
