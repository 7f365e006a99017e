"""Issue 18: fork a run at a cycle (a new run from the old run's state after cycle N, linked to
it, the old run untouched, inherited effects never done again; one transaction), and a
person's edit (an accepted, person-authored version; an event with the diff; an ``edit`` memory
signal in the task's scope; the loop continues from it)."""

from __future__ import annotations

import getpass
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.cli import main

CYCLES = 8
TASK = {
    "goal": "three parts",
    "artifacts": {"doc": {"a": "a0", "b": "b0", "c": "c0"}},
    "plan": [{"id": "s1", "parts": ["doc/a"]}],
}


class Counter:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def notify(self, text: str, key: str) -> str:
        self.calls.append(key)
        return f"sent {text}"


def make_loop(counter: Counter, max_cycles: int = CYCLES) -> lw.Loop:
    notify = lw.effect("send", name="notify", key=lambda a: "team-once", requires_success=False)(
        counter.notify
    )

    def actor(ctx: lw.Context) -> lw.Proposal:
        n = ctx.cycle
        edits: dict[str, Any] = {"b": f"b{n}"}
        if not ctx.is_accepted("doc", "a"):
            edits["a"] = f"a{n}"
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", edits).edits,
            effects=(notify.call(text="started"),),  # the same business action every cycle
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        v = state.values()["doc"]
        findings = [lw.Finding("b is never right", "doc", "b")]
        if v["a"] != "a2":
            findings.append(lw.Finding("a is not a2", "doc", "a"))
        return lw.Verdict(passed=False, score=1 - len(findings) / 3, findings=tuple(findings))

    return lw.Loop(
        name="forky",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=max_cycles)),
        effects=[notify],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
    )


def _state_at(rt: lw.Runtime, run_id: str, cycle: int) -> dict[str, Any]:
    ck = [c for c in rt.store.checkpoints(run_id) if c.cycle == cycle and (c.record or c.seq == 0)]
    return _comparable(ck[-1].task_state())


def _comparable(s: lw.TaskState) -> dict[str, Any]:
    d = s.to_dict()
    for k in ("notes", "task_key", "pending", "next_action", "spent", "rejected"):
        d.pop(k, None)
    return d


@pytest.fixture
def origin(tmp_path: Path) -> tuple[Path, str, Counter]:
    counter = Counter()
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        r = rt.run_sync(make_loop(counter), TASK, task_key="origin")
        assert (r.status, r.cycles) == ("stopped", CYCLES)
    assert counter.calls == ["notify:team-once"]  # a business action: once in the store
    return db, r.run_id, counter


@pytest.mark.parametrize("n", [0, 1, 3, 7])
def test_a_fork_starts_from_the_origins_state_at_that_cycle(
    origin: tuple[Path, str, Counter], n: int
) -> None:
    db, run_id, _ = origin
    with lw.Runtime(db) as rt:
        before = [(c.seq, c.state, c.record) for c in rt.store.checkpoints(run_id)]
        fork = rt.fork(run_id, n)
        assert (fork.forked_from, fork.forked_at, fork.status) == (run_id, n, "pending")
        mine = rt.store.latest_checkpoint(fork.run_id).task_state()
        assert _comparable(mine) == _state_at(rt, run_id, n)
        assert mine.task_key == fork.task_key
        # the origin is untouched
        assert [(c.seq, c.state, c.record) for c in rt.store.checkpoints(run_id)] == before
        assert rt.store.get_run(run_id).status == "stopped"


def test_a_fork_goes_on_under_its_own_contract_and_never_redoes_an_inherited_effect(
    origin: tuple[Path, str, Counter],
) -> None:
    db, run_id, counter = origin
    with lw.Runtime(db) as rt:
        longer = make_loop(counter, max_cycles=CYCLES + 4)
        fork = rt.fork(run_id, 3, contract=longer.contract)
        inherited = rt.store.journal(fork.run_id, kind="effect")
        assert [e.data.get("inherited_from") for e in inherited] == [run_id]
        r = rt.resume_sync(fork.run_id, longer)
        assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cycles", CYCLES + 4)
        assert counter.calls == ["notify:team-once"]  # the inherited action was not done again
        # the fork's own cycles start after the fork point
        cycles = [
            c.cycle
            for c in rt.store.checkpoints(fork.run_id)
            if c.record and "proposal" in c.record
        ]
        assert min(cycles) == 4


