"""Seeded random runs of the stop contract, and the properties every one of them must keep.

``scenario(seed)`` draws a loop and what people do to its runs: an actor's score, cost and
tokens per cycle (a question, a change a risk rule parks, a proposal sent again), checks that
cost or not, an effect whose cost may be unknown (its reply lost, settled by its reconcile
hook), budgets of cycles, cost and tokens, ``no_progress`` and ``marginal_return``; then
people's moves: approve, deny or let a request expire, answer a question, edit a part beside
a request or after the run stopped, fork a run at a cycle under another contract.
``play(scenario, url)`` runs it on a store and returns every run it made; ``check_run`` asserts
for one run:

1. replay under the run's own contract ends as the run did: its stop reason, its concluded
   cycles and its spend (cost and tokens);
2. the stop reason keeps the contract's table: ``success`` only when the last cycle's required
   visible checks passed at the threshold; a budget reason only when that budget is reached or
   the next cycle's projection crosses it (the cycle cap: the cycles it counts reached); and
   no attempt begun with the cycle cap reached, or projected to cross a cost or token budget
   (counted from the trace: the engine and replay share ``_decide``'s rules, so an error
   there is one replay agrees with); nor after ``no_progress``'s window of cycles without a
   material improvement, or with P(success next cycle) x value below the next cycle's
   expected cost, and neither reason where its rule did not say stop (both re-decided from
   the trace's scores and costs as the docs word them: ``_plateau_and_margin``);
3. the spend crosses a cost (token) budget by no more than the one call in flight;
4. ``show --json``'s cycle rows add up to the run's spend;
5. the metrics agree with the trace: ``cycles_to_accepted``'s cycle counter, the last
   improvement and the spend after it, and ``fit_hazard``'s trials and successes.

Each property says which seed broke it; ``tests/integration/test_stop_scenarios.py`` draws the
seeds (Hypothesis), ``bench/stop_scenarios.py`` runs thousands.
"""

from __future__ import annotations

import dataclasses
import io
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import loopwright as lw
from loopwright import _decide as rules
from loopwright._contract import contract_from_snapshot
from loopwright.replay import fit_hazard, simulate, trace_of_run
from loopwright.replay._format import RunTrace
from loopwright.replay._simulate import _own_budget, succeeded

SCORES = (0.2, 0.4, 0.5, 0.6, 0.8, 0.9, 1.0)

# The most cycles a run of a scenario may take before the harness calls it one that never
# ends: a safety net, above the longest legitimate one, a spend-only contract's free cycles
# up to the default ceiling (``lw.DEFAULT_MAX_CYCLES``, 1,000; stop 50), with a few check-only
# cycles of people's edits the cap does not count. A run past it is reported as a broken
# property, not run until the disk fills (seed 200615 went on for 34 minutes and 1.87 GB
# before that ceiling).
CYCLE_CAP = lw.DEFAULT_MAX_CYCLES + 50


class NeverEnds(BaseException):
    """A run went past ``CYCLE_CAP`` cycles: raised by the actor, out of the engine (a
    ``BaseException``, so the engine does not take it for the actor's error and escalate)."""


class RunNeverEnds(Exception):
    """What ``play`` raises for ``NeverEnds``: the broken property "every run ends", with the
    runs made so far (``run_seed`` and the bench report it as a finding)."""

    def __init__(self, message: str, runs: list[str]) -> None:
        super().__init__(message)
        self.runs = runs


@dataclass(frozen=True)
class Step:
    """What the actor does in one cycle."""

    kind: str  # edit | risky | question | again (the proposal of an earlier cycle sent again)
    score: float
    cost: float
    tokens: int


