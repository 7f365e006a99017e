"""Every mistake gets one line on stderr and exit 2, never a traceback, and leaves the store as
it was (issue 16 item 7): each case below was an "internal error" (exit 1), a silent exit 0,
uvicorn's traceback (exit 3), or a value taken as something else. The CLI in its own process, as
a user (or the tester's attack scripts) drives it: forked from one that imported it once
(tests/forkserver.py), its exit code and both streams as the console script's subprocess gives.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_cli

import loopwright

from .conftest import SPEC

TASK = {"id": "t", "artifacts": {"doc": {"a": 0, "b": 0, "c": 3, "pay": 10}}}


def lw(
    *args: str,
    cwd: Path,
    store: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process (``run_cli``: forked from a process that imported it once,
    or a real subprocess); ``stdin``: text on its standard input, a pipe."""
    full = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_DEBUG"}
    full.pop("LOOPWRIGHT_UI_TOKEN", None)
    if store is not None:
        full["LOOPWRIGHT_STORE"] = str(store)
    full.update(env or {})
    exe = Path(sys.executable).with_name("loopwright")
    # A short limit: a case that is not refused (a dashboard that starts serving) fails here.
    return run_cli([str(exe), *args], full, timeout=60, cwd=cwd, input=stdin)


def refused(r: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one-line error of a refused command, checked: exit 2, one line, the words in it."""
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("loopwright: error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def dump(store: Path) -> list[str]:
    """The store's whole content (schema and rows), to show a refused command changed none."""
    con = sqlite3.connect(store)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def spec(project: Path, name: str, text: str) -> str:
    (project / name).write_text(text)
    return name


def task_file(project: Path, *lines: object, name: str = "tasks.jsonl") -> str:
    (project / name).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return name


@pytest.fixture
def accepted(project: Path) -> tuple[Path, str]:
    """A store holding one accepted run: (store, run id)."""
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(TASK))
    r = lw("run", "loop.toml", "--task", "t.json", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    [run] = json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    return store, run["run_id"]


# --- files that are not text, or nested too deeply ------------------------------------------
def test_a_task_file_that_is_not_utf8(project: Path) -> None:
    (project / "tasks.jsonl").write_bytes(b'{"id": "t\xff"}\n')
    store = project / "s.db"
    refused(lw("run", "loop.toml", "--tasks", "tasks.jsonl", cwd=project, store=store), "UTF-8")
    (project / "t.json").write_bytes(b'{"id": "\xfe"}')
    refused(lw("run", "loop.toml", "--task", "t.json", cwd=project, store=store), "--task")
    assert not store.exists()


def test_a_trace_file_that_is_not_utf8(project: Path) -> None:
    (project / "traces.jsonl").write_bytes(b'{"format": "loopwright.run-trace/1", "x": "\xff"}\n')
    refused(lw("replay", "traces.jsonl", "--contract", "loop.toml", cwd=project), "UTF-8")
    refused(lw("import", "ldb", "traces.jsonl", "--out", "o.jsonl", cwd=project), "UTF-8")
    assert not (project / "o.jsonl").exists()


def test_a_spec_nested_too_deeply(project: Path) -> None:
    deep = SPEC + "x = " + "[" * 5000 + "]" * 5000 + "\n"
    refused(lw("check", spec(project, "deep.toml", deep), cwd=project), "nested too deeply")
    # a contract file for replay
    args = ("replay", "store", "--contract", "deep.toml", "--store", "none.db")
    refused(lw(*args, cwd=project), "--contract", "nested too deeply")


def test_a_task_nested_too_deeply(project: Path) -> None:
    store = project / "s.db"
    (project / "deep.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused(lw("run", "loop.toml", "--task", "deep.json", cwd=project, store=store), "deep")
    # parsed by json, but deeper than the run's state and store code can walk
    task_file(project, {**TASK, "x": json.loads("[" * 600 + "]" * 600)})
    refused(lw("run", "loop.toml", "--tasks", "tasks.jsonl", cwd=project, store=store), ":1:")
    assert not store.exists()


# --- values of the wrong kind -----------------------------------------------------------------
def test_a_timeout_that_is_text(project: Path) -> None:
    name = spec(project, "ten.toml", SPEC.replace("timeout_s = 5", 'timeout_s = "ten"'))
    refused(lw("check", name, cwd=project), "actor.timeout_s", "number")


def test_a_task_file_that_is_a_number(project: Path) -> None:
    name = spec(project, "t7.toml", "tasks = 7\n" + SPEC)
    refused(lw("check", name, cwd=project), "tasks", "string")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (SPEC.replace("timeout_s = 5", "timeout_s = nan"), "actor.timeout_s"),
        (SPEC.replace('ref = "loopmod.py:check"', 'ref = "loopmod.py:check"\nweight = nan'),
         "verifiers[0].weight"),
        (SPEC.replace('ref = "loopmod.py:check"', 'ref = "loopmod.py:check"\ntimeout_s = nan'),
         "verifiers[0].timeout_s"),
        (SPEC.replace("max_cost_usd = 3.0", "max_cost_usd = inf"), "contract.budget.max_cost_usd"),
    ],
)  # fmt: skip
def test_numbers_that_are_not_finite(project: Path, text: str, field: str) -> None:
    """NaN compares false to every limit: a NaN weight makes every score NaN (the run burns
    its budget), a NaN timeout never fires."""
    name = spec(project, "nan.toml", text)
    refused(lw("check", name, cwd=project), field, "finite")
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(TASK))
    refused(lw("run", name, "--task", "t.json", cwd=project, store=store), field)
    assert not store.exists()


