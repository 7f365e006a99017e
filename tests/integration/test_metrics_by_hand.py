"""Every outcome metric computed by hand on six runs built for it, against the Python API and
`loopwright metrics --json`, on SQLite and on PostgreSQL (the seeds' metric tables:
docs/requirements.md).

The expected figures below are written out from the definitions in docs/metrics.md, not read
back from the code. The runs' clocks (creation, end, a request's asking and deciding) are set
to known instants afterwards, so the time metrics and workflow reuse are exact too.

The loop: a doc whose parts a, b, c must be 1, 2, 3 (one visible check per part, the
aggregate score their mean), a held-out check that fails a doc holding a part ``hack``, and
an actor that writes the task's ``script`` one step a cycle at $0.10 a cycle.

| run | what happens | status | cycles | spend |
|---|---|---|---|---|
| A | a, then b, then c: three improving cycles | accepted (success) | 3 | 0.30 |
| B | a, b, c and ``hack`` at once: visible pass, held-out fails | accepted | 1 | 0.10 |
| C | a; a broken (7) while b is fixed; a and c | accepted, 1 regression | 3 | 0.30 |
| D | a; then b = 5; then c = 9 | stopped (no_progress) | 3 | 0.30 |
| E | asks a question (ann answers after 40 s); a 429 once; a, b, c | accepted | 2 | 0.20 |
| F | a and b; c = 8; c = 9; stopped; ann sets c = 3; check-only cycle | accepted | 4 | 0.30 |
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from doc_loop import TASK, part_check

import loopwright as lw
from loopwright._metrics import METRIC_NAMES, compute_metrics
from loopwright.cli import _metrics_cmd as _registers_the_command  # noqa: F401
from loopwright.cli import main

CYCLE_USD = 0.1

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "A": [{"a": 1}, {"b": 2}, {"c": 3}],
    "B": [{"a": 1, "b": 2, "c": 3, "hack": 1}],
    "C": [{"a": 1}, {"a": 7, "b": 2}, {"a": 1, "c": 3}],
    "D": [{"a": 1}, {"b": 5}, {"c": 9}],
    "E": [{}, {"a": 1, "b": 2, "c": 3}],
    "F": [{"a": 1, "b": 2}, {"c": 8}, {"c": 9}],
}

# The instants each run is given: (created_at, ended_at); E's question asked at 1,010 and
# answered at 1,050. Runs run one after another, in this order.
T0 = 1_000_000.0
CLOCK = {
    "A": (T0 + 0, T0 + 60),  # 60 s
    "B": (T0 + 100, T0 + 110),  # 10 s, created after A ended: reuse
    "C": (T0 + 105, T0 + 200),  # 95 s, created before B ended, after A: reuse
    "D": (T0 + 30, T0 + 90),  # created before A ended: no reuse
    "E": (T0 + 1_000, T0 + 1_100),  # 100 s
    "F": (T0 + 2_000, T0 + 2_300),  # 300 s
}
ASKED, ANSWERED = T0 + 1_010, T0 + 1_050


def no_hack(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    ok = "hack" not in state.artifacts["doc"].values()
    return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)


def scripted(ctx: lw.Context) -> lw.Proposal:
    key = ctx.task["script"]
    step = SCRIPTS[key][ctx.cycle - 1]
    usage = lw.Usage(CYCLE_USD)
    if key == "E":
        if ctx.cycle == 1:
            return lw.Proposal(question=lw.Question("Which PO?", choices=("PO-1",)), usage=usage)
        if not _flaked:
            _flaked.append(1)
            raise lw.TransientError("429")
    return lw.Proposal.edit("doc", step, usage=usage)


_flaked: list[int] = []

LOOP = lw.Loop(
    name="hand",
    version="v1",
    project="p",
    actor=scripted,
    verifiers=[
        part_check("a", 1),
        part_check("b", 2),
        part_check("c", 3),
        lw.Check(fn=no_hack, held_out=True),
    ],
    contract=lw.Contract(
        success=lw.Success(accept_parts="on_success"),
        no_progress=lw.NoProgress(cycles=2),
        budget=lw.Budget(max_cycles=6),
    ),
    retry=lw.RetryPolicy(attempts=3, backoff_s=0.001, jitter=False),
)

# --- the figures, by hand ---------------------------------------------------------------------
# accepted: A, B, C, E, F (5 of 6); spend 0.3 + 0.1 + 0.3 + 0.3 + 0.2 + 0.3 = 1.5
SPEND = 1.5
# time: A 60, B 10, C 95, E 100, F 300
TIME_TO_ACCEPTED = (60 + 10 + 95 + 100 + 300) / 5
# cycles: A 3, B 1, C 3, E 2 (the asked one counts), F 4 (the check-only one counts)
CYCLES_TO_ACCEPTED = (3 + 1 + 3 + 2 + 4) / 5
# revisions (versions before the accepted one, parts the loop wrote):
#   A: a, b, c one each (the task's 0) = 3 over 3; B: a, b, c one each, hack none = 3 over 4;
#   C: a 0 -> 1 -> 7 -> 1 = 3, b 1, c 1 = 5 over 3; D: not accepted, no accepted part;
#   E: 3 over 3; F: a 1, b 1, c 0 -> 8 -> 9 -> 3 = 3: 5 over 3.
REVISIONS = (3 + 3 + 5 + 3 + 5) / (3 + 4 + 3 + 3 + 3)
EDITS = 1 / 16  # F's one edit over the same 16 parts
# last improving cycle and the spend after it: A 3 (0), B 1 (0), C 3 (0: cycle 2 improved as
# check_b passed a first time, cycle 3 as the score rose), D 1 (0.2 after it), E 2 (0),
# F: the check-only cycle 4 improved (0: the person's fix)
SPEND_AFTER = 0.2
# best visible scores: A 1, B 1, C 1, D 1/3, E 1, F 1
BEST = 5 + 1 / 3
ALL_CYCLES = 3 + 1 + 3 + 3 + 2 + 4
# held-out verdicts: every run's last candidate was judged; only B's failed
VERIFIED_COMPLETION = 4 / 6  # accepted and held-out passed: A, C, E, F over 6 with a verdict
FALSE_SUCCESS = 1 / 5  # B, over 5 accepted runs with a verdict
# checked cycles (a verified cycle after a verified cycle of its run): A 2, 3; C 2, 3; D 2, 3;
# E none (its first is asked, unverified); F 2, 3, 4; C's cycle 2 broke check_a.
REGRESSION = 1 / 9
EXCEPTION = 1 / 6  # E's retried 429
RECOVERY = 1 / 1  # and E was accepted
APPROVALS_PER_ACCEPTED = 1 / 5  # E's question
APPROVAL_WAIT = ANSWERED - ASKED
# later cycles whose context carried a note from before: E's cycle 2 (the answer). Counted:
# A 2, B 0, C 2, D 2, E 1, F 2 (its check-only cycle 4 shows no actor a context).
CONTEXT_REUSE = 1 / 9
# runs created after an accepted run of hand/v1 ended: B, C (after A), E, F; not A, not D.
WORKFLOW_REUSE = 4 / 6

EXPECTED: dict[str, float] = {
    "time_to_accepted_s": TIME_TO_ACCEPTED,
    "cycles_to_accepted": CYCLES_TO_ACCEPTED,
    "revisions_per_accepted_part": REVISIONS,
    "edits_per_accepted_part": EDITS,
    "cost_per_accepted_usd": SPEND / 5,
    "spend_after_last_improvement_usd": SPEND_AFTER,
    "spend_after_last_improvement_frac": SPEND_AFTER / SPEND,
    "progress_per_usd": BEST / SPEND,
    "progress_per_cycle": BEST / ALL_CYCLES,
    "task_completion_rate": 5 / 6,
    "verified_completion_rate": VERIFIED_COMPLETION,
    "false_success_rate": FALSE_SUCCESS,
    "regression_rate": REGRESSION,
    "exception_rate": EXCEPTION,
    "recovery_success_rate": RECOVERY,
    "approvals_per_accepted": APPROVALS_PER_ACCEPTED,
    "approval_wait_s": APPROVAL_WAIT,
    "context_reuse_rate": CONTEXT_REUSE,
    "workflow_reuse_rate": WORKFLOW_REUSE,
}
REVIEW_COST = 12.5  # one review decided by a person, over 5 accepted runs


def _build(url: str) -> dict[str, str]:
    """Run the six runs; return their run ids by letter."""
    _flaked.clear()
    ids: dict[str, str] = {}
    with lw.Runtime(url) as rt:
        for key in SCRIPTS:
            r = rt.run_sync(LOOP, {**TASK, "script": key}, task_key=f"hand:{key}")
            ids[key] = r.run_id
            if key == "E":
                assert r.status == "awaiting_approval"
                rt.answer(r.run_id, "PO-1", by="ann")
                r = rt.resume_sync(r.run_id, LOOP)
            if key == "F":
                assert r.stop_reason == "no_progress", r.packet
                rt.edit(r.run_id, "doc/c", 3, by="ann")
                r = rt.resume_sync(r.run_id, LOOP)
            want = "no_progress" if key == "D" else "success"
            assert r.stop_reason == want, (key, r.stop_reason, r.packet)
    return ids


def _set_clocks(url: str, ids: dict[str, str]) -> None:
    runs = [(CLOCK[k][0], CLOCK[k][1], ids[k]) for k in ids]
    run_sql = "UPDATE runs SET created_at = {p}, ended_at = {p} WHERE run_id = {p}"
    ask_sql = "UPDATE approvals SET requested_at = {p}, decided_at = {p} WHERE run_id = {p}"
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.executemany(run_sql.format(p="?"), runs)
            conn.execute(ask_sql.format(p="?"), (ASKED, ANSWERED, ids["E"]))
        return
    import psycopg
    from psycopg import sql

    base, _, schema = url.rpartition("schema=")
    with psycopg.connect(base.rstrip("?&"), autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        with conn.cursor() as cur:
            cur.executemany(run_sql.format(p="%s"), runs)  # type: ignore[arg-type]
        conn.execute(ask_sql.format(p="%s"), (ASKED, ANSWERED, ids["E"]))  # type: ignore[arg-type]


def test_every_metric_matches_its_hand_computed_value(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _build(url)
    _set_clocks(url, ids)

    m = compute_metrics(url, review_cost_usd=REVIEW_COST)
    assert (m.runs, m.runs_ended, m.accepted) == (6, 6, 5)
    assert m.spend_usd == pytest.approx(SPEND)
    assert set(EXPECTED) == set(METRIC_NAMES)
    got = {name: m.value(name) for name in METRIC_NAMES}
    assert got == pytest.approx(EXPECTED), {k: (got[k], v) for k, v in EXPECTED.items()}
    assert m.undefined == {}
    assert m.human_review_cost_per_accepted_usd == pytest.approx(REVIEW_COST / 5)
    assert m.stop_reasons == {**dict.fromkeys(lw.STOP_REASONS, 0), "success": 5, "no_progress": 1}
    assert m.stopped_by == {
        "success": 5,
        "plateau": 1,
        "budget": 0,
        "risk": 0,
        "escalation": 0,
        "cancelled": 0,
        "error": 0,
    }

    assert main(["metrics", "--store", url, "--json", "--review-cost", str(REVIEW_COST)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {name: out[name] for name in METRIC_NAMES} == pytest.approx(EXPECTED)
    assert out["human_review_cost_per_accepted_usd"] == pytest.approx(REVIEW_COST / 5)
    assert out["stopped_by"] == m.stopped_by
    assert out["stop_reasons"] == m.stop_reasons
