"""The plan: its steps (``PlanStep``), and what ``TaskState`` does with them (``Planning``).

``TaskState`` (``_state``) inherits ``Planning``: reading the next step, adding steps and
setting their status, marking steps done when their parts are accepted, and the bookkeeping
(``PlanTrack``) that keeps a cycle's plan work to what it changed (invariant 8).
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from ._errors import ConfigError
from ._parts import split_ref

if TYPE_CHECKING:
    from ._parts import Part

__all__ = [
    "STEP_STATUSES",
    "PlanStep",
    "Planning",
    "StepStatus",
    "check_new_steps",
    "task_plan",
]

StepStatus = Literal["pending", "in_progress", "done", "blocked"]
STEP_STATUSES: tuple[StepStatus, ...] = get_args(StepStatus)


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of the plan. A step that lists parts is done when all of them are accepted.

    Immutable: the engine replaces a step whose status changes (``TaskState.set_step_status``),
    so a state and its forks share their steps and a cycle copies none of them."""

    id: str
    title: str = ""
    depends_on: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    status: StepStatus = "pending"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "depends_on": list(self.depends_on),
            "parts": list(self.parts),
            "status": self.status,
        }

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], *, where: str | None = None, stored: bool = False
    ) -> PlanStep:
        """A step from its mapping, checked: ``depends_on`` a list of step ids and ``parts``
        one of ``artifact/part`` references (a string there was read character by
        character: ``"invoice/qty"`` became the parts ``i``, ``n``, ...). ``where``: the
        step's place, for an error (``task.plan[0]``); by default ``plan.<id>``.
        ``stored``: a step as a state or a proposal recorded it, read as written (an earlier
        release let an actor's step depend on ``1``: refused, its run could no longer be
        read, shown or resumed; review47b)."""
        where = where or f"plan.{d.get('id')}"
        status = d.get("status", "pending")
        if status not in STEP_STATUSES:
            raise ConfigError(f"unknown step status {status!r}", field=where)
        if stored:
            return cls(
                id=str(d["id"]),
                title=str(d.get("title", "")),
                depends_on=tuple(d.get("depends_on", ())),
                parts=tuple(d.get("parts", ())),
                status=cast(StepStatus, status),
            )
        step_id = d.get("id")
        if isinstance(step_id, bool) or not isinstance(step_id, str | int) or step_id == "":
            raise ConfigError(
                f"each step needs an 'id' (text), got {reprlib.repr(step_id)}", field=where
            )
        lists: dict[str, tuple[str, ...]] = {}
        for name, what in (("depends_on", "step ids"), ("parts", "'artifact/part' references")):
            v = d.get(name, ())
            if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
                raise ConfigError(
                    f"must be a list of {what}, got {reprlib.repr(v)}", field=f"{where}.{name}"
                )
            lists[name] = tuple(v)
        for ref in lists["parts"]:
            try:
                split_ref(ref)
            except ConfigError as e:
                raise ConfigError(e.message, field=f"{where}.parts") from None
        return cls(
            id=str(step_id),
            title=str(d.get("title", "")),
            depends_on=lists["depends_on"],
            parts=lists["parts"],
            status=cast(StepStatus, status),
        )


def check_new_steps(steps: Any) -> None:
    """An actor's new plan steps (``Proposal.new_steps``), checked as a task's are
    (``PlanStep.from_dict``): a step the state cannot hold (an empty id, a dependency that
    is not a step id, a part that is no ``artifact/part``, an unknown status) is a
    ``ConfigError`` naming it. The cycle asks as it takes the actor's proposal, and escalates
    on it as on any value it cannot store: checked only as the candidate was built, it
    escaped the cycle as a traceback and left the run ``running`` (review47b). (A step read
    back from the store is not checked again: ``from_dict(stored=True)``.)"""
    for i, s in enumerate(steps):
        raw = {
            "id": s.id,
            "title": s.title,
            "depends_on": s.depends_on,  # as given: a string is no list of ids
            "parts": s.parts,
            "status": s.status,
        }
        PlanStep.from_dict(raw, where=f"Proposal.new_steps[{i}]")


def task_plan(plan: Any) -> list[PlanStep]:
    """A task's ``plan``, checked: a list of steps, their ids unique, each dependency a step of
    the plan (one on a step that is not there was never met: the step was never next)."""
    if plan is None:
        return []
    if not isinstance(plan, list | tuple):
        raise ConfigError(
            f"must be a list of steps ({{id, title, depends_on, parts}}), got {reprlib.repr(plan)}",
            field="task.plan",
        )
    steps: list[PlanStep] = []
    at: dict[str, int] = {}
    for i, step in enumerate(plan):
        if not isinstance(step, Mapping) or "id" not in step:
            raise ConfigError("each step needs an 'id'", field=f"task.plan[{i}]")
        steps.append(PlanStep.from_dict(step, where=f"task.plan[{i}]"))
        j = at.setdefault(steps[-1].id, i)
        if j != i:
            raise ConfigError(
                f"step id {steps[-1].id!r} is also task.plan[{j}]'s", field=f"task.plan[{i}].id"
            )
    for i, s in enumerate(steps):
        for dep in s.depends_on:
            if dep not in at:
                raise ConfigError(
                    f"no step {dep!r} in the plan (steps: {', '.join(at)})",
                    field=f"task.plan[{i}].depends_on",
                )
    return steps


