"""The stop contract's risk rules in order, as far as they go (pure, no I/O): which rule a
proposal's changed parts or the visible findings trigger, and which rule's own check must be
asked (``risk_steps``); a rule's check that raised (``RiskCheckFailed``). The engine asks the
checks (``_gates.Gates._risk``); the other decision rules are ``_decide``'s."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ._calls import CallTimeout
from ._contract_rules import RiskRule
from ._loop import Check
from ._proposal import Proposal, Verdict
from ._state import TaskState, match_any

__all__ = ["RiskCheckFailed", "risk_steps"]


def risk_steps(
    rules: Sequence[RiskRule],
    state: TaskState,
    proposal: Proposal,
    verdicts: dict[str, Verdict],
    checks: Sequence[Check],
) -> Iterator[tuple[RiskRule, str | None]]:
    """The rules in order, as far as they go: ``(rule, reason)`` where a rule's patterns are
    triggered (the first such is the answer), ``(rule, None)`` where its own ``check`` must be
    asked (a reason from it is the answer; none: go on to the next). The engine
    (``Gates._risk``) asks each check, shown copies of its own; all that is read here of the
    arguments is read before the first step."""
    if not rules:  # most contracts declare none: nothing to gather
        return
    changed = [e.ref for e in proposal.changes() if _changes(state, e.ref)]
    visible_findings = [
        f
        for c in checks
        if not c.held_out and c.name in verdicts
        for f in verdicts[c.name].findings
    ]
    for rule in rules:
        if rule.touches:
            hit = [r for r in changed if match_any(r, rule.touches)]
            if hit:
                yield rule, rule.reason or f"the proposal changes {', '.join(hit)}"
                return
        if rule.findings:
            hit_f = [f for f in visible_findings if f.dimension in rule.findings]
            if hit_f:
                yield rule, rule.reason or "; ".join(f.message for f in hit_f[:3])
                return
        if rule.check is not None and callable(rule.check):
            yield rule, None


class RiskCheckFailed(Exception):
    """A risk rule's own check raised ``error`` (user code, like a verifier that raised)."""

    def __init__(self, rule: str, error: Exception) -> None:
        what = "timed out" if isinstance(error, CallTimeout) else f"raised {type(error).__name__}"
        super().__init__(f"the check of risk rule {rule!r} {what}")
        self.rule = rule
        self.error = error


def _changes(state: TaskState, ref: str) -> bool:
    # ``state`` is the candidate: a part changed when its newest version was written this cycle.
    part = state.part(ref)
    return part is not None and part.current.cycle == state.cycle + 1
