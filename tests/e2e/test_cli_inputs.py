"""A demanding user's inputs at the CLI, as subprocesses: task keys that break the rule of keys
(exit 2, one line, file:line for a task file), `loopwright check` reading the task file as
`run` would, and the hint of `loopwright approvals` when several runs wait (the advice of a run
an actor escalated is tested in test_escalation_advice.py)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from .test_bad_inputs import dump, lw, refused, task_file

TASK = {"artifacts": {"doc": {"a": 0, "b": 0, "c": 3, "pay": 10}}}
PARKS = {"artifacts": {"doc": {"a": 1, "b": 2, "c": 3, "pay": 0}}}  # fixes pay: a risk rule


def test_run_refuses_a_bad_task_key_naming_the_rule(project: Path) -> None:
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(TASK))
    r = lw("run", "loop.toml", "--task", "t.json", "--task-key", "t0", cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    before = dump(store)
    for key, words in [
        ("", "must not be empty"),
        (" t1", "must not begin or end with whitespace"),
        ("a\nb", "control character (U+000A"),
        ("x" * 300, "at most 256 characters"),
    ]:
        r = lw("run", "loop.toml", "--task", "t.json", "--task-key", key, cwd=project, store=store)
        refused(r, "--task-key:", words)
    # a lookup is not a new key: looked up (an older release may have stored it), not found
    refused(lw("show", "a\x1bb", cwd=project, store=store), "no run 'a\\x1bb'")
    r = lw("fork", "t0", "--at-cycle", "0", "--key", "", "--by", "ann", cwd=project, store=store)
    refused(r, "--key:", "must not be empty")
    assert dump(store) == before


def test_run_names_the_line_of_a_bad_key_in_a_task_file(project: Path) -> None:
    store = project / "s.db"
    name = task_file(project, {**TASK, "id": 1}, {**TASK, "task_key": "t\u202eb"})
    r = lw("run", "loop.toml", "--tasks", name, cwd=project, store=store)
    refused(r, f"{name}:2:", "bidirectional control (U+202E")
    assert not store.exists() or 'INSERT INTO "runs"' not in "\n".join(dump(store))


def test_check_reads_the_task_file_as_run_would(project: Path) -> None:
    spec = (project / "loop.toml").read_text()
    (project / "with_tasks.toml").write_text('tasks = "tasks.jsonl"\n' + spec)
    task_file(project, {**TASK, "id": "a"}, {**TASK, "id": "b"})
    ok = lw("check", "with_tasks.toml", "--json", cwd=project)
    assert ok.returncode == 0, ok.stderr
    answers = {a["question"]: a for a in json.loads(ok.stdout)["answers"]}
    assert "2 task(s) in" in answers["Which tasks would it run?"]["answer"]

    # each mistake: exit 2, one line naming file:line, whatever the spec's answers
    (project / "tasks.jsonl").write_text(json.dumps(TASK) + "\n{not json\n")
    refused(lw("check", "with_tasks.toml", cwd=project), "tasks.jsonl:2:", "not valid JSON")
    task_file(project, {**TASK, "id": "a"}, {**TASK, "task_key": ""})
    refused(lw("check", "with_tasks.toml", cwd=project), "tasks.jsonl:2:", "must not be empty")
    task_file(project, {**TASK, "id": "a"}, {**TASK, "id": "b"}, {**TASK, "id": "a"})
    refused(
        lw("check", "with_tasks.toml", cwd=project),
        "tasks.jsonl:1 and",
        "tasks.jsonl:3 have the same task key 'e2e:a'",
    )
    # --tasks names another file than the spec's; without a task file nothing changes
    other = task_file(
        project, {**TASK, "task_key": "ok"}, {**TASK, "task_key": "ok"}, name="o.jsonl"
    )
    refused(lw("check", "loop.toml", "--tasks", other, cwd=project), "o.jsonl:1 and")
    plain = lw("check", "loop.toml", "--json", cwd=project)
    assert plain.returncode == 0, plain.stderr
    assert "Which tasks would it run?" not in plain.stdout


def test_a_bad_per_task_cycle_budget_is_refused_before_any_run_is_made(project: Path) -> None:
    """``budget.max_cycles_key``: a task file whose line 2 holds 0 there made the run of line 1
    and then failed, leaving that run made and never run (before the engine's own check, the
    run of line 2 too, 'running' for ever). `run` and `check` name the line, and nothing is
    made."""
    spec = (project / "loop.toml").read_text()
    capped = spec.replace("max_cycles = 8", 'max_cycles = 8\nmax_cycles_key = "recorded.cap"')
    (project / "capped.toml").write_text(capped)
    store = project / "s.db"
    task_file(project, {**TASK, "id": "a", "recorded": {"cap": 2}}, {**TASK, "id": "b",
              "recorded": {"cap": 0}})  # fmt: skip
    for cmd in ("check", "run"):
        r = lw(cmd, "capped.toml", "--tasks", "tasks.jsonl", cwd=project, store=store)
        refused(r, "tasks.jsonl:2:", "'recorded.cap' must be a whole number >= 1, got 0")
    assert not store.exists() or 'INSERT INTO "runs"' not in "\n".join(dump(store))


INIT_MODULE = """
import loopwright as lw

