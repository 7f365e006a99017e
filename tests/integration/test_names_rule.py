"""Loop and project names keep the character rule of task keys, ``--by`` and notes (names48):
a loop or project named with a bidirectional control (``pay\u202eroll``), a mark that reorders
the digits beside it (U+200E, U+200F, U+061C), a C1 control or only invisible characters was
accepted, stored and shown to the person deciding about a payment. New names are refused with
the words a task key is refused with; names an earlier release stored are read, listed and
filtered on as they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.dashboard import dashboard

import loopwright as lw
from loopwright._keys import check_key

# each: (the name, what the refusal says)
REFUSED = [
    ("pay\u202eroll", "must not hold a bidirectional control (U+202E at position 4)"),
    ("pay\u2067roll", "must not hold a bidirectional control (U+2067 at position 4)"),
    ("10\u200f 20", "must not hold a bidirectional control (U+200F at position 3)"),
    ("a\u200eb", "must not hold a bidirectional control (U+200E at position 2)"),
    ("a\u061cb", "must not hold a bidirectional control (U+061C at position 2)"),
    ("a\x9bb", "must not hold a control character (U+009B at position 2)"),
    ("a\u2028b", "must not hold a control character (U+2028 at position 2)"),
    ("\u200b\u2060", "must hold a visible character"),
]
KEPT = ["naïve שלום مرحبا 日本語", "a\u200bb", "ops 🎉", "accounts-payable"]


def _loop(name: str = "names", project: str = "") -> lw.Loop:
    return lw.Loop(
        name=name,
        project=project,
        actor=lambda ctx: lw.Proposal.edit("doc", {"t": 1}),
        verifiers=[lambda state, proposal: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )


TASK = {"artifacts": {"doc": {"t": 0}}}


@pytest.mark.parametrize(("name", "why"), REFUSED)
def test_a_loop_name_is_refused_as_a_task_key_is(name: str, why: str) -> None:
    with pytest.raises(lw.ConfigError) as key:
        check_key(name)
    assert why in str(key.value)  # the rule the name keeps: the task key's, in its words
    with pytest.raises(lw.ConfigError) as exc:
        _loop(name=name)
    assert exc.value.field == "name" and why in str(exc.value), exc.value
    assert str(exc.value).startswith(f"name: loop name {name!r} ")


@pytest.mark.parametrize(("name", "why"), REFUSED)
def test_a_project_name_is_refused_wherever_it_is_given(
    name: str, why: str, tmp_path: Path
) -> None:
    with pytest.raises(lw.ConfigError) as exc:
        _loop(project=name)
    assert exc.value.field == "project" and why in str(exc.value), exc.value
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        with pytest.raises(lw.ConfigError) as exc:
            rt.run_sync(_loop(), TASK, task_key="p-1", project=name)
        assert exc.value.field == "project" and why in str(exc.value)
        with pytest.raises(lw.ConfigError) as exc:
            rt.run_sync(_loop(), {**TASK, "project": name}, task_key="p-2")
        assert exc.value.field == "task.project" and why in str(exc.value)
        assert rt.store.list_runs() == []  # nothing stored


@pytest.mark.parametrize("name", KEPT)
def test_names_of_any_script_are_kept(name: str, tmp_path: Path) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        run = rt.run_sync(_loop(name=name, project=name), TASK, task_key="k-1")
        rec = rt.store.get_run(run.run_id)
        assert rec is not None and (rec.loop_name, rec.project) == (name, name)


def test_the_marks_are_refused_in_by_and_kept_in_a_note(tmp_path: Path) -> None:
    """A mark in ``--by`` is refused as in a name; a decision's note is prose, where
    right-to-left keyboards put the marks: it keeps them (every display writes them out),
    while an embedding or override stays refused there too."""
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        with pytest.raises(lw.ConfigError, match="bidirectional control"):
            rt.approve("nothing", by="ann\u200f")
        with pytest.raises(lw.ConfigError, match="bidirectional control"):
            rt.approve("nothing", by="ann", note="ok \u202e10")
        # the note passes the character rule: what stops this approval is the missing run
        with pytest.raises(lw.RunNotFoundError):
            rt.approve("nothing", by="ann", note="\u05e9\u05dc\u05d5\u05dd\u200f 10 \u200f20")


def _cli(*args: str, cwd: Path, store: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_DEBUG"}
    if store:
        env["LOOPWRIGHT_STORE"] = store
    return subprocess.run(
        [sys.executable, "-m", "loopwright", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_spec_and_a_task_file_with_such_a_name_are_refused_in_words(tmp_path: Path) -> None:
    (tmp_path / "acts.py").write_text(
        "import loopwright as lw\n"
        "def act(ctx):\n    return lw.Proposal.edit('doc', {'t': 1})\n"
        "def ok(state, proposal):\n    return lw.Verdict(passed=True, score=1.0)\n"
    )
    body = (
        '{head}\ntasks = "tasks.jsonl"\n[actor]\nref = "acts.py:act"\n'
        '[[verifiers]]\nname = "ok"\nref = "acts.py:ok"\n[contract.budget]\nmax_cycles = 1\n'
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_key": "t1", **TASK}) + "\n")
    for head, said in (
        ('name = "pay\\u202eroll"', "name: loop name 'pay\\u202eroll' must not hold a bidi"),
        ('name = "pay"\nproject = "ap\\u200fx"', "project: project name 'ap\\u200fx' must"),
    ):
        (tmp_path / "loop.toml").write_text(body.format(head=head))
        r = _cli("check", "loop.toml", cwd=tmp_path)
        assert r.returncode != 0 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    (tmp_path / "loop.toml").write_text(body.format(head='name = "pay"'))
    assert _cli("check", "loop.toml", cwd=tmp_path).returncode == 0
    tasks.write_text(json.dumps({"task_key": "t1", "project": "ap\u2066x", **TASK}) + "\n")
    r = _cli("check", "loop.toml", cwd=tmp_path)
    said = "tasks.jsonl:1: project name 'ap\\u2066x' must not hold a bidirectional control"
    assert r.returncode != 0 and said in r.stderr and "Traceback" not in r.stderr, r.stderr


def stored_by_an_older_release(store: str, loop_name: str, project: str) -> str:
    """A run of ``loop_name`` in ``project`` as a release before the rule stored it (the
    caller has the ``older_release`` fixture, tests/integration/conftest.py); its id."""
    with lw.Runtime(store) as rt:
        return rt.run_sync(_loop(loop_name, project), TASK, task_key="old-1").run_id


def test_names_an_earlier_release_stored_are_read_and_listed(
    tmp_path: Path, older_release: None
) -> None:
    name, project = "pay\u202eroll", "ap\u200fx"
    store = str(tmp_path / "old.db")
    run_id = stored_by_an_older_release(store, name, project)
    with lw.Runtime(store) as rt:
        [rec] = rt.store.list_runs(project=project)
        assert (rec.run_id, rec.loop_name, rec.project) == (run_id, name, project)
        assert rt.store.run_projects() == [project]
    r = _cli("runs", "--project", project, "--json", cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stderr
    assert run_id in r.stdout and "pay\\u202eroll" in r.stdout
    c = dashboard(store, token="names-token-0123456789")
    [listed] = c.get("/api/runs", params={"project": project}).json()
    assert (listed["run_id"], listed["loop_name"], listed["project"]) == (run_id, name, project)
    assert c.get(f"/runs/{run_id}").status_code == 200


def test_a_fork_keeps_the_project_an_earlier_release_stored(
    tmp_path: Path, older_release: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(tmp_path / "old.db")
    run_id = stored_by_an_older_release(store, "payroll", "ap\u200fx")
    monkeypatch.undo()  # this release's rule from here on
    with pytest.raises(lw.ConfigError, match="bidirectional control"):
        _loop("payroll", "ap\u200fx")
    with lw.Runtime(store) as rt:
        fork = rt.fork(run_id, 0, loop=_loop("payroll"), by="ann")
        assert fork.project == "ap\u200fx" and fork.forked_from == run_id
