"""Pure decision rules of the stop contract (no I/O): budgets, scores, acceptance, progress.
The risk rules' steps are ``_risk_steps``'s."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from ._contract import Contract
from ._errors import ConfigError
from ._loop import Check
from ._proposal import Proposal, Remaining, Verdict
from ._same_value import same_value
from ._shapes import FLOAT_SLACK
from ._state import TaskState, part_ref, split_ref
from ._usage import Usage

__all__ = [
    "accept_clean_parts",
    "aggregate_score",
    "at_default_ceiling",
    "budget_crossed",
    "budget_exhausted",
    "budget_stop",
    "call_stop",
    "counted_cycle",
    "crosses",
    "cycle_cap",
    "declared_free",
    "effective_digest",
    "free_call",
    "improved",
    "marginal_stop",
    "noted_calls",
    "reaches",
    "remaining",
    "stop_before_cycle",
    "success",
    "task_cycle_cap",
    "unanswerable",
]


# Spend is a sum of floats: 0.1 + 0.1 + 0.1 > 0.3. A budget is crossed only beyond this relative
# slack, so that three $0.10 cycles fit a $0.30 budget.
_SLACK = FLOAT_SLACK


def crosses(value: float, limit: float, *, whole: bool = False) -> bool:
    """``value`` is beyond ``limit``, past the rounding of a float sum; ``whole``: counts
    (tokens), which have no rounding, compared exactly (a relative slack let a run 10 tokens
    short of a 10-billion-token budget start a cycle projected to cross it by 10)."""
    return value > (limit if whole else limit + _SLACK * max(1.0, abs(limit)))


def reaches(score: float, min_score: float) -> bool:
    """``score`` is at least ``min_score``, past the rounding of the weighted mean it is:
    checks scoring 0.85 and 0.95 average 0.8999999999999999, which must meet 0.9."""
    return score >= min_score - _SLACK * max(1.0, abs(min_score))


def cycle_cap(contract: Contract, state: TaskState) -> int | None:
    """The run's cycle budget: the task's own (``budget.max_cycles_key``) when it has one,
    capped by ``budget.max_cycles`` unless that is the default ceiling
    (``max_cycles_default``: the cap of a task without one); else ``budget.max_cycles``."""
    b = contract.budget
    own = task_cycle_cap(contract, state.task)
    if own is None:
        return b.max_cycles
    return own if b.max_cycles is None or b.max_cycles_default else min(own, b.max_cycles)


def task_cycle_cap(contract: Contract, task: object) -> int | None:
    """The task's own cycle cap, at the contract's ``budget.max_cycles_key`` (``None``: no
    key, or a task without it); ``ConfigError`` for one that is not a whole number >= 1."""
    b = contract.budget
    if b.max_cycles_key is None:
        return None
    node: object = task
    for key in b.max_cycles_key.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if node is None:
        return None
    if isinstance(node, bool) or not isinstance(node, int) or node < 1:
        raise ConfigError(
            f"the task's {b.max_cycles_key!r} must be a whole number >= 1, got {node!r}",
            field="contract.budget.max_cycles_key",
        )
    return node


def at_default_ceiling(contract: Contract, task: object) -> bool:
    """The run's cycle cap is the engine's default ceiling (``budget.max_cycles_default``),
    not a cap the task carried (``max_cycles_key``): what a stop at it says."""
    if not contract.budget.max_cycles_default:
        return False
    try:
        return task_cycle_cap(contract, task) is None
    except ConfigError:  # (refused where the run was created: a stored one is read, not judged)
        return False


def counted_cycles(state: TaskState) -> int:
    """The cycles the cycle cap counts: every concluded one but the check-only cycles that
    took the place of the cycle an answered question was for (``TaskState.answer_checks``):
    a person's edit beside the question judged first does not use up the cycle in which the
    actor reads the answer (packet48: at the cap, the run stopped with it never read)."""
    return state.cycle - state.answer_checks


def remaining(contract: Contract, state: TaskState, *, shown: bool = False) -> Remaining:
    """The budget left before the next cycle. ``shown``: as an actor or reflector is shown it,
    without what held-out checks spent (their cost and tokens can tell their verdicts;
    invariant 3) — the contract still counts it."""
    b, s = contract.budget, state.spent
    hidden = state.held_out_spent
    if shown and (hidden.cost_usd or hidden.tokens):
        s = Usage._stored(
            max(0.0, s.cost_usd - hidden.cost_usd), max(0, s.tokens - hidden.tokens), s.seconds
        )
    cap = cycle_cap(contract, state)
    # (by position, in Remaining's order: cycles, cost_usd, tokens, seconds; a class called
    # with keywords goes through a dict of them, and this runs once or twice a cycle)
    return Remaining(
        None if cap is None else max(0, cap - counted_cycles(state)),
        None if b.max_cost_usd is None else max(0.0, b.max_cost_usd - s.cost_usd),
        None if b.max_tokens is None else max(0, b.max_tokens - s.tokens),
        None if b.max_seconds is None else max(0.0, b.max_seconds - s.seconds),
    )


def budget_stop(contract: Contract, state: TaskState) -> str | None:
    """The budget reason that forbids starting the next cycle, if any.

    The next cycle is projected to cost the mean of the cycles so far that spent anything
    (``TaskState.paid_cycles``); a cycle whose projection crosses a limit is not started
    ("never start a cycle it can already tell would cross").
    """
    b, s = contract.budget, state.spent
    cap = cycle_cap(contract, state)
    if cap is not None and counted_cycles(state) >= cap:
        return "budget_cycles"
    # A budget used up is named before one only projected to be crossed, and a crossed one
    # before one only reached (as inside a cycle): a run that stopped mid-cycle on crossed
    # tokens and was reopened (a person's edit) said budget_cost, projected, where replay of
    # the same trace said budget_tokens.
    if (used := budget_exhausted(contract, s)) is not None:
        return used
    if b.max_cost_usd is None and b.max_tokens is None and b.max_seconds is None:
        return None  # (a cycle cap alone, the common contract: nothing to project)
    checks: tuple[tuple[float | None, float, str], ...] = (
        (b.max_cost_usd, s.cost_usd, "budget_cost"),
        (b.max_tokens, float(s.tokens), "budget_tokens"),
        (b.max_seconds, s.seconds, "budget_time"),
    )
    # Every budget set is now left (``budget_exhausted`` returned on one reached or crossed):
    # only a projection can forbid the next cycle.
    for i, (limit, spent, reason) in enumerate(checks):
        if limit is None:
            continue
        projected = _mean_paid(state, i, spent)
        if crosses(spent + projected, limit, whole=reason == "budget_tokens"):
            return reason
    return None


def _mean_paid(state: TaskState, i: int, spent: float) -> float:
    """The mean of budget ``i`` (0 cost, 1 tokens, 2 seconds; ``spent`` of it so far) over
    the cycles that spent any of it: what the next cycle is projected to spend. A free cycle
    (recorded seeds judged at no cost, a cached answer, a check-only cycle of free checks)
    says nothing of what a paid one costs, and counted in the mean it let a run start a cycle
    that crossed; nor does a check-only cycle of paid checks, which is no attempt: it is not
    counted (its spend is, so the mean errs on the dear side; review48b: a $0.10 check of a
    person's edit made the next $1 actor cycle look like $0.70, and it crossed). Not the
    dearest cycle (one retry storm would end runs with budget left) nor
    the last one (noisy); every cycle when they were not counted (a state stored before)."""
    paid = state.paid_cycles
    k = paid[i] if paid is not None and paid[i] else state.cycle
    return spent / k if k else 0.0


def marginal_stop(contract: Contract, state: TaskState) -> str | None:
    """``"marginal_return"`` when P(success next cycle) × value < expected cost of the next
    cycle (the mean cost of the cycles so far that cost anything, as a budget projects it;
    never before the first cycle)."""
    mr = contract.marginal_return
    n = state.cycle
    if mr is None or n == 0:
        return None
    # Free cycles (a check-only cycle of free checks, a recorded seed judged at no cost) left
    # out, as ``budget_stop`` leaves them: counted, they made the next cycle look cheaper
    # than any paid one was, and a run went on past the point its value paid for.
    expected_cost = _mean_paid(state, 0, state.spent.cost_usd)
    p = mr.p_success(n + 1, state.stall)
    # Strictly below, beyond the sum's rounding (as budgets): three $0.10 cycles average
    # $0.10000000000000002, and a cycle worth exactly its cost goes on.
    return "marginal_return" if crosses(expected_cost, p * mr.value_per_success_usd) else None


def stop_before_cycle(contract: Contract, state: TaskState) -> str | None:
    """What forbids starting the next cycle: a budget, then the marginal-return rule."""
    return budget_stop(contract, state) or marginal_stop(contract, state)


def check_stop(contract: Contract, state: TaskState) -> str | None:
    """What forbids the check-only cycle that judges a person's edit (``_edit_check``): a
    cost, token or time budget reached or crossed (``budget_exhausted``) — its checks may
    cost, and a verifier's cost is unknown until it runs (money first). Not the cycle cap, a
    projection or the marginal-return rule: they bound the actor's attempts, and this cycle
    makes none, so a person's edit of a run stopped on its cycles is still judged (and
    accepted if it meets the contract). Each check inside it is still bounded by
    ``call_stop``."""
    return budget_exhausted(contract, state.spent)


def unanswerable(contract: Contract, state: TaskState, cycle: Usage) -> str | None:
    """What would forbid the cycle after this one, which a question the actor asks in it
    needs: its answer is only read by a next cycle. ``state``: the run mid-cycle (its spend
    holds this cycle's priced calls, not its time); ``cycle``: what this cycle spent, its time
    so far included. A question is free, and still not asked then: a person would answer it
    and the run stop at once, by the rule that stops it now (docs/concepts.md). The state is
    the one ``_conclude`` builds for a cycle that asked (the stall kept; the cycle and its
    spend counted), so both decide alike, and replay, which concludes the cycle, with them."""
    after = TaskState(
        task=state.task,
        cycle=state.cycle + 1,
        # (the check-only cycles the cap does not count, ``counted_cycles``: left out, a
        # question after an edit judged beside an answer was refused with a cycle left, which
        # ``remaining`` had shown the actor; review51a)
        answer_checks=state.answer_checks,
        stall=state.stall,
        paid_cycles=counted_cycle(state.paid_cycles, cycle),
    )
    after.spent = state.spent.add_seconds(cycle.seconds)
    return stop_before_cycle(contract, after)


def budget_exhausted(contract: Contract, spent: Usage) -> str | None:
    """The budget ``spent`` has used up, reached or crossed (as before a cycle,
    ``budget_stop``): no call that may bill starts on it inside a cycle (``call_stop``).
    One crossed is named before one only reached, as ``call_stop`` names it: a call that
    reached the cost budget and crossed the token one stops on ``budget_tokens`` whichever
    check sees it (the engine's after a priced attempt, replay's before the next call)."""
    b = contract.budget
    if b.max_cost_usd is not None and not crosses(b.max_cost_usd, spent.cost_usd):
        used: str | None = "budget_cost"
    elif b.max_tokens is not None and not crosses(b.max_tokens, spent.tokens, whole=True):
        used = "budget_tokens"
    elif b.max_seconds is not None and not crosses(b.max_seconds, spent.seconds):
        used = "budget_time"
    else:
        return None
    return budget_crossed(contract, spent) or used


def budget_crossed(contract: Contract, spent: Usage) -> str | None:
    """The budget ``spent`` is already beyond (a call in flight overshot it)."""
    b = contract.budget
    if b.max_cost_usd is not None and crosses(spent.cost_usd, b.max_cost_usd):
        return "budget_cost"
    if b.max_tokens is not None and crosses(spent.tokens, b.max_tokens, whole=True):
        return "budget_tokens"
    if b.max_seconds is not None and crosses(spent.seconds, b.max_seconds):
        return "budget_time"
    return None


# A call's row in a cycle's priced calls: (who, cost_usd, tokens).
CallRow = tuple[str, float, int]


def call_stop(
    contract: Contract, spent: Usage, billed: Mapping[str, bool], rows: Iterable[CallRow], who: str
) -> str | None:
    """The budget that forbids starting call ``who`` (``verifier:NAME``, ``effect:NAME``)
    inside a cycle, after the cycle's calls ``rows``: one crossed (the call in flight overshot
    it), or one reached, unless ``who`` is known to bill nothing (``free_call``). A budget
    reached exactly is used up, as before a cycle: before, a cycle that landed on its $0.30
    cost budget after a visible check still paid a $0.20 held-out check. A call this run made
    and never billed (a test suite, a schema check) cannot cross it, and still runs: three
    $0.10 cycles of a priced actor and a free check fit a $0.30 budget, the third verified."""
    crossed = budget_crossed(contract, spent)
    if crossed is not None:
        return crossed
    used = budget_exhausted(contract, spent)
    if used is None or free_call(billed, rows, who):
        return None
    return used


def free_call(billed: Mapping[str, bool], rows: Iterable[CallRow], who: str) -> bool:
    """Whether ``who`` is known to bill nothing: made before, in the run's concluded cycles
    (``billed``: who -> ever billed) or earlier in this cycle (``rows``), and never billed.
    A call never made is not known free (a first held-out check may cost anything)."""
    seen = billed.get(who)
    if seen:
        return False
    for name, cost, tokens in rows:
        if name == who:
            if cost or tokens:
                return False
            seen = False
    return seen is False


def declared_free(billed: Mapping[str, bool], rows: Iterable[CallRow], who: str) -> bool:
    """Whether ``who``, declared to bill nothing (``Effect.free``), still stands by it: it
    has billed nothing in the run's concluded cycles (``billed``) nor in this one (``rows``).
    Such a call is no priced call: no budget check before it, no row in the cycle's calls
    (so replay, which checks between rows, agrees) unless it reports a cost."""
    if billed.get(who):
        return False
    return not any(name == who and (cost or tokens) for name, cost, tokens in rows)


def noted_calls(billed: dict[str, bool], rows: Iterable[CallRow]) -> dict[str, bool]:
    """``billed`` with a concluded cycle's calls ``rows`` added (a new dict when it changes:
    a state's is shared with the state it was forked from)."""
    out = billed
    for name, cost, tokens in rows:
        paid = bool(cost or tokens)
        if name not in out or (paid and not out[name]):
            if out is billed:
                out = dict(billed)
            out[name] = paid
    return out


