"""`loopwright check`: the "before automating a workflow" questions (docs/concepts.md), answered for a spec."""

from __future__ import annotations

from .._loop import Loop
from .._money_text import usd

__all__ = ["review"]


def review(loop: Loop) -> list[dict[str, str]]:
    """One answer per question: ``{"question", "status": "ok"|"warn", "answer"}``."""
    c = loop.contract
    out: list[dict[str, str]] = []

    def add(question: str, ok: bool, answer: str) -> None:
        out.append({"question": question, "status": "ok" if ok else "warn", "answer": answer})

    visible = loop.visible
    required = c.success.required or tuple(v.name for v in visible if v.required)
    add(
        "What does done mean?",
        bool(visible),
        f"every required visible check passes ({', '.join(required)}) and the score is ≥ "
        f"{c.success.min_score}"
        if visible
        else "nothing: there is no visible verifier, so no run can succeed",
    )

    independent = [v for v in loop.checks if v.fn is not loop.actor]  # type: ignore[comparison-overlap]
    if not loop.checks or not independent:
        add(
            "How is progress checked independently?",
            False,
            "the generator is the only judge of its own work: add a verifier",
        )
    elif not loop.held_out:
        add(
            "How is progress checked independently?",
            False,
            f"visible checks {[v.name for v in visible]} but no held-out check: a loop can learn "
            "to pass what it sees; add a verifier with held_out = true",
        )
    else:
        add(
            "How is progress checked independently?",
            True,
            f"visible: {', '.join(v.name for v in visible)}; held-out (never shown to the actor): "
            f"{', '.join(v.name for v in loop.held_out)}",
        )

    stops = []
    if c.no_progress:
        stops.append(
            f"no progress for {c.no_progress.cycles} cycle(s) (min delta {c.no_progress.min_delta})"
        )
    b = c.budget
    if b.max_cycles_key:
        stops.append(
            f"the task's own cycle cap ({b.max_cycles_key})"
            + (
                f", at most {b.max_cycles} cycles"
                if b.max_cycles and not b.max_cycles_default
                else ""
            )
        )
    elif b.max_cycles and not b.max_cycles_default:
        stops.append(f"{b.max_cycles} cycles")
    # every budget ends a run that goes on without converging, money ones too (with only
    # those, the answer began with "; ")
    if b.max_cost_usd is not None:
        stops.append(f"{usd(b.max_cost_usd)} spent")
    if b.max_tokens is not None:
        stops.append(f"{b.max_tokens} tokens spent")
    if b.max_cycles and b.max_cycles_default:
        # a spend-only contract: cycles that spend nothing never reach its budgets
        stops.append(
            "a stalled run whose cycles spend nothing"
            + (" (of a task without its own cap)" if b.max_cycles_key else "")
            + f": only the default ceiling of "
            f"{b.max_cycles:,} cycles (set budget.max_cycles, max_seconds or a no_progress "
            "rule to choose its end)"
        )
    if b.max_seconds:
        stops.append(f"{b.max_seconds} s")
    if c.marginal_return:
        mr = c.marginal_return
        stops.append(
            f"marginal return below ${mr.value_per_success_usd:g} per success "
            + ("(fitted hazard table)" if mr.hazard else "(prior only: fit one with fit-stop)")
        )
    if c.risk:
        stops.append("pauses for approval on: " + ", ".join(r.name for r in c.risk))
    if not c.no_progress:
        stops.append("no plateau exit (add [contract.no_progress])")
    if not c.risk:
        stops.append("no risk rule pauses anything (add [[contract.risk]])")
    add(
        "What ends a stalled or unsafe run?", bool(c.no_progress) and bool(c.risk), "; ".join(stops)
    )

    money = [usd(b.max_cost_usd)] if b.max_cost_usd is not None else []
    if b.max_tokens is not None:
        money.append(f"{b.max_tokens} tokens")
    add(
        "What may an accepted outcome cost?",
        bool(money),
        ", ".join(money) + " per run"
        if money
        else "unbounded: set contract.budget.max_cost_usd or max_tokens",
    )

    if loop.effects:
        notes = []
        unsafe = []
        unsettled: list[str] = []
        for e in loop.effects:
            rules = [
                f"{r.name} → {r.action}"
                for r in loop.approvals.rules
                if r.kind in ("*", e.kind) and (r.effect is None or r.effect == e.name)
            ]
            default = loop.approvals.decide(e.kind, e.name, {}).action  # used when no rule
            notes.append(
                f"{e.name} ({e.kind}): "
                + (", ".join(rules) if rules else f"no rule, so {default} by default")
            )
            if not e.idempotent and e.reconcile_fn is None:
                unsafe.append(e.name)
            if e.compensate_fn is not None and not (
                e.compensate_idempotent or e.compensate_reconcile_fn is not None
            ):
                unsettled.append(e.name)
        add(
            "What can it do outside the run, and who allows it?",
            not unsafe,
            "; ".join(notes)
            + (
                f"; {', '.join(unsafe)}: neither a reconcile hook nor idempotent=True: after a crash "
                "mid-call they escalate as in doubt (add @effect.reconciler)"
                if unsafe
                else "; every effect is idempotent or reconcilable"
            )
            + (
                f"; the compensations of {', '.join(unsettled)} have neither compensate_reconcile nor "
                "compensate_idempotent=True: one interrupted by a crash escalates as in doubt"
                if unsettled
                else ""
            ),
        )

    from ..verifiers.sandbox import CommandVerifier, SandboxUnavailableError, sandbox_boundary

    sandboxed = [v.fn for v in loop.checks if isinstance(v.fn, CommandVerifier)]
    if sandboxed:
        try:
            where = {
                sandbox_boundary(isolate=f.isolate, allow_unisolated=f.allow_unisolated)
                for f in sandboxed
            }
            refused = ""
        except SandboxUnavailableError as exc:
            where, refused = {"none"}, str(exc)
        add(
            "Where does candidate code run?",
            "none" not in where,
            refused
            or (
                "WITHOUT namespace isolation (isolation=none): only an audit hook guards this "
                "process's secrets, files and network"
                if "none" in where
                else f"in its own namespaces ({', '.join(sorted(where))}), no view of this process"
            ),
        )

    # A held-out sandbox check decides a test outside the candidate's process only where the
    # test's form allows; the others it runs in that process (self-reported, stop 54), whose
    # pass the candidate could have forged: not a check independent of what it judges.
    forgeable = [
        v.name for v in loop.held_out if isinstance(v.fn, CommandVerifier) and not v.fn.judged_only
    ]
    # and every test, judged or not, where the judge is within its reach (stop 56)
    apart = {
        v.name: why
        for v in loop.held_out
        if isinstance(v.fn, CommandVerifier) and (why := v.fn.not_separated())
    }
    said = [
        f"yes, where a test is not of the judged form: {', '.join(forgeable)} run(s) such "
        "tests in the candidate's own process (self-reported, marked in the verdict), which "
        "could forge them (such a pass is marked, and false_success_rate leaves it out); "
        "set judged_only = true to fail them instead"
    ] * bool(forgeable)
    said += [
        f"yes, every test of {name}: its judge is not separated from the candidate ({why}), "
        "which can write its verdicts (each is marked self-reported, and false_success_rate "
        "leaves such a pass out); run it inside a boundary (bwrap) as a user other than root"
        for name, why in apart.items()
    ]
    if said:
        add("Can the candidate decide its own held-out tests?", False, "; ".join(said))

    if loop.reflector is not None:
        fn = loop.reflector
        add(
            "What does it note after a failed cycle?",
            True,
            f"a reflection by {getattr(fn, '__qualname__', type(fn).__name__)} for the task's "
            f"next attempts (the newest {loop.reflections_kept} stay active; docs/memory.md)",
        )

    owner = c.escalation.owner
    add(
        "Who owns the unresolved exception?",
        bool(owner),
        f"{owner}" + (f" via {c.escalation.route}" if c.escalation.route else "")
        if owner
        else "nobody: set [contract.escalation] owner",
    )
    return out
