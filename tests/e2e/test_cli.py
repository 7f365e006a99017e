"""The CLI as a user drives it: real subprocesses, real SQLite files, exit codes as the README documents them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from .conftest import cli


def _task(path: Path, pay: int = 10, **extra: object) -> Path:
    data = {"id": "t", "artifacts": {"doc": {"a": 0, "b": 0, "c": 3, "pay": pay}}, **extra}
    path.write_text(json.dumps(data))
    return path


def _parking_task(path: Path) -> Path:
    """A task whose repair changes the payment, which the spec's risk rule parks."""
    return _task(path, pay=0)


def test_run_accepted_exit_0_and_runs_json(project: Path) -> None:
    store = project / "s.db"
    r = cli("run", "loop.toml", "--task", str(_task(project / "t.json")), cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    runs = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)
    assert len(runs) == 1
    assert runs[0]["status"] == "accepted"
    assert runs[0]["stop_reason"] == "success"
    assert runs[0]["held_out_passed"] is True
    assert runs[0]["packet"] is None
    shown = json.loads(
        cli("show", runs[0]["run_id"][:8], "--json", cwd=project, store=store).stdout
    )
    assert [c["cycle"] for c in shown["cycles"]] == [1, 2, 3]
    assert all("held_out" in c for c in shown["cycles"])


def test_same_task_key_returns_same_run(project: Path) -> None:
    store = project / "s.db"
    task = str(_task(project / "t.json"))
    for _ in range(2):
        r = cli("run", "loop.toml", "--task", task, "--task-key", "K1", cwd=project, store=store)
        assert r.returncode == 0, r.stderr
    runs = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)
    assert [x["task_key"] for x in runs] == ["K1"]


def test_stopped_exit_3_with_packet(project: Path) -> None:
    store = project / "s.db"
    r = cli(
        "run",
        "loop.toml",
        "--task",
        str(_task(project / "t.json", stuck=True)),
        cwd=project,
        store=store,
    )
    assert r.returncode == 3, r.stdout + r.stderr
    run = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)[0]
    assert run["stop_reason"] == "no_progress"
    packet = run["packet"]
    assert packet["recommended_action"]
    assert packet["unresolved_findings"]
    assert packet["best_candidate"]["artifacts"]["doc"]
    assert packet["owner"] == "qa"


def test_actor_error_escalates_exit_5_without_traceback(project: Path) -> None:
    store = project / "s.db"
    r = cli(
        "run",
        "loop.toml",
        "--task",
        str(_task(project / "t.json", boom=True)),
        cwd=project,
        store=store,
    )
    assert r.returncode == 5
    assert "Traceback" not in r.stderr
    run = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)[0]
    assert run["status"] == "escalated"
    assert run["packet"]["error"]["message"] == "actor exploded"


def test_risk_parks_exit_4_then_approve_and_resume(project: Path) -> None:
    store = project / "s.db"
    task = _parking_task(project / "t.json")
    r = cli("run", "loop.toml", "--task", str(task), cwd=project, store=store)
    assert r.returncode == 4, r.stdout + r.stderr
    pending = json.loads(cli("approvals", "--json", cwd=project, store=store).stdout)
    assert len(pending) == 1
    assert pending[0]["rule"] == "payment_change"
    assert "doc/pay" in pending[0]["diff"]
    run_id = pending[0]["run_id"]
    assert cli("resume", run_id, cwd=project, store=store).returncode == 4  # still parked
    a = cli("approve", run_id, "--by", "ana", "--note", "checked", cwd=project, store=store)
    assert a.returncode == 0, a.stderr
    again = cli("approve", run_id, "--by", "bob", cwd=project, store=store)
    assert again.returncode == 2
    assert "already approved by ana" in again.stderr
    r = cli("resume", run_id, cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = json.loads(cli("show", run_id, "--json", cwd=project, store=store).stdout)
    assert shown["run"]["status"] == "accepted"
    assert shown["approvals"][0]["decided_by"] == "ana"
    kinds = [e["kind"] for e in shown["events"]]
    assert "approval_requested" in kinds
    assert "approval_decided" in kinds


def test_deny_escalates(project: Path) -> None:
    store = project / "s.db"
    task = _parking_task(project / "t.json")
    cli("run", "loop.toml", "--task", str(task), cwd=project, store=store)
    run_id = json.loads(cli("approvals", "--json", cwd=project, store=store).stdout)[0]["run_id"]
    r = cli("deny", run_id, "--by", "ana", "--note", "no", "--resume", cwd=project, store=store)
    assert r.returncode == 5, r.stdout + r.stderr
    run = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)[0]
    assert run["status"] == "escalated"
    assert "denied by ana" in run["packet"]["summary"]