def test_command_line_numbers_that_are_not_finite(project: Path) -> None:
    """``--usd-per-token nan`` priced every imported task at NaN; ``--poll inf`` never polls.
    (Click reports an option value it cannot convert as a usage error: exit 2, no traceback.)"""
    ldb = Path(__file__).parents[1] / "data/ldb/humaneval/reflexion/gpt-4o-2024-05-13.jsonl"
    for args in (
        ("import", "ldb", str(ldb), "--out", "o.jsonl", "--usd-per-token", "nan"),
        ("worker", "--poll", "inf", "--once", "--store", "w.db"),
    ):
        r = lw(*args, cwd=project)
        assert r.returncode == 2, r.stderr
        assert "is not a valid number" in r.stderr and "Traceback" not in r.stderr
    assert not (project / "o.jsonl").exists() and not (project / "w.db").exists()


def test_a_project_that_is_a_table(project: Path) -> None:
    name = spec(project, "p.toml", 'project = "tests"\n' + SPEC.replace('project = "tests"\n', ""))
    assert lw("check", name, cwd=project).returncode == 0
    name = spec(project, "p.toml", SPEC.replace('project = "tests"', "project = {a = 1}"))
    refused(lw("check", name, cwd=project), "project", "string")


def test_a_task_key_that_is_an_object(project: Path) -> None:
    store = project / "s.db"
    task_file(project, {**TASK, "task_key": {"x": 1}})
    refused(
        lw("run", "loop.toml", "--tasks", "tasks.jsonl", cwd=project, store=store),
        "tasks.jsonl:1",
        "task_key",
    )
    assert not store.exists()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        # a string where a list goes was read character by character: check passed, and run
        # failed on "part reference 'i' must look like 'artifact/part'"
        ({"plan": [{"id": "s1", "parts": "doc/a"}]}, ("task.plan[0].parts", "list")),
        # depends_on "s0" was the steps "s" and "0", never met: the step was never next
        ({"plan": [{"id": "s1", "depends_on": "s0"}]}, ("task.plan[0].depends_on", "list")),
        ({"plan": [{"id": "s1", "depends_on": ["s0"]}]}, ("task.plan[0].depends_on", "'s0'")),
        ({"plan": [{"id": "s1"}, {"id": "s1"}]}, ("task.plan[1].id", "task.plan[0]")),
        ({"plan": [{"id": "s1", "parts": ["a"]}]}, ("task.plan[0].parts", "artifact/part")),
        ({"plan": 5}, ("task.plan", "list of steps")),  # (was "'int' object is not iterable")
        ({"plan": {"id": "s1"}}, ("task.plan", "list of steps")),  # (was "needs an 'id'")
        ({"artifacts": []}, ("task.artifacts", "table")),  # ([], 0, "": no artifacts, exit 0)
        ({"artifacts": 0}, ("task.artifacts", "table")),
        # a table goal was the goal "{'text': 'x'}"; a number project was "5", a table refused
        ({"goal": {"text": "x"}}, ("task.goal", "must be text", "dict")),
        ({"project": 5}, ("project", "must be text", "int 5", "written as text: \"5\"")),
        ({"project": {"a": 1}}, ("project", "must be text", "dict")),
    ],
)  # fmt: skip
def test_a_task_plan_or_artifacts_of_the_wrong_kind(
    project: Path, extra: dict[str, object], words: tuple[str, ...]
) -> None:
    store = project / "s.db"
    task_file(project, {**TASK, **extra})
    refused(
        lw("check", "loop.toml", "--tasks", "tasks.jsonl", cwd=project), "tasks.jsonl:1", *words
    )
    refused(lw("run", "loop.toml", "--tasks", "tasks.jsonl", cwd=project, store=store), *words)
    assert not store.exists()


