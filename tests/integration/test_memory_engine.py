"""Feedback memory through the engine: scoped retrieval into the actor's context, reflections
after failed cycles, nothing held-out in memory or context, and the self-review rule."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.store._rows import memory_values
from loopwright.store._sql import MEMORY_COLS

MARK = "HELD-OUT-SECRET"
TARGET = {"a": 1, "b": 2}


class Recorder:
    """An actor that fixes one part per cycle (the first cycle changes nothing) and records
    every context it was given."""

    def __init__(self) -> None:
        self.contexts: list[lw.Context] = []

    def __call__(self, ctx: lw.Context) -> lw.Proposal:
        self.contexts.append(ctx)
        if ctx.cycle == 1:
            return lw.Proposal(note="look first")
        doc = ctx.artifacts["doc"]
        wrong = [k for k, v in TARGET.items() if doc.get(k) != v]
        return lw.Proposal.edit("doc", {wrong[0]: TARGET[wrong[0]]}) if wrong else lw.Proposal()


def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
    doc = state.artifacts["doc"].values()
    bad = [k for k, v in TARGET.items() if doc.get(k) != v]
    return lw.Verdict(
        passed=not bad,
        score=1 - len(bad) / len(TARGET),
        findings=tuple(lw.Finding(f"{k} is wrong", "doc", k, "value") for k in bad),
    )


def hidden(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(
        passed=False, findings=(lw.Finding(f"{MARK} audit says no", "doc", "a", "audit"),)
    )


def make_loop(actor: Any, **kw: Any) -> lw.Loop:
    return lw.Loop(
        name="mem",
        actor=actor,
        verifiers=[
            lw.Check(fn=check, name="check"),
            lw.Check(fn=hidden, name="audit", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
        **kw,
    )


def task(key: str, project: str) -> dict[str, Any]:
    return {
        "task_key": key,
        "project": project,
        "goal": "fix the doc",
        "artifacts": {"doc": {"a": 0, "b": 0}},
    }


def test_a_project_correction_reaches_that_project_only(rt: lw.Runtime) -> None:
    rt.memory.add(
        scope="project",
        scope_key="A",
        signal="correction",
        text="amounts are in EUR, never USD",
        by="ana",
    )
    rt.memory.add(
        scope="task",
        scope_key="a-2",
        signal="correction",
        text="invoice a-2 is a credit note",
        by="ana",
    )
    in_a, in_b = Recorder(), Recorder()
    rt.run_sync(make_loop(in_a), task("a-1", "A"))
    rt.run_sync(make_loop(in_b), task("b-1", "B"))
    a_texts = {m["text"] for c in in_a.contexts for m in c.memory}
    b_texts = {m["text"] for c in in_b.contexts for m in c.memory}
    assert "amounts are in EUR, never USD" in a_texts
    assert "amounts are in EUR, never USD" not in b_texts
    assert "invoice a-2 is a credit note" not in a_texts | b_texts  # another task's


def test_a_reflection_from_a_failed_cycle_reaches_the_next_cycle(rt: lw.Runtime) -> None:
    seen: list[dict[str, Any]] = []

    def reflector(ctx: lw.Context, verdicts: Any) -> str:
        seen.append({"cycle": ctx.cycle, "verdicts": sorted(verdicts)})
        return f"cycle {ctx.cycle}: fix the part the finding names, one at a time"

    actor = Recorder()
    r = rt.run_sync(make_loop(actor, reflector=reflector), task("r-1", "P"))
    assert r.status == "accepted"
    # cycle 1 failed: its reflection is in cycle 2's context, task-scoped
    first = [m for m in actor.contexts[1].memory if m["signal"] == "reflection"]
    assert [m["text"] for m in first] == ["cycle 1: fix the part the finding names, one at a time"]
    assert seen[0] == {"cycle": 1, "verdicts": ["check"]}  # visible verdicts only
    assert all(v["verdicts"] == ["check"] for v in seen)
    events = [e.kind for e in rt.store.events(r.run_id)]
    assert "reflected" in events
    # it is scoped to its task: another task of the same project does not see it
    other = Recorder()
    rt.run_sync(make_loop(other), task("r-2", "P"))
    assert not any(m["signal"] == "reflection" for c in other.contexts for m in c.memory)


def test_a_long_run_keeps_its_newest_reflections_and_each_note_once(rt: lw.Runtime) -> None:
    """A reflector writes after every failed cycle: only the ``reflections_kept`` newest stay
    active (older ones are forgotten by the reflector, kept for audit), and the same note is
    kept once, so what every later cycle's recall ranks stays the same size."""
    notes = [f"note {i}: fix the named part" for i in range(7)]

    def reflector(ctx: lw.Context, verdicts: Any) -> str:
        return notes[min(ctx.cycle, 12) % 7] if ctx.cycle < 8 else notes[6]  # 6 repeats

    def never(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, findings=(lw.Finding("still wrong", "doc", "a", "v"),))

    seen: list[lw.Context] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(ctx)
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = lw.Loop(
        name="mem",
        actor=actor,
        verifiers=[lw.Check(fn=never, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=12)),
        reflector=reflector,
        reflections_kept=3,
    )
    r = rt.run_sync(loop, task("long-1", "P"))
    assert (r.stop_reason, r.cycles) == ("budget_cycles", 12)
    mine = rt.memory.list(scope="task", scope_key="long-1")
    # cycles 1..7 wrote notes 1..6 then 0; cycles 8..12 repeated note 6
    active = {m.text: m for m in mine if m.status == "active"}
    assert set(active) == {notes[0], notes[6], notes[5]}
    forgotten = [m for m in mine if m.status == "forgotten"]
    assert sorted(m.text for m in forgotten) == sorted(notes[1:5])
    assert all(m.history[-1]["by"] == "reflector" for m in forgotten)
    reflected = [e.data for e in rt.store.events(r.run_id) if e.kind == "reflected"]
    # no reflection after the last cycle: the run ends there
    assert [bool(d.get("again")) for d in reflected] == [False] * 7 + [True] * 4
    assert {d["memory_id"] for d in reflected[7:]} == {active[notes[6]].memory_id}
    # the last cycles were given the kept notes only
    last = {m["text"] for m in seen[-1].memory if m["signal"] == "reflection"}
    assert last == set(active)
    with pytest.raises(lw.ConfigError, match="reflections_kept"):
        dataclasses.replace(loop, reflections_kept=0)


