"""A run whose spend ends past its cost budget says so where a person reads it, on SQLite and
PostgreSQL (fenced56b).

The budgets judge a cycle by what its execution has charged: the bills of an execution fenced
out, added to the run's row as its word is said (fenced56), are charged by the next resume
only. A word said while the executor that took the run over drives its last cycle took the
run past its budget ($0.30 of $0.25) while ``show`` said its spend alone, the budget as kept,
and the metrics nothing. ``show``, ``show --json``, ``/api/runs/{id}`` and the per-run
metrics now say how far; so do the lists (``loopwright runs``, its ``--json``, the dashboard's:
a starred spend cell and a line that says why), the dashboard's run page and ``RunResult``
(``over_budget_usd``, and ``over_budget_tokens`` past its token budget: over56). Every JSON
document that says ``over_budget_usd`` says ``over_budget_tokens`` too, ``/api/runs`` says
both, and the two runs side by side (``loopwright diff``, ``/compare``, ``/api/compare``) star
the spend with the line that says why (over56b).

Executor ``a`` is held in its actor at cycle 2 until ``b`` has taken the run over and is held
there too; ``a`` let go is fenced out and says its word; ``b`` let go concludes cycle 2 (its
own spend $0.20, within $0.25) and the run is accepted. No timing: each step waits on an
event."""

from __future__ import annotations

import json
import threading

import pytest
from support.crash_bound import BILLED, TASK, Gates, billed_loop, expire, resumer, start_held
from support.dashboard import dashboard

import loopwright as lw
from loopwright.cli import main

ACTOR = BILLED
#: The line under a list with a starred spend cell.
STARRED = "a starred cost (0.30*): spent past its budget"


def _loop(gates: Gates) -> lw.Loop:
    return billed_loop("over", gates, max_cost_usd=0.25, max_tokens=25)


