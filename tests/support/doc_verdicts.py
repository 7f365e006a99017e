"""The verdict the edit-judging tests' checks give: every part of ``doc`` that is not "good" is
a located finding, the score the share of good parts."""

from __future__ import annotations

from collections.abc import Sequence

import loopwright as lw


def parts_good(
    state: lw.TaskState,
    parts: Sequence[str],
    *,
    usage: lw.Usage | None = None,
    checked: bool = False,
) -> lw.Verdict:
    """Passed when each of ``parts`` of ``doc`` is "good"; ``checked``: the verdict names the
    parts it judged (so it may accept them)."""
    doc = state.artifacts["doc"].values()
    bad = [lw.Finding(f"{p} is wrong", "doc", p) for p in parts if doc[p] != "good"]
    return lw.Verdict(
        passed=not bad,
        score=1 - len(bad) / len(parts),
        findings=tuple(bad),
        checked=tuple(f"doc/{p}" for p in parts) if checked else None,
        usage=usage,
    )
