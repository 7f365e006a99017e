"""The structured execution truth of a run: artifacts made of parts, findings, the plan.

A run's state is never the chat transcript. It is plain, JSON-serialisable data that the engine
checkpoints after every cycle and rebuilds on resume. Held-out verdicts never enter it: that is
how invariant 3 (held-out isolation) holds by construction — the actor's context is built only
from this state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _json
from ._copy_on_read import CopyOnRead, copied_on_read, detached_artifact, json_copy
from ._digests import Digests
from ._errors import ConfigError
from ._finding import Finding
from ._parts import (
    PART_STATUSES,
    Artifact,
    Part,
    PartStatus,
    Version,
    VersionLoader,
    bind,
    match_any,
    part_ref,
    split_ref,
)
from ._plan import Planning, PlanStep, PlanTrack, StepStatus, task_plan
from ._same_value import kinds_agree, same_value
from ._stored_accounting import billed_of, cap_checks_of, held_out_of, paid_cycles_of, priced_row
from ._usage import Usage

__all__ = [
    "Artifact",
    "Digests",
    "Finding",
    "Part",
    "PartStatus",
    "PlanStep",
    "StepStatus",
    "TaskState",
    "Version",
    "VersionLoader",
    "copied_on_read",
    "match_any",
    "part_ref",
    "same_value",
    "split_ref",
]


@dataclass(slots=True)
class TaskState(Planning):
    """Everything a run knows, checkpointed after every cycle.

    The first group of fields is the task; the second is the work; the third is the engine's
    accounting, kept here so that one atomic checkpoint restores all of it.
    """

    goal: str = ""
    task_key: str = ""
    project: str = ""
    task: dict[str, Any] = field(default_factory=dict)

    artifacts: dict[str, Artifact] = field(default_factory=dict)
    plan: list[PlanStep] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # A note is never changed in place once here: heads and forks share the entries.
    notes: list[dict[str, Any]] = field(default_factory=list)
    next_action: str = ""
    retries: dict[str, int] = field(default_factory=dict)

    cycle: int = 0
    spent: Usage = field(default_factory=Usage)
    # The priced part of ``spent`` that held-out checks spent: counted by the contract, left
    # out of what the actor is shown (a model reviewer's cost can tell its verdict).
    held_out_spent: Usage = field(default_factory=Usage)
    # The run's calls by who (``actor``, ``verifier:NAME``, ``effect:NAME``) in its concluded
    # cycles: whether any was billed. Once a budget is reached inside a cycle, only a call made
    # and never billed starts (``_decide.call_stop``). Replaced, never changed in place.
    billed: dict[str, bool] = field(default_factory=dict)
    # Concluded cycles that spent anything, by budget (cost, tokens, seconds), a check-only
    # cycle that made no attempt left out (``_exec.no_attempt``): the next cycle is projected
    # at their mean (``_decide.budget_stop``). None: a state stored before they were counted
    # (the mean of every cycle is used).
    paid_cycles: list[int] | None = field(default_factory=lambda: [0, 0, 0])
    # Check-only cycles that took the place of the cycle an answered question was for (a
    # person edited the run beside the question): no attempt, not counted against the cycle
    # cap, so the actor still reads the answer (``_decide.counted_cycles``; packet48).
    answer_checks: int = 0
    # Check-only cycles concluded with the cycle cap already reached (a person's edit of a run
    # stopped on its cycles): what a cap stop says ran past the cap (``_packet.edit_checks``).
    # None: a state stored before they were counted.
    cap_checks: int | None = 0
    # The last word of a fenced-out execution whose spend ``spent`` holds (its event id): one
    # after it is charged at resume (``_crash_bound.crashes_and_alive``; crash55b). Words
    # written since fenced56 leave it: their bills are on the run's row (``RunRecord.fenced``).
    fenced_upto: int = 0
    score: float | None = None
    best_score: float | None = None
    best_cycle: int = 0
    best_parts: dict[str, int] = field(default_factory=dict)
    # What the last material improvement reached: the level the next must beat by the
    # no-progress rule's min_delta (``best_score`` follows every rise; this only material ones).
    progress_score: float | None = None
    stall: int = 0
    rejected: list[str] = field(default_factory=Digests)
    approved: list[str] = field(default_factory=list)  # the newest; every one is a request
    passed_checks: list[str] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    # Bookkeeping, not the state's value (never stored, never compared). Invariant 8 for
    # states with many parts: a cycle's work follows the parts it changed, not how many there
    # are. ``fork`` shares parts (copy on write: a part whose ``_owner`` is this token may be
    # changed in place, any other is copied first); ``_dirty`` names the parts changed since
    # the engine last took them (``take_changes``: what the next checkpoint writes);
    # ``_open`` lists every part whose current version may not be accepted (a superset: a
    # part is appended when it becomes open and dropped when the list is next compacted;
    # None: not computed yet). Append-only between compactions, it is shared by forks, like
    # ``rejected``: a part another fork appended is checked against this state's parts.
    _token: object = field(default_factory=object, init=False, repr=False, compare=False)
    _dirty: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _open: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    _open_size: int = field(default=0, init=False, repr=False, compare=False)
    # Likewise the parts whose version count may differ from ``best_parts`` (None: any), and
    # what the last ``mark_best`` changed, from which ``best_parts`` (``best_diff``).
    _best_hint: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    _best_size: int = field(default=0, init=False, repr=False, compare=False)
    _best_diff: tuple[dict[str, int], dict[str, int], list[str]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    # What is derived from the plan (``PlanTrack``): positions by id, the steps changed
    # since the next checkpoint last took them, where the first open step may be, and the
    # open steps that wait on parts, so that a cycle's plan work follows what it changed.
    _track: PlanTrack | None = field(default=None, init=False, repr=False, compare=False)

    # --- reading -------------------------------------------------------------------------
    def part(self, ref: str) -> Part | None:
        """The part ``ref`` (``artifact/part``), or None when the state has no such part (as
        ``dict.get``); ``ConfigError`` for a reference not of that form."""
        # (several times a cycle: ``split_ref``'s test and the look-ups written out, no call)
        artifact, sep, name = ref.partition("/")
        if not sep or not artifact or not name:
            split_ref(ref)  # raises, naming the reference
        arts = self.artifacts
        if artifact in arts:
            parts = arts[artifact].parts
            if name in parts:
                return parts[name]
        return None

    def iter_parts(self) -> Iterator[tuple[str, Part]]:
        for art in self.artifacts.values():
            for p in art.parts.values():
                yield part_ref(art.name, p.name), p

    def values(self) -> dict[str, dict[str, Any]]:
        """Current values of every artifact: ``{artifact: {part: value}}``."""
        out: dict[str, dict[str, Any]] = {}
        for name, art in self.artifacts.items():  # (a loop: the context asks every cycle)
            out[name] = art.values()
        return out

    def accepted_values(self) -> dict[str, dict[str, Any]]:
        """The accepted value of every part that has one: ``{artifact: {part: value}}``."""
        out: dict[str, dict[str, Any]] = {}
        for name, art in self.artifacts.items():  # (a loop: the context asks every cycle)
            acc = art.accepted_values()
            if acc:
                out[name] = acc
        return out

    def best_values(self) -> dict[str, dict[str, Any]]:
        """The best candidate so far: each part at the version it had in the best cycle."""
        out: dict[str, dict[str, Any]] = {}
        for ref, p in self.iter_parts():
            n = self.best_parts.get(ref, p.count)
            artifact, name = split_ref(ref)
            out.setdefault(artifact, {})[name] = p.version(min(n, p.count)).value
        return out

    # --- writing (engine only) -----------------------------------------------------------
    def set_part(self, artifact: str, part: str, value: Any, cycle: int) -> bool:
        """Write a new version of a part; returns False when the value did not change."""
        art = self.artifacts.get(artifact)  # (no ``setdefault``: no Artifact built a call)
        if art is None:
            art = self.artifacts[artifact] = Artifact(artifact)
        p = art.parts.get(part)
        if p is None:
            p = art.parts[part] = Part(part, [Version(1, value, cycle)])
            p._owner = self._token
        # (``same_value`` written out: no call for a write that changes the part)
        elif (held := p._known[p.count].value) is value or (
            held == value and kinds_agree(held, value)
        ):
            return False
        else:
            p = self._own(art, part, p)
            p.add(value, cycle)
        art._value_changed(part, p)
        ref = f"{artifact}/{part}"  # (``part_ref``)
        self._dirty.add(ref)
        # ``ref`` noted in a shared log of parts (``_open``, and ``_best_hint`` below),
        # compacted (a new list for this state: other forks keep theirs) when it has doubled
        # since it last was, which keeps the cost of a log a constant per change. Written out
        # where it is used (here and in ``set_status``): a function of its own cost a call.
        log = self._open
        if log is not None:
            log.append(ref)
            if len(log) > 2 * self._open_size + 64:
                self.open_refs()  # compacts it
        hint = self._best_hint
        if hint is not None:
            hint.append(ref)
            if len(hint) > 2 * self._best_size + 64:
                self._best_hint = sorted(set(hint))  # deduplicated
                self._best_size = len(self._best_hint)
        return True

    def mark_best(self) -> None:
        """This is the best state so far: ``best_parts`` becomes every part's version count,
        looking only at the parts changed since it was last set (a new dict: ``best_parts``
        is replaced, never changed in place, so forks share it)."""
        old, hint = self.best_parts, self._best_hint
        if hint is None:
            new = {ref: p.count for ref, p in self.iter_parts()}
            self._best_diff = None
        else:
            new = dict(old)
            changed = []
            for ref in sorted(set(hint)):
                p = self.part(ref)
                if p is not None and new.get(ref) != p.count:
                    new[ref] = p.count
                    changed.append(ref)
            self._best_diff = (old, new, changed)
        self.best_parts = new
        self._best_hint, self._best_size = [], 0

    def best_diff(self, before: Mapping[str, int]) -> list[str] | None:
        """The parts whose ``best_parts`` entries differ from ``before`` (an earlier
        ``best_parts``), where the last ``mark_best`` made the current one from it (else
        None: not known)."""
        d = self._best_diff
        if d is None or d[0] is not before or d[1] is not self.best_parts:
            return None
        return d[2]

    def set_status(self, ref: str, status: PartStatus) -> None:
        """Mark the current version of part ``ref`` (the engine's verdict on it)."""
        if status not in PART_STATUSES:
            raise ConfigError(f"unknown part status {status!r} (one of {PART_STATUSES})")
        artifact, sep, name = ref.partition("/") if isinstance(ref, str) else ("", "", "")
        if not sep or not artifact or not name:
            split_ref(ref)  # raises, naming the reference (a cycle: its test written out)
        art = self.artifacts.get(artifact)
        p = None if art is None else art.parts.get(name)
        if art is None or p is None:
            raise LookupError(f"no part {ref!r}")
        if p._known[p.count].status == status:  # (``p.status``)
            return
        p = self._own(art, name, p)
        p._known[p.count].status = status
        art._status_changed(name, p)
        self._dirty.add(ref)
        if status != "accepted":
            log = self._open  # (noted as ``set_part`` notes it)
            if log is not None:
                log.append(ref)
                if len(log) > 2 * self._open_size + 64:
                    self.open_refs()  # compacts it

    def _own(self, art: Artifact, name: str, p: Part) -> Part:
        """``p`` (part ``name`` of ``art``), safe to change: copied first if shared."""
        if p._owner is not self._token:
            p = p.fork()
            p._owner = self._token
            art.parts[name] = p
        return p

    def open_refs(self) -> set[str]:
        """The parts whose current version is not accepted."""
        hint = self._open
        if hint is None:
            out = {ref for ref, p in self.iter_parts() if p.status != "accepted"}
        else:
            out = set()
            arts = self.artifacts
            # (``is_open`` written out: no call a part, a loop a cycle; each part once, the log
            # names a part each time it was changed)
            for ref in set(hint):
                artifact, _, name = ref.partition("/")
                if artifact in arts:
                    parts = arts[artifact].parts
                    if name in parts:
                        p = parts[name]
                        if p._known[p.count].status != "accepted":
                            out.add(ref)
        self._open, self._open_size = sorted(out), len(out)
        return out

    def is_open(self, ref: str) -> bool:
        """Whether part ``ref`` exists and its current version is not accepted."""
        artifact, _, name = ref.partition("/")
        arts = self.artifacts
        if artifact not in arts:
            return False
        parts = arts[artifact].parts
        if name not in parts:
            return False
        p = parts[name]
        return p._known[p.count].status != "accepted"  # (``p.status``, without the call)

    def take_changes(self) -> set[str]:
        """The parts changed (``set_part``, ``set_status``) since the last call."""
        out, self._dirty = self._dirty, set()
        return out

    def reindex(self) -> None:
        """Forget what is derived from the parts (recomputed when next needed): after parts
        were changed other than through ``set_part`` / ``set_status``."""
        self._open = self._best_hint = self._best_diff = None
        for art in self.artifacts.values():
            art._values = art._accepted = art._source = None

    def attach(self, loader: VersionLoader) -> None:
        """Let parts that cannot yet read their older versions read them through ``loader``."""
        for ref, p in self.iter_parts():
            if p.loader is None:
                p.loader = bind(loader, ref)

    def trim(self, refs: Iterable[str] | None = None, loader: VersionLoader | None = None) -> None:
        """Hold in memory only the versions the engine needs (current, accepted, best) of
        parts that can read the others from the store (invariant 8: bounded memory): of the
        parts ``refs`` (those a commit changed), else of all. ``loader``: the store's, now
        that it holds these parts' versions: a part made since the state was loaded (an
        actor's edit of a part the task did not have) reads its older versions through it,
        and so is trimmed too (without one it held every version it ever had)."""
        if refs is not None:
            for ref in refs:  # (a loop: a commit trims the parts it changed, every cycle)
                self._trim_part(ref, self.part(ref), loader)
            return
        for ref, p in self.iter_parts():
            self._trim_part(ref, p, loader)

    def _trim_part(self, ref: str, p: Part | None, loader: VersionLoader | None) -> None:
        if p is not None:
            if p.loader is None and loader is not None:
                p.loader = bind(loader, ref)
            b = self.best_parts.get(ref)
            p.trim(() if b is None else (b,))

    # --- copying -------------------------------------------------------------------------
    def fork(self) -> TaskState:
        """An independent copy to build a cycle's candidate on: every container is new; the
        parts are shared until one of the copies changes one (``set_part``, ``set_status``
        copy it first), and part values, earlier versions and the task are immutable data
        the engine never changes in place. Costs the same whatever the number of parts'
        versions, and a C-level dict copy per artifact for the parts."""
        self._token = object()  # from here on this state shares its parts too
        artifacts: dict[str, Artifact] = {}
        for name, a in self.artifacts.items():  # (a loop: no comprehension a cycle)
            artifacts[name] = a._forked()
        out = self._like(
            task=self.task,
            artifacts=artifacts,
            plan=list(self.plan),  # steps are immutable: shared
            findings=list(self.findings),
            notes=list(self.notes),  # entries are never changed in place: shared
            # Replaced, never changed in place (``mark_best``): shared, like the hints below.
            best_parts=self.best_parts,
            # Shared, append-only: a copy per cycle would cost O(cycles) (invariant 8).
            rejected=self.rejected,
            pending=None if self.pending is None else dict(self.pending),
            history=list(self.history),
        )
        out._dirty = set(self._dirty)
        out._open, out._open_size = self._open, self._open_size
        out._best_hint, out._best_size = self._best_hint, self._best_size
        out._best_diff = self._best_diff
        out._track = self._plan().forked(out.plan)
        return out

    def detached(self, loader: VersionLoader | None = None, *, light: bool = False) -> TaskState:
        """A copy that shares nothing its user could change with this one: what a held-out
        verifier judges, so that nothing it does reaches the actor's next context (invariant
        3). Each part is copied the first time the copy's user reads it (its versions, and
        containers in their values by a JSON round trip; strings and numbers are immutable and
        shared), so the copy costs what the verifier reads, not the number of parts; the
        task's entries likewise. Findings, notes and the plan are copied at once. Older
        versions are read through ``loader`` (fresh objects from the store); rejected digests
        are answered (``in``) by this state's, never copied (they grow with the run).

        Not a snapshot: a part not yet read is read from this state when first read, so the
        copy is valid while this state does not change — for the checks of one cycle, which
        run before the candidate is committed or changed. Never keep one past a commit."""
        if light:
            # What visible checks judge, every cycle: the parts and the task copied as read
            # (what a check is most likely to change, and what is committed); findings, notes
            # and history only as lists, their entries shared (documented: not to be changed)
            # — a copy of every entry cost about a fifth of a trivial cycle.
            findings, notes, history = list(self.findings), list(self.notes), list(self.history)
            pending = None if self.pending is None else dict(self.pending)
        else:  # one round trip through orjson (C both ways)
            raw, notes, pending, history = _json.round_trip(
                [[f.to_dict() for f in self.findings], self.notes, self.pending, self.history]
            )
            findings = [Finding.from_dict(f) for f in raw]
        artifacts: dict[str, Artifact] = {}
        for name, a in self.artifacts.items():  # (a loop: no comprehension a cycle)
            artifacts[name] = detached_artifact(a, loader)
        return self._like(
            task=CopyOnRead(self.task, json_copy),
            artifacts=artifacts,
            plan=list(self.plan),  # immutable steps
            findings=findings,
            notes=notes,
            best_parts=dict(self.best_parts),
            rejected=Digests((), self.rejected.__contains__),  # (lookup: by position)
            pending=pending,
            history=history,
        )

    def _like(
        self,
        *,
        task: dict[str, Any],
        artifacts: dict[str, Artifact],
        plan: list[PlanStep],
        findings: list[Finding],
        notes: list[dict[str, Any]],
        best_parts: dict[str, int],
        rejected: list[str],
        pending: dict[str, Any] | None,
        history: list[dict[str, Any]],
    ) -> TaskState:
        """A state with this one's scalar fields (small lists copied) and the containers given,
        its bookkeeping new. Built by plain slot stores: the generated ``__init__`` tests each
        of its dozen defaulted fields against its factory's marker, and this runs twice a cycle
        (the candidate, a check's copy). Every slot is set here (``tests/unit/test_state.py``
        compares it with the generated ``__init__``'s)."""
        out: TaskState = object.__new__(TaskState)
        out.goal = self.goal
        out.task_key = self.task_key
        out.project = self.project
        out.task = task
        out.artifacts = artifacts
        out.plan = plan
        out.findings = findings
        out.notes = notes
        out.next_action = self.next_action
        out.retries = dict(self.retries)
        out.cycle = self.cycle
        out.spent = self.spent
        out.held_out_spent = self.held_out_spent
        out.billed = self.billed
        out.paid_cycles = self.paid_cycles
        out.answer_checks = self.answer_checks
        out.cap_checks = self.cap_checks
        out.fenced_upto = self.fenced_upto
        out.score = self.score
        out.best_score = self.best_score
        out.best_cycle = self.best_cycle
        out.best_parts = best_parts
        out.progress_score = self.progress_score
        out.stall = self.stall
        out.rejected = rejected
        out.approved = list(self.approved)
        out.passed_checks = list(self.passed_checks)
        out.pending = pending
        out.history = history
        out._token = object()
        out._dirty = set()
        out._open = None
        out._open_size = 0
        out._best_hint = None
        out._best_size = 0
        out._best_diff = None
        out._track = None
        return out

    # --- serialisation -------------------------------------------------------------------
    def to_dict(self, *, held: bool = False) -> dict[str, Any]:
        """Everything, every version of every part included (read from the store where not
        held in memory); ``held=True``: only the versions held, with each part's ``count``
        (what ``from_dict`` reads back with a loader, at a cost that does not grow)."""
        return {
            "goal": self.goal,
            "task_key": self.task_key,
            "project": self.project,
            "task": self.task,
            "artifacts": [a.to_dict(held=held) for a in self.artifacts.values()],
            "plan": [s.to_dict() for s in self.plan],
            "findings": [f.to_dict() for f in self.findings],
            "notes": self.notes,
            "next_action": self.next_action,
            "retries": self.retries,
            "cycle": self.cycle,
            "spent": self.spent.to_dict(),
            "held_out_spent": priced_row(self.held_out_spent),
            "billed": self.billed,
            "paid_cycles": self.paid_cycles,
            "answer_checks": self.answer_checks,
            "cap_checks": self.cap_checks,
            "fenced_upto": self.fenced_upto,
            "score": self.score,
            "best_score": self.best_score,
            "best_cycle": self.best_cycle,
            "best_parts": self.best_parts,
            "progress_score": self.progress_score,
            "stall": self.stall,
            "rejected": self.rejected,
            "approved": self.approved,
            "passed_checks": self.passed_checks,
            "pending": self.pending,
            "history": self.history,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], loader: VersionLoader | None = None) -> TaskState:
        """Read ``to_dict()``'s form, or a stored head resolved by the store (whose parts hold
        only some versions and a ``count``; ``loader`` reads the others on demand)."""
        arts = [Artifact.from_dict(a, loader) for a in d.get("artifacts", ())]
        return cls(
            goal=str(d.get("goal", "")),
            task_key=str(d.get("task_key", "")),
            project=str(d.get("project", "")),
            task=dict(d.get("task") or {}),
            artifacts={a.name: a for a in arts},
            plan=[PlanStep.from_dict(s, stored=True) for s in d.get("plan", ())],
            findings=[Finding.from_dict(f) for f in d.get("findings", ())],
            notes=list(d.get("notes", ())),
            next_action=str(d.get("next_action", "")),
            retries=dict(d.get("retries") or {}),
            cycle=int(d.get("cycle", 0)),
            spent=Usage.from_dict(d.get("spent")),
            held_out_spent=held_out_of(d.get("held_out_spent")),
            billed=billed_of(d.get("billed")),
            paid_cycles=paid_cycles_of(d.get("paid_cycles")),
            answer_checks=int(d.get("answer_checks") or 0),
            cap_checks=cap_checks_of(d),
            fenced_upto=int(d.get("fenced_upto") or 0),
            score=d.get("score"),
            best_score=d.get("best_score"),
            best_cycle=int(d.get("best_cycle", 0)),
            best_parts=dict(d.get("best_parts") or {}),
            # a state stored before it existed: its best score was moved by material rises only
            progress_score=d["progress_score"] if "progress_score" in d else d.get("best_score"),
            stall=int(d.get("stall", 0)),
            rejected=Digests(d.get("rejected", ())),
            approved=list(d.get("approved", ())),
            passed_checks=list(d.get("passed_checks", ())),
            pending=d.get("pending"),
            history=list(d.get("history", ())),
        )

    @classmethod
    def from_task(
        cls, task: Mapping[str, Any], *, task_key: str = "", project: str = ""
    ) -> TaskState:
        """The default initial state: ``goal``, ``artifacts`` and ``plan`` read from the task.

        ``artifacts`` is ``{artifact: {part: value}}``; ``plan`` is a list of step mappings.
        """
        goal = task.get("goal")
        if goal is not None and not isinstance(goal, str):  # (a table was stored as its text)
            raise ConfigError(f"must be text, got {type(goal).__name__}", field="task.goal")
        state = cls(
            goal=goal or "",
            task_key=task_key,
            project=project or str(task.get("project", "")),
            task=dict(task),
        )
        arts = task.get("artifacts")
        if arts is None:
            arts = {}
        elif not isinstance(arts, Mapping):  # ([], 0 or "" were read as no artifacts)
            raise ConfigError(
                "must be a table of {artifact: {part: value}}", field="task.artifacts"
            )
        for aname, parts in arts.items():
            if not isinstance(parts, Mapping):
                raise ConfigError(
                    "must be a table of {part: value}", field=f"task.artifacts.{aname}"
                )
            for pname, value in parts.items():
                state.set_part(str(aname), str(pname), value, 0)
        state.plan.extend(task_plan(task.get("plan")))
        return state