def counted_cycle(paid: list[int] | None, spent: Usage) -> list[int] | None:
    """``paid`` (concluded cycles that spent anything: cost, tokens, seconds) with a cycle that
    spent ``spent`` counted (None stays None: a state stored before it was counted)."""
    if paid is None:
        return None
    return [
        paid[0] + (1 if spent.cost_usd else 0),
        paid[1] + (1 if spent.tokens else 0),
        paid[2] + (1 if spent.seconds else 0),
    ]


def no_attempt(check_only: bool, whos: Iterable[object]) -> bool:
    """Whether a cycle made no attempt, from its ``check_only`` flag and who its priced calls
    were (``whos``): a check-only one that called no actor (a person's edit judged,
    ``_edit_check``). Not the cycle of a request denied after an edit beside it: it judged the
    edit check-only, but it began as the actor's attempt (the actor was shown its context, and
    paid). Such a cycle counts no cycle without progress, no paid cycle (``counted_cycle``), no
    context shown (``context_reuse_rate``), no trial (``fit_hazard``); the one rule for the
    engine (``_exec.no_attempt``), the metrics and replay (a store's records and trace files,
    those an older release wrote marking a denied request's cycle ``check_only`` too)."""
    if not check_only:
        return False
    for who in whos:  # noqa: SIM110 - (a loop: no generator a cycle)
        if who == "actor":
            return False
    return True


