"""Outcome metrics and replay over forks, notes and windows (outside probes, helper review):

* a fork's run row starts from the spend its state inherits, and metrics and replay count each
  dollar (and cycle) once across a run and its forks — replay under the recorded contract
  reproduces the recorded totals, and those equal the metrics' spend;
* a fork's own ``{"kind": "fork"}`` note is not context reused; a cycle redone after a rollback
  carries the rollback note;
* a metrics window is selected by the database: runs outside it are not read, and the
  ``/metrics`` page lists runs once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields, part_check
from support.dashboard import dashboard

import loopwright as lw
from loopwright._metrics import compute_metrics
from loopwright.replay import replay, traces_from_store
from loopwright.store._sql import SQLStore

ACTOR_USD = 0.1
CHECK_USD = 0.01


def priced_fields(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    v = fields(state, proposal)
    return lw.Verdict(
        passed=v.passed, score=v.score, findings=v.findings, usage=lw.Usage(cost_usd=CHECK_USD)
    )


def one_fix_per_cycle(charged: list[float]) -> Callable[[lw.Context], lw.Proposal]:
    def actor(ctx: lw.Context) -> lw.Proposal:
        charged.append(ACTOR_USD + CHECK_USD)  # this call, and the check that judges it
        doc = ctx.artifacts["doc"]
        for part, value in TARGET.items():
            if doc.get(part) != value:
                return lw.Proposal.edit("doc", {part: value}, usage=lw.Usage(ACTOR_USD))
        return lw.Proposal(note="look", usage=lw.Usage(ACTOR_USD))

    return actor


def make_loop(actor: Callable[[lw.Context], lw.Proposal], **kw: Any) -> lw.Loop:
    return lw.Loop(
        name="m",
        version="v1",
        actor=actor,
        verifiers=[lw.Check(fn=priced_fields, name="fields")],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0),
            no_progress=lw.NoProgress(cycles=2),
            budget=lw.Budget(max_cycles=8),
            **kw,
        ),
    )


def test_a_forks_spend_counts_once_in_metrics_and_in_replay(url: str) -> None:
    charged: list[float] = []
    loop = make_loop(one_fix_per_cycle(charged))
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK, task_key="A")
        assert a.accepted and a.cycles == 3
        fork = rt.fork(a.run_id, at_cycle=1, task_key="A~1")
        # the fork's row says what its state (and budget) start from, not 0
        inherited = rt.store.latest_checkpoint(fork.run_id).state["spent"]["cost_usd"]
        assert inherited == pytest.approx(ACTOR_USD + CHECK_USD)
        assert fork.cost_usd == pytest.approx(inherited)
        assert rt.store.get_run(fork.run_id).cost_usd == pytest.approx(inherited)
        unresumed = compute_metrics(rt.store)
        assert unresumed.spend_usd == pytest.approx(math.fsum(charged))
        f = rt.resume_sync(fork.run_id, loop)
        assert f.accepted and f.cycles == 3  # its budget goes on counting from cycle 1
        # a fork of the accepted end: one cycle that improves nothing
        tail = rt.fork(a.run_id, at_cycle=3, task_key="A~3")
        t = rt.resume_sync(tail.run_id, loop)
        assert t.cycles == 4
        m = compute_metrics(rt.store)
        traces = list(traces_from_store(rt.store))
        contract = lw.Contract.from_dict(rt.store.get_run(a.run_id).contract)
    paid = math.fsum(charged)  # 3 cycles of A, 2 of the first fork, 1 of the second
    assert len(charged) == 6
    rows = {r.task_key: r for r in m.per_run}
    assert m.spend_usd == pytest.approx(paid)
    assert rows["A~1"].cost_usd == pytest.approx(2 * (ACTOR_USD + CHECK_USD))
    assert rows["A~1"].inherited_usd == pytest.approx(ACTOR_USD + CHECK_USD)
    assert (rows["A"].cycles, rows["A~1"].cycles, rows["A~3"].cycles) == (3, 2, 1)
    assert m.cost_per_accepted_usd == pytest.approx(paid / m.accepted)
    # the second fork improved nothing of its own: its own spend is after, not its origin's
    assert rows["A~3"].last_improvement_cycle is None
    assert rows["A~3"].spend_after_last_improvement_usd == pytest.approx(ACTOR_USD + CHECK_USD)
    assert rows["A~3"].progress == 0.0  # it rose no higher than the score it inherited
    assert rows["A~1"].progress == pytest.approx(1.0 - 1 / 3)
    assert m.spend_after_last_improvement_usd == pytest.approx(ACTOR_USD + CHECK_USD)
    # replay: the recorded totals are the metrics' and the recorded contract reproduces them
    report = replay(traces, {"same": contract})
    rec, (same, outs) = report.recorded, report.contracts[0]
    assert rec.cost_usd == pytest.approx(paid) and same.cost_usd == pytest.approx(paid)
    assert rec.cycles == same.cycles == 6
    assert rec.accepted == same.accepted == m.accepted
    assert [o.reason for o in outs] == ["success"] * 3
    assert same.spend_after_last_improvement_usd == pytest.approx(
        rec.spend_after_last_improvement_usd
    )
    assert same.spend_after_last_improvement_usd == pytest.approx(
        m.spend_after_last_improvement_usd
    )


def test_replay_of_a_fork_goes_on_from_its_inherited_budget(tmp_path: Path) -> None:
    charged: list[float] = []
    loop = make_loop(one_fix_per_cycle(charged))
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        a = rt.run_sync(loop, TASK, task_key="A")
        fork = rt.fork(a.run_id, at_cycle=2, task_key="A~2")
        rt.resume_sync(fork.run_id, loop)
        traces = {t.task_key: t for t in traces_from_store(rt.store)}
    tight = lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=2))
    outs = {o.task_key: o for _t, os in replay(list(traces.values()), {"t": tight}).contracts
            for o in os}  # fmt: skip
    # the fork starts at cycle 2: under a 2-cycle budget, as under the engine, it runs none
    assert outs["A~2"].reason == "budget_cycles"
    assert (outs["A~2"].cycles, outs["A~2"].cost_usd) == (0, 0.0)
    assert traces["A~2"].start["cycle"] == 2
    assert traces["A"].start == {}


def test_a_forks_own_note_is_not_context_reused(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    actor = one_fix_per_cycle([])

    def noting(ctx: lw.Context) -> lw.Proposal:
        seen.append([str(n.get("kind")) for n in ctx.notes])
        return actor(ctx)

    loop = make_loop(noting)
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        a = rt.run_sync(loop, TASK, task_key="A")
        f = rt.resume_sync(rt.fork(a.run_id, at_cycle=0, task_key="A~0").run_id, loop)
        assert f.cycles == 3
        m = compute_metrics(rt.store)
    assert seen[-1] == ["fork"]  # the only note the fork's cycles carried
    rows = {r.task_key: r for r in m.per_run}
    assert (rows["A~0"].context_cycles, rows["A~0"].context_reuse_cycles) == (2, 0)
    assert m.context_reuse_rate == 0.0


def test_a_cycle_redone_after_a_rollback_carries_the_rollback_note(tmp_path: Path) -> None:
    seen: list[tuple[int, list[str]]] = []
    actor = one_fix_per_cycle([])
    rolled = [False]

    def noting(ctx: lw.Context) -> lw.Proposal:
        seen.append((ctx.cycle, [str(n.get("kind")) for n in ctx.notes]))
        return actor(ctx)

    def risky(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        touches_c = any(e.part == "c" for e in proposal.edits)
        return "c needs a person the first time" if touches_c and not rolled[0] else None

    loop = make_loop(noting, risk=(lw.RiskRule(name="c", check=risky),))
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="X")
        assert r.status == "awaiting_approval" and r.cycles == 2  # parked in cycle 3
        rt.cancel(r.run_id, by="erin")
        rt.rollback(r.run_id, 2, by="dave")
        rolled[0] = True
        assert rt.resume_sync(r.run_id, loop).accepted
        m = compute_metrics(rt.store)
    assert seen[-1] == (3, ["rollback"])  # cycle 3, done again, saw the rollback
    row = m.per_run[0]
    # cycles after the first: 2 (no note) and 3 (done again after the rollback: its note)
    assert (row.context_cycles, row.context_reuse_cycles) == (2, 1)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Run rows built from the database, and runs whose checkpoints were read (whole, or
    streamed: ``iter_fields``)."""
    counts = {"run_rows": 0, "checkpoints": 0, "list_runs": 0}
    run, checkpoints, list_runs = SQLStore._run, SQLStore.checkpoints, SQLStore.list_runs
    iter_fields = SQLStore.iter_fields

    def counted_run(self: SQLStore, row: Any) -> Any:
        counts["run_rows"] += 1
        return run(self, row)

    def counted_checkpoints(self: SQLStore, *a: Any, **kw: Any) -> Any:
        counts["checkpoints"] += 1
        return checkpoints(self, *a, **kw)

    def counted_fields(self: SQLStore, *a: Any, **kw: Any) -> Any:
        counts["checkpoints"] += 1
        return iter_fields(self, *a, **kw)

    def counted_list(self: SQLStore, *a: Any, **kw: Any) -> Any:
        counts["list_runs"] += 1
        return list_runs(self, *a, **kw)

    monkeypatch.setattr(SQLStore, "_run", counted_run)
    monkeypatch.setattr(SQLStore, "checkpoints", counted_checkpoints)
    monkeypatch.setattr(SQLStore, "iter_fields", counted_fields)
    monkeypatch.setattr(SQLStore, "list_runs", counted_list)
    yield counts


