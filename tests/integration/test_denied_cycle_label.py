"""The cycle of a request denied after a person's edit beside it is not labelled "check only"
(label48): it began as the actor's attempt (the actor was called and paid), then judged the
edit check-only. The run page, ``loopwright show``'s text and the cycle's span follow the one
rule the engine, replay and metrics keep (``_decide.no_attempt``), while a true check-only
cycle (a run stopped on its cycle cap, edited, resumed: no actor call) still is one.

Before, the run page said "check only" and ``show`` said "check only: judged the person's
edit" for the denied request's cycle, whose actor had been called."""

from __future__ import annotations

from pathlib import Path

from support.dashboard import dashboard
from support.printed import shown_text
from test_replay_edit_escalations import denied_beside_an_edit, edited_past_the_cap

from loopwright.store import open_store
from loopwright.trace import Span, run_spans


def _cycle_span(spans: list[Span], cycle: int) -> Span:
    [span] = [s for s in spans if s.kind == "cycle" and s.attributes["loopwright.cycle"] == cycle]
    return span


def _shown(path: Path, run_id: str) -> tuple[str, str, list[Span]]:
    """The run page's text, ``show``'s text and the run's spans."""
    url = str(path)
    client = dashboard(url, token="t" * 32)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    text, _ = shown_text(url, run_id)
    with open_store(url) as st:
        _, spans = run_spans(st, run_id)
    return page.text, text, spans


def test_a_denied_requests_cycle_is_not_check_only_but_a_person_edits_check_is(
    tmp_path: Path,
) -> None:
    denied_db = tmp_path / "denied.db"
    denied = denied_beside_an_edit(denied_db)
    with open_store(str(denied_db)) as st:
        [rec] = [
            c.record for c in st.checkpoints(denied.run_id) if c.record and "proposal" in c.record
        ]
    # the cycle judged the edit, and the actor was called in it
    assert rec["check_only"] and any(c["who"] == "actor" for c in rec["calls"])
    page, text, spans = _shown(denied_db, denied.run_id)
    assert "check only" not in page
    assert "request denied" in page
    assert "check only" not in text
    assert "request denied" in text
    assert "loopwright.check_only" not in _cycle_span(spans, 1).attributes

    capped_db = tmp_path / "capped.db"
    checked = edited_past_the_cap(capped_db)
    with open_store(str(capped_db)) as st:
        [*_, last] = [
            c.record for c in st.checkpoints(checked.run_id) if c.record and "proposal" in c.record
        ]
    assert last["cycle"] == 3 and not any(c["who"] == "actor" for c in last["calls"])
    page, text, spans = _shown(capped_db, checked.run_id)
    assert "check only" in page
    assert "request denied" not in page
    assert "check only: judged the person's edit" in text
    assert _cycle_span(spans, 3).attributes.get("loopwright.check_only") is True
    assert "loopwright.check_only" not in _cycle_span(spans, 2).attributes
