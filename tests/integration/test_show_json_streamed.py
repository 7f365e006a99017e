"""``loopwright show --json`` is written while the run is read, page by page: the document is
the one ``json.dumps`` made of the whole run (every version of every part, a rollback's
abandoned versions left out, a person's edit as held), and the memory it takes does not grow
with the run (a 3,000-cycle run of 20 KB values took 576 MB; a tester reads long runs)."""

from __future__ import annotations

import io
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from support.printed import shown_text

import loopwright as lw
from loopwright._lineage import fork_lineage
from loopwright._mid_cycle_records import by_id
from loopwright.cli import _app
from loopwright.store import open_store
from loopwright.store._base import concluded_cycles

VALUE_BYTES = 24_000


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        # a different large value each cycle (the cycle number in front)
        return lw.Proposal.edit("doc", {"body": f"{ctx.cycle:06d}" + "x" * VALUE_BYTES})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "body"),))

    return lw.Loop(
        name="wide",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _whole_document(url: str, run_id: str) -> dict[str, Any]:
    """What ``show --json`` printed when it built the document first."""
    with open_store(url) as st:
        rec = st.get_run(run_id)
        cps = st.checkpoints(run_id)
        state = cps[-1].task_state()
        for _ref, part in state.iter_parts():
            part.versions  # noqa: B018 - loads them
        approvals = st.approvals(run_id=run_id)
        decided = by_id(approvals)
        return {
            # (within: no max_cost_usd, no max_tokens)
            "run": {**rec.to_dict(), "over_budget_usd": 0.0, "over_budget_tokens": 0},
            "lineage": fork_lineage(st, rec).to_dict(),
            "state": state.to_dict(),
            "cycles": [  # less a concluded cycle's effects' write-ahead record
                c.record
                for c in cps
                if c.record and not _app.wrote_ahead_of(c.record, concluded_cycles(cps), decided)
            ],
            "approvals": [a.to_dict() for a in approvals],
            "journal": [e.to_dict() for e in st.journal(run_id)],
            "events": [e.to_dict() for e in st.events(run_id)],
        }


class _Sink(io.TextIOBase):
    """stdout that keeps a count and the text's hash-free tail, not the text."""

    def __init__(self) -> None:
        self.chars = 0
        self.parts: list[str] | None = None

    def write(self, s: str) -> int:
        self.chars += len(s)
        if self.parts is not None:
            self.parts.append(s)
        return len(s)


def _streamed(url: str, run_id: str, *, keep: bool) -> tuple[str, int, int]:
    """(text if kept, characters written, peak bytes allocated while writing)."""
    sink = _Sink()
    sink.parts = [] if keep else None
    old = sys.stdout
    sys.stdout = sink
    try:
        with open_store(url) as st:
            rec = st.get_run(run_id)
            tracemalloc.start()
            try:
                _app.write_show_json(st, rec)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    finally:
        sys.stdout = old
    return "".join(sink.parts or ()), sink.chars, peak


@pytest.fixture(scope="module")
def edited_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A run of 12 cycles, rolled back to cycle 5 (versions 7..13 abandoned) and edited by a
    person: rows beyond the part's count, and a version the state holds."""
    db = tmp_path_factory.mktemp("edited") / "runs.db"
    url = f"sqlite:///{db}?durability=process"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(12), {"artifacts": {"doc": {"body": ""}}}, task_key="edited")
        rt.rollback(r.run_id, 5, by="ops")
        rt.edit(r.run_id, "doc/body", "by hand", by="carol")
    return url, r.run_id


def test_streamed_document_is_the_whole_document(edited_run: tuple[str, str]) -> None:
    url, run_id = edited_run
    text, _n, _peak = _streamed(url, run_id, keep=True)
    whole = _whole_document(url, run_id)
    assert text == json.dumps(whole, indent=2, default=str) + "\n"
    [part] = json.loads(text)["state"]["artifacts"][0]["parts"]
    values = [v["value"][:7] for v in part["versions"]]
    # cycles 1..5 kept, the person's edit, the abandoned 8..13 left out
    assert values == ["", "000001x", "000002x", "000003x", "000004x", "000005x", "by hand"]
    with open_store(url) as st:
        assert len(st.versions(run_id, "doc/body")) == 13  # the abandoned rows are there
    assert [v["n"] for v in part["versions"]] == list(range(1, len(values) + 1))


def test_show_json_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """Peak memory while writing is about one page, whatever the run's length: 40 and 160
    cycles of 24 KB values (1 MB and 4 MB of versions, as much again in the records)."""
    peaks = {}
    for cycles in (40, 160):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_loop(cycles), {"artifacts": {"doc": {"body": ""}}}, task_key="w")
        _text, chars, peak = _streamed(url, r.run_id, keep=False)
        assert chars > 2 * cycles * VALUE_BYTES  # every version and every record was written
        peaks[cycles] = peak
    # four times the run, not four times the memory (a page of 32 rows of 24 KB is 0.8 MB
    # of values, decoded and encoded: under 6 MB however long the run)
    assert peaks[160] < 6_000_000, peaks
    assert peaks[160] < 1.5 * peaks[40] + 1_000_000, peaks


def test_show_text_is_what_every_checkpoint_showed(edited_run: tuple[str, str]) -> None:
    """The text view reads the records and the latest state, not every checkpoint: it prints
    what it printed from every checkpoint's record and the last state."""
    from loopwright.cli._render import run_detail
    from loopwright.cli._say import console

    url, run_id = edited_run
    text, _peak = shown_text(url, run_id)
    with open_store(url) as st:
        rec = st.get_run(run_id)
        cps = st.checkpoints(run_id)
        reference = run_detail(
            rec,
            cps[-1].task_state(),
            [(c.cycle, c.record) for c in cps],
            st.approvals(run_id=run_id),
            st.journal(run_id),
            width=console().width,
        )
    out = console()
    with out.capture() as captured:
        out.print(reference)
    assert text == captured.get()
    assert "edited by carol" in text and "rolled back by ops" in text


def test_show_text_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """``loopwright show`` (the text view) held every checkpoint's state, each with every
    version (123 MB for 1,000 cycles of 20 KB values): its peak is now about a page of
    records and the timeline's rows, whatever the run's length."""
    peaks = {}
    for cycles in (40, 160):
        url = f"sqlite:///{tmp_path / f't{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_loop(cycles), {"artifacts": {"doc": {"body": ""}}}, task_key="w")
        text, peak = shown_text(url, r.run_id)
        assert f"cycle {cycles}" in text or f"│ {cycles} " in text  # the last cycle is shown
        peaks[cycles] = peak
    # 160 cycles of versions and records are 7.7 MB; a page of records is 0.8 MB
    assert peaks[160] < 4_000_000, peaks
    assert peaks[160] < 1.5 * peaks[40] + 1_000_000, peaks