def test_a_window_reads_only_its_runs(url: str, reads: dict[str, int]) -> None:
    loop = make_loop(one_fix_per_cycle([]))
    with lw.Runtime(url) as rt:
        for i in range(4):
            rt.run_sync(loop, TASK, task_key=f"t{i}")
        last = rt.store.get_run("t3")
        everything = compute_metrics(rt.store)
        assert everything.runs == 4
        reads.update(run_rows=0, checkpoints=0)
        empty = compute_metrics(rt.store, since=time.time() + 3600)
        assert empty.runs == 0
        assert reads == {"run_rows": 0, "checkpoints": 0, "list_runs": reads["list_runs"]}
        reads.update(run_rows=0, checkpoints=0)
        one = compute_metrics(rt.store, since=last.created_at)
        assert [r.task_key for r in one.per_run] == ["t3"]
        # one run row read, one run's checkpoints: the others are not read, not even to
        # learn whether the loop's version was accepted before (workflow reuse)
        assert (reads["run_rows"], reads["checkpoints"]) == (1, 1)
        assert one.per_run[0].workflow_reused is True
        until = compute_metrics(rt.store, until=last.created_at - 1e-6)
        assert sorted(r.task_key for r in until.per_run) == ["t0", "t1", "t2"]


def test_the_metrics_page_lists_runs_once(tmp_path: Path, reads: dict[str, int]) -> None:

    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        rt.run_sync(make_loop(one_fix_per_cycle([])), TASK, task_key="t0")
    client = dashboard(db, token="t" * 32, identity="ana")
    reads["list_runs"] = 0
    page = client.get("/metrics", headers={"Authorization": "Bearer " + "t" * 32})
    assert page.status_code == 200, page.text
    assert "Cost per accepted outcome by day" in page.text
    assert reads["list_runs"] == 1


