"""The candidate state of a cycle: the state as it would be with the actor's proposal applied
(its part changes and its plan steps), and each verifier's own copies of it.

``_cycle`` builds it before the verifiers judge a proposal; ``_parking`` builds it again for a
parked proposal a person approved. The run's own state is never touched here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._plan import STEP_STATUSES
from ._proposal import Proposal
from ._state import PlanStep, TaskState, VersionLoader

__all__ = ["candidate_of", "verifier_copies"]


def verifier_copies(
    candidate: TaskState, loader: VersionLoader, proposal: Proposal, light: bool, settled: bool
) -> tuple[TaskState, Proposal]:
    """A verifier's arguments: its own copies of the candidate and of the proposal (whose
    values the candidate shares; a settled proposal is its own copy, asked once a cycle)."""
    return candidate.detached(loader, light=light), proposal if settled else proposal.owned()


def candidate_of(
    state: TaskState, proposal: Proposal, n: int, changes: Sequence[Any] | None = None
) -> TaskState:
    """The state as it would be with ``proposal`` applied in cycle ``n`` (``state`` untouched);
    ``changes``: its ``changes()``, where the caller has them."""
    candidate = state.fork()
    for e in proposal.changes() if changes is None else changes:
        candidate.set_part(e.artifact, e.part, e.value, n)
    _apply_plan(candidate, proposal)
    return candidate


def _apply_plan(state: TaskState, proposal: Proposal) -> None:
    for step in proposal.new_steps:
        # a step of our own (the actor's were checked as its proposal was taken,
        # ``check_new_steps``; a stored proposal's are read as written)
        state.add_step(PlanStep.from_dict(step.to_dict(), stored=True))
    if not proposal.plan:
        return  # most proposals (the default plan is a mappingproxy: its items cost more)
    for step_id, status in proposal.plan.items():
        if status in STEP_STATUSES:  # an unknown status is ignored, as ever
            state.set_step_status(step_id, status)
