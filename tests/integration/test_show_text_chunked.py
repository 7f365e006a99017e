"""``loopwright show`` (text) prints a long run's timeline ``TIMELINE_CHUNK`` rows at a time,
each chunk rendered and written before the next is read: every cycle is still shown, and the
memory it takes does not grow with the run (rich renders a table whole: one table of a
20,000-cycle run's rows took 160 MB, bench/RESULTS.md stop 37)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.printed import shown_text

import loopwright as lw
from loopwright.cli import _render

CHUNK = 25


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {f"p{ctx.cycle % 3}": ctx.cycle}, usage=lw.Usage(0.001))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    return lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _run(tmp_path: Path, cycles: int) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
        assert r.cycles == cycles
    return url, r.run_id


@pytest.mark.parametrize("columns", ["150", "80"])  # a table; blocks on a narrow terminal
def test_show_memory_does_not_grow_with_the_timeline(
    columns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(_render, "TIMELINE_CHUNK", CHUNK, raising=False)
    peaks: dict[int, int] = {}
    texts: dict[int, str] = {}
    for cycles in (100, 400):
        url, run_id = _run(tmp_path, cycles)
        shown_text(url, run_id)  # warm: modules imported, statements prepared
        texts[cycles], peaks[cycles] = shown_text(url, run_id)
    # four times the cycles, not four times the memory (before: the whole timeline at once)
    assert peaks[400] < 2 * peaks[100], peaks
    for cycles, text in texts.items():
        # every cycle is shown, the first and the last included
        if columns == "150":
            shown = {int(m) for m in re.findall(r"^\s*(\d+) ", text, flags=re.M)}
            assert text.count("Timeline, continued") == cycles // CHUNK - 1
        else:
            shown = {int(m) for m in re.findall(r"^cycle (\d+) ", text, flags=re.M)}
        assert set(range(1, cycles + 1)) <= shown


def test_a_narrow_timeline_in_chunks_is_the_timeline_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks (a narrow terminal) read the same in chunks as in one piece; a table's chunks
    each start with the header, and a run shorter than a chunk prints as before."""
    monkeypatch.setenv("COLUMNS", "80")
    url, run_id = _run(tmp_path, 60)
    whole, _peak = shown_text(url, run_id)
    monkeypatch.setattr(_render, "TIMELINE_CHUNK", 7)
    chunked, _peak = shown_text(url, run_id)
    assert chunked == whole
    assert whole.count("Timeline") == 1
