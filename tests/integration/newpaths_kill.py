"""The stop-47 paths a crash must not change (kill48): scenarios of people's operations and
engine steps, shared by ``test_kills_on_new_paths.py`` (in process, Hypothesis) and
``newpaths/runner.py`` (real subprocesses killed with SIGKILL).

Each scenario is a list of steps run in order against one store: an engine step (``run`` or
``resume``) may be crashed at phase boundaries (``Runtime._on_phase``) and is then done again
until it returns; a person's step (``edit``, ``deny``, ``approve``, ``expire``) is not crashed.
The paths under attack:

* the check-only cycle that judges a person's edit: after a cycle cap stopped the run
  (``cap_then_edit``), after a denial beside an edit (``deny_beside_edit``), after a request
  expired beside an edit (``expire_beside_edit``);
* an effect its reconcile hook settled without a cost (``unknown_cost``): the ``pay`` effect's
  hook answers without a cost, so a kill between its call and its result leaves it so;
* ``lw.record_model_call`` and ``lw.model_call`` records of an actor inside a cycle;
* a resumed parked cycle that ends the run (``ended_in``: ``deny_ends``).

``outcome`` is what must not depend on the kills: the run's end, its state, each cycle's record
(as the run was told its costs: ``support.crash.told``), each cycle's events (model calls
included, each once), the stopped event's ``ended_in``, and how many times the effect ran.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crashpoints.killpoint import PHASES as CYCLE_PHASES
from support.crash import billed_told, less_owed, told

import loopwright as lw
from loopwright._authority import expire

KEY = "newpaths"
TASK: dict[str, Any] = {
    "goal": "a fixed by a person, b written by the actor",
    "artifacts": {"doc": {"a": "broken", "b": "broken", "c": "note"}},
}
FIXED = "fixed"
# Written by the effect, read by its reconcile hook: the provider's side of the payment.
PAID_FILE = "paid.log"
ACTOR_LOG = "actor.log"  # one line an actor call: ``<pid> <cycle>``


def make_loop(
    work: Path,
    *,
    approve_pay: bool,
    fix_at: int | None = 2,
    fix_b: bool = True,
    max_cycles: int = 3,
) -> lw.Loop:
    """The check passes once doc/a and doc/b are both ``FIXED``. Each cycle the actor
    records two model calls of its own (``lw.record_model_call`` and ``lw.model_call``), and
    the check one; the actor tries doc/a, fixes it at cycle ``fix_at`` (doc/b too with
    ``fix_b``) and asks there to pay an invoice: a ``spend`` effect (needing a person's
    approval with ``approve_pay``) that bills nothing, its reconcile hook answering without a
    cost, so a kill between the call and its result leaves it ``unknown_cost``, the one
    difference allowed (``support.crash.cost_told``). Each actor call is logged to
    ``ACTOR_LOG``."""
    paid = work / PAID_FILE

    def settled(key: str) -> dict[str, Any] | None:
        lines = paid.read_text().splitlines() if paid.exists() else []
        return {"paid": "INV-1"} if key in lines else None

    @lw.effect("spend", name="pay", key=lambda a: a["inv"], reconcile=settled)
    def pay(inv: str, *, key: str) -> dict[str, str]:
        with open(paid, "a") as fh:
            fh.write(key + "\n")
        return {"paid": inv}

    def actor(ctx: lw.Context) -> lw.Proposal:
        n = ctx.cycle
        with open(work / ACTOR_LOG, "a") as fh:
            fh.write(f"{os.getpid()} {n}\n")
        lw.record_model_call(
            model="m-own",
            prompt=f"cycle {n}",
            reply=f"reply {n}",
            input_tokens=3,
            output_tokens=2,
            cost_usd=0.001,
            started_at=1000.0 + n,
            seconds=0.5,
        )
        with lw.model_call(model="m-timed", prompt=f"timed {n}") as call:
            call.reply(f"timed reply {n}", input_tokens=1, output_tokens=1)
        if ctx.is_accepted("doc", "a"):
            return lw.Proposal(note=f"nothing left for the actor ({n})")
        fixed = fix_at is not None and n >= fix_at
        edits = [lw.Edit("doc", "a", FIXED if fixed else f"try{n}")]
        if fixed and fix_b:
            edits.append(lw.Edit("doc", "b", FIXED))
        return lw.Proposal(
            edits=tuple(edits),
            effects=(pay.call(inv="INV-1"),) if n == fix_at else (),
            usage=lw.Usage(cost_usd=0.002, tokens=7),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        have = state.values()["doc"]
        lw.record_model_call(  # a judge's own call: in the check-only cycle too
            model="m-judge",
            prompt=json.dumps(have, sort_keys=True),
            reply="judged",
            started_at=2000.0,
            seconds=0.25,
        )
        findings = tuple(
            lw.Finding(f"{p} is broken", "doc", p, "content") for p in "ab" if have[p] != FIXED
        )
        return lw.Verdict(passed=not findings, score=1 - len(findings) / 2, findings=findings)

    action = "require" if approve_pay else "allow"
    return lw.Loop(
        name="newpaths",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=max_cycles)),
        effects=(pay,),
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action=action, name="spend"),)),
    )


# A scenario: (loop settings, steps). An engine step is "run" or "resume"; the others are a
# person's operations on the run.
SCENARIOS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    # stops on its cycle cap (3), a person fixes doc/b, the resume judges it (check-only)
    "cap_then_edit": ({"approve_pay": False, "fix_b": False}, ("run", "edit_b", "resume")),
    # the same, the person's edit fixing nothing: the check-only cycle fails, the cap stops it
    "cap_then_useless_edit": (
        {"approve_pay": False, "fix_b": False},
        ("run", "edit_c", "resume"),
    ),
    # accepted and paid, then a person edits it (reopened): judged, paid no second time
    "accepted_then_edit": ({"approve_pay": False}, ("run", "edit_c", "resume")),
    # cycle 2 is accepted and pays (a kill in the payment leaves it to the reconcile hook)
    "pay": ({"approve_pay": False}, ("run",)),
    # parks on the payment's request in cycle 2; a person fixes doc/a beside it and denies
    "deny_beside_edit": ({"approve_pay": True}, ("run", "edit_c", "deny", "resume")),
    # the same, the request expired instead of denied
    "expire_beside_edit": ({"approve_pay": True}, ("run", "edit_c", "expire", "resume")),
    # parks on the payment's request; approved beside an edit: the cycle is judged again
    "approve_beside_edit": ({"approve_pay": True}, ("run", "edit_c", "approve", "resume")),
    # parks; denied: the resumed parked cycle ends the run (ended_in)
    "deny_ends": ({"approve_pay": True}, ("run", "deny", "resume")),
}
ENGINE_STEPS = ("run", "resume")


def engine_steps(scenario: str) -> int:
    return sum(step in ENGINE_STEPS for step in SCENARIOS[scenario][1])


def loop_for(scenario: str, work: Path) -> lw.Loop:
    return make_loop(work, **SCENARIOS[scenario][0])


def person_step(rt: lw.Runtime, step: str) -> None:
    """A person's operation on the scenario's run."""
    run_id = rt.store.get_run(KEY).run_id
    if step.startswith("edit_"):
        rt.edit(run_id, f"doc/{step[5:]}", FIXED, by="ann")
    elif step == "deny":
        rt.deny(run_id, by="bob", note="no")
    elif step == "approve":
        rt.approve(run_id, by="bob")
    elif step == "expire":
        _expire(rt, run_id)
    else:
        raise ValueError(step)


def _expire(rt: lw.Runtime, run_id: str) -> None:
    """The run's pending request expired (its deadline passed), as ``loopwright`` sweeps."""
    assert expire(rt.store, rt.pending_approval(run_id)) is not None