@dataclass(frozen=True)
class Scenario:
    seed: int
    steps: tuple[Step, ...]
    contract: lw.Contract
    check_cost: float  # the visible check of the actor's part
    person_cost: float  # the visible check of the person's part
    held_cost: float | None  # a held-out check (None: none)
    effect: str | None  # None | "priced" | "free" | "unknown"
    effect_cost: float
    person_start: float  # the person's part's score before anyone edits it
    pass_at: float  # a check passes at this score
    moves: tuple[str, ...]  # what people do, in order, whenever the run lets them
    fork_contracts: tuple[lw.Contract, ...] = field(default=())

    def __str__(self) -> str:
        return (
            f"seed={self.seed} steps={self.steps} contract={self.contract} "
            f"check_cost={self.check_cost} person_cost={self.person_cost} "
            f"held_cost={self.held_cost} effect={self.effect}/{self.effect_cost} "
            f"person_start={self.person_start} pass_at={self.pass_at} moves={self.moves} "
            f"forks={self.fork_contracts}"
        )


def _pick(rng: random.Random, *options: Any) -> Any:
    return options[rng.randrange(len(options))]


def _contract(rng: random.Random, risky: bool) -> lw.Contract:
    budget = lw.Budget(
        max_cycles=_pick(rng, None, 1, 2, 3, 4, 6),
        max_cost_usd=_pick(rng, None, None, 0.1, 0.25, 0.3, 0.5, 0.8, 1.5, 3.0),
        max_tokens=_pick(rng, None, None, None, 200, 500, 1000, 3000),
    )
    # (a score is the mean of two checks' scores, a tenth apart: a rise of 0.05 or 0.1 is
    # one of exactly ``min_delta``, which counts)
    no_progress = _pick(
        rng,
        None,
        None,
        lw.NoProgress(cycles=1, min_delta=0.05),
        lw.NoProgress(cycles=1, min_delta=0.1),
        lw.NoProgress(cycles=2),
        lw.NoProgress(cycles=2, min_delta=0.05),
    )
    # (one contract in two: the rule ends few runs, and 0.4 and 0.5 put P x value on a
    # $0.10 cycle's cost exactly, at 0.25 and 0.2 — no stall and one cycle of it — where
    # "below" and "at most" part)
    marginal = _pick(
        rng,
        None,
        lw.MarginalReturn(value_per_success_usd=_pick(rng, 0.4, 0.5, 0.5, 1.0, 4.0)),
    )
    if budget == lw.Budget() and no_progress is None:
        budget = lw.Budget(max_cycles=_pick(rng, 2, 5))  # (a contract needs an exit)
    if rng.random() < 0.2:
        # the task's own cap (``max_cycles_key``), capped by ``max_cycles`` when set
        budget = dataclasses.replace(budget, max_cycles_key="limits.cycles")
    risk: tuple[lw.RiskRule, ...] = ()
    if risky:
        expires = _pick(rng, None, 3600.0)
        risk = (lw.RiskRule(name="r", touches=("doc/r",), expires_after_s=expires),)
    return lw.Contract(
        success=lw.Success(min_score=_pick(rng, 0.8, 0.9, 1.0)),
        no_progress=no_progress,
        budget=budget,
        marginal_return=marginal,
        risk=risk,
    )


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    steps = []
    for _ in range(rng.randint(1, 8)):
        kind = _pick(rng, "edit", "edit", "edit", "risky", "question", "again")
        cost = _pick(rng, 0.0, 0.05, 0.1, 0.1, 0.2, 0.35)
        tokens = _pick(rng, 0, 0, 50, 100, 300)
        steps.append(Step(kind, _pick(rng, *SCORES), cost, tokens))
    risky = any(s.kind == "risky" for s in steps)
    moves = tuple(
        _pick(
            rng,
            "approve",
            "deny",
            "expire",
            "answer",
            "edit",
            "edit",
            "edit_good",
            "fork",
            "fork_edit",
        )
        for _ in range(rng.randint(0, 8))
    )
    forks = tuple(_contract(rng, risky) for m in moves if m.startswith("fork"))
    contract = _contract(rng, risky)
    check_cost = _pick(rng, 0.0, 0.0, 0.01, 0.05)
    person_cost = _pick(rng, 0.0, 0.02)
    held_cost = _pick(rng, None, None, 0.0, 0.03)
    effect = _pick(rng, None, None, "priced", "free", "unknown")
    effect_cost = _pick(rng, 0.0, 0.02, 0.1)
    if effect == "free":
        # (declared free, it bills nothing: one that bills all the same is replayed with a
        # check before it the engine did not make, the documented disagreement of a false
        # declaration; docs/decisions.md, "The stop contract")
        effect_cost = 0.0
    return Scenario(
        seed=seed,
        steps=tuple(steps),
        contract=contract,
        check_cost=check_cost,
        person_cost=person_cost,
        held_cost=held_cost,
        effect=effect,
        effect_cost=effect_cost,
        person_start=_pick(rng, 0.6, 1.0, 1.0),
        pass_at=_pick(rng, 0.8, 1.0),
        moves=moves,
        fork_contracts=forks,
    )