def record_no_attempt(rec: Mapping[str, object]) -> bool:
    """``no_attempt`` read from a concluded cycle's record (its ``check_only`` flag and the
    ``who`` of its ``calls``): what the metrics, the run page, ``show`` and the spans call a
    check-only cycle."""
    calls = rec.get("calls") or ()
    listed = calls if isinstance(calls, list | tuple) else ()
    return no_attempt(
        bool(rec.get("check_only")), (c.get("who") for c in listed if isinstance(c, Mapping))
    )


def aggregate_score(checks: Sequence[Check], verdicts: dict[str, Verdict]) -> float | None:
    """The weighted mean score of the visible verdicts (``None`` when there are none)."""
    total = weight = 0.0
    for c in checks:
        v = verdicts.get(c.name)
        if v is None or c.held_out:
            continue
        total += c.weight * v.value
        weight += c.weight
    if weight == 0:
        return None
    return total / weight


def success(
    contract: Contract,
    checks: Sequence[Check],
    verdicts: dict[str, Verdict],
    score: float | None,
    *,
    needed: Collection[str] | None = None,
) -> bool:
    """Whether the visible ``verdicts`` make the cycle a success. ``needed``: the names of
    the visible checks flagged required, or of all of them when none is (``Loop``'s
    ``required_names``, derived once: every cycle asks), else found from ``checks``."""
    names: Collection[str]
    if needed is None:
        visible: list[Check] = []
        wanted: set[str] = set()  # (the required visible checks' names: one loop)
        for c in checks:
            if not c.held_out:
                visible.append(c)
                if c.required:
                    wanted.add(c.name)
        needed = wanted or {c.name for c in visible}
    if not needed or score is None:  # (none: no visible check)
        return False
    required = contract.success.required
    names = set(required) if required else needed
    for n in names:  # (a loop, not ``any`` over a generator: every cycle asks)
        if n not in verdicts or not verdicts[n].passed:
            return False
    if not contract.success.allow_vacuous and any(verdicts[n].vacuous for n in names):
        return False  # a check with nothing to check proves nothing
    return reaches(score, contract.success.min_score)