def test_a_run_past_its_budget_by_a_fenced_bill_says_so(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    gates: Gates = {n: (threading.Event(), threading.Event()) for n in ("a", "b")}
    loop = _loop(gates)
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="fenced-over")[0].run_id
        drive, ended = resumer(url, run_id, loop)
        try:
            a = start_held(drive, "a", gates, ended)
            expire(rt, run_id)
            b = start_held(drive, "b", gates, ended)
            gates["a"][1].set()  # a fenced out: its word adds its $0.10 to the row
            a.join()
            assert isinstance(ended["a"], lw.StaleLeaseError), ended
            gates["b"][1].set()
            b.join()
        finally:
            for _entered, go in gates.values():
                go.set()
        r = ended["b"]
        assert isinstance(r, lw.RunResult) and r.status == "accepted", r
        assert rt.store.get_run(run_id).cost_usd == pytest.approx(0.30)
        # b's result reads the row ($0.30, past the budget: a's bill came after b's check);
        # an accepted run has no packet: ``show`` and the metrics read the row too
        assert r.spent.cost_usd == pytest.approx(0.30)
        assert rt.store.get_run(run_id).packet is None
        # the result says how far too (its tokens: 30 of 25), as its dict does
        assert r.over_budget_usd == pytest.approx(0.05) and r.over_budget_tokens == 5
        assert r.to_dict()["over_budget_usd"] == pytest.approx(0.05)
        assert r.to_dict()["over_budget_tokens"] == 5
    capsys.readouterr()
    assert main(["show", run_id, "--store", url]) == 0
    shown = " ".join(capsys.readouterr().out.replace("│", " ").split())  # (unwrapped)
    assert "over budget: spent $0.30 of its $0.25 cost budget ($0.05 over)" in shown, shown
    assert "used 30 of its 25 tokens" in shown, shown
    assert main(["show", run_id, "--store", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run"]["over_budget_usd"] == pytest.approx(0.05)
    assert doc["run"]["over_budget_tokens"] == 5  # (30 of 25: over56b)
    web = dashboard(url, token="t" * 24)
    api = web.get(f"/api/runs/{run_id}")
    assert api.status_code == 200 and api.json()["run"]["over_budget_usd"] == pytest.approx(0.05)
    assert api.json()["run"]["over_budget_tokens"] == 5
    # the API's list says it as the run's own document does (over56b)
    (summary,) = web.get("/api/runs").json()
    assert summary["over_budget_usd"] == pytest.approx(0.05), summary
    assert summary["over_budget_tokens"] == 5, summary
    # the lists say it too: a starred spend cell and a line under the list that says why
    assert main(["runs", "--store", url]) == 0
    listed = capsys.readouterr().out
    assert "0.30*" in listed and STARRED in " ".join(listed.split()), listed
    assert main(["runs", "--store", url, "--json"]) == 0
    (listed_run,) = json.loads(capsys.readouterr().out)
    assert listed_run["over_budget_usd"] == pytest.approx(0.05)
    assert listed_run["over_budget_tokens"] == 5
    page = web.get("/")
    assert page.status_code == 200 and "0.30*</span>" in page.text, page.text
    assert 'id="over-budget-legend"' in page.text and STARRED in page.text
    run_page = web.get(f"/runs/{run_id}")
    assert run_page.status_code == 200
    assert "spent $0.30 of its $0.25 cost budget ($0.05 over)" in run_page.text
    with lw.Runtime(url) as rt:
        m = lw.compute_metrics(rt.store)
        assert m.per_run[0].over_budget_usd == pytest.approx(0.05)
        assert m.to_dict(per_run=True)["per_run"][0]["over_budget_usd"] == pytest.approx(0.05)
        assert m.per_run[0].over_budget_tokens == 5
        assert m.to_dict(per_run=True)["per_run"][0]["over_budget_tokens"] == 5
        # beside a run within its budgets: the two side by side star the one past them
        within = rt.run_sync(_loop({}), TASK, task_key="within").run_id
    capsys.readouterr()
    assert main(["diff", run_id, within, "--store", url]) == 0
    diffed = capsys.readouterr().out
    spend = next(line for line in diffed.splitlines() if line.startswith("spend"))
    assert spend.split()[1:] == ["$0.30*", "$0.20"], diffed
    assert STARRED in " ".join(diffed.split()), diffed
    assert main(["diff", run_id, within, "--store", url, "--json"]) == 0
    sides = json.loads(capsys.readouterr().out)
    assert sides["a"]["over_budget_usd"] == pytest.approx(0.05)
    assert sides["a"]["over_budget_tokens"] == 5
    assert (sides["b"]["over_budget_usd"], sides["b"]["over_budget_tokens"]) == (0.0, 0)
    compared = web.get("/compare", params={"a": run_id, "b": within})
    assert compared.status_code == 200 and "$0.30*</span>" in compared.text, compared.text
    assert "$0.20*" not in compared.text and 'id="over-budget-legend"' in compared.text
    assert "spent $0.30 of its $0.25 cost budget ($0.05 over)" in compared.text
    api_compared = web.get("/api/compare", params={"a": run_id, "b": within}).json()
    assert api_compared["a"]["over_budget_tokens"] == 5
    assert api_compared["b"]["over_budget_words"] is None


def test_a_run_within_its_budget_says_nothing_of_it(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = _loop({})
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="within")
        assert r.status == "accepted" and r.spent.cost_usd == pytest.approx(0.20)
        assert r.over_budget_usd is None and r.over_budget_tokens is None
        assert r.to_dict()["over_budget_usd"] is None
        m = lw.compute_metrics(rt.store)
        assert m.per_run[0].over_budget_usd == 0.0 and m.per_run[0].over_budget_tokens == 0
    capsys.readouterr()
    assert main(["runs", "--store", url]) == 0
    listed = capsys.readouterr().out
    assert "0.20" in listed and "*" not in listed and "budget" not in listed, listed
    web = dashboard(url, token="t" * 24)
    page, run_page = web.get("/").text, web.get(f"/runs/{r.run_id}").text
    assert "0.20</td>" in page and "over-budget" not in page, page
    assert "over budget" not in run_page and 'id="over-budget"' not in run_page
    (summary,) = web.get("/api/runs").json()
    assert (summary["over_budget_usd"], summary["over_budget_tokens"]) == (0.0, 0), summary
    capsys.readouterr()
    assert main(["diff", r.run_id, r.run_id, "--store", url]) == 0
    diffed = capsys.readouterr().out
    assert "*" not in diffed and "budget" not in diffed, diffed
    compared = web.get("/compare", params={"a": r.run_id, "b": r.run_id}).text
    assert "over-budget" not in compared, compared
