"""What a cycle cost, as a cycle's record, ``show``, the dashboard and a trace report it, is
everything its calls were billed: a failed attempt's cost (a retried or given-up actor), and a
verifier judging again after a person's edit. Before, the run was charged for them but each
cycle's figure and the trace's call spans left them out, so they did not add up to the run's
spend (outside probe)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.store import Store, open_store
from loopwright.trace import run_spans

FAILED = lw.Usage(cost_usd=0.05, tokens=50)  # what a failed attempt was billed
FAST = lw.RetryPolicy(attempts=3, backoff_s=0.0, jitter=False)
PARTS = ("a", "b")
GOOD = ("good", "fine")


class Flaky(lw.TransientError):
    pass


def _actor(fail_first: int) -> Callable[[lw.Context], lw.Proposal]:
    """Fixes one part a cycle; its first ``fail_first`` calls fail, each billed FAILED."""
    calls = itertools.count()

    def actor(ctx: lw.Context) -> lw.Proposal:
        if next(calls) < fail_first:
            e = Flaky("busy")
            e.usage = FAILED  # type: ignore[attr-defined]
            raise e
        doc = ctx.artifacts["doc"]
        todo = [p for p in PARTS if doc.get(p) not in GOOD] or ["a"]
        return lw.Proposal.edit("doc", {todo[0]: "good"}, usage=lw.Usage(0.1, 100))

    return actor


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    doc = state.artifacts["doc"].values()
    bad = [lw.Finding(f"{p} is bad", "doc", p) for p in PARTS if doc.get(p) not in GOOD]
    return lw.Verdict(
        passed=not bad,
        score=1 - len(bad) / len(PARTS),
        findings=tuple(bad),
        usage=lw.Usage(0.01, 10),
    )


def _loop(fail_first: int, *, attempts: int = 3, risky: bool = False) -> lw.Loop:
    return lw.Loop(
        name="costs",
        actor=_actor(fail_first),
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0),
            budget=lw.Budget(max_cycles=4),
            risk=(lw.RiskRule(name="b-change", touches=("doc/b",)),) if risky else (),
        ),
        retry=lw.RetryPolicy(attempts=attempts, backoff_s=0.0, jitter=False),
    )


TASK = {"artifacts": {"doc": dict.fromkeys(PARTS, "bad")}}


@lw.effect("publish", name="pub")
def pub(doc: str, *, key: str) -> lw.EffectResult:
    return lw.EffectResult({"ok": doc}, usage=lw.Usage(cost_usd=0.2, tokens=200))


@lw.effect("publish", name="refused")
def refused(doc: str, *, key: str) -> None:
    raise lw.PermanentError("the receiver refused it")


def _effect_loop(*effects: lw.Effect) -> lw.Loop:
    """Fixes a part a cycle; the cycle that fixes the last one also runs ``effects``."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        todo = [p for p in PARTS if doc.get(p) not in GOOD] or ["a"]
        last = len(todo) == 1
        return lw.Proposal(
            edits=(lw.Edit("doc", todo[0], "good"),),
            effects=tuple(e.call(doc="x") for e in effects) if last else (),
            usage=lw.Usage(0.1, 100),
        )

    return lw.Loop(
        name="effects",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        effects=[pub, refused],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="publish", action="allow"),)),
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=4)),
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    path = tmp_path_factory.mktemp("costs") / "store.db"
    out: dict[str, str] = {}
    with lw.Runtime(str(path)) as rt:
        # the actor's first call fails (billed), the retry succeeds
        out["retried"] = rt.run_sync(_loop(1), TASK, task_key="retried").run_id
        # the actor fails every attempt: the run gives up inside cycle 1
        out["gave_up"] = rt.run_sync(_loop(99, attempts=2), TASK, task_key="gave_up").run_id
        # parked on doc/b; a person edits doc/a beside it and approves: judged again
        loop = _loop(0, risky=True)
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "good", "b": "bad"}}}, task_key="edit")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/a", "fine", by="bob", note="by hand")
        rt.approve(r.run_id, by="alice")
        out["judged_again"] = rt.resume_sync(r.run_id, loop).run_id
        # an effect that reports what it cost; then one that runs before a refused one (the
        # run ends inside that cycle, which so has no record)
        for name, effects in (("effect", (pub,)), ("effect_failed", (pub, refused))):
            r = rt.run_sync(_effect_loop(*effects), TASK, task_key=name)
            assert r.status == ("accepted" if name == "effect" else "escalated"), r.stop_reason
            out[name] = r.run_id
    yield path, out


def _concluded(st: Store, run_id: str) -> list[dict[str, object]]:
    return [c.record for c in st.checkpoints(run_id) if c.record and "proposal" in c.record]


@pytest.mark.parametrize("name", ["retried", "gave_up", "judged_again", "effect", "effect_failed"])
def test_call_and_cycle_spans_add_up_to_the_run(
    runs: tuple[Path, dict[str, str]], name: str
) -> None:
    path, ids = runs
    with open_store(str(path)) as st:
        rec, spans = run_spans(st, ids[name])

    def total(kinds: tuple[str, ...], attr: str) -> float:
        return sum(float(s.attributes.get(attr, 0)) for s in spans if s.kind in kinds)

    calls = ("actor", "verifier", "effect")
    assert rec.cost_usd > 0
    assert total(calls, "loopwright.cost_usd") == pytest.approx(rec.cost_usd)
    assert total(calls, "loopwright.usage.total_tokens") == rec.tokens
    assert total(("cycle",), "loopwright.cost_usd") == pytest.approx(rec.cost_usd)
    assert total(("cycle",), "loopwright.usage.total_tokens") == rec.tokens


def test_a_cycle_record_counts_its_failed_attempts(runs: tuple[Path, dict[str, str]]) -> None:
    path, ids = runs
    with open_store(str(path)) as st:
        rec = st.get_run(ids["retried"])
        records = _concluded(st, rec.run_id)
    first = records[0]
    # the actor's failed attempt, the actor, the check: 0.05 + 0.1 + 0.01
    assert first["usage"]["cost_usd"] == pytest.approx(0.16)  # type: ignore[index]
    assert first["usage"]["tokens"] == 160  # type: ignore[index]
    assert sum(r["usage"]["cost_usd"] for r in records) == pytest.approx(rec.cost_usd)  # type: ignore[index]


def test_a_cycle_judged_again_counts_both_judgements(runs: tuple[Path, dict[str, str]]) -> None:
    path, ids = runs
    with open_store(str(path)) as st:
        rec = st.get_run(ids["judged_again"])
        [record] = _concluded(st, rec.run_id)
    # the actor once, the check twice (before the park and after the edit)
    assert record["usage"]["cost_usd"] == pytest.approx(0.12)  # type: ignore[index]
    assert rec.cost_usd == pytest.approx(0.12)


def test_show_prints_the_cycle_with_its_failed_attempt(
    runs: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwright.cli import main

    path, ids = runs
    assert main(["show", ids["retried"], "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "$0.16" in out