def test_nothing_held_out_reaches_memory_or_context(rt: lw.Runtime) -> None:
    def reflector(ctx: lw.Context, verdicts: Any) -> str:
        return json.dumps({k: v.to_dict() for k, v in verdicts.items()})  # all it was given

    actor = Recorder()
    r = rt.run_sync(make_loop(actor, reflector=reflector), task("h-1", "P"))
    assert r.held_out_passed is False  # the held-out check ran, and said no with MARK
    notes = rt.memory.list()
    # a note after each refused cycle, made of the visible verdicts alone
    assert len(notes) == 2 and all(set(json.loads(m.text)) == {"check"} for m in notes)
    stored = json.dumps([m.to_dict() for m in notes])
    assert MARK not in stored
    # the contexts after cycle 1 carried the visible findings and the notes
    assert [f.message for f in actor.contexts[1].findings] == ["a is wrong", "b is wrong"]
    assert [len(c.memory) for c in actor.contexts] == [0, 1, 2]
    for ctx in actor.contexts:
        assert MARK not in json.dumps(
            {
                "findings": [f.to_dict() for f in ctx.findings],
                "memory": list(ctx.memory),
                "notes": list(ctx.notes),
            },
            default=str,
        )


class Model:
    def __init__(self, fn: Any, model: str, *, allow_self_review: bool = False) -> None:
        self.fn, self.model, self.allow_self_review = fn, model, allow_self_review

    def __call__(self, *a: Any) -> Any:
        return self.fn(*a)

    def model_identity(self) -> tuple[str, str]:
        return ("http://127.0.0.1:8000/v1", self.model)


