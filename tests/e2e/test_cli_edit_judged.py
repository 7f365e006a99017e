"""``loopwright edit`` then ``loopwright resume``, end to end: the resumed run judges the
person's edit first (a check-only cycle, no actor call) and is accepted when it passes; ``show``
marks that cycle. Before, ``resume`` asked the stuck actor again, and its proposal over the
person's accepted version ended the run escalated."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import cli


def test_cli_edit_then_resume_is_accepted_without_an_actor_call(project: Path) -> None:
    store = project / "s.db"
    task = project / "t.json"
    # the actor is stuck (writes a = 99 each cycle); a and b are wrong; c and pay are right
    doc = {"a": 0, "b": 0, "c": 3, "pay": 10}
    task.write_text(json.dumps({"id": "t", "artifacts": {"doc": doc}, "stuck": True}))
    r = cli("run", "loop.toml", "--task", str(task), cwd=project, store=store)
    assert r.returncode == 3, r.stdout + r.stderr  # stopped: no progress
    [run] = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)
    run_id, cycles, cost = run["run_id"], run["cycle"], run["cost_usd"]
    assert run["stop_reason"] == "no_progress" and cost > 0
    for part, value in (("doc/a", "1"), ("doc/b", "2")):
        e = cli("edit", run_id, part, "--value", value, "--by", "ana", cwd=project, store=store)
        assert e.returncode == 0, e.stderr
    r = cli("resume", run_id, cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = json.loads(cli("show", run_id, "--json", cwd=project, store=store).stdout)
    assert shown["run"]["status"] == "accepted"
    assert shown["run"]["cycle"] == cycles + 1
    assert shown["run"]["cost_usd"] == cost  # no actor call (its calls cost $0.05 each)
    assert shown["run"]["held_out_passed"] is True
    last = shown["cycles"][-1]
    assert last["cycle"] == cycles + 1 and last["check_only"] is True
    assert last["decision"] == "accepted"
    kinds = [(e["kind"], e["data"].get("check_only")) for e in shown["events"]]
    assert ("cycle_started", True) in kinds and ("judged_again", True) in kinds
    text = cli("show", run_id, cwd=project, store=store).stdout
    assert "check only: judged the person's edit" in text