def test_a_forks_cycles_are_fitted_at_the_cycle_and_stall_it_went_on_from(
    tmp_path: Path,
) -> None:
    from loopwright.replay import fit_hazard

    loop = make_loop(one_fix_per_cycle([]))
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        a = rt.run_sync(loop, TASK, task_key="A")
        rt.resume_sync(rt.fork(a.run_id, at_cycle=2, task_key="A~2").run_id, loop)
        (fork,) = [t for t in traces_from_store(rt.store) if t.task_key == "A~2"]
    # the fork's one cycle is its cycle 3, after no stall: where the engine asks p_success(3, 0)
    table = fit_hazard([fork], max_cycles=4, max_stall=1)
    assert [[list(cell) for cell in row] for row in table] == [
        [[0, 0], [0, 0]],
        [[0, 0], [0, 0]],
        [[1, 1], [0, 0]],
        [[0, 0], [0, 0]],
    ]


def _flat_loop(cycles: int) -> lw.Loop:
    """Cycle 1 scores 0.5; every later cycle writes something new that scores 0.5 again."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": ctx.cycle}, usage=lw.Usage(ACTOR_USD))

    def half(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("no", "doc", "a"),))

    return lw.Loop(
        name="flat",
        actor=actor,
        verifiers=[lw.Check(fn=half, name="half")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _chart_after(client: Any, run_id: str) -> str:
    import re

    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200, page.text
    [title] = re.findall(r'<rect class="after"[^>]*><title>([^<]*)</title>', page.text)
    return str(title)


def test_the_run_pages_spend_after_the_last_improvement_is_the_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run page's chart names the spend after the last material improvement. For a fork
    none of whose own cycles improved it said the fork's whole row cost ($0.40: its origin's
    $0.20 included) where `loopwright metrics` says $0.20; for a long run drawn from its newest
    checkpoints only, whose last improvement is before them, it said the whole spend ($0.50)
    where the metric is $0.40."""

    import loopwright.web._run_page as web

    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        origin = rt.run_sync(_flat_loop(2), TASK, task_key="o")
        fork = rt.fork(origin.run_id, 2, contract=lw.Contract(budget=lw.Budget(max_cycles=4)))
        rt.resume_sync(fork.run_id, _flat_loop(4))
        long = rt.run_sync(_flat_loop(5), TASK, task_key="long")
        after = {
            r.run_id: r.spend_after_last_improvement_usd for r in compute_metrics(rt.store).per_run
        }
    assert after[fork.run_id] == pytest.approx(0.2) and after[long.run_id] == pytest.approx(0.4)
    client = dashboard(db, token="t" * 32, identity="ana")
    assert _chart_after(client, fork.run_id).endswith("improvement: $0.20")
    assert _chart_after(client, long.run_id).endswith("improvement: $0.40")
    monkeypatch.setattr(web, "CHECKPOINTS_READ", 2)  # the newest checkpoints: cycles 4 and 5
    assert "before the cycles drawn" in _chart_after(client, long.run_id)
    assert _chart_after(client, fork.run_id).endswith("improvement: $0.20")


