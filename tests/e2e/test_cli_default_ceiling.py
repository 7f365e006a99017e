"""A loop spec whose contract has only a cost budget, run by `loopwright run` with an actor
that spends nothing: the run ends ``budget_cycles`` at the default cycle ceiling of 1,000
cycles (stop 50; before it, stop 49's seed 200615 ran for ever). `loopwright check` says only
that ceiling ends a stalled run, `show` says the ceiling was the default one and what to set,
and `loopwright replay --contract` of the same spec ends the run as it ended."""

from __future__ import annotations

import json
from pathlib import Path

from .test_bad_inputs import lw

LOOP_MODULE = """
import loopwright as lw

def actor(ctx):
    if ctx.cycle > 1010:
        raise SystemExit("a run still going at cycle %d" % ctx.cycle)
    return lw.Proposal.edit("doc", {"a": "x%d" % ctx.cycle})  # free: no usage

def check(state, proposal):
    return lw.Verdict(passed=True, score=0.9, usage=lw.Usage(0.01, 10))
"""

SPEC = """
name = "money-only"
[actor]
ref = "stallmod.py:actor"
[[verifiers]]
ref = "stallmod.py:check"
[contract.success]
min_score = 1.0
[contract.budget]
max_cost_usd = 0.5
"""

CHOOSE = "set budget.max_cycles, max_seconds or a no_progress rule"


def test_a_free_run_of_a_money_only_spec_ends_at_the_default_ceiling(tmp_path: Path) -> None:
    (tmp_path / "stallmod.py").write_text(LOOP_MODULE)
    (tmp_path / "loop.toml").write_text(SPEC)
    (tmp_path / "t.json").write_text(json.dumps({"artifacts": {"doc": {"a": ""}}}))
    store = tmp_path / "s.db"

    r = lw("check", "loop.toml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [stalled] = [
        a
        for a in json.loads(r.stdout)["answers"]
        if a["question"] == "What ends a stalled or unsafe run?"
    ]
    assert stalled["status"] == "warn"
    assert "spend nothing: only the default ceiling of 1,000 cycles" in stalled["answer"]
    assert CHOOSE in stalled["answer"]

    r = lw("run", "loop.toml", "--task", "t.json", "--task-key", "k", cwd=tmp_path, store=store)
    assert r.returncode == 3, r.stdout + r.stderr  # stopped
    [run] = json.loads(lw("runs", "--json", cwd=tmp_path, store=store).stdout)
    assert (run["status"], run["stop_reason"], run["cycle"]) == ("stopped", "budget_cycles", 1000)
    assert run["contract"]["budget"]["max_cycles_default"] is True
    assert run["packet"]["stop_cause"].startswith(
        "stopped after 1000 cycles: the default cycle ceiling of 1,000 is used up"
    )
    shown = lw("show", "k", cwd=tmp_path, store=store, env={"COLUMNS": "400"})
    assert shown.returncode == 0, shown.stderr
    assert "the default cycle ceiling (1,000) is spent" in shown.stdout
    assert CHOOSE in shown.stdout

    r = lw("replay", "store", "--contract", "loop.toml", "--json", cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr
    [replayed] = json.loads(r.stdout)["contracts"]
    [outcome] = replayed["runs_detail"]
    assert (outcome["reason"], outcome["cycles"]) == ("budget_cycles", 1000)