def test_duplicate_task_keys_in_one_file(project: Path) -> None:
    """They would be one run, raced for by two coroutines; the second line was dropped."""
    store = project / "s.db"
    task_file(project, {**TASK, "id": "a"}, {**TASK, "id": "b"}, {**TASK, "id": "a"})
    refused(
        lw("run", "loop.toml", "--tasks", "tasks.jsonl", cwd=project, store=store),
        "tasks.jsonl:1",
        "tasks.jsonl:3",
        "'e2e:a'",
    )
    assert not store.exists()


def test_an_unknown_status_filter(accepted: tuple[Path, str], project: Path) -> None:
    store, _ = accepted
    refused(lw("runs", "--status", "bogus", cwd=project, store=store), "--status", "bogus")


# --- the actor's module ending the process ----------------------------------------------------
def test_sys_exit_while_importing_an_actor(project: Path) -> None:
    (project / "exiting.py").write_text("import sys\nsys.exit(0)\n")
    name = spec(project, "exit.toml", SPEC.replace("loopmod.py:actor", "exiting.py:actor"))
    refused(lw("check", name, cwd=project), "actor.ref", "exiting.py", "sys.exit(0)")
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(TASK))
    refused(lw("run", name, "--task", "t.json", cwd=project, store=store), "exiting.py")
    assert not store.exists()


# --- commands with nothing to do --------------------------------------------------------------
def test_cancel_of_an_ended_run(accepted: tuple[Path, str], project: Path) -> None:
    store, run_id = accepted
    before = dump(store)
    refused(lw("cancel", run_id, cwd=project, store=store), run_id[:12], "already ended")
    assert dump(store) == before


def test_run_that_skipped_runs_held_by_another_process(project: Path) -> None:
    """Every run of the command held elsewhere: exit 0 read as "all accepted"."""
    import loopwright as lw_api
    from loopwright.store import open_store

    store = project / "s.db"
    loop = lw_api.load_spec(project / "loop.toml")
    with open_store(str(store)) as st:
        rt = lw_api.Runtime(st)
        rec, _ = rt.create(loop, TASK, task_key="held-1")
        # another host's live lease, for an hour: never taken over as a dead local owner's
        st.acquire_lease(rec.run_id, "elsewhere.example:1:worker", 3600.0)
    (project / "t.json").write_text(json.dumps(TASK))
    r = lw("run", "loop.toml", "--task", "t.json", "--task-key", "held-1", cwd=project, store=store)
    refused(r, rec.run_id[:12], "held-1", "another process")


# --- the dashboard's start ----------------------------------------------------------------------
def test_a_short_dashboard_token(project: Path) -> None:
    r = lw("ui", "--port", "0", cwd=project, env={"LOOPWRIGHT_UI_TOKEN": "abc"})
    refused(r, "LOOPWRIGHT_UI_TOKEN", "16 characters")


def test_a_port_out_of_range(project: Path) -> None:
    store = project / "s.db"
    refused(lw("ui", "--port", "99999", cwd=project, store=store), "--port", "99999")
    assert not store.exists()


def test_a_busy_port(project: Path) -> None:
    store = project / "s.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        refused(lw("ui", "--port", port, cwd=project, store=store), "--port", port, "in use")
    assert not store.exists()


def test_a_body_limit_that_is_no_size(project: Path) -> None:
    store = project / "s.db"
    for given in ("0", "-1", "0.0001"):
        r = lw("ui", "--port", "0", "--max-body-mib", given, cwd=project, store=store)
        refused(r, "--max-body-mib")
    assert not store.exists()


def test_a_resume_bound_that_is_no_count(project: Path) -> None:
    store = project / "s.db"
    for given in ("0", "-3"):
        r = lw("ui", "--port", "0", "--max-resumes", given, cwd=project, store=store)
        refused(r, "--max-resumes")
    assert not store.exists()