def engine_step(rt: lw.Runtime, loop: lw.Loop, step: str) -> lw.RunResult:
    if step == "run":
        return rt.run_sync(loop, TASK, task_key=KEY)
    return rt.resume_sync(rt.store.get_run(KEY).run_id, loop)


RUN_ID = re.compile(r"\b[0-9a-f]{12}\b")
# (hook_not_done: the reconcile hook asked after a kill answered "not done": a crash record)
VOLATILE = {"seconds", "created_at", "ts", "run_id", "recovered", "reconciled", "attempts"}
VOLATILE |= {"hook_not_done"}
VOLATILE |= {
    "decided_at",
    "approval_id",
    "id",
    "started_at",
    "memory",
    "memory_id",
    "show",
    "owner",
    "deadline_at",
}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return RUN_ID.sub("RUN", value)
    return value


def _lease_named(data: dict[str, Any]) -> dict[str, Any]:
    """An event's ``lease`` (``started``, ``drained``, ``interrupted``: its execution's fencing
    token, docs/trace.md) kept only as named: each execution takes the next token, so an
    attempt killed after its lease take shifts every later one, even one killed before its
    first commit that left no event (a run's first ``before_checkpoint``: the killed run's
    ``started`` names lease 2, the uninterrupted run's 1). That each names its execution's own
    token is checked apart (``test_a_kill_before_the_first_commit_shifts_the_leases_only``)."""
    lease = data.get("lease")
    if isinstance(lease, int) and not isinstance(lease, bool):
        return {**data, "lease": "LEASE"}
    return data


