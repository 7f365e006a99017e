"""A run's result reads its older versions when they are wanted (invariant 8 at the API's
edge): the run ends holding each part's current and accepted versions only, and
``result.state.part(ref).versions`` still lists every version — through the store while it is
open, through its database opened again once it is closed. Both stores."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw
from loopwright import StoreError

TASK = {"goal": "a long loop", "artifacts": {"doc": {"body": "", "title": "t"}}}
CYCLES = 40


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def verify(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", "body"),)
        )

    return lw.Loop(
        name="result-versions",
        actor=actor,
        verifiers=[lw.Check(fn=verify, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )


def _held(part: lw.Part) -> int:
    return len(part._known)  # the versions in memory now


def test_a_result_holds_few_versions_and_reads_the_rest_open_or_closed(url: str) -> None:
    rt = lw.Runtime(url)
    try:
        result = rt.run_sync(_loop(), TASK, task_key="k")
        body = result.state.part("doc/body")
        assert body is not None and body.count == CYCLES + 1
        assert _held(body) <= 3  # not every version: the run's end reads none of them
        expected = [(v.n, v.value, v.status) for v in rt.store.versions(result.run_id, "doc/body")]
        assert len(expected) == CYCLES + 1
    finally:
        rt.close()
    assert rt.store.closed
    # Read after the store is closed: the database is opened again for it.
    assert [(v.n, v.value, v.status) for v in body.versions] == expected
    assert body.version(2).value == "draft 1"
    title = result.state.part("doc/title")
    assert title is not None and [v.value for v in title.versions] == ["t"]


def test_reading_after_the_file_is_gone_is_a_clear_error_and_makes_no_new_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gone.db"
    with lw.Runtime(f"sqlite:///{path}") as rt:
        result = rt.run_sync(_loop(), TASK, task_key="k")
    for f in tmp_path.glob("gone.db*"):
        f.unlink()
    body = result.state.part("doc/body")
    assert body is not None
    with pytest.raises(StoreError, match="no longer exists"):
        body.versions  # noqa: B018
    assert not path.exists()
    # what the run ended holding is still there
    assert body.value == f"draft {CYCLES}"
