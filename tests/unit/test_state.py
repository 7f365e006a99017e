"""TaskState: versions, acceptance, the best candidate, the plan, serialisation."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright import ConfigError
from loopwright._state import match_any, split_ref


def _state() -> lw.TaskState:
    return lw.TaskState.from_task(
        {"goal": "g", "artifacts": {"doc": {"a": 1, "b": 2}}}, task_key="k"
    )


def test_from_task_builds_version_one_of_each_part() -> None:
    s = _state()
    assert s.values() == {"doc": {"a": 1, "b": 2}}
    p = s.part("doc/a")
    assert p is not None
    assert [v.n for v in p.versions] == [1]
    assert p.status == "candidate"
    assert s.task_key == "k"
    assert s.goal == "g"


def test_set_part_appends_versions_and_skips_unchanged_values() -> None:
    s = _state()
    assert s.set_part("doc", "a", 1, 1) is False  # same value: no new version
    assert s.set_part("doc", "a", 10, 1) is True
    assert s.set_part("doc", "a", 11, 2) is True
    p = s.part("doc/a")
    assert p is not None
    assert [(v.n, v.value, v.cycle) for v in p.versions] == [(1, 1, 0), (2, 10, 1), (3, 11, 2)]
    assert p.version(2).value == 10
    assert p.value == 11
    assert s.set_part("new", "x", "v", 3) is True  # a new artifact and part
    assert s.values()["new"] == {"x": "v"}


def test_accepted_version_survives_later_versions() -> None:
    s = _state()
    p = s.part("doc/a")
    assert p is not None
    p.current.status = "accepted"
    s.set_part("doc", "a", 99, 1)
    # The accepted version is never lost or overwritten: it is still there and still accepted.
    assert p.accepted is not None
    assert p.accepted.value == 1
    assert p.status == "candidate"
    assert s.accepted_values() == {"doc": {"a": 1}}


def test_best_values_take_each_part_at_the_best_cycle() -> None:
    s = _state()
    s.set_part("doc", "a", 10, 1)
    s.best_parts = {ref: len(p.versions) for ref, p in s.iter_parts()}  # best = after cycle 1
    s.set_part("doc", "a", 20, 2)
    s.set_part("doc", "b", 30, 2)
    s.set_part("doc", "c", 40, 2)  # a part that did not exist at the best cycle
    assert s.best_values() == {"doc": {"a": 10, "b": 2, "c": 40}}
    assert s.values() == {"doc": {"a": 20, "b": 30, "c": 40}}


def test_best_values_default_to_current() -> None:
    s = _state()
    s.set_part("doc", "a", 5, 1)
    assert s.best_values() == s.values()


def _plan_state() -> lw.TaskState:
    return lw.TaskState.from_task(
        {
            "artifacts": {"page": {"p1": "", "p2": "", "p3": ""}},
            "plan": [
                {"id": "s1", "parts": ["page/p1"]},
                {"id": "s2", "parts": ["page/p2"], "depends_on": ["s1"]},
                {"id": "s3", "parts": ["page/p3"], "depends_on": ["s1", "s2"]},
            ],
        }
    )


def test_next_step_follows_dependencies() -> None:
    s = _plan_state()
    nxt = s.next_step()
    assert nxt is not None
    assert nxt.id == "s1"
    assert s.set_step_status("s1", "done")
    nxt = s.next_step()
    assert nxt is not None
    assert nxt.id == "s2"
    s.set_step_status("s2", "blocked")
    assert s.next_step() is None  # s3 waits for s2
    s.set_step_status("s2", "done")
    s.set_step_status("s3", "done")
    assert s.next_step() is None
    assert s.completed_steps == ["s1", "s2", "s3"]


def test_refresh_plan_marks_steps_done_when_their_parts_are_accepted() -> None:
    s = _plan_state()
    s.refresh_plan()
    assert s.completed_steps == []
    p1 = s.part("page/p1")
    assert p1 is not None
    p1.current.status = "accepted"
    s.refresh_plan()
    assert s.completed_steps == ["s1"]
    # A step naming a part that does not exist is never done.
    s.plan.append(lw.PlanStep(id="s4", parts=("page/missing",)))
    s.refresh_plan()
    assert "s4" not in s.completed_steps


def test_plan_validation() -> None:
    with pytest.raises(lw.ConfigError, match=r"task\.plan\[0\]"):
        lw.TaskState.from_task({"plan": [{"title": "no id"}]})
    with pytest.raises(lw.ConfigError, match="unknown step status"):
        lw.PlanStep.from_dict({"id": "x", "status": "finished"})
    with pytest.raises(lw.ConfigError, match=r"task\.artifacts"):
        lw.TaskState.from_task({"artifacts": ["a"]})
    with pytest.raises(lw.ConfigError, match=r"task\.artifacts\.doc"):
        lw.TaskState.from_task({"artifacts": {"doc": 3}})


def test_refs() -> None:
    assert split_ref("a/b/c") == ("a", "b/c")
    for bad in ("nopart", "/x", "x/"):
        with pytest.raises(lw.ConfigError):
            split_ref(bad)
    assert match_any("invoice/payment", ["*/payment"])
    assert not match_any("invoice/qty", ["*/payment", "po/*"])


def test_finding_touches() -> None:
    f = lw.Finding("m", "doc", "a")
    assert f.touches("doc", "a")
    assert not f.touches("doc", "b")
    assert lw.Finding("m", "doc").touches("doc", "b")  # artifact-wide
    assert lw.Finding("m").touches("x", "y")  # run-wide
    assert f.ref == "doc/a"


# --- serialisation property -------------------------------------------------------------
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
names = st.text(alphabet="abcxyz_", min_size=1, max_size=6)


@st.composite
def states(draw: Any) -> lw.TaskState:
    s = lw.TaskState(goal=draw(st.text(max_size=10)), task_key=draw(names), project=draw(names))
    for art in draw(st.lists(names, max_size=3, unique=True)):
        for part in draw(st.lists(names, min_size=1, max_size=3, unique=True)):
            for cycle, value in enumerate(draw(st.lists(json_value, min_size=1, max_size=3))):
                s.set_part(art, part, value, cycle)
            p = s.artifacts[art].parts[part]
            p.current.status = draw(st.sampled_from(["candidate", "accepted", "rejected"]))
    ids = draw(st.lists(names, max_size=4, unique=True))
    for i, sid in enumerate(ids):
        s.plan.append(
            lw.PlanStep(
                id=sid,
                title=draw(st.text(max_size=5)),
                depends_on=tuple(ids[:i][:1]),
                parts=tuple(ref for ref, _ in list(s.iter_parts())[:1]),
                status=draw(st.sampled_from(["pending", "in_progress", "done", "blocked"])),
            )
        )
    for _ in range(draw(st.integers(0, 3))):
        s.findings.append(
            lw.Finding(
                draw(st.text(max_size=10)),
                draw(st.none() | names),
                draw(st.none() | names),
                draw(names),
                draw(st.sampled_from(["error", "warning"])),
                draw(names),
                draw(st.dictionaries(names, json_value, max_size=2)),
            )
        )
    s.cycle = draw(st.integers(0, 50))
    s.spent = lw.Usage(
        draw(st.floats(0, 100)), draw(st.integers(0, 10**6)), draw(st.floats(0, 100))
    )
    s.best_score = draw(st.none() | st.floats(0, 1))
    s.stall = draw(st.integers(0, 5))
    s.rejected = draw(st.lists(names, max_size=3))
    s.notes = [{"kind": "note", "text": t} for t in draw(st.lists(st.text(max_size=5), max_size=2))]
    s.best_parts = {ref: len(p.versions) for ref, p in s.iter_parts()}
    return s


@given(states())
def test_state_round_trips_through_json(s: lw.TaskState) -> None:
    d = s.to_dict()
    back = lw.TaskState.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == json.loads(json.dumps(d))
    assert back.values() == json.loads(json.dumps(s.values()))
    assert back.completed_steps == s.completed_steps
    assert [f.to_dict() for f in back.findings] == json.loads(
        json.dumps([f.to_dict() for f in s.findings])
    )


@given(states())
def test_fork_is_an_independent_copy(s: lw.TaskState) -> None:
    before = json.dumps(s.to_dict())
    f = s.fork()
    assert f.to_dict() == s.to_dict()
    # what the engine does to a candidate: new versions, current statuses, plan, lists
    for ref, p in list(f.iter_parts()):
        f.set_status(ref, "rejected" if p.current.status != "rejected" else "accepted")
        art, part = split_ref(ref)
        f.set_part(art, part, {"new": ref}, 99)
    for step in list(f.plan):
        f.set_step_status(step.id, "done")
    f.add_step(lw.PlanStep("added-to-the-fork"))
    f.findings.append(lw.Finding("x"))
    f.notes.append({"kind": "note", "text": "n"})
    assert json.dumps(s.to_dict()) == before


def test_fork_shares_the_append_only_rejected_digests() -> None:
    # Copying them per cycle would cost O(cycles) (invariant 8); they only ever grow.
    s = lw.TaskState()
    f = s.fork()
    f.rejected.append("d")
    assert f.rejected is s.rejected
    assert "d" in s.rejected and "e" not in s.rejected
    back = lw.TaskState.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back.rejected == ["d"] and "d" in back.rejected


def test_rejected_digests_past_the_window_are_asked_about_only_where_they_may_be() -> None:
    # Memory holds the newest digests; the store (here a set, counting what it is asked) the
    # ones let go. Every digest rejected is still found; one never rejected is ruled out by
    # the filter without asking, but where its bits collide (rare); a state loaded from a
    # store asks about every digest it does not hold.
    from loopwright._digests import REJECTED_WINDOW, Digests

    store: set[str] = set()
    asked: list[str] = []

    def lookup(d: str) -> bool:
        asked.append(d)
        return d in store

    d = Digests(lookup=lookup, stored=False)
    names = [f"rejected-{i}" for i in range(5000)]
    for i, name in enumerate(names):
        d.append(name)
        store.add(name)
        if i % 7 == 0:
            d.durable(d.gone + len(d))  # a commit
    d.durable(d.gone + len(d))
    assert REJECTED_WINDOW <= len(d) < 2 * REJECTED_WINDOW and d.gone + len(d) == 5000
    assert d.since(4990) == (names[4990:], 5000)
    assert all(n in d for n in names) and asked == names[: 5000 - len(d)]
    asked.clear()
    others = [f"new-{i}" for i in range(5000)]
    assert not any(n in d for n in others)
    assert len(asked) < 100  # 0.5 % expected
    loaded = Digests(lookup=lookup)  # stored=True: the store may hold any
    asked.clear()
    assert names[0] in loaded and "new-0" not in loaded and asked == [names[0], "new-0"]
    plain = Digests(["a"])  # no store: only what it holds
    assert "a" in plain and "b" not in plain
    plain.durable(1)
    assert plain == ["a"]


def test_fork_shares_only_history_versions() -> None:
    s = lw.TaskState()
    for c in range(3):
        s.set_part("doc", "p", f"v{c}", c)
    f = s.fork()
    # copy on write: shared until one side changes it, whatever the number of parts
    assert f.artifacts["doc"].parts["p"] is s.artifacts["doc"].parts["p"]
    f.set_status("doc/p", "accepted")
    old, new = s.artifacts["doc"].parts["p"].versions, f.artifacts["doc"].parts["p"].versions
    assert [a is b for a, b in zip(old, new, strict=True)] == [True, True, False]
    assert s.part("doc/p").status == "candidate"  # type: ignore[union-attr]
    # the source copies too before it changes a part it now shares
    g = s.fork()
    s.set_part("doc", "p", "v9", 9)
    assert g.part("doc/p").count == 3 and s.part("doc/p").count == 4  # type: ignore[union-attr]
    assert f.part("doc/p").status == "accepted"  # type: ignore[union-attr]


def test_changes_are_tracked_per_part() -> None:
    s = lw.TaskState.from_task({"artifacts": {"doc": {f"p{i}": i for i in range(50)}}})
    s.take_changes()
    assert s.open_refs() == {f"doc/p{i}" for i in range(50)}
    f = s.fork()
    f.set_part("doc", "p3", "new", 1)
    f.set_status("doc/p7", "accepted")
    f.set_status("doc/p8", "candidate")  # unchanged: not a change
    assert f.take_changes() == {"doc/p3", "doc/p7"} and f.take_changes() == set()
    assert "doc/p7" not in f.open_refs() and "doc/p7" in s.open_refs()
    f.set_part("doc", "new", 1, 1)
    assert f.take_changes() == {"doc/new"} and "doc/new" in f.open_refs()
    with pytest.raises(LookupError):
        f.set_status("doc/nope", "accepted")
    with pytest.raises(ConfigError, match="unknown part status 'done'"):
        f.set_status("doc/p3", "done")  # type: ignore[arg-type]


def test_detached_copy_shares_nothing_changeable() -> None:
    s = lw.TaskState.from_task(
        {"goal": "g", "x": {"y": [1]}, "artifacts": {"doc": {"a": {"k": [1, 2]}, "b": "text"}}}
    )
    s.findings.append(lw.Finding("f", "doc", "a", evidence={"e": [1]}))
    s.notes.append({"kind": "note", "data": {"z": 1}})
    s.rejected.append("d1")
    before = json.dumps(s.to_dict())
    d = s.detached()
    # the rejected digests are asked about (``in``), never copied: they grow with the run
    assert {**d.to_dict(), "rejected": ["d1"]} == s.to_dict() and "d1" in d.rejected
    d.part("doc/a").value["k"].append(3)  # type: ignore[union-attr]
    d.task["x"]["y"].append(2)
    d.findings[0].evidence["e"].append(2)
    d.notes[0]["data"]["z"] = 2
    d.set_status("doc/b", "accepted")
    d.set_part("doc", "b", "other", 5)
    d.rejected.append("d2")
    assert json.dumps(s.to_dict()) == before
    assert "d1" in d.rejected and "d2" not in s.rejected


def test_a_detached_copys_values_are_copies_and_follow_its_own_changes() -> None:
    s = lw.TaskState.from_task({"artifacts": {"doc": {"a": [1], "b": "text"}}})
    s.set_status("doc/a", "accepted")
    d = s.detached()
    # read in one go (copied from the original in one round trip), changed in place: only
    # the copy changes
    d.artifacts["doc"].values()["a"].append(2)
    d.artifacts["doc"].accepted_values()["a"].append(3)
    d.values()["doc"]["a"].append(4)
    assert s.values() == {"doc": {"a": [1], "b": "text"}}
    assert s.accepted_values() == {"doc": {"a": [1]}}
    # a part the copy writes is what its values say from then on (not the original's)
    e = s.detached()
    e.set_part("doc", "b", "mine", 2)
    assert e.values() == {"doc": {"a": [1], "b": "mine"}}
    assert s.values()["doc"]["b"] == "text"
    f = s.detached()
    f.set_status("doc/b", "accepted")
    assert f.accepted_values() == {"doc": {"a": [1], "b": "text"}}
    assert s.accepted_values() == {"doc": {"a": [1]}}


def test_values_copied_on_read_share_nothing_however_read() -> None:
    from loopwright._state import copied_on_read

    src = {"a": [1], "b": {"k": [2]}, "c": "text"}
    for read in (
        lambda m: m["a"],
        lambda m: m.get("a"),
        lambda m: dict(m)["a"],
        lambda m: {**m}["a"],
        lambda m: m.copy()["a"],
        lambda m: dict(m.items())["a"],
        lambda m: next(iter(m.values())),
        lambda m: json.loads(json.dumps(m)) and m["a"],
    ):
        read(copied_on_read(src)).append(9)
    assert src == {"a": [1], "b": {"k": [2]}, "c": "text"}


def test_a_version_serialises_its_current_status() -> None:
    s = lw.TaskState()
    s.set_part("doc", "p", "v1", 1)
    v = s.artifacts["doc"].parts["p"].current
    assert v.to_dict()["status"] == "candidate"
    v.status = "accepted"  # what the engine does on acceptance
    assert v.to_dict() == {"n": 1, "value": "v1", "cycle": 1, "status": "accepted"}
    assert s.to_dict()["artifacts"][0]["parts"][0]["versions"][0]["status"] == "accepted"
    assert lw.TaskState.from_dict(s.to_dict()).to_dict() == s.to_dict()
    v.value = "replaced"  # by hand: not what the engine does, but never served stale
    assert v.to_dict()["value"] == "replaced"


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, 5), st.integers(0, 3)),
        st.tuples(st.just("status"), st.integers(0, 5), st.sampled_from(["accepted", "rejected"])),
        st.tuples(st.just("fork"), st.just(0), st.just(0)),
        st.tuples(st.just("best"), st.just(0), st.just(0)),
        st.tuples(st.just("commit"), st.just(0), st.just(0)),
    ),
    max_size=40,
)


_PART_OPS = ("set", "status", "fork", "best")


def _part_op(s: lw.TaskState, op: str, i: int, arg: Any) -> lw.TaskState:
    """One of ``_PART_OPS`` on part ``d/p<i>`` of ``s``; the state to go on with."""
    if op == "set":
        s.set_part("d", f"p{i}", arg, 1)
    elif op == "status" and s.part(f"d/p{i}") is not None:
        s.set_status(f"d/p{i}", arg)
    elif op == "fork":
        return s.fork()
    elif op == "best":
        s.mark_best()
    return s


@given(_OPS)
def test_incremental_heads_match_a_full_walk(ops: list[tuple[str, int, Any]]) -> None:
    """What a checkpoint built from the changed parts holds (head, delta, version rows) is
    what a walk of every part gives, through forks, statuses and best-part marks."""
    from loopwright import _state_codec as codec

    s = lw.TaskState.from_task({"artifacts": {"d": {"p0": 0, "p1": 1}}})
    s.take_changes()
    prev = codec.head(s)
    _, written = codec.unwritten_versions(s, {})
    s.open_refs()  # the open-parts index is then kept up to date, not recomputed
    for op, i, arg in [*ops, ("commit", 0, 0)]:
        if op in _PART_OPS:
            s = _part_op(s, op, i, arg)
        elif op == "commit":
            changed = sorted(s.take_changes())
            head = codec.head(s, prev, changed)
            assert head == codec.head(s)
            hints = {"parts": changed}
            best = s.best_diff(prev["best_parts"])
            if best is not None:
                hints["best_parts"] = best
            assert codec.apply_delta(prev, codec.delta(prev, head, hints)) == head
            _, full = codec.unwritten_versions(s, {})
            _, written = codec.unwritten_versions(s, written, changed)
            assert {k: v for k, v in written.items() if k in full} == full
            assert s.open_refs() == {r for r, p in s.iter_parts() if p.status != "accepted"}
            assert s.values() == {"d": {n: p.value for n, p in s.artifacts["d"].parts.items()}}
            assert list(s.accepted_values().get("d", {})) == [
                n for n, p in s.artifacts["d"].parts.items() if p.accepted is not None
            ]
            prev = head


def test_accepted_values_keep_part_order_however_parts_are_accepted() -> None:
    s = lw.TaskState.from_task({"artifacts": {"d": {"a": 1, "b": 2, "c": 3}}})
    assert s.accepted_values() == {}
    s.set_status("d/c", "accepted")
    s.set_status("d/a", "accepted")
    assert list(s.accepted_values()["d"]) == ["a", "c"]
    s.set_part("d", "e", 5, 1)
    s.set_status("d/e", "accepted")  # the newest part: appended in place
    assert list(s.accepted_values()["d"]) == ["a", "c", "e"]
    s.set_status("d/b", "accepted")
    assert list(s.accepted_values()["d"]) == ["a", "b", "c", "e"]
    s.set_part("d", "a", 10, 2)  # a new candidate version: the accepted one is still shown
    assert s.accepted_values()["d"]["a"] == 1 and s.values()["d"]["a"] == 10
    s.set_status("d/a", "accepted")
    assert s.accepted_values()["d"]["a"] == 10
    f = s.fork()
    f.set_status("d/a", "rejected")  # the fork's cache only: v1 is its accepted version again
    assert f.accepted_values()["d"]["a"] == 1 and s.accepted_values()["d"]["a"] == 10


def test_a_status_that_leaves_a_part_unaccepted_does_not_look_for_its_accepted_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A part with no accepted value in the cache, marked anything but accepted, has none
    # after: its versions (a trivial cycle's rejected part holds three) are not searched.
    from loopwright._parts import Part

    s = lw.TaskState.from_task({"artifacts": {"d": {"a": 1, "b": 2}}})
    assert s.accepted_values() == {}  # the cache built
    for n in range(2, 5):
        s.set_part("d", "a", n, n)
    looked: list[str] = []
    real = Part.accepted.fget

    def accepted(p: Part) -> Any:
        looked.append(p.name)
        return real(p)

    monkeypatch.setattr(Part, "accepted", property(accepted))
    s.set_status("d/a", "rejected")
    assert looked == [] and s.accepted_values() == {}
    s.set_status("d/a", "accepted")  # one: looked for (then every part's, in part order)
    assert s.accepted_values() == {"d": {"a": 4}} and looked == ["a", "a", "b"]
    s.set_part("d", "a", 5, 5)
    s.set_status("d/a", "rejected")  # it had one: still the older version's
    assert s.accepted_values() == {"d": {"a": 4}}
    s.set_status("d/b", "rejected")
    assert looked == ["a", "a", "b", "a"] and s.accepted_values() == {"d": {"a": 4}}


def test_a_cycles_part_writes_call_only_what_does_the_work() -> None:
    # A cycle writes its candidate's part and marks it: the open parts' log noted by a call of
    # its own each time (``_opened``), the reference split by ``split_ref``, a new artifact
    # built as ``setdefault``'s default and thrown away. Written out now; the log read back
    # (``open_refs``) looks at each part it names once.
    import sys

    s = lw.TaskState.from_task({"artifacts": {"d": {"a": 1}}})
    s.open_refs()  # the open parts' log kept from here on
    f = s.fork()
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        f.set_part("d", "a", 2, 1)
        f.set_status("d/a", "rejected")
        opened = f.open_refs()
    finally:
        sys.setprofile(None)
    assert calls == [
        *("set_part", "_own", "fork", "__init__", "add", "__init__", "_value_changed"),
        *("set_status", "_own", "_status_changed", "open_refs"),
    ]
    assert opened == {"d/a"} and f.open_refs() == {"d/a"} and s.part("d/a").value == 1
    with pytest.raises(ConfigError, match="must look like"):
        f.set_status("d", "rejected")
    with pytest.raises(ConfigError, match="a part reference is text"):
        f.set_status(("d", "a"), "rejected")  # type: ignore[arg-type]
    with pytest.raises(LookupError, match="no part"):
        f.set_status("d/b", "rejected")


_STEP = st.fixed_dictionaries({"id": st.sampled_from("abcdef"), "status": st.sampled_from("tdx")})


@given(st.lists(_STEP, max_size=8), st.lists(_STEP, max_size=8))
def test_a_plan_delta_rebuilds_the_new_plan(old: list[Any], new: list[Any]) -> None:
    """Any plan to any other (steps changed, added, dropped): the delta applied to the old
    head gives the new one."""
    from loopwright import _state_codec as codec

    prev, head = {"plan": old, "cycle": 1}, {"plan": new, "cycle": 2}
    assert codec.apply_delta(prev, codec.delta(prev, head)) == head
    assert codec.fold(prev, [codec.delta(prev, head), codec.delta(head, prev)]) == prev


def test_a_growing_plan_costs_a_cycle_its_new_and_changed_steps_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An actor that adds a step each cycle and finishes the one before: each checkpoint
    carries two steps, not the whole plan (which grew a cycle's checkpoint with the run)."""
    from loopwright import _state_codec as codec

    s = lw.TaskState.from_task({"artifacts": {"d": {"p": 0}}})
    prev = codec.head(s)
    sizes = []
    s.take_plan_changes()
    written = [0]
    to_dict = lw.PlanStep.to_dict

    def counted(step: lw.PlanStep) -> dict[str, Any]:
        written[0] += 1
        return to_dict(step)

    monkeypatch.setattr(lw.PlanStep, "to_dict", counted)
    for c in range(1, 301):
        if s.plan:
            s.set_step_status(s.plan[-1].id, "done")
        s.add_step(lw.PlanStep(f"s{c}", f"step {c}: " + "x" * 60))
        s.cycle = c
        steps = s.take_plan_changes()
        written[0] = 0
        f = s.fork()  # a cycle's candidate shares the steps
        assert all(a is b for a, b in zip(f.plan, s.plan, strict=True))
        head = codec.head(s, prev, [], steps)
        assert written[0] <= 2  # the step done and the step added, not the plan
        assert head == codec.head(s)
        d = codec.delta(prev, head, {"plan": steps or ()})
        assert codec.apply_delta(prev, d) == head
        sizes.append(len(json.dumps(d)))
        prev = head
    assert len(prev["plan"]) == 300
    # a few bytes more for longer step ids and positions; the whole plan would be 30 KB
    assert max(sizes[-10:]) <= max(sizes[:10]) + 32