def outcome(db: str, work: Path) -> dict[str, Any]:
    """What must not depend on the kills (the module's docstring)."""
    with lw.Runtime(db) as rt:
        rec = rt.store.get_run(KEY)
        r = rt.result(rec.run_id)
        cycles: dict[int, Any] = {}
        for ck in rt.store.checkpoints(rec.run_id):
            if ck.record and ("proposal" in ck.record or ck.record.get("check_only")):
                cycles.setdefault(ck.cycle, []).append(_plain(told(dict(ck.record))))
        events: dict[int, list[Any]] = {}
        kinds: Counter[str] = Counter()
        for e in rt.store.events(rec.run_id):
            kinds[e.kind] += 1
            if e.kind in (
                "resumed",
                "lease_taken",
                "recovered",
                "effect_recovered",
                "still_waiting",
            ):
                continue
            events.setdefault(e.cycle, []).append((e.kind, _lease_named(_plain(e.data))))
        state = r.state.to_dict()
        billed = state.pop("billed", None)
        paid = work / PAID_FILE
        return {
            "end": (r.status, r.stop_reason, r.cycles, r.best_score),
            "state": _plain(state),
            "billed": billed,
            "cycles": cycles,
            "events": events,
            "model_calls": kinds["model_call"],
            "paid": paid.read_text().splitlines() if paid.exists() else [],
            "approvals": sorted(
                (a.kind, a.status) for a in rt.store.approvals() if a.run_id == rec.run_id
            ),
        }


