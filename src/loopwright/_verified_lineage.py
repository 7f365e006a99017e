"""``regression_rate``'s reading of one run (docs/metrics.md): its kept verified cycles, and
the base a fork's first verified cycle is compared with (moved out of ``_run_metrics``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._concluded import concluded_in
from ._errors import ConfigError, RunNotFoundError
from ._inherited import fork_seq
from .store import RunRecord, Store

__all__ = ["CONCLUDED_DECISIONS", "Verified", "VerifiedLineage", "concludes_cycle", "fork_base"]

# Decisions of a concluded cycle (the others are mid-cycle commits: parked, effects, rollback).
CONCLUDED_DECISIONS = frozenset({"accepted", "revise", "refused", "asked"})


def concludes_cycle(record: Mapping[str, Any] | None) -> bool:
    """Whether a checkpoint's record concludes a cycle (not a mid-cycle commit or rollback)."""
    return (
        record is not None and record.get("decision") in CONCLUDED_DECISIONS and "cycle" in record
    )


#: A verified cycle: its number and the visible checks that passed in it.
Verified = tuple[int, frozenset[str]]


class VerifiedLineage:
    """``regression_rate``'s reading of one run: its kept verified cycles, newest last (those a
    rollback undid are dropped; a fork starts from its origin's last one at the fork point).
    Held run-length: an entry is the first of consecutive verified cycles whose checks passed
    alike, so a long steady run holds one entry (invariant 8), and after a rollback to k the
    last entry starting at or before k holds what passed in the last verified cycle ≤ k."""

    def __init__(self, base: Verified | None = None) -> None:
        self.kept: list[Verified] = [base] if base is not None else []

    def record(
        self, rec: Mapping[str, Any], concluded: bool
    ) -> tuple[bool, tuple[str, ...]] | None:
        """Fold one checkpoint record in. For a verified cycle: (whether it had a previous
        verified cycle, the checks that passed there and fail here); else None."""
        if rec.get("decision") == "rollback":
            to = int(rec.get("to_cycle") or 0)
            while self.kept and self.kept[-1][0] > to:  # (kept in cycle order)
                self.kept.pop()
            return None
        visible = rec.get("visible") or {}
        if not concluded or not visible:
            return None
        passed = frozenset(k for k, v in visible.items() if (v or {}).get("passed"))
        prev = self.kept[-1][1] if self.kept else None
        if prev != passed:
            self.kept.append((int(rec["cycle"]), passed))
        if prev is None:
            return False, ()
        return True, tuple(sorted(k for k in visible if k in prev and k not in passed))

    @property
    def last(self) -> Verified | None:
        return self.kept[-1] if self.kept else None


def fork_base(st: Store, run: RunRecord) -> Verified | None:
    """For a fork, its origin's last verified cycle at the fork point (the kept lineage up to
    the origin's checkpoint it was made from; a fork of a fork reaches back further): what the
    fork's first verified cycle is compared with (numbered as ``VerifiedLineage`` keeps it: maybe the
    first of the cycles before it that passed alike). None for a run that is not a fork, a
    fork of a point before any verified cycle, or one whose origin is gone."""
    if run.forked_from is None or run.forked_at is None:
        return None
    try:
        origin = st.get_run(run.forked_from)
        upto = fork_seq(st, run)
        if upto is None:  # a fork made before the seq was recorded
            upto = concluded_in(st, origin.run_id, run.forked_at, "forked_at").seq
    except (RunNotFoundError, ConfigError):
        return None
    lineage = VerifiedLineage(fork_base(st, origin))
    for seq, _cycle, record in st.iter_records(origin.run_id):
        if seq > upto:
            break
        lineage.record(record or {}, concludes_cycle(record))
    return lineage.last