def _score(value: Any) -> float:
    """The score a part's value carries (``"0.8:3"``: 0.8, written in cycle 3)."""
    try:
        return float(str(value).split(":", 1)[0])
    except ValueError:
        return 0.0


def loop(sc: Scenario, contract: lw.Contract | None = None) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle > CYCLE_CAP:
            c = contract or sc.contract  # (the run's: a fork's may be another than the first's)
            raise NeverEnds(
                f"a run still going at cycle {ctx.cycle} (cap {CYCLE_CAP}); its contract's "
                f"exits: {c.budget}, no_progress={c.no_progress}, "
                f"marginal_return={c.marginal_return}"
            )
        step = sc.steps[(ctx.cycle - 1) % len(sc.steps)]
        usage = lw.Usage(step.cost, step.tokens)
        effects = (note.call(n=ctx.cycle),) if note is not None else ()
        if step.kind == "question" and not ctx.notes:
            return lw.Proposal(question=lw.Question("which way?"), usage=usage)
        part = "n" if ctx.is_accepted("doc", "a") else "a"
        value = f"{step.score}:{ctx.cycle}"
        if step.kind == "again":
            value = f"{step.score}:0"  # the same each time: a proposal sent again
        edits = {part: value}
        if step.kind == "risky":
            edits["r"] = f"risky {ctx.cycle}"
        return lw.Proposal(edits=lw.Proposal.edit("doc", edits).edits, usage=usage, effects=effects)

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        s = _score(state.values()["doc"]["a"])
        return lw.Verdict(passed=s >= sc.pass_at, score=s, usage=_cost(sc.check_cost))

    def person(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        s = _score(state.values()["doc"]["p"])
        return lw.Verdict(passed=s >= sc.pass_at, score=s, usage=_cost(sc.person_cost))

    def held(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=_cost(sc.held_cost or 0.0))

    checks = [lw.Check(fn=check, name="check"), lw.Check(fn=person, name="person")]
    if sc.held_cost is not None:
        checks.append(lw.Check(fn=held, name="held", held_out=True))
    note = _effect(sc)
    return lw.Loop(
        name="scenarios",
        actor=actor,
        verifiers=checks,
        contract=contract or sc.contract,
        effects=[note] if note is not None else [],
        retry=lw.RetryPolicy(attempts=1),
    )


def _cost(cost: float) -> lw.Usage | None:
    return lw.Usage(cost, 10) if cost else None


def _effect(sc: Scenario) -> lw.Effect | None:
    if sc.effect is None:
        return None
    cost = sc.effect_cost

    def reconcile(key: str) -> Any:
        return {"noted": key}  # it happened; what it cost, nobody said

    def fn(n: int) -> Any:
        if sc.effect == "unknown":
            raise ConnectionError("the reply was lost")  # (it may have acted)
        if cost:
            return lw.EffectResult({"n": n}, usage=lw.Usage(cost, 0))
        return {"n": n}

    return lw.effect(
        "send",
        name="note",
        requires_success=False,
        free=sc.effect == "free",
        reconcile=reconcile if sc.effect == "unknown" else None,
        retry=lw.RetryPolicy(attempts=1),
    )(fn)


TASK = {"artifacts": {"doc": {"a": "0.0:0", "p": "", "r": "", "n": ""}}}


def play(sc: Scenario, url: str) -> list[str]:
    """Run the scenario on the store at ``url``; the ids of every run it made.
    ``RunNeverEnds`` when a run goes past ``CYCLE_CAP`` cycles."""
    runs: list[str] = []
    try:
        return _play(sc, url, runs)
    except NeverEnds as exc:
        where = f"run {runs[-1]}" if runs else "the first run"
        raise RunNeverEnds(
            f"a run that never ends: {where} of seed {sc.seed} ({exc})",
            runs,
        ) from None


def _play(sc: Scenario, url: str, runs: list[str]) -> list[str]:
    forks = iter(sc.fork_contracts)
    task: dict[str, Any] = {
        "artifacts": {"doc": {**TASK["artifacts"]["doc"], "p": f"{sc.person_start}:0"}},
        "limits": {"cycles": random.Random(sc.seed).randint(1, 4)},  # (max_cycles_key's)
    }
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop(sc), task, task_key=f"s{sc.seed}")
        runs.append(r.run_id)
        current, contract = r.run_id, sc.contract
        for i, move in enumerate(sc.moves):
            rec = rt.store.get_run(current)
            if rec.status == "awaiting_approval":
                current_loop = loop(sc, contract)
                pending = rt.pending_approval(current)
                question = bool((pending.evidence or {}).get("question"))
                if move in ("edit", "edit_good"):
                    _edit(rt, current, move, i)
                    move = _pick(random.Random(sc.seed + i), "approve", "deny", "answer")
                if question and move not in ("deny", "expire"):
                    rt.answer(current, "left", by="ana")
                elif move == "expire" and pending.expires_at is not None:
                    later = pending.expires_at + 60.0
                    rt.store.clock = lambda later=later: later  # type: ignore[method-assign]
                elif move in ("deny", "expire"):
                    rt.deny(current, by="bo")
                else:
                    rt.approve(current, by="bo")
                rt.resume_sync(current, current_loop)
            elif move in ("edit", "edit_good") and rec.status in ("stopped", "escalated"):
                _edit(rt, current, move, i)
                rt.resume_sync(current, loop(sc, contract))
            elif move.startswith("fork"):
                contract = next(forks)
                at = random.Random(sc.seed * 7 + i).randint(rec.forked_at or 0, rec.cycle)
                if rec.status in ("awaiting_approval", "running", "pending"):
                    continue
                fork = rt.fork(current, at, contract=contract)
                runs.append(fork.run_id)
                current = fork.run_id
                if move == "fork_edit":  # (edited before it runs: its first cycle judges it)
                    _edit(rt, current, move, i)
                rt.resume_sync(current, loop(sc, contract))
    return runs