_PLAN_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 9), st.lists(st.integers(0, 9), max_size=2)),
        st.tuples(
            st.just("step"),
            st.integers(0, 9),
            st.sampled_from(["pending", "in_progress", "done", "blocked"]),
        ),
        st.tuples(st.just("part"), st.integers(0, 3), st.sampled_from(["accepted", "rejected"])),
        st.tuples(st.just("refresh"), st.just(0), st.just(0)),
        st.tuples(st.just("fork"), st.just(0), st.just(0)),
        st.tuples(st.just("replace"), st.just(0), st.just(0)),
        st.tuples(st.just("commit"), st.just(0), st.just(0)),
    ),
    max_size=50,
)


def _next_step_walk(s: lw.TaskState) -> lw.PlanStep | None:
    done = {p.id for p in s.plan if p.status == "done"}
    for p in s.plan:
        if p.status in ("pending", "in_progress") and all(d in done for d in p.depends_on):
            return p
    return None


@given(_PLAN_OPS)
def test_the_plans_bookkeeping_matches_a_walk_of_every_step(
    ops: list[tuple[str, int, Any]],
) -> None:
    """What a cycle derives from the plan by looking at what changed (the next step, steps
    done by their parts, the checkpoint's plan and its delta) is what a walk of every step
    gives, through forks, a plan list replaced (a rollback) and commits."""
    from loopwright import _state_codec as codec

    s = lw.TaskState.from_task({"artifacts": {"d": {f"p{i}": i for i in range(4)}}})
    s.add_step(lw.PlanStep("s0", parts=("d/p0", "d/p1")))
    s.take_changes(), s.take_plan_changes()
    prev = codec.head(s)
    for op, i, arg in [*ops, ("commit", 0, 0)]:
        if op == "add":
            parts = tuple(f"d/p{j % 4}" for j in arg)
            deps = tuple(f"s{j}" for j in arg)
            s.add_step(lw.PlanStep(f"s{i}", depends_on=deps, parts=parts))
        elif op == "step":
            s.set_step_status(f"s{i}", arg)
        elif op == "part":
            s.set_status(f"d/p{i}", arg)
        elif op == "refresh":
            want = [
                p.status
                if p.status == "done"
                or not p.parts
                or not all(s.part(r).status == "accepted" for r in p.parts)  # type: ignore[union-attr]
                else "done"
                for p in s.plan
            ]
            s.refresh_plan()
            assert [p.status for p in s.plan] == want
        elif op == "fork":
            s = s.fork()
        elif op == "replace":
            s.plan = list(s.plan)
        elif op == "commit":
            changed, steps = sorted(s.take_changes()), s.take_plan_changes()
            head = codec.head(s, prev, changed, steps)
            assert head == codec.head(s)
            hints: dict[str, Any] = {"parts": changed}
            if steps is not None:
                hints["plan"] = steps
            assert codec.apply_delta(prev, codec.delta(prev, head, hints)) == head
            prev = head
        assert s.next_step() == _next_step_walk(s)
        assert [s.step(p.id) for p in s.plan] == list(s.plan)


