"""Outcome metrics over real runs in a real SQLite store: the demo workload, small loops with
crashes, retries, questions, regressions and approvals, and the `loopwright metrics` command."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields, part_check

import loopwright as lw
from loopwright import _lease_life
from loopwright._metrics import CRASH_RESUME, METRIC_NAMES, compute_metrics
from loopwright.cli import _metrics_cmd as _registers_the_command  # noqa: F401
from loopwright.cli import main
from loopwright.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "invoice_exceptions" / "loop.toml"
TASKS = ROOT / "examples" / "invoice_exceptions" / "tasks.jsonl"


def _tasks() -> list[dict[str, Any]]:
    return [json.loads(line) for line in TASKS.read_text(encoding="utf-8").splitlines() if line]


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "payments.jsonl"
    monkeypatch.setenv("INVOICE_LEDGER", str(path))
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "m.db"


@pytest.fixture
def rt(db: Path) -> Iterator[lw.Runtime]:
    with lw.Runtime(str(db)) as runtime:
        yield runtime


def _demo(rt: lw.Runtime, batch: str = "b1") -> list[lw.RunResult]:
    loop = lw.load_spec(SPEC)
    return asyncio.run(rt.run_many(loop, _tasks(), key_of=lambda t, i: f"{batch}/{t['id']}"))


def _concluded(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [
        c.record
        for c in rt.store.checkpoints(run_id)
        if c.record and c.record.get("decision") in ("accepted", "revise", "refused", "asked")
    ]


def _reusing(rt: lw.Runtime) -> int:
    """Runs created after some accepted run of the same loop version had ended."""
    runs = rt.store.list_runs()
    done = [r.ended_at for r in runs if r.status == "accepted" and r.ended_at is not None]
    return sum(1 for r in runs if any(t < r.created_at for t in done))


# --- the demo workload ------------------------------------------------------------------------
def test_demo_workload_metrics_match_the_runs(rt: lw.Runtime) -> None:
    results = _demo(rt)
    assert len(results) == 26
    accepted = [r for r in results if r.status == "accepted"]
    assert len(accepted) == 16  # pinned by tests/integration/test_invoice_workload.py
    total = sum(r.spent.cost_usd for r in results)

    m = compute_metrics(rt.store)
    assert (m.runs, m.accepted) == (26, 16)
    assert m.task_completion_rate == pytest.approx(16 / 26)
    assert m.false_success_rate == pytest.approx(2 / 16)
    assert m.spend_usd == pytest.approx(total)
    assert m.cost_per_accepted_usd == pytest.approx(total / 16)
    assert m.cycles_to_accepted == pytest.approx(sum(r.cycles for r in accepted) / 16)
    assert m.stop_reasons == {
        **dict.fromkeys(lw.STOP_REASONS, 0),
        **Counter(r.stop_reason for r in results if r.stop_reason),
    }
    assert m.runs - m.runs_ended == 6  # parked, no stop reason yet
    assert m.approvals_per_accepted == pytest.approx(6 / 16)
    assert m.approval_wait_s is None  # nobody has decided yet
    assert m.undefined["approval_wait_s"]
    # run_many creates runs as slots free up: a run created after another run of the same
    # spec version was accepted reuses a proven workflow
    assert m.workflow_reuse_rate == pytest.approx(_reusing(rt) / 26)

    # spend after the last improvement, run by run, from the cycles' own usage: the cycles
    # up to the last improving one cost what the run did not spend after it.
    by_id = {r.run_id: r for r in m.per_run}
    after_total = 0.0
    for res in results:
        recs = _concluded(rt, res.run_id)
        improving = [i for i, rec in enumerate(recs) if rec["improved"]]
        through = (
            sum(rec["usage"]["cost_usd"] for rec in recs[: improving[-1] + 1]) if improving else 0
        )
        row = by_id[res.run_id]
        assert row.spend_after_last_improvement_usd == pytest.approx(res.spent.cost_usd - through)
        assert row.last_improvement_cycle == (recs[improving[-1]]["cycle"] if improving else None)
        after_total += res.spent.cost_usd - through
        if res.status == "accepted":
            assert row.spend_after_last_improvement_usd == pytest.approx(0.0)
    assert m.spend_after_last_improvement_usd == pytest.approx(after_total)
    assert m.spend_after_last_improvement_frac == pytest.approx(after_total / total)
    # the budget_cycles run improved in every cycle; the plateaued ones spent after cycle 1
    stalled = [by_id[r.run_id] for r in results if r.stop_reason == "no_progress"]
    assert all(r.last_improvement_cycle == 1 for r in stalled)
    assert all(r.spend_after_last_improvement_usd > 0 for r in stalled)


def test_decisions_on_parked_demo_runs_and_workflow_reuse(rt: lw.Runtime) -> None:
    first = _demo(rt, "b1")
    loop = lw.load_spec(SPEC)
    parked = [r for r in first if r.status == "awaiting_approval"]
    t0 = time.time()
    rt.approve(parked[0].run_id, by="ann")
    rt.deny(parked[1].run_id, by="bob")
    for r in parked[:2]:
        rt.resume_sync(r.run_id, loop)
    decided = [
        a
        for r in parked[:2]
        for a in rt.store.approvals(run_id=r.run_id)
        if a.status in ("approved", "denied")
    ]
    waits = [a.decided_at - a.requested_at for a in decided if a.decided_at is not None]
    assert len(waits) == 2

    m1 = compute_metrics(rt.store)
    assert m1.approval_wait_s == pytest.approx(sum(waits) / 2)
    ended = compute_metrics(rt.store, status="escalated")
    assert ended.runs == sum(1 for r in first if r.status == "escalated") + 1  # + the denied one

    # a second batch of the same spec version: every run reuses an accepted workflow
    created = time.time()
    assert created > t0
    _demo(rt, "b2")
    both = compute_metrics(rt.store, loop="invoice-exceptions")
    assert both.runs == 52
    assert both.workflow_reuse_rate == pytest.approx(_reusing(rt) / 52)
    second = compute_metrics(rt.store, since=created)
    assert second.runs == 26
    assert second.workflow_reuse_rate == 1.0
    none = compute_metrics(rt.store, project="no-such-project")
    assert none.runs == 0
    assert all(none.value(n) is None for n in METRIC_NAMES)
    early = compute_metrics(rt.store, until=t0 - 3600)
    assert early.runs == 0


# --- small loops ------------------------------------------------------------------------------
class Crash(BaseException):
    """Stands in for a process dying mid-cycle."""


def fixer(ctx: lw.Context) -> lw.Proposal:
    """Repairs one finding per cycle."""
    for f in ctx.findings:
        if f.part and not ctx.is_accepted("doc", f.part):
            return lw.Proposal.edit("doc", {f.part: f.evidence["expected"]}, usage=lw.Usage(0.1))
    return lw.Proposal(note="look", usage=lw.Usage(0.1))


def make_loop(actor: Callable[..., Any], verifiers: Any = (fields,), **contract: Any) -> lw.Loop:
    return lw.Loop(
        name="m",
        version="v1",
        actor=actor,
        verifiers=list(verifiers),
        contract=lw.Contract(budget=lw.Budget(max_cycles=6), **contract),
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.001, jitter=False),
    )


def test_crash_resume_and_retry_count_as_recovered_failures(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process that dies says nothing: the execution's word that it stopped alive (written for
    # the ``Crash`` raised here, a BaseException as a Ctrl-C is) is left unsaid, as a kill
    # leaves it. Said, the resume is no crash (``test_metrics``, crash53b).
    monkeypatch.setattr(_lease_life, "_said_alive", lambda *a, **k: None)
    crash_at = {2}
    flaky = {3}

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle in crash_at:
            crash_at.clear()
            raise Crash
        if ctx.cycle in flaky:
            flaky.clear()
            raise lw.TransientError("429")
        return fixer(ctx)

    with lw.Runtime(str(db)) as rt1, pytest.raises(Crash):
        rt1.run_sync(make_loop(actor), TASK, task_key="crashy")
    with lw.Runtime(str(db)) as rt2:
        r = rt2.resume_sync(rt2.store.get_run("crashy").run_id, make_loop(actor))
        assert r.accepted
        clean = rt2.run_sync(make_loop(fixer), TASK, task_key="clean")
        assert clean.accepted
        m = compute_metrics(rt2.store)
    rows = {r.task_key: r for r in m.per_run}
    assert rows["crashy"].failures == {CRASH_RESUME: 1, "retry": 1}
    assert rows["clean"].failures == {}
    assert m.recovery_success_rate == 1.0
    assert m.basis["recovery_success_rate"] == (1, 1)


def test_a_question_answered_is_context_reused_by_the_next_cycle(rt: lw.Runtime) -> None:
    asked: list[lw.Context] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        asked.append(ctx)
        if ctx.cycle == 1:
            return lw.Proposal(question=lw.Question("Which PO?", choices=("PO-1", "PO-2")))
        return lw.Proposal.edit("doc", TARGET)

    loop = make_loop(actor)
    r = rt.run_sync(loop, TASK)
    assert r.status == "awaiting_approval"
    rt.answer(r.run_id, "PO-2", by="ann")
    assert rt.resume_sync(r.run_id, loop).accepted
    assert [n["kind"] for n in asked[-1].notes] == ["answer"]
    m = compute_metrics(rt.store)
    # cycles: 1 (asked, the first), 2 (its context carried the answer)
    assert (m.per_run[0].context_cycles, m.per_run[0].context_reuse_cycles) == (1, 1)
    assert m.context_reuse_rate == 1.0
    assert m.approvals_per_accepted == 1.0
    assert m.approval_wait_s is not None and m.approval_wait_s >= 0


def test_a_cycle_that_breaks_a_passing_check_is_a_regression(rt: lw.Runtime) -> None:
    steps = [{"a": 1}, {"a": 7, "b": 2}, {"a": 1, "c": 3}]

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", steps[ctx.cycle - 1], usage=lw.Usage(0.1))

    loop = make_loop(
        actor,
        verifiers=(part_check("a", 1), part_check("b", 2)),
        success=lw.Success(accept_parts="on_success"),
    )
    r = rt.run_sync(loop, TASK)
    assert (r.status, r.cycles) == ("accepted", 3)
    m = compute_metrics(rt.store)
    row = m.per_run[0]
    assert row.regressions == ((2, ("check_a",)),)
    assert m.regression_rate == pytest.approx(1 / 2)  # checked: cycles 2 and 3
    # a was written in cycles 1, 2 and 3 (versions 2..4 after the task's 0); the accepted
    # one is version 4: 3 revisions. b: 0 then 2 (1 revision); c: 0 then 3 (1 revision).
    assert (row.accepted_parts, row.part_revisions) == (3, 5)
    assert m.revisions_per_accepted_part == pytest.approx(5 / 3)
    assert m.time_to_accepted_s is not None and m.time_to_accepted_s >= 0


# --- the command ------------------------------------------------------------------------------
def test_cli_json_is_to_dict_and_the_table_renders(
    rt: lw.Runtime, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rt.run_sync(make_loop(fixer), TASK, task_key="one")
    assert main(["metrics", "--store", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(json.dumps(compute_metrics(rt.store).to_dict()))
    assert out["task_completion_rate"] == 1.0
    assert (
        main(["metrics", "--store", str(db), "--days", "1", "--per-run", "--review-cost", "4"]) == 0
    )
    text = capsys.readouterr().out
    for name in (*METRIC_NAMES, "human_review_cost_per_accepted_usd", "Stop reasons", "Per run"):
        assert name in text
    assert main(["metrics", "--store", str(db), "--project", "x", "--loop", "m", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--since", "last tuesday"], "--since"),
        (["--until", "2024-02-30"], "--until"),
        (["--since", "2024-06-02", "--until", "2024-06-01"], "--since"),
        (["--since", "2024-06-01", "--days", "3"], "--days"),
        (["--days", "0"], "--days"),
        (["--status", "done"], "--status"),
        (["--review-cost", "-1"], "--review-cost"),
    ],
)
def test_cli_bad_input_is_a_one_line_error_exit_2(
    db: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str
) -> None:
    SQLiteStore(db).close()  # a store that exists: a missing one is refused first
    assert main(["metrics", "--store", str(db), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"loopwright: error: {field}: ")
    assert "\n" not in err


def test_a_persons_edits_are_counted_per_accepted_part(rt: lw.Runtime) -> None:
    """The actor never gets c right; a person edits it by hand (twice: a slip, then the fix)
    and the loop goes on to accepted: 2 edits over the 3 accepted parts."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": 1, "b": 2}, usage=lw.Usage(0.1))

    loop = make_loop(actor, no_progress=lw.NoProgress(cycles=2))
    first = rt.run_sync(loop, TASK, task_key="edited")
    assert first.status != "accepted"
    before = compute_metrics(rt.store)
    assert before.edits_per_accepted_part == pytest.approx(0.0), before.basis
    rt.edit(first.run_id, "doc/c", 30, by="ana", note="a slip")
    rt.edit(first.run_id, "doc/c", 3, by="ana")
    done = rt.resume_sync(first.run_id, loop)
    assert done.status == "accepted", done.packet
    m = compute_metrics(rt.store)
    row = m.per_run[0]
    assert row.edits == 2 and row.accepted_parts == 3
    assert m.edits_per_accepted_part == pytest.approx(2 / 3)
    assert m.basis["edits_per_accepted_part"] == (2, 3)
    assert m.to_dict()["edits_per_accepted_part"] == pytest.approx(2 / 3)


