"""Two open runtimes of one process given one ``owner=`` are refused (api49; holders48 found
it): the store lets an owner take its own lease again, so an edit through the second runtime
took the lease of a run the first was executing, and that run was fenced out mid-cycle
(``StaleLeaseError``) and left ``running`` with no holder."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import loopwright as lw


def test_a_second_open_runtime_with_the_same_owner_is_refused(tmp_path: Path) -> None:
    with lw.Runtime(tmp_path / "a.db", owner="worker-1") as first:
        with pytest.raises(lw.ConfigError) as info:
            lw.Runtime(tmp_path / "b.db", owner="worker-1")
        assert info.value.field == "owner"
        assert "'worker-1'" in info.value.message and "not closed" in info.value.message
        assert not (tmp_path / "b.db").exists()  # refused before its store was opened
        assert first.owner == "worker-1"
        # another name, or none (a generated, unique one), is fine beside it
        with lw.Runtime(tmp_path / "a.db", owner="worker-2"), lw.Runtime(tmp_path / "a.db"):
            pass
    # closed: the name is free again (and a second close frees nothing of another's)
    again = lw.Runtime(tmp_path / "a.db", owner="worker-1")
    first.close()
    with pytest.raises(lw.ConfigError):
        lw.Runtime(tmp_path / "a.db", owner="worker-1")
    again.close()
    lw.Runtime(tmp_path / "a.db", owner="worker-1").close()


def test_a_runtime_whose_store_failed_to_open_holds_no_owner(tmp_path: Path) -> None:
    with pytest.raises(lw.LoopwrightError):
        lw.Runtime(tmp_path, owner="worker-1")  # a folder, not a store file
    lw.Runtime(tmp_path / "a.db", owner="worker-1").close()


def test_the_run_one_runtime_executes_is_not_fenced_out_by_another(tmp_path: Path) -> None:
    """What one name per runtime keeps: a person's edit through another runtime of the process
    is refused while the run executes (it took the lease with the same name before)."""
    other: list[lw.Runtime] = []
    seen: list[str] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            with pytest.raises(lw.ConflictError) as info:
                other[0].edit(ctx.run_id, "doc/title", "by-b", by="bob")
            seen.append(str(info.value))
        return lw.Proposal.edit("doc", {"body": f"c{ctx.cycle}"})

    loop = lw.Loop(
        name="own",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    db = tmp_path / "s.db"
    with lw.Runtime(db, owner="worker-1") as a, lw.Runtime(db, owner="worker-2") as b:
        other.append(b)
        result = a.run_sync(loop, {"artifacts": {"doc": {"title": "t", "body": "b"}}})
    assert result.status == "accepted", result
    assert seen and "executing elsewhere" in seen[0]


def test_a_runtime_no_longer_referenced_frees_its_owner(tmp_path: Path) -> None:
    """Not closed, but let go (a reference cycle keeps it until a collection): its name is
    free; one still referenced is not, and the refusal says to close it."""
    gc.disable()  # (the cycle is collected by the refusal's own collection, not by chance)
    try:
        held = lw.Runtime(tmp_path / "a.db", owner="worker-1")
        held.store.close()  # (its connection: the runtime itself is left unclosed)
        with pytest.raises(lw.ConfigError) as info:
            lw.Runtime(tmp_path / "a.db", owner="worker-1")
        assert "rt.close()" in info.value.message and "notebook" in info.value.message
        held.itself = held  # type: ignore[attr-defined]  # a reference cycle
        del held
        lw.Runtime(tmp_path / "a.db", owner="worker-1").close()
    finally:
        gc.enable()


class _BrokenProvider:
    """A tracer provider whose ``get_tracer`` fails: the last step of ``Runtime(...)``, after
    its owner is held and its store opened."""

    def get_tracer(self, *args: object, **kw: object) -> object:
        raise RuntimeError("no tracer (injected)")


def test_a_runtime_that_failed_after_its_store_opened_holds_no_owner(tmp_path: Path) -> None:
    # (review49c) the half-built runtime is kept by the error's traceback while the caller
    # handles it: its owner name stayed held, and the retry in the handler was refused
    try:
        lw.Runtime(tmp_path / "a.db", owner="worker-1", tracer_provider=_BrokenProvider())
    except RuntimeError as exc:
        assert "no tracer" in str(exc)
        lw.Runtime(tmp_path / "a.db", owner="worker-1").close()  # before: ConfigError
    else:
        pytest.fail("the broken tracer provider was not called")


def test_runtimes_collected_unclosed_leave_no_entries(tmp_path: Path) -> None:
    # (review49c) a runtime let go without close() freed its name but kept its entry, a dead
    # reference, until that name was held again: one a job for owners named per job
    from loopwright import _live_owners

    before = set(_live_owners._LIVE)
    for i in range(20):
        lw.Runtime(tmp_path / "a.db", owner=f"job-{i}")  # never closed
    gc.collect()
    assert set(_live_owners._LIVE) == before  # before: 20 dead entries more
    with lw.Runtime(tmp_path / "a.db", owner="job-3"):  # the name is free, as before
        assert "job-3" in _live_owners._LIVE
    assert "job-3" not in _live_owners._LIVE