def accept_clean_parts(
    state: TaskState,
    checks: Sequence[Check],
    verdicts: dict[str, Verdict],
    *,
    all_parts: bool,
    when_clean: bool = True,
) -> list[str]:
    """Mark versions: rejected where a visible error finding touches them; accepted where every
    visible verifier checked the part and found nothing (``when_clean``), or everything not
    flagged (``all_parts``, on success). Returns the newly accepted part references."""
    visible: list[tuple[str, Verdict]] = []
    for c in checks:  # (a loop: no comprehension a cycle)
        if not c.held_out and c.name in verdicts:
            visible.append((c.name, verdicts[c.name]))
    # Which parts the visible error findings touch, gathered once (``Finding.touches``): the
    # loop below then looks only at parts not yet accepted, at a set lookup each.
    everything = False
    artifacts: set[str] = set()
    refs: set[str] = set()
    for _, v in visible:
        for f in v.findings:
            if f.severity != "error":
                continue
            if f.artifact is None:
                everything = True
            elif f.part is None:
                artifacts.add(f.artifact)
            else:
                refs.add(part_ref(f.artifact, f.part))
    if all_parts or everything or artifacts:
        targets = state.open_refs()
    else:
        # Only these can change: flagged parts, and parts every visible verifier checked (a
        # verdict that names what it checked names all it can accept); every open part when a
        # verdict that can accept names none (then the flagged ones are not looked for first).
        judged = bool(visible) and when_clean and _all_judged(visible)
        checked: list[tuple[str, ...]] = []
        if judged:
            for _, v in visible:  # (loops: no comprehension a cycle)
                if v.checked is not None:
                    checked.append(v.checked)
        if judged and len(checked) < len(visible):
            targets = state.open_refs()
        else:
            targets = set()
            for r in refs:
                if state.is_open(r):
                    targets.add(r)
            if checked:  # (every visible verdict names what it checked)
                both = set(checked[0]).intersection(*checked[1:])
                targets |= {r for r in both if state.is_open(r)}
    accepted: list[str] = []
    for ref in sorted(targets):
        flagged = everything or ref in refs or (bool(artifacts) and split_ref(ref)[0] in artifacts)
        if all_parts and not flagged:
            state.set_status(ref, "accepted")
            accepted.append(ref)
            continue
        if flagged:
            state.set_status(ref, "rejected")
            continue
        if not visible or not when_clean:
            continue
        clean = all(
            (v.checked is None or ref in v.checked) and (v.passed or v.findings) for _, v in visible
        )
        if clean:
            state.set_status(ref, "accepted")
            accepted.append(ref)
    return accepted


