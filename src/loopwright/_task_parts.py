"""A new run's first state, made and checked before the run exists (``starting_state``): the
task masked, the loop's ``init`` run, its parts JSON whether the task gave them or ``init``
made them (a set or a date was stored as its text, which the actor and the checks then read),
and the task's own cycle budget read from the task as the run will read it. ``Runtime.create`` and the CLI's check of
a task file (every task before the first run is made) both call it: one check, in one place."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._decide import cycle_cap
from ._errors import ConfigError
from ._json import check_given_text, owned_copy, round_trip, too_long
from ._keys import check_key, check_name, fit_key
from ._memory_screen import HELD_OUT_KEY, held_out_name
from ._parts import part_ref
from ._redact import REDACTED, redact
from ._redact_logs import masked_logger
from ._state import TaskState

if TYPE_CHECKING:
    from ._loop import Loop
    from .store import RunRecord

__all__ = [
    "check_init_parts",
    "check_task_parts",
    "ignored_task",
    "say_ignored",
    "starting_state",
]


def starting_state(
    loop: Loop, task: Mapping[str, Any] | None, task_key: str | None, project: str | None
) -> tuple[dict[str, Any], str, str, TaskState]:
    """``(task as stored, key, project, first state)`` of a run of ``loop`` on ``task``, each
    checked (a ``ConfigError`` for the first thing wrong). ``init`` is the loop's, run here."""
    if task is not None and not isinstance(task, Mapping):
        raise ConfigError(
            f"must be a mapping (a task's fields), got {type(task).__name__}", field="task"
        )
    if loop.init is None and task is not None:
        check_task_parts(task)
    # Invariant 9: fields named secret and shaped secrets never reach the store, so the
    # run (actor included) works from the masked task, resumed or not.
    try:
        masked = dict(redact(dict(task or {})))
    except RecursionError:  # (its own fields are stored as JSON too)
        raise ConfigError("it is nested too deeply, or contains itself", field="task") from None
    _no_lost_number(masked)
    _no_misspelt_held_out(masked)
    if task_key is not None:
        key = check_key(task_key)
    elif masked.get("task_key") is not None:
        given = masked["task_key"]
        if isinstance(given, bool) or not isinstance(given, str | int):
            # (a table was taken as its text, a flag as "True": the CLI refused both)
            raise ConfigError(
                f"must be text (or a whole number), got {type(given).__name__}",
                field="task.task_key",
            )
        key = check_key(str(given) if isinstance(given, int) else given, "task.task_key")
    else:
        key = fit_key(loop.name, f":{uuid.uuid4().hex}")
    if project is None:
        # text, as the ``project`` argument and ``Loop.project`` are: a number was stored as
        # its digits and a table as its text (the CLI refused a table, took a number)
        given = masked.get("project")
        if given is not None and not isinstance(given, str):
            raise ConfigError(
                f"must be text, got {type(given).__name__} {given!r}{number_as_name(given)}",
                field="task.project",
            )
        check_given_text(given, field="task.project")
        if given:
            check_name(given, "project name", "task.project")
    proj = project if project is not None else str(masked.get("project") or loop.project)
    init = loop.init or (lambda t: TaskState.from_task(t, task_key=key, project=proj))
    try:
        state = init(masked)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"could not build the initial state: {exc}", field="task") from exc
    if not isinstance(state, TaskState):
        raise ConfigError(
            f"the loop's init returned {type(state).__name__}, expected TaskState", field="init"
        )
    if loop.init is not None:  # (a task's artifacts are checked as given, above)
        check_init_parts(state)
    for art in state.artifacts.values():
        # checked before the run exists: a name "artifact/part" cannot split back into
        # would fail the run's first load and leave it pending for ever
        if not art.name or "/" in art.name or not all(art.parts):
            raise ConfigError(
                "artifact and part names must be non-empty, and an artifact's name cannot "
                f"contain '/': artifact {art.name!r}",
                field="task.artifacts",
            )
    # The task's own cycle budget (budget.max_cycles_key), read as the run reads it: from the
    # task as stored (masked), which is every loaded state's task (a head holds none), not from
    # the task init put in its state. A bad one raised at the first cycle, leaving the run
    # "running" for ever; read from init's state here, it was missed when init reshaped the task.
    cycle_cap(loop.contract, TaskState(task=masked))
    return masked, key, proj, state


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