def init(task):
    # an init that reshapes the task: a "recorded" it came with dropped, its "budget" put there
    kept = {k: v for k, v in task.items() if k not in ("budget", "recorded")}
    return lw.TaskState.from_task({**kept, "recorded": {"cap": task.get("budget")}})
"""


def test_the_task_file_is_checked_as_the_run_reads_the_task(project: Path) -> None:
    """The CLI read each task's cycle budget from the raw task, ``Runtime.create`` from the
    task in the state the spec's ``init`` made, and the run from the task as stored (masked:
    every loaded state's task; a head holds none). With an ``init`` that reshapes the task
    they disagreed: a bad budget ``init`` dropped passed both checks, the run was made, and it
    failed at its first cycle, "running" for ever. One check now, in ``starting_state``, on
    the task as the run reads it; and what ``init`` puts in its state's task is not read."""
    spec = (project / "loop.toml").read_text()
    capped = spec.replace("max_cycles = 8", 'max_cycles = 8\nmax_cycles_key = "recorded.cap"')
    (project / "initmod.py").write_text(INIT_MODULE)
    (project / "init.toml").write_text('init = "initmod.py:init"\n' + capped)
    store = project / "s.db"
    task_file(project, {**TASK, "id": "a", "recorded": {"cap": 2}, "budget": 2},
              {**TASK, "id": "b", "recorded": {"cap": 0}, "budget": 3})  # fmt: skip
    for cmd in ("check", "run"):
        r = lw(cmd, "init.toml", "--tasks", "tasks.jsonl", cwd=project, store=store)
        refused(r, "tasks.jsonl:2:", "'recorded.cap' must be a whole number >= 1, got 0")
    assert not store.exists() or 'INSERT INTO "runs"' not in "\n".join(dump(store))
    # a budget only init's state holds is not the run's: not refused, and not used either
    task_file(project, {**TASK, "id": "c", "budget": 0})
    r = lw("run", "init.toml", "--tasks", "tasks.jsonl", cwd=project, store=store)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [run] = json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    assert run["task_key"] == "e2e:c" and run["status"] == "accepted"


def test_the_approvals_hint_with_several_runs_says_how_to_decide_each(project: Path) -> None:
    store = project / "s.db"
    task_file(project, {**PARKS, "id": 1}, {**PARKS, "id": 2})
    assert (
        lw("run", "loop.toml", "--tasks", "tasks.jsonl", cwd=project, store=store).returncode == 4
    )
    pending = json.loads(lw("approvals", "--json", cwd=project, store=store).stdout)
    assert len({a["run_id"] for a in pending}) == 2
    shown = lw("approvals", cwd=project, store=store)
    assert shown.returncode == 0, shown.stderr
    hint = shown.stdout.strip().splitlines()[-2:]
    # each request's command, the first listed named (hints56: `RUN --request ID` could not
    # be pasted), not as if it were the only one waiting
    assert hint[0].startswith("decide each of the 2 requests, as for the first listed: "), hint
    m = re.search(r"(loopwright approve (\S+) --request (\S+)) \(or deny\)", hint[0])
    assert m is not None, hint
    assert "for each other request, its run and request id" in hint[0], hint
    assert hint[1].startswith("then: loopwright resume --all")
    # the hint's command, pasted, decides the first; followed for the other, both finish
    first = lw(*shlex.split(m.group(1))[1:], "--by", "ann", cwd=project, store=store)
    assert first.returncode == 0, first.stderr
    assert m.group(3) in {a["approval_id"] for a in pending}
    for a in pending:
        if a["approval_id"] == m.group(3):
            continue
        r = lw("approve", a["run_id"], "--request", a["approval_id"], "--by", "ann",
               cwd=project, store=store)  # fmt: skip
        assert r.returncode == 0, r.stderr
    assert lw("resume", "--all", cwd=project, store=store).returncode == 0
    runs = json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    assert [r["status"] for r in runs] == ["accepted", "accepted"]


