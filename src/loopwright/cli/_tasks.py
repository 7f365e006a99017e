"""Reading task files and choosing task keys for `loopwright run`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import ConfigError

__all__ = ["exit_code_for", "load_tasks", "task_key"]


def load_tasks(task: Path | None, tasks: Path | None, default: str | None) -> list[dict[str, Any]]:
    """Tasks from ``--task FILE`` (one JSON object), ``--tasks FILE.jsonl``, the spec's default
    task file, or one empty task."""
    if task is not None and tasks is not None:
        raise ConfigError("give --task or --tasks, not both", field="--task")
    if task is not None:
        data = _read_json(task, "--task")
        if not isinstance(data, dict):
            raise ConfigError(f"{task} must hold one JSON object", field="--task")
        return [data]
    path = tasks or (Path(default) if default else None)
    if path is None:
        return [{}]
    where = "--tasks" if tasks is not None else "tasks (in the spec)"
    if not path.is_file():
        raise ConfigError(f"no task file at {path}", field=where)
    out: list[dict[str, Any]] = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{i}: not valid JSON ({exc.msg})", field=where) from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}:{i}: each line must be a JSON object", field=where)
        out.append(obj)
    if not out:
        raise ConfigError(f"{path} holds no tasks", field=where)
    return out


def _read_json(path: Path, where: str) -> Any:
    if not path.is_file():
        raise ConfigError(f"no file at {path}", field=where)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})", field=where) from None


def task_key(loop_name: str, task: Mapping[str, Any], index: int, prefix: str = "") -> str:
    """``task_key`` from the task, else ``<loop>:<id>``, else ``<loop>:#<line>``."""
    if task.get("task_key"):
        return prefix + str(task["task_key"])
    ident = task.get("id") or task.get("task_id")
    return f"{prefix}{loop_name}:{ident if ident is not None else f'#{index + 1}'}"


_SEVERITY = {"failed": 1, "escalated": 5, "awaiting_approval": 4, "stopped": 3, "cancelled": 3}


def exit_code_for(statuses: list[str]) -> int:
    """The most serious outcome decides: failed 1, escalated 5, awaiting approval 4,
    stopped or cancelled 3, all accepted 0."""
    for status in ("failed", "escalated", "awaiting_approval", "stopped", "cancelled"):
        if status in statuses:
            return _SEVERITY[status]
    return 0