def test_a_regression_is_a_cycle_that_breaks_what_passed_in_the_previous_one(url: str) -> None:
    """The outside probe's fork: a check that stays broken regresses once, in the cycle that
    broke it, and a fork's first cycle is compared with the origin's cycle it went on from."""
    steps: dict[int, dict[str, int]] = {
        1: {"a": 1},  # a passes
        2: {"a": 7, "b": 2},  # a broken: a regression; b passes
        3: {"a": 7},  # a still failing: nothing newly broken (counted before)
        4: {"a": 1},  # both pass: accepted
    }

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", steps[ctx.cycle], usage=lw.Usage(0.1))

    loop = lw.Loop(
        name="m",
        version="v1",
        actor=actor,
        verifiers=[part_check("a", 1), part_check("b", 2)],
        contract=lw.Contract(
            success=lw.Success(accept_parts="on_success"), budget=lw.Budget(max_cycles=8)
        ),
    )
    with lw.Runtime(url) as rt:
        origin = rt.run_sync(loop, TASK, task_key="O")
        assert (origin.status, origin.cycles) == ("accepted", 4)
        # from cycle 2 (a failing, b passing): cycle 3 breaks b against the origin's cycle 2
        steps.update({3: {"b": 5}, 4: {"b": 2}, 5: {"a": 1}})
        fork = rt.fork(origin.run_id, at_cycle=2, task_key="O~2")
        f = rt.resume_sync(fork.run_id, loop)
        assert (f.status, f.cycles) == ("accepted", 5)
        # a fork of the fork at its own start: compared with the first origin's cycle 2 too
        again = rt.fork(fork.run_id, at_cycle=2, task_key="O~2~2")
        assert rt.resume_sync(again.run_id, loop).status == "accepted"
        m = compute_metrics(rt.store)
    rows = {r.task_key: r for r in m.per_run}
    assert rows["O"].regressions == ((2, ("check_a",)),)
    assert (rows["O"].verified_cycles, rows["O"].regression_checked_cycles) == (4, 3)
    assert rows["O~2"].regressions == ((3, ("check_b",)),)
    assert (rows["O~2"].verified_cycles, rows["O~2"].regression_checked_cycles) == (3, 3)
    assert rows["O~2~2"].regressions == ((3, ("check_b",)),)
    assert rows["O~2~2"].regression_checked_cycles == 3
    # by hand: 1 + 1 + 1 regressing cycles of 3 + 3 + 3 checked (the definition before
    # counted the origin's cycle 3 and neither fork's cycle 3: 2 of 7)
    assert m.basis["regression_rate"] == (3, 9)
    assert m.regression_rate == pytest.approx(3 / 9)


