"""A large edit value is stored once: in the version its edit made, which the cycle's record
names (``_record_codec.refer_versions``). Every reader still sees the record as the engine built
it, and a rollback, which lets the run write those version numbers again, keeps what the
abandoned cycles proposed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.crash import Crash, phase_hook

import loopwright as lw
from loopwright.store import Store
from loopwright.store.sqlite import SQLiteStore

TASK = {"goal": "long drafts", "artifacts": {"doc": {"body": "", "title": "t"}}}
SIZE = 3_000  # characters of each draft: over the size from which a record names the version


def draft(tag: str, cycle: int) -> str:
    head = f"{tag} draft {cycle}: "
    return (head + "lorem ipsum dolor sit amet " * (SIZE // 27 + 1))[:SIZE]


def _loop(
    tag: str,
    cycles: int,
    proposed: list[str],
    done: str | None = None,
    replace: bool = False,
    again: Callable[[int], str] | None = None,
) -> lw.Loop:
    """``again``: the draft of each cycle instead (a new object equal to it, so one sent again
    unchanged is equal to the part's value, never the same object)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if again is None:
            value = draft(tag, ctx.cycle)
        else:
            v = again(ctx.cycle)
            value = "".join([v[:10], v[10:]])
        proposed.append(value)
        # a small part beside it stays in the record
        parts = {"body": value, "title": f"{tag}{ctx.cycle}"}
        return lw.Proposal(replace={"doc": parts}) if replace else lw.Proposal.edit("doc", parts)

    def verify(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        if state.values()["doc"]["body"] == done:
            return lw.Verdict(passed=True, score=1.0)
        # both parts flagged: neither is accepted (an accepted part's edit is refused)
        findings = (lw.Finding("open", "doc", "body"), lw.Finding("open", "doc", "title"))
        return lw.Verdict(passed=False, score=0.5, findings=findings)

    return lw.Loop(
        name="drafts",
        actor=actor,
        verifiers=[lw.Check(fn=verify, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _raw_records(store: Store, run_id: str) -> list[str]:
    """The record column as the database holds it."""
    mark = store._MARK  # type: ignore[attr-defined]
    with store._conn() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            f"SELECT record FROM checkpoints WHERE run_id={mark} AND record IS NOT NULL",
            (run_id,),
        ).fetchall()
    return [r[0] if isinstance(r[0], str) else str(r[0]) for r in rows]


def _written(proposal: dict[str, Any]) -> list[tuple[str, Any]]:
    """A recorded proposal's part writes, ``[(part, value)]``: its edits, then its
    replacements (and no key the engine does not write)."""
    assert "replace_versions" not in proposal  # the store's own note, never read back
    out = [(e["part"], e["value"]) for e in proposal["edits"]]
    for parts in (proposal.get("replace") or {}).values():
        out.extend(parts.items())
    return out


def _bodies(store: Store, run_id: str) -> dict[int, list[tuple[str, Any]]]:
    """Each cycle's part writes as read back: cycle -> [(part, value)], from ``iter_records``."""
    out: dict[int, list[tuple[str, Any]]] = {}
    for _seq, cycle, rec in store.iter_records(run_id):
        if rec is not None and "proposal" in rec:
            out.setdefault(cycle, []).extend(_written(rec["proposal"]))
    return out


def _read_back_whole(store: Store, run_id: str, expect: dict[int, list[tuple[str, Any]]]) -> None:
    """Both record readers give each cycle's part writes as ``expect``: ``iter_records`` and
    the checkpoint reader (show, fork, replay)."""
    assert _bodies(store, run_id) == expect
    from_checkpoints = {
        ck.cycle: _written(ck.record["proposal"])
        for ck in store.checkpoints(run_id)
        if ck.record is not None and "proposal" in ck.record
    }
    assert from_checkpoints == expect


@pytest.mark.parametrize("replace", [False, True], ids=["edit", "replace"])
def test_a_large_edit_value_is_written_once_and_read_back_whole(url: str, replace: bool) -> None:
    proposed: list[str] = []
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop("A", 4, proposed, replace=replace), TASK, task_key="k")
        assert r.cycles == 4
        raw = _raw_records(rt.store, r.run_id)
        # before: each record held its 3,000-character draft beside the version holding it
        assert raw and all(len(text) < SIZE for text in raw)
        assert not any("lorem ipsum" in text for text in raw)
        expect = {c: [("body", proposed[c - 1]), ("title", f"A{c}")] for c in range(1, 5)}
        _read_back_whole(rt.store, r.run_id, expect)
        body = r.state.part("doc/body")
        assert body is not None
        assert [v.value for v in body.versions][1:] == proposed


@pytest.mark.parametrize("replace", [False, True], ids=["edit", "replace"])
def test_a_rollback_keeps_what_the_abandoned_cycles_proposed(url: str, replace: bool) -> None:
    first: list[str] = []
    again: list[str] = []
    with lw.Runtime(url) as rt:
        loop = _loop("A", 8, first, done=draft("A", 5), replace=replace)
        r = rt.run_sync(loop, TASK, task_key="k")
        assert (r.cycles, r.stop_reason) == (5, "success")
        rt.rollback(r.run_id, 2, by="alice")
        # the run goes on from cycle 2's parts: its new drafts (cycles 6-8) take version numbers
        # 3, 4, 5 again
        rt.resume_sync(r.run_id, _loop("B", 8, again, replace=replace))
        assert len(again) == 3
        seen: dict[str, list[int]] = {}
        for _seq, cycle, rec in rt.store.iter_records(r.run_id):
            if rec is None or "proposal" not in rec:
                continue
            body = dict(_written(rec["proposal"]))["body"]
            seen.setdefault(body[:1], []).append(cycle)
            assert body == draft(body[:1], cycle)  # what that cycle proposed, not a later value
        assert seen == {"A": [1, 2, 3, 4, 5], "B": [6, 7, 8]}
        part = rt.result(r.run_id).state.part("doc/body")
        assert part is not None and part.value == again[-1]


class CommitOnly(SQLiteStore):
    """A store implementing only ``commit`` (the base class's ``commit_request``)."""

    commit_request = Store.commit_request

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.given: list[dict[str, Any]] = []

    def commit(self, run_id: str, token: int, **kw: Any) -> bool:  # type: ignore[override]
        if kw.get("record") is not None:
            self.given.append(kw["record"])
        return super().commit(run_id, token, **kw)


def test_a_store_implementing_only_commit_is_given_whole_records(tmp_path: Path) -> None:
    store = CommitOnly(tmp_path / "c.db")
    proposed: list[str] = []
    with lw.Runtime(store, group_commit=False) as rt:
        rt.run_sync(_loop("A", 3, proposed), TASK, task_key="k")
    cycles = [rec for rec in store.given if "proposal" in rec]
    assert [rec["proposal"]["edits"][0] for rec in cycles] == [
        {"artifact": "doc", "part": "body", "value": v} for v in proposed
    ]


@pytest.mark.parametrize("size", [10, 255])
def test_small_values_stay_in_the_record(tmp_path: Path, size: int) -> None:
    def loop() -> lw.Loop:
        def actor(ctx: lw.Context) -> lw.Proposal:
            return lw.Proposal.edit("doc", {"body": str(ctx.cycle) * size})

        return lw.Loop(
            name="small",
            actor=actor,
            verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.1), name="c")],
            contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        )

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop(), TASK, task_key="k")
        raw = _raw_records(rt.store, r.run_id)
    assert sum(("1" * size) in text for text in raw) == 1