def test_a_fork_is_one_transaction(origin: tuple[Path, str, Counter]) -> None:
    db, run_id, _ = origin
    with lw.Runtime(db) as rt:
        store: Any = rt.store
        real = store._executemany

        def crash(*args: Any, **kw: Any) -> None:
            raise RuntimeError("killed in the middle of the fork")

        store._executemany = crash
        with pytest.raises(RuntimeError, match="killed in the middle of the fork"):
            rt.fork(run_id, 3, task_key="half")
        store._executemany = real
        with pytest.raises(lw.RunNotFoundError):
            rt.store.get_run("half")  # nothing of it was kept
        assert rt.fork(run_id, 3, task_key="half").task_key == "half"


def test_fork_refuses_a_cycle_it_does_not_have(origin: tuple[Path, str, Counter]) -> None:
    db, run_id, _ = origin
    with lw.Runtime(db) as rt, pytest.raises(lw.ConfigError, match="cycle 99"):
        rt.fork(run_id, 99)


def test_fork_refuses_a_contract_a_loop_would_refuse(origin: tuple[Path, str, Counter]) -> None:
    db, run_id, _ = origin
    only = lw.Contract(marginal_return=lw.MarginalReturn(value_per_success_usd=1.0))
    with lw.Runtime(db) as rt:
        before = len(rt.store.list_runs())
        with pytest.raises(lw.ConfigError, match="only exit besides success"):
            rt.fork(run_id, 1, contract=only)
        zero = lw.Contract(budget=lw.Budget(max_cycles=9, max_cost_usd=0.0))
        with pytest.raises(lw.ConfigError, match="more than 0") as e:
            rt.fork(run_id, 1, contract=zero)  # its run would end before a cycle
        assert e.value.field == "contract.budget.max_cost_usd"
        assert len(rt.store.list_runs()) == before  # nothing created


def test_a_fork_keeping_an_older_runs_budget_of_zero_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run an older release let start under a budget of 0 ended before its first cycle; a
    # fork given no contract keeps the origin's, so it would too: it is refused, naming the
    # budget, nothing made (it made a run that ended at once when resumed).
    zero = lw.Contract(budget=lw.Budget(max_cycles=CYCLES, max_cost_usd=0.0))
    with monkeypatch.context() as m:
        m.setattr(lw.Contract, "refuse_for_a_run", lambda self: None)  # an older release
        old = replace(make_loop(Counter()), contract=zero)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(old, TASK, task_key="zero")
        assert (r.stop_reason, r.cycles) == ("budget_cost", 0)
        before = len(rt.store.list_runs())
        with pytest.raises(lw.ConfigError, match="more than 0") as e:
            rt.fork(r.run_id, 0)
        assert e.value.field == "contract.budget.max_cost_usd"
        assert "give the fork a contract" in str(e.value)
        assert len(rt.store.list_runs()) == before  # nothing created
        # a contract of its own (or its loop's) with a budget above 0 forks it
        some = lw.Contract(budget=lw.Budget(max_cycles=CYCLES, max_cost_usd=1.0))
        assert rt.fork(r.run_id, 0, contract=some).contract["budget"]["max_cost_usd"] == 1.0
        assert rt.fork(r.run_id, 0, loop=make_loop(Counter())).contract == (
            make_loop(Counter()).contract.to_dict()
        )


def test_fork_refuses_another_loop(origin: tuple[Path, str, Counter]) -> None:
    """``Runtime.fork(loop=...)`` of another loop is refused, as ``fork --spec`` refuses it: it
    made a run labelled that loop in this run's project, from this run's state."""
    db, run_id, counter = origin
    other = replace(make_loop(counter), name="other", project="elsewhere")
    with lw.Runtime(db) as rt:
        before = len(rt.store.list_runs())
        with pytest.raises(lw.ConfigError, match=r"not run \w+'s loop 'forky'"):
            rt.fork(run_id, 1, loop=other)
        assert len(rt.store.list_runs()) == before  # nothing created