# (a head's entries are never None: a part's list, a version number)
_ENTRY = st.one_of(st.lists(st.integers(0, 3), max_size=3), st.integers(0, 3))
_PARTS = st.dictionaries(st.sampled_from(["d/a", "d/b", "e/c", "e/d"]), _ENTRY, max_size=4)
_HIST = st.lists(st.integers(0, 4), max_size=6)


@given(_PARTS, _PARTS, _HIST, _HIST, st.booleans(), st.booleans())
def test_a_delta_with_hints_rebuilds_the_new_head(
    old: dict[str, Any],
    new: dict[str, Any],
    h_old: list[int],
    h_new: list[int],
    share: bool,
    drop_key: bool,
) -> None:
    """Per-part maps compared only at the hinted keys (every key that differs, missing
    keys among them), windows that slide or are replaced, keys the
    earlier head lacks, objects shared with it: the delta applied gives the new head."""
    from loopwright import _state_codec as codec

    prev = {"parts": old, "best_parts": dict(old), "history": h_old, "cycle": 1, "goal": "g"}
    head = {
        "parts": new,
        "best_parts": old if share else dict(new),
        "history": h_new,
        "cycle": 2,
        "goal": "g",
        "stall": 0,
    }
    if drop_key:
        del prev["goal"]
    hints = {"parts": set(old) | set(new), "best_parts": set(old) | set(new)}
    for d in (codec.delta(prev, head, hints), codec.delta(prev, head)):
        assert codec.apply_delta(prev, d) == head


