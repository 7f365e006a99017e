"""What is judged is what is stored, whatever path a run takes, as a property (real SQLite file).

Hypothesis draws short runs of a loop whose user code misbehaves — an actor that proposes
nested lists and dicts, changes its context in place and keeps (then changes) what it returned;
a first verifier that changes in place everything it was given, the proposal's plan included;
both failing transiently once, after their changes, in the cycles where they misbehave —
and a sequence of what people and processes do between executions: resume in a fresh
``Runtime``, approve a parked cycle (with or without a person's edit of another part first),
edit, roll back to a cycle, fork at a cycle with another contract.

Asserted:

- no actor is shown a change made in place (by an earlier cycle, or by its failed attempt);
- every verifier of one judgement (visible or held-out, before or after the meddler) was shown
  the same values, through ``values()`` and through the parts alike;
- what the last judgement of a (part, version, cycle made) was shown is what a fresh
  ``Runtime`` reads from the store for it (less the versions a rollback abandoned: the store
  reuses their numbers), and the proposal a concluded cycle recorded is the one its verifiers
  judged;
- after every operation, the state the engine held at its last commit is the state a fresh
  ``Runtime`` reads back.

Deterministic: the examples are derandomized, and the user code depends only on them. On
PostgreSQL too (``LOOPWRIGHT_TEST_PG``; fewer examples: each ``Runtime`` opens a pool).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright import _checkpoint

TASK: dict[str, Any] = {
    "goal": "nested values through every path",
    "artifacts": {"doc": {"a": [], "b": {"k": [0]}, "c": 0}},
    "plan": [{"id": "s1", "title": "first"}, {"id": "s2", "parts": ["doc/c"]}],
}
KINDS = ("nested", "scalar_c", "plan", "keep")
# (what, a cycle, a flag, a part): approve (flag: a person edits doc/b first), edit the
# part, roll back to the cycle, fork at the cycle (flag: without the risk rule), resume.
OPS = st.tuples(
    st.sampled_from(("resume", "approve", "approve", "edit", "rollback", "fork")),
    st.integers(min_value=0, max_value=6),
    st.booleans(),
    st.sampled_from(("doc/a", "doc/b")),
)


def plain(value: Any) -> Any:
    """``value`` as JSON has it (a copy)."""
    return json.loads(json.dumps(value))


class World:
    """The user code of one example and what it saw."""

    def __init__(self, kinds: list[str], mutate_ctx: list[bool]) -> None:
        self.kinds, self.mutate_ctx = kinds, mutate_ctx
        self.run = ""  # the run being executed (set before each resume)
        self.passes = 0
        # (pass, run, cycle, who, [(ref, n, version cycle, value via part, value via values)],
        #  the proposal as judged)
        self.judged: list[tuple[int, str, int, str, list[Any], Any]] = []
        # (run, cycle): rolled back to that cycle after the judgements before it in ``judged``
        self.rollbacks: list[tuple[int, str, int]] = []
        self.kept: list[Any] = []
        self.tries: dict[tuple[str, int, str], int] = {}  # (run, cycle, who): calls
        self.dirty: list[int] = []  # cycles whose actor was shown a change made in place

    def flaky(self, n: int, who: str) -> bool:
        """Whether this call should fail (transiently) after changing what it was given: the
        first call of each of ``who``'s misbehaving cycles (a retry follows)."""
        key = (self.run, n, who)
        self.tries[key] = self.tries.get(key, 0) + 1
        return self.mutate_ctx[(n - 1) % len(self.mutate_ctx)] and self.tries[key] == 1

    # --- the actor: nested values, changes what it was shown, keeps what it returned ------
    def actor(self, ctx: lw.Context) -> lw.Proposal:
        n = ctx.cycle
        for kept in self.kept:  # what it returned earlier, changed afterwards
            kept.append(f"later {n}")
        kind = self.kinds[(n - 1) % len(self.kinds)]
        shown = json.dumps([ctx.artifacts, ctx.accepted, ctx.task])
        if any(mark in shown for mark in ('"ctx"', '"task"', '"accepted"')):
            self.dirty.append(n)
        flaky = self.flaky(n, "actor")
        if self.mutate_ctx[(n - 1) % len(self.mutate_ctx)]:
            ctx.artifacts["doc"]["a"].append("ctx")
            ctx.artifacts["doc"]["b"]["k"].append("ctx")
            ctx.task["artifacts"]["doc"]["a"].append("task")
            for values in ctx.accepted.values():
                for v in values.values():
                    if isinstance(v, list):
                        v.append("accepted")
        if flaky:
            raise ConnectionError("a model call failed after the context was changed")
        if kind == "scalar_c":  # the risk rule parks it
            return lw.Proposal.edit("doc", {"c": n})
        if kind == "plan":
            return lw.Proposal(
                edits=(lw.Edit("doc", "b", {"k": [n], "d": {"s": str(n)}}),),
                plan={"s1": "in_progress"},
            )
        if kind == "keep":
            mine: list[Any] = [n, {"x": [n]}]
            self.kept.append(mine)
            return lw.Proposal.edit("doc", {"a": mine})
        return lw.Proposal.edit("doc", {"a": [n, {"n": n, "xs": [n, n]}], "b": {"k": [n]}})

    # --- verifiers ---------------------------------------------------------------------
    def _record(self, who: str, state: lw.TaskState, proposal: lw.Proposal) -> None:
        values = state.values()
        seen = []
        for ref, p in sorted(state.iter_parts()):
            art, name = ref.split("/")
            v = p.version(p.count)
            seen.append((ref, v.n, v.cycle, plain(p.value), plain(values[art][name])))
        self.judged.append(
            (self.passes, self.run, state.cycle + 1, who, seen, plain(proposal.to_dict()))
        )

    def meddler(self, state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        flaky = self.flaky(state.cycle + 1, "meddler")
        if not flaky:
            self.passes += 1
            self._record("meddler", state, proposal)
        # changes in place everything it was given
        for _ref, p in state.iter_parts():
            if isinstance(p.value, list):
                p.value.append("meddled")
            elif isinstance(p.value, dict):
                p.value["meddled"] = True
        for values in state.values().values():
            for v in values.values():
                if isinstance(v, list):
                    v.append("meddled values")
        for e in proposal.edits:
            if isinstance(e.value, list):
                e.value.append("meddled proposal")
        with contextlib.suppress(TypeError):  # immutable: nothing to change
            proposal.plan["s2"] = "done"  # type: ignore[index]
        state.task.setdefault("meddled", True)
        if flaky:  # the retry must judge what will be stored, not what this attempt changed
            raise ConnectionError("a check failed after changing what it judges")
        return lw.Verdict(
            passed=False,
            score=0.5,
            findings=(lw.Finding("a is never right", "doc", "a", "content"),),
        )

    def recorder(self, state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        self._record("recorder", state, proposal)
        return lw.Verdict(passed=False, score=0.5)

    def hidden(self, state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        self._record("hidden", state, proposal)
        for _ref, p in state.iter_parts():
            if isinstance(p.value, list):
                p.value.append("hidden")
        return lw.Verdict(passed=True)

    def loop(self, *, cycles: int = 6, risk: bool = True) -> lw.Loop:
        return lw.Loop(
            name="judged-is-stored",
            actor=self.actor,
            verifiers=[
                lw.Check(fn=self.meddler, name="meddler"),
                lw.Check(fn=self.recorder, name="recorder"),
                lw.Check(fn=self.hidden, name="hidden", held_out=True),
            ],
            contract=self.contract(cycles=cycles, risk=risk),
            retry=lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False),
        )

    @staticmethod
    def contract(*, cycles: int, risk: bool) -> lw.Contract:
        return lw.Contract(
            budget=lw.Budget(max_cycles=cycles),
            success=lw.Success(accept_parts="when_clean"),
            risk=(lw.RiskRule(name="c", touches=("doc/c",)),) if risk else (),
        )


def _comparable(state: lw.TaskState) -> Any:
    d = state.to_dict()
    d.pop("rejected")  # a loaded state holds only the digests added since (Digests)
    return plain(d)


@contextmanager
def watching_commits() -> Iterator[dict[str, Any]]:
    """The state each run held at its last durable commit, as the engine held it."""
    held: dict[str, Any] = {}
    real = _checkpoint.Checkpoints._committed

    def committed(self: Any, ex: Any) -> None:
        real(self, ex)
        held[ex.run_id] = _comparable(ex.state)

    _checkpoint.Checkpoints._committed = committed  # type: ignore[method-assign]
    try:
        yield held
    finally:
        _checkpoint.Checkpoints._committed = real  # type: ignore[method-assign]


def play(url: str, world: World, ops: list[tuple[Any, ...]]) -> list[str]:
    """Run the loop, then ``ops``, each in a fresh ``Runtime``; returns the runs made."""
    with watching_commits() as held:

        def check(run_id: str) -> None:
            with lw.Runtime(url) as fresh:
                stored = _comparable(fresh.store.latest_checkpoint(run_id).task_state())
            if run_id in held:
                assert stored == held[run_id]

        with lw.Runtime(url) as rt:
            key = f"k-{uuid.uuid4().hex}"
            world.run = rt.create(world.loop(), TASK, task_key=key)[0].run_id
        runs = [world.run]
        loop = world.loop()
        for op in [
            ("resume", 0, False, ""),
            *ops,
            ("approve", 0, False, ""),
            ("resume", 0, False, ""),
        ]:
            with lw.Runtime(url) as rt:
                rec = rt.store.get_run(world.run)
                parked = rec.status == "awaiting_approval"
                try:
                    if op[0] == "resume" or (op[0] == "approve" and parked):
                        if op[0] == "approve":
                            if op[2]:
                                rt.edit(world.run, "doc/b", {"person": [rec.cycle]}, by="pat")
                            rt.approve(world.run, by="ann")
                        rt.resume_sync(world.run, loop)
                    elif op[0] == "edit":
                        value = {"by": "person", "n": [rec.cycle]} if op[3] == "doc/b" else []
                        rt.edit(world.run, op[3], value, by="pat")
                    elif op[0] == "rollback":
                        to = min(op[1], rec.cycle)
                        rt.rollback(world.run, to, by="ann", loop=loop)
                        world.rollbacks.append((len(world.judged), world.run, to))
                    elif op[0] == "fork":
                        other = world.contract(cycles=rec.cycle + 3, risk=not op[2])
                        new = rt.fork(world.run, min(op[1], rec.cycle), contract=other)
                        world.run = new.run_id
                        runs.append(new.run_id)
                        loop = world.loop(cycles=rec.cycle + 3, risk=not op[2])
                except (lw.ConfigError, lw.ApprovalError):
                    pass  # not possible now (an edit of the parked part, an open cycle...)
            check(world.run)
    return runs


def assert_judged_is_stored(url: str, world: World, runs: list[str]) -> int:
    """Every judgement's verifiers saw the same thing; the last judgement of each version saw
    what the store holds; a concluded cycle's record holds the proposal judged. Returns how
    many versions were compared."""
    # A rollback abandons the versions made after its cycle: the store reuses their numbers
    # (and a person's edit made after it, their cycle), so what was judged of them is dropped.
    rollbacks: dict[int, list[tuple[str, int]]] = {}
    for at, run, to in world.rollbacks:
        rollbacks.setdefault(at, []).append((run, to))
    last: dict[tuple[str, str, int, int], Any] = {}
    proposals: dict[tuple[str, int], Any] = {}
    i, log = 0, world.judged
    while i <= len(log):
        for run, to in rollbacks.get(i, ()):
            for key in [key for key in last if key[0] == run and key[3] > to]:
                del last[key]
        if i == len(log):
            break
        k, run, cycle, _who, first, proposal = log[i]
        for ref, _n, _c, via_part, via_values in first:
            assert via_part == via_values, (ref, via_part, via_values)
        i += 1
        while i < len(log) and log[i][0] == k:  # the other checks of this judgement
            _k, o_run, o_cycle, who, seen, o_proposal = log[i]
            assert (o_run, o_cycle, seen, o_proposal) == (run, cycle, first, proposal), who
            i += 1
        for ref, n, vcycle, value, _ in first:
            last[(run, ref, n, vcycle)] = value
        proposals[(run, cycle)] = proposal
    compared = 0
    with lw.Runtime(url) as rt:
        for run in runs:
            for ref in ("doc/a", "doc/b", "doc/c"):
                for v in rt.store.versions(run, ref):
                    if (run, ref, v.n, v.cycle) in last:
                        assert v.value == last[(run, ref, v.n, v.cycle)], (run, ref, v.n)
                        compared += 1
            for ck in rt.store.checkpoints(run):
                rec = ck.record or {}
                if rec.get("proposal") and rec.get("decision") not in (None, "parked"):
                    judged = proposals.get((run, int(rec["cycle"])))
                    if judged is not None:
                        for field in ("edits", "plan", "new_steps"):
                            assert rec["proposal"][field] == judged[field], field
    return compared


def example(url: str, kinds: list[str], mutate_ctx: list[bool], ops: list[Any]) -> None:
    world = World(kinds, mutate_ctx)
    runs = play(url, world, ops)
    compared = assert_judged_is_stored(url, world, runs)
    assert world.dirty == []  # no actor was shown a change made in place (by it, earlier)
    assert world.judged and compared  # the run judged, and what it judged was compared


SETTINGS = settings(
    max_examples=80,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
KINDS_ST = st.lists(st.sampled_from(KINDS), min_size=1, max_size=4)
MUTATE_ST = st.lists(st.booleans(), min_size=1, max_size=3)
OPS_ST = st.lists(OPS, max_size=8)


@SETTINGS
@given(kinds=KINDS_ST, mutate_ctx=MUTATE_ST, ops=OPS_ST)
def test_what_is_judged_is_what_is_stored_on_every_path(
    kinds: list[str], mutate_ctx: list[bool], ops: list[tuple[Any, ...]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="lw-judged-") as folder:
        example(f"sqlite:///{Path(folder) / 'run.db'}", kinds, mutate_ctx, ops)


@pytest.mark.postgres
@settings(SETTINGS, max_examples=15)
@given(kinds=KINDS_ST, mutate_ctx=MUTATE_ST, ops=OPS_ST)
def test_what_is_judged_is_what_is_stored_on_every_path_postgres(
    pg_url: str, kinds: list[str], mutate_ctx: list[bool], ops: list[tuple[Any, ...]]
) -> None:
    example(pg_url, kinds, mutate_ctx, ops)  # one schema, each example's runs their own
