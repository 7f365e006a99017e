"""Reading task files and choosing task keys for `loopwright run`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import ConfigError
from .._json import strict_loads
from .._keys import check_key, check_unpadded
from .._loop import Loop
from .._task_parts import number_as_name, starting_state

__all__ = [
    "TaskList",
    "check_tasks",
    "exit_code_for",
    "load_tasks",
    "task_key",
    "task_keys",
]


class TaskList(list[dict[str, Any]]):
    """Tasks read from a file, with the line each came from (for errors that name lines)."""

    def __init__(self, where: str, path: Path | None = None) -> None:
        super().__init__()
        self.where, self.path = where, path
        self.lines: list[int] = []


def load_tasks(task: Path | None, tasks: Path | None, default: str | None) -> TaskList:
    """Tasks from ``--task FILE`` (one JSON object), ``--tasks FILE.jsonl``, the spec's default
    task file, or one empty task."""
    if task is not None and tasks is not None:
        raise ConfigError("give --task or --tasks, not both", field="--task")
    if task is not None:
        data = _read_json(task, "--task")
        if not isinstance(data, dict):
            raise ConfigError(f"{task} must hold one JSON object", field="--task")
        one = TaskList("--task", task)
        one.append(_checked(data, f"{task}", "--task"))
        one.lines.append(1)
        return one
    path = tasks or (Path(default) if default else None)
    if path is None:
        empty = TaskList("task")
        empty.append({})
        empty.lines.append(0)
        return empty
    where = "--tasks" if tasks is not None else "tasks (in the spec)"
    _a_file(path, where, "no task file at")
    out = TaskList(where, path)
    for i, line in enumerate(_LINE_END.split(_text(path, where)), 1):
        if not line.strip():
            continue
        try:
            obj = strict_loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{i}: not valid JSON ({exc.msg})", field=where) from None
        except ValueError as exc:  # NaN, 1e999, a key given twice, nested too deeply
            raise ConfigError(f"{path}:{i}: not valid JSON ({exc})", field=where) from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}:{i}: each line must be a JSON object", field=where)
        out.append(_checked(obj, f"{path}:{i}", where))
        out.lines.append(i)
    if not out:
        raise ConfigError(f"{path} holds no tasks", field=where)
    return out


# A JSON Lines file's line ends: \n, \r\n or a bare \r, which JSON text cannot hold inside a
# string. Not str.splitlines: it also ends a line at U+2028, U+2029 and U+0085, which a JSON
# string may hold as they are (json.dumps(..., ensure_ascii=False) writes them so), and a task
# whose text held one was refused as "Unterminated string".
_LINE_END = re.compile(r"\r\n|\r|\n")


def _text(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a byte-order mark is not a mistake
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})", field=where
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", field=where) from None


# What names a run must be text (or a whole number: a task key's digits); a table would be
# stored as its Python repr. A project is text only, as ``Runtime.create``'s (``starting_state``).
_NAMING = ("task_key", "id", "task_id", "project")
# Deeper tasks are refused here: the run's state, masking and store code walk values
# recursively, and Python's stack ends near 1,000 levels (json.loads alone parses ~990).
MAX_DEPTH = 100


def _depth(value: Any) -> int:
    deepest, level = 0, [(value, 1)]
    while level:  # iterative: the check itself must not overflow the stack
        v, d = level.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict):
            level.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            level.extend((x, d + 1) for x in v)
    return deepest


def _checked(task: dict[str, Any], at: str, where: str) -> dict[str, Any]:
    if _depth(task) > MAX_DEPTH:
        raise ConfigError(f"{at}: nested deeper than {MAX_DEPTH} levels", field=where)
    for name in _NAMING:
        value = task.get(name)
        kinds = str if name == "project" else str | int
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            kind = type(value).__name__
            if name == "project":  # as Runtime.run says it (``starting_state``)
                said = f"{at}: project must be text, got {kind} {value!r}{number_as_name(value)}"
                raise ConfigError(said, field=where)
            raise ConfigError(f"{at}: {name} must be a string, got {kind} {value!r}", field=where)
    return task


def _a_file(path: Path, where: str, missing: str) -> None:
    """``path`` is a file, or a one-line error: a folder is said to be one ("no file at ." sent
    a person looking for a file that was not missing; outside49). A pipe is read as a file
    (``--tasks /dev/stdin``, ``--tasks <(jq ...)``): tasks are read once (outside50b)."""
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a task file: name the file", field=where)
    if not path.exists():
        raise ConfigError(f"{missing} {path}", field=where)


def _read_json(path: Path, where: str) -> Any:
    _a_file(path, where, "no file at")
    text = _text(path, where)
    try:
        return strict_loads(text)
    except ValueError as exc:  # JSONDecodeError too
        raise ConfigError(f"{path} is not valid JSON ({exc})", field=where) from None


def task_key(loop_name: str, task: Mapping[str, Any], index: int, prefix: str = "") -> str:
    """``task_key`` from the task, else ``<loop>:<id>``, else ``<loop>:#<line>``. An ``id``
    that is falsy (``0``, ``""``, ``false``) is passed over (then ``task_id``, if not None, as
    it is): kept so, as runs stored since the first release are keyed so (docs/concepts.md,
    task keys); keyed otherwise, such a task would be run, and paid for, again."""
    if task.get("task_key") is not None:
        return prefix + str(task["task_key"])
    ident = task.get("id") or task.get("task_id")
    return f"{prefix}{loop_name}:{ident if ident is not None else f'#{index + 1}'}"


def task_keys(loop_name: str, tasks: list[dict[str, Any]]) -> list[str]:
    """``task_key`` of each task, each checked by the rule of task keys (``_keys.check_key``);
    two tasks of one file with the same key are refused (they would be one run, raced for by
    both), naming both lines."""
    keys = [task_key(loop_name, t, i) for i, t in enumerate(tasks)]
    lines, path, where = _located(tasks)
    seen: dict[str, int] = {}
    for key, line in zip(keys, lines, strict=True):
        check_key(key, where, at=f"{path}:{line}" if line else "")
        if key in seen:
            raise ConfigError(
                f"{path}:{seen[key]} and {path}:{line} have the same task key {key!r}; "
                "give each task its own task_key (or id)",
                field=where,
            )
        seen[key] = line
    return keys


def check_tasks(loop: Loop, tasks: list[dict[str, Any]], keys: list[str]) -> None:
    """Each task checked as ``Runtime.create`` checks it (``starting_state``: the same code,
    the loop's ``init`` run on it, the task's own cycle budget read from the masked task, as
    the run reads it), every task before the first run is made, naming the file and line: a
    bad one on line 3 left the runs of lines 1 and 2 made and not run. (The budget was read
    here from the raw task, and by ``Runtime.create`` from the state ``init`` made: two
    checks that disagreed, with each other and with the run.)"""
    lines, path, _ = _located(tasks)
    for t, key, line in zip(tasks, keys, lines, strict=True):
        try:
            proj = starting_state(loop, t, key, None)[2]
            if proj != loop.project:  # (the task's "project": a new run's, as create asks)
                check_unpadded(proj, "project name", "task.project")
        except ConfigError as exc:
            raise ConfigError(f"{path}:{line}: {exc.message}", field=exc.field) from None


def _located(tasks: list[dict[str, Any]]) -> tuple[list[int], object, str]:
    """The line of each task, its file (or "the tasks") and its option, for errors."""
    lines = getattr(tasks, "lines", None) or [i + 1 for i in range(len(tasks))]
    return lines, getattr(tasks, "path", None) or "the tasks", getattr(tasks, "where", "--tasks")


_SEVERITY = {"failed": 1, "escalated": 5, "awaiting_approval": 4, "stopped": 3, "cancelled": 3}


def exit_code_for(statuses: list[str]) -> int:
    """The most serious outcome decides: failed 1, escalated 5, awaiting approval 4,
    stopped or cancelled 3, all accepted 0."""
    for status in ("failed", "escalated", "awaiting_approval", "stopped", "cancelled"):
        if status in statuses:
            return _SEVERITY[status]
    return 0