def same(killed: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    """Where a killed-and-resumed outcome differs from the uninterrupted one. Allowed, and
    taken out before comparing (each checked to add up): what a killed attempt of a call was
    billed, charged again by the redone cycle (invariant 7: a ``retry`` event marked
    ``interrupted`` with its usage, a row in the cycle's calls, the spend); an effect's
    ``effect_started`` again for each attempt a kill cut (written with its intent), and
    ``effect_reconciled`` (done) where the uninterrupted run has ``effect_done``; a cycle whose
    effect a kill left to the reconcile hook, compared as the run was told (``told``)."""
    killed = dict(killed)
    owed_cost, owed_tokens = 0.0, 0
    cycles: dict[int, Any] = {}
    for n, records in killed["cycles"].items():
        want = ref["cycles"].get(n) or [{}]
        kept = []
        for rec in records:
            if "calls" in rec and "calls" in want[-1]:
                rec, owed = less_owed(rec, want[-1])
                owed_cost += sum(c["cost_usd"] for c in owed)
                owed_tokens += sum(c["tokens"] for c in owed)
            kept.append(rec)
        cycles[n] = kept
    killed["cycles"] = cycles
    told_cost, told_tokens = 0.0, 0
    events: dict[int, Any] = {}
    for n, evs in killed["events"].items():
        kept_evs = []
        for kind, data in evs:
            if kind == "retry" and data.get("interrupted"):
                told_cost += data["usage"]["cost_usd"]
                told_tokens += data["usage"]["tokens"]
                continue
            if kind == "effect_reconciled" and data.get("status") == "done":
                kind = "effect_done"  # settled by the hook, as the uninterrupted run's call
            if kind == "effect_started" and (kind, data) in kept_evs:
                continue  # an attempt's intent, journaled at once: one an attempt a kill cut
            kept_evs.append((kind, data))
        events[n] = kept_evs
    killed["events"] = events
    out: list[str] = []
    # A cycle record lists what its killed attempts were billed; a cycle that parked and
    # ended there (ended_in) has no record: its retry events alone say it.
    if owed_cost > told_cost + 1e-9 or owed_tokens > told_tokens:
        out.append(f"owed {owed_cost}/{owed_tokens} but told {told_cost}/{told_tokens}")
    state = dict(killed["state"])
    spent = dict(state["spent"])
    spent["cost_usd"] = round(spent["cost_usd"] - told_cost, 9)
    spent["tokens"] -= told_tokens
    state["spent"] = spent
    killed["state"] = state
    ref = {**ref, "state": {**ref["state"], "spent": {**ref["state"]["spent"]}}}
    ref["state"]["spent"]["cost_usd"] = round(ref["state"]["spent"]["cost_usd"], 9)
    for k in ref:
        a, b = killed[k], ref[k]
        if k == "billed" and isinstance(a, dict) and isinstance(b, dict):
            a = billed_told(a, b)
        out += _diff(k, a, b)
    return out


def _diff(at: str, a: Any, b: Any) -> list[str]:
    """The first places where ``a`` and ``b`` differ, by path."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted({*a, *b}, key=str):
            out += _diff(f"{at}.{k}", a.get(k, "<missing>"), b.get(k, "<missing>"))
        return out[:6]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += _diff(f"{at}[{i}]", x, y)
        return out[:6]
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(x, tuple) for x in a + b):
        a, b = [x[0] for x in a], [x[0] for x in b]  # events: their kinds say where
    return [f"{at}: {json.dumps(a, default=str)[:600]} != {json.dumps(b, default=str)[:600]}"]


Hook = Callable[[str], None]


# the phase boundaries of a cycle, and the check-only cycle's own (``_edit_check``)
PHASES = (*CYCLE_PHASES, "before_check")
Point = tuple[str, int]


def play(
    db: str,
    work: Path,
    scenario: str,
    crashes: list[list[Point]],
    *,
    k: int = 50,
    hook: Callable[[Point | None], Hook | None],
    died: type[BaseException],
) -> int:
    """Play ``scenario`` on ``db``; engine step ``i`` is crashed at each point of ``crashes[i]``
    in turn (``hook(point)``: the ``Runtime._on_phase`` that crashes there, raising ``died``),
    then done to its return. Returns how many crashes happened."""
    loop = loop_for(scenario, work)
    happened = 0
    steps = SCENARIOS[scenario][1]
    i = 0
    for step in steps:
        if step not in ENGINE_STEPS:
            with lw.Runtime(db, snapshot_every=k) as rt:
                person_step(rt, step)
            continue
        points = crashes[i] if i < len(crashes) else []
        i += 1
        for point in [*points, None]:
            with lw.Runtime(db, snapshot_every=k) as rt:
                rt._on_phase = hook(point)
                try:
                    engine_step(rt, loop, step)
                except died:
                    happened += 1
                    continue
            break
    return happened