def test_an_edit_is_accepted_recorded_remembered_and_the_loop_goes_on(
    origin: tuple[Path, str, Counter],
) -> None:
    db, run_id, counter = origin
    with lw.Runtime(db) as rt:
        rec = rt.edit(run_id, "doc/b", "b by hand", by="ana", note="the right wording")
        assert rec.status == "pending"  # the stopped run is reopened
        st = rt.store.latest_checkpoint(run_id).task_state()
        part = st.artifacts["doc"].parts["b"]
        assert (part.value, part.status, part.count) == ("b by hand", "accepted", CYCLES + 2)
        [ev] = [e.data for e in rt.store.events(run_id) if e.kind == "edited"]
        assert ev["by"] == "ana" and ev["part"] == "doc/b" and "+b by hand" in ev["diff"]
        [item] = [m for m in rt.memory.list(scope="task") if m.signal == "edit"]
        assert item.scope_key == "origin" and "doc/b" in item.text
        # the edit is judged first (a check-only cycle: the check finds a and b wrong); the
        # actor's cycle starts from the edit and those verdicts, and may not overwrite it
        seen: list[lw.Context] = []

        def actor(ctx: lw.Context) -> lw.Proposal:
            seen.append(ctx)
            return lw.Proposal.edit("doc", {"c": "the actor's c"})

        base = make_loop(counter, max_cycles=2)
        loop = lw.Loop(
            name=base.name,
            actor=actor,
            verifiers=base.verifiers,
            contract=base.contract,
            effects=base.effects,
            approvals=base.approvals,
        )
        fresh, _ = rt.create(loop, TASK, task_key="fresh")
        rt.edit(fresh.run_id, "doc/c", "c by hand", by="ana")
        r = rt.resume_sync(fresh.run_id, loop)
        assert seen[0].cycle == 2  # cycle 1 judged the edit
        assert seen[0].artifacts["doc"]["c"] == "c by hand"
        assert seen[0].is_accepted("doc", "c")
        assert {f.part for f in seen[0].findings} == {"a", "b"}  # the edited state's verdicts
        assert any(n.get("kind") == "edit" and n.get("by") == "ana" for n in seen[0].notes)
        assert r.state.values()["doc"]["c"] == "c by hand"  # refused to overwrite it


def test_an_edit_of_a_structured_value_names_the_changed_fields(tmp_path: Path) -> None:
    counter = Counter()
    with lw.Runtime(tmp_path / "s.db") as rt:
        task = {"artifacts": {"doc": {"a": "a0", "b": "b0", "c": {"x": 1, "y": 2}}}}
        r = rt.run_sync(make_loop(counter, max_cycles=1), task, task_key="t")
        rt.edit(r.run_id, "doc/c", {"x": 1, "y": 3, "z": 0}, by="bo")
        [ev] = [e.data for e in rt.store.events(r.run_id) if e.kind == "edited"]
        assert ev["changed"] == ["y", "z"]


def test_edit_mistakes_are_one_line_errors(origin: tuple[Path, str, Counter]) -> None:
    db, run_id, _ = origin
    with lw.Runtime(db) as rt:
        with pytest.raises(lw.ConfigError, match="no part 'doc/zz'"):
            rt.edit(run_id, "doc/zz", 1, by="ana")
        with pytest.raises(lw.ConfigError, match="already"):
            rt.edit(run_id, "doc/b", rt.result(run_id).state.values()["doc"]["b"], by="ana")
        with pytest.raises(lw.ConfigError, match="by"):
            rt.edit(run_id, "doc/b", "x", by=" ")
        rt.store.acquire_lease(run_id, "someone-else:1:x", 60)
        with pytest.raises(lw.ConflictError, match="executing elsewhere"):
            rt.edit(run_id, "doc/b", "x", by="ana")


