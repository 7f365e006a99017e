"""``loopwright show`` lists a timeline's last cycles (``--last N``, 50 by default) from the
run's newest checkpoints: the rows are those of ``--all``'s last N cycles, parked cycles,
effects, rejected repeats and people's edits included, and what is read does not grow with
the run (it read and decoded every record to print 50 rows: one second of CPU at 10,000
cycles, bench/RESULTS.md stop 49)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.printed import TextSink

import loopwright as lw
from loopwright.cli import _app
from loopwright.store.sqlite import SQLiteStore

# (the actor writes a, b and c; a person writes d, which no check finds fault with)
TASK = {"artifacts": {"doc": {"a": "", "b": "", "c": "", "d": ""}}}


def _loop(cycles: int) -> lw.Loop:
    @lw.effect("send", name="send", key=lambda a: f"send:{a['n']}", requires_success=False)
    def send(n: int) -> dict[str, Any]:
        return {"sent": n}

    def actor(ctx: lw.Context) -> lw.Proposal:
        c = ctx.cycle
        part = "abc"[c % 3]
        # every 5th cycle proposes again what was rejected three cycles before: a repeat
        value = f"v{c - 3}" if c % 5 == 0 and c > 5 else f"v{c}"
        p = lw.Proposal.edit("doc", {part: value}, usage=lw.Usage(0.001, 5))
        if c % 11 == 0:  # parks for a person's approval, then its effect runs
            return lw.Proposal(edits=p.edits, usage=p.usage, effects=(send.call(n=c),))
        return p

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=tuple(lw.Finding("open", "doc", p) for p in "abc")
        )

    return lw.Loop(
        name="mixed",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
        effects=[send],
        approvals=lw.ApprovalPolicy(rules=[lw.PolicyRule(kind="send", action="require")]),
    )


def _mixed_run(tmp_path: Path, cycles: int, *, deny_last: bool) -> tuple[str, str]:
    """A run that parks every 11th cycle (approved, or the last one denied: the run ends
    inside it), with a person's edit while one is parked and two after the run ended."""
    url = f"sqlite:///{tmp_path / 'mixed.db'}?durability=process"
    loop = _loop(cycles)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="mixed")
        edited = False
        while r.status == "awaiting_approval":
            if r.cycles > 40 and not edited:
                edited = True  # beside the parked cycle
                rt.edit(r.run_id, "doc/d", "ann's", by="ann")
            if deny_last and r.cycles >= cycles - 11:
                rt.deny(r.run_id, by="ann", note="no")
            else:
                rt.approve(r.run_id, by="ann")
            r = rt.resume_sync(r.run_id, loop)
        rt.edit(r.run_id, "doc/d", "ann's d", by="ann")
        rt.edit(r.run_id, "doc/d", "ann's d again", by="ann")
    return url, r.run_id


def _shown(url: str, run_id: str, **how: Any) -> str:
    import sys

    sink, old = TextSink(), sys.stdout
    sys.stdout = sink
    try:
        _app.show(run_id, store=url, as_json=False, **how)
    finally:
        sys.stdout = old
    return "".join(sink.parts)


def _cycles(text: str) -> list[list[str]]:
    """The timeline's blocks (a narrow terminal), a list of blocks a cycle: blocks in a row
    naming one cycle are one."""
    body = text.split("Timeline", 1)[1].split("\nArtifacts", 1)[0]
    blocks = re.split(r"\n(?=cycle \d+ )", body)[1:]
    groups: list[list[str]] = []
    for b in blocks:
        n = b.split()[1]
        if groups and groups[-1][0].split()[1] == n:
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


@pytest.mark.parametrize("deny_last", [False, True])
def test_the_last_cycles_are_the_end_of_every_cycles_timeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deny_last: bool
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    url, run_id = _mixed_run(tmp_path, 120, deny_last=deny_last)
    every = _cycles(_shown(url, run_id, all_=True))
    assert len(every) >= 110  # (the park at cycle 110 denied: the run ends inside it)
    assert any("(repeat)" in b for g in every for b in g)
    assert any("parked for approval" in b for g in every for b in g)
    assert any("while it was parked" in b for g in every for b in g)
    assert any("after the run ended" in b for g in every for b in g) is deny_last
    reads: list[int] = []
    after = SQLiteStore.checkpoints_after

    def counted(self: SQLiteStore, run_id: str, seq: int, fields: Any = None) -> Any:
        got = after(self, run_id, seq, fields)
        reads.append(len(got))
        return got

    monkeypatch.setattr(SQLiteStore, "checkpoints_after", counted)
    for last in (1, 2, 3, 7, 12, 40, 119, 500):
        reads.clear()
        text = _shown(url, run_id, last=last)
        shown = _cycles(text)
        assert shown == every[-last:], last
        cut = len(every) > last
        assert ("the earlier ones are not shown" in " ".join(text.split())) is cut
        if last <= 40:
            assert reads, last  # read from the newest checkpoints