def test_digests_that_ask_the_store_build_no_filter() -> None:
    """A state read from a store asks the store of every digest it does not hold: the bits of
    those it lets go of would never be read, so none are kept."""
    from loopwright._digests import REJECTED_WINDOW, Digests

    asked: list[str] = []
    held = [f"d{i}" for i in range(3 * REJECTED_WINDOW)]
    d = Digests(held, lambda x: asked.append(x) is None and x in held, stored=True)
    d.durable(len(held))
    assert d.gone > 0 and d._filter is None
    assert "d0" in d and asked == ["d0"]  # let go of: the store's answer
    assert "nope" not in d and asked == ["d0", "nope"]


def test_a_cycles_copies_of_the_state_are_built_without_the_generated_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fork (the candidate) and detached (a check's copy) run every cycle: built by plain
    # slot stores, not through the dataclass ``__init__`` and its default-factory tests.
    s = _state()
    s.findings = [lw.Finding("m", "doc", "a")]
    s.notes = [{"kind": "note"}]
    s.history = [{"cycle": 1}]
    s.cycle, s.stall, s.next_action = 3, 2, "repair"
    built: list[int] = []
    generated = lw.TaskState.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        generated(self, *args, **kwargs)

    monkeypatch.setattr(lw.TaskState, "__init__", counting)
    copies = [s.fork(), s.detached(), s.detached(light=True)]
    monkeypatch.undo()
    assert built == []
    fresh = lw.TaskState()
    for c in copies:
        # every field set, equal to the original's; the bookkeeping a new state's
        for f in dataclasses.fields(lw.TaskState):
            if f.compare:
                assert getattr(c, f.name) == getattr(s, f.name), f.name
            elif f.name not in ("_token", "_dirty", "_track", "_open", "_open_size"):
                assert getattr(c, f.name) == getattr(fresh, f.name), f.name
        assert c._token is not s._token
        assert c.values() == s.values()


_STEPS = ("pending", "in_progress", "done")
_FIELD_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("status"), st.integers(0, 3), st.sampled_from(["accepted", "rejected"])),
        st.tuples(st.sampled_from(["fork", "best", "snapshot"]), st.just(0), st.just(0)),
        # (a commit after about every third change: what one change then another does)
        *[st.just(("commit", 0, 0))] * 6,
        st.tuples(st.just("new_artifact"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("drop_artifact"), st.just(0), st.just(0)),
        st.tuples(st.sampled_from(["note", "history"]), st.integers(0, 4), st.integers(0, 3)),
        st.tuples(st.just("findings"), st.integers(0, 3), st.integers(0, 1)),
        st.tuples(st.just("step"), st.integers(0, 4), st.sampled_from(_STEPS)),
        st.tuples(st.just("retry"), st.integers(0, 2), st.integers(0, 2)),
        st.tuples(st.just("pending"), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.sampled_from(["approve", "check"]), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.just("cycle"), st.integers(0, 3), st.integers(0, 1)),
        st.tuples(st.just("scalar"), st.sampled_from(["goal", "next_action"]), st.integers(0, 2)),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(_FIELD_OPS)
@example([("new_artifact", 0, 0), ("commit", 0, 0), ("drop_artifact", 0, 0)])
def test_a_fused_head_and_delta_match_the_two_passes(ops: list[tuple[str, Any, Any]]) -> None:
    """``advance`` (the checkpoint's head and delta in one pass) gives what ``head`` and
    ``delta`` give, over changes to every field of the head, and neither it nor a later
    change to the state changes a head already made (each is compared with its JSON copy)."""
    from loopwright import _state_codec as codec

    s = lw.TaskState.from_task({"artifacts": {"d": {"p0": 0, "p1": 1}}}, task_key="k")
    s.take_changes()
    s.take_plan_changes()
    prev = codec.head(s)
    assert len(prev) == codec._HEAD_LEN  # a head of ``head``'s is advanced the fast way
    kept = json.loads(json.dumps(prev))
    for op, i, arg in [*ops, ("commit", 0, 0)]:
        if op in _PART_OPS:
            s = _part_op(s, op, i, arg)
        elif op == "new_artifact":
            s.set_part("e", f"q{i}", i, 1)
        elif op == "drop_artifact" and "e" in s.artifacts:
            # (not something the engine does; the head's "a part is gone" rule)
            s._dirty.update(f"e/{n}" for n in s.artifacts.pop("e").parts)
        elif op in ("note", "history"):
            window = getattr(s, op + ("s" if op == "note" else ""))
            window.append({"n": i, "len": len(window)})
            del window[: -1 - arg]
        elif op == "findings":
            found = [lw.Finding(f"m{j}", "d", f"p{j}", "x") for j in range(i)]
            s.findings = found if arg else [*s.findings, *found]
        elif op == "step":
            if not s.set_step_status(f"s{i}", arg):
                s.add_step(lw.PlanStep(id=f"s{i}", status=arg))
        elif op == "retry":
            if arg:
                s.retries[f"r{i}"] = arg
            else:
                s.retries.pop(f"r{i}", None)
        elif op == "pending":
            if i == 0:
                s.pending = None
            elif arg and s.pending is not None:
                s.pending["seen"] = i  # changed in place, as the engine does
            else:
                s.pending = {"kind": "park", "n": i}
        elif op in ("approve", "check"):
            listed = s.approved if op == "approve" else s.passed_checks
            listed.append(f"x{i}")
            if arg:
                del listed[0]
        elif op == "cycle":
            s.cycle += 1
            s.spent = s.spent.add_seconds(0.5) if arg else s.spent
            s.score = s.progress_score = i / 4
            s.stall = s.stall + 1 if arg else 0
            s.held_out_spent = lw.Usage(cost_usd=0.1, tokens=i) if i else lw.Usage()
        elif op == "scalar":
            setattr(s, i, f"{i}{arg}")
        elif op in ("commit", "snapshot"):
            changed = s.take_changes()
            steps = s.take_plan_changes()
            if op == "snapshot":
                head = codec.head(s)
            else:
                new, d = codec.advance(s, prev, changed, steps)
                head = codec.head(s, prev, changed, steps)
                assert new == head == codec.head(s)
                assert d == codec.delta(prev, head, codec.hints(s, prev, changed, steps))
                assert codec.apply_delta(prev, d) == new
                for k in ("notes", "retries", "approved", "passed_checks", "pending", "history"):
                    # the state's own containers change in place: a head holds copies
                    assert new[k] is None or new[k] is not getattr(s, k), k
                head = new
            assert prev == kept  # what was committed has not moved since
            prev, kept = head, json.loads(json.dumps(head))
    assert prev == kept


def test_a_head_of_another_shape_is_advanced_the_slow_way() -> None:
    from loopwright import _state_codec as codec

    s = _state()
    prev = codec.head(s)
    s.cycle, s.notes = 3, [{"n": 1}]
    for odd in (
        {**prev, "task": {"old": "layout"}},
        {k: v for k, v in prev.items() if k != "stall"},
    ):
        new, d = codec.advance(s, odd, set(), None)
        assert new == codec.head(s, odd, set(), None)
        assert d == codec.delta(odd, new, codec.hints(s, odd, set(), None))
        assert codec.apply_delta(odd, d)["cycle"] == 3


def test_a_stored_step_is_read_as_written() -> None:
    """A step an earlier release stored (an actor's, depending on ``1``; a part named without
    its artifact) is read back as written, in a state and in a stored proposal: the checks a
    new task's or actor's step gets refused it, and its run could no longer be read, shown or
    resumed (review47b). A new step is still checked (``PlanStep.from_dict``)."""
    step = {"id": "extra", "title": "", "depends_on": [1], "parts": ["qty"], "status": "pending"}
    s = lw.TaskState.from_task({"goal": "g", "artifacts": {"doc": {"a": 1}}})
    d = s.to_dict()
    d["plan"] = [step]
    back = lw.TaskState.from_dict(d)
    assert [(p.id, p.depends_on, p.parts) for p in back.plan] == [("extra", (1,), ("qty",))]
    stored = lw.Proposal(note="n").to_dict() | {"new_steps": [step]}
    assert lw.Proposal.from_dict(stored).new_steps[0].depends_on == (1,)
    with pytest.raises(ConfigError, match="depends_on"):
        lw.PlanStep.from_dict(step)
