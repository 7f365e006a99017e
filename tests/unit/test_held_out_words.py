"""A run's held-out verdict is one rule and one set of words (stop 56): whether it is an
independent verdict (``_verdict.independent``) and how it is said (``_verdict.held_out_words``).
Before, the store had its own copy of the rule (``independent_held_out``) and each list wrote
the words inline: ``loopwright runs``, ``diff``, ``show``, the dashboard's lists and the
``accepted …; held-out checks failed`` sentence called a failure resting only on tests
``judged_only`` refused a failure (``FAIL``, a false success) while metrics left it out.

Every place must agree on every ``(passed, held_out_self_reported)``, unknown counts included."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.run_rows import run_row

from loopwright import Budget, Contract
from loopwright._result import RunResult
from loopwright._run_metrics import RunMetrics
from loopwright._state import TaskState
from loopwright._stored_run_words import run_stop_cause
from loopwright._usage import Usage
from loopwright._verdict import held_out_words, independent
from loopwright.cli._diff_cmd import _held
from loopwright.cli._table import _held_cell
from loopwright.store import RunRecord

SRC = Path(__file__).resolve().parents[2] / "src" / "loopwright"
PASSED = (None, True, False)
MARKS = (None, 0, 1, 3)


def _record(passed: bool | None, mark: int | None) -> RunRecord:
    contract = Contract(budget=Budget(max_cycles=3)).to_dict()
    return run_row(contract=contract, held_out_passed=passed, held_out_self_reported=mark)


def _expected(passed: bool | None, mark: int | None) -> bool | None:
    """The decision (stop 55): a verdict with tests behind it not decided outside the
    candidate's process (any count) is neither a pass nor a failure; unknown counts (a run
    ended before stop 55) leave it as it was counted."""
    return None if passed is None or mark else passed


@pytest.mark.parametrize(("passed", "mark"), list(itertools.product(PASSED, MARKS)))
def test_every_place_reads_the_held_out_verdict_alike(
    passed: bool | None, mark: int | None
) -> None:
    want = _expected(passed, mark)
    rec = _record(passed, mark)
    words = held_out_words(passed, mark)
    metrics_row: Any = SimpleNamespace(held_out_passed=passed, held_out_self_reported=mark)
    assert independent(passed, mark) is want
    assert rec.held_out_independent is want
    assert RunMetrics.held_out_independent.fget(metrics_row) is want  # type: ignore[attr-defined]
    assert words.independent is want
    assert rec.to_dict()["held_out_verdict"] == words.kind
    result = RunResult(
        "r1", "k1", "accepted", "success", 1, 1.0, Usage(), None, TaskState(), passed, mark
    )
    assert result.held_out_independent is want
    assert result.to_dict()["held_out_verdict"] == words.kind
    # the words follow the rule: a plain pass/FAIL only for an independent verdict
    cell = {True: "pass", False: "FAIL"}.get(want) if passed is not None else "-"
    if passed is not None and want is None:
        cell = "pass*" if passed else "fail*"
    assert words.cell == cell
    assert bool(words.legend) == bool(words.note) == (passed is not None and want is None)
    # the CLI's lists say the same (``runs``, ``diff``)
    assert _held_cell(rec)[0] == cell
    assert _held({"held_out_passed": passed, "held_out_self_reported": mark}) == cell
    # an accepted run's sentence calls its held-out checks failed only for a failure
    said = run_stop_cause(rec)
    assert ("held-out checks failed" in said) is (want is False), said
    assert ("held-out checks not judged" in said) is (passed is False and want is None), said


def test_the_words_live_in_one_place() -> None:
    """No list writes the held-out words itself (they drifted: the compare page, ``runs`` and
    ``diff`` each had their own, none of which knew a failure resting on refused tests)."""
    words = ('"pass*"', '"fail*"', "pass (self-reported)", "fail (not judged)")
    found = {
        str(p.relative_to(SRC))
        for p in [*SRC.rglob("*.py"), *SRC.rglob("*.html")]
        if any(w in p.read_text(encoding="utf-8") for w in words)
    }
    assert found == {"_verdict.py"}, found
    # and no second copy of the rule
    for p in SRC.rglob("*.py"):
        assert "def independent_held_out" not in p.read_text(encoding="utf-8"), p