def _edit(rt: lw.Runtime, run_id: str, move: str, i: int) -> None:
    score = 1.0 if move == "edit_good" else _pick(random.Random(i), 0.4, 0.9, 1.0)
    value = f"{score}:ana{i}"  # (never the part's value already)
    rt.edit(run_id, "doc/p", value, by="ana")


# -- the properties ---------------------------------------------------------------------------


def show_json(url: str, run_id: str) -> dict[str, Any]:
    from loopwright.cli import _app

    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        _app.show(run_id, store=url, as_json=True)
    finally:
        sys.stdout = old
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def check_run(sc: Scenario, url: str, run_id: str, fail: Callable[[str], None]) -> None:
    """The five properties for one run (``fail`` is called with what broke)."""
    with lw.Runtime(url) as rt:
        rec = rt.store.get_run(run_id)
        trace = trace_of_run(rt.store, rec)
        per_run = {r.run_id: r for r in lw.compute_metrics(rt.store).per_run}
    if trace is None:
        return
    contract = contract_from_snapshot(rec.contract)
    inh = trace.start or {}
    inh_cost = float(inh.get("cost_usd") or 0.0)
    inh_tokens = int(inh.get("tokens") or 0)
    ended = rec.status in ("accepted", "stopped", "escalated", "failed", "cancelled")
    where = f"run {run_id} ({rec.status}/{rec.stop_reason} at {rec.cycle})"

    # (1) replay under its own contract
    o = simulate(trace, contract)
    if ended:
        if o.reason != rec.stop_reason:
            fail(f"{where}: replay says {o.reason} ({o.note}) at {o.cycles}")
        if o.cycles != rec.cycle - int(inh.get("cycle") or 0):
            fail(f"{where}: replay concludes {o.cycles} cycles")
    if o.reason != "censored" or ended:
        if not _close(o.cost_usd, rec.cost_usd - inh_cost):
            fail(f"{where}: replay spends ${o.cost_usd!r}, the run ${rec.cost_usd - inh_cost!r}")
        if o.tokens != rec.tokens - inh_tokens:
            fail(f"{where}: replay spends {o.tokens} tokens, the run {rec.tokens - inh_tokens}")

    # (2) the contract's table
    table = {"success": "accepted", "escalated": "escalated", "cancelled": "cancelled"}
    if ended and rec.stop_reason not in lw.STOP_REASONS:
        fail(f"{where}: a stop reason outside the vocabulary")
    if ended and rec.status != table.get(rec.stop_reason or "", "stopped"):
        fail(f"{where}: status {rec.status} for {rec.stop_reason}")
    b = contract.budget
    last = trace.cycles[-1] if trace.cycles else None
    if rec.stop_reason == "success" and (last is None or not succeeded(contract, trace, last)):
        fail(f"{where}: success without its required checks passing at the threshold")
    if rec.stop_reason == "budget_cost":
        assert b.max_cost_usd is not None
        mean = _mean_paid(trace, inh)
        if rules.crosses(b.max_cost_usd, rec.cost_usd) and not rules.crosses(
            rec.cost_usd + mean, b.max_cost_usd
        ):
            fail(f"{where}: budget_cost at ${rec.cost_usd} of ${b.max_cost_usd} (next ~${mean})")
    if rec.stop_reason == "budget_tokens":
        assert b.max_tokens is not None
        mean_t = _mean_paid(trace, inh, tokens=True)
        if rec.tokens < b.max_tokens and rec.tokens + mean_t <= b.max_tokens:
            fail(f"{where}: budget_tokens at {rec.tokens} of {b.max_tokens} (next ~{mean_t})")
    if rec.stop_reason == "budget_cycles":
        cap = _own_budget(trace, contract).budget.max_cycles  # (the task's own, if it has one)
        counted = rec.cycle - _answer_checks(trace, inh)
        if cap is None or counted < cap:
            fail(f"{where}: budget_cycles with {counted} counted cycles of a cap of {cap}")
    # ... and no attempt is made with the cycle cap reached (a check-only cycle, judging a
    # person's edit, may be: it is no attempt)
    over = _attempt_past_cap(trace, contract, inh)
    if over is not None:
        fail(f"{where}: cycle {over} was an attempt with the cycle cap reached")
    # ... nor one its projection (the mean paid cycle) already said would cross a budget
    crossing = _attempt_projected_over(trace, contract, inh)
    if crossing is not None:
        fail(f"{where}: cycle {crossing[0]} was begun projected to cross {crossing[1]}")
    # ... nor one after the plateau rule or the marginal-return rule said stop, and neither
    # reason given where it did not (both re-decided from the trace's scores and costs: the
    # engine and replay share ``_decide.improved`` and ``_decide.marginal_stop``)
    for broken in _plateau_and_margin(trace, contract, inh, rec.stop_reason if ended else None):
        fail(f"{where}: {broken}")

    # (3) overshoot at most the one call in flight
    dearest = max((c.cost_usd for cy in trace.cycles for c in cy.calls), default=0.0)
    dearest = max(dearest, float(trace.tail.get("cost_usd") or 0.0))
    # (a fork may inherit more than its own budget: it then spends nothing)
    if b.max_cost_usd is not None and rules.crosses(
        rec.cost_usd, max(b.max_cost_usd, inh_cost) + dearest
    ):
        fail(f"{where}: spent ${rec.cost_usd} of ${b.max_cost_usd}, more than one call over")
    dear_t = max((c.tokens for cy in trace.cycles for c in cy.calls), default=0)
    dear_t = max(dear_t, int(trace.tail.get("tokens") or 0))
    if b.max_tokens is not None and rec.tokens > max(b.max_tokens, inh_tokens) + dear_t:
        fail(f"{where}: spent {rec.tokens} tokens of {b.max_tokens}, more than one call over")

    # (4) show --json's rows add up to the spend
    doc = show_json(url, run_id)
    listed = sum((c.get("usage") or {}).get("cost_usd", 0) for c in doc["cycles"])
    if not _close(listed, rec.cost_usd - inh_cost):  # (a fork's own rows, its own spend)
        fail(f"{where}: show --json's rows list ${listed!r}, the run ${rec.cost_usd - inh_cost!r}")

    # (5) the metrics agree with the trace
    m = per_run.get(run_id)
    if m is not None:
        if m.cycles != rec.cycle - int(inh.get("cycle") or 0):
            fail(f"{where}: metrics count {m.cycles} cycles")
        improved = [c.cycle for c in trace.cycles if c.improved]
        want = improved[-1] if improved else None
        if m.last_improvement_cycle != want:
            fail(f"{where}: metrics' last improvement {m.last_improvement_cycle}, trace {want}")
        same = ended and o.reason == rec.stop_reason
        after, replayed = m.spend_after_last_improvement_usd, o.spend_after_last_improvement_usd
        if same and o.last_improvement_cycle != (want or 0):
            fail(f"{where}: replay's last improvement {o.last_improvement_cycle}, trace {want}")
        elif same and not _close(after, replayed):
            fail(f"{where}: spend after the last improvement ${after!r} (metrics), ${replayed!r}")
    table = fit_hazard(
        [trace],
        success=contract.success,
        min_delta=contract.no_progress.min_delta if contract.no_progress else 0.0,
        max_cycles=50,
    )
    trials = sum(t for row in table for _, t in row)
    wins = sum(s for row in table for s, _ in row)
    attempts, won = _attempts(trace, contract)
    if (trials, wins) != (attempts, won):
        fail(f"{where}: fit_hazard counts {wins}/{trials}, the trace {won}/{attempts}")


