"""The pure parts of the console's rerun and comparison: contract merging, the score curves,
final-part diffs."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("fastapi", reason="the dashboard extra is not installed")

from loopwright.web._actions import merge_contract
from loopwright.web._compare_view import part_diff, score_curves_svg


def test_merge_contract_lays_changes_over_tables() -> None:
    base = {
        "budget": {"max_cycles": 6, "max_cost_usd": 2.0},
        "risk": [{"name": "a"}],
        "no_progress": {"cycles": 3},
    }
    out = merge_contract(
        base, {"budget": {"max_cycles": 9, "max_cost_usd": None}, "risk": [{"name": "b"}]}
    )
    assert out == {
        "budget": {"max_cycles": 9, "max_cost_usd": None},
        "risk": [{"name": "b"}],  # a list is replaced whole
        "no_progress": {"cycles": 3},
    }
    assert base["budget"] == {"max_cycles": 6, "max_cost_usd": 2.0}  # the origin is untouched


def test_score_curves_draw_both_runs_from_numbers_only() -> None:
    curve = [
        {"cycle": 1, "a": 0.25, "b": 0.5},
        {"cycle": 2, "a": 0.75, "b": None},
        {"cycle": 3, "a": None, "b": 1.0},
    ]
    svg = str(score_curves_svg(curve))
    lines = re.findall(r'<polyline class="(run-[ab])" data-run="[ab]" points="([^"]+)"/>', svg)
    assert [cls for cls, _ in lines] == ["run-a", "run-b"]
    assert [len(pts.split()) for _, pts in lines] == [2, 2]  # a missing score is no point
    assert "<script" not in svg and "href" not in svg
    assert "no concluded cycles" in str(score_curves_svg([]))


def test_part_diff_text_and_json() -> None:
    assert part_diff("a\nb", "a\nc").splitlines()[3:] == [" a", "-b", "+c"]
    assert part_diff(None, {"x": 1}).splitlines()[2:] == ["@@ -0,0 +1,3 @@", "+{", '+ "x": 1', "+}"]
    assert part_diff("same", "same") == ""