def test_check_reports_open_questions(project: Path) -> None:
    r = cli("check", "loop.toml", "--json", cwd=project)
    assert r.returncode == 0, r.stderr
    answers = {a["question"]: a["status"] for a in json.loads(r.stdout)["answers"]}
    assert answers["How is progress checked independently?"] == "ok"
    assert answers["Who owns the unresolved exception?"] == "ok"
    spec = (project / "loop.toml").read_text()
    (project / "loop.toml").write_text(spec.replace("held_out = true\n", ""))
    r = cli("check", "loop.toml", "--json", "--strict", cwd=project)
    assert r.returncode == 2
    answers = {a["question"]: a["status"] for a in json.loads(r.stdout)["answers"]}
    assert answers["How is progress checked independently?"] == "warn"


def test_bad_inputs_are_one_line_errors(project: Path) -> None:
    store = project / "s.db"
    cases = []
    cases.append(cli("run", "nope.toml", cwd=project, store=store))
    (project / "bad.toml").write_text("name = [")
    cases.append(cli("run", "bad.toml", cwd=project, store=store))
    (project / "unknown.toml").write_text(
        (project / "loop.toml").read_text().replace("max_cycles = 8", "max_cycle = 8")
    )
    r = cli("run", "unknown.toml", cwd=project, store=store)
    assert "contract.budget.max_cycle" in r.stderr
    cases.append(r)
    (project / "tasks.jsonl").write_text('{"id": 1}\nnot json\n')
    r = cli("run", "loop.toml", "--tasks", "tasks.jsonl", cwd=project, store=store)
    assert "tasks.jsonl:2" in r.stderr
    cases.append(r)
    (project / "foreign.db").write_text("")
    con = sqlite3.connect(project / "foreign.db")
    con.execute("CREATE TABLE invoices(id INTEGER)")
    con.commit()
    con.close()
    r = cli("runs", "--store", str(project / "foreign.db"), cwd=project)
    assert "did not create" in r.stderr
    cases.append(r)
    (project / "garbage.db").write_bytes(b"\x00garbage" * 512)
    cases.append(cli("runs", "--store", str(project / "garbage.db"), cwd=project))
    cases.append(cli("show", "no-such-run", cwd=project, store=store))
    cases.append(cli("runs", "--store", "mysql://x/y", cwd=project))
    cases.append(cli("runs", "--store", "/proc/no-such/store.db", cwd=project))
    ldb = Path(__file__).parents[1] / "data/ldb/humaneval/reflexion/gpt-4o-2024-05-13.jsonl"
    # --out in a missing folder is refused (test_cli_out_folders); a file standing where the
    # folder would go is a one-line error too
    (project / "a-file").write_text("x")
    r = cli("import", "ldb", str(ldb), "--out", str(project / "a-file" / "t.jsonl"), cwd=project)
    assert "--out" in r.stderr
    cases.append(r)
    for r in cases:
        assert r.returncode == 2, (r.args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().startswith("loopwright: error:"), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cancel_parked_run(project: Path) -> None:
    store = project / "s.db"
    task = _parking_task(project / "t.json")
    cli("run", "loop.toml", "--task", str(task), cwd=project, store=store)
    run_id = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)[0]["run_id"]
    assert cli("cancel", run_id, "--by", "ana", cwd=project, store=store).returncode == 0
    run = json.loads(cli("runs", "--json", cwd=project, store=store).stdout)[0]
    assert run["status"] == "cancelled"
    assert run["stop_reason"] == "cancelled"
    assert run["packet"]["best_candidate"]
