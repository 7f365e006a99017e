"""A held-out failure resting only on tests ``judged_only`` refused (nothing decided them) is
not independently judged (stop 55: metrics leave it out of ``false_success_rate``), and every
place a person reads the run's verdict says so, as they say a self-reported pass (stop 56).
Before, ``loopwright runs``, ``diff`` and ``show``, the dashboard's runs list, compare and run
pages and the accepted run's sentence said ``FAIL`` — ``show`` and the list "(false success)"
— and ``metrics`` counted it among "held-out pass(es) resting on self-reported tests"."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.dashboard import dashboard
from support.held_out import held_out_loop, metrics_text, printed, runs_text

import loopwright as lw
from loopwright.cli import _app
from loopwright.cli._diff_cmd import diff

RIGHT = "def add(a, b):\n    return a + b\n"
# The second test is not of the judged form (a loop): judged_only refuses it.
MIXED = ["assert add(2, 3) == 5", "for x in range(3):\n    assert add(x, 0) == x"]
TOKEN = "test-token-0123456789"


def _runs(url: str) -> dict[str, str]:
    """An accepted run failing held-out only on the refused test, and one failing a judged
    test too (a false success)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("program", {"code": ctx.task["code"]})

    def visible(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    out = {}
    with lw.Runtime(url) as rt:
        for key, code in (("refused", RIGHT), ("false", "def add(a, b):\n    return 4\n")):
            task = {
                "artifacts": {"program": {"code": ""}},
                "code": code,
                "held_out": {"tests": MIXED},
            }
            loop = held_out_loop(actor, visible, judged_only=True)
            r = rt.run_sync(loop, task, task_key=key)
            assert r.status == "accepted", r.packet
            # (the Python API's result says it too: it read held_out_passed alone)
            assert r.held_out_independent is (None if key == "refused" else False)
            out[key] = r.run_id
        got = {k: rt.store.get_run(v) for k, v in out.items()}
    assert (got["refused"].held_out_passed, got["refused"].held_out_self_reported) == (False, 1)
    assert (got["false"].held_out_passed, got["false"].held_out_self_reported) == (False, 0)
    return out


@pytest.fixture
def ids_url(tmp_path: Path) -> tuple[dict[str, str], str]:
    url = f"sqlite:///{tmp_path / 's.db'}?durability=process"
    return _runs(url), url


def test_the_cli_says_a_failure_on_refused_tests_is_not_judged(
    ids_url: tuple[dict[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, url = ids_url
    out = runs_text(url, monkeypatch)
    rows = {k: next(x for x in out.splitlines() if v[:12] in x) for k, v in ids.items()}
    assert " fail* " in rows["refused"] and "FAIL" not in rows["refused"], out
    assert " FAIL " in rows["false"], out
    assert "fail*: a held-out failure resting only on tests judged_only refused" in out, out
    # its sentence ("why it stopped") does not say the held-out checks failed
    assert "held-out checks failed" not in rows["refused"], out
    assert "held-out checks not judged" in rows["refused"], out
    # `loopwright show`: no "false success"
    show = printed(
        _app.show, monkeypatch, run_id=ids["refused"], store=url, as_json=False, all_=True
    )
    [row] = [x.strip("│ ") for x in show.splitlines() if x.strip("│ ").startswith("held-out ")]
    assert "false success" not in row and row.split()[1] == "fail", row
    assert "1 test not judged: judged_only refused" in row, row
    note = "1 of 2 tests not judged, refused by judged_only: nothing decided the failure"
    assert f"({note})" in show.split("Timeline", 1)[1], show  # (the cycle's held-out cell)
    # `loopwright diff`
    out = printed(diff, monkeypatch, run_a=ids["refused"], run_b=ids["false"], store=url)
    [row] = [x for x in out.splitlines() if x.startswith("held-out")]
    assert row.split()[-2:] == ["fail*", "FAIL"], row
    assert "fail*: a held-out failure resting only on tests judged_only refused" in out, out
    # `loopwright metrics`: counted apart from self-reported passes
    out = metrics_text(url, monkeypatch)
    assert "1 held-out failure(s) resting only on tests judged_only refused" in out, out
    assert "pass(es) resting on self-reported tests" not in out, out


def test_the_dashboard_says_so(ids_url: tuple[dict[str, str], str]) -> None:
    ids, url = ids_url
    c = dashboard(url, token=TOKEN)
    c.headers["Authorization"] = f"Bearer {TOKEN}"
    page = c.get("/").text
    assert page.count("fail (not judged)</span>") == 1, page
    assert page.count("FAIL (false success)</span>") == 1, page  # (the judged failure)
    listed = {r["task_key"]: r for r in c.get("/api/runs").json()}
    assert listed["refused"]["held_out_verdict"] == "fail_not_judged"
    assert listed["false"]["held_out_verdict"] == "fail"
    page = c.get("/compare", params={"run": [ids["refused"], ids["false"]]}).text
    assert "<td>fail (not judged)</td><td>FAIL</td>" in page, page
    page = c.get(f"/runs/{ids['refused']}").text
    note = "1 of 2 tests not judged, refused by judged_only: nothing decided the failure"
    assert f'<span class="warn">fail</span> <span class="warn">(hidden_tests: {note})' in page
    assert page.count(f"({note})") == 1, page  # (the timeline's held-out cell)
    assert "a false success" not in page, page
    page = c.get(f"/runs/{ids['false']}").text
    assert '<span class="fail">FAIL</span> — a false success' in page, page