def _no_misspelt_held_out(task: Mapping[str, Any]) -> None:
    """Refuse a task whose hidden part is spelled other than ``held_out`` (``held-out``, as a
    TOML file would write it, ``heldOut``): only ``held_out`` is kept from the actor and a
    reviewer, so the hidden tests under another spelling were shown to both in full
    (invariant 3). Memory's screen takes those spellings for the marker already."""
    for key in task:
        if key != HELD_OUT_KEY and held_out_name(key):
            raise ConfigError(
                f"{key!r} is not the reserved key: spell it {HELD_OUT_KEY!r}, the one kept from "
                "the actor and from a reviewer (under another spelling it would be shown to both)",
                field=f"task.{key}",
            )


def _no_lost_number(task: Mapping[str, Any]) -> None:
    """Refuse a task holding NaN or an infinity, naming where: the store writes either as
    ``null``, so the run (and every resume of it) read ``None`` where the caller gave a number
    (a task read from a file refuses them as not JSON already). Iterative: a deep task is
    ``redact``'s to refuse, before this."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in task.items()]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(
                f"{where} is {value!r}, which JSON cannot hold (it would be stored as null): "
                "give None for a missing number",
                field="task",
            )
        if type(value) is int and too_long(value):
            # (no JSON text holds it: the store would keep a note in its place)
            raise ConfigError(
                f"{where} is an integer of {value.bit_length()} bits, more digits than JSON "
                "text is written with: give it as a string",
                field="task",
            )
        if isinstance(value, Mapping):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))


def ignored_task(rec: RunRecord, task: Mapping[str, Any]) -> str | None:
    """What to tell a caller whose ``task`` named an existing run (``rec``, which ``create``
    returned, not made) by its key but is not the task that run was made with: the run goes
    on with its own task, and the one given is not read. ``None`` when they are the same (the
    task as stored: masked, as the store reads it back; ``project`` aside, which ``create``
    checks on its own and a task may leave out). An edited task file without keys, whose
    lines are keyed ``<loop>:#<line>``, was answered with the old runs' results, silently.

    The stored task was masked with the secrets of its day (``redact``: the environment's
    secret values among them), the given one with today's: a secret changed since then left
    an unchanged task masked differently (reported changed). A ``***`` on either side is
    taken as whatever the other side holds there (``_same``); what a secret hid is not
    compared (a task that changed only inside a masked value is not reported)."""
    given, kept = round_trip(dict(redact(dict(task)))), dict(rec.task)
    given.pop("project", None)
    kept.pop("project", None)
    if _same(given, kept):
        return None
    return (
        f"task key {rec.task_key!r} is run {rec.run_id[:12]} ({rec.status}), made with another "
        "task: the task given was not read (a run keeps the task it was created with); give "
        "the changed task a new task_key to run it"
    )


def _same(a: Any, b: Any) -> bool:
    """``a == b`` as JSON, a masked value (``***``, whole or inside a string) on either side
    matching what the other side holds there."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if a == b:
        return True
    if REDACTED in (a, b):  # a field masked whole: a secret's, by its name
        return not isinstance(a, dict | list) and not isinstance(b, dict | list)
    return isinstance(a, str) and isinstance(b, str) and (_masks(a, b) or _masks(b, a))


def _masks(masked: str, text: str) -> bool:
    """Whether ``masked`` is ``text`` with some of it masked (each ``***`` standing for some
    text of its own, at least one character). Matched by hand, each piece at its leftmost
    place after the last (a glob's greedy match, which finds one whenever one exists): a
    regular expression of ``.+?`` between the pieces backtracks without bound on a text with
    many masked pieces that does not match — a task is user input."""
    if REDACTED not in masked:
        return False
    first, *middle, last = masked.split(REDACTED)
    if not text.startswith(first):
        return False
    at, end = len(first), len(text) - len(last)
    if end < at or not text.endswith(last):
        return False
    for piece in middle:
        found = text.find(piece, at + 1, end - 1)  # a character before it, and one after
        if found < 0:
            return False
        at = found + len(piece)
    return end - at >= 1


def say_ignored(rec: RunRecord, task: Mapping[str, Any]) -> None:
    """Log (``loopwright.runs``, a warning) what ``ignored_task`` finds: ``Runtime.run`` given a
    changed task under an existing run's key returned that run as it stands, and a caller of
    the Python API was told nothing (newuser46; the CLI says it in its own note, through
    ``create``, which returns whether it made the run)."""
    if why := ignored_task(rec, task):
        masked_logger("loopwright.runs").warning("%s", why)


def number_as_name(value: object) -> str:
    """What a refusal of a number where a name goes adds (a task's ``project``: refused since
    stop 47, when it was stored as its digits): how to give it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    return f'; a name that is a number is written as text: "{value}"'