def test_cli_fork_and_edit(
    origin: tuple[Path, str, Counter], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id, _ = origin
    store = ["--store", str(db)]
    assert main(["fork", run_id, "--at-cycle", "2", "--key", "branch", *store]) == 0
    out = capsys.readouterr().out
    assert "forked" in out and "branch" in out
    value = tmp_path / "v.txt"
    value.write_text("from a file")
    assert main(["edit", run_id, "doc/c", "--file", str(value), "--by", "ana", *store]) == 0
    # without --by, an open store records the OS user (docs/permissions.md)
    assert main(["edit", run_id, "doc/c", "--value", "x", *store]) == 0
    assert f"edited by {getpass.getuser()}" in capsys.readouterr().out
    assert main(["edit", run_id, "doc/c", "--file", str(value), "--by", "ana", *store]) == 0
    assert main(["fork", run_id, "--at-cycle", "-1", *store]) == 2
    with lw.Runtime(db) as rt:
        assert rt.store.get_run("branch").forked_from == run_id
        assert rt.result(run_id).state.values()["doc"]["c"] == "from a file"


def test_diff_shows_a_run_and_its_fork_side_by_side(
    origin: tuple[Path, str, Counter], capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id, counter = origin
    with lw.Runtime(db) as rt:
        longer = make_loop(counter, max_cycles=CYCLES + 2)
        fork = rt.fork(run_id, 3, contract=longer.contract, task_key="longer")
        rt.resume_sync(fork.run_id, longer)
    store = ["--store", str(db)]
    assert main(["diff", run_id, "longer", "--json", *store]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["contract"] == {"budget.max_cycles": {"a": CYCLES, "b": CYCLES + 2}}
    assert (doc["a"]["cycles"], doc["b"]["cycles"]) == (CYCLES, CYCLES + 2)
    assert doc["b"]["forked_from"] == run_id and doc["b"]["forked_at"] == 3
    assert [c["cycle"] for c in doc["scores"]] == list(range(1, CYCLES + 3))
    # the fork's own cycles start after the fork point; before it, the history is the origin's,
    # shown as such (they read None: leftovers48)
    assert all(c["b"] is not None for c in doc["scores"])
    assert [c["b"] for c in doc["scores"][:3]] == [c["a"] for c in doc["scores"][:3]]
    assert [c["b_inherited"] for c in doc["scores"]] == [True] * 3 + [False] * (CYCLES - 1)
    parts = {p["part"]: p for p in doc["parts"]}
    assert parts["doc/a"]["same"] and not parts["doc/b"]["same"]
    assert main(["diff", run_id, "longer", *store]) == 0
    text = capsys.readouterr().out
    assert "budget.max_cycles: 8 -> 10" in text and "doc/b" in text
    assert main(["diff", run_id, "nope", *store]) == 2


@pytest.mark.parametrize("actor_touches_it", [False, True])
def test_a_failing_edit_goes_back_to_the_person_not_overwritten(
    tmp_path: Path, actor_touches_it: bool
) -> None:
    """A person's version that fails a visible check (the actor leaves it alone), or that the
    loop would change (the actor proposes another value), is reported to the person: the run
    escalates naming who and which part, the part keeps the person's value, and the budget is
    not spent retrying."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if actor_touches_it or not ctx.is_accepted("doc", "b"):
            return lw.Proposal.edit("doc", {"b": f"b{ctx.cycle}"})
        return lw.Proposal(note="leave the person's b alone")

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        ok = state.values()["doc"]["b"] == "good"
        findings = () if ok else (lw.Finding("b must be 'good'", "doc", "b"),)
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.0, findings=findings)

    loop = lw.Loop(
        name="e",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        rec, _ = rt.create(loop, {"artifacts": {"doc": {"b": "b0"}}}, task_key="t")
        rt.edit(rec.run_id, "doc/b", "bad by hand", by="ana")
        r = rt.resume_sync(rec.run_id, loop)
        assert (r.status, r.stop_reason) == ("escalated", "escalated")
        assert r.cycles <= 1  # not six cycles of waiting
        assert r.packet is not None
        assert "ana's version of doc/b (v2)" in r.packet["cause"]
        if not actor_touches_it:
            assert "fails the visible check check: b must be 'good'" in r.packet["cause"]
        assert r.state.values()["doc"]["b"] == "bad by hand"
        if not actor_touches_it:
            # edited again, correctly, the run goes on and is accepted
            rt.edit(rec.run_id, "doc/b", "good", by="ana")
            r = rt.resume_sync(rec.run_id, loop)
            assert r.accepted and r.state.values()["doc"]["b"] == "good"


# --- a fork's first cycle killed with SIGKILL --------------------------------------------------
def _file_loop(log: str, max_cycles: int) -> lw.Loop:
    """Two business effects counted in a file: one the same every cycle (done once, by the
    origin), one per cycle; reconcile reads the file, so a killed intent is settled by it."""
    import os

    def _append(key: str) -> dict[str, Any]:
        with open(log, "a") as fh:
            fh.write(key + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return {"sent": key}

    def _seen(key: str) -> dict[str, Any] | None:
        path = Path(log)
        lines = path.read_text().splitlines() if path.exists() else []
        return {"sent": key} if key in lines else None

    once = lw.effect("send", name="once", key=lambda a: "team", requires_success=False)(_append)
    once.reconciler(_seen)
    each = lw.effect("send", name="each", key=lambda a: f"c{a['n']}", requires_success=False)(
        lambda n, key: _append(key)
    )
    each.reconciler(_seen)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {"b": f"b{ctx.cycle}"}).edits,
            effects=(once.call(), each.call(n=ctx.cycle)),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "b"),))

    return lw.Loop(
        name="files",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=max_cycles)),
        effects=[once, each],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
    )


def _child_resume(db: str, log: str, run_id: str, kill_at: str) -> None:
    import os
    import signal

    seen: dict[str, int] = {}

    def on_phase(p: str) -> None:
        seen[p] = seen.get(p, 0) + 1
        if (p, seen[p]) == (kill_at, 1):
            os.kill(os.getpid(), signal.SIGKILL)

    with lw.Runtime(db) as rt:
        rt._on_phase = on_phase
        rt.resume_sync(run_id, _file_loop(log, 6))


@pytest.mark.parametrize("kill_at", ["after_effect_intent", "before_checkpoint"])
def test_a_fork_killed_in_its_first_cycle_redoes_nothing(tmp_path: Path, kill_at: str) -> None:
    import subprocess
    import sys

    db, log = str(tmp_path / "s.db"), str(tmp_path / "sent.log")
    with lw.Runtime(db) as rt:
        origin = rt.run_sync(_file_loop(log, 3), {"artifacts": {"doc": {"b": "b0"}}}, task_key="o")
        fork = rt.fork(origin.run_id, 2, contract=_file_loop(log, 6).contract)
    assert Path(log).read_text().splitlines() == ["once:team", "each:c1", "each:c2", "each:c3"]
    here = str(Path(__file__).parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); import test_fork_edit as t; "
        f"t._child_resume({db!r}, {log!r}, {fork.run_id!r}, {kill_at!r})"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == -9, proc.stderr
    with lw.Runtime(db) as rt:
        r = rt.resume_sync(fork.run_id, _file_loop(log, 6))
    assert (r.status, r.cycles) == ("stopped", 6)
    # The inherited action is not done again, nor is c3: a business action the origin did
    # (after the fork point, but with the same key and arguments) is held store-wide. The
    # fork's own actions (c4..c6) once each, whatever the kill.
    sent = Path(log).read_text().splitlines()
    assert sent == ["once:team", "each:c1", "each:c2", "each:c3", "each:c4", "each:c5", "each:c6"]


def test_an_edit_reopens_a_run_that_gave_up_on_its_actor_to_a_fresh_start(
    tmp_path: Path,
) -> None:
    # From an outside probe (helper-46): the run escalated because the actor's retries were
    # spent; a person edited it and resumed — and it escalated again at once, no call made,
    # the spent bound of the cycle to come still on record.
    calls: list[int] = []
    broken = [True]

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(ctx.cycle)
        if broken[0]:
            raise lw.TransientError("503 from the model server")
        return lw.Proposal.edit("doc", {"b": "fixed"})

    def fixed(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        ok = state.values()["doc"]["b"] == "fixed"  # the person's edit alone is not enough
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.5)

    loop = lw.Loop(
        name="gave-up",
        actor=actor,
        verifiers=[lw.Check(fn=fixed, name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False),
    )
    task = {"goal": "g", "artifacts": {"doc": {"a": "x", "b": "y"}}}
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, task, task_key="k")
        assert (r.status, len(calls)) == ("escalated", 2)
        rt.edit(r.run_id, "doc/a", "person's", by="ann")
        broken[0] = False
        r = rt.resume_sync(r.run_id, loop)
    assert len(calls) == 3  # the actor is asked again
    assert r.status == "accepted" and r.state.values()["doc"] == {"a": "person's", "b": "fixed"}


def test_cli_fork_contract_file_changes_only_what_it_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fork --contract`` with a budget-only file keeps the run's risk rules and success rule
    (the whole contract was replaced: the fork changed a guarded part without asking anyone)
    and says what it changed; ``risk = []`` still clears the rules, as the file says."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": "a1"} if ctx.cycle == 1 else {"b": f"b{ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    guarded = lw.Loop(
        name="guarded",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            success=lw.Success(min_score=0.9),
            budget=lw.Budget(max_cycles=4),
            risk=(lw.RiskRule(name="b-needs-ok", touches=("doc/b",), reason="b is the amount"),),
        ),
    )
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        first = rt.run_sync(guarded, TASK, task_key="guarded")
    assert (first.status, first.cycles) == ("awaiting_approval", 1)  # cycle 2 touches doc/b
    budget = tmp_path / "budget.toml"
    budget.write_text("[contract.budget]\nmax_cycles = 9\n")
    store = ["--store", str(db)]
    args = ["fork", "guarded", "--at-cycle", "1", "--contract", str(budget)]
    assert main([*args, "--key", "more", *store]) == 0
    said = " ".join(capsys.readouterr().out.split())
    with lw.Runtime(db) as rt:
        contract = rt.store.get_run("more").contract
        more = rt.resume_sync("more", guarded)
    assert more.status == "awaiting_approval"  # doc/b still needs a person
    assert [r["name"] for r in contract["risk"]] == ["b-needs-ok"]
    assert contract["success"]["min_score"] == 0.9
    assert contract["budget"]["max_cycles"] == 9
    assert "budget.max_cycles 4 -> 9" in said
    cleared = tmp_path / "norisk.toml"
    cleared.write_text("[contract]\nrisk = []\n")
    assert main(["fork", "guarded", "--at-cycle", "1", "--contract", str(cleared), *store]) == 0
    with lw.Runtime(db) as rt:
        [bare] = [r for r in rt.store.list_runs() if r.task_key.startswith("guarded~fork")]
        assert bare.contract["risk"] == [] and bare.contract["budget"]["max_cycles"] == 4


def test_a_forks_next_action_is_its_own(url: str) -> None:
    """A run's advice names its run id (advice47). A fork starts with ``resume`` (not its
    origin's advice, which names the origin), and once it stops its advice names the fork
    (doubts48 item 4: checked, holds)."""

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.1)

    loop = lw.Loop(
        name="advice",
        actor=lambda ctx: lw.Proposal.edit("doc", {"n": ctx.cycle}),
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"n": 0}}}, task_key="t")
        assert r.stop_reason == "budget_cycles"
        said = rt.store.latest_checkpoint(r.run_id).task_state().next_action
        assert r.run_id[:12] in said
        for at in (0, 2):
            f = rt.fork(r.run_id, at_cycle=at)
            assert rt.store.latest_checkpoint(f.run_id).task_state().next_action == "resume"
        done = rt.resume_sync(f.run_id, loop)  # the fork at cycle 2: its cap is reached
        assert done.stop_reason == "budget_cycles"
        said = rt.store.latest_checkpoint(f.run_id).task_state().next_action
        assert f.run_id[:12] in said and r.run_id[:12] not in said