def _attempts(trace: RunTrace, contract: lw.Contract) -> tuple[int, int]:
    """The actor's attempts up to the run's first success, and whether that success was the
    actor's: what ``fit_hazard`` must count for one trace."""
    n = 0
    for c in trace.cycles:
        if c.check_only:
            if succeeded(contract, trace, c):
                return n, 0
            continue
        n += 1
        if c.escalated:
            if not c.reopened:
                return n, 0
            continue
        if succeeded(contract, trace, c):
            return n, 1
    return n, 0


def _attempt_past_cap(trace: RunTrace, contract: lw.Contract, inh: dict[str, Any]) -> int | None:
    """The first of the run's cycles that was an attempt (not check-only) begun with the
    cycles the cap counts already at the cap, if any: counted as ``_answer_checks`` counts,
    from the trace, not as the engine and replay do (``_decide.counted_cycles``, shared by
    both: an off-by-one there is one replay agrees with)."""
    cap = _own_budget(trace, contract).budget.max_cycles
    if cap is None:
        return None
    cycle = int(inh.get("cycle") or 0)
    counted = cycle - int(inh.get("answer_checks") or 0)
    prev = None
    for c in trace.cycles:
        cycle += 1
        if not c.check_only and counted >= cap:
            return cycle
        owed = prev is None and bool(inh.get("answer_owed"))
        answer = prev is not None and prev.asked and not prev.reopened
        counted += 0 if c.check_only and (answer or owed) else 1
        prev = c
    return None


