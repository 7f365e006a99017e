"""Task and contract files given as a pipe (`--tasks /dev/stdin`, `--tasks <(jq ...)`) are read
(outside50b): each is read once, into the runs it makes, and a script generates them that way.
They were refused as "no task file at /dev/stdin", which was not so: the file was there, a pipe,
not a regular file. A spec is read again by `resume` and `worker`, so a pipe is refused for it,
saying that rather than that there is no file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .test_bad_inputs import TASK, refused
from .test_bad_inputs import lw as _lw


def _piped(*args: str, text: str, cwd: Path, store: Path | None = None) -> Any:
    return _lw(*args, cwd=cwd, store=store, stdin=text)


def test_tasks_from_a_pipe_are_run(project: Path) -> None:
    store = project / "s.db"
    lines = "".join(json.dumps({**TASK, "id": i}) + "\n" for i in ("a", "b"))
    r = _piped("check", "loop.toml", "--tasks", "/dev/stdin", "--json", text=lines, cwd=project)
    assert r.returncode == 0, r.stderr  # before: exit 2, "no task file at /dev/stdin"
    answers = {a["question"]: a["answer"] for a in json.loads(r.stdout)["answers"]}
    assert "2 task(s)" in answers["Which tasks would it run?"]
    r = _piped(
        "run", "loop.toml", "--tasks", "/dev/stdin", "--json", text=lines, cwd=project, store=store
    )
    assert r.returncode == 0, r.stderr
    assert sorted(x["task_key"] for x in json.loads(r.stdout)) == ["e2e:a", "e2e:b"]
    one = json.dumps({**TASK, "id": "c"})
    r = _piped(
        "run", "loop.toml", "--task", "/dev/stdin", "--json", text=one, cwd=project, store=store
    )
    assert r.returncode == 0, r.stderr
    assert [x["task_key"] for x in json.loads(r.stdout)] == ["e2e:c"]
    # a bad line in a pipe is named by its line, as in a file; nothing is run
    r = _piped(
        "run", "loop.toml", "--tasks", "/dev/stdin", text=lines + "{x\n", cwd=project, store=store
    )
    refused(r, "/dev/stdin:3:", "not valid JSON")


def test_a_contract_from_a_pipe_is_read(project: Path) -> None:
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(TASK))
    ran = _piped("run", "loop.toml", "--task", "t.json", text="", cwd=project, store=store)
    assert ran.returncode == 0, ran.stderr
    contract = "[budget]\nmax_cycles = 9\n"
    args = ("fork", "e2e:t", "--at-cycle", "0", "--contract", "/dev/stdin", "--by", "ann")
    r = _piped(*args, text=contract, cwd=project, store=store)
    assert r.returncode == 0, r.stderr  # before: "no contract file at /dev/stdin"
    assert "max_cycles" in r.stdout


def test_a_spec_from_a_pipe_is_refused_saying_why(project: Path) -> None:
    spec = (project / "loop.toml").read_text()
    r = _piped("check", "/dev/stdin", text=spec, cwd=project)
    refused(r, "/dev/stdin is not a regular file", "save the spec to a file")