def test_the_generator_may_not_review_itself_unless_allowed(rt: lw.Runtime) -> None:
    actor = Model(Recorder(), "llama-3")
    with pytest.raises(lw.ConfigError, match="generator's own model") as err:
        lw.Loop(
            name="self",
            actor=actor,
            verifiers=[lw.Check(fn=Model(check, "llama-3"), name="review")],
            contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        )
    assert err.value.field == "verifiers.review"
    # another model is fine; the same one with allow_self_review runs and is recorded
    lw.Loop(
        name="ok",
        actor=actor,
        verifiers=[lw.Check(fn=Model(check, "qwen"), name="review")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    loop = lw.Loop(
        name="self-ok",
        actor=actor,
        verifiers=[lw.Check(fn=Model(check, "llama-3", allow_self_review=True), name="review")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=4)),
    )
    r = rt.run_sync(loop, task("s-1", "P"))
    started = next(e for e in rt.store.events(r.run_id) if e.kind == "started")
    assert started.data["self_review_allowed"] == ["review"]


def test_memory_shown_to_the_actor_counts_as_context_reuse(rt: lw.Runtime) -> None:
    rt.memory.add(scope="project", scope_key="M", signal="correction", text="use EUR", by="ana")
    actor = Recorder()
    r = rt.run_sync(make_loop(actor), task("m-1", "M"))
    records = [
        c.record for c in rt.store.checkpoints(r.run_id) if c.record and "proposal" in c.record
    ]
    assert records and all(len(rec["memory"]) == 1 for rec in records)
    m = lw.compute_metrics(rt.store, project="M").to_dict()
    assert m["context_reuse_rate"] == 1.0


def test_a_slow_reflector_is_cut_by_the_time_budget_and_charged(rt: lw.Runtime) -> None:
    import threading

    release = threading.Event()
    returned: list[str] = []

    def slow(ctx: lw.Context, verdicts: Any) -> str:
        release.wait(60)  # far past the budget: only an engine that waited would see it return
        returned.append("too late")
        return "too late"

    loop = lw.Loop(
        name="slow-reflect",
        actor=Recorder(),
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_seconds=1.0, max_cycles=6)),
        reflector=slow,
    )
    try:
        r = rt.run_sync(loop, task("slow-1", "P"))
        assert not returned  # the run ended without waiting for the reflector
    finally:
        release.set()
    assert r.stop_reason == "budget_time"
    assert r.spent.seconds >= 0.9  # the reflector's time was charged to the run