def test_a_rolled_back_run_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a rollback a redone cycle's record before the window may tell whether a
    mid-cycle one in it concluded: every record is read, and the rows are still the end of
    ``--all``'s."""
    monkeypatch.setenv("COLUMNS", "80")
    url, run_id = _mixed_run(tmp_path, 60, deny_last=False)
    loop = _loop(80)
    with lw.Runtime(url) as rt:
        rt.rollback(run_id, to_cycle=30, by="ann")
        r = rt.resume_sync(run_id, loop)
        while r.status == "awaiting_approval":
            rt.approve(r.run_id, by="ann")
            r = rt.resume_sync(r.run_id, loop)
    every = _cycles(_shown(url, run_id, all_=True))
    for last in (1, 5, 20):
        assert _cycles(_shown(url, run_id, last=last)) == every[-last:]


def test_shows_default_window_reads_a_bounded_number_of_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``show`` reads for its default window is the same at 300 cycles as at 900: no
    record read a page at a time from the first (``iter_fields``), a bounded tail."""
    from loopwright.cli import _read_cmd
    from loopwright.cli._read_cmd import CYCLES_SHOWN

    monkeypatch.setenv("COLUMNS", "80")
    reads: list[int] = []
    after = SQLiteStore.checkpoints_after

    def counted(self: SQLiteStore, run_id: str, seq: int, fields: Any = None) -> Any:
        got = after(self, run_id, seq, fields)
        reads.append(len(got))
        return got

    def every_record(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("show read every record of the run for its last cycles")

    read: dict[int, int] = {}
    for cycles in (300, 900):
        d = tmp_path / str(cycles)
        d.mkdir()
        url = f"sqlite:///{d / 'r.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(
                lw.Loop(
                    name="plain",
                    actor=lambda ctx: lw.Proposal.edit("doc", {"a": f"v{ctx.cycle}"}),
                    verifiers=[
                        lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.1), name="c")
                    ],
                    contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
                ),
                TASK,
                task_key="plain",
            )
        with monkeypatch.context() as m:
            m.setattr(SQLiteStore, "checkpoints_after", counted)
            m.setattr(SQLiteStore, "iter_fields", every_record)
            m.setattr(SQLiteStore, "iter_records", every_record)
            m.setattr(_read_cmd, "to_terminal", lambda: True)  # a person's terminal: windowed
            reads.clear()
            text = _shown(url, r.run_id)
        assert [int(g[0].split()[1]) for g in _cycles(text)] == list(
            range(cycles - CYCLES_SHOWN + 1, cycles + 1)
        )
        read[cycles] = sum(reads)
    assert read[300] == read[900] <= 2 * CYCLES_SHOWN + 16


def test_a_last_beyond_any_count_lists_every_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--last`` of more cycles than a machine word holds is every cycle, as any ``--last``
    beyond the run's length is (it printed the run's header, then an internal error:
    OverflowError, a deque's maxlen)."""
    monkeypatch.setenv("COLUMNS", "80")
    url, run_id = _mixed_run(tmp_path, 24, deny_last=False)
    every = _shown(url, run_id, all_=True)
    for last in (10**20, 2**63):
        text = _shown(url, run_id, last=last)
        assert _cycles(text) == _cycles(every)
        assert "the earlier ones are not shown" not in " ".join(text.split())


def test_the_note_of_a_one_cycle_window_says_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--last 1`` said "lists the last 1 cycles" (review50b)."""
    monkeypatch.setenv("COLUMNS", "80")
    url, run_id = _mixed_run(tmp_path, 24, deny_last=False)
    last = _cycles(_shown(url, run_id, all_=True))[-1][0].split()[1]
    one = " ".join(_shown(url, run_id, last=1).split())
    assert f"The timeline below lists the last cycle only, cycle {last} (the earlier" in one
    two = " ".join(_shown(url, run_id, last=2).split())
    assert "The timeline below lists the last 2 cycles, from cycle" in two