def test_a_dashboard_over_a_store_that_does_not_exist(project: Path) -> None:
    store = project / "typo.db"
    refused(lw("ui", "--port", "0", "--store", str(store), cwd=project), "no store", "typo.db")
    assert not store.exists()


def test_a_send_url_that_does_not_parse(accepted: tuple[Path, str], project: Path) -> None:
    store, run_id = accepted
    refused(lw("trace", run_id, "--send", "http://[::1", cwd=project, store=store), "--send")


# --- a damaged store ----------------------------------------------------------------------------
def test_a_row_that_does_not_decode(accepted: tuple[Path, str], project: Path) -> None:
    store, run_id = accepted
    con = sqlite3.connect(store)
    # (a run's task is in run_tasks since schema 12; it is read with the run's row)
    con.execute("UPDATE run_tasks SET task = '{not json' WHERE run_id = ?", (run_id,))
    con.commit()
    con.close()
    before = dump(store)
    for args in (("runs",), ("show", run_id), ("metrics",)):
        refused(lw(*args, cwd=project, store=store), "store:", "table runs", run_id)
    assert dump(store) == before


def test_a_missing_table(accepted: tuple[Path, str], project: Path) -> None:
    store, run_id = accepted
    con = sqlite3.connect(store)
    con.execute("DROP TABLE approvals")
    con.commit()
    con.close()
    before = dump(store)
    for args in (("approvals",), ("show", run_id)):
        refused(lw(*args, cwd=project, store=store), "store:", "approvals")
    assert dump(store) == before


def test_an_empty_store_file(project: Path) -> None:
    """A truncated store was silently a new one: every effect would run again."""
    store = project / "s.db"
    store.touch()
    (project / "t.json").write_text(json.dumps(TASK))
    refused(lw("run", "loop.toml", "--task", "t.json", cwd=project, store=store), "empty")
    refused(lw("runs", cwd=project, store=store), "empty")
    assert store.stat().st_size == 0
    assert sorted(p.name for p in project.glob("s.db*")) == ["s.db"]


def test_a_message_of_several_lines_is_printed_on_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL's error text adds the statement and a caret on lines of their own."""
    from loopwright import StoreError
    from loopwright.cli import _app, main

    def command(args: list[str]) -> object:
        def run(**_: object) -> None:
            raise StoreError('relation "approvals" does not exist\nLINE 1: SELECT\n       ^')

        return run

    monkeypatch.setattr(_app, "command_for", command)
    assert main(["approvals"]) == 2
    err = capsys.readouterr().err
    assert err == 'loopwright: error: relation "approvals" does not exist LINE 1: SELECT ^\n'


def test_a_dashboard_that_would_act_under_loopwright_s_own_name(project: Path) -> None:
    """``--as`` (or ``$LOOPWRIGHT_UI_IDENTITY``) names who the dashboard's actions are recorded
    under where the store has no users. ``loopwright``, ``policy:…`` or a name holding an
    escape or a bidirectional control started a dashboard whose every decision was then
    refused while its cancels and rollbacks were recorded under that name (web50)."""
    store = project / "s.db"
    with loopwright.Runtime(str(store)):  # a store it would serve: refused, not served
        pass
    before = dump(store)
    for name in ("loopwright", "policy:earned", "ana\x1b[2J", "ana\u202e"):
        refused(lw("ui", "--port", "0", "--as", name, cwd=project, store=store), "--as")
    r = lw(
        "ui", "--port", "0", cwd=project, store=store, env={"LOOPWRIGHT_UI_IDENTITY": "Loopwright"}
    )
    refused(r, "$LOOPWRIGHT_UI_IDENTITY", "records its own decisions")
    assert dump(store) == before


@pytest.mark.parametrize("name", ["loopwright", "policy:earned", "x\x1b[2Jy"])
def test_an_edit_under_the_engine_s_name(
    accepted: tuple[Path, str], project: Path, name: str
) -> None:
    """`--by loopwright` on an operator's command (here `edit`) in a store without users was
    accepted: the person's edit went into the audit log and the run's events under the
    engine's own name. Refused as a decision's `--by` is, exit 2, nothing written."""
    store, run_id = accepted
    before = dump(store)
    r = lw("edit", run_id, "doc/a", "--value", "5", "--by", name, cwd=project, store=store)
    refused(r, "--by" if name == "x\x1b[2Jy" else "by")
    assert dump(store) == before