def test_an_edit_value_holding_a_secret_is_masked_in_the_record(url: str) -> None:
    # The redaction net masks what the engine records (invariant 9); a value the record named
    # in its version read back unmasked: a short object with a password field, or a long text
    # with a key in it (part values, the work itself, are not rewritten: the version keeps it).
    key = "ghp_" + "a" * 36
    long_text = draft("S", 1)[:400] + f" token {key}"

    def actor(ctx: lw.Context) -> lw.Proposal:
        conn = {"host": "db", "password": "hunter2-very-secret"}
        return lw.Proposal.edit("doc", {"body": long_text, "title": conn})

    loop = lw.Loop(
        name="secrets",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.1), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        edits = _bodies(rt.store, r.run_id)[1]
        raw = _raw_records(rt.store, r.run_id)
    shown = dict(edits)
    assert shown["title"] == {"host": "db", "password": "***"}
    assert key not in shown["body"] and shown["body"].startswith("S draft 1")
    assert not any("hunter2" in text or key in text for text in raw)
    # the work itself is kept as given
    assert r.state.values()["doc"]["body"] == long_text


@pytest.mark.parametrize(
    ("artifact", "part"), [("doc", "token"), ("credentials", "body")], ids=["part", "artifact"]
)
def test_a_replaced_value_under_a_secret_name_is_masked_in_the_record(
    url: str, artifact: str, part: str
) -> None:
    # In ``"replace"`` a value sits under its part's name, inside its artifact's: a name the
    # redaction net reads as a secret's (``token``, ``credentials``) masks the value in the
    # record, whatever it holds. Named in its version instead, the record read the plain
    # value back into show, exports and traces (invariant 9).
    value = draft("T", 1)  # plain text: nothing in it the net would mask on its own
    task = {"goal": "keys", "artifacts": {artifact: {part: ""}}}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(replace={artifact: {part: value}})

    loop = lw.Loop(
        name="secret-names",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.1), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, task, task_key="k")
        rec = next(rec for _s, c, rec in rt.store.iter_records(r.run_id) if c == 1)
        ck = next(ck for ck in rt.store.checkpoints(r.run_id) if ck.cycle == 1)
    assert rec is not None and ck.record is not None
    for read in (rec, ck.record):
        assert read["proposal"]["replace"][artifact][part] == "***"
        assert "replace_versions" not in read["proposal"]
    assert r.state.values()[artifact][part] == value  # the work itself is kept as given