def test_runs_stopped_by_a_risk_rule_are_told_from_other_escalations(url: str) -> None:
    """A risk rule's approval denied, or expired, ends the run ``escalated`` (the closed
    vocabulary) and ``stopped_by`` says ``risk``; an actor's escalation says ``escalation``."""
    from loopwright._authority import expire

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.task.get("escalate"):
            return lw.Proposal(escalate="needs a person", usage=lw.Usage(0.1))
        return lw.Proposal.edit("doc", dict(TARGET), usage=lw.Usage(0.1))

    loop = make_loop(
        actor, risk=(lw.RiskRule(name="touch_c", touches=("doc/c",), reason="c moves money"),)
    )
    with lw.Runtime(url) as rt:
        denied = rt.run_sync(loop, TASK, task_key="denied")
        lapsed = rt.run_sync(loop, TASK, task_key="lapsed")
        approved = rt.run_sync(loop, TASK, task_key="approved")
        assert {denied.status, lapsed.status, approved.status} == {"awaiting_approval"}
        rt.deny(denied.run_id, by="carol", note="no")
        expired = expire(rt.store, rt.pending_approval(lapsed.run_id))
        assert expired is not None and expired.status == "expired"
        rt.approve(approved.run_id, by="carol")
        ends = [rt.resume_sync(r.run_id, loop) for r in (denied, lapsed, approved)]
        assert [e.status for e in ends] == ["escalated", "escalated", "accepted"]
        asked = rt.run_sync(loop, {**TASK, "escalate": True}, task_key="asked")
        assert asked.status == "escalated"
        m = compute_metrics(rt.store)
    by_key = {r.task_key: r.stopped_by for r in m.per_run}
    assert by_key == {
        "denied": "risk",
        "lapsed": "risk",
        "approved": "success",
        "asked": "escalation",
    }
    assert m.stop_reasons["escalated"] == 3  # the stop reasons are as they were
    assert (m.stopped_by["risk"], m.stopped_by["escalation"], m.stopped_by["success"]) == (2, 1, 1)
    assert sum(m.stopped_by.values()) == m.runs_ended == 4


def test_the_cli_and_the_metrics_page_show_what_stopped_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from loopwright.cli import _metrics_cmd as _registers_the_command  # noqa: F401
    from loopwright.cli import main

    loop = make_loop(
        one_fix_per_cycle([]),
        risk=(lw.RiskRule(name="touch_c", touches=("doc/c",), reason="c moves money"),),
    )
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        parked = rt.run_sync(loop, TASK, task_key="denied")
        rt.deny(parked.run_id, by="carol")
        assert rt.resume_sync(parked.run_id, loop).status == "escalated"
        rt.run_sync(make_loop(one_fix_per_cycle([])), TASK, task_key="fine")
    assert main(["metrics", "--store", db]) == 0
    text = capsys.readouterr().out
    for name in ("Stopped by", "verified_completion_rate", "exception_rate"):
        assert name in text
    # one run of two of each: 50.0 %
    assert re.search(r"risk\s+│?\s*1\s+│?\s*50\.0%", text), text
    assert re.search(r"escalation\s+│?\s*0\s", text), text
    client = dashboard(db, token="t" * 32, identity="ana")
    page = client.get("/metrics", headers={"Authorization": "Bearer " + "t" * 32}).text
    assert "Stopped by" in page
    assert re.search(r"<code>risk</code>.*?<td class=\"num\">1</td>", page), page
    api = client.get("/api/metrics", headers={"Authorization": "Bearer " + "t" * 32}).json()
    assert api["stopped_by"]["risk"] == 1 and api["stop_reasons"]["escalated"] == 1
