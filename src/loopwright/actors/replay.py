"""Replay of recorded outputs: an actor that proposes, cycle by cycle, what a recorded run
produced.

The recording to use is derived from the context alone (``ctx.cycle``), never from a counter
kept in memory, so a run resumed in another process (after a crash, an approval) continues with
the right recording. Running out of recordings is a permanent condition: the actor returns
``Proposal(escalate="no more recorded attempts")`` and the run ends ``escalated`` with its
escalation packet, instead of raising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._proposal import Context, Proposal
from .._usage import Usage

__all__ = ["NO_MORE_ATTEMPTS", "ReplayActor", "replay_actor"]

NO_MORE_ATTEMPTS = "no more recorded attempts"


class ReplayActor:
    """Replays ``task[attempts_key]`` in order as proposals for one part.

    Each recording is either the new value itself or a mapping ``{"code"|"value": ...,
    "usage": {"cost_usd", "tokens", "seconds"}, "note": ...}``; its recorded usage is reported
    as the proposal's usage (what the attempt cost when it was recorded).

    With ``evaluate_initial`` (the default), cycle 1 proposes no change, so that the visible
    and held-out verifiers judge the initial artifact (LDB's seed, ``implementations[0]``) the
    way the recorded loop did before its first repair; recording ``k`` (0-based) is then
    proposed in cycle ``k + 2``. Without it, recording ``k`` is proposed in cycle ``k + 1``.

    Attributes:
        attempts_key: where the recordings are in the task (a dotted path, e.g.
            ``"recorded.attempts"``).
        artifact, part: the part each recording replaces.
    """

    def __init__(
        self,
        *,
        attempts_key: str = "recorded.attempts",
        artifact: str = "program",
        part: str = "code",
        evaluate_initial: bool = True,
    ) -> None:
        self.attempts_key = attempts_key
        self.artifact = artifact
        self.part = part
        self.evaluate_initial = evaluate_initial
        self.__name__ = "replay"

    def recordings(self, task: Mapping[str, Any]) -> Sequence[Any]:
        node: Any = task
        for key in self.attempts_key.split("."):
            if not isinstance(node, Mapping) or key not in node:
                return ()
            node = node[key]
        if not isinstance(node, Sequence) or isinstance(node, str | bytes):
            raise ValueError(f"task.{self.attempts_key} must be a list of recorded attempts")
        return node

    def index(self, ctx: Context) -> int:
        """The 0-based recording cycle ``ctx.cycle`` replays (-1: the initial evaluation)."""
        return ctx.cycle - (2 if self.evaluate_initial else 1)

    def __call__(self, ctx: Context) -> Proposal:
        k = self.index(ctx)
        if k < 0:
            return Proposal(note="evaluate the initial artifact (recorded attempt 0)")
        recs = self.recordings(ctx.task)
        if k >= len(recs):
            return Proposal(
                escalate=NO_MORE_ATTEMPTS,
                note=f"all {len(recs)} recorded attempt(s) were replayed",
            )
        rec = recs[k]
        usage = None
        note = f"recorded attempt {k + 1} of {len(recs)}"
        if isinstance(rec, Mapping):
            value = rec["code"] if "code" in rec else rec["value"]
            if rec.get("usage"):
                usage = Usage.from_dict(dict(rec["usage"]))
            note = str(rec.get("note") or note)
        else:
            value = rec
        return Proposal.edit(self.artifact, {self.part: value}, note=note, usage=usage)


def replay_actor(
    *,
    attempts_key: str = "recorded.attempts",
    artifact: str = "program",
    part: str = "code",
    evaluate_initial: bool = True,
) -> ReplayActor:
    """A ``ReplayActor`` from plain options (a loop spec's ``[actor] options`` table)."""
    return ReplayActor(
        attempts_key=attempts_key,
        artifact=artifact,
        part=part,
        evaluate_initial=evaluate_initial,
    )
