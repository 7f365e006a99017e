"""Wrong types given to the public API's run calls are a ``ConfigError`` naming the argument,
raised before anything is written: not a ``TypeError`` or ``AttributeError`` from deep inside
the engine (a caller catching ``LoopwrightError`` let those through), and a NaN lease, which
never ran out, is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "body"),))

    return lw.Loop(
        name="types",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


TASK = {"artifacts": {"doc": {"body": "x"}}}

CALLS: dict[str, tuple[str, Callable[[lw.Runtime, str], Any]]] = {
    "task is a list": ("task", lambda rt, rid: rt.run_sync(_loop(), [1, 2], task_key="t1")),
    "loop is a string": ("loop", lambda rt, rid: rt.run_sync("types", TASK, task_key="t2")),  # type: ignore[arg-type]
    "resume without a loop": ("loop", lambda rt, rid: rt.resume_sync(rid, None)),  # type: ignore[arg-type]
    "run_many of None": (
        "tasks",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), None)),  # type: ignore[arg-type]
    ),
    "run_many of one task (a mapping)": (
        "tasks",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), TASK)),
    ),
    "run_many at concurrency 'x'": (
        "concurrency",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), [TASK], concurrency="x")),  # type: ignore[arg-type]
    ),
    # Outside probe (stop 42): two tasks with one key drove one run twice at once, and
    # run_many raised StaleLeaseError (the other task never ran); the CLI refuses such a file
    "run_many with one key twice": (
        "tasks",
        lambda rt, rid: asyncio.run(
            rt.run_many(_loop(), [{**TASK, "task_key": "d"}, {**TASK, "task_key": "d"}])
        ),
    ),
    "run_many with one key twice, by key_of": (
        "tasks",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), [TASK, TASK], key_of=lambda t, i: "d")),
    ),
    # Outside probe (probe43a): a bad task after good ones was refused once the good ones'
    # runs were written and started, then left "running" with no one driving them
    "run_many with a task not a mapping after good ones": (
        "task",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), [TASK, TASK, 5])),  # type: ignore[list-item]
    ),
    "run_many with a bad key after good ones": (
        "task.task_key",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), [TASK, {**TASK, "task_key": " k "}])),
    ),
    "run_many with a bad artifact name after good ones": (
        "task.artifacts",
        lambda rt, rid: asyncio.run(
            rt.run_many(_loop(), [TASK, {"artifacts": {"a/b": {"x": 1}}}], concurrency=1)
        ),
    ),
    "rollback to no cycle": (
        "to_cycle",
        lambda rt, rid: rt.rollback(rid, None, by="ann"),  # type: ignore[arg-type]
    ),
    "rollback by a number": ("by", lambda rt, rid: rt.rollback(rid, 1, by=5)),  # type: ignore[arg-type]
    "edit of part 5": ("", lambda rt, rid: rt.edit(rid, 5, "v", by="ann")),  # type: ignore[arg-type]
    # Outside probe (pyapi47): concurrency 0 ran the tasks one at a time, silently; a key_of
    # that is not callable was a TypeError from inside run_many
    "run_many at concurrency 0": (
        "concurrency",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), [TASK], concurrency=0)),
    ),
    "run_many with a key_of not callable": (
        "key_of",
        lambda rt, rid: asyncio.run(rt.run_many(_loop(), [TASK], key_of="id")),  # type: ignore[arg-type]
    ),
}


@pytest.mark.parametrize("case", sorted(CALLS))
def test_a_wrong_type_is_a_config_error_and_nothing_changes(tmp_path: Path, case: str) -> None:
    field, call = CALLS[case]
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        done = rt.run_sync(_loop(), TASK, task_key="kept")
        before = [(r.run_id, r.status, r.cycle) for r in rt.store.list_runs()]
        with pytest.raises(lw.ConfigError) as err:
            call(rt, done.run_id)
        assert err.value.field == (field or None), err.value
        assert [(r.run_id, r.status, r.cycle) for r in rt.store.list_runs()] == before


@pytest.mark.parametrize("ttl", [float("nan"), float("inf"), "60", True])
def test_a_lease_must_be_a_finite_number_of_seconds(tmp_path: Path, ttl: Any) -> None:
    with pytest.raises(lw.ConfigError) as err:
        lw.Runtime(str(tmp_path / "s.db"), lease_ttl_s=ttl)
    assert err.value.field == "lease_ttl_s"


# Outside probe (pyapi47): memory="no" and group_commit="off" were taken as true (memory on);
# owner=5 failed later, deep inside the lease code; a tracer_provider without get_tracer was an
# AttributeError from the trace package. And each refusal came after the store was opened (a
# new file created, a connection left open): now every argument is checked first.
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory", "no"),
        ("group_commit", "off"),
        ("calls_in_threads", 1),
        ("owner", 5),
        ("owner", " "),
        ("tracer_provider", "http://localhost:4318"),
        ("lease_ttl_s", -1),
        ("history_window", 0),
    ],
)
def test_a_runtime_argument_is_checked_before_the_store_is_opened(
    tmp_path: Path, field: str, value: Any
) -> None:
    db = tmp_path / "new.db"
    with pytest.raises(lw.ConfigError) as err:
        lw.Runtime(str(db), **{field: value})
    assert err.value.field == field
    assert not db.exists()  # no store made for a Runtime that was refused


def test_run_many_has_its_sync_twin(tmp_path: Path) -> None:
    """The Runtime's docstring promises a ``*_sync`` twin of every async method; run_many had
    none (outside probe pyapi47). Inside a running event loop it is refused, as run_sync is."""
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        got = rt.run_many_sync(_loop(), [TASK, TASK], key_of=lambda t, i: f"m{i}")
        assert [r.task_key for r in got] == ["m0", "m1"]
        assert all(r.status == "stopped" for r in got)

        async def inside() -> None:
            rt.run_many_sync(_loop(), [TASK])

        with pytest.raises(RuntimeError, match="await the async one"):
            asyncio.run(inside())
        assert len(rt.store.list_runs()) == 2  # nothing started from inside the loop