def test_metrics_of_a_store_that_does_not_exist_are_refused_not_an_empty_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped path reported 0 runs and left an empty store file there (the CLI refused
    it already); a path that exists, a Store and a URL of an existing file are read."""
    missing = tmp_path / "typo.db"
    for given in (missing, str(missing), f"sqlite:///{missing}"):
        with pytest.raises(lw.ConfigError, match="no store at") as e:
            compute_metrics(given)
        assert e.value.field == "store"
        assert not missing.exists()
    monkeypatch.chdir(tmp_path)  # the default store (./.loopwright/loopwright.db), not there
    monkeypatch.delenv("LOOPWRIGHT_STORE", raising=False)
    with pytest.raises(lw.ConfigError, match="no store at"):
        compute_metrics(None)
    assert not (tmp_path / ".loopwright").exists()
    SQLiteStore(missing).close()
    assert compute_metrics(missing).runs == compute_metrics(f"sqlite:///{missing}").runs == 0


@pytest.mark.postgres
def test_metrics_of_a_postgres_schema_that_does_not_exist_are_refused_not_created(
    pg_schema: tuple[str, str],
) -> None:
    """review45: a mistyped ``?schema=`` reported 0 runs and left an empty schema behind (the
    CLI refused it already); once the store exists, it is read."""
    from conftest import pg_create_schema

    from loopwright.store.postgres import missing_schema

    base, schema = pg_schema
    pg_url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    with pytest.raises(lw.ConfigError, match="no schema 'lw_") as e:
        compute_metrics(pg_url)
    assert e.value.field == "store"
    assert missing_schema(pg_url) is not None  # nothing was created
    pg_create_schema(base, schema)
    lw.Runtime(pg_url).close()
    assert compute_metrics(pg_url).runs == 0