def test_the_approvals_hint_for_one_request_names_its_run(project: Path) -> None:
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(PARKS))
    assert lw("run", "loop.toml", "--task", "t.json", cwd=project, store=store).returncode == 4
    run_id = json.loads(lw("approvals", "--json", cwd=project, store=store).stdout)[0]["run_id"]
    hint = lw("approvals", cwd=project, store=store).stdout.strip().splitlines()[-2:]
    assert hint[0] == (
        f"decide with: loopwright approve {run_id[:12]} (or deny; --note TEXT records why)"
    )
    assert hint[1].startswith(f"then: loopwright resume {run_id[:12]}")
    # pasted as printed, it decides (notify56: `[--note TEXT]` typed as printed was refused)
    pasted = hint[0].removeprefix("decide with: ").split(" (or")[0]
    r = lw(*shlex.split(pasted)[1:], "--by", "ann", cwd=project, store=store)
    assert r.returncode == 0, r.stderr


def test_a_changed_task_under_an_existing_runs_key_is_said_not_silently_ignored(
    project: Path,
) -> None:
    """newuser46: lines without keys are keyed ``<loop>:#<line>``; an edited task file run
    again was answered with the old runs' results, saying nothing of the tasks not read."""
    store = project / "s.db"
    name = task_file(project, TASK, {**TASK, "id": "x"})
    first = lw("run", "loop.toml", "--tasks", name, cwd=project, store=store)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "note:" not in first.stderr
    again = lw("run", "loop.toml", "--tasks", name, cwd=project, store=store)  # the same tasks
    assert again.returncode == 0 and "not read" not in again.stderr, again.stderr
    # the table shows the old runs: said so, once (it read as this command's work)
    said = " ".join(again.stderr.split())
    assert said.count("note:") == 1, again.stderr
    assert "note: 2 of 2 run(s) had ended before this command and are shown as they" in said
    edited = {"artifacts": {"doc": {"a": 7, "b": 2, "c": 3, "pay": 10}}}
    task_file(project, edited, {**TASK, "id": "x"})
    r = lw("run", "loop.toml", "--tasks", name, "--json", cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    said = " ".join(r.stderr.split())
    assert "note: task key 'e2e:#1' is run" in said, r.stderr
    assert "the task given was not read" in said and "new task_key" in said
    assert "task key 'e2e:x'" not in said  # the unchanged task is not named
    assert "2 of 2 run(s) had ended before this command" in said
    assert [x["task_key"] for x in json.loads(r.stdout)] == ["e2e:#1", "e2e:x"]  # stdout: JSON


def test_the_hints_placeholder_name_typed_as_printed_is_refused_not_recorded(
    project: Path,
) -> None:
    # Day two: `loopwright unpause RUN --by NAME`, typed as the hint printed it, recorded the
    # decision as made by "NAME" in the audit log. The placeholder is refused, the store as it was.
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(PARKS))
    assert lw("run", "loop.toml", "--task", "t.json", cwd=project, store=store).returncode == 4
    run_id = json.loads(lw("approvals", "--json", cwd=project, store=store).stdout)[0]["run_id"]
    before = dump(store)
    r = lw("approve", run_id[:12], "--by", "NAME", cwd=project, store=store)
    refused(r, "--by", "placeholder", "leave --by out")
    assert dump(store) == before
    assert lw("approve", run_id[:12], cwd=project, store=store).returncode == 0