def _all_judged(visible: list[tuple[str, Verdict]]) -> bool:
    """Whether every visible verdict passed or names findings (a loop, not ``all`` over a
    generator: every cycle asks)."""
    for _, v in visible:  # noqa: SIM110 - (``all`` over a generator is what this replaces)
        if not (v.passed or v.findings):
            return False
    return True


def effective_digest(state: TaskState, proposal: Proposal, digest: str) -> str:
    """The digest of what ``proposal`` changes in ``state`` (``digest`` is its own): writes of
    a part's current value left out, a replacement read as the writes it makes. A rejected
    proposal sent again with a cosmetic change (an unchanged part written again, its artifact
    replaced by the same values) matches it, so it is no progress: before, it was judged as new,
    and a reviewer's drift on the same content counted as a material improvement."""
    if proposal.replace is None:
        # The common proposal, every write a change: its own digest, found without building
        # anything (this runs once or twice every cycle).
        artifacts = state.artifacts
        for e in proposal.edits:
            art = artifacts.get(e.artifact)
            p = None if art is None else art.parts.get(e.part)
            if p is not None and same_value(p.value, e.value):
                break
        else:
            return digest
    changes = proposal.changes()
    kept = tuple(
        e for e in changes if (p := state.part(e.ref)) is None or not same_value(p.value, e.value)
    )
    if proposal.replace is None and len(kept) == len(changes):
        return digest  # nothing to leave out after all (a value whose == and != disagree)
    return Proposal(
        edits=kept, plan=proposal.plan, new_steps=proposal.new_steps, effects=proposal.effects
    ).digest()


def improved(
    level: float | None, score: float | None, min_delta: float, newly_passing: bool
) -> bool:
    """A material improvement: the visible score rises above ``level`` (what the last material
    improvement reached; the baseline before any is 0) by at least ``min_delta``, or a
    required check that had never passed passes now. A rise of exactly ``min_delta`` counts,
    whatever the floats' rounding (0.7 - 0.6 is 0.0999…)."""
    if newly_passing:
        return True
    if score is None:
        return False
    base = 0.0 if level is None else level
    return score > base and score - base >= min_delta - _SLACK * max(1.0, abs(min_delta))


def better(best: float | None, score: float | None) -> bool:
    """The candidate scored ``score`` is the run's best so far (a higher visible score than
    ``best``; on a tie the earlier candidate stays the best)."""
    return score is not None and (best is None or score > best)