def test_a_store_implementing_only_commit_is_given_masked_replaced_values(
    tmp_path: Path,
) -> None:
    store = CommitOnly(tmp_path / "c.db")
    value = draft("T", 1)
    task = {"goal": "keys", "artifacts": {"doc": {"api_key": ""}}}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(replace={"doc": {"api_key": value}})

    loop = lw.Loop(
        name="secret-names",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.1), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(store, group_commit=False) as rt:
        rt.run_sync(loop, task, task_key="k")
    given = [rec for rec in store.given if "proposal" in rec]
    assert [rec["proposal"]["replace"] for rec in given] == [{"doc": {"api_key": "***"}}]


# --- a large value sent again unchanged: named, not carried by every record -----------------


@pytest.mark.parametrize("runs", [1, 3], ids=["one-run", "grouped"])
def test_a_large_value_sent_again_unchanged_is_stored_once(url: str, runs: int) -> None:
    # Before: no new version (the part holds the value already), so the edit was not named and
    # every cycle's record carried the whole value again (bench/concurrent_runs.py's 1.5 KB
    # part: written, and scanned by the redaction net, every cycle).
    value = draft("U", 0)
    tasks = [{**TASK, "task_key": f"k{i}"} for i in range(runs)]
    with lw.Runtime(url) as rt:
        loop = _loop("t", 4, [], again=lambda c: value)
        results = asyncio.run(rt.run_many(loop, tasks, concurrency=runs))
        for r in results:
            assert r.cycles == 4
            raw = _raw_records(rt.store, r.run_id)
            assert len(raw) == 4 and not any("lorem ipsum" in text for text in raw)
            expect = {c: [("body", value), ("title", f"t{c}")] for c in range(1, 5)}
            _read_back_whole(rt.store, r.run_id, expect)
            body = r.state.part("doc/body")
            assert body is not None and [v.value for v in body.versions] == ["", value]


def test_a_store_implementing_only_commit_is_given_the_value_sent_again(tmp_path: Path) -> None:
    store = CommitOnly(tmp_path / "c.db")
    value = draft("U", 0)
    with lw.Runtime(store, group_commit=False) as rt:
        rt.run_sync(_loop("t", 3, [], again=lambda c: value), TASK, task_key="k")
    cycles = [rec for rec in store.given if "proposal" in rec]
    assert [rec["proposal"]["edits"][0] for rec in cycles] == [
        {"artifact": "doc", "part": "body", "value": value}
    ] * 3


