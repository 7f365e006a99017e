"""Random kills against an uninterrupted run, on a loop wider than the trivial one (stop 54,
issue 14's check: "kills runs at random and compares the resumed state with an uninterrupted
run").

The loop (``killcmp/kc.py``): four parts under a three-step plan, partial edits, a visible and a
held-out check, a person's correction in feedback memory the actor needs, a reflector, an
effect with a business key (its outside calls counted in a file) and a payment that parks for
approval. The scenario (``killcmp_play.STEPS``): the run parks, a second process approves
(``loopwright approve``), the resume accepts it; a person's edit (``loopwright edit``), judged on
resume; a rollback to cycle 3 (``loopwright rollback``), and the resume that redoes the rest
and ends (the payment it made already is reused, asking no one). Each engine step is SIGKILLed at phase boundaries drawn by a
seeded RNG (``Runtime._on_phase``, the kill harnesses' hook) and resumed (``Runtime.resume``);
what comes out through the CLI (``show --json``, ``trace``, ``memory list --json``) and the
effects' call log must equal the uninterrupted run's, but for what a kill changes by design
(``killcmp_play.compared``), for snapshot intervals K small and large, on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import killcmp_play as kp
import pytest
from support.crash import Crash, phase_hook

import loopwright as lw

SEEDS = int(os.environ.get("LW_KILL_EXAMPLES", "2"))
_REF: dict[tuple[str, int], dict[str, Any]] = {}


def _sqlite(tmp: Path) -> str:
    return f"sqlite:///{tmp / 's.db'}"


def reference(k: int, root: Path) -> dict[str, Any]:
    """The uninterrupted run's outcome at snapshot interval ``k`` (SQLite), played once."""
    if ("sqlite", k) not in _REF:
        work = Path(tempfile.mkdtemp(prefix=f"ref{k}-", dir=root))
        assert kp.play(_sqlite(work), work, [], k) == 0
        _REF["sqlite", k] = kp.observe(_sqlite(work), work)
    return _REF["sqlite", k]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("killcmp")