@dataclass(slots=True)
class PlanTrack:
    """What ``TaskState`` derives from its plan, for the list ``seen`` (a state whose plan
    list is replaced starts a new one). Steps are only appended or replaced, never removed,
    so positions stay valid."""

    seen: list[PlanStep]
    n: int = 0  # the steps indexed (``seen[:n]``)
    ids: dict[str, int] = field(default_factory=dict)  # step id -> position
    # Positions changed since ``take_plan_changes`` last ran (None: unknown, all), and how
    # many steps there were then (those appended since are changes too).
    dirty: set[int] | None = None
    taken: int = 0
    lo: int = 0  # no step before this position is open (``next_step`` starts here)
    watch: list[int] | None = None  # open steps that list parts (``refresh_plan``; None: all)

    def forked(self, plan: list[PlanStep]) -> PlanTrack:
        """This bookkeeping for ``plan``, a copy of ``seen`` (C-level copies of the index)."""
        return PlanTrack(
            plan,
            self.n,
            dict(self.ids),
            None if self.dirty is None else set(self.dirty),
            self.taken,
            self.lo,
            None if self.watch is None else list(self.watch),
        )


class Planning:
    """``TaskState``'s plan methods (mixed into it: its fields ``plan`` and ``_track`` are
    ``TaskState``'s own)."""

    if TYPE_CHECKING:
        # (for the type checker: the slots of ``TaskState``'s that these methods use)
        __slots__ = ("_track", "plan")
        plan: list[PlanStep]
        _track: PlanTrack | None

        def part(self, ref: str) -> Part | None: ...

    else:
        __slots__ = ()

    @property
    def completed_steps(self) -> list[str]:
        return [s.id for s in self.plan if s.status == "done"]

    def next_step(self) -> PlanStep | None:
        """The first step not yet done whose dependencies are all done."""
        if not self.plan:
            return None  # most loops keep no plan: no bookkeeping to look at (twice a cycle)
        t = self._plan()
        plan, ids = self.plan, t.ids
        while t.lo < len(plan) and plan[t.lo].status == "done":
            t.lo += 1  # the steps before are all done: no need to look at them again
        for i in range(t.lo, len(plan)):
            s = plan[i]
            if s.status in ("pending", "in_progress") and all(
                (j := ids.get(d)) is not None and plan[j].status == "done" for d in s.depends_on
            ):
                return s
        return None

    def step(self, step_id: str) -> PlanStep | None:
        """The plan's step ``step_id``."""
        i = self._plan().ids.get(step_id)
        return None if i is None else self.plan[i]

    def refresh_plan(self) -> None:
        """Mark steps whose parts are all accepted as done (looking only at open steps that
        list parts)."""
        if not self.plan:
            return  # nothing to mark (the bookkeeping is made good when next asked)
        t = self._plan()
        if t.watch is None:
            t.watch = [i for i, s in enumerate(self.plan) if s.status != "done" and s.parts]
        keep = []
        for i in t.watch:
            s = self.plan[i]
            if s.status == "done":
                continue
            parts = [self.part(r) for r in s.parts]
            if all(p is not None and p.status == "accepted" for p in parts):
                self._replace_step(i, "done")
            else:
                keep.append(i)
        t.watch = keep

    def add_step(self, step: PlanStep) -> bool:
        """Append ``step`` to the plan; False (nothing added) when a step has its id."""
        t = self._plan()
        if step.id in t.ids:
            return False
        self.plan.append(step)
        self._plan()  # indexes it
        return True

    def set_step_status(self, step_id: str, status: StepStatus) -> bool:
        """Set step ``step_id``'s status (a new step replaces it); False when there is no
        such step. ``ConfigError`` for an unknown status."""
        if status not in STEP_STATUSES:
            raise ConfigError(f"unknown step status {status!r}", field=f"plan.{step_id}")
        i = self._plan().ids.get(step_id)
        if i is None:
            return False
        if self.plan[i].status != status:
            self._replace_step(i, status)
        return True

    def take_plan_changes(self) -> list[int] | None:
        """The positions of the steps changed or added since the last call, in order (None:
        not known — the plan was replaced or built anew; every step may have changed)."""
        t = self._plan()
        out = None if t.dirty is None else sorted(t.dirty.union(range(t.taken, len(self.plan))))
        t.dirty, t.taken = set(), len(self.plan)
        return out

    def _replace_step(self, i: int, status: StepStatus) -> None:
        t = self._plan()
        old = self.plan[i]
        self.plan[i] = dataclasses.replace(old, status=status)
        if t.dirty is not None:
            t.dirty.add(i)
        if status != "done":
            t.lo = min(t.lo, i)
            if t.watch is not None and old.parts and i not in t.watch:
                t.watch = sorted([*t.watch, i])

    def _plan(self) -> PlanTrack:
        """The plan's bookkeeping, made good for ``self.plan`` as it is: built anew when the
        list was replaced, extended over steps appended to it."""
        t = self._track
        if t is None or t.seen is not self.plan:
            t = self._track = PlanTrack(self.plan)
        plan = self.plan
        if t.n != len(plan):
            if t.n > len(plan):  # shortened in place: start again
                t = self._track = PlanTrack(plan)
            for i in range(t.n, len(plan)):
                s = plan[i]
                t.ids.setdefault(s.id, i)
                if t.watch is not None and s.status != "done" and s.parts:
                    t.watch.append(i)
            t.n = len(plan)
        return t