def test_a_value_sent_again_holding_a_secret_stays_masked_in_every_record(url: str) -> None:
    key = "ghp_" + "b" * 36
    value = draft("S", 1)[:400] + f" token {key}"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop("t", 3, [], again=lambda c: value), TASK, task_key="k")
        bodies = _bodies(rt.store, r.run_id)
        raw = _raw_records(rt.store, r.run_id)
    assert len(raw) == 3 and not any(key in text for text in raw)
    for c in (1, 2, 3):
        shown = dict(bodies[c])["body"]
        assert key not in shown and shown.startswith("S draft 1")


def test_a_rollback_keeps_the_values_records_named_in_earlier_versions(url: str) -> None:
    # Cycles 1-4 send V1 (version 2, cycle 1), cycle 5 V2 (version 3, accepted): records 2-4
    # name a version written before them. Rolled back to cycle 2, version 3's number is
    # written again (cycles 6-8 send V3): records 3-4 still read V1, record 5 V2 (the
    # abandoned cycles' records hold their values again), 6-8 V3.
    def value(tag: str, cycle: int) -> str:
        return draft("V", 3) if tag == "B" else draft("V", 1 if cycle <= 4 else 2)

    with lw.Runtime(url) as rt:
        first = _loop("A", 8, [], done=value("A", 5), again=lambda c: value("A", c))
        r = rt.run_sync(first, TASK, task_key="k")
        assert (r.cycles, r.stop_reason) == (5, "success")
        rt.rollback(r.run_id, 2, by="alice")
        again = rt.resume_sync(r.run_id, _loop("B", 8, [], again=lambda c: value("B", c)))
        assert again.cycles == 8
        bodies = {c: dict(w)["body"] for c, w in _bodies(rt.store, r.run_id).items()}
        mark = rt.store._MARK  # type: ignore[attr-defined]
        with rt.store._conn() as conn:  # type: ignore[attr-defined]
            later = conn.execute(
                f"SELECT record FROM checkpoints WHERE run_id={mark} AND cycle>5 "
                "AND record IS NOT NULL",
                (r.run_id,),
            ).fetchall()
    assert bodies == {
        **{c: value("A", c) for c in range(1, 6)},
        **{c: value("B", c) for c in range(6, 9)},
    }
    # the new cycles name theirs (cycle 6 the version it wrote, 7 and 8 the same one again)
    assert len(later) == 3 and not any("lorem ipsum" in str(row[0]) for row in later)


def test_values_sent_again_read_back_whole_across_crashes(url: str) -> None:
    # review50a: the value sent again names a version an earlier commit wrote (or one going
    # with its own); no crash test sent a value again. The draft changes every other cycle and
    # comes back to an earlier text (cycles 3, 5, 7 send theirs again: named; 4 and 6 go back
    # to an older text: a new version). Crashes after a commit, before one and after the
    # actor (each in a runtime of its own), then the run to its end: every record reads back
    # what its cycle proposed, none holds the text, and the part's versions are an
    # uninterrupted run's.
    def value(cycle: int) -> str:
        return draft("R", (cycle // 2) % 2)

    happened = 0
    for crash in [("after_checkpoint", 2), ("before_checkpoint", 3), ("after_actor", 4), None]:
        with lw.Runtime(url) as rt:
            rt._on_phase = phase_hook(crash)
            try:
                r = rt.run_sync(_loop("R", 8, [], again=value), TASK, task_key="k")
            except Crash:
                happened += 1
                continue
            assert (r.cycles, happened) == (8, 3)
            raw = _raw_records(rt.store, r.run_id)
            assert raw and not any("lorem ipsum" in text for text in raw)
            expect = {c: [("body", value(c)), ("title", f"R{c}")] for c in range(1, 9)}
            _read_back_whole(rt.store, r.run_id, expect)
            body = r.state.part("doc/body")
            assert body is not None
            assert [v.value for v in body.versions] == ["", *[value(c) for c in (1, 2, 4, 6, 8)]]