def test_a_failing_memory_store_never_fails_a_run(
    rt: lw.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    def broken(**kw: Any) -> Any:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(rt.store, "memory_search", broken)
    monkeypatch.setattr(rt.store, "memory_recall", broken)
    monkeypatch.setattr(rt.memory, "add", broken)
    r = rt.run_sync(make_loop(Recorder(), reflector=lambda c, v: "note"), task("f-1", "P"))
    assert r.status == "accepted"
    kinds = [e.kind for e in rt.store.events(r.run_id)]
    assert "reflection_failed" in kinds
    # ...nor runs sharing the event loop, which read their memory together
    rs = asyncio.run(rt.run_many(make_loop(Recorder()), [task(f"f-{i}", "P") for i in (2, 3, 4)]))
    assert [x.status for x in rs] == ["accepted"] * 3
    # ...nor a store that answers with rows it should not (no run waits forever for them)
    monkeypatch.setattr(rt.store, "memory_search", lambda searches: [[{"scope": "task"}]])
    monkeypatch.setattr(rt.store, "memory_recall", lambda recalls: [([{"scope": "task"}], [])])

    async def bounded() -> list[lw.RunResult]:
        return await asyncio.wait_for(
            rt.run_many(make_loop(Recorder()), [task(f"g-{i}", "P") for i in (1, 2, 3)]), 30
        )

    assert [x.status for x in asyncio.run(bounded())] == ["accepted"] * 3


def test_runs_sharing_a_loop_read_memory_together_each_its_own(rt: lw.Runtime) -> None:
    """One store call per event-loop turn serves every run's recall; each run still sees
    exactly what it would see alone: its task, its project, confirmed global — nothing else."""
    for i in range(6):
        rt.memory.add(
            scope="task", scope_key=f"t-{i}", signal="correction", text=f"task {i} note", by="ana"
        )
    rt.memory.add(
        scope="project", scope_key="A", signal="correction", text="project A rule", by="ana"
    )
    rt.memory.add(
        scope="project", scope_key="B", signal="correction", text="project B rule", by="ana"
    )
    actors = [Recorder() for _ in range(6)]
    queries: list[int] = []
    orig = rt.store.memory_recall

    def counting(recalls: Any) -> Any:
        queries.append(len(recalls))
        return orig(recalls)

    rt.store.memory_recall = counting  # type: ignore[method-assign]
    try:
        loops = [make_loop(a) for a in actors]

        async def go() -> list[lw.RunResult]:
            return list(
                await asyncio.gather(
                    *(
                        rt.run(loops[i], task(f"t-{i}", "A" if i % 2 == 0 else "B"))
                        for i in range(6)
                    )
                )
            )

        results = asyncio.run(go())
    finally:
        del rt.store.memory_recall
    assert [r.status for r in results] == ["accepted"] * 6
    cycles = sum(len(a.contexts) for a in actors)
    # Read together: a call carried several runs' searches, so there were fewer calls than
    # cycles. How many calls depends on how the runs' commits interleave on the writer thread
    # (machine load): a bound on their number (it was < cycles / 2) failed once in CI at 9 of 18.
    assert max(queries) > 1
    assert len(queries) < cycles
    for i, a in enumerate(actors):
        project = "A" if i % 2 == 0 else "B"
        for ctx in a.contexts:
            texts = {m["text"] for m in ctx.memory}
            assert texts == {f"task {i} note", f"project {project} rule"}, (i, texts)


def test_a_long_reflection_is_masked_before_it_is_cut(rt: lw.Runtime) -> None:
    # From an outside probe (helper-54): cut to 4,000 characters first, a key across the cut
    # kept a part too short to be recognised, stored and shown to every later actor.
    key = "sk-proj-" + "ABCDEFGHIJKLMNOPQRSTUVWX1234"
    note = "a" * 3986 + " " + key

    actor = Recorder()
    r = rt.run_sync(make_loop(actor, reflector=lambda ctx, v: note), task("long-1", "P"))
    texts = [m["text"] for c in actor.contexts for m in c.memory if m["signal"] == "reflection"]
    assert texts and all("sk-proj-" not in t and "ABCDE" not in t for t in texts)
    stored = [i.text for i in lw.FeedbackMemory(rt.store).list(scope="task", scope_key="long-1")]
    assert stored and not any("sk-proj" in t for t in stored)
    assert r.status == "accepted"


@pytest.mark.parametrize("returned", [{"note": "x"}, 7, b"bytes note", ["a"], float("nan")])
def test_a_reflector_returning_something_else_than_text_is_a_failed_reflection(
    rt: lw.Runtime, returned: Any
) -> None:
    actor = Recorder()
    r = rt.run_sync(make_loop(actor, reflector=lambda ctx, v: returned), task("odd-1", "P"))
    assert r.status == "accepted"
    assert not any(m["signal"] == "reflection" for c in actor.contexts for m in c.memory)
    failed = [e.data for e in rt.store.events(r.run_id) if e.kind == "reflection_failed"]
    assert failed and "expected str or None" in str(failed[0])


@pytest.mark.parametrize("together", [False, True])
def test_the_loops_recall_cap_reaches_the_store(rt: lw.Runtime, together: bool) -> None:
    """``Loop(recall_ranked=...)``: how many matches each cycle's recall scores, alone or read
    together with other runs' (``GroupRecall``); the default ``RECALL_RANKED``, None for all."""
    from loopwright._memory import RECALL_RANKED

    rt.memory.add(scope="project", scope_key="A", signal="correction", text="doc rule", by="ana")
    seen: list[int | None] = []
    orig = rt.store.memory_recall

    def spying(recalls: Any) -> Any:
        seen.extend(s.ranked for r in recalls for s in r[:2])
        return orig(recalls)

    rt.store.memory_recall = spying  # type: ignore[method-assign]
    try:
        for ranked in (7, None, RECALL_RANKED):
            kw = {} if ranked == RECALL_RANKED else {"recall_ranked": ranked}
            n = 2 if together else 1

            async def go(kw: dict[str, Any] = kw, n: int = n, ranked: Any = ranked) -> None:
                await asyncio.gather(
                    *(
                        rt.run(make_loop(Recorder(), **kw), task(f"{ranked}-{together}-{i}", "A"))
                        for i in range(n)
                    )
                )

            seen.clear()
            asyncio.run(go())
            assert seen and set(seen) == {ranked}, (ranked, seen)
    finally:
        del rt.store.memory_recall


# (2**63: past the stores' 64-bit LIMIT, which refused it mid-run, IntegrityError)
@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10", 2**63])
def test_a_recall_cap_must_be_a_positive_integer_or_none(bad: Any) -> None:
    with pytest.raises(lw.ConfigError, match="recall_ranked"):
        make_loop(Recorder(), recall_ranked=bad)
    with pytest.raises(lw.ConfigError, match="ranked"):
        lw.Runtime(":memory:").memory.retrieve(task_key="t", project="", ranked=bad)


def test_the_largest_recall_cap_is_taken_by_the_store() -> None:
    memory = lw.Runtime(":memory:").memory
    memory.add(scope="task", scope_key="t", signal="correction", text="cite sources", by="ann")
    found = memory.retrieve(task_key="t", project="", query="cite", ranked=2**63 - 1)
    assert [m.text for m in found] == ["cite sources"]


def test_an_item_marked_held_out_in_the_store_is_not_recalled_to_the_actor(
    rt: lw.Runtime, store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``add`` (and ``Store.memory_add``) refuse a rule or source holding a held-out marker at
    any depth; a row written before that screen was recalled to the actor as it was. The
    screen is walked again at recall: such an item is left out, with a warning."""
    kept = rt.memory.add(
        scope="project", scope_key="A", signal="correction", text="amounts in EUR", by="ana"
    )
    for i, (part, marked) in enumerate(
        (
            ("rule", {"verdicts": [{"name": "audit", "held_out": True, "says": MARK}]}),
            ("source", {"cycle": 2, "checks": {"Held-Out": [MARK]}}),
        )
    ):
        old = dataclasses.replace(
            kept, memory_id=f"oldrow{i:010d}", text=f"an older rule {i}", **{part: marked}
        )
        with sqlite3.connect(store_path) as db:  # a row written before the screens
            db.execute(
                f"INSERT INTO memory({MEMORY_COLS}) VALUES({','.join('?' * 13)})",
                memory_values(old.to_dict(), json.dumps),
            )
    actor = Recorder()
    with caplog.at_level("WARNING", logger="loopwright.memory"):
        rt.run_sync(make_loop(actor), task("a-1", "A"))
    shown = [m for c in actor.contexts for m in c.memory]
    assert {m["text"] for m in shown} == {"amounts in EUR"}
    assert MARK not in json.dumps(shown)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "oldrow0000000000" in warned and "rule.verdicts[0].held_out" in warned
    assert "oldrow0000000001" in warned and "source.checks.Held-Out" in warned
