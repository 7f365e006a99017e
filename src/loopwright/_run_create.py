"""Creating a run (``Runtime.create``): what is checked of what the caller gives, the new
run's first head and versions, and the existing run a task key already names."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from . import _state_codec as codec
from ._authority import note_policy
from ._errors import ConfigError, LoopwrightError
from ._host import RuntimeHost
from ._json import check_given_text
from ._keys import check_name, check_unpadded
from ._loop import Loop, check_declared_names, check_loop, other_loop
from ._state import TaskState
from ._task_parts import starting_state
from .store import RunRecord

__all__ = ["Creating"]


class Creating(RuntimeHost):
    """``Runtime.create`` and its steps (mixed into ``Runtime``)."""

    def create(
        self,
        loop: Loop,
        task: Mapping[str, Any] | None = None,
        *,
        task_key: str | None = None,
        project: str | None = None,
        by: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Create the run for ``task_key`` (or return the existing one) without executing it.
        ``by``: the person starting it (the requester: with separation of duties they cannot
        approve its requests)."""
        started = self._checked_start(loop, task, task_key, project, by)
        try:
            check_declared_names(loop)
            if started[2] != loop.project:  # (given to create, or the task's "project")
                field = "project" if project else "task.project"
                check_unpadded(started[2], "project name", field)
        except ConfigError:
            # a name refused since an earlier release started this key's run under it: that
            # run goes on (refused, it could not be continued at all); a new one is refused
            if not self._continues(loop, started[1]):
                raise
        return self._create(loop, self._new_run(loop, started, project, by))

    def _continues(self, loop: Loop, key: str) -> bool:
        """Whether ``key`` is already the task key of a run of ``loop``."""
        try:
            rec = self.store.get_run(key)
        except LoopwrightError:  # (none; an ambiguous prefix; the store failing: the name's
            return False  # error is said, not this one)
        return rec.task_key == key and not other_loop(loop, rec.loop_name, rec.spec_ref)

    def _checked_start(
        self,
        loop: Loop,
        task: Mapping[str, Any] | None,
        task_key: str | None,
        project: str | None,
        by: str | None,
    ) -> tuple[dict[str, Any], str, str, TaskState]:
        """What ``create`` checks of what it is given (``starting_state``'s four), before any of
        it is encoded for the store."""
        check_loop(loop)
        check_given_text(by, field="by")
        check_given_text(project, field="project")  # as Loop.project: text (or the default)
        if project:
            check_name(project, "project name", "project")
        return starting_state(loop, task, task_key, project)

    def _new_run(
        self,
        loop: Loop,
        started: tuple[dict[str, Any], str, str, TaskState],
        project: str | None,
        by: str | None,
    ) -> dict[str, Any]:
        """The new run's fields, from what ``_checked_start`` made of ``create``'s arguments:
        its first head and versions encoded here, nothing written."""
        stored, key, proj, state = started
        state.task_key = state.task_key or key
        state.project = state.project or proj
        state.refresh_plan()
        return {
            "run_id": uuid.uuid4().hex[:16],
            "task_key": key,
            "loop_name": loop.name,
            "project": proj,
            "spec_ref": loop.spec_ref,
            "loop_version": loop.version,
            "contract": loop.contract.to_dict(),
            "task": stored,
            "initial_state": codec.head(state),
            "initial_versions": codec.unwritten_versions(state, {})[0],
            "created_by": by.strip() if by and by.strip() else None,
            # a project given (not a loop's default): an existing run's must be the same
            "named": project is not None or bool(stored.get("project")),
            "by": by,
        }

    def _create(self, loop: Loop, new: dict[str, Any]) -> tuple[RunRecord, bool]:
        """Write the run ``_new_run`` made (or return the existing one of its key)."""
        named, by = new.pop("named"), new.pop("by")
        made = self.store.create_run(**new)
        rec, created = made
        key, proj = new["task_key"], new["project"]
        if not created and (
            other_loop(loop, rec.loop_name, rec.spec_ref) or (named and rec.project != proj)
        ):
            # The key names one task store-wide: another loop's or project's run is not this
            # one's to continue (its actor, contract and memory scope are not these).
            raise ConfigError(
                f"task key {key!r} is run {rec.run_id} of loop {rec.loop_name!r} in project "
                f"{rec.project!r}, not of loop {loop.name!r} in project {proj!r}: give this "
                "task another task_key, or continue that run with its own loop "
                "(`loopwright resume`)",
                field="task_key",
            )
        if created:
            note_policy(self.store, loop, by=by)
        return made