def _attempt_projected_over(
    trace: RunTrace, contract: lw.Contract, inh: dict[str, Any]
) -> tuple[int, str] | None:
    """The first of the run's attempts (not check-only) begun when the spend so far and the
    next cycle's projection (``_mean_paid`` of the cycles before it) crossed a cost or token
    budget, with that budget: "never start a cycle it can already tell would cross", counted
    from the trace (the engine and replay share ``_decide.budget_stop``: a projection left
    out there is one replay agrees with)."""
    b = contract.budget
    first = int(inh.get("cycle") or 0)
    n = len(trace.cycles)
    # (the cycle the run ended inside, when it is an attempt: parked, or crossed with no
    # person's edit before it, which a check-only cycle would judge; it spent something)
    tail = trace.tail
    reopened = bool(tail.get("edited")) or bool(n and trace.cycles[-1].reopened)
    inside = tail.get("kind") in ("parked", "crossed") and not reopened
    inside = inside and bool(float(tail.get("cost_usd") or 0) or int(tail.get("tokens") or 0))
    for j in range(n + 1 if inside else n):
        if j < n and trace.cycles[j].check_only:
            continue
        before = dataclasses.replace(trace, cycles=trace.cycles[:j])
        for limit, tokens, reason in (
            (b.max_cost_usd, False, "budget_cost"),
            (b.max_tokens, True, "budget_tokens"),
        ):
            if limit is None:
                continue
            own = sum(x.tokens if tokens else x.cost_usd for cy in before.cycles for x in cy.calls)
            spent = own + float(inh.get("tokens" if tokens else "cost_usd") or 0.0)
            if rules.crosses(spent + _mean_paid(before, inh, tokens=tokens), limit, whole=tokens):
                return first + j + 1, f"{reason} ({spent:g} spent of {limit:g})"
    return None