def _differences(got: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    a, problems = kp.compared(got, ref)
    b, _ = kp.compared(ref, ref)
    return problems + [
        f"{key}: {a[key]!r:.1500} != {b[key]!r:.1500}" for key in b if a[key] != b[key]
    ]


def test_the_reference_takes_every_path_under_attack(root: Path) -> None:
    ref = reference(50, root)
    run = ref["show"]["run"]
    assert (run["status"], run["stop_reason"]) == ("accepted", "success")
    # every effect called once outside, the payment reused after the rollback, not paid again
    assert ref["calls"] == sorted(
        [f"notify notify:notify:{p}" for p in "abcd"] + ["pay pay:pay:INV-54"]
    )
    assert [a["status"] for a in ref["show"]["approvals"]] == ["approved"]
    kinds = [e["kind"] for e in ref["show"]["events"]]
    for kind in (
        "edited",
        "rolled_back",
        "judged_again",
        "reflected",
        "effect_reused",
        "approval_not_needed",
    ):
        assert kind in kinds, kind
    assert [s["status"] for s in ref["show"]["state"]["plan"]] == ["done"] * 3
    [doc] = ref["show"]["state"]["artifacts"]
    parts = {p["name"]: [v["value"] for v in p["versions"]] for p in doc["parts"]}
    # the rollback to cycle 3 dropped the person's B-OK2 and the first near miss of c
    assert parts == {
        "a": ["draft", "A-OK"],
        "b": ["draft", "B-OK"],
        "c": ["draft", "C-OK~", "C-OK"],
        "d": ["draft", "D-MEM"],  # from the person's correction in memory
    }
    signals = sorted({m["signal"] for m in ref["memory"]})
    assert signals == ["correction", "edit", "reflection"]
    assert kp.compared(ref, ref)[1] == []


@pytest.mark.parametrize("k", [1, 50, 1000])
def test_the_snapshot_interval_does_not_change_the_outcome(root: Path, k: int) -> None:
    assert _differences(reference(k, root), reference(50, root)) == []


@pytest.mark.parametrize("k", [1, 1000])
@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_run_killed_at_random_resumes_to_the_uninterrupted_outcome(
    root: Path, seed: int, k: int
) -> None:
    kills = kp.seeded_kills(1000 * k + seed, per_step=3)
    work = Path(tempfile.mkdtemp(prefix=f"kill{k}-{seed}-", dir=root))
    kp.play(_sqlite(work), work, kills, k)
    assert _differences(kp.observe(_sqlite(work), work), reference(k, root)) == [], kills


def test_kills_in_every_effect_phase_of_every_engine_step(root: Path) -> None:
    """Not drawn: each engine step killed in its first effect's intent, call and result."""
    kills = [
        [("after_effect_intent", 1), ("before_effect_result", 1), ("after_effect_result", 1)]
    ] * 5
    work = Path(tempfile.mkdtemp(prefix="effects-", dir=root))
    assert kp.play(_sqlite(work), work, kills, 2) >= 5
    assert _differences(kp.observe(_sqlite(work), work), reference(2, root)) == []


_SPEC_REF: list[dict[str, Any]] = []


@pytest.mark.parametrize("seed", range(SEEDS))
def test_the_cli_killed_by_the_loops_own_code_resumes_to_the_uninterrupted_outcome(
    root: Path, seed: int
) -> None:
    """The same loop as a spec (``kc.toml``, its reflector included), every engine step
    ``loopwright run`` / ``loopwright resume``, killed inside the actor, a check or an effect
    (after its outside call, before it returns)."""
    if not _SPEC_REF:
        work = Path(tempfile.mkdtemp(prefix="spec-ref-", dir=root))
        assert kp.play(_sqlite(work), work, [], 50, spec=True) == 0
        _SPEC_REF.append(kp.observe(_sqlite(work), work))
    ref = _SPEC_REF[0]
    assert (ref["show"]["run"]["status"], len(ref["calls"])) == ("accepted", 5)
    assert "reflected" in [e["kind"] for e in ref["show"]["events"]]  # the spec's [reflector]
    kills = kp.seeded_kills(500 + seed, per_step=3, spec=True)
    work = Path(tempfile.mkdtemp(prefix=f"spec-{seed}-", dir=root))
    kp.play(_sqlite(work), work, kills, 50, spec=True)
    assert _differences(kp.observe(_sqlite(work), work), ref) == [], kills


@pytest.mark.postgres
@pytest.mark.parametrize("seed", range(max(1, SEEDS // 2)))
def test_the_same_on_postgresql(root: Path, seed: int) -> None:
    from conftest import pg_base_url, pg_create_schema, pg_drop_schema

    base = pg_base_url()
    schema = f"lw_killcmp54_{uuid.uuid4().hex[:10]}"
    url = pg_create_schema(base, schema)
    try:
        work = Path(tempfile.mkdtemp(prefix=f"pg-{seed}-", dir=root))
        kills = kp.seeded_kills(7000 + seed, per_step=3)
        kp.play(url, work, kills, 3)
        assert _differences(kp.observe(url, work), reference(3, root)) == [], kills
    finally:
        pg_drop_schema(base, schema)


# --- what the comparison found ------------------------------------------------------------------
def _never_retried(log: Path, tag: str) -> lw.Loop:
    """One part, one effect that is never retried (``attempts=1``) and whose reconcile hook
    reads the outside world (``log``)."""

    def sent(key: str) -> dict[str, str] | None:
        return {"sent": key} if log.exists() and key in log.read_text().split() else None

    @lw.effect(
        "send", key=lambda a: f"n:{a['p']}", reconcile=sent, retry=lw.RetryPolicy(attempts=1)
    )
    def notify(p: str, *, key: str) -> dict[str, str]:
        with open(log, "a") as fh:
            fh.write(key + "\n")
        return {"sent": key}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "a", "OK"),), effects=(notify.call(p=tag),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        ok = state.values()["doc"]["a"] == "OK"
        found = () if ok else (lw.Finding("a is wrong", "doc", "a", "content"),)
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.0, findings=found)

    return lw.Loop(
        name="never-retried",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=(notify,),
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
    )


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_kill_before_an_effect_never_retried_acted_does_not_spend_its_one_attempt(
    tmp_path: Path, store: str
) -> None:
    """Killed after its intent was journaled and before its call, an effect its reconcile hook
    says never happened is called once on resume, as the uninterrupted run calls it. Before
    (killcmp54), the cut attempt counted against ``RetryPolicy(attempts=1)``: "gave up after 1
    attempt(s)", the run escalated, the action never done — though docs/concepts.md and
    docs/decisions.md say an attempt the process died in is never one of the bound's."""
    if store == "postgres":
        from conftest import pg_base_url, pg_create_schema, pg_drop_schema

        base = pg_base_url()
        schema = f"lw_killcmp54_{uuid.uuid4().hex[:10]}"
        url = pg_create_schema(base, schema)
    else:
        url = f"sqlite:///{tmp_path / 's.db'}"
    task = {"artifacts": {"doc": {"a": "x"}}}
    try:
        outcomes = []
        for kill in (None, ("after_effect_intent", 1)):
            log = tmp_path / f"sent-{bool(kill)}.log"
            tag = "killed" if kill else "whole"  # (a business key: one action per run)
            loop = _never_retried(log, tag)
            key = f"NR-{tag}"
            with lw.Runtime(url) as rt:
                rt._on_phase = phase_hook(kill)
                try:
                    rt.run_sync(loop, task, task_key=key)
                except Crash:
                    assert kill is not None
            with lw.Runtime(url) as rt:
                r = rt.resume_sync(rt.store.get_run(key).run_id, loop)
                [entry] = rt.store.journal(r.run_id, key=f"effect:notify:n:{tag}")
            sent = log.read_text().split() if log.exists() else []
            outcomes.append(
                (r.status, r.stop_reason, r.cycles, entry.status, entry.attempts, len(sent))
            )
        assert outcomes[1] == outcomes[0] == ("accepted", "success", 1, "done", 1, 1)
    finally:
        if store == "postgres":
            pg_drop_schema(base, schema)
