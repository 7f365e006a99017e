"""What a new run's parts must be before it exists: JSON, whether the task gave them or a
loop's ``init`` made them (a set or a date was stored as its text, which the actor and the
checks then read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError
from ._json import owned_copy
from ._parts import part_ref

if TYPE_CHECKING:
    from ._state import TaskState

__all__ = ["check_init_parts", "check_task_parts"]


def check_task_parts(task: Mapping[str, Any]) -> None:
    """A task's ``artifacts`` are its parts' first values, and a part's value must be JSON, as
    a proposal's is: a set or a date there was stored as its ``str``, which the actor and the
    checks then read (``{1, 2}`` judged as the text ``"{1, 2}"``). Refused before the run
    exists, naming the part. A malformed ``artifacts`` is ``TaskState.from_task``'s to name."""
    arts = task.get("artifacts")
    if not isinstance(arts, Mapping):
        return
    for aname, parts in arts.items():
        if not isinstance(parts, Mapping):
            continue
        for pname, value in parts.items():
            _json_part(part_ref(str(aname), str(pname)), value, "task.artifacts")


def check_init_parts(state: TaskState) -> None:
    """The parts a loop's ``init`` made, held to the same rule (a set it put there was
    stored as its ``str`` too)."""
    for ref, part in state.iter_parts():
        for version in part.known.values():
            _json_part(ref, version.value, "init")


def _json_part(ref: str, value: Any, field: str) -> None:
    try:
        owned_copy(value)
    except ValueError as exc:
        raise ConfigError(
            f"the value of {ref} cannot be stored as JSON: {exc}", field=field
        ) from None