def _p_next(mr: lw.MarginalReturn, cycle: int, stall: int) -> float:
    """P(success at ``cycle``) as docs/replay.md words it: the hazard table's cell (row
    ``cycle - 1``, the last row for later ones; column ``stall``, the last for more) with the
    prior added, else the prior with each stalled cycle a failed trial."""
    a, b = mr.prior_successes, mr.prior_failures
    if not mr.hazard:
        return a / (a + b + stall)
    row = mr.hazard[min(cycle, len(mr.hazard)) - 1]
    wins, trials = row[min(stall, len(row) - 1)]
    return (wins + a) / (trials + a + b)


def _plateau_and_margin(
    trace: RunTrace, contract: lw.Contract, inh: dict[str, Any], reason: str | None
) -> list[str]:
    """The plateau rule (``no_progress``) and the marginal-return rule re-decided from the
    trace, written from docs/concepts.md and docs/replay.md, not with ``_decide``: a material
    improvement is a visible score above the level the last one reached (0 before any) by at
    least ``min_delta``, or a required check passing that never had; a proposal sent again or
    refused is a cycle without progress; a cycle that asked, or judged a person's edit, is
    neither. What breaks: an attempt begun after ``cycles`` cycles without progress, or when
    P(success next cycle) x value was below the mean paid cycle's cost; a run ended
    ``no_progress`` or ``marginal_return`` where the rule did not say so; and a run ended by a
    budget or marginal return, between cycles, where the plateau (decided first) said stop."""
    np, mr = contract.no_progress, contract.marginal_return
    if np is None and mr is None:
        return []
    delta = np.min_delta if np is not None else 0.0
    level = inh.get("progress_score")
    passed = set(inh.get("passed_checks") or ())
    stall = int(inh.get("stall") or 0)
    first = int(inh.get("cycle") or 0)
    required = set(trace.required or ())
    n = len(trace.cycles)
    tail = trace.tail
    reopened = bool(tail.get("edited")) or bool(n and trace.cycles[-1].reopened)
    inside = tail.get("kind") in ("parked", "crossed") and not reopened
    inside = inside and bool(float(tail.get("cost_usd") or 0) or int(tail.get("tokens") or 0))
    broken: list[str] = []

    def margin(j: int) -> tuple[float, float] | None:
        """(P x value, the next cycle's expected cost) before cycle ``j`` of the trace."""
        if mr is None or first + j == 0:
            return None
        before = dataclasses.replace(trace, cycles=trace.cycles[:j])
        return _p_next(mr, first + j + 1, stall) * mr.value_per_success_usd, _mean_paid(before, inh)

    def below(m: tuple[float, float] | None) -> bool:  # strictly, past a float sum's rounding
        return m is not None and m[1] - m[0] > 1e-9 * max(1.0, m[0])

    plateau = False  # the cycle before ended with the plateau rule's window full
    for j in range(n + 1 if inside else n):
        c = trace.cycles[j] if j < n else None
        if c is None or not c.check_only:
            m = margin(j)
            if plateau:
                broken.append(f"cycle {first + j + 1} was begun after {stall} without progress")
                break
            if below(m):
                assert m is not None
                broken.append(
                    f"cycle {first + j + 1} was begun with P x value ${m[0]:g} below its "
                    f"expected cost ${m[1]:g} (marginal return)"
                )
                break
        if c is None:
            break
        decided = not (c.refused or c.asked)
        newly = {
            k
            for k, v in c.verdicts.items()
            if v.get("passed") and k in (required or c.verdicts) and k not in passed
        }
        base = 0.0 if level is None else float(level)
        rise = c.score is not None and c.score > base and c.score - base >= delta - 1e-9
        if decided and not c.duplicate and (newly or rise):
            if c.score is not None and (level is None or c.score > level):
                level = c.score
            stall = 0
        elif not (c.asked or c.check_only):
            stall += 1
        passed |= newly
        plateau = (
            np is not None
            and stall >= np.cycles
            and not (c.check_only or c.reopened or c.escalated or succeeded(contract, trace, c))
        )
    if reason == "no_progress" and (np is None or stall < np.cycles):
        broken.append(f"no_progress after {stall} cycles without progress")
    if reason == "marginal_return" and not below(margin(n)):
        m = margin(n)
        said = "no rule" if m is None else f"P x value ${m[0]:g}, expected cost ${m[1]:g}"
        broken.append(f"marginal_return where the rule goes on ({said})")
    between = tail.get("kind", "none") == "none" and not reopened and plateau
    if (
        between
        and reason is not None
        and (reason.startswith("budget_") or reason == "marginal_return")
    ):
        broken.append(f"{reason} where the plateau rule, decided first, said no_progress")
    return broken


def _answer_checks(trace: RunTrace, inh: dict[str, Any]) -> int:
    n = int(inh.get("answer_checks") or 0)
    prev = None
    for c in trace.cycles:
        if c.check_only and prev is not None and prev.asked and not prev.reopened:
            n += 1
        prev = c
    return n


def _mean_paid(trace: RunTrace, inh: dict[str, Any], *, tokens: bool = False) -> float:
    """The next cycle's projected cost (tokens), as the contract reads it: the mean of the
    cycles that made an attempt and spent any, else of every cycle (the dear side)."""
    i = 1 if tokens else 0
    own = [sum(x.tokens if tokens else x.cost_usd for x in c.calls) for c in trace.cycles]
    paid = [p for p, c in zip(own, trace.cycles, strict=True) if p and not c.check_only]
    spent = sum(own) + float(inh.get("tokens" if tokens else "cost_usd") or 0.0)
    k = len(paid) + int((inh.get("paid_cycles") or [0, 0])[i])
    k = k or len(trace.cycles) + int(inh.get("cycle") or 0)
    return spent / k if k else 0.0


def run_seed(seed: int, url: str) -> list[str]:
    """Every property broken by ``seed``'s runs (empty: none)."""
    return play_and_check(scenario(seed), url)


def play_and_check(sc: Scenario, url: str) -> list[str]:
    """Every property broken by the scenario's runs (a run that never ends among them)."""
    try:
        runs = play(sc, url)
    except RunNeverEnds as exc:
        return [str(exc)]
    broken: list[str] = []
    for run_id in runs:
        check_run(sc, url, run_id, broken.append)
    return broken
